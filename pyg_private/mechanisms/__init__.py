"""Output-perturbation mechanisms with accounting (Laplace, Gaussian) and samplers."""
from .edge_flipping import flip_bipartite_edges, flip_edges
from .gaussian import GaussianMechanism
from .laplace import LaplaceMechanism
from .objective_noise import sample_objective_noise

from ..sampling.words import RandomSource, get_secure_mode, secure_mode, set_secure_mode
from .sampler_options import FloatSamplerWarning

__all__ = ["LaplaceMechanism", "GaussianMechanism", "flip_edges", "flip_bipartite_edges", "sample_objective_noise",
           "RandomSource", "set_secure_mode", "get_secure_mode", "secure_mode", "FloatSamplerWarning"]

# local-DP feature randomizers (PrivGE, issue 6): pure samplers and moments
from . import ldp_baselines, square_wave  # noqa: E402
from .ldp_baselines import (  # noqa: E402
    sample_laplace_ldp,
    sample_multibit,
    sample_piecewise,
)
from .square_wave import (  # noqa: E402
    hds_moments,
    hds_perturb,
    sample_k_subsets,
    sample_square_wave,
    square_wave_params,
)

__all__ += [
    "square_wave",
    "ldp_baselines",
    "square_wave_params",
    "sample_square_wave",
    "sample_k_subsets",
    "hds_moments",
    "hds_perturb",
    "sample_laplace_ldp",
    "sample_piecewise",
    "sample_multibit",
]
