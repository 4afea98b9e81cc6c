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
