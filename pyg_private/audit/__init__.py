"""Privacy auditing: empirical lower bounds on epsilon from distinguishing tests.

See :mod:`pyg_private.audit.empirical_epsilon` for the statistics (Clopper-Pearson
bounds on the attack's TPR/FPR turned into an epsilon the mechanism cannot beat).
"""
from .empirical_epsilon import (
    EpsilonLowerBound,
    best_threshold_lower_bound,
    clopper_pearson,
    empirical_epsilon_lower_bound,
)

__all__ = ["EpsilonLowerBound", "clopper_pearson", "empirical_epsilon_lower_bound", "best_threshold_lower_bound"]

from .linkteller import (
    LinkTellerResult,
    influence_matrix,
    linkteller_attack,
    linkteller_scores,
    sample_attack_nodes,
)

__all__ += ["LinkTellerResult", "influence_matrix", "linkteller_scores", "sample_attack_nodes", "linkteller_attack"]

from .membership import (  # node-level membership inference (train on members' subgraph, query full graph)
    SCORE_KINDS,
    MembershipResult,
    member_split,
    member_subgraph,
    membership_inference,
    membership_scores,
    shadow_attack,
    threshold_attack,
)

__all__ += ["MembershipResult", "SCORE_KINDS", "member_split", "member_subgraph", "membership_scores",
            "threshold_attack", "shadow_attack", "membership_inference"]
from .one_run import OneRunAudit, one_run_audit, one_run_epsilon_lower_bound, one_run_p_value
from .canary_edges import (
    CanaryAudit,
    canary_edge_audit,
    difference_score,
    insert_edges,
    linear_canary_score,
    sample_canary_pairs,
)

__all__ += ["OneRunAudit", "one_run_p_value", "one_run_epsilon_lower_bound", "one_run_audit"]
__all__ += ["CanaryAudit", "sample_canary_pairs", "insert_edges", "canary_edge_audit", "difference_score",
            "linear_canary_score"]
