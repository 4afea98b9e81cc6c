"""The accountant's report: a dict per unit that prints as a table."""
from __future__ import annotations

import math
from typing import Any

__all__ = ["AccountantReport"]


def _fmt(x: float | None, spec: str = ".4g") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


class AccountantReport(dict):
    """``{unit: {"epsilon", "delta", "events", "budget", ...}}`` that prints as a table.

    ``str(report)`` is the readable table; the report itself is the dict (plain values,
    JSON-serialisable), with the per-event listing under the key ``"events"`` of each
    unit's entry as ``{"name": ..., "count": ..., "cost": ...}`` rows. A unit with parallel
    groups also lists them under ``"parallel"`` as ``{"name", "parts", "num_events", "epsilon",
    "worst_part", "closed"}`` rows (``epsilon``: the group's own cost, its worst part's).
    """

    def __str__(self) -> str:
        if not self:
            return "PrivacyAccountant: nothing spent"
        header = ("unit", "epsilon", "delta", "events", "budget (eps, delta)", "notes")
        rows = []
        for unit, r in self.items():
            budget = r.get("budget")
            budget_s = "-" if budget is None else f"({_fmt(budget[0])}, {_fmt(budget[1], '.3g')})"
            notes = []
            if r.get("num_nodes") is not None:
                notes.append(f"max over nodes; {r['nodes_touched']}/{r['num_nodes']} nodes touched")
            if r.get("conversion"):
                notes.append(r["conversion"])
            rows.append((unit, _fmt(r["epsilon"]), _fmt(r["delta"], ".3g"), str(r["num_events"]), budget_s,
                         "; ".join(notes)))
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
        line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
        out = [line(header), line(tuple("-" * w for w in widths))]
        out += [line(row) for row in rows]
        listing = []
        for unit, r in self.items():
            for ev in r.get("events", []):
                times = f" x{ev['count']}" if ev["count"] > 1 else ""
                listing.append(f"  [{unit}] {ev['name']}{times}: {ev['mechanism']}, {ev['cost']}")
        if listing:
            out += ["", "events:"] + listing
        groups = []
        for unit, r in self.items():
            for g in r.get("parallel", []):
                state = "" if g["closed"] else ", open"
                groups.append(f"  [{unit}] {g['name']}: {g['parts']} disjoint parts, {g['num_events']} releases, "
                              f"worst part {g['worst_part']!r} with epsilon {_fmt(g['epsilon'])} alone{state}")
        if groups:
            out += ["", "parallel groups (each costs its worst part):"] + groups
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        """A plain ``dict`` copy."""
        return {k: dict(v) for k, v in self.items()}
