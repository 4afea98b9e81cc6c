r"""The privacy accountant: one ledger per unit, composition, conversion and budgets.

.. code-block:: python

    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-5)})
    layer = NoisyPPRDiffusion(..., accountant=acct)   # layers register themselves
    out = layer(x, edge_index)                        # one event per noisy release
    acct.epsilon("edge", delta=1e-5)
    print(acct.report())

Guarantees this class keeps:

* an event is validated in full, and the new totals are computed, **before** any state
  changes; a rejected event (bad record, incompatible grid, budget) leaves the ledger
  exactly as it was;
* a budget is enforced before the mechanism draws noise: mechanisms call
  :meth:`register` first and only then sample, so :class:`PrivacyBudgetExceeded` means
  nothing was released;
* ``state_dict()`` / ``from_state_dict()`` round-trip every event exactly;
* registration is atomic under threads: validating, composing, comparing with the budget and
  appending happen under one lock, so concurrent releases can neither overrun a budget nor
  lose an event (queries take the same lock and see a consistent ledger).
"""
from __future__ import annotations

import math
import threading
from typing import Any, Iterable, Mapping

from .composition import Composition
from .errors import PrivacyBudgetExceeded
from .events import PrivacyEvent
from .local_ledger import LocalLedger
from .report import AccountantReport
from .units import Unit, as_unit
from .validation import check_delta, check_epsilon

__all__ = ["PrivacyAccountant", "DEFAULT_REPORT_DELTA"]

#: delta used by :meth:`PrivacyAccountant.report` for a unit with no budget and no delta given.
DEFAULT_REPORT_DELTA = 1e-5
#: relative slack when comparing a composed epsilon with a budget (floating-point noise only).
_BUDGET_RTOL = 1e-9
_STATE_FORMAT = "pyg_private.PrivacyAccountant"
_STATE_VERSION = 1


def _check_budget(unit: Unit, budget: Any) -> tuple[float, float]:
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        return check_epsilon(budget, f"budget[{unit.value!r}]"), 0.0
    try:
        eps, delta = budget
    except (TypeError, ValueError):
        raise TypeError(
            f"`budget[{unit.value!r}]` must be an (epsilon, delta) pair or a pure epsilon; got {budget!r}"
        ) from None
    return (check_epsilon(eps, f"budget[{unit.value!r}] epsilon"),
            check_delta(delta, f"budget[{unit.value!r}] delta", allow_zero=True))


