r"""Empirical lower bounds on epsilon from a distinguishing test (privacy auditing).

This is the statistical core of a privacy audit in the style of Jagielski, Ullman and
Oprea (2020, "Auditing Differentially Private Machine Learning: How Private is Private
SGD?") and Nasr, Song, Thakurta, Papernot and Carlini (2021, "Adversary Instantiation:
Lower Bounds for Differentially Private Machine Learning"). It is pure statistics: the
caller runs a mechanism many times in two neighbouring worlds ("in": the record / edge
is present, "out": it is absent), turns every output into a score, and this module turns
the scores into an epsilon that the mechanism *provably* (at a stated confidence) does
not beat.

Derivation
----------
Let :math:`M` be :math:`(\epsilon, \delta)`-DP and :math:`D_{in}, D_{out}` neighbours.
Any test that says "member" on a set :math:`S` of outputs has a true positive rate
:math:`\mathrm{TPR} = P[M(D_{in}) \in S]` and a false positive rate
:math:`\mathrm{FPR} = P[M(D_{out}) \in S]`. DP applied to :math:`S` and to its
complement :math:`S^c` gives

.. math::
    \mathrm{TPR} \le e^\epsilon\,\mathrm{FPR} + \delta, \qquad
    1 - \mathrm{FPR} \le e^\epsilon\,(1 - \mathrm{TPR}) + \delta,

hence

.. math::
    \epsilon \ge \max\left(\log\frac{\mathrm{TPR} - \delta}{\mathrm{FPR}},\;
                           \log\frac{1 - \mathrm{FPR} - \delta}{1 - \mathrm{TPR}}\right).

Both right-hand sides increase in TPR and decrease in FPR, so plugging in a one-sided
Clopper-Pearson *lower* bound on TPR and an *upper* bound on FPR, each at level
:math:`1 - (1 - c)/2` (a Bonferroni split of the confidence :math:`c` across the two
rates), gives a bound that holds with probability at least :math:`c` over the trials:
on the event that both intervals cover (probability :math:`\ge c` by the union bound),
both inequalities above hold for the bounded rates. No further correction is needed for
taking the maximum of the two expressions, since they use the same two intervals.
When neither expression is positive, nothing can be claimed and the bound is 0.

The DP inequalities also hold with the roles of the two worlds swapped (neighbouring is
symmetric), which is what :func:`best_threshold_lower_bound` uses when it also tries
"member = score below the threshold".

Caveats
-------
* The bound is a *lower* bound on the epsilon of the mechanism as implemented; a value
  far below the claimed epsilon does not show the claim is tight, only that this test
  could not distinguish more. A value *above* the claimed epsilon (at high confidence)
  shows the implementation or its analysis is wrong.
* The trials in each world must be i.i.d. runs of the mechanism (fresh randomness each
  time); correlated trials void the Clopper-Pearson guarantee.
* Choosing the test (a threshold) on the same samples that are then used to evaluate it
  makes the confidence level optimistic; see ``split`` in
  :func:`best_threshold_lower_bound`.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from scipy.stats import beta

__all__ = ["EpsilonLowerBound", "clopper_pearson", "empirical_epsilon_lower_bound", "best_threshold_lower_bound"]


@dataclass(frozen=True)
class EpsilonLowerBound:
    """An empirical lower bound on epsilon and the numbers it came from.

    Attributes:
        epsilon (float): the lower bound (0 when nothing can be claimed).
        confidence (float): the probability, over the trials, that the bound holds.
        delta (float): the delta the bound is stated for.
        tp (int): "in"-world trials the test called members (true positives).
        fp (int): "out"-world trials the test called members (false positives).
        positives (int): number of "in"-world trials evaluated.
        negatives (int): number of "out"-world trials evaluated.
        tpr (float): the point estimate ``tp / positives``.
        fpr (float): the point estimate ``fp / negatives``.
        tpr_lower (float): the one-sided Clopper-Pearson lower bound on the TPR used.
        fpr_upper (float): the one-sided Clopper-Pearson upper bound on the FPR used.
        threshold (float or None): the score threshold of the test, when one was chosen
            by :func:`best_threshold_lower_bound`.
        direction (str or None): ``"greater"`` (member iff score >= threshold) or
            ``"less"`` (member iff score < threshold), with ``threshold``.
        split (bool or None): whether the threshold was chosen on held-out samples.
    """

    epsilon: float
    confidence: float
    delta: float
    tp: int
    fp: int
    positives: int
    negatives: int
    tpr: float
    fpr: float
    tpr_lower: float
    fpr_upper: float
    threshold: float | None = None
    direction: str | None = None
    split: bool | None = None


# --------------------------------------------------------------------------- validation

def _check_open_unit(value: float, name: str) -> float:
    """``value`` as a float, required to be a real number in the open interval (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"`{name}` must be a real number; got {type(value).__name__}")
    v = float(value)
    if not 0.0 < v < 1.0:
        raise ValueError(f"`{name}` must lie in (0, 1); got {value!r}")
    return v


