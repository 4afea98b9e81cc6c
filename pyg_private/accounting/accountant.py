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
  lose an event (queries take the same lock and see a consistent ledger);
* releases on disjoint parts of the data compose in parallel when, and only when, the caller
  says so (:meth:`PrivacyAccountant.parallel`): a group costs the maximum over its parts;
* the ledger belongs to one process: a copy charged in another process (a forked child, a
  ``DataLoader`` worker, a spawned process, a ``torch.distributed`` rank other than 0) raises
  :class:`LedgerProcessError` before any noise (see :meth:`PrivacyAccountant.adopt`); a ledger
  that every process shares is :class:`~pyg_private.accounting.PersistentPrivacyAccountant`.

The ledger stores consecutive identical events (a DP-SGD run's steps) once with a count, in
memory and in ``state_dict()``; every event is still checked against the budget one by one
and replayed one by one when loaded, so the loaded ledger is the same to the last bit.
"""
from __future__ import annotations

import json
import math
import secrets
import threading
import warnings
from typing import Any, Iterable, Mapping, NamedTuple

from .composition import Composition
from .errors import LedgerProcessError, PrivacyBudgetExceeded
from .events import PrivacyEvent
from .local_ledger import LocalLedger
from .parallel import (
    GroupMembership,
    ParallelGroup,
    ParallelScope,
    UncheckedPartitionWarning,
    active_members,
    active_part,
    check_group_name,
    check_part_key,
    unit_candidates,
)
from .processes import describe_process, distributed_rank, process_identity
from .report import AccountantReport
from .units import Unit, as_unit
from .validation import check_delta, check_epsilon

__all__ = ["PrivacyAccountant", "DEFAULT_REPORT_DELTA"]

#: delta used by :meth:`PrivacyAccountant.report` for a unit with no budget and no delta given.
DEFAULT_REPORT_DELTA = 1e-5
#: relative slack when comparing a composed epsilon with a budget (floating-point noise only).
_BUDGET_RTOL = 1e-9
_STATE_FORMAT = "pyg_private.PrivacyAccountant"
_STATE_VERSION = 2  # 2: events stored once, the ledger as runs (event, count[, group, part]); 1 still loads


class _Run(NamedTuple):
    """Consecutive identical releases of the ledger (immutable: a new run replaces the last)."""

    event: PrivacyEvent
    count: int
    group: str | None = None
    part: Any = None


class _Change(NamedTuple):
    """A validated, not yet committed, registration."""

    unit: Unit
    seq: Composition | None = None
    group: ParallelGroup | None = None
    local: LocalLedger | None = None
    candidates: tuple[Composition, ...] = ()
    exact: bool = True
    members: Any = None  # what the part's membership check records once the release is charged
    note: str | None = None  # why the part's membership could not be checked (warned once per group)


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

    Releases compose sequentially unless they are declared to touch disjoint parts of the data
    (:meth:`parallel`). The object is safe to share between threads, and it pickles,
    deep-copies and ``torch.save``\ s with its ledger and its parallel groups (the lock is
    recreated).

    **One process owns the ledger**: the one that built it (the constructor,
    :meth:`from_state_dict`) or took it over (:meth:`adopt`, :meth:`load_state_dict`). A copy
    in the same process (``copy.deepcopy``, a pickle round trip) is still owned; a copy in
    another process (inherited by ``fork``, unpickled by a ``DataLoader`` worker or a spawned
    process, ``torch.load``-ed in a new run) is not, and :meth:`register` / :meth:`check`
    raise :class:`LedgerProcessError` there before any noise is drawn, because what it
    records would never reach the owner. Under ``torch.distributed`` (more than one process)
    only rank 0 charges an in-memory ledger. To share one ledger between processes, use
    :class:`~pyg_private.accounting.PersistentPrivacyAccountant` (a file every process opens).
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
        self._runs: list[_Run] = []
        self._num_events = 0
        self._central: dict[Unit, Composition] = {}  # the sequential events of each central unit
        self._local = LocalLedger()
        self._groups: dict[str, ParallelGroup] = {}
        self._members: dict[str, GroupMembership] = {}  # in memory only: the ids announced to open groups
        self._member_key: bytes | None = None  # keys the digests of whole graphs; in memory only
        self._candidates: dict[Unit, tuple[tuple[Composition, ...], bool]] = {}
        self._owner: tuple[int, str] | None = process_identity()  # the process whose ledger this is
        self._any_rank = False  # True: charged on a torch.distributed rank other than 0 on purpose

    # -------------------------------------------------------------- ownership
    @property
    def is_owner(self) -> bool:
        """Whether this process may charge the ledger (see the class docstring)."""
        return self._ownership_error() is None

    def adopt(self, *, any_rank: bool = False) -> "PrivacyAccountant":
        """Make this process the ledger's owner, and return the accountant.

        Call it on an accountant restored **on purpose** in another process (a checkpoint
        ``torch.load``-ed in a new run). Never call it on a copy that a ``DataLoader`` worker,
        a forked child or a spawned process received implicitly: its releases would be
        charged to a ledger the parent never sees. :meth:`from_state_dict` and
        :meth:`load_state_dict` adopt by themselves.

        Args:
            any_rank (bool, optional): also charge on a ``torch.distributed`` rank other than 0
                (a subgroup's root that keeps its own ledger). (default: :obj:`False`)
        """
        if not isinstance(any_rank, bool):
            raise TypeError(f"`any_rank` must be True or False; got {any_rank!r}")
        self._owner = process_identity()
        self._any_rank = any_rank
        return self

    def _ownership_error(self) -> LedgerProcessError | None:
        owner = self.__dict__.get("_owner")
        if owner != process_identity():
            whose = ("no known process (it was saved by an older version)" if owner is None
                     else f"process {owner[0]}")
            return LedgerProcessError(
                f"this PrivacyAccountant belongs to {whose}, but a release is being charged to it in "
                f"{describe_process()}. It is a copy (inherited by fork, or unpickled by a DataLoader worker, a "
                "spawned process or a new run), and nothing it records would reach the owner's ledger: the "
                "release is refused before any noise is drawn. Fix: share one ledger between processes with "
                "PersistentPrivacyAccountant('ledger.sqlite') (workers and ranks open the same file), or make the "
                "release in the owning process (DataLoader(num_workers=0); apply a noisy transform once, as "
                "pre_transform= or before the loader, not as transform=). If you restored this accountant here "
                "on purpose (a checkpoint), call acct.adopt() or rebuild it with PrivacyAccountant.from_state_dict"
            )
        rank = None if self.__dict__.get("_any_rank", False) else distributed_rank()
        if rank:
            return LedgerProcessError(
                f"an in-memory PrivacyAccountant is charged on torch.distributed rank {rank}: the job's ledger is "
                "rank 0's, and a ledger on another rank records releases that the job's report never shows (each "
                "rank drawing its own release of the same data). The release is refused before any noise is "
                "drawn. Fix: build the accountant on rank 0 only (`acct if rank == 0 else None`) and release once, "
                "on rank 0, broadcasting the result (as the layers of pyg_private.distributed do), or share one "
                "PersistentPrivacyAccountant(path) that every rank opens (ranks on one machine). If this rank keeps "
                "its own ledger on purpose (the root of a subgroup), call acct.adopt(any_rank=True)"
            )
        return None

    def _check_owner(self) -> None:
        error = self._ownership_error()
        if error is not None:
            raise error

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

    # ------------------------------------------------------ parallel groups
    def parallel(self, name: str | None = None) -> ParallelScope:
        """Declare releases on **disjoint** parts of the data: they compose in parallel.

        .. code-block:: python

            for epoch in range(epochs):
                with acct.parallel(f"epoch-{epoch}") as part:      # one epoch's batches are disjoint
                    for i, batch in enumerate(loader):              # a DataLoader of whole graphs
                        with part(i, batch):                        # announced with its members
                            out = layer(batch.x, batch.edge_index)  # charged to part i

        Each release made inside ``part(i)`` is charged to part ``i``; a part's releases compose
        sequentially, the group costs the **maximum over its parts**, and the group composes
        sequentially with every other release (Thm. 2 of McSherry, "Privacy Integrated Queries",
        SIGMOD 2009; see :mod:`pyg_private.accounting.parallel` for the exact rule). A release
        into part ``i`` is refused before any noise when the group's new maximum would exceed
        the budget. Releases inside the ``with parallel(...)`` block but outside every part are
        sequential (they may read every part).

        **Checked where the parts name their members.** ``part(i, batch)`` (a ``Data`` with its
        global node ids ``n_id``, or a ``Batch`` of a graph dataset), ``part(i, nodes=...)``,
        ``part(i, edges=...)`` or ``part(i, graphs=...)`` announce what part ``i`` holds; before a
        release is charged to it, the accountant checks that no other part of the group charged on
        the same unit holds any of it (at edge level the undirected edges, else the nodes; at node
        level the nodes; or whole graphs), and raises :class:`~pyg_private.accounting.parallel.
        OverlappingPartsError` naming the overlap otherwise, before anything is charged. A
        neighbour-sampled batch (``NeighborLoader``: ``input_id``, ``num_sampled_nodes``) is refused
        outright. The ids are kept in memory while the group is open (12 bytes per id), never saved.
        A part announced without identities works as before, with an
        :class:`~pyg_private.accounting.parallel.UncheckedPartitionWarning` (once per group).

        **What the check cannot see**, and stays your claim: that the partition is fixed by a
        rule that does not look at the private data (node-id ranges, a public attribute, a random
        split, the graphs of a dataset). A partition computed from the private graph is not
        parallel composition even when its parts are disjoint: by **degree** (one edge added
        changes two degrees, moves its endpoints, and the threshold, between parts, so the
        neighbouring graph's parts differ in several places, and the cost is that of every part
        that changes), by METIS (``ClusterData``), by a sampler. Nor can it see that each release
        reads only its part: at edge level, the part's own edges (an edge between two parts is in
        no part, which is fine); at node level, also nothing of a node outside the part (its
        full-graph degree, a halo copy). Unit ``"local"`` is already per node: local releases in a
        part are charged per node as usual.

        Args:
            name (str, optional): the group's name, shown in reports and saved in the state;
                unique in this accountant (default: ``"parallel-<n>"``). A group closes when its
                ``with`` block ends and cannot be reopened: use one group per partition (e.g.
                one per epoch, as batches of different epochs overlap).

        Returns:
            ParallelScope: a context manager; ``part(i, ...)`` (``i`` an ``int`` or ``str``) is the
            context of part ``i`` (see :meth:`ParallelScope.__call__`). The current part is kept per
            thread / task: another thread enters ``part(i)`` itself, or calls :meth:`register` with
            ``partition=(name, i)`` (a part announced with its members in one thread stays checked).
        """
        return ParallelScope(self, None if name is None else check_group_name(name))

    def _open_group(self, name: str | None) -> str:
        """Open a new group (``None``: the next free ``"parallel-<n>"``) and return its name."""
        with self._lock:
            if name is None:
                n = len(self._groups)
                while f"parallel-{n}" in self._groups:
                    n += 1
                name = f"parallel-{n}"
            if name in self._groups:
                state = "closed" if self._groups[name].closed else "already open"
                raise ValueError(f"parallel group {name!r} is {state}: a group holds one partition and cannot be "
                                 "reopened; use a new name per partition (e.g. f'epoch-{epoch}')")
            self._groups[name] = ParallelGroup(name)
            return name

    def _close_group(self, name: str) -> None:
        with self._lock:
            self._membership_of().pop(name, None)  # no part can join any more: the ids are dropped
            group = self._groups.get(name)
            if group is None or group.closed:
                return
            if group.num_events == 0:  # nothing was charged to it: leave no trace
                del self._groups[name]
            else:
                self._groups[name] = group.close()

    def _check_group_open(self, name: str) -> ParallelGroup:
        with self._lock:
            group = self._groups.get(name)
            if group is None or group.closed:
                raise ValueError(f"parallel group {name!r} is not open: releases join a group only inside its "
                                 f"`with accountant.parallel({name!r}) as part:` block")
            return group

    def _group_parts(self, name: str) -> list[Any]:
        with self._lock:
            group = self._groups.get(name)
            return [] if group is None else list(group.parts)

    def _membership_of(self) -> dict[str, GroupMembership]:
        """The membership checks of the open groups (absent from an accountant of an older version)."""
        members = self.__dict__.get("_members")
        if members is None:
            members = self.__dict__["_members"] = {}
        return members

    def _membership_secret(self) -> bytes:
        """The key of the digests that name whole graphs (in memory only, per accountant)."""
        with self._lock:
            if self.__dict__.get("_member_key") is None:
                self._member_key = secrets.token_bytes(16)
            return self._member_key

    def _check_membership(self, event: PrivacyEvent, target: tuple[str, Any]) -> tuple[Any, str | None]:
        """Check the members announced for part ``target`` against the group's other parts (raises
        :class:`OverlappingPartsError`); what to record, and a note when it could not be checked."""
        membership = self._membership_of().setdefault(target[0], GroupMembership())
        return membership.check(target[0], target[1], event.unit, active_members(self, target))

    def _resolve_partition(self, partition: Any) -> tuple[str, Any] | None:
        if partition is None:
            return active_part(self)
        try:
            name, part = partition
        except (TypeError, ValueError):
            raise TypeError(f"`partition` must be a (group name, part) pair; got {partition!r}") from None
        return check_group_name(name), check_part_key(part)

    # -------------------------------------------------------------- recording
    def _candidates_of(self, unit: Unit, seq: Composition | None = None,
                       group: ParallelGroup | None = None) -> tuple[tuple[Composition, ...], bool]:
        """The compositions whose maximum is ``unit``'s cost (one when nothing is parallel), with
        ``seq`` / ``group`` standing in for the stored ones when given."""
        if seq is None and group is None and unit in self._candidates:
            return self._candidates[unit]
        seq = seq if seq is not None else self._central.get(unit, Composition())
        groups = [group if group is not None and g.name == group.name else g for g in self._groups.values()]
        groups = [g for g in groups if unit in g.units()]
        if not groups:
            result: tuple[tuple[Composition, ...], bool] = ((seq,), True)
        else:
            result = unit_candidates(seq, groups, unit)
        return result

    def _prospective(self, event: PrivacyEvent, target: tuple[str, Any] | None = None, *,
                     charging: bool = False) -> tuple[_Change, float | None]:
        """The unit's new state with ``event`` added (to part ``target`` of a group when given)
        and, under a budget, its epsilon. A part's announced members are checked against the
        group's other parts first; ``charging`` (a registration, not a :meth:`check`) also warns,
        once per group, when they could not be."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent; got {type(event).__name__}")
        unit = event.unit
        if unit is Unit.LOCAL:  # per node already: parallel over nodes by construction
            change = _Change(unit, local=self._local.add(event))
            states: tuple[Any, ...] = (change.local,)
        elif target is None:
            seq = self._central.get(unit, Composition()).add(event)
            cands, exact = self._candidates_of(unit, seq=seq)
            change = _Change(unit, seq=seq, candidates=cands, exact=exact)
            states = cands
        else:
            group = self._check_group_open(target[0]).add(target[1], event)
            plan, note = self._check_membership(event, target)  # overlapping parts: refused here
            cands, exact = self._candidates_of(unit, group=group)
            change = _Change(unit, group=group, candidates=cands, exact=exact, members=plan, note=note)
            states = cands
        if unit not in self._budget:
            self._warn_unchecked(target, change, charging)
            return change, None
        eps_budget, delta_budget = self._budget[unit]
        eps = 0.0
        for state in states:
            # the cheap Rényi/GDP rules first: when they already fit, the tighter PLD is not needed
            e = self._epsilon_of(state, delta_budget, use_pld=False)
            if e > eps_budget * (1.0 + _BUDGET_RTOL) and self.pld:
                e = self._epsilon_of(state, delta_budget)
            eps = max(eps, e)
        floor = max(state.min_delta() for state in states)
        where = "" if target is None else f" (part {target[1]!r} of parallel group {target[0]!r})"
        if math.isinf(eps) and delta_budget < floor:
            raise PrivacyBudgetExceeded(
                f"release {event.name!r}{where} refused: unit {unit.value!r} budget "
                f"(epsilon={eps_budget:g}, delta={delta_budget:g}) cannot cover the approximate-DP events' "
                f"delta {floor:g}. Nothing was released."
            )
        if eps > eps_budget * (1.0 + _BUDGET_RTOL):
            raise PrivacyBudgetExceeded(
                f"release {event.name!r}{where} refused: unit {unit.value!r} would reach epsilon={eps:.6g} "
                f"at delta={delta_budget:g}, over its budget epsilon={eps_budget:g}. Nothing was released."
            )
        self._warn_unchecked(target, change, charging)
        return change, eps

    def _warn_unchecked(self, target: tuple[str, Any] | None, change: _Change, charging: bool) -> None:
        """Once per group, before the release is recorded: its part could not be checked."""
        if not charging or target is None or change.note is None:
            return
        membership = self._membership_of().get(target[0])
        if membership is not None and not membership.warned:
            warnings.warn(change.note, UncheckedPartitionWarning, stacklevel=4)
            membership.warned = True

    def _epsilon_of(self, state: Composition | LocalLedger, delta: float, use_pld: bool | None = None) -> float:
        use_pld = self.pld if use_pld is None else use_pld
        if isinstance(state, LocalLedger):
            return state.max_epsilon(delta, conversion=self.conversion, use_pld=use_pld)
        return state.epsilon(delta, conversion=self.conversion, use_pld=use_pld)

    def check(self, event: PrivacyEvent, *, partition: tuple[str, Any] | None = None) -> float | None:
        """Validate ``event`` against the ledger and budget without recording it.

        Returns the unit's epsilon (at the budget's delta) it would lead to, or ``None``
        when the unit has no budget. Raises exactly what :meth:`register` would (with the
        same ``partition``, or the part entered in this thread).
        """
        self._check_owner()
        target = self._resolve_partition(partition)
        with self._lock:
            return self._prospective(event, target)[1]

    def register(self, event: PrivacyEvent, *, partition: tuple[str, Any] | None = None) -> PrivacyEvent:
        """Record one release. Call it **before** drawing the release's noise.

        Args:
            event (PrivacyEvent): the release's cost.
            partition (tuple, optional): ``(group name, part)``: charge the release to a part of
                an open parallel group (see :meth:`parallel`). By default, the part entered
                with ``with part(i):`` in this thread, else none (sequential).

        Raises:
            PrivacyBudgetExceeded: the release would exceed the unit's budget; the ledger
                is unchanged and the caller must not release anything.
            ValueError, TypeError: the event cannot be composed with the ledger, or the
                parallel group is not open.
            LedgerProcessError: this process does not own the ledger (a copy in a forked child,
                a ``DataLoader`` worker, a spawned process; a ``torch.distributed`` rank other
                than 0): nothing is recorded and the caller must not release anything.
        """
        self._check_owner()  # before the lock: an inherited lock may be held by a thread that is gone
        target = self._resolve_partition(partition)
        with self._lock:
            change, _ = self._prospective(event, target, charging=True)
            self._commit(event, change, None if event.unit is Unit.LOCAL else target)  # nothing here can fail
        return event

    def _commit(self, event: PrivacyEvent, change: _Change, target: tuple[str, Any] | None) -> None:
        if change.local is not None:
            self._local = change.local
        else:
            if change.seq is not None:
                self._central[change.unit] = change.seq
            if change.group is not None:
                self._groups[change.group.name] = change.group
                if change.members is not None:
                    self._membership_of().setdefault(change.group.name, GroupMembership()).record(change.members)
            self._candidates[change.unit] = (change.candidates, change.exact)
        group, part = target if target is not None else (None, None)
        last = self._runs[-1] if self._runs else None
        if (last is not None and last.group == group and last.part == part
                and (last.event is event or last.event == event)):
            self._runs[-1] = last._replace(count=last.count + 1)
        else:
            self._runs.append(_Run(event, 1, group, part))
        self._num_events += 1

    # ---------------------------------------------------------------- queries
    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """All recorded events, in order (parallel ones included)."""
        with self._lock:
            return tuple(r.event for r in self._runs for _ in range(r.count))

    def events_of(self, unit: str | Unit) -> tuple[PrivacyEvent, ...]:
        unit = as_unit(unit)
        with self._lock:
            return tuple(r.event for r in self._runs if r.event.unit is unit for _ in range(r.count))

    def __len__(self) -> int:
        with self._lock:
            return self._num_events

    def _delta_for(self, unit: Unit, delta: float | None) -> float:
        if delta is not None:
            return check_delta(delta)
        if unit in self._budget:  # a pure budget (delta 0) is reported as pure DP
            return self._budget[unit][1]
        raise ValueError(f"`delta` is required for unit {unit.value!r} (it has no budget)")

    def epsilon(self, unit: str | Unit, delta: float | None = None) -> float:
        """The composed epsilon of ``unit`` at ``delta`` (default: the unit's budget delta; a
        pure budget gives the pure-DP epsilon).

        For unit ``"local"`` it is the maximum over nodes of each node's own spend; with
        parallel groups, the maximum over their parts (see :meth:`parallel`).
        """
        unit = as_unit(unit)
        with self._lock:
            return self._epsilon_at(unit, self._delta_for(unit, delta))

    def get_epsilon(self, delta: float, *args: Any, unit: str | Unit | None = None) -> float:
        """Opacus' accountant interface (``IAccountant.get_epsilon(delta)``): the epsilon spent at
        ``delta``. ``unit`` (keyword only) may be left out when the ledger holds exactly one unit.
        :meth:`epsilon` takes ``(unit, delta)`` instead."""
        if isinstance(delta, (str, Unit)) or args:
            name = str(delta) if isinstance(delta, (str, Unit)) else (str(args[0]) if args else "edge")
            raise TypeError(f"get_epsilon takes (delta, unit=...) in Opacus' order, with `unit` as a keyword; got "
                            f"{(delta, *args)!r}. Write get_epsilon(1e-5, unit={name!r}) or epsilon({name!r}, 1e-5)")
        with self._lock:
            if unit is None:
                units = sorted({r.event.unit for r in self._runs} | set(self._budget), key=lambda u: u.value)
                if len(units) != 1:
                    raise ValueError(f"the ledger holds units {[u.value for u in units]}: pass `unit=`")
                unit = units[0]
            return self._epsilon_at(as_unit(unit), check_delta(delta))

    def _states(self, unit: Unit) -> tuple[Composition | LocalLedger, ...]:
        if unit is Unit.LOCAL:
            return (self._local,)
        if unit not in self._candidates:
            self._candidates[unit] = self._candidates_of(unit)
        return self._candidates[unit][0]

    def _epsilon_at(self, unit: Unit, delta: float) -> float:
        return max(self._epsilon_of(state, delta) for state in self._states(unit))

    def _planned_epsilon(self, event: PrivacyEvent | list[tuple[PrivacyEvent, int]], delta: float, *,
                         repeat: int = 1, use_pld: bool | None = None, conversion: str | None = None,
                         partition: tuple[str, Any] | None = None, part_only: bool = False) -> float:
        """The unit's epsilon at ``delta`` if ``event`` were charged ``repeat`` more times, sequentially
        (or each ``(event, repeat)`` of a list, in order, all of one unit); nothing is recorded and
        no budget is checked.

        With ``partition=(group, part)`` the events are charged to that part of an open parallel
        group, as a release inside ``part(i)`` will be, and the figure is the group's (its worst
        part, with the releases outside the group). ``part_only``: only the selections through
        that part (the figure's part that grows with the events; see :meth:`_partition_floor`).
        """
        planned = [(event, repeat)] if isinstance(event, PrivacyEvent) else list(event)
        units = {e.unit for e, _ in planned}
        if len(units) != 1 or Unit.LOCAL in units:
            raise ValueError("planned events must all be of one central unit ('edge', 'node' or 'graph')")
        unit = units.pop()
        use_pld = self.pld if use_pld is None else use_pld
        with self._lock:
            if partition is None:
                seq = self._central.get(unit, Composition())
                for e, n in planned:
                    for _ in range(n):
                        seq = seq.add(e)
                states, _ = self._candidates_of(unit, seq=seq)
            else:
                name, key = partition
                group = self._check_group_open(name)
                for e, n in planned:
                    for _ in range(n):
                        group = group.add(key, e)
                if part_only:
                    group = ParallelGroup(name, parts={key: group.parts[key]})
                states, _ = self._candidates_of(unit, group=group)
        return max(s.epsilon(delta, conversion=conversion or self.conversion, use_pld=use_pld) for s in states)

    def _partition_floor(self, unit: str | Unit, delta: float, partition: tuple[str, Any], *,
                         use_pld: bool | None = None, conversion: str | None = None) -> float:
        """The unit's epsilon at ``delta`` over the selections that avoid part ``partition`` of its
        group (the group's other parts, with the releases outside the group): what no release in
        that part can change. 0 when the group has no other part on the unit."""
        unit = as_unit(unit)
        use_pld = self.pld if use_pld is None else use_pld
        with self._lock:
            name, key = partition
            group = self._check_group_open(name)
            others = {k: v for k, v in group.parts.items() if k != key and unit in v}
            if not others:
                return 0.0
            states, _ = self._candidates_of(unit, group=ParallelGroup(name, parts=others))
        return max(s.epsilon(delta, conversion=conversion or self.conversion, use_pld=use_pld) for s in states)

    def _worst(self, unit: Unit, delta: float) -> Composition | LocalLedger:
        return max(self._states(unit), key=lambda state: self._epsilon_of(state, delta))

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

    def composition(self, unit: str | Unit, delta: float | None = None) -> Composition:
        """The running :class:`Composition` of a central unit (``"edge"``, ``"node"`` or ``"graph"``).

        With parallel groups whose parts differ, the unit's cost is a maximum over several
        compositions; this is the one that attains it at ``delta`` (default: the unit's budget
        delta, else ``DEFAULT_REPORT_DELTA``).
        """
        unit = as_unit(unit)
        if unit is Unit.LOCAL:
            raise ValueError("unit 'local' is accounted per node; use node_epsilons() or epsilon('local', delta)")
        with self._lock:
            states = self._states(unit)
            if len(states) == 1:
                return states[0]  # type: ignore[return-value]
            d = check_delta(delta) if delta is not None else self._budget.get(unit, (0, DEFAULT_REPORT_DELTA))[1]
            return self._worst(unit, d or DEFAULT_REPORT_DELTA)  # type: ignore[return-value]

    @property
    def parallel_groups(self) -> dict[str, dict[str, Any]]:
        """``{name: {"parts", "num_events", "closed", "units"}}`` of the parallel groups."""
        with self._lock:
            return {g.name: {"parts": len(g.parts), "num_events": g.num_events, "closed": g.closed,
                             "units": sorted(u.value for u in g.units())} for g in self._groups.values()}

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
        Parallel groups are listed in ``"parallel"`` (parts, events, the worst part and the
        group's own epsilon) and as one line of the event listing.
        """
        with self._lock:
            return self._report(delta)

    def _report(self, delta: float | Mapping[str, float] | None) -> AccountantReport:
        out = AccountantReport()
        used = {r.event.unit for r in self._runs}
        units = [u for u in Unit if u in self._budget or u in used]
        for unit in units:
            if isinstance(delta, Mapping):
                d = delta.get(unit.value, delta.get(unit))
            else:
                d = delta
            if d is None:
                d = self._budget[unit][1] if unit in self._budget else DEFAULT_REPORT_DELTA
            else:
                d = check_delta(d, allow_zero=True)
            states = self._states(unit)
            requested, floor = d, max(state.min_delta() for state in states)
            if d < floor:  # the approximate-DP events need more delta than asked for: answer anyway
                d = floor + (d if d > 0 else floor)
            runs = [r for r in self._runs if r.event.unit is unit]
            row: dict[str, Any] = {
                "epsilon": self._epsilon_at(unit, d),
                "delta": d,
                "num_events": sum(r.count for r in runs),
                "budget": self._budget.get(unit),
                "events": _group_events(runs),
            }
            if d != requested:
                row["requested_delta"] = requested
                row["min_delta"] = floor
            if unit is Unit.LOCAL:
                row["num_nodes"] = self._local.num_nodes
                row["nodes_touched"] = self._local.num_touched
            elif runs:
                worst = self._worst(unit, d)
                row["conversion"] = worst.method(d, conversion=self.conversion, use_pld=self.pld)
                groups = [g for g in self._groups.values() if unit in g.units()]
                if groups:
                    row["parallel"] = [self._group_row(g, unit, d) for g in groups]
                    exact = self._candidates[unit][1]
                    row["conversion"] += (f"; max over disjoint parts of {len(groups)} parallel group(s)"
                                          + ("" if exact else ", bounded by dominating releases"))
            out[unit.value] = row
        return out

    def _group_row(self, group: ParallelGroup, unit: Unit, delta: float) -> dict[str, Any]:
        parts = group.part_compositions(unit)
        eps = {k: c.epsilon(delta, conversion=self.conversion, use_pld=self.pld) for k, c in parts.items()}
        worst = max(eps, key=eps.__getitem__)
        return {"name": group.name, "parts": len(parts), "num_events": group.num_events_of(unit),
                "epsilon": eps[worst], "worst_part": worst, "closed": group.closed}

    # ------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: budgets, conversion, every event and the parallel groups
        (JSON-compatible), taken at one instant (under the lock).

        Each distinct event is stored once (``"events"``); ``"ledger"`` lists the runs of
        consecutive identical releases as ``[event index, count]`` (plus ``group, part`` for a
        parallel release), so a DP-SGD run of many steps costs a few bytes per distinct step.
        """
        with self._lock:
            budget = {u.value: list(b) for u, b in self._budget.items()}
            runs = list(self._runs)
            groups = [{"name": g.name, "closed": g.closed} for g in self._groups.values()]
        table: list[dict[str, Any]] = []
        by_id: dict[int, int] = {}
        by_text: dict[str, int] = {}
        ledger: list[list[Any]] = []
        for run in runs:
            index = by_id.get(id(run.event))
            if index is None:
                as_dict = run.event.to_dict()
                text = json.dumps(as_dict, sort_keys=True)
                index = by_text.get(text)
                if index is None:
                    index = by_text[text] = len(table)
                    table.append(as_dict)
                by_id[id(run.event)] = index
            ledger.append([index, run.count] if run.group is None else [index, run.count, run.group, run.part])
        return {
            "format": _STATE_FORMAT,
            "version": _STATE_VERSION,
            "conversion": self.conversion,
            "pld": self.pld,
            "budget": budget,
            "events": table,
            "ledger": ledger,
            "parallel_groups": groups,
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> "PrivacyAccountant":
        """Rebuild an accountant saved by :meth:`state_dict` (this version or version 1). Every
        event is re-validated and replayed one by one, in order.

        Budgets are restored but not re-checked against the past: a ledger that is over
        its budget loads, and refuses further releases.
        """
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise ValueError("`state` is not a PrivacyAccountant state_dict")
        version = state.get("version")
        if version not in (1, _STATE_VERSION):
            raise ValueError(f"unsupported state_dict version {version!r}")
        acct = cls(budget=None, conversion=state.get("conversion", "balle"), pld=bool(state.get("pld", True)))
        table = [PrivacyEvent.from_dict(e) for e in state.get("events", [])]
        if version == 1:
            runs = [_Run(e, 1) for e in table]
            groups: list[Mapping[str, Any]] = []
        else:
            groups = list(state.get("parallel_groups", []))
            runs = []
            for entry in state.get("ledger", []):
                index, count, *where = entry
                if not (isinstance(index, int) and 0 <= index < len(table)):
                    raise ValueError(f"ledger entry {entry!r} names no stored event")
                if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
                    raise ValueError(f"ledger entry {entry!r}: the count must be a positive int")
                if where and len(where) != 2:
                    raise ValueError(f"ledger entry {entry!r}: expected [event, count] or [event, count, group, part]")
                group, part = (check_group_name(where[0]), check_part_key(where[1])) if where else (None, None)
                runs.append(_Run(table[index], count, group, part))
        for g in groups:
            acct._groups[check_group_name(g["name"])] = ParallelGroup(g["name"])
        acct._replay(runs)
        for g in groups:  # closed only now: the replay charged the parts
            if g.get("closed", True):
                acct._groups[g["name"]] = acct._groups[g["name"]].close()
        for unit, b in state.get("budget", {}).items():
            acct.set_budget(unit, tuple(b) if b[1] > 0 else b[0])
        return acct

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace this accountant's ledger by ``state`` (all-or-nothing); this process becomes
        its owner."""
        self._adopt(PrivacyAccountant.from_state_dict(state))

    def _adopt(self, other: "PrivacyAccountant") -> None:
        """Take over ``other``'s whole state (``other`` must not be used afterwards)."""
        with self._lock:
            lock = self._lock
            self.__dict__.update(other.__getstate__())
            self._lock = lock
            self._candidates = {}

    def __getstate__(self) -> dict[str, Any]:
        # copy the containers themselves under the lock: pickle writes them out later, and a
        # register in between must not reach the copy half-way (runs, groups and compositions
        # are immutable)
        with self._lock:
            state = self.__dict__.copy()
            state["_runs"] = list(self._runs)
            state["_central"] = dict(self._central)
            state["_budget"] = dict(self._budget)
            state["_groups"] = dict(self._groups)
        del state["_lock"]
        state["_candidates"] = {}  # derived; rebuilt on demand
        # the ids announced to parallel groups can reveal edges (a batch's members): never copied or
        # saved. A copy checks only the parts announced to it after it was made
        state["_members"] = {}
        state["_member_key"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # the owner travels with the copy: unpickled in the process that pickled it (a deep copy,
        # a round trip) it is still owned, anywhere else it is not until adopted
        self.__dict__.update({"_owner": None, "_any_rank": False, **state})
        self._lock = threading.RLock()

    def _replay(self, runs: Iterable[_Run]) -> None:
        """Charge saved runs again, event by event and in order, without budget checks."""
        for run in runs:
            event = run.event
            for _ in range(run.count):
                if event.unit is Unit.LOCAL:
                    self._local = self._local.add(event)
                elif run.group is None:
                    self._central[event.unit] = self._central.get(event.unit, Composition()).add(event)
                else:
                    group = self._groups.get(run.group)
                    if group is None:
                        raise ValueError(f"ledger names parallel group {run.group!r} that the state does not list")
                    self._groups[run.group] = group.add(run.part, event)
            self._runs.append(run)
            self._num_events += run.count
        self._candidates = {}

    def __repr__(self) -> str:
        with self._lock:
            budget = ", ".join(f"{u.value}={b}" for u, b in self._budget.items())
            n = self._num_events
            groups = len(self._groups)
        owner = self.__dict__.get("_owner")
        foreign = "" if owner == process_identity() else f", copy of process {(owner or ('?',))[0]}"
        return (f"PrivacyAccountant(events={n}" + (f", budget={{{budget}}}" if budget else "")
                + (f", parallel_groups={groups}" if groups else "") + foreign + ")")


def _group_events(runs: Iterable[_Run]) -> list[dict[str, Any]]:
    """Consecutive events with the same name, mechanism and cost are listed once with a count; the
    releases of a parallel group are listed once, where the group's first release was made."""
    rows: list[dict[str, Any]] = []
    groups: dict[str, dict[str, Any]] = {}
    for run in runs:
        e = run.event
        if run.group is not None:
            row = groups.get(run.group)
            if row is None:
                row = groups[run.group] = {"name": run.group, "mechanism": "parallel composition", "count": 1,
                                           "group": run.group, "_parts": set(), "_events": 0}
                rows.append(row)
            row["_parts"].add(run.part)
            row["_events"] += run.count
            continue
        cost = e.cost_summary()
        if e.num_touched is not None:
            cost += f", {e.num_touched}/{e.num_nodes} nodes"
        last = rows[-1] if rows else None
        if last is not None and "group" not in last and last["name"] == e.name and last["mechanism"] == e.mechanism \
                and last["cost"] == cost:
            last["count"] += run.count
        else:
            rows.append({"name": e.name, "mechanism": e.mechanism, "cost": cost, "count": run.count})
    for row in groups.values():
        parts, n = row.pop("_parts"), row.pop("_events")
        row["cost"] = f"max over {len(parts)} disjoint parts ({n} releases)"
    return rows
