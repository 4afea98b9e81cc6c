"""Calibrate one release to what is left of a shared budget, keeping room for releases still to come.

A release calibrated at the budget's own ``(epsilon, delta)`` takes the whole budget: a GCON fit
calibrated at ``(8, 1e-4)`` under a budget ``(8, 1e-4)`` leaves nothing for the contractive
aggregation that follows. :func:`largest_affordable_epsilon` asks the accountant itself
(with the same composition it will charge) for the largest target epsilon of the new release
such that the ledger, the release and the ``reserve`` of planned releases still fit the budget.

.. code-block:: python

    acct = PrivacyAccountant(budget={"edge": (8.0, 1e-4)})
    later = gdp_event(unit="edge", mu=layer.mu, name="aggregation")      # planned, not charged
    make = lambda eps: objective_perturbation_event(calibrate_objective_perturbation(epsilon=eps, ...))
    eps = largest_affordable_epsilon(acct, make, reserve=[later])
    # ... fit GCON at (eps, delta); the aggregation still fits afterwards

Inside a part of a parallel group (``with part(i):``) the release will be charged to that part, and
the search asks for the group's figure (its worst part), not for a sequential release on top of it.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Sequence

from .accountant import PrivacyAccountant
from .errors import PrivacyBudgetExceeded
from .events import PrivacyEvent
from .validation import check_epsilon

__all__ = ["largest_affordable_epsilon", "check_plan", "scratch_copy"]


def scratch_copy(accountant: PrivacyAccountant) -> PrivacyAccountant:
    """An in-memory copy of ``accountant`` to try releases on. A subclass's copies may share its
    storage (a :class:`~pyg_private.accounting.persistent_ledger.PersistentPrivacyAccountant`
    deep-copies as a reopening of its file, so an event registered on the copy would be charged to
    the real ledger): those are rebuilt from their ``state_dict`` as a plain accountant."""
    if type(accountant) is PrivacyAccountant:
        return copy.deepcopy(accountant)
    return PrivacyAccountant.from_state_dict(accountant.state_dict())


def check_plan(accountant: PrivacyAccountant, events: Sequence[PrivacyEvent]) -> None:
    """Raise :class:`~pyg_private.accounting.PrivacyBudgetExceeded` now if ``events``, registered one
    after the other, would not fit ``accountant``'s budget; the accountant itself is left untouched
    (the events are tried on a :func:`scratch_copy`). Nothing to check without a budget."""
    if not accountant.budget:
        return
    trial = scratch_copy(accountant)
    for event in events:
        trial.register(event)


def largest_affordable_epsilon(
    accountant: PrivacyAccountant,
    make_event: Callable[[float], PrivacyEvent],
    *,
    reserve: Sequence[PrivacyEvent] = (),
    max_epsilon: float = 100.0,
    rtol: float = 1e-4,
    partition: tuple[str, Any] | None = None,
) -> float:
    """The largest target ``epsilon`` whose event ``make_event(epsilon)`` fits the accountant's budget
    together with the events already recorded and the planned ``reserve`` events.

    Nothing is recorded: the search runs on an in-memory copy of the ledger (of a
    :class:`~pyg_private.accounting.PersistentPrivacyAccountant` too: its copies would be handles
    on the same file, and the planned ``reserve`` would be charged for real). The answer lands on
    the safe side (its event passes :meth:`PrivacyAccountant.check`, in the same part) and within
    ``rtol`` (relative) of the largest such epsilon, assuming the cost of ``make_event(epsilon)``
    grows with ``epsilon``.

    Args:
        accountant: the ledger, with a budget on the unit ``make_event`` charges.
        make_event: builds the release's event from its target epsilon (e.g. a calibration).
        reserve: events of releases that will follow and must still fit; planned as sequential
            releases (the safe side, wherever they will be made).
        max_epsilon: the largest target tried.
        rtol: relative precision.
        partition: ``(group name, part)`` of an open parallel group the release will be charged to
            (default: the part entered in this thread, if any): the group then costs its worst part.

    Raises:
        ValueError: the unit has no budget, or ``reserve`` alone no longer fits, or not even a
            target of ``max_epsilon * 1e-9`` fits.
    """
    if not isinstance(accountant, PrivacyAccountant):
        raise TypeError(f"`accountant` must be a PrivacyAccountant; got {type(accountant).__name__}")
    hi = check_epsilon(max_epsilon, "max_epsilon")
    where = accountant._resolve_partition(partition)  # the copy is another object: the part is named for it
    # an in-memory copy: a subclass's copies (a persistent ledger's) may share its storage
    trial = scratch_copy(accountant)
    for ev in reserve:
        try:
            trial.register(ev)
        except PrivacyBudgetExceeded as err:
            raise ValueError(f"the planned `reserve` release {ev.name!r} no longer fits the budget: {err}") from None

    def fits(eps: float) -> bool:
        event = make_event(eps)
        if event.unit.value not in trial.budget:
            raise ValueError(f"unit {event.unit.value!r} has no budget in the accountant: nothing to calibrate to")
        try:
            trial.check(event, partition=where)
        except PrivacyBudgetExceeded:
            return False
        return True

    if fits(hi):
        return hi
    lo = hi * 1e-9
    if not fits(lo):
        raise ValueError(f"not even epsilon={lo:g} fits what is left of the budget (with the reserve)")
    while hi - lo > rtol * lo:  # bisection in log space: fits(lo) holds throughout
        mid = math.sqrt(lo * hi)
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
