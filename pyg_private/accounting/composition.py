r"""Composition of privacy events within one unit, as pure values.

A :class:`Composition` is an immutable running summary of the events composed so
far; :meth:`Composition.add` returns a new summary and never mutates, so a caller
can look at the cost of a release *before* accepting it.

:meth:`Composition.epsilon` is the smallest of several bounds, each valid on its own:

**R. Rényi/GDP rules** (cheap; exact for Gaussian-only ledgers).

1. If every curve event (GDP or RDP) is GDP, compose exactly,
   :math:`\mu = \sqrt{\sum_i \mu_i^2}`, and convert with the exact GDP formula.
2. Otherwise sum the RDP curves order by order (a GDP event contributes
   :math:`\alpha\mu^2/2`) and convert with the best conversion over the orders,
   including the order-infinity (pure-DP) track. Curves tabulated on different grids
   compose on the orders they share. Also valid and sometimes tighter: the pure-DP events
   summed as pure epsilons plus the rest by rule 1 or 2 (basic composition of the two groups).
3. Approximate-DP events (:math:`(\epsilon_i, \delta_i)` pairs or whole privacy profiles)
   compose by basic composition on top, :math:`\epsilon = \epsilon_R(\delta_0) + \sum_i
   \epsilon_i(\delta_i)` with :math:`\delta_0 + \sum_i \delta_i = \delta`; the split is searched.

**P. Privacy loss distributions** (tight; :mod:`pyg_private.accounting.pld`). Every event
that declares a dominating pair (Gaussian, GDP, Laplace, randomized response, pure-DP
releases, DP-SGD) is composed exactly by ``dp-accounting``'s PLD. Each approximate-DP
event enters as the pair that dominates every :math:`(\epsilon_i(\delta_i), \delta_i)`-DP
mechanism, and the events with only an RDP curve (PABI, push-flow) as one such pair
:math:`(\epsilon_{RDP}(\delta_r), \delta_r)` for their composed curve; the deltas
:math:`\delta_i, \delta_r` are searched. Identical approximate-DP events (repeated fits) share
one delta and compose exactly as a binomial of :math:`\pm\epsilon_i` losses, so a ledger of
hundreds of fits stays cheap (rule P is skipped beyond 4,096 distinct losses). Composing dominating pairs is valid under adaptive
composition (Zhu, Dong and Wang, AISTATS 2022, Thm 10), and the pair of an
:math:`(\epsilon, \delta)` guarantee is at least as tight as basic composition.

The reported epsilon is never below the PLD figure of the events that have one, because each
bound is an upper bound of the true privacy loss of the same mechanisms; on a PLD-only ledger
it *is* the PLD figure (or the exact GDP one when that is smaller). :meth:`Composition.method`
says which rule won.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np

from .conversion import rdp_to_dp
from .events import PrivacyEvent
from .gdp import gdp_epsilon
from .pld import MAX_COMBOS, PLDKey, composed_pld, epsilon_for_delta, pld_feasible, pld_key
from .validation import check_delta

__all__ = ["Composition", "compose"]

Curve = tuple[tuple[float, ...], tuple[float, ...]]
Profile = tuple[tuple[float, ...], tuple[float, ...]]

#: Fractions of the total delta tried for the RDP-only group in rule P.
_RDP_SHARES = tuple(float(x) for x in np.concatenate([np.geomspace(1e-9, 0.5, 40), 1.0 - np.geomspace(0.4, 1e-6, 16)]))


def _add_curves(mine: Curve | None, orders: tuple[float, ...], values: tuple[float, ...], name: str) -> Curve:
    """Sum two tabulated RDP curves on the orders they share."""
    if mine is None:
        return orders, values
    if mine[0] == orders:  # the common case (one grid for the whole ledger): the same sums, without the set work
        return orders, tuple((np.asarray(mine[1]) + np.asarray(values)).tolist())
    a_orders, a_values = np.asarray(mine[0]), np.asarray(mine[1])
    b_orders, b_values = np.asarray(orders), np.asarray(values)
    common = np.intersect1d(a_orders, b_orders)
    if common.size == 0:
        raise ValueError(
            f"event {name!r} is tabulated on Rényi orders that share none with the ledger's; "
            "evaluate its curve on the ledger's orders (e.g. DEFAULT_ORDERS)"
        )
    total = a_values[np.isin(a_orders, common)] + b_values[np.isin(b_orders, common)]
    return tuple(common.tolist()), tuple(total.tolist())


def _event_profile(event: PrivacyEvent) -> Profile:
    """The approximate-DP event's profile, its calibrated pair merged in."""
    eps0, delta0 = event.approx
    if event.profile is None:
        return (delta0,), (eps0,)
    deltas, epsilons = event.profile
    grid = sorted(set(deltas) | {delta0})
    out = []
    for d in grid:
        e = _profile_epsilon((deltas, epsilons), d)
        if d >= delta0:
            e = min(e, eps0)
        out.append(e)
    out = list(np.minimum.accumulate(np.asarray(out, dtype=np.float64)))
    return tuple(grid), tuple(float(e) for e in out)


