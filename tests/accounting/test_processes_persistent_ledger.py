"""PersistentPrivacyAccountant: one ledger in a SQLite file that every process opens.

Each registration is one transaction (budget checked against every committed event, then inserted),
so processes cannot both pass one budget; the file survives kill -9 with nothing lost or doubled;
it pickles as its path."""
from __future__ import annotations

import copy
import io
import multiprocessing
import os
import pickle
import random
import signal
import sqlite3
import sys
import threading

import numpy as np
import pytest
import torch

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import PersistentPrivacyAccountant, gaussian_event, laplace_event
from pyg_private.accounting.persistent_ledger import ReleaseClaim
from pyg_private.mechanisms import LaplaceMechanism

LINUX = sys.platform.startswith("linux")
FORK = multiprocessing.get_context("fork") if LINUX else None
needs_fork = pytest.mark.skipif(not LINUX, reason="uses the fork start method")


def lap(name: str = "count", scale: float = 2.0, unit: str = "edge"):
    return laplace_event(scale=scale, sensitivity=1.0, unit=unit, name=name)


def local(nodes, name: str = "ldp"):
    return laplace_event(scale=1.0, sensitivity=1.0, unit="local", name=name, nodes=np.asarray(nodes), num_nodes=6)


def fill(acct: PrivacyAccountant) -> None:
    """The same releases on any accountant: sequential, parallel, local, Gaussian."""
    acct.register(lap())
    acct.register(lap())
    acct.register(gaussian_event(noise_std=3.0, sensitivity=1.0, unit="node", name="gauss"))
    with acct.parallel("epoch-0") as part:
        for i in range(3):
            with part(i):
                acct.register(lap(f"batch-{i}"))
    acct.register(local([0, 1, 2]))
    acct.register(local([2, 3]))


def test_the_file_holds_what_an_in_memory_ledger_holds(tmp_path):
    budget = {"edge": (20.0, 1e-5), "local": 5.0}
    disk = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite", budget=budget)
    memory = PrivacyAccountant(budget=budget)
    fill(disk)
    fill(memory)
    assert disk.state_dict() == memory.state_dict()
    assert str(disk.report()) == str(memory.report())
    assert disk.epsilon("edge") == memory.epsilon("edge") and len(disk) == len(memory) == 8
    assert disk.parallel_groups == memory.parallel_groups
    again = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite")  # a restart: replayed from the file
    assert again.state_dict() == memory.state_dict()
    assert list(again.node_epsilons()) == list(memory.node_epsilons())
    loaded = PrivacyAccountant.from_state_dict(again.state_dict())  # exported in the usual format
    assert loaded.state_dict() == memory.state_dict()


def test_reopening_by_path_resumes_and_keeps_the_budget(tmp_path):
    path = tmp_path / "ledger.sqlite"
    first = PersistentPrivacyAccountant(path, budget={"edge": 1.0})
    first.register(lap())
    assert PersistentPrivacyAccountant(path, budget={"edge": 1.0}).budget == {"edge": (1.0, 0.0)}
    with pytest.raises(ValueError, match="has the budget"):
        PersistentPrivacyAccountant(path, budget={"edge": 2.0})
    with pytest.raises(ValueError, match="conversion"):
        PersistentPrivacyAccountant(path, conversion="standard")
    second = PersistentPrivacyAccountant(path)  # the file's budget
    second.register(lap())
    with pytest.raises(PrivacyBudgetExceeded):
        first.register(lap())  # 0.5 + 0.5 spent, by two handles
    first.set_budget("edge", 2.0)  # for every handle
    assert second.budget == {"edge": (2.0, 0.0)}
    second.register(lap())
    assert len(first) == 3 and first.epsilon("edge") == pytest.approx(1.5)


def test_it_pickles_and_copies_as_its_path(tmp_path):
    acct = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite")
    acct.register(lap())
    blob = pickle.dumps(acct)
    assert len(blob) < 500 and os.fsencode(acct.path) in blob  # the path, not the ledger
    buffer = io.BytesIO()
    torch.save(acct, buffer)
    buffer.seek(0)
    handles = [pickle.loads(blob), copy.deepcopy(acct), torch.load(buffer, weights_only=False)]
    for h in handles:
        h.register(lap())
    assert len(acct) == 4 and all(len(h) == 4 for h in handles)
    os.remove(acct.path)
    with pytest.raises(FileNotFoundError, match="refusing to start an empty one"):
        pickle.loads(blob)  # a worker never starts a new empty ledger in place of a lost one
    with pytest.raises(TypeError, match="load_state_dict"):
        PersistentPrivacyAccountant.from_state_dict(PrivacyAccountant().state_dict())


def test_a_refused_registration_leaves_the_file_unchanged(tmp_path):
    acct = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite", budget={"edge": 1.0})
    acct.register(lap(scale=1.0))
    before = acct.state_dict()
    with pytest.raises(PrivacyBudgetExceeded):
        acct.register(lap(scale=1.0))
    with pytest.raises(TypeError):
        acct.register("not an event")
    with pytest.raises(ValueError, match="not open"):
        acct.register(lap(), partition=("nowhere", 0))
    assert PersistentPrivacyAccountant(acct.path).state_dict() == before
    with sqlite3.connect(acct.path) as conn:
        assert conn.execute("SELECT count(*) FROM ledger").fetchone()[0] == 1


def test_import_into_an_empty_file_and_a_ledger_that_only_grows(tmp_path):
    memory = PrivacyAccountant(budget={"edge": (20.0, 1e-5)})
    fill(memory)
    state = memory.state_dict()
    disk = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite")
    disk.load_state_dict(state)
    assert disk.state_dict() == state
    disk.register(lap())  # spent after the checkpoint
    disk.load_state_dict(state)  # resuming the checkpoint: the file keeps what was spent since
    assert len(disk) == 9
    other = PrivacyAccountant()
    other.register(lap("another"))
    with pytest.raises(ValueError, match="only grows"):
        disk.load_state_dict(other.state_dict())
    assert len(disk) == 9


