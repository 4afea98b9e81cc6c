"""Copy and pickle protocols of the noisy transforms, as for the release layers: a deep copy
(``copy.deepcopy`` of a ``T.Compose`` or of a dataset's transform) charges the **same** accountant
and continues the same generator (one ledger for the real data, no duplicated noise stream); a
pickle or ``torch.save`` drops the generator, whose state would let whoever holds the file recompute
the noise of past releases.

**Processes.** A transform's re-release guard (its memory of the inputs it released) lives in
the process that built it. A copy in another process (a ``DataLoader`` worker's, a forked or
spawned child's, or one ``torch.load``-ed in a new run) cannot see what the original or the other
copies released, so a copy refuses to release, before any noise is drawn
(:class:`~pyg_private.accounting.LedgerProcessError`), unless

* its accountant shares the ledger between processes
  (:class:`~pyg_private.accounting.PersistentPrivacyAccountant`): the guard's fingerprints are then
  kept in the ledger's file, checked and recorded in the transaction that charges the release
  (:class:`~pyg_private.accounting.persistent_ledger.ReleaseClaim`); every copy of one transform shares them;
* its accountant is an in-memory one that this process owns (made or restored here on purpose,
  :meth:`~pyg_private.accounting.PrivacyAccountant.adopt`): the copy's guard then starts here;
* ``allow_recompose=True`` (no guard: every release is charged again).

A copy made in the same process (``copy.deepcopy``, a pickle round trip) is still at home.
"""
from __future__ import annotations

import copy
import secrets
from typing import Any, Optional

import numpy as np

from ..accounting.errors import LedgerProcessError
from ..accounting.persistent_ledger import ReleaseClaim
from ..accounting.processes import describe_process, process_identity

__all__ = ["SharedLedgerCopy"]


class SharedLedgerCopy:
    """Mixin for transforms with ``accountant`` and ``generator`` attributes."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__new__(cls)
        # before __init__ and before __setstate__, which brings the original's values along
        obj.__dict__["_guard_owner"] = process_identity()  # where the re-release guard's memory lives
        obj.__dict__["_guard_id"] = secrets.token_hex(16)  # names this transform's fingerprints in a shared ledger
        return obj

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        for shared in (getattr(self, "accountant", None), getattr(self, "generator", None)):
            if shared is not None:
                memo.setdefault(id(shared), shared)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if state.get("generator") is not None:
            state["generator"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # ------------------------------------------------------------- processes
    def _shares_releases(self) -> bool:
        """Whether the accountant keeps the re-release guard for every process (a shared ledger)."""
        return bool(getattr(getattr(self, "accountant", None), "records_releases", False))

    def _check_release_process(self) -> None:
        """Raise :class:`LedgerProcessError` when this process cannot rely on the in-memory guard
        (see the module's docstring). Call it before charging, unless ``allow_recompose``."""
        here = process_identity()
        owner = self.__dict__.get("_guard_owner")
        if owner == here or self._shares_releases():
            return
        accountant = getattr(self, "accountant", None)
        if accountant is not None and accountant.is_owner:  # the ledger was taken over here on purpose
            self.__dict__["_guard_owner"] = here
            return
        name = type(self).__name__
        raise LedgerProcessError(
            f"{name} runs in {describe_process()}, but it was built in process "
            f"{owner[0] if owner else '?'}: it is a copy (a DataLoader worker's, a forked or spawned process's), "
            "and its memory of the inputs it released stays with the original. Copies would release the same data "
            "again at every epoch, each unaware of the others (averaging the releases removes the noise); the "
            "release is refused before any noise is drawn. Fix: give it accountant=PersistentPrivacyAccountant(path) "
            "(the ledger and this guard are then shared by every process), or perturb in the main process (as "
            "pre_transform=, or once before the loader, or DataLoader(num_workers=0)). allow_recompose=True "
            "releases anyway, charged again each time"
        )

    def _release_claim(self, parts: tuple, nodes: np.ndarray, message: str) -> Optional[ReleaseClaim]:
        """The claim a shared ledger checks and records with the release (``None`` for other
        accountants): ``parts`` identify the input (hashed under the ledger's key), ``nodes`` are
        the rows released, ``message`` the refusal (``{count}``: rows released before)."""
        if not self._shares_releases():
            return None
        return ReleaseClaim(self.__dict__["_guard_id"], parts, np.asarray(nodes, dtype=bool),
                            enforce=not getattr(self, "allow_recompose", False), message=message)
