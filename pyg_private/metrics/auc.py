"""ROC-AUC of a score against binary labels, from SciPy's Mann-Whitney U statistic."""
from __future__ import annotations

from torch import Tensor

__all__ = ["roc_auc"]


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    r""":math:`P(s_+ > s_-) + \tfrac12 P(s_+ = s_-)` (ties averaged), which is
    :math:`U_1 / (n_+ n_-)` for the Mann-Whitney statistic of the positives' scores."""
    s = scores.detach().double().view(-1).cpu().numpy()
    lab = labels.detach().view(-1).bool().cpu().numpy()
    npos, nneg = int(lab.sum()), int((~lab).sum())
    if npos == 0 or nneg == 0:
        raise ValueError("ROC-AUC needs both positive and negative labels")
    from scipy.stats import mannwhitneyu  # SciPy's statistics take about a second to import: on first use only

    return float(mannwhitneyu(s[lab], s[~lab], alternative="two-sided", method="asymptotic").statistic
                 / (npos * nneg))
