r"""The privacy ledger in a training checkpoint (PyTorch Lightning, or a plain ``torch.save``).

A model's ``state_dict`` carries its cached releases (the layers' ``_extra_state``, see
:mod:`pyg_private.nn._release_cache`) but not the accountant that paid for them: a run resumed from
a checkpoint into a fresh accountant would reuse the releases while its ledger shows nothing
spent, and its budget would allow the whole budget again. Save the ledger with the checkpoint and
restore it into the resumed run's accountant, before it releases anything.

With Lightning, mix :class:`AccountantCheckpoint` into the ``LightningModule`` (first, so that its
hooks run): ``on_save_checkpoint`` writes every accountant of the module into the checkpoint under
``"pyg_private_accountants"``, and ``on_load_checkpoint`` (``trainer.fit(model, ckpt_path=...)``,
``MyModule.load_from_checkpoint(...)``) restores it in place, so the layers, which hold the
accountant object, continue the same ledger::

    class Model(AccountantCheckpoint, L.LightningModule):
        def __init__(self, accountant):
            super().__init__()
            self.net = PrecomputedPropagation(ContractiveGraphLayer(..., accountant=accountant), head)

Without Lightning::

    torch.save({"model": model.state_dict(), "privacy": accountant_checkpoint(model)}, path)
    ...
    state = torch.load(path)
    model.load_state_dict(state["model"])
    restore_accountants(model, state["privacy"])   # before the first release of the resumed run

(or save ``acct.state_dict()`` and call ``acct.load_state_dict(...)`` yourself). The ledger is
restored only into an accountant that has recorded nothing yet (or already holds exactly the saved
ledger): replacing releases it has recorded would lose them. A budget set on the resumed
accountant is kept; the saved budgets fill in the units it does not set.
"""
from __future__ import annotations

import json
import warnings
from typing import Any, Mapping

from torch import nn

from ..accounting import PrivacyAccountant

__all__ = ["AccountantCheckpoint", "accountant_checkpoint", "accountants_of", "restore_accountants",
           "CHECKPOINT_KEY"]

#: Where :class:`AccountantCheckpoint` keeps the ledger in a Lightning checkpoint.
CHECKPOINT_KEY = "pyg_private_accountants"
_FORMAT = "pyg_private.accountant_checkpoint"
_VERSION = 1


def accountants_of(module: nn.Module) -> list[PrivacyAccountant]:
    """The distinct accountants a module and its submodules hold (an ``accountant`` of a layer, or any
    attribute that is a :class:`~pyg_private.accounting.PrivacyAccountant`), in module order."""
    found: dict[int, PrivacyAccountant] = {}
    for sub in module.modules():
        for value in vars(sub).values():
            if isinstance(value, PrivacyAccountant):
                found.setdefault(id(value), value)
    return list(found.values())


def accountant_checkpoint(module: nn.Module) -> dict[str, Any]:
    """The ledgers of :func:`accountants_of` ``(module)``, JSON-compatible, for a checkpoint."""
    return {"format": _FORMAT, "version": _VERSION,
            "accountants": [acct.state_dict() for acct in accountants_of(module)]}


def _ledger(state: Mapping[str, Any]) -> str:
    return json.dumps({k: state.get(k) for k in ("events", "ledger", "parallel_groups")}, sort_keys=True)


def restore_accountants(module: nn.Module, state: Mapping[str, Any]) -> None:
    """Restore the ledgers saved by :func:`accountant_checkpoint` into the module's accountants, in
    place (the layers keep their accountant objects), before the resumed run releases anything.

    Raises:
        ValueError: the state is not such a checkpoint, the module holds another number of
            accountants, or an accountant has already recorded releases that the saved ledger does
            not hold (restoring would replace them). Nothing is changed then.
    """
    if not isinstance(state, Mapping) or state.get("format") != _FORMAT:
        raise ValueError("`state` is not a pyg_private accountant checkpoint (see accountant_checkpoint)")
    if state.get("version") != _VERSION:
        raise ValueError(f"unsupported accountant checkpoint version {state.get('version')!r}")
    saved = list(state.get("accountants") or [])
    live = accountants_of(module)
    if len(saved) != len(live):
        raise ValueError(f"the checkpoint holds {len(saved)} ledger(s) but the module has {len(live)} accountant(s); "
                         "build the model with the same accountants as the run that saved it")
    todo = []
    for acct, ledger in zip(live, saved):
        if len(acct) == 0:
            todo.append((acct, ledger))
        elif _ledger(acct.state_dict()) != _ledger(ledger):
            raise ValueError(
                f"the accountant already records {len(acct)} release(s) that the checkpoint's ledger does not hold; "
                "restoring would replace them. Restore the checkpoint into a fresh accountant, before the resumed "
                "run releases anything")
    for _, ledger in todo:  # all-or-nothing: every ledger is validated before any accountant changes
        PrivacyAccountant.from_state_dict(ledger)
    for acct, ledger in todo:
        budget = acct.budget  # the resumed run's budgets win; the saved ones fill in the other units
        acct.load_state_dict(ledger)
        for unit, value in budget.items():
            acct.set_budget(unit, tuple(value) if value[1] > 0 else value[0])


def _charged_releases(checkpoint: Mapping[str, Any]) -> int:
    """How many charged cached releases a Lightning checkpoint's ``state_dict`` holds."""
    count = 0
    for key, value in (checkpoint.get("state_dict") or {}).items():
        if key.endswith("_extra_state") and isinstance(value, Mapping) and \
                value.get("format") == "pyg_private.cached_release":
            release = value.get("release")
            count += bool(isinstance(release, Mapping) and release.get("charged"))
    return count


class AccountantCheckpoint:
    """Mixin for a ``lightning.pytorch.LightningModule`` (put it first among the bases): its checkpoints
    carry the privacy ledger of every accountant the module holds, and a resumed run continues it
    (see the module notes). No Lightning import is needed; the hooks are Lightning's
    ``on_save_checkpoint(checkpoint)`` and ``on_load_checkpoint(checkpoint)``."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        parent = getattr(super(), "on_save_checkpoint", None)
        if callable(parent):
            parent(checkpoint)
        checkpoint[CHECKPOINT_KEY] = accountant_checkpoint(self)  # type: ignore[arg-type]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        parent = getattr(super(), "on_load_checkpoint", None)
        if callable(parent):
            parent(checkpoint)
        state = checkpoint.get(CHECKPOINT_KEY)
        if state is None:
            count = _charged_releases(checkpoint)
            if count:
                warnings.warn(f"the checkpoint holds {count} charged release(s) but no privacy ledger (it was not "
                              "saved by AccountantCheckpoint): the resumed run reuses them while its accountant does "
                              "not record their cost. Restore the ledger saved with them (acct.load_state_dict(...)).",
                              UserWarning, stacklevel=2)
            return
        restore_accountants(self, state)  # type: ignore[arg-type]