def _profile_epsilon(profile: Profile, delta: float) -> float:
    """Epsilon of a tabulated profile at ``delta``: read at the largest tabulated delta <= ``delta``."""
    i = bisect.bisect_right(profile[0], delta) - 1
    return math.inf if i < 0 else profile[1][i]


def _profile_min_delta(profile: Profile) -> float:
    for d, e in zip(*profile):
        if math.isfinite(e):
            return d
    return math.inf


def _search_split(candidates: Sequence[Sequence[float]], objective: Callable[[list[float]], float],
                  delta: float) -> tuple[float, list[float]]:
    """Minimise ``objective(deltas)`` over one delta per block, each taken from its sorted candidate
    list, by coordinate descent (coarse pass, then the neighbours of the best). Every evaluated
    split is a valid bound, so a poor optimum is only loose, never wrong."""
    k = len(candidates)
    if k == 0:
        return objective([]), []
    lists = [list(c) for c in candidates]
    if any(not c for c in lists):
        return math.inf, []
    start = delta / (k + 1)
    choice = []
    for c in lists:
        i = bisect.bisect_right(c, start) - 1
        choice.append(c[max(i, 0)])
    best = objective(choice)
    memo: dict[tuple[float, ...], float] = {tuple(choice): best}

    def value(trial: list[float]) -> float:
        key = tuple(trial)
        if key not in memo:
            memo[key] = objective(trial)
        return memo[key]

    for _ in range(2 if k > 1 else 1):
        for b, cands in enumerate(lists):
            step = max(1, len(cands) // 12)
            idx = list(range(0, len(cands), step)) + [len(cands) - 1]
            for j in (idx if len(cands) > 1 else [0]):
                trial = choice.copy()
                trial[b] = cands[j]
                v = value(trial)
                if v < best:
                    best, choice = v, trial
            j0 = cands.index(choice[b])
            for j in range(max(0, j0 - step), min(len(cands), j0 + step + 1)):
                trial = choice.copy()
                trial[b] = cands[j]
                v = value(trial)
                if v < best:
                    best, choice = v, trial
    return best, choice


@dataclass(frozen=True)
class Composition:
    r"""Running summary of composed events of one unit (see the module docstring).

    Attributes:
        num_events: events composed.
        mu_squared: :math:`\\sum \\mu_i^2` of the GDP events.
        curve: summed RDP curve ``(orders, values)`` of the non-GDP curve events, or ``None``.
        pure_sum: sum of the order-infinity values of the curve events that are pure DP.
        impure_curve: summed curve of the non-GDP curve events that are not pure DP.
        profiles: the privacy profiles ``(deltas, epsilons)`` of the approximate-DP events.
        pld_counts: the dominating pairs of the events that have one, ``((key, count), ...)``.
        rdp_only_curve: summed curve of the curve events without a dominating pair.
        rdp_only_mu_squared: :math:`\sum \mu_i^2` of the GDP events without one (too wide to
            discretise).
    """

    num_events: int = 0
    mu_squared: float = 0.0
    curve: Curve | None = None
    pure_sum: float = 0.0
    num_pure: int = 0
    impure_curve: Curve | None = None
    profiles: tuple[Profile, ...] = ()
    pld_counts: tuple[tuple[PLDKey, int], ...] = ()
    rdp_only_curve: Curve | None = None
    rdp_only_mu_squared: float = 0.0

    @property
    def all_gdp(self) -> bool:
        """True when no curve-only (non-GDP) event has been composed."""
        return self.curve is None

    @property
    def mu(self) -> float:
        """The composed GDP parameter of the GDP events."""
        return math.sqrt(self.mu_squared)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_cache", {})

    def min_delta(self) -> float:
        """The delta the approximate-DP events need at least (0 without them): the sum of their
        smallest deltas with a finite epsilon. Below it, :meth:`epsilon` is ``inf``."""
        return math.fsum(_profile_min_delta(p) for p in self.profiles)

    def add(self, event: PrivacyEvent) -> "Composition":
        """The composition with ``event`` added (``self`` is unchanged)."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent; got {type(event).__name__}")
        fields = dict(self.__dict__, num_events=self.num_events + 1)
        fields.pop("_cache", None)
        kind = event.representation
        key = pld_key(event) if kind != "approx" else None
        if kind == "gdp":
            fields["mu_squared"] = self.mu_squared + event.mu ** 2
            if key is None:
                fields["rdp_only_mu_squared"] = self.rdp_only_mu_squared + event.mu ** 2
        elif kind == "approx":
            fields["profiles"] = self.profiles + (_event_profile(event),)
        else:
            fields["curve"] = _add_curves(self.curve, event.orders, event.rdp, event.name)
            pure = event.rdp[-1] if math.isinf(event.orders[-1]) else math.inf
            if math.isfinite(pure):
                fields["pure_sum"] = self.pure_sum + pure
                fields["num_pure"] = self.num_pure + 1
            else:
                fields["impure_curve"] = _add_curves(self.impure_curve, event.orders, event.rdp, event.name)
            if key is None:
                fields["rdp_only_curve"] = _add_curves(self.rdp_only_curve, event.orders, event.rdp, event.name)
        if key is not None:
            counts = dict(self.pld_counts)
            counts[key[0]] = counts.get(key[0], 0) + key[1]
            fields["pld_counts"] = tuple(sorted(counts.items(), key=repr))
        return Composition(**fields)

    def merge(self, other: "Composition") -> "Composition":
        """The composition of this summary's events followed by ``other``'s (both unchanged).

        Every field is a sum (or a concatenation), so ``a.merge(b)`` equals adding ``b``'s events
        to ``a`` one by one, up to the order of floating-point additions.
        """
        if not isinstance(other, Composition):
            raise TypeError(f"expected a Composition; got {type(other).__name__}")
        if other.num_events == 0:
            return self
        if self.num_events == 0:
            return other

        def curves(a: Curve | None, b: Curve | None) -> Curve | None:
            return a if b is None else _add_curves(a, b[0], b[1], "merged composition")

        counts = dict(self.pld_counts)
        for key, n in other.pld_counts:
            counts[key] = counts.get(key, 0) + n
        return Composition(
            num_events=self.num_events + other.num_events,
            mu_squared=self.mu_squared + other.mu_squared,
            curve=curves(self.curve, other.curve),
            pure_sum=self.pure_sum + other.pure_sum,
            num_pure=self.num_pure + other.num_pure,
            impure_curve=curves(self.impure_curve, other.impure_curve),
            profiles=self.profiles + other.profiles,
            pld_counts=tuple(sorted(counts.items(), key=repr)),
            rdp_only_curve=curves(self.rdp_only_curve, other.rdp_only_curve),
            rdp_only_mu_squared=self.rdp_only_mu_squared + other.rdp_only_mu_squared,
        )

    def rdp_curve(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The total RDP curve (GDP events included), or ``None`` when all events are GDP."""
        return self._with_gdp(self.curve)

    def _with_gdp(self, curve: Curve | None) -> tuple[np.ndarray, np.ndarray] | None:
        if curve is None:
            return None
        a = np.asarray(curve[0], dtype=np.float64)
        total = np.asarray(curve[1], dtype=np.float64).copy()
        if self.mu_squared > 0:
            with np.errstate(invalid="ignore"):
                total = total + a * self.mu_squared / 2.0
        return a, total

    # ------------------------------------------------------------------ rule R
    def _curve_epsilon(self, curve: Curve | None, delta: float, conversion: str) -> tuple[float, str]:
        """Epsilon of ``curve`` plus the GDP events (rules 1-2) at ``delta``, and how."""
        tab = self._with_gdp(curve)
        if tab is None:
            if self.mu_squared == 0:
                return 0.0, "no curve"
            if delta == 0.0:
                return math.inf, "exact GDP"
            return gdp_epsilon(mu=self.mu, delta=delta), "exact GDP"
        eps, order = rdp_to_dp(orders=tab[0], rdp=tab[1], delta=delta, conversion=conversion)
        label = "inf (pure DP)" if math.isinf(order) else f"{order:.4g}"
        return eps, f"RDP, best order {label}"

    def _curves_best(self, delta: float, conversion: str) -> tuple[float, str]:
        eps, how = self._curve_epsilon(self.curve, delta, conversion)
        n_curve = self.num_events - len(self.profiles)
        if self.num_pure and self.num_pure < n_curve:
            split, split_how = self._curve_epsilon(self.impure_curve, delta, conversion)
            split += self.pure_sum
            if split < eps:
                eps, how = split, f"pure events summed + {split_how}"
        return eps, how

    def _groups(self) -> list[tuple[Profile, int]]:
        """The approximate-DP events' profiles, identical ones grouped with their count."""
        counts: dict[Profile, int] = {}
        for p in self.profiles:
            counts[p] = counts.get(p, 0) + 1
        return list(counts.items())

    def _rule_r(self, delta: float, conversion: str) -> tuple[float, str]:
        if not self.profiles:
            return self._curves_best(delta, conversion)
        groups = self._groups()  # m copies of one profile share their delta equally
        candidates = [[d for d in p[0] if d * m <= delta] for p, m in groups]

        def objective(deltas: list[float]) -> float:
            rest = delta - math.fsum(d * m for d, (_, m) in zip(deltas, groups))
            if rest < 0:
                return math.inf
            total = self._curves_best(rest, conversion)[0]
            return total + math.fsum(m * _profile_epsilon(p, d) for (p, m), d in zip(groups, deltas))

        eps, deltas = _search_split(candidates, objective, delta)
        if not math.isfinite(eps):
            return math.inf, "basic composition (delta too small for the approximate-DP events)"
        how = self._curves_best(delta - math.fsum(d * m for d, (_, m) in zip(deltas, groups)), conversion)[1]
        if how == "no curve":
            how = "privacy profile" if len(self.profiles) == 1 else "basic composition"
        else:
            how += " + basic composition"
        return eps, how

    # ------------------------------------------------------------------ rule P
    def _rule_p(self, delta: float, conversion: str) -> tuple[float, str] | None:
        """Rule P, or ``None`` when the (epsilon, delta) pairs would have too many loss values."""
        base = composed_pld(self.pld_counts)
        blocks: list[list[float]] = []
        eps_of: list[Callable[[float], float]] = []
        copies: list[int] = []
        for p, m in self._groups():
            blocks.append([d for d in p[0] if d * m < delta])
            eps_of.append(lambda d, p=p: _profile_epsilon(p, d))
            copies.append(m)
        if self.rdp_only_curve is not None or self.rdp_only_mu_squared > 0:
            rdp_only = Composition(curve=self.rdp_only_curve, mu_squared=self.rdp_only_mu_squared, num_events=1)
            blocks.append([delta * s for s in _RDP_SHARES])
            eps_of.append(lambda d: rdp_only._curve_epsilon(rdp_only.curve, d, conversion)[0])
            copies.append(1)
        if base is None and not blocks:
            return 0.0, "no events"
        if math.prod(m + 1 for m in copies) > MAX_COMBOS:
            return None

        def objective(deltas: list[float]) -> float:
            if math.fsum(d * m for d, m in zip(deltas, copies)) >= delta:
                return math.inf
            pairs = [(f(d), d, m) for d, f, m in zip(deltas, eps_of, copies)]
            if not all(math.isfinite(e) for e, _, _ in pairs):
                return math.inf
            return epsilon_for_delta(base, delta, pairs)

        eps, _ = _search_split(blocks, objective, delta)
        parts = ["PLD (dp-accounting)"]
        if self.rdp_only_curve is not None or self.rdp_only_mu_squared > 0:
            parts.append("RDP-only events as one (eps, delta) pair")
        if self.profiles:
            parts.append("approximate-DP events at their best delta")
        return eps, " + ".join(parts)

    def _best(self, delta: float, conversion: str, use_pld: bool = True) -> tuple[float, str]:
        delta = check_delta(delta, allow_zero=True)
        key = (delta, conversion, use_pld)
        if key not in self._cache:
            self._cache[key] = self._compute(delta, conversion, use_pld)
        return self._cache[key]

    def _compute(self, delta: float, conversion: str, use_pld: bool) -> tuple[float, str]:
        eps, how = self._rule_r(delta, conversion)
        exact = self.curve is None and not self.profiles  # all GDP: rule 1 is exact, no PLD can beat it
        worth_it = bool(self.pld_counts) or len(self.profiles) > 1 or (
            bool(self.profiles) and self.num_events > len(self.profiles))
        if use_pld and delta > 0 and not exact and worth_it and pld_feasible(self.pld_counts):
            rule_p = self._rule_p(delta, conversion)
            if rule_p is not None and rule_p[0] < eps:
                eps, how = rule_p
        return eps, how

    def epsilon(self, delta: float, *, conversion: Literal["balle", "standard"] = "balle",
                use_pld: bool = True) -> float:
        """The composed epsilon at ``delta`` (see the module docstring for the rules); ``inf`` when
        ``delta`` is too small to cover the approximate-DP events. ``use_pld=False`` skips rule P
        (faster, never tighter)."""
        return self._best(delta, conversion, use_pld)[0]

    def method(self, delta: float, *, conversion: Literal["balle", "standard"] = "balle",
               use_pld: bool = True) -> str:
        """How :meth:`epsilon` was obtained at ``delta`` (for reports)."""
        return self._best(delta, conversion, use_pld)[1]


def compose(events: "list[PrivacyEvent] | tuple[PrivacyEvent, ...]") -> Composition:
    """Compose a sequence of events of one unit."""
    comp = Composition()
    for event in events:
        comp = comp.add(event)
    return comp
