"""Graph transforms (``BaseTransform``) of pyg_private."""
from .l2_row_normalize import L2RowNormalize, l2_row_normalize
from .edge_randomized_response import EdgeRandomizedResponse

from .bound_in_degree import BoundInDegree

__all__ = [
    # pre-conditions (no privacy cost)
    "L2RowNormalize",
    "l2_row_normalize",
    "BoundInDegree",
    # noisy transforms
    "EdgeRandomizedResponse",
]

# local-DP feature transforms (PrivGE, issue 6)
from .hds_feature_perturb import HDSFeaturePerturb  # noqa: E402
from .ldp_feature_baselines import (  # noqa: E402
    LaplaceFeaturePerturb,
    MultiBitFeaturePerturb,
    PiecewiseFeaturePerturb,
)

__all__ += [
    "HDSFeaturePerturb",
    "LaplaceFeaturePerturb",
    "PiecewiseFeaturePerturb",
    "MultiBitFeaturePerturb",
]

# link prediction under edge-level DP: the keyed-hash split of all node pairs
from .private_link_split import PrivateLinkSplit  # noqa: E402

__all__ += ["PrivateLinkSplit"]
