"""Differentially private message-passing layers and the private PPR baselines."""
from .contractive_graph_layer import ContractiveGraphLayer
from .dp_push_flow_cap import DPPushFlowCap
from .edge_flipping_ppr import EdgeFlippingPPR
from .gap_aggregation import GAPAggregation
from .noisy_ppr_diffusion import NoisyPPRDiffusion
from .perturbed_appr_conv import GCONFit, PerturbedAPPRConv

__all__ = ["NoisyPPRDiffusion", "DPPushFlowCap", "EdgeFlippingPPR", "ContractiveGraphLayer", "GAPAggregation", "PerturbedAPPRConv", "GCONFit"]
