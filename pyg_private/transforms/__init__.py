"""Graph transforms (``BaseTransform``) of pyg_private."""
from .l2_row_normalize import L2RowNormalize, l2_row_normalize
from .edge_randomized_response import EdgeRandomizedResponse

__all__ = [
    # pre-conditions (no privacy cost)
    "L2RowNormalize",
    "l2_row_normalize",
    # noisy transforms
    "EdgeRandomizedResponse",
]
