"""Differentially private message-passing layers, the private PPR baselines, and the wrapper that
turns an existing PyG model into a private one (:class:`PrecomputedPropagation`)."""
from .contractive_graph_layer import ContractiveGraphLayer
from .dp_push_flow_cap import DPPushFlowCap
from .edge_flipping_ppr import EdgeFlippingPPR
from .gap_aggregation import GAPAggregation
from .noisy_ppr_diffusion import NoisyPPRDiffusion
from .perturbed_appr_conv import GCONFit, PerturbedAPPRConv
from .precomputed_propagation import PrecomputedPropagation, precompute_propagation
from .progap_aggregation import ProGAPAggregation, sum_aggregation_node_sensitivity

__all__ = ["NoisyPPRDiffusion", "DPPushFlowCap", "EdgeFlippingPPR", "ContractiveGraphLayer", "GAPAggregation",
           "PerturbedAPPRConv", "GCONFit", "PrecomputedPropagation", "precompute_propagation", "ProGAPAggregation",
           "sum_aggregation_node_sensitivity"]

# heterogeneous graphs: which relation releases compose in parallel
from .gap_aggregation import bipartite_sensitivity  # noqa: E402
from .hetero import compose_relations, relation_of, relation_part, relation_parts  # noqa: E402

__all__ += ["bipartite_sensitivity", "compose_relations", "relation_of", "relation_part", "relation_parts"]