def test_threads_cannot_overrun_the_budget(tmp_path):
    acct = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite", budget={"edge": 5.0})
    handles = [acct, copy.deepcopy(acct)]  # two connections to the file, in one process
    outcomes: list[bool] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        for _ in range(3):
            try:
                handles[i % 2].register(lap(scale=2.0))  # 0.5 each: 10 fit
                outcomes.append(True)
            except PrivacyBudgetExceeded:
                outcomes.append(False)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(outcomes) == 10 and len(acct) == 10 and acct.epsilon("edge") == pytest.approx(5.0)


# --------------------------------------------------------------------------- processes
LEDGER = None


def _two_releases(_: int) -> int:
    done = 0
    for _ in range(2):
        try:
            LaplaceMechanism(1.0, epsilon=0.5, accountant=LEDGER)(torch.tensor([10.0]))
            done += 1
        except PrivacyBudgetExceeded:
            pass
    return done


@needs_fork
def test_fork_pool_only_what_the_budget_allows(tmp_path):
    global LEDGER
    LEDGER = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite", budget={"edge": 1.0})
    LEDGER.report()  # the parent's handle is open (and its connection) when the pool forks
    with FORK.Pool(4, initializer=torch.set_num_threads, initargs=(1,)) as pool:
        done = pool.map(_two_releases, range(4), chunksize=1)
    assert sum(done) == 2  # of 8 tries at eps 0.5 against a pure budget of 1.0 (before: 8, true eps 4.0)
    assert len(LEDGER) == 2 and LEDGER.epsilon("edge") == pytest.approx(1.0)
    pids = {pid for (pid,) in sqlite3.connect(LEDGER.path).execute("SELECT pid FROM ledger")}
    assert os.getpid() not in pids  # charged by the children, seen by the parent
    with pytest.raises(PrivacyBudgetExceeded):
        LaplaceMechanism(1.0, epsilon=0.5, accountant=LEDGER)(torch.tensor([10.0]))


def _register_until_killed(path: str, start: int, fd: int) -> None:
    acct = PersistentPrivacyAccountant(path, create=False)
    i = start
    while True:
        os.write(fd, f"b {i}\n".encode())  # about to register step i
        acct.register(lap(f"step-{i}"))
        os.write(fd, f"c {i}\n".encode())  # step i committed
        i += 1


@needs_fork
def test_kill_9_between_registrations_loses_and_doubles_nothing(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    PersistentPrivacyAccountant(path)
    rng = random.Random(0)
    total = 0
    for _ in range(6):
        read_fd, write_fd = os.pipe()
        child = FORK.Process(target=_register_until_killed, args=(path, total, write_fd))
        child.start()
        os.close(write_fd)
        wanted, committed, began, buf = rng.randint(1, 25), [], [], b""
        with os.fdopen(read_fd, "rb") as pipe:
            while len(committed) < wanted:
                line = pipe.readline()
                assert line, "the child died on its own"
                kind, i = line.split()
                (committed if kind == b"c" else began).append(int(i))
            os.kill(child.pid, signal.SIGKILL)  # somewhere in the next registrations
            child.join()
            buf = pipe.read()  # what it reported before dying
        for line in buf.splitlines():
            kind, i = line.split()
            (committed if kind == b"c" else began).append(int(i))
        names = [e.name for e in PersistentPrivacyAccountant(path, create=False).events]
        assert names == [f"step-{i}" for i in range(len(names))]  # in order, none doubled, none lost
        assert committed == list(range(total, total + len(committed)))
        # every reported commit is in the file; at most the one registration in flight besides
        assert len(names) - total in (len(committed), len(committed) + 1)
        if len(names) - total == len(committed) + 1:
            assert began[-1] == len(names) - 1  # ... and only if it had begun
        total = len(names)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    acct = PersistentPrivacyAccountant(path)
    acct.register(lap("after"))  # no stale lock, nothing half-written
    assert len(acct) == total + 1


# --------------------------------------------------------------------------- files
def test_what_is_not_a_ledger_is_refused(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(ValueError, match="not a usable privacy ledger"):
        PersistentPrivacyAccountant(junk)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('format', 'something else')")
    with pytest.raises(ValueError, match="not a pyg_private privacy ledger"):
        PersistentPrivacyAccountant(other)
    with pytest.raises(FileNotFoundError):
        PersistentPrivacyAccountant(tmp_path / "missing.sqlite", create=False)


def test_release_fingerprints_are_keyed_by_a_separate_file(tmp_path):
    acct = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite")
    nodes = np.array([True, True, False, False])
    claim = ReleaseClaim("guard", ("x", (4, 2), 12345), nodes, message="released {count} rows before")
    acct.register(lap(), claim=claim)
    with pytest.raises(ValueError, match="released 1 rows before"):
        copy.deepcopy(acct).register(lap(), claim=claim._replace(nodes=np.array([False, True, True, False])))
    acct.register(lap(), claim=claim._replace(nodes=~nodes))  # other rows of the same input
    acct.register(lap(), claim=claim._replace(enforce=False))  # recorded, not refused
    assert len(acct) == 3
    key_file = acct.path + ".guard-key"
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    key = open(key_file, "rb").read()
    assert key not in open(acct.path, "rb").read()  # the ledger alone cannot test a candidate input
    os.remove(key_file)
    with pytest.raises(ValueError, match="is missing"):
        PersistentPrivacyAccountant(acct.path).register(lap(), claim=claim._replace(scope="new"))
    assert len(acct) == 3
