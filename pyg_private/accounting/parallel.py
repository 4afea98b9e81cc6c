r"""Parallel composition: releases on disjoint parts of the data cost the maximum over parts.

Parallel composition (McSherry, "Privacy Integrated Queries", SIGMOD 2009, Thm. 2; the argument
below holds for every guarantee the accountant composes: RDP, GDP, privacy loss distributions,
approximate DP): when the data set is split into disjoint parts **by a rule that does not
depend on the private data**, and every release of a group reads one part only, two
neighbouring data sets differ in one part
:math:`j` at most. Every release on another part then sees the same input under both, and adds
no privacy loss whatever it was adaptively asked. The group therefore costs what part
:math:`j`'s releases cost, composed sequentially, and :math:`j` is the worst part:

.. math::
    \epsilon_{\text{unit}}(\delta) = \max_{(j_1, \dots, j_m)}
        \epsilon\Big(\mathcal{S} \circ \mathcal{P}^{(1)}_{j_1} \circ \dots \circ
        \mathcal{P}^{(m)}_{j_m}\Big)(\delta),

with :math:`\mathcal{S}` the sequential events of the unit and :math:`\mathcal{P}^{(g)}_j` the
events of part :math:`j` of group :math:`g`. Every combination is composed with the
accountant's own rules (Rényi/GDP and PLD), so the figure is exact whenever one part
dominates and never below the truth. Parts with the same events (a loader whose batches each
get one identical release) collapse to one; a part whose events are a sub-multiset of
another's is dominated and dropped. Beyond :data:`MAX_SELECTIONS` combinations, the group with
the most distinct parts is replaced by one dominating release: its worst part when every part
is Gaussian (GDP is totally ordered in :math:`\mu`), else the pointwise maximum of the parts'
RDP curves (a valid RDP curve for the group, as every part's is below it), else (approximate-DP
parts) the parts composed sequentially. These fallbacks are upper bounds, never below the truth.

**When a partition qualifies.**

* The parts are fixed by a public rule: the graphs of a dataset (a ``DataLoader`` of many
  graphs: one epoch's batches are disjoint), or nodes assigned by a random or public key.
  A partition computed *from the private graph* (METIS in ``ClusterData``) is not: one edge
  more can move nodes between parts, so the neighbouring graph's parts differ in many places.
* Each release of part :math:`j` reads only part :math:`j`: its own induced subgraph, its own
  features, and public quantities (declared bounds, not the full graph's degrees).
  ``NeighborLoader`` batches overlap (sampled neighbourhoods and halo nodes): they are not
  disjoint and compose sequentially.
* **Edge level.** An edge lies in the part that holds both endpoints; an edge *between* two
  parts lies in no part's subgraph. Adding or removing it changes no release of the group
  (it costs nothing there); adding or removing an edge inside part :math:`j` changes only
  part :math:`j`. A node partition of one graph is therefore fine at edge level.
* **Node level.** Removing node :math:`v` of part :math:`j` removes its features, its label and
  its edges. The edges inside part :math:`j` change part :math:`j` only; its edges to other parts
  are cut edges, in no subgraph; so again only part :math:`j` changes, *provided* nothing of
  :math:`v` (its degree in the full graph, a normalisation over the full graph, a copy of it as a
  halo node) reaches another part. A partition into subgraphs can be node-disjoint and still
  edge-adjacent: that is fine for both units as long as the releases read the induced subgraphs.
  Each part's own size changes under node neighbours: the layers' declared public bounds
  (``num_nodes``, ``max_degree``) must hold for the part.
* **Local DP** (unit ``"local"``) is already accounted per node: a node's spend counts only
  the randomisations that touched it, which *is* parallel composition over nodes. Local events
  made inside a part are charged to that per-node ledger as usual (with the node ids the
  release names), never to the group.

Which part is current is kept per thread / task (a :class:`contextvars.ContextVar`): a
release in a thread started inside ``part(i)`` is **not** in the part (it is charged
sequentially, the safe side) unless that thread enters ``part(i)`` itself or passes
``partition=(name, i)`` to :meth:`~pyg_private.accounting.PrivacyAccountant.register`.
"""
from __future__ import annotations

import itertools
import math
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Hashable, Iterator, Mapping, Sequence

import numpy as np

from .composition import Composition
from .events import PrivacyEvent
from .units import Unit

if TYPE_CHECKING:
    from .accountant import PrivacyAccountant

__all__ = ["ParallelGroup", "ParallelScope", "MAX_SELECTIONS", "unit_candidates", "check_part_key",
           "check_group_name"]

#: Combinations of worst parts composed exactly; beyond, groups are bounded by one dominating release.
MAX_SELECTIONS = 64
#: Distinct parts of one group checked pairwise for domination (quadratic); beyond, only duplicates merge.
_MAX_PRUNE = 256

