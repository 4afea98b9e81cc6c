"""An in-memory ledger belongs to one process: a copy charged anywhere else raises before any noise.

The rule: the process that built the accountant (constructor, ``from_state_dict``) or took it over
explicitly (``adopt()``, ``load_state_dict``) owns it; a copy in the same process (deepcopy, pickle
round trip) is still owned; a copy in another process (inherited by fork, unpickled there) is not.
Under ``torch.distributed`` only rank 0 charges an in-memory ledger (tested with real ranks in
``test_processes_spawn.py``)."""
from __future__ import annotations

import copy
import io
import multiprocessing
import pickle
import sys

import pytest
import torch

from pyg_private import PrivacyAccountant
from pyg_private.accounting import LedgerProcessError, PersistentPrivacyAccountant, laplace_event
from pyg_private.mechanisms import LaplaceMechanism

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses the fork start method")

FORK = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
EVENT = laplace_event(scale=2.0, sensitivity=1.0, unit="edge", name="count")
ACCT = None  # the accountant the pool's children inherit


def _pool(n: int):
    # one intra-op thread in the children: an OpenMP pool inherited through fork can hang
    return FORK.Pool(n, initializer=torch.set_num_threads, initargs=(1,))


def _two_releases(_: int) -> list[str]:
    """Two releases of eps 0.5 in a forked child; for each, its outcome and whether noise was drawn."""
    out = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(1)
        before = gen.get_state()
        try:
            LaplaceMechanism(1.0, epsilon=0.5, accountant=ACCT, generator=gen)(torch.tensor([10.0]))
            out.append("released")
        except LedgerProcessError:
            out.append("refused, noise drawn" if not torch.equal(gen.get_state(), before) else "refused")
    return out


def test_the_owner_and_its_same_process_copies_charge():
    acct = PrivacyAccountant(budget={"edge": 10.0})
    acct.register(EVENT)
    buffer = io.BytesIO()
    torch.save(acct, buffer)
    buffer.seek(0)
    copies = [copy.deepcopy(acct), pickle.loads(pickle.dumps(acct)), torch.load(buffer, weights_only=False)]
    for c in copies:
        assert c.is_owner
        c.register(EVENT)
        assert len(c) == 2 and "copy of process" not in repr(c)
    assert len(acct) == 1  # copies are copies


def test_fork_pool_in_memory_copies_refuse_before_noise():
    global ACCT
    ACCT = PrivacyAccountant(budget={"edge": 1.0})  # pure: two releases of 0.5 fit
    with _pool(4) as pool:
        outcomes = pool.map(_two_releases, range(4), chunksize=1)
    assert outcomes == [["refused", "refused"]] * 4  # 0 of 8 released; before: 8 of 8 (true eps 4.0)
    assert len(ACCT) == 0
    assert ACCT.is_owner
    LaplaceMechanism(1.0, epsilon=0.5, accountant=ACCT)(torch.tensor([10.0]))  # the owner still charges
    assert len(ACCT) == 1


def _restore_in_child(blob: bytes, state: dict) -> dict:
    out = {}
    loaded = pickle.loads(blob)  # an implicit copy (as spawn args or a DataLoader worker receive it)
    out["is_owner"] = loaded.is_owner
    try:
        loaded.check(EVENT)
    except LedgerProcessError as e:
        out["check"] = str(e)
    try:
        loaded.register(EVENT)
    except LedgerProcessError as e:
        out["register"] = str(e)
    out["events_before_adopt"] = len(loaded)  # reading a copy is allowed
    restored = PrivacyAccountant.from_state_dict(state)  # explicit restores adopt the ledger
    restored.register(EVENT)
    into = PrivacyAccountant()
    into.load_state_dict(state)
    into.register(EVENT)
    loaded.adopt().register(EVENT)
    out["lengths"] = [len(restored), len(into), len(loaded)]
    return out


def test_a_copy_in_another_process_refuses_until_restored_or_adopted():
    acct = PrivacyAccountant()
    acct.register(EVENT)
    with _pool(1) as pool:
        out = pool.apply(_restore_in_child, (pickle.dumps(acct), acct.state_dict()))
    assert out["is_owner"] is False
    for key in ("check", "register"):
        msg = out[key]
        assert "PersistentPrivacyAccountant" in msg and "num_workers=0" in msg and "adopt()" in msg
        assert "before any noise" in msg
    assert out["events_before_adopt"] == 1
    assert out["lengths"] == [2, 2, 2]


def _own_accountant(_: int) -> int:
    acct = PrivacyAccountant()  # built in the child: the child's own
    acct.register(EVENT)
    return len(acct)


def test_an_accountant_built_in_a_child_is_the_childs():
    with _pool(1) as pool:
        assert pool.map(_own_accountant, [0]) == [1]


def test_a_pickle_of_an_older_version_must_be_adopted():
    acct = PrivacyAccountant()
    state = acct.__getstate__()
    del state["_owner"], state["_any_rank"]
    old = PrivacyAccountant.__new__(PrivacyAccountant)
    old.__setstate__(state)
    with pytest.raises(LedgerProcessError, match="no known process"):
        old.register(EVENT)
    assert len(old) == 0
    old.adopt().register(EVENT)
    assert len(old) == 1


def test_a_rank_other_than_zero_refuses_an_in_memory_ledger(monkeypatch):
    import pyg_private.accounting.accountant as accountant_module

    monkeypatch.setattr(accountant_module, "distributed_rank", lambda: 1)
    acct = PrivacyAccountant()
    with pytest.raises(LedgerProcessError, match="rank 1") as info:
        acct.register(EVENT)
    assert "rank == 0" in str(info.value) and "PersistentPrivacyAccountant" in str(info.value)
    assert len(acct) == 0
    acct.adopt(any_rank=True).register(EVENT)  # a subgroup's root keeping its own ledger, on purpose
    assert len(acct) == 1
    with pytest.raises(TypeError, match="any_rank"):
        acct.adopt(any_rank="yes")
    monkeypatch.setattr(accountant_module, "distributed_rank", lambda: 0)
    PrivacyAccountant().register(EVENT)


def test_a_persistent_ledger_is_shared_by_every_rank(monkeypatch, tmp_path):
    import pyg_private.accounting.accountant as accountant_module

    monkeypatch.setattr(accountant_module, "distributed_rank", lambda: 1)
    acct = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite")
    acct.register(EVENT)
    assert acct.is_owner and len(acct) == 1
