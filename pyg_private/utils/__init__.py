"""Utilities shared by the layers and transforms."""
from .graph_validation import adjacency_to_edge_index, check_edge_index, simple_undirected
from .adjacency import adjacency_csr, inverse_degree
from .lazy_ppr import lazy_ppr, seed_matrix
from .push_flow import push_flow_cap_ppr
from .seed_restored_ppr import lazy_ppr_restoring_seed_edges
from .projections import project_l1_ball, project_simplex
from .appr import appr_propagate

__all__ = [
    "check_edge_index",
    "simple_undirected",
    "adjacency_to_edge_index",
    "project_simplex",
    "project_l1_ball",
    "lazy_ppr",
    "adjacency_csr",
    "inverse_degree",
    "seed_matrix",
    "push_flow_cap_ppr",
    "lazy_ppr_restoring_seed_edges",
    "appr_propagate",
]

# link prediction under edge-level DP: the keyed-hash pair split and graph-blind pair sampling
from .pair_sampling import LinkSplitRule, pair_hash, sample_pairs  # noqa: E402

__all__ += ["LinkSplitRule", "pair_hash", "sample_pairs"]

# DP-SGD's Poisson sampling (exact integer trials) and the public plan of a run
from .poisson_sampling import DPSGDPlan, dp_sgd_plan, poisson_indices, poisson_mask, poisson_threshold  # noqa: E402

__all__ += ["DPSGDPlan", "dp_sgd_plan", "poisson_indices", "poisson_mask", "poisson_threshold"]

# node level: the in-degree cap of a sum aggregation and the sensitivity it implies
from .degree_cap import cap_in_degree, capped_sum_aggregation_node_sensitivity, in_degree_cap_mask  # noqa: E402

__all__ += ["cap_in_degree", "in_degree_cap_mask", "capped_sum_aggregation_node_sensitivity"]