PartKey = Any  # int or str (JSON-serialisable, so the ledger can be saved)

#: The parts entered in the current thread / task: ((accountant, group name, part key), ...).
_ACTIVE: ContextVar[tuple[tuple[Any, str, PartKey], ...]] = ContextVar("pyg_private_parallel_part", default=())


def check_group_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"a parallel group's `name` must be a non-empty string; got {name!r}")
    return name


def check_part_key(part: Any) -> PartKey:
    """Parts are named by an ``int`` or a ``str`` (they are saved in the ledger's state_dict)."""
    if isinstance(part, bool) or not isinstance(part, (int, str, np.integer)):
        raise TypeError(f"a part must be named by an int or a str (e.g. the batch index); got {part!r}")
    return int(part) if isinstance(part, np.integer) else part


def _cost_key(event: PrivacyEvent) -> Hashable:
    """What composition reads from an event: equal keys compose identically."""
    return (event.mu, event.orders, event.rdp, event.approx, event.profile, event.pld)


class _Part:
    """One unit's events in one part: their composition and the multiset of their costs."""

    __slots__ = ("composition", "costs")

    def __init__(self, composition: Composition | None = None, costs: Mapping[Hashable, int] | None = None) -> None:
        self.composition = composition if composition is not None else Composition()
        self.costs: dict[Hashable, int] = dict(costs or {})

    def add(self, event: PrivacyEvent) -> "_Part":
        costs = dict(self.costs)
        key = _cost_key(event)
        costs[key] = costs.get(key, 0) + 1
        return _Part(self.composition.add(event), costs)

    def signature(self) -> frozenset:
        return frozenset(self.costs.items())

    def within(self, other: "_Part") -> bool:
        """This part's events are a sub-multiset of ``other``'s (so ``other`` dominates it)."""
        return all(other.costs.get(k, 0) >= n for k, n in self.costs.items())


class ParallelGroup:
    """Immutable state of one parallel group: per part, per unit, the composed events.

    Args:
        name (str): the group's name (unique in its accountant).
        closed (bool): no more releases can join the group.
        parts: ``{part: {unit: _Part}}`` (internal).
    """

    __slots__ = ("name", "closed", "parts", "num_events", "_maximal")

    def __init__(self, name: str, closed: bool = False, parts: Mapping[PartKey, Mapping[Unit, _Part]] | None = None,
                 num_events: int = 0) -> None:
        self.name = name
        self.closed = closed
        self.parts: dict[PartKey, dict[Unit, _Part]] = {k: dict(v) for k, v in (parts or {}).items()}
        self.num_events = num_events
        self._maximal: dict[Unit, tuple[Composition, ...]] = {}

    def add(self, part: PartKey, event: PrivacyEvent) -> "ParallelGroup":
        """The group with ``event`` charged to ``part`` (``self`` is unchanged)."""
        parts = dict(self.parts)
        units = dict(parts.get(part, {}))
        units[event.unit] = units.get(event.unit, _Part()).add(event)
        parts[part] = units
        return ParallelGroup(self.name, self.closed, parts, self.num_events + 1)

    def close(self) -> "ParallelGroup":
        return ParallelGroup(self.name, True, self.parts, self.num_events)

    def units(self) -> set[Unit]:
        return {u for units in self.parts.values() for u in units}

    def part_compositions(self, unit: Unit) -> dict[PartKey, Composition]:
        return {k: v[unit].composition for k, v in self.parts.items() if unit in v}

    def num_events_of(self, unit: Unit) -> int:
        return sum(v[unit].composition.num_events for v in self.parts.values() if unit in v)

    def maximal(self, unit: Unit) -> tuple[Composition, ...]:
        """The compositions of the parts that no other part dominates (duplicates merged)."""
        if unit not in self._maximal:
            distinct: dict[frozenset, _Part] = {}
            for units in self.parts.values():
                if unit in units:
                    distinct.setdefault(units[unit].signature(), units[unit])
            cands = list(distinct.values())
            if 1 < len(cands) <= _MAX_PRUNE:
                # a part whose events all appear in a larger part is dominated (strictly smaller multiset)
                cands = [p for p in cands if not any(q is not p and p.within(q) for q in cands)]
            self._maximal[unit] = tuple(p.composition for p in cands)
        return self._maximal[unit]

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"ParallelGroup({self.name!r}, parts={len(self.parts)}, events={self.num_events}, {state})"


