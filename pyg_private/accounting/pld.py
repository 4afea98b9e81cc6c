r"""Privacy loss distributions (PLD) of the events that have one, through Google's ``dp-accounting``.

A PLD is the distribution of the privacy loss :math:`\log(P(o)/Q(o))`, :math:`o \sim P`, of a
*dominating pair* :math:`(P, Q)` of a mechanism (Zhu, Dong and Wang, AISTATS 2022, Def. 7): every
hockey-stick divergence of the mechanism on neighbouring inputs is at most that of the pair.
Composition multiplies pairs, i.e. convolves the losses (their Theorem 10), and
:math:`\delta(\epsilon) = E[(1 - e^{\epsilon - L})_+]` is then exact up to the discretisation, which
``dp-accounting`` rounds *pessimistically* (Meiser and Mohammadi, CCS 2018; Doroshenko et al., PETS
2022, "Connect the dots"). So the figure is an upper bound and, on a PLD-only ledger, the tightest
the field computes.

The pairs used here, one per event kind (:func:`pld_key`):

* Gaussian with :math:`\ell_2` sensitivity :math:`\Delta` and std :math:`\sigma`, and every
  :math:`\mu`-GDP event: :math:`N(0, 1)` against :math:`N(\mu, 1)`, :math:`\mu = \Delta/\sigma`
  (a :math:`\mu`-GDP mechanism is *defined* by this pair dominating it: Dong, Roth and Su 2022).
* Laplace with :math:`\ell_1` sensitivity :math:`\rho` and scale :math:`b`: the one-dimensional pair
  :math:`\mathrm{Lap}(0, b)` against :math:`\mathrm{Lap}(\rho, b)`. A shift spread over several
  coordinates with the same :math:`\ell_1` norm is never worse (its loss is a sum of independent
  losses, each clipped at its own share of :math:`\rho/b`); the tests check this numerically.
* Randomized response and every pure :math:`\epsilon`-DP release: the binary randomized-response
  pair with ratio :math:`e^\epsilon`, which dominates every :math:`\epsilon`-DP mechanism (Kairouz,
  Oh and Viswanath, ICML 2015, Thm 2.4). A release that is the composition of :math:`k` mechanisms
  of :math:`\epsilon/k` each uses the :math:`k`-fold pair of :math:`\epsilon/k`, which is tighter.
* DP-SGD (Poisson-subsampled Gaussian, add/remove one example): ``dp-accounting``'s
  subsampled-Gaussian PLD, composed over the steps.
* Any :math:`(\epsilon, \delta)`-DP release: the pair with loss :math:`+\infty` w.p. :math:`\delta`
  and :math:`\pm\epsilon` otherwise (:func:`approximate_dp_pld`; same theorem of Kairouz et al.).

Events whose only analysis is an RDP curve (PABI, push-flow) have no PLD; the composition combines
them with the PLD through an :math:`(\epsilon, \delta)` pair (see
:mod:`pyg_private.accounting.composition`).
"""
from __future__ import annotations

import math
import threading
from collections import OrderedDict
from types import ModuleType
from typing import TYPE_CHECKING, Hashable, Mapping

import numpy as np

from .events import PrivacyEvent

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

__all__ = [
    "PLD_DISCRETIZATION",
    "MAX_COMBOS",
    "pld_key",
    "key_pld",
    "composed_pld",
    "pld_feasible",
    "approximate_dp_pld",
    "delta_for_epsilon",
    "epsilon_for_delta",
    "PrivacyLossDistribution",
]


def _dp_pld() -> ModuleType:
    """``dp_accounting.pld.privacy_loss_distribution``, imported on the first PLD built (dp-accounting
    and the SciPy it loads take about a second to import; a ledger far from its budget never needs them)."""
    from dp_accounting.pld import privacy_loss_distribution

    return privacy_loss_distribution


