r"""Composition of privacy events within one unit (``DESIGN.md`` §1), as pure values.

A :class:`Composition` is an immutable running summary of the events composed so
far; :meth:`Composition.add` returns a new summary and never mutates, so a caller
can look at the cost of a release *before* accepting it.

Rules, in order:

1. If every curve event (GDP or RDP) is GDP, compose exactly,
   :math:`\mu = \sqrt{\sum_i \mu_i^2}`, and convert with the exact GDP formula.
2. Otherwise sum the RDP curves order by order (a GDP event contributes
   :math:`\alpha\mu^2/2`) and convert with the best conversion over the orders,
   including the order-infinity (pure-DP) track. Curves tabulated on different grids
   compose on the orders they share.
   One more bound is always valid and sometimes tighter: the pure-DP events
   (finite order-infinity value) summed as pure epsilons, plus the rest composed by
   rule 1 or 2 at the full delta (basic composition of the two groups). The smaller
   of the two is reported; :meth:`Composition.method` says which.
3. Approximate-only events compose by basic composition on top:
   :math:`\epsilon = \epsilon_{\text{curve}} + \sum_i \epsilon_i`, and the curve part is
   converted at :math:`\delta - \sum_i \delta_i`, which must not be negative.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .conversion import rdp_to_dp
from .events import PrivacyEvent
from .gdp import gdp_epsilon
from .validation import check_delta

__all__ = ["Composition", "compose"]

Curve = tuple[tuple[float, ...], tuple[float, ...]]


def _add_curves(mine: Curve | None, orders: tuple[float, ...], values: tuple[float, ...], name: str) -> Curve:
    """Sum two tabulated RDP curves on the orders they share."""
    if mine is None:
        return orders, values
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


@dataclass(frozen=True)
class Composition:
    """Running summary of composed events of one unit (see the module docstring).

    Attributes:
        num_events: events composed.
        mu_squared: :math:`\\sum \\mu_i^2` of the GDP events.
        curve: summed RDP curve ``(orders, values)`` of the non-GDP curve events, or ``None``.
        pure_sum: sum of the order-infinity values of the curve events that are pure DP.
        impure_curve: summed curve of the non-GDP curve events that are not pure DP.
        approx_epsilon, approx_delta: basic-composition sums of the approximate-only events.
    """

    num_events: int = 0
    mu_squared: float = 0.0
    curve: Curve | None = None
    pure_sum: float = 0.0
    num_pure: int = 0
    impure_curve: Curve | None = None
    approx_epsilon: float = 0.0
    approx_delta: float = 0.0

    @property
    def all_gdp(self) -> bool:
        """True when no curve-only (non-GDP) event has been composed."""
        return self.curve is None

    @property
    def mu(self) -> float:
        """The composed GDP parameter of the GDP events."""
        return math.sqrt(self.mu_squared)

    def add(self, event: PrivacyEvent) -> "Composition":
        """The composition with ``event`` added (``self`` is unchanged)."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent; got {type(event).__name__}")
        fields = dict(self.__dict__, num_events=self.num_events + 1)
        kind = event.representation
        if kind == "gdp":
            fields["mu_squared"] = self.mu_squared + event.mu ** 2
        elif kind == "approx":
            eps, delta = event.approx
            fields["approx_epsilon"] = self.approx_epsilon + eps
            fields["approx_delta"] = self.approx_delta + delta
        else:
            fields["curve"] = _add_curves(self.curve, event.orders, event.rdp, event.name)
            pure = event.rdp[-1] if math.isinf(event.orders[-1]) else math.inf
            if math.isfinite(pure):
                fields["pure_sum"] = self.pure_sum + pure
                fields["num_pure"] = self.num_pure + 1
            else:
                fields["impure_curve"] = _add_curves(self.impure_curve, event.orders, event.rdp, event.name)
        return Composition(**fields)

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

    def _best(self, delta: float, conversion: str) -> tuple[float, str]:
        delta = check_delta(delta, allow_zero=True)
        rest = delta - self.approx_delta
        if rest < 0 and not math.isclose(rest, 0.0, abs_tol=1e-18):
            raise ValueError(
                f"`delta`={delta!r} is smaller than the total delta {self.approx_delta!r} of the "
                "approximate-DP events it must cover"
            )
        rest = max(rest, 0.0)
        eps, how = self._curve_epsilon(self.curve, rest, conversion)
        if self.num_pure and self.num_pure < self.num_events:
            split, split_how = self._curve_epsilon(self.impure_curve, rest, conversion)
            split += self.pure_sum
            if split < eps:
                eps, how = split, f"pure events summed + {split_how}"
        if self.approx_epsilon > 0 or self.approx_delta > 0:
            how = "basic composition" if how == "no curve" else how + " + basic composition"
        return eps + self.approx_epsilon, how

    def epsilon(self, delta: float, *, conversion: Literal["balle", "standard"] = "balle") -> float:
        """The composed epsilon at ``delta`` (see the module docstring for the rules)."""
        return self._best(delta, conversion)[0]

    def method(self, delta: float, *, conversion: Literal["balle", "standard"] = "balle") -> str:
        """How :meth:`epsilon` was obtained at ``delta`` (for reports)."""
        return self._best(delta, conversion)[1]


def compose(events: "list[PrivacyEvent] | tuple[PrivacyEvent, ...]") -> Composition:
    """Compose a sequence of events of one unit."""
    comp = Composition()
    for event in events:
        comp = comp.add(event)
    return comp
