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


@dataclass(frozen=True)
class Composition:
    """Running summary of composed events of one unit (see the module docstring)."""

    num_events: int = 0
    mu_squared: float = 0.0
    orders: tuple[float, ...] | None = None
    rdp: tuple[float, ...] | None = None
    approx_epsilon: float = 0.0
    approx_delta: float = 0.0

    @property
    def all_gdp(self) -> bool:
        """True when no curve-only (non-GDP) event has been composed."""
        return self.rdp is None

    @property
    def mu(self) -> float:
        """The composed GDP parameter of the GDP events."""
        return math.sqrt(self.mu_squared)

    def add(self, event: PrivacyEvent) -> "Composition":
        """The composition with ``event`` added (``self`` is unchanged)."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent; got {type(event).__name__}")
        kind = event.representation
        if kind == "gdp":
            return Composition(self.num_events + 1, self.mu_squared + event.mu ** 2, self.orders, self.rdp,
                               self.approx_epsilon, self.approx_delta)
        if kind == "approx":
            eps, delta = event.approx
            return Composition(self.num_events + 1, self.mu_squared, self.orders, self.rdp,
                               self.approx_epsilon + eps, self.approx_delta + delta)
        if self.rdp is None:
            orders, values = event.orders, event.rdp
        else:
            mine = np.asarray(self.orders)
            theirs = np.asarray(event.orders)
            common = np.intersect1d(mine, theirs)
            if common.size == 0:
                raise ValueError(
                    f"event {event.name!r} is tabulated on Rényi orders that share none with the "
                    "ledger's; evaluate its curve on the ledger's orders (e.g. DEFAULT_ORDERS)"
                )
            a = np.asarray(self.rdp)[np.isin(mine, common)]
            b = np.asarray(event.rdp)[np.isin(theirs, common)]
            orders, values = tuple(common.tolist()), tuple((a + b).tolist())
        return Composition(self.num_events + 1, self.mu_squared, tuple(orders), tuple(values),
                           self.approx_epsilon, self.approx_delta)

    def rdp_curve(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The total RDP curve (GDP events included), or ``None`` when all events are GDP."""
        if self.rdp is None:
            return None
        a = np.asarray(self.orders, dtype=np.float64)
        total = np.asarray(self.rdp, dtype=np.float64).copy()
        if self.mu_squared > 0:
            with np.errstate(invalid="ignore"):
                total = total + a * self.mu_squared / 2.0
        return a, total

    def epsilon(self, delta: float, *, conversion: Literal["balle", "standard"] = "balle") -> float:
        """The composed epsilon at ``delta`` (see the module docstring for the rules)."""
        delta = check_delta(delta, allow_zero=True)
        rest = delta - self.approx_delta
        if rest < 0 and not math.isclose(rest, 0.0, abs_tol=1e-18):
            raise ValueError(
                f"`delta`={delta!r} is smaller than the total delta {self.approx_delta!r} of the "
                "approximate-DP events it must cover"
            )
        rest = max(rest, 0.0)
        has_curve = self.rdp is not None or self.mu_squared > 0
        if not has_curve:
            return self.approx_epsilon
        if self.rdp is None:  # rule 1: exact GDP
            if rest == 0.0:
                return math.inf
            return gdp_epsilon(mu=self.mu, delta=rest) + self.approx_epsilon
        orders, total = self.rdp_curve()
        eps, _ = rdp_to_dp(orders=orders, rdp=total, delta=rest, conversion=conversion)
        return eps + self.approx_epsilon

    def best_order(self, delta: float) -> float | None:
        """The Rényi order reaching :meth:`epsilon` (``None`` for exact GDP or no curve)."""
        if self.rdp is None:
            return None
        orders, total = self.rdp_curve()
        return rdp_to_dp(orders=orders, rdp=total, delta=max(delta - self.approx_delta, 0.0))[1]


def compose(events: "list[PrivacyEvent] | tuple[PrivacyEvent, ...]") -> Composition:
    """Compose a sequence of events of one unit."""
    comp = Composition()
    for event in events:
        comp = comp.add(event)
    return comp