def _check_confidence(confidence: float) -> float:
    return _check_open_unit(confidence, "confidence")


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, Real):
        raise TypeError(f"`delta` must be a real number; got {type(delta).__name__}")
    d = float(delta)
    if not 0.0 <= d < 1.0:
        raise ValueError(f"`delta` must lie in [0, 1); got {delta!r}")
    return d


def _check_count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"`{name}` must be an integer; got {type(value).__name__}")
    v = int(value)
    if v < 0:
        raise ValueError(f"`{name}` must be >= 0; got {v}")
    return v


def _as_counts(successes, trials) -> tuple[np.ndarray, np.ndarray]:
    k = np.asarray(successes)
    n = np.asarray(trials)
    for arr, name in ((k, "successes"), (n, "trials")):
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"`{name}` must be integer(s); got dtype {arr.dtype}")
    k, n = np.broadcast_arrays(k.astype(np.int64), n.astype(np.int64))
    if (n < 1).any():
        raise ValueError("`trials` must be >= 1")
    if (k < 0).any() or (k > n).any():
        raise ValueError("`successes` must lie in [0, trials]")
    return k, n


# --------------------------------------------------------------------------- Clopper-Pearson

def clopper_pearson(successes, trials, confidence: float, side: str):
    r"""One-sided exact (Clopper-Pearson) confidence bound on a binomial proportion.

    With :math:`k` successes in :math:`n` trials and confidence :math:`c`:

    * ``side="lower"``: :math:`p_{lo}` with :math:`P[p \ge p_{lo}] \ge c`, namely the
      :math:`(1-c)` quantile of :math:`\mathrm{Beta}(k, n-k+1)`, and 0 when :math:`k = 0`;
    * ``side="upper"``: :math:`p_{hi}` with :math:`P[p \le p_{hi}] \ge c`, namely the
      :math:`c` quantile of :math:`\mathrm{Beta}(k+1, n-k)`, and 1 when :math:`k = n`.

    These equal the bounds of ``scipy.stats.binomtest(k, n, alternative="greater" /
    "less").proportion_ci(c, method="exact")``. A two-sided interval at level :math:`c`
    is the pair of one-sided bounds at level :math:`(1+c)/2`.

    Args:
        successes (int or array of int): :math:`k`, in ``[0, trials]``.
        trials (int or array of int): :math:`n \ge 1` (broadcast against ``successes``).
        confidence (float): :math:`c \in (0, 1)`.
        side (str): ``"lower"`` or ``"upper"``.

    Returns:
        A float for scalar inputs, else a float64 array of the broadcast shape.
    """
    c = _check_confidence(confidence)
    if side not in ("lower", "upper"):
        raise ValueError(f"`side` must be 'lower' or 'upper'; got {side!r}")
    scalar = np.ndim(successes) == 0 and np.ndim(trials) == 0
    k, n = _as_counts(successes, trials)
    out = np.empty(k.shape, dtype=np.float64)
    if side == "lower":
        edge = k == 0
        out[edge] = 0.0
        inner = ~edge
        out[inner] = beta.ppf(1.0 - c, k[inner], n[inner] - k[inner] + 1)
    else:
        edge = k == n
        out[edge] = 1.0
        inner = ~edge
        out[inner] = beta.ppf(c, k[inner] + 1, n[inner] - k[inner])
    return float(out) if scalar else out


# --------------------------------------------------------------------------- the bound