class PrivacyAccountant:
    r"""Records every release's :class:`PrivacyEvent` and answers what was spent.

    Args:
        budget (Mapping[str, tuple[float, float] | float], optional): a budget per unit,
            ``{"edge": (epsilon, delta)}``; a bare float is a pure-DP budget
            (``delta = 0``). A release that would exceed it raises
            :class:`PrivacyBudgetExceeded` before any noise is drawn. For unit
            ``"local"`` the budget bounds every node's own spend.
        conversion (str, optional): RDP -> DP conversion, ``"balle"`` (default, tighter)
            or ``"standard"`` (Mironov), see :func:`pyg_private.accounting.rdp_to_dp`.
        pld (bool, optional): also compose with privacy loss distributions (``dp-accounting``)
            and report the tighter figure (default ``True``; see
            :mod:`pyg_private.accounting.composition`). ``False`` keeps only the Rényi/GDP rules:
            faster, never tighter.

    The object is safe to share between threads, and it pickles, deep-copies and
    ``torch.save``\ s with its ledger (the lock is recreated).
    """

    def __init__(self, budget: Mapping[str | Unit, Any] | None = None, *, conversion: str = "balle",
                 pld: bool = True) -> None:
        if conversion not in ("balle", "standard"):
            raise ValueError(f"`conversion` must be 'balle' or 'standard'; got {conversion!r}")
        if not isinstance(pld, bool):
            raise TypeError(f"`pld` must be a bool; got {type(pld).__name__}")
        self.pld = pld
        self._lock = threading.RLock()
        budgets: dict[Unit, tuple[float, float]] = {}
        for key, value in (budget or {}).items():
            unit = as_unit(key, argument="budget key")
            budgets[unit] = _check_budget(unit, value)
        self._budget = budgets
        self.conversion = conversion
        self._events: list[PrivacyEvent] = []
        self._central: dict[Unit, Composition] = {}
        self._local = LocalLedger()

    # ----------------------------------------------------------------- budget
    @property
    def budget(self) -> dict[str, tuple[float, float]]:
        """The budgets, ``{unit: (epsilon, delta)}``."""
        with self._lock:
            return {u.value: b for u, b in self._budget.items()}

    def set_budget(self, unit: str | Unit, budget: tuple[float, float] | float | None) -> None:
        """Set (or with ``None`` remove) the budget of ``unit``. Past spending is not refunded."""
        unit = as_unit(unit)
        checked = None if budget is None else _check_budget(unit, budget)
        with self._lock:
            if checked is None:
                self._budget.pop(unit, None)
            else:
                self._budget[unit] = checked

    # -------------------------------------------------------------- recording
    def _prospective(self, event: PrivacyEvent) -> tuple[Composition | LocalLedger, float | None]:
        """The unit's new state with ``event`` added and, under a budget, its epsilon."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent; got {type(event).__name__}")
        unit = event.unit
        new_state: Composition | LocalLedger
        if unit is Unit.LOCAL:
            new_state = self._local.add(event)
        else:
            new_state = self._central.get(unit, Composition()).add(event)
        if unit not in self._budget:
            return new_state, None
        eps_budget, delta_budget = self._budget[unit]
        # the cheap Rényi/GDP rules first: when they already fit, the tighter PLD is not needed
        eps = self._epsilon_of(new_state, delta_budget, use_pld=False)
        if eps > eps_budget * (1.0 + _BUDGET_RTOL) and self.pld:
            eps = self._epsilon_of(new_state, delta_budget)
        if math.isinf(eps) and delta_budget < new_state.min_delta():
            raise PrivacyBudgetExceeded(
                f"release {event.name!r} refused: unit {unit.value!r} budget "
                f"(epsilon={eps_budget:g}, delta={delta_budget:g}) cannot cover the approximate-DP events' "
                f"delta {new_state.min_delta():g}. Nothing was released."
            )
        if eps > eps_budget * (1.0 + _BUDGET_RTOL):
            raise PrivacyBudgetExceeded(
                f"release {event.name!r} refused: unit {unit.value!r} would reach epsilon={eps:.6g} "
                f"at delta={delta_budget:g}, over its budget epsilon={eps_budget:g}. Nothing was released."
            )
        return new_state, eps

    def _epsilon_of(self, state: Composition | LocalLedger, delta: float, use_pld: bool | None = None) -> float:
        use_pld = self.pld if use_pld is None else use_pld
        if isinstance(state, LocalLedger):
            return state.max_epsilon(delta, conversion=self.conversion, use_pld=use_pld)
        return state.epsilon(delta, conversion=self.conversion, use_pld=use_pld)

    def check(self, event: PrivacyEvent) -> float | None:
        """Validate ``event`` against the ledger and budget without recording it.

        Returns the unit's epsilon (at the budget's delta) it would lead to, or ``None``
        when the unit has no budget. Raises exactly what :meth:`register` would.
        """
        with self._lock:
            return self._prospective(event)[1]

    def register(self, event: PrivacyEvent) -> PrivacyEvent:
        """Record one release. Call it **before** drawing the release's noise.

        Raises:
            PrivacyBudgetExceeded: the release would exceed the unit's budget; the ledger
                is unchanged and the caller must not release anything.
            ValueError, TypeError: the event cannot be composed with the ledger.
        """
        with self._lock:
            new_state, _ = self._prospective(event)
            # commit: nothing below can fail
            if event.unit is Unit.LOCAL:
                self._local = new_state  # type: ignore[assignment]
            else:
                self._central[event.unit] = new_state  # type: ignore[assignment]
            self._events.append(event)
        return event

    # ---------------------------------------------------------------- queries
    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """All recorded events, in order."""
        with self._lock:
            return tuple(self._events)

    def events_of(self, unit: str | Unit) -> tuple[PrivacyEvent, ...]:
        unit = as_unit(unit)
        return tuple(e for e in self.events if e.unit is unit)

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def _delta_for(self, unit: Unit, delta: float | None) -> float:
        if delta is not None:
            return check_delta(delta)
        if unit in self._budget:  # a pure budget (delta 0) is reported as pure DP
            return self._budget[unit][1]
        raise ValueError(f"`delta` is required for unit {unit.value!r} (it has no budget)")

    def epsilon(self, unit: str | Unit, delta: float | None = None) -> float:
        """The composed epsilon of ``unit`` at ``delta`` (default: the unit's budget delta; a
        pure budget gives the pure-DP epsilon).

        For unit ``"local"`` it is the maximum over nodes of each node's own spend.
        """
        unit = as_unit(unit)
        with self._lock:
            return self._epsilon_at(unit, self._delta_for(unit, delta))

    def get_epsilon(self, delta: float, unit: str | Unit | None = None) -> float:
        """Opacus' accountant interface: the epsilon spent at ``delta``. ``unit`` may be left out
        when the ledger holds exactly one unit."""
        with self._lock:
            if unit is None:
                units = sorted({e.unit for e in self._events} | set(self._budget), key=lambda u: u.value)
                if len(units) != 1:
                    raise ValueError(f"the ledger holds units {[u.value for u in units]}: pass `unit=`")
                unit = units[0]
            return self._epsilon_at(as_unit(unit), check_delta(delta))

    def _epsilon_at(self, unit: Unit, delta: float) -> float:
        if unit is Unit.LOCAL:
            return self._epsilon_of(self._local, delta)
        return self._epsilon_of(self._central.get(unit, Composition()), delta)

    def pure_epsilon(self, unit: str | Unit) -> float:
        """The composed epsilon with ``delta = 0`` (``inf`` unless every event is pure DP)."""
        unit = as_unit(unit)
        with self._lock:
            return self._epsilon_at(unit, 0.0)

    def node_epsilons(self, delta: float = 0.0):
        """Unit ``"local"``: every node's own epsilon at ``delta`` (a NumPy array)."""
        with self._lock:
            return self._local.node_epsilons(check_delta(delta, allow_zero=True), conversion=self.conversion,
                                             use_pld=self.pld)

    def composition(self, unit: str | Unit) -> Composition:
        """The running :class:`Composition` of a central unit (``"edge"`` or ``"node"``)."""
        unit = as_unit(unit)
        if unit is Unit.LOCAL:
            raise ValueError("unit 'local' is accounted per node; use node_epsilons() or epsilon('local', delta)")
        with self._lock:
            return self._central.get(unit, Composition())

    # ----------------------------------------------------------------- report
    def report(self, delta: float | Mapping[str, float] | None = None) -> AccountantReport:
        """Per unit: epsilon, delta, number of events, budget, as a dict that prints as a table.

        Args:
            delta: the delta to report at, one for all units or ``{unit: delta}``. A unit
                with none given uses its budget's delta (0 for a pure budget), else
                ``DEFAULT_REPORT_DELTA`` (1e-5); the table always shows which delta was used.

        The report always answers. When a unit's approximate-DP events need more delta than
        requested (``min_delta``, the sum of their smallest covered deltas), its row is given
        at ``min_delta + delta`` instead, and says so (``requested_delta``, ``min_delta``).
        """
        with self._lock:
            return self._report(delta)

    def _report(self, delta: float | Mapping[str, float] | None) -> AccountantReport:
        out = AccountantReport()
        units = [u for u in Unit if u in self._budget or any(e.unit is u for e in self._events)]
        for unit in units:
            if isinstance(delta, Mapping):
                d = delta.get(unit.value, delta.get(unit))
            else:
                d = delta
            if d is None:
                d = self._budget[unit][1] if unit in self._budget else DEFAULT_REPORT_DELTA
            else:
                d = check_delta(d, allow_zero=True)
            state = self._local if unit is Unit.LOCAL else self._central.get(unit, Composition())
            requested, floor = d, state.min_delta()
            if d < floor:  # the approximate-DP events need more delta than asked for: answer anyway
                d = floor + (d if d > 0 else floor)
            events = self.events_of(unit)
            row: dict[str, Any] = {
                "epsilon": self._epsilon_at(unit, d),
                "delta": d,
                "num_events": len(events),
                "budget": self._budget.get(unit),
                "events": _group_events(events),
            }
            if d != requested:
                row["requested_delta"] = requested
                row["min_delta"] = floor
            if unit is Unit.LOCAL:
                row["num_nodes"] = self._local.num_nodes
                row["nodes_touched"] = self._local.num_touched
            elif events:
                row["conversion"] = state.method(d, conversion=self.conversion, use_pld=self.pld)
            out[unit.value] = row
        return out

    # ------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: budgets, conversion and every event (JSON-compatible),
        taken at one instant (under the lock)."""
        with self._lock:
            budget = {u.value: list(b) for u, b in self._budget.items()}
            events = list(self._events)
        return {
            "format": _STATE_FORMAT,
            "version": _STATE_VERSION,
            "conversion": self.conversion,
            "pld": self.pld,
            "budget": budget,
            "events": [e.to_dict() for e in events],
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> "PrivacyAccountant":
        """Rebuild an accountant saved by :meth:`state_dict`. Every event is re-validated.

        Budgets are restored but not re-checked against the past: a ledger that is over
        its budget loads, and refuses further releases.
        """
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise ValueError("`state` is not a PrivacyAccountant state_dict")
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported state_dict version {state.get('version')!r}")
        acct = cls(budget=None, conversion=state.get("conversion", "balle"), pld=bool(state.get("pld", True)))
        events = [PrivacyEvent.from_dict(e) for e in state.get("events", [])]
        acct._replay(events)
        for unit, b in state.get("budget", {}).items():
            acct.set_budget(unit, tuple(b) if b[1] > 0 else b[0])
        return acct

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace this accountant's ledger by ``state`` (all-or-nothing)."""
        other = PrivacyAccountant.from_state_dict(state)
        with self._lock:
            lock = self._lock
            self.__dict__.update(other.__dict__)
            self._lock = lock

    def __getstate__(self) -> dict[str, Any]:
        # copy the containers themselves under the lock: pickle writes them out later, and a
        # register in between must not reach the copy half-way (compositions are immutable)
        with self._lock:
            state = self.__dict__.copy()
            state["_events"] = list(self._events)
            state["_central"] = dict(self._central)
            state["_budget"] = dict(self._budget)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _replay(self, events: Iterable[PrivacyEvent]) -> None:
        for event in events:
            if event.unit is Unit.LOCAL:
                self._local = self._local.add(event)
            else:
                self._central[event.unit] = self._central.get(event.unit, Composition()).add(event)
            self._events.append(event)

    def __repr__(self) -> str:
        with self._lock:
            budget = ", ".join(f"{u.value}={b}" for u, b in self._budget.items())
            n = len(self._events)
        return f"PrivacyAccountant(events={n}" + (f", budget={{{budget}}}" if budget else "") + ")"


def _group_events(events: Iterable[PrivacyEvent]) -> list[dict[str, Any]]:
    """Consecutive events with the same name, mechanism and cost are listed once with a count."""
    rows: list[dict[str, Any]] = []
    for e in events:
        cost = e.cost_summary()
        if e.num_touched is not None:
            cost += f", {e.num_touched}/{e.num_nodes} nodes"
        if rows and rows[-1]["name"] == e.name and rows[-1]["mechanism"] == e.mechanism and rows[-1]["cost"] == cost:
            rows[-1]["count"] += 1
        else:
            rows.append({"name": e.name, "mechanism": e.mechanism, "cost": cost, "count": 1})
    return rows
