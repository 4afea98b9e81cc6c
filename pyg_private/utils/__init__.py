"""Utilities shared by the layers and transforms."""
from .graph_validation import check_edge_index, simple_undirected

__all__ = ["check_edge_index", "simple_undirected"]
