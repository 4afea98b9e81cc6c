r"""Privacy auditing with one training run (Steinke, Nasr and Jagielski, 2023).

The classical audit (:mod:`pyg_private.audit.empirical_epsilon`) needs many runs of the
mechanism in two fixed neighbouring worlds. The one-run audit of Steinke, Nasr and
Jagielski (2023, "Privacy Auditing with One (1) Training Run", arXiv 2305.08846)
instead inserts :math:`m` *canaries* into a single dataset, each included independently
with probability :math:`1/2`, runs the mechanism **once**, and lets an auditor guess,
from the output, which canaries were included.

Setting
-------
Let :math:`S \in \{-1, +1\}^m` be the i.i.d. uniform inclusion signs. After seeing the
output the auditor makes :math:`r` guesses :math:`T_i \in \{-1, +1\}` (and abstains on
the other :math:`m - r` canaries); :math:`V` is the number of correct guesses. The
guesses may be any post-processing of the output (and of the canary identities, which
are public to the auditor), but not of :math:`S` itself.

Theorem (Steinke et al. 2023, main result with its approximate-DP term)
------------------------------------------------------------------------
If the mechanism is :math:`(\epsilon, \delta)`-DP with respect to each canary (changing
one sign :math:`S_i`, all others fixed), then with :math:`q = e^\epsilon / (1 + e^\epsilon)`
and for every :math:`v`,

.. math::
    P[V \ge v] \;\le\; P[\mathrm{Binom}(r, q) \ge v]
      \;+\; 2 m \delta \max_{i = 1, \dots, v}
      \frac{P[v - i \le \mathrm{Binom}(r, q) < v]}{i}.

At :math:`\delta = 0` the guesses are stochastically dominated by :math:`r` coin flips
with success probability :math:`q`: an :math:`\epsilon`-DP mechanism cannot let the
auditor be right more often than a biased coin.

Turning it into a lower bound
-----------------------------
The right-hand side :math:`p(\epsilon)` is a p-value for the null hypothesis "the
mechanism is :math:`(\epsilon, \delta)`-DP". Since :math:`\epsilon`-DP implies
:math:`\epsilon'`-DP for every :math:`\epsilon' \ge \epsilon`, the monotone envelope
:math:`p^*(\epsilon) = \inf_{\epsilon' \ge \epsilon} p(\epsilon')` is also a valid p-value
and is non-decreasing; the set of rejected :math:`\epsilon` (those with
:math:`p^*(\epsilon) \le \alpha = 1 - c`) is an interval :math:`[0, \hat\epsilon]`, and
:math:`\hat\epsilon = \sup\{\epsilon : p(\epsilon) \le \alpha\}` is a lower bound on the
true epsilon with probability at least :math:`c`. At :math:`\delta = 0`, :math:`p` itself is
increasing in :math:`\epsilon` (:math:`q` grows and the binomial tail grows with
:math:`q`), and :math:`\hat\epsilon = \operatorname{logit}(q_{lo})` where :math:`q_{lo}` is
the one-sided Clopper-Pearson lower bound on :math:`q` from :math:`v` successes in
:math:`r` trials at level :math:`c`.

Caveats
-------
* As in every audit, the result is a *lower* bound: a small value does not show that the
  claimed epsilon is tight. A value above the claimed epsilon shows the implementation
  (or its analysis) is wrong, at the stated confidence.
* The canaries' inclusion bits must be independent fair coins drawn *after* the canaries
  are chosen, and the mechanism's randomness must be fresh.
* The bound is on the privacy loss *per canary*. With many canaries the bound is
  typically loose (the paper's Fig. 1: it approaches the true epsilon only as
  :math:`m, r \to \infty` and with a near-optimal attack).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Sequence, Union

import numpy as np
import torch
from scipy.special import expit
from scipy.stats import binom

from ..metrics.auc import roc_auc
from .empirical_epsilon import _check_confidence, _check_delta

__all__ = ["OneRunAudit", "one_run_p_value", "one_run_epsilon_lower_bound", "one_run_audit"]


@dataclass(frozen=True)
class OneRunAudit:
    r"""The result of a one-run audit.

    Attributes:
        epsilon (float): the lower bound on epsilon (0 when nothing can be claimed), for
            the best number of guesses.
        confidence (float): the overall confidence (after the Bonferroni split over
            ``guesses_tried``, the bound holds with at least this probability).
        delta (float): the delta the bound is stated for.
        canaries (int): :math:`m`, the number of canaries.
        guesses (int): :math:`r`, the number of guesses of the reported bound.
        correct (int): :math:`v`, how many of those guesses were correct.
        auc (float): ROC-AUC of the scores against the inclusion bits (a diagnostic of
            the attack's strength, not part of the bound).
        guesses_tried (tuple of int): every :math:`r` evaluated (distinct, in the given
            order).
        ceiling (float): the bound a *perfect* attack (every guess right, which needs as
            many included canaries as guessed) would reach with
            the same canaries, guess counts, delta and confidence: the most this audit can
            certify. With :math:`\delta > 0` the term :math:`2 m \delta` caps it (for
            example about 5.2 for 4,000 canaries at :math:`\delta = 1/5278` and one guess
            count, 3.7 with four), so a bound at or below a claimed epsilon above the
            ceiling is no evidence at all.
    """

    epsilon: float
    confidence: float
    delta: float
    canaries: int
    guesses: int
    correct: int
    auc: float
    guesses_tried: tuple
    ceiling: float


# --------------------------------------------------------------------------- validation

def _check_int(value, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"`{name}` must be an integer; got {type(value).__name__}")
    v = int(value)
    if v < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}; got {v}")
    return v


def _check_mrv(m, r, v) -> tuple[int, int, int]:
    m = _check_int(m, "m", 1)
    r = _check_int(r, "r", 0)
    v = _check_int(v, "v", 0)
    if r > m:
        raise ValueError(f"the number of guesses `r` ({r}) exceeds the number of canaries `m` ({m})")
    if v > r:
        raise ValueError(f"the number of correct guesses `v` ({v}) exceeds the number of guesses `r` ({r})")
    return m, r, v


def _check_epsilon(epsilon) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real):
        raise TypeError(f"`epsilon` must be a real number; got {type(epsilon).__name__}")
    e = float(epsilon)
    if math.isnan(e) or e < 0.0:
        raise ValueError(f"`epsilon` must be >= 0; got {epsilon!r}")
    return e


# --------------------------------------------------------------------------- p-value

def _p_values(m: int, r: int, v: int, eps: np.ndarray, delta: float) -> np.ndarray:
    """The (unclipped) bound of the theorem for an array of epsilons (validated inputs)."""
    eps = np.asarray(eps, dtype=np.float64)
    if v == 0:
        return np.ones_like(eps)
    q = expit(eps)  # e^eps / (1 + e^eps), without overflow
    # P[Binom(r, q) >= v] = sf(v - 1)
    p = binom.sf(v - 1, r, q)
    if delta > 0.0:
        i = np.arange(1, v + 1, dtype=np.float64)
        lo = (v - 1 - i)[None, :]  # P[v - i <= B <= v - 1] = F(v - 1) - F(v - i - 1)
        qq = q.reshape(-1, 1)
        # difference of upper tails (accurate above the mean) or of lower tails (below it)
        by_sf = binom.sf(lo, r, qq) - binom.sf(v - 1, r, qq)
        by_cdf = binom.cdf(v - 1, r, qq) - binom.cdf(lo, r, qq)
        upper = (v - 1) >= r * qq
        mass = np.clip(np.where(upper, by_sf, by_cdf), 0.0, 1.0)
        p = p + 2.0 * m * delta * (mass / i[None, :]).max(axis=1).reshape(p.shape)
    return p


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    r"""The one-run audit's p-value for the hypothesis "the mechanism is
    :math:`(\epsilon, \delta)`-DP with respect to each canary".

    .. math::
        p = \min\Bigl(1,\; P[\mathrm{Binom}(r, q) \ge v]
            + 2 m \delta \max_{1 \le i \le v} \frac{P[v - i \le \mathrm{Binom}(r, q) < v]}{i}\Bigr),
        \qquad q = \frac{e^\epsilon}{1 + e^\epsilon},

    the bound of Steinke, Nasr and Jagielski (2023) on :math:`P[V \ge v]` for :math:`V`
    correct guesses out of :math:`r` on :math:`m` canaries (see the module docstring).
    It is non-decreasing in :math:`\epsilon` at :math:`\delta = 0` and non-decreasing in
    :math:`\delta`.

    Args:
        m (int): number of canaries (>= 1).
        r (int): number of guesses, in ``[0, m]``.
        v (int): number of correct guesses, in ``[0, r]``.
        epsilon (float): the epsilon under test, >= 0 (``inf`` allowed: p = 1 when v <= r).
        delta (float): the delta under test, in ``[0, 1)``.

    Returns:
        float: the p-value in ``[0, 1]``.
    """
    m, r, v = _check_mrv(m, r, v)
    e = _check_epsilon(epsilon)
    d = _check_delta(delta)
    return float(min(1.0, float(_p_values(m, r, v, np.array([e]), d)[0])))


# --------------------------------------------------------------------------- lower bound

_EPS_MAX = 64.0  # expit(64) == 1.0 in float64: no finite data can reject beyond this
_GRID = 257


def one_run_epsilon_lower_bound(m: int, r: int, v: int, *, delta: float = 0.0, confidence: float = 0.95) -> float:
    r"""The largest :math:`\epsilon` that the one-run audit rejects at level ``confidence``.

    Returns :math:`\hat\epsilon = \sup\{\epsilon \ge 0 : p(\epsilon) \le 1 - c\}` with
    :math:`p` of :func:`one_run_p_value`, and 0 when even :math:`\epsilon = 0` is not
    rejected. With probability at least :math:`c` (over the canaries' inclusion bits and
    the mechanism's randomness) the mechanism is not :math:`(\epsilon, \delta)`-DP per
    canary for any :math:`\epsilon < \hat\epsilon`; see the module docstring for why the
    supremum (rather than the first crossing) is valid.

    The search lands on the safe side: the returned float is one at which
    :math:`p \le 1 - c` was evaluated (so it may sit a hair below the exact root). At
    :math:`\delta = 0`, :math:`p` is increasing in :math:`\epsilon` and a bisection is
    used; for :math:`\delta > 0` (where :math:`p` need not be monotone) a grid of 257
    points below the largest epsilon the first term alone allows is scanned first, and the
    bisection refines the last rejected grid point. A rejected region narrower than the
    grid spacing could be missed, which only makes the result smaller (conservative).

    Args:
        m (int): number of canaries (>= 1).
        r (int): number of guesses, in ``[0, m]``.
        v (int): number of correct guesses, in ``[0, r]``.
        delta (float): the delta of the guarantee being audited, in ``[0, 1)``.
        confidence (float): :math:`c \in (0, 1)`.

    Returns:
        float: :math:`\hat\epsilon \ge 0`.
    """
    m, r, v = _check_mrv(m, r, v)
    d = _check_delta(delta)
    c = _check_confidence(confidence)
    alpha = 1.0 - c

    def rejected(e: float) -> bool:
        return bool(_p_values(m, r, v, np.array([e]), d)[0] <= alpha)

    if not rejected(0.0):
        return 0.0
    # the first term alone is increasing in eps and a lower bound on p: find where it
    # exceeds alpha; nothing beyond is rejected
    hi = 1.0
    while hi < _EPS_MAX and binom.sf(v - 1, r, expit(hi)) <= alpha:
        hi *= 2.0
    hi = min(hi, _EPS_MAX)
    if rejected(hi):  # only when even q = expit(64) is rejected (cannot happen for v <= r)
        return hi
    lo = 0.0
    if d > 0.0:
        grid = np.linspace(0.0, hi, _GRID)
        ok = _p_values(m, r, v, grid, d) <= alpha
        ok[0] = True  # checked above
        k = int(np.flatnonzero(ok).max())
        # recheck with the scalar call that the bisection uses (the two may differ by ulps)
        while k > 0 and not rejected(float(grid[k])):
            k -= 1
        lo = float(grid[k])
        hi = float(grid[k + 1]) if k + 1 < grid.size else hi
    # invariant: rejected(lo) and not rejected(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi or hi - lo <= 1e-12 * max(1.0, hi):
            break
        if rejected(mid):
            lo = mid
        else:
            hi = mid
    return float(lo)


# --------------------------------------------------------------------------- the audit

def _to_numpy(x, name: str, dtype) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.ndim != 1:
        a = a.reshape(-1)
    return a.astype(dtype)


def _correct_guesses(order: np.ndarray, included: np.ndarray, r: int) -> int:
    """Correct guesses when the top ``r // 2`` of ``order`` (ascending) are guessed "in"
    and the bottom ``r - r // 2`` are guessed "out"."""
    n_in = r // 2
    n_out = r - n_in
    m = order.size
    top = order[m - n_in:] if n_in > 0 else order[:0]
    bottom = order[:n_out]
    return int(included[top].sum()) + int((~included[bottom]).sum())


def one_run_audit(scores, included, *, guesses: Union[int, Sequence[int]], delta: float = 0.0,
                  confidence: float = 0.95) -> OneRunAudit:
    r"""Audit one run from the canaries' scores and their (secret) inclusion bits.

    **Guessing rule.** For a number of guesses :math:`r`, the canaries are ranked by score
    (ascending, ties broken by index: a stable sort, so no randomness is involved). The
    top :math:`\lfloor r/2 \rfloor` are guessed "included", the bottom
    :math:`r - \lfloor r/2 \rfloor` "excluded", and the auditor abstains on the rest.
    Then :math:`v` counts the correct guesses and :func:`one_run_epsilon_lower_bound`
    turns :math:`(m, r, v)` into a bound. The ranking uses only the scores (a
    post-processing of the output), never the inclusion bits, as the theorem requires.

    **Several** :math:`r`. When ``guesses`` lists several values (duplicates are dropped),
    each is evaluated at confidence :math:`1 - (1 - c)/k` for the :math:`k` distinct
    values (a Bonferroni split), and the largest bound is reported (ties: the first
    listed); it holds with probability at least :math:`c`.

    Args:
        scores (array-like or Tensor): one float per canary; higher means "more likely
            included".
        included (array-like or Tensor): the inclusion bits (bool or 0/1), same length.
        guesses (int or sequence of int): the number(s) of guesses :math:`r`, each in
            ``[1, m]``.
        delta (float): the delta of the guarantee being audited, in ``[0, 1)``.
        confidence (float): overall confidence :math:`c \in (0, 1)`.

    Returns:
        :class:`OneRunAudit`.
    """
    c = _check_confidence(confidence)
    d = _check_delta(delta)
    s = _to_numpy(scores, "scores", np.float64)
    inc_raw = _to_numpy(included, "included", np.float64)
    if s.size != inc_raw.size:
        raise ValueError(f"`scores` ({s.size}) and `included` ({inc_raw.size}) must have the same length")
    if s.size == 0:
        raise ValueError("`scores` is empty")
    if not np.isfinite(s).all():
        raise ValueError("`scores` contains NaN or infinite values")
    if not np.isin(inc_raw, (0.0, 1.0)).all():
        raise ValueError("`included` must be boolean (or 0/1)")
    inc = inc_raw.astype(bool)
    m = int(s.size)
    if inc.all() or not inc.any():
        raise ValueError("`included` needs both included and excluded canaries")

    if isinstance(guesses, (Integral, np.integer)) and not isinstance(guesses, bool):
        rs = [int(guesses)]
    else:
        try:
            rs = list(guesses)
        except TypeError:
            raise TypeError(f"`guesses` must be an int or a sequence of ints; got {type(guesses).__name__}") from None
    if not rs:
        raise ValueError("`guesses` is empty")
    tried: list[int] = []
    for r in rs:
        if isinstance(r, np.integer):
            r = int(r)
        r = _check_int(r, "guesses", 1)
        if r > m:
            raise ValueError(f"`guesses` ({r}) exceeds the number of canaries ({m})")
        if r not in tried:
            tried.append(r)

    per_c = 1.0 - (1.0 - c) / len(tried)
    order = np.argsort(s, kind="stable")
    best = None
    for r in tried:
        v = _correct_guesses(order, inc, r)
        eps = one_run_epsilon_lower_bound(m, r, v, delta=d, confidence=per_c)
        if best is None or eps > best[0]:
            best = (eps, r, v)
    ceiling = max(one_run_epsilon_lower_bound(m, r, r, delta=d, confidence=per_c) for r in tried)
    auc = roc_auc(torch.from_numpy(s), torch.from_numpy(inc))
    return OneRunAudit(epsilon=float(best[0]), confidence=c, delta=d, canaries=m, guesses=best[1],
                       correct=best[2], auc=float(auc), guesses_tried=tuple(tried), ceiling=float(ceiling))
