"""How noisy components hand their events to an (optional) accountant."""
from __future__ import annotations

import sys
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from .errors import UntrackedPrivacyWarning
from .events import PrivacyEvent

if TYPE_CHECKING:
    from .accountant import PrivacyAccountant

__all__ = ["charge"]

_warned_objects: "weakref.WeakSet[object]" = weakref.WeakSet()
_warned_names: set[str] = set()


def charge(accountant: "PrivacyAccountant | None", event: PrivacyEvent, owner: object, *,
           claim: Any = None) -> PrivacyEvent:
    """Register ``event`` with ``accountant`` before the owner draws noise.

    With no accountant the release still happens, and a :class:`UntrackedPrivacyWarning`
    is issued once per owner object, so the user knows the cost is not recorded.

    A layer that runs inside the forward of a model prepared by Opacus' ``make_private``
    raises :class:`~pyg_private.accounting.opacus_checks.ReleaseInsideDPSGDError` here, before
    anything is charged (see :func:`~pyg_private.accounting.opacus_checks.check_opacus_model`).
    A release made inside ``with accountant.parallel(...) as part: with part(i):`` is charged
    to part ``i`` (see :meth:`PrivacyAccountant.parallel`).

    ``claim`` (a :class:`~pyg_private.accounting.persistent_ledger.ReleaseClaim` from a re-release guard) goes with
    the registration to an accountant that records releases across processes
    (:class:`~pyg_private.accounting.PersistentPrivacyAccountant`): checked and recorded in the same
    transaction. Other accountants ignore it (the guard then lives in the owner's memory).
    """
    # no model can be under Opacus' make_private before Opacus is imported: the check (and its module,
    # which imports Opacus) only where Opacus has been imported
    if sys.modules.get("opacus") is not None:
        from .opacus_checks import refuse_release_inside_opacus

        refuse_release_inside_opacus(owner)
    if accountant is not None:
        if claim is not None and getattr(accountant, "records_releases", False):
            return accountant.register(event, claim=claim)
        return accountant.register(event)
    try:
        first = owner not in _warned_objects
        _warned_objects.add(owner)
    except TypeError:  # not weak-referenceable (a string label, say)
        first = repr(owner) not in _warned_names
        _warned_names.add(repr(owner))
    if first:
        warnings.warn(
            f"{owner if isinstance(owner, str) else type(owner).__name__} has no accountant: the cost of its releases "
            f"(here {event.cost_summary()} on unit {event.unit.value!r}) is not tracked. "
            "Pass `accountant=PrivacyAccountant(...)` to record it.",
            UntrackedPrivacyWarning,
            stacklevel=3,
        )
    return event
