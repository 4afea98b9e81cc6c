"""Utilities shared by the layers and transforms."""
from .graph_validation import adjacency_to_edge_index, check_edge_index, simple_undirected
from .lazy_ppr import lazy_ppr, lazy_walk_operator, seed_matrix
from .projections import project_l1_ball, project_simplex

__all__ = [
    "check_edge_index",
    "simple_undirected",
    "adjacency_to_edge_index",
    "project_simplex",
    "project_l1_ball",
    "lazy_ppr",
    "lazy_walk_operator",
    "seed_matrix",
]
