"""Copy and pickle protocols of the noisy transforms, as for the release layers: a deep copy
(``copy.deepcopy`` of a ``T.Compose`` or of a dataset's transform) charges the **same** accountant
and continues the same generator (one ledger for the real data, no duplicated noise stream); a
pickle or ``torch.save`` drops the generator, whose state would let whoever holds the file recompute
the noise of past releases."""
from __future__ import annotations

import copy
from typing import Any

__all__ = ["SharedLedgerCopy"]


class SharedLedgerCopy:
    """Mixin for transforms with ``accountant`` and ``generator`` attributes."""

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
