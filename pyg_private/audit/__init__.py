"""Privacy auditing: attacks, and empirical lower bounds on epsilon from their guesses.

* :mod:`~pyg_private.audit.empirical_epsilon`: Clopper-Pearson bounds on an attack's
  TPR/FPR over many independent runs in two fixed worlds, turned into an epsilon the
  mechanism cannot beat;
* :mod:`~pyg_private.audit.one_run`: the one-run bound (Steinke, Nasr and Jagielski
  2023) for canaries included by independent fair coins;
* :mod:`~pyg_private.audit.canary_edges`: canary-edge audits of edge-level DP releases;
* :mod:`~pyg_private.audit.link_prediction`: the one-run canary audit of the private link
  predictor, canaries inside one part of the split, scored by the released predictor;
* :mod:`~pyg_private.audit.linkteller`: the LinkTeller influence attack on an inference API;
* :mod:`~pyg_private.audit.membership`: node-level membership inference (train on the
  members' subgraph, query the full graph);
* :mod:`~pyg_private.audit.floating_point`: the floating-point distinguisher (Mironov 2012):
  how often a release is impossible under a neighbouring input.
"""
from .canary_edges import (
    CanaryAudit,
    canary_edge_audit,
    difference_score,
    insert_edges,
    linear_canary_score,
    sample_canary_pairs,
)
from .empirical_epsilon import (
    EpsilonLowerBound,
    best_threshold_lower_bound,
    clopper_pearson,
    empirical_epsilon_lower_bound,
)
from .floating_point import (
    FloatingPointAuditResult,
    additive_float_possible,
    additive_noise_audit,
    floating_point_audit,
    grid_possible,
    uniform_affine_possible,
)
from .link_prediction import LinkPredictionAudit, link_prediction_canary_audit, sample_part_canaries
from .linkteller import LinkTellerResult, influence_matrix, linkteller_attack, linkteller_scores, sample_attack_nodes
from .membership import (
    SCORE_KINDS,
    MembershipResult,
    member_split,
    member_subgraph,
    membership_inference,
    membership_scores,
    shadow_attack,
    threshold_attack,
)
from .one_run import OneRunAudit, one_run_audit, one_run_epsilon_lower_bound, one_run_p_value

__all__ = [
    "EpsilonLowerBound", "clopper_pearson", "empirical_epsilon_lower_bound", "best_threshold_lower_bound",
    "OneRunAudit", "one_run_p_value", "one_run_epsilon_lower_bound", "one_run_audit",
    "CanaryAudit", "sample_canary_pairs", "insert_edges", "canary_edge_audit", "difference_score",
    "linear_canary_score",
    "sample_part_canaries", "link_prediction_canary_audit", "LinkPredictionAudit",
    "LinkTellerResult", "influence_matrix", "linkteller_scores", "sample_attack_nodes", "linkteller_attack",
    "MembershipResult", "SCORE_KINDS", "member_split", "member_subgraph", "membership_scores", "threshold_attack",
    "shadow_attack", "membership_inference",
    "FloatingPointAuditResult", "additive_float_possible", "grid_possible", "uniform_affine_possible",
    "floating_point_audit", "additive_noise_audit",
]