def _dominating(parts: Sequence[Composition], unit: Unit, name: str) -> Composition:
    """One composition whose privacy loss bounds every part's (see the module docstring)."""
    if all(p.curve is None and not p.profiles for p in parts):  # all Gaussian: the largest mu dominates
        return max(parts, key=lambda p: p.mu_squared)
    if not any(p.profiles for p in parts):
        grid = None
        for p in parts:
            if p.curve is not None:
                grid = set(p.curve[0]) if grid is None else grid & set(p.curve[0])
        orders = np.asarray(sorted(grid or ()), dtype=np.float64)
        if orders.size:
            worst = np.zeros_like(orders)
            for p in parts:
                if p.curve is None:
                    with np.errstate(invalid="ignore"):
                        values = np.where(np.isinf(orders), math.inf if p.mu_squared > 0 else 0.0,
                                          orders * p.mu_squared / 2.0)
                else:
                    a, v = p.rdp_curve()
                    values = v[np.isin(a, orders)]
                worst = np.maximum(worst, values)
            event = PrivacyEvent(name=f"parallel group {name!r} (worst part's RDP curve)", unit=unit,
                                 mechanism="parallel_max", orders=tuple(orders.tolist()), rdp=tuple(worst.tolist()))
            return Composition().add(event)
    out = Composition()  # approximate-DP parts: sequential composition, a valid (loose) bound
    for p in parts:
        out = out.merge(p)
    return out


def unit_candidates(seq: Composition, groups: Sequence[ParallelGroup],
                    unit: Unit) -> tuple[tuple[Composition, ...], bool]:
    """The compositions whose maximum is the unit's cost, and whether the figure is exact
    (``False`` when a group had to be bounded by a dominating release)."""
    base = seq
    multi: list[tuple[str, tuple[Composition, ...]]] = []
    for group in groups:
        parts = group.maximal(unit)
        if len(parts) == 1:
            base = base.merge(parts[0])
        elif parts:
            multi.append((group.name, parts))
    exact = True
    while math.prod(len(p) for _, p in multi) > MAX_SELECTIONS:
        multi.sort(key=lambda item: len(item[1]))
        name, parts = multi.pop()
        base = base.merge(_dominating(parts, unit, name))
        exact = False
    candidates = [base]
    for choice in itertools.product(*(p for _, p in multi)):
        if choice:
            comp = base
            for part in choice:
                comp = comp.merge(part)
            candidates.append(comp)
    if len(candidates) > 1:
        candidates = candidates[1:]  # the base alone is dominated by every selection
    return tuple(candidates), exact


class _PartContext:
    """``with part(i):`` -- releases inside are charged to part ``i`` of the group."""

    def __init__(self, scope: "ParallelScope", part: PartKey) -> None:
        self._scope, self._part = scope, part
        self._token = None

    def __enter__(self) -> PartKey:
        acct, name = self._scope.accountant, self._scope.name
        active = _ACTIVE.get()
        for owner, group, part in active:
            if owner is acct:
                raise ValueError(
                    f"part {self._part!r} of parallel group {name!r} entered inside part {part!r} of group {group!r}: "
                    "a release belongs to one part. Leave the current part first (nested partitions are not supported)"
                )
        acct._check_group_open(name)
        self._token = _ACTIVE.set(active + ((acct, name, self._part),))
        return self._part

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._token)


class ParallelScope:
    """The handle of ``with accountant.parallel(name) as part:``; ``part(i)`` enters part ``i``.

    Returned by :meth:`PrivacyAccountant.parallel`; see :mod:`pyg_private.accounting.parallel`
    for when a partition qualifies.
    """

    def __init__(self, accountant: "PrivacyAccountant", name: str | None) -> None:
        self.accountant = accountant
        #: The group's name (chosen when the block is entered if none was given).
        self.name = name
        self._entered = False

    def __call__(self, part: PartKey) -> _PartContext:
        """A context in which every release is charged to part ``part`` (an ``int`` or ``str``)."""
        if not self._entered:
            raise ValueError("enter the group first: `with accountant.parallel(name) as part: with part(i): ...`")
        return _PartContext(self, check_part_key(part))

    def __enter__(self) -> "ParallelScope":
        if self._entered:
            raise ValueError(f"parallel group {self.name!r} was entered already; open a new group per partition")
        for owner, group, part in _ACTIVE.get():
            if owner is self.accountant:
                raise ValueError(f"parallel group {self.name!r} opened inside part {part!r} of group {group!r}: nested "
                                 "parallel groups are not supported; use one partition into the finest disjoint parts")
        self.name = self.accountant._open_group(self.name)
        self._entered = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.accountant._close_group(self.name)

    def parts(self) -> Iterator[PartKey]:
        """The parts charged so far."""
        return iter(self.accountant._group_parts(self.name) if self.name is not None else [])

    def __repr__(self) -> str:
        return f"ParallelScope({self.name!r})"


def active_part(accountant: Any) -> tuple[str, PartKey] | None:
    """The innermost part of ``accountant`` entered in this thread / task, or ``None``."""
    for owner, group, part in reversed(_ACTIVE.get()):
        if owner is accountant:
            return group, part
    return None