def _epsilon_from_rates(tpr_lower, fpr_upper, delta: float):
    """max(0, log((TPR-d)/FPR), log((1-FPR-d)/(1-TPR))) elementwise, on the bounded rates."""
    tpr_lower = np.asarray(tpr_lower, dtype=np.float64)
    fpr_upper = np.asarray(fpr_upper, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        num1 = tpr_lower - delta
        e1 = np.where((num1 > 0) & (fpr_upper > 0), np.log(np.maximum(num1, 1e-300) / fpr_upper), -np.inf)
        # the CP bounds keep fpr_upper > 0 and tpr_lower < 1 for any confidence < 1
        num2 = 1.0 - fpr_upper - delta
        den2 = 1.0 - tpr_lower
        e2 = np.where((num2 > 0) & (den2 > 0), np.log(np.maximum(num2, 1e-300) / den2), -np.inf)
    return np.maximum(0.0, np.maximum(e1, e2))


def empirical_epsilon_lower_bound(tp: int, fp: int, positives: int, negatives: int, *, delta: float = 0.0,
                                  confidence: float = 0.95) -> EpsilonLowerBound:
    r"""A lower bound on epsilon that holds with probability ``confidence``.

    For an :math:`(\epsilon, \delta)`-DP mechanism every distinguishing test satisfies
    :math:`\mathrm{TPR} \le e^\epsilon \mathrm{FPR} + \delta` and
    :math:`1 - \mathrm{FPR} \le e^\epsilon (1 - \mathrm{TPR}) + \delta`, so

    .. math::
        \epsilon \ge \max\left(\log\frac{\mathrm{TPR}_{lo} - \delta}{\mathrm{FPR}_{hi}},\;
                               \log\frac{1 - \mathrm{FPR}_{hi} - \delta}{1 - \mathrm{TPR}_{lo}}\right)

    with one-sided Clopper-Pearson bounds :math:`\mathrm{TPR}_{lo}` and
    :math:`\mathrm{FPR}_{hi}`, each at level :math:`1 - (1 - c)/2` (Bonferroni), so
    that both hold together with probability at least :math:`c`. Returns 0 when nothing
    can be claimed. See the module docstring for the derivation (the audit recipe of
    Jagielski et al. 2020 and Nasr et al. 2021).

    The test must be fixed independently of the counted trials (e.g. chosen on other
    samples); otherwise the confidence level is optimistic.

    Args:
        tp (int): "in"-world trials that the test called members.
        fp (int): "out"-world trials that the test called members.
        positives (int): number of "in"-world trials (>= 1).
        negatives (int): number of "out"-world trials (>= 1).
        delta (float): the delta of the guarantee being audited, in ``[0, 1)``.
        confidence (float): in ``(0, 1)``.
    """
    c = _check_confidence(confidence)
    d = _check_delta(delta)
    tp, fp = _check_count(tp, "tp"), _check_count(fp, "fp")
    positives, negatives = _check_count(positives, "positives"), _check_count(negatives, "negatives")
    if positives < 1 or negatives < 1:
        raise ValueError("`positives` and `negatives` must be >= 1")
    if tp > positives:
        raise ValueError(f"`tp` ({tp}) exceeds `positives` ({positives})")
    if fp > negatives:
        raise ValueError(f"`fp` ({fp}) exceeds `negatives` ({negatives})")
    per_rate = 1.0 - (1.0 - c) / 2.0
    tpr_lo = clopper_pearson(tp, positives, per_rate, "lower")
    fpr_hi = clopper_pearson(fp, negatives, per_rate, "upper")
    eps = float(_epsilon_from_rates(tpr_lo, fpr_hi, d))
    return EpsilonLowerBound(epsilon=eps, confidence=c, delta=d, tp=tp, fp=fp, positives=positives,
                             negatives=negatives, tpr=tp / positives, fpr=fp / negatives,
                             tpr_lower=tpr_lo, fpr_upper=fpr_hi)


# --------------------------------------------------------------------------- threshold sweep

def _as_scores(x, name: str) -> np.ndarray:
    try:
        import torch
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency of the package
        pass
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError(f"`{name}` is empty")
    if not np.isfinite(a).all():
        raise ValueError(f"`{name}` contains NaN or infinite scores")
    return a


def _candidates(scores: np.ndarray, max_thresholds: int) -> np.ndarray:
    """Observed scores used as thresholds: all distinct ones, or ``max_thresholds`` of
    them at evenly spaced ranks (always including the extremes)."""
    u = np.unique(scores)
    if u.size <= max_thresholds:
        return u
    s = np.sort(scores)
    idx = np.unique(np.linspace(0, s.size - 1, max_thresholds).round().astype(np.int64))
    return np.unique(s[idx])


def _sweep(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray, delta: float, confidence: float):
    """Bounds for every (threshold, direction): returns (eps, tp, fp) arrays of shape (2, T);
    row 0 is "member iff score >= t", row 1 is "member iff score < t"."""
    n_in, n_out = scores_in.size, scores_out.size
    tp_ge = n_in - np.searchsorted(np.sort(scores_in), thresholds, side="left")
    fp_ge = n_out - np.searchsorted(np.sort(scores_out), thresholds, side="left")
    tp = np.stack([tp_ge, n_in - tp_ge])
    fp = np.stack([fp_ge, n_out - fp_ge])
    per_rate = 1.0 - (1.0 - confidence) / 2.0
    tpr_lo = clopper_pearson(tp, n_in, per_rate, "lower")
    fpr_hi = clopper_pearson(fp, n_out, per_rate, "upper")
    return _epsilon_from_rates(tpr_lo, fpr_hi, delta), tp, fp


def _random_halves(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    perm = rng.permutation(n)
    return perm[: n // 2], perm[n // 2:]


def best_threshold_lower_bound(scores_in, scores_out, *, delta: float = 0.0, confidence: float = 0.95,
                               split: bool = True, seed: "int | np.random.Generator | None" = None,
                               max_thresholds: int = 1000,
                               selection_confidence: float | None = None) -> EpsilonLowerBound:
    r"""The best epsilon lower bound over threshold tests on attack scores.

    The tests are "member iff score >= t" and the reversed "member iff score < t", for
    thresholds ``t`` among the observed scores (all distinct ones, or ``max_thresholds``
    of them at evenly spaced ranks). Each test is scored by
    :func:`empirical_epsilon_lower_bound`.

    **Selection bias.** Picking the best of many tests on the same samples that then
    certify it makes the stated confidence optimistic (a multiple-comparisons problem):
    the bound is then a useful *estimate*, not a guarantee. With ``split=True`` (the
    default, the honest audit) each world's scores are split at random into two halves;
    the test (threshold and direction) is chosen on the first halves and the returned
    bound is computed on the second halves only, so it holds at ``confidence``
    (the trials must be i.i.d.). With ``split=False`` every sample is used for both.

    Args:
        scores_in (array-like or Tensor): scores of the "in"-world trials (higher should
            mean "member" for the ``"greater"`` direction).
        scores_out (array-like or Tensor): scores of the "out"-world trials.
        delta (float): the delta of the guarantee being audited.
        confidence (float): in ``(0, 1)``.
        split (bool): choose the threshold on held-out halves. (default: ``True``)
        seed (int or numpy.random.Generator, optional): randomness of the split; it must
            not depend on the scores.
        max_thresholds (int): the most candidate thresholds to try. (default: 1000)
        selection_confidence (float, optional): the confidence of the bounds by which the
            test is *chosen* (not the reported one). A stricter level than ``confidence``
            favours thresholds with many samples on both sides and so picks a test that
            holds up on the evaluation halves (the best of many tests on one half is
            otherwise often a lucky tail threshold). It does not affect validity, since
            the choice is independent of the evaluation halves. (default: with ``split``,
            ``1 - (1 - confidence) / 50``, i.e. 0.999 for 0.95; without, ``confidence``,
            so that the result is the largest bound over the tests)

    Returns:
        :class:`EpsilonLowerBound` with ``threshold``, ``direction`` and ``split`` set;
        the counts are those of the evaluation samples.
    """
    c = _check_confidence(confidence)
    d = _check_delta(delta)
    if isinstance(max_thresholds, bool) or not isinstance(max_thresholds, Integral) or max_thresholds < 2:
        raise ValueError(f"`max_thresholds` must be an integer >= 2; got {max_thresholds!r}")
    if selection_confidence is None:
        sel_c = 1.0 - (1.0 - c) / 50.0 if split else c
    else:
        sel_c = _check_confidence(selection_confidence)
    s_in = _as_scores(scores_in, "scores_in")
    s_out = _as_scores(scores_out, "scores_out")
    if split:
        if s_in.size < 2 or s_out.size < 2:
            raise ValueError("`split=True` needs at least 2 scores per world")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        sel_in, ev_in = _random_halves(s_in.size, rng)
        sel_out, ev_out = _random_halves(s_out.size, rng)
        choose_in, choose_out = s_in[sel_in], s_out[sel_out]
        eval_in, eval_out = s_in[ev_in], s_out[ev_out]
    else:
        choose_in, choose_out = eval_in, eval_out = s_in, s_out

    thresholds = _candidates(np.concatenate([choose_in, choose_out]), int(max_thresholds))
    eps, _, _ = _sweep(choose_in, choose_out, thresholds, d, sel_c)
    # the largest bound; ties broken towards the first threshold / the "greater" direction
    row, col = np.unravel_index(int(np.argmax(eps)), eps.shape)
    t = float(thresholds[col])
    direction = "greater" if row == 0 else "less"
    member_in = eval_in >= t if direction == "greater" else eval_in < t
    member_out = eval_out >= t if direction == "greater" else eval_out < t
    res = empirical_epsilon_lower_bound(int(member_in.sum()), int(member_out.sum()), eval_in.size, eval_out.size,
                                        delta=d, confidence=c)
    return EpsilonLowerBound(**{**res.__dict__, "threshold": t, "direction": direction, "split": bool(split)})
