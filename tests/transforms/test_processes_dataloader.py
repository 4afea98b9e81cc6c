"""A noisy transform as a dataset's ``transform=`` under ``DataLoader(num_workers=2)``.

Before: 30 epochs released the same features 30 times (one per epoch, in fresh workers), the parent's
ledger held 0 events, and averaging the releases cut the error from 22.4 to 4.1 (RMSE). Now the
worker raises before any noise with the in-memory accountant (the error reaches the parent), and
with a persistent ledger the workers behave as ``num_workers=0`` does: the first epoch is charged
once per graph, every later epoch is refused."""
from __future__ import annotations

import math
import sys

import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import LedgerProcessError, PersistentPrivacyAccountant
from pyg_private.transforms import HDSFeaturePerturb, LaplaceFeaturePerturb

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DataLoader workers by fork"),
              pytest.mark.filterwarnings("ignore::pyg_private.accounting.UntrackedPrivacyWarning")]

N, D, GRAPHS, EPOCHS = 50, 8, 4, 30
_gen = torch.Generator().manual_seed(0)
# one node_id range per graph: the users of different graphs are different people
DATA = [Data(x=torch.rand(N, D, generator=_gen), node_id=torch.arange(g * N, (g + 1) * N), num_nodes=N)
        for g in range(GRAPHS)]


class Graphs(Dataset):
    """``transform=`` semantics: the transform runs at every access."""

    def __init__(self, transform) -> None:
        self.transform = transform

    def __len__(self) -> int:
        return GRAPHS

    def __getitem__(self, i: int):
        return i, self.transform(DATA[i]).x


def epochs(transform, workers: int, n: int = EPOCHS) -> tuple[dict[int, list[torch.Tensor]], list[tuple[type, str]]]:
    """Run ``n`` epochs, keeping every release and every epoch's error (type and message)."""
    loader = DataLoader(Graphs(transform), batch_size=None, num_workers=workers)
    released: dict[int, list[torch.Tensor]] = {g: [] for g in range(GRAPHS)}
    errors = []
    for _ in range(n):
        try:
            for i, x in loader:
                released[i].append(x)
        except Exception as e:  # noqa: BLE001 - what the loader re-raises from the workers
            errors.append((type(e), str(e)))
            e.__traceback__ = None  # its frames hold the epoch's iterator: let it shut its workers down now
    return released, errors


def rmse(released: dict[int, list[torch.Tensor]]) -> float:
    err = [((torch.stack(released[g]).mean(0) - (2 * DATA[g].x - 1)) ** 2).mean() for g in range(GRAPHS)]
    return math.sqrt(sum(err) / GRAPHS)


def test_an_in_memory_accountant_refuses_in_the_workers():
    acct = PrivacyAccountant(budget={"local": 1.0})
    transform = LaplaceFeaturePerturb(1.0, feature_range=(0.0, 1.0), accountant=acct)
    released, errors = epochs(transform, workers=2)
    assert all(not r for r in released.values())  # nothing released in any epoch
    assert len(errors) == EPOCHS and all(kind is LedgerProcessError for kind, _ in errors)
    assert "PersistentPrivacyAccountant" in errors[0][1] and "DataLoader worker" in errors[0][1]
    assert "before any noise" in errors[0][1]
    assert len(acct) == 0
    Graphs(transform)[0]  # the owner still releases (once)
    assert len(acct) == 1


@pytest.mark.parametrize("workers", [0, 2])
def test_thirty_epochs_with_a_persistent_ledger_charge_once_as_with_no_workers(tmp_path, workers):
    acct = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite", budget={"local": 1.0})
    transform = LaplaceFeaturePerturb(1.0, feature_range=(0.0, 1.0), accountant=acct)
    released, errors = epochs(transform, workers)
    assert [len(r) for r in released.values()] == [1] * GRAPHS  # the first epoch only
    assert len(errors) == EPOCHS - 1 and all(kind is ValueError for kind, _ in errors)
    assert "already released these exact raw features" in errors[0][1]
    assert len(acct) == GRAPHS  # one event per graph, charged by the workers
    assert acct.epsilon("local") == pytest.approx(1.0)
    assert 18.0 < rmse(released) < 27.0  # one release of scale 16 per graph (sd 22.6): no averaging


@pytest.mark.parametrize("budget, allow_recompose, refusal", [
    (100.0, False, ValueError),  # only the guard (its fingerprints in the file) refuses
    (1.0, True, PrivacyBudgetExceeded),  # no guard: the budget, checked against every worker's events
])
def test_the_guard_and_the_budget_hold_across_workers(tmp_path, budget, allow_recompose, refusal):
    acct = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite", budget={"local": budget})
    transform = LaplaceFeaturePerturb(1.0, feature_range=(0.0, 1.0), accountant=acct, allow_recompose=allow_recompose)
    released, errors = epochs(transform, workers=2, n=3)
    assert [len(r) for r in released.values()] == [1] * GRAPHS
    assert [kind for kind, _ in errors] == [refusal, refusal]
    assert len(acct) == GRAPHS


def test_a_transform_without_accountant_refuses_in_the_workers_unless_told():
    guarded = HDSFeaturePerturb(1.0, 2, feature_range=(0.0, 1.0))
    released, errors = epochs(guarded, workers=2, n=3)
    assert len(errors) == 3 and all(kind is LedgerProcessError for kind, _ in errors)
    assert "allow_recompose=True" in errors[0][1]
    anyway = HDSFeaturePerturb(1.0, 2, feature_range=(0.0, 1.0), allow_recompose=True)
    released, errors = epochs(anyway, workers=2, n=3)
    assert not errors and [len(r) for r in released.values()] == [3] * GRAPHS  # as asked: untracked


def test_a_copy_adopted_with_its_ledger_starts_its_guard_here():
    import pickle

    acct = PrivacyAccountant()
    transform = LaplaceFeaturePerturb(1.0, feature_range=(0.0, 1.0), accountant=acct)
    copy_ = pickle.loads(pickle.dumps(transform))  # in this process: still at home
    copy_(DATA[0])
    assert len(copy_.accountant) == 1
    inherited = pickle.loads(pickle.dumps(transform))
    inherited.__dict__["_guard_owner"] = (0, "another process")  # as if unpickled elsewhere
    inherited.accountant.__dict__["_owner"] = (0, "another process")
    with pytest.raises(LedgerProcessError, match="built in process 0"):
        inherited(DATA[0])
    inherited.accountant.adopt()  # a restore on purpose: the guard starts here
    inherited(DATA[0])
    with pytest.raises(ValueError, match="already released"):
        inherited(DATA[0])