def __getattr__(name: str):
    # ``PrivacyLossDistribution`` (dp-accounting's class) is resolved on first access (PEP 562)
    if name == "PrivacyLossDistribution":
        return _dp_pld().PrivacyLossDistribution
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Discretisation interval of the privacy-loss values (``dp-accounting``'s default).
PLD_DISCRETIZATION = 1e-4
#: Pairs whose losses spread this wide are not worth a PLD (its support would have
#: about ``spread / PLD_DISCRETIZATION`` points, 8 bytes each): the Rényi/GDP rules answer them.
#: Pure / Laplace: losses within +-epsilon; Gaussian: within mu^2/2 +- 10 mu.
_MAX_PLD_EPSILON = 50.0
_MAX_PLD_MU = 4.0

PLDKey = tuple[Hashable, ...]


def pld_key(event: PrivacyEvent) -> tuple[PLDKey, int] | None:
    """``(key, count)``: the dominating pair of ``event`` as a hashable key, and how many times the
    event composes it; ``None`` when the event declares no pair (RDP-only analyses,
    approximate-DP events) or the pair is too costly to discretise (a pure or Laplace epsilon
    above 50, a Gaussian mu above 4, i.e. an epsilon of 25 or more at delta 1e-5: such releases
    are answered by the Rényi/GDP rules, and building their PLD would take seconds)."""
    if event.pld is not None:
        kind, *args = event.pld
        if kind == "gaussian":
            return (("gaussian", float(args[0])), 1) if args[0] <= _MAX_PLD_MU else None
        if kind == "laplace":
            return (("laplace", float(args[0])), 1) if args[0] <= _MAX_PLD_EPSILON else None
        if kind == "pure":
            eps, k = float(args[0]), int(args[1])
            return (("pure", eps), k) if eps * k <= _MAX_PLD_EPSILON else None
        if kind == "poisson_gaussian":
            sigma, q, steps = float(args[0]), float(args[1]), int(args[2])
            if 1.0 / sigma > _MAX_PLD_MU:
                return None
            return (("gaussian", 1.0 / sigma), steps) if q == 1.0 else (("poisson_gaussian", sigma, q), steps)
        return None
    if event.mu is not None and event.mu <= _MAX_PLD_MU:
        return ("gaussian", float(event.mu)), 1
    return None


#: Rule P is skipped when the composed loss distribution would need more points than this.
_MAX_PLD_POINTS = 1e7


def _loss_variance(key: PLDKey) -> float:
    """The variance of one pair's privacy loss (upper estimate)."""
    kind = key[0]
    if kind == "gaussian":
        return float(key[1]) ** 2
    if kind in ("laplace", "pure"):
        return float(key[1]) ** 2
    sigma, q = float(key[1]), float(key[2])
    return q * q * math.expm1(min(1.0 / sigma ** 2, 700.0)) + q * q


def pld_feasible(counts: Mapping[PLDKey, int] | tuple[tuple[PLDKey, int], ...]) -> bool:
    """Whether composing ``counts`` stays within :data:`_MAX_PLD_POINTS` discretised losses:
    about 16 standard deviations of the composed loss (the tails beyond are truncated) plus
    the widest single pair."""
    items = dict(counts)
    if not items:
        return True
    std = math.sqrt(math.fsum(n * _loss_variance(k) for k, n in items.items()))
    single = max(20.0 * math.sqrt(_loss_variance(k)) for k in items)
    return (16.0 * std + single) / PLD_DISCRETIZATION <= _MAX_PLD_POINTS


_CACHE_LOCK = threading.Lock()
_KEY_CACHE: "OrderedDict[PLDKey, PrivacyLossDistribution]" = OrderedDict()
_COMPOSED_CACHE: "OrderedDict[tuple, PrivacyLossDistribution]" = OrderedDict()
_KEY_CACHE_SIZE = 64
_COMPOSED_CACHE_SIZE = 16


def _lru_get(cache: OrderedDict, key: Hashable):
    with _CACHE_LOCK:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def _lru_put(cache: OrderedDict, key: Hashable, value, size: int) -> None:
    with _CACHE_LOCK:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > size:
            cache.popitem(last=False)


def _build(key: PLDKey) -> PrivacyLossDistribution:
    kind, value = key[0], float(key[1])
    dx = PLD_DISCRETIZATION
    _pld = _dp_pld()
    if kind != "poisson_gaussian" and value == 0.0:  # no loss at all
        return _pld.identity(value_discretization_interval=dx)
    if kind == "gaussian":
        return _pld.from_gaussian_mechanism(1.0, sensitivity=value, value_discretization_interval=dx)
    if kind == "poisson_gaussian":
        return _pld.from_gaussian_mechanism(value, sensitivity=1.0, sampling_prob=float(key[2]),
                                            value_discretization_interval=dx)
    if kind == "laplace":
        return _pld.from_laplace_mechanism(1.0, sensitivity=value, value_discretization_interval=dx)
    if kind == "pure":
        return approximate_dp_pld(value, 0.0)
    raise ValueError(f"unknown PLD key {key!r}")


def key_pld(key: PLDKey) -> PrivacyLossDistribution:
    """The PLD of one dominating pair (cached)."""
    pld = _lru_get(_KEY_CACHE, key)
    if pld is None:
        pld = _build(key)
        _lru_put(_KEY_CACHE, key, pld, _KEY_CACHE_SIZE)
    return pld


def approximate_dp_pld(epsilon: float, delta: float) -> PrivacyLossDistribution:
    r"""The PLD of the pair that dominates every :math:`(\epsilon, \delta)`-DP mechanism."""
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    return _dp_pld().from_privacy_parameters(DifferentialPrivacyParameters(float(epsilon), float(delta)),
                                             value_discretization_interval=PLD_DISCRETIZATION)


def composed_pld(counts: Mapping[PLDKey, int] | tuple[tuple[PLDKey, int], ...]) -> PrivacyLossDistribution | None:
    """The PLD of the composition of ``count`` copies of each key's pair (``None`` when empty).

    Results are cached by the multiset; a multiset one event larger than a cached one is
    built from it with one convolution, so a ledger that grows one release at a time pays
    one convolution per release.
    """
    items = tuple(sorted(dict(counts).items(), key=repr))
    items = tuple((k, n) for k, n in items if n > 0)
    if not items:
        return None
    cached = _lru_get(_COMPOSED_CACHE, items)
    if cached is not None:
        return cached
    result = None
    for i, (key, n) in enumerate(items):  # one event fewer of some key, already cached?
        smaller = items[:i] + (((key, n - 1),) if n > 1 else ()) + items[i + 1:]
        base = _lru_get(_COMPOSED_CACHE, smaller) if smaller else None
        if base is not None:
            result = base.compose(key_pld(key))
            break
    if result is None:
        for key, n in items:
            part = key_pld(key) if n == 1 else key_pld(key).self_compose(n)
            result = part if result is None else result.compose(part)
    _lru_put(_COMPOSED_CACHE, items, result, _COMPOSED_CACHE_SIZE)
    return result


# ----------------------------------------------------------------------------------------------
# Hockey-stick divergences, vectorised (dp-accounting's own loops run in Python, per loss value)
# ----------------------------------------------------------------------------------------------
class _Suffix:
    """One adjacency's PMF as suffix sums: delta(e) = inf + S1[i] - e^e S2[i], i = first loss >= e."""

    def __init__(self, pmf) -> None:
        dense = pmf.to_dense_pmf()
        probs = np.asarray(dense._probs, dtype=np.float64)
        self.losses = (np.arange(probs.size) + dense._lower_loss) * dense._discretization
        self.inf = float(dense._infinity_mass)
        self.s1 = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
        with np.errstate(over="ignore"):
            weighted = probs * np.exp(-np.maximum(self.losses, -700.0))
        self.s2 = np.concatenate([np.cumsum(weighted[::-1])[::-1], [0.0]])
        self.max_loss = float(self.losses[-1]) if probs.size else 0.0

    def delta(self, eps: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.losses, eps, side="left")
        with np.errstate(over="ignore", invalid="ignore"):
            out = self.inf + self.s1[i] - np.exp(eps) * self.s2[i]
        return np.clip(np.nan_to_num(out, nan=self.inf), self.inf, 1.0)


_SUFFIX_CACHE: "OrderedDict[int, tuple[PrivacyLossDistribution, list[_Suffix]]]" = OrderedDict()
_IDENTITY: "list[PrivacyLossDistribution]" = []  # the PLD of no loss, built on first use


def _identity() -> PrivacyLossDistribution:
    with _CACHE_LOCK:
        if not _IDENTITY:
            _IDENTITY.append(_dp_pld().identity(value_discretization_interval=PLD_DISCRETIZATION))
        return _IDENTITY[0]


def _suffixes(pld: PrivacyLossDistribution | None) -> list[_Suffix]:
    pld = _identity() if pld is None else pld
    hit = _lru_get(_SUFFIX_CACHE, id(pld))
    if hit is not None and hit[0] is pld:  # the cache keeps the PLD alive, so its id is not reused
        return hit[1]
    parts = [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]
    suffixes = [_Suffix(p) for p in parts]
    _lru_put(_SUFFIX_CACHE, id(pld), (pld, suffixes), 8)
    return suffixes


#: Most distinct loss shifts the composed (epsilon, delta) pairs may have.
MAX_COMBOS = 4096


def _normalise_pairs(pairs) -> tuple[tuple[float, float, int], ...]:
    out = []
    for pair in pairs:
        eps, delta, count = (*pair, 1) if len(pair) == 2 else pair
        out.append((float(eps), float(delta), int(count)))
    return tuple(out)


def _combos(pairs: tuple[tuple[float, float, int], ...]) -> tuple[np.ndarray, np.ndarray, float]:
    r"""Shifts and weights of the finite losses of the composed (epsilon, delta) pairs, each taken
    ``count`` times, and their total infinite mass. ``count`` copies of one pair have the
    binomial losses :math:`(2j - m)\epsilon`, :math:`j = 0..m`."""
    from scipy.stats import binom  # SciPy's statistics take about a second to import: only here

    shifts, weights = np.zeros(1), np.ones(1)
    finite = 1.0
    for eps, delta, count in pairs:
        tail = math.exp(-eps)  # eps >= 0: no overflow
        up = 1.0 / (1.0 + tail)  # P(+eps | finite); -eps otherwise
        j = np.arange(count + 1)
        pmf = binom.pmf(j, count, up)
        shifts = (shifts[:, None] + (2 * j - count)[None, :] * eps).ravel()
        weights = (weights[:, None] * pmf[None, :]).ravel()
        finite *= (1.0 - delta) ** count
        if shifts.size > MAX_COMBOS:
            raise ValueError(f"the (epsilon, delta) pairs compose to more than {MAX_COMBOS} loss values")
    return shifts, weights * finite, 1.0 - finite


def delta_for_epsilon(pld: PrivacyLossDistribution | None, epsilons, pairs=()) -> np.ndarray:
    r""":math:`\delta(\epsilon)` of ``pld`` composed with the pairs that dominate
    :math:`(\epsilon_b, \delta_b)`-DP mechanisms, ``pairs = ((eps_b, delta_b[, count_b]), ...)``, at
    each of ``epsilons`` (exact for the pairs: their losses are :math:`\pm\epsilon_b` or
    :math:`+\infty`). The maximum over the PLD's add and remove distributions."""
    eps = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    shifts, weights, inf_mass = _combos(_normalise_pairs(pairs))
    best = np.zeros_like(eps)
    for part in _suffixes(pld):
        total = inf_mass + (part.delta(eps[:, None] - shifts[None, :]) * weights).sum(axis=1)
        best = np.maximum(best, total)
    return np.minimum(best, 1.0)


def epsilon_for_delta(pld: PrivacyLossDistribution | None, delta: float, pairs=()) -> float:
    """The smallest epsilon >= 0 with :func:`delta_for_epsilon` at most ``delta`` (``inf`` when
    the infinite losses alone exceed it); the returned value errs on the large side by at most
    about 1e-7 of the loss range. ``pairs`` as in :func:`delta_for_epsilon`; at most
    4,096 distinct loss shifts in all (``ValueError`` beyond)."""
    pairs = _normalise_pairs(pairs)
    parts = _suffixes(pld)
    shifts, weights, inf_mass = _combos(pairs)
    keep = weights > 0
    shifts, weights = shifts[keep], weights[keep]

    def f(eps: np.ndarray) -> np.ndarray:
        best = np.zeros_like(eps)
        for part in parts:
            best = np.maximum(best, inf_mass + (part.delta(eps[:, None] - shifts[None, :]) * weights).sum(axis=1))
        return best

    hi = max(p.max_loss for p in parts) + float(shifts.max()) + 1.0
    if f(np.array([hi]))[0] > delta:
        return math.inf
    lo = 0.0
    if f(np.array([lo]))[0] <= delta:
        return 0.0
    for _ in range(5):  # delta(lo) > target >= delta(hi); refine the bracket 64-fold per round
        grid = np.linspace(lo, hi, 65)
        ok = f(grid) <= delta
        j = int(np.argmax(ok))  # first grid point that meets the target (grid[-1] always does)
        lo, hi = grid[max(j - 1, 0)], grid[j]
    return float(hi)
