"""Recipes that put the private layers into complete training pipelines."""
from .caribou import (CaribouConfig, CaribouModel, CaribouResult, config_grid, node_level_noise_multiplier,
                      run_caribou, search_caribou)
from .gcon import GCONConfig, GCONResult, gcon_grid, run_gcn, run_gcon, search_gcon
from .node_training import accuracy, fit_dp_sgd, fit_full_batch, predict, release_opacus_state

__all__ = [
    "CaribouConfig",
    "CaribouResult",
    "CaribouModel",
    "config_grid",
    "run_caribou",
    "search_caribou",
    "node_level_noise_multiplier",
    "GCONConfig",
    "GCONResult",
    "gcon_grid",
    "run_gcon",
    "search_gcon",
    "run_gcn",
    "fit_full_batch",
    "fit_dp_sgd",
    "release_opacus_state",
    "predict",
    "accuracy",
]
from .privge import (PrivGEConfig, PrivGEResult, privge_grid, run_privge_link, run_privge_node,  # noqa: E402
                     search_privge)

__all__ += ["PrivGEConfig", "PrivGEResult", "privge_grid", "run_privge_node", "run_privge_link", "search_privge"]
from .progap import (ProGAPConfig, ProGAPModel, ProGAPResult, progap_noise_multiplier, run_progap,  # noqa: E402
                     search_progap)

__all__ += ["ProGAPConfig", "ProGAPResult", "ProGAPModel", "progap_noise_multiplier", "run_progap", "search_progap"]
from .checkpoint import (AccountantCheckpoint, accountant_checkpoint, accountants_of,  # noqa: E402
                         restore_accountants)

__all__ += ["AccountantCheckpoint", "accountant_checkpoint", "accountants_of", "restore_accountants"]
from .recipe_inputs import UnlabelledNodesWarning, clean_graph  # noqa: E402
from .selection import PrivateSelection, TrialCostExceeded, select_on_validation, select_privately  # noqa: E402

__all__ += ["clean_graph", "UnlabelledNodesWarning", "select_on_validation", "select_privately", "PrivateSelection",
            "TrialCostExceeded"]
from .edge_free_mlp import fit_edge_free_mlp  # noqa: E402
from .stacking import out_of_fold_log_probs  # noqa: E402

__all__ += ["fit_edge_free_mlp", "out_of_fold_log_probs"]
from .link_prediction import (LinkPredictionConfig, LinkPredictionModel, LinkPredictionResult,  # noqa: E402
                              run_link_prediction)

__all__ += ["LinkPredictionConfig", "LinkPredictionResult", "LinkPredictionModel", "run_link_prediction"]
# graph-level privacy: per-graph DP-SGD (unit "graph") and the edge-level release over a union of graphs
from .per_graph_gradients import check_graph_model, clipped_gradient_sum, per_graph_gradients  # noqa: E402
from .graph_classifier import GraphClassifier  # noqa: E402
from .graph_dp_sgd import (GraphDPSGD, GraphDPSGDConfig, GraphDPSGDResult,  # noqa: E402
                           graph_dp_sgd_noise_multiplier)
from .graph_classification import (GraphClassificationConfig, GraphClassificationResult,  # noqa: E402
                                   graph_accuracy, run_graph_classification)
from .graph_edge_release import (EdgeLevelGraphConfig, EdgeLevelGraphModel, EdgeLevelGraphResult,  # noqa: E402
                                 run_edge_level_graph_classification)

__all__ += ["GraphDPSGD", "GraphDPSGDConfig", "GraphDPSGDResult", "graph_dp_sgd_noise_multiplier",
            "check_graph_model", "per_graph_gradients", "clipped_gradient_sum", "GraphClassifier",
            "GraphClassificationConfig", "GraphClassificationResult", "run_graph_classification", "graph_accuracy",
            "EdgeLevelGraphConfig", "EdgeLevelGraphResult", "EdgeLevelGraphModel",
            "run_edge_level_graph_classification"]
from .lpgnet import (LPGNetConfig, LPGNetModel, LPGNetResult, lpgnet_noise_scale, run_lpgnet,  # noqa: E402
                     search_lpgnet)

__all__ += ["LPGNetConfig", "LPGNetResult", "LPGNetModel", "lpgnet_noise_scale", "run_lpgnet", "search_lpgnet"]
