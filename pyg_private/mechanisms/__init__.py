"""Output-perturbation mechanisms with accounting (Laplace, Gaussian) and samplers."""
from .edge_flipping import flip_edges
from .gaussian import GaussianMechanism
from .laplace import LaplaceMechanism
from .objective_noise import sample_objective_noise

__all__ = ["LaplaceMechanism", "GaussianMechanism", "flip_edges", "sample_objective_noise"]
