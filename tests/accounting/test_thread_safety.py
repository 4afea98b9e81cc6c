"""The ledger under threads: registration is atomic (validate, compose, compare, append under one lock)."""
import sys
import threading

import pytest

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import gaussian_event, laplace_event


@pytest.fixture
def tiny_switch_interval():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    yield
    sys.setswitchinterval(old)


def _race(acct, event, threads, per_thread):
    barrier = threading.Barrier(threads)
    accepted = []
    lock = threading.Lock()

    def worker():
        barrier.wait()
        for _ in range(per_thread):
            try:
                acct.register(event)
            except PrivacyBudgetExceeded:
                continue
            with lock:
                accepted.append(1)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return len(accepted)


def test_threads_never_overrun_a_pure_budget_nor_lose_events(tiny_switch_interval):
    over, lost = 0, 0
    for _ in range(30):
        acct = PrivacyAccountant(budget={"edge": 10.0}, pld=False)
        event = laplace_event(unit="edge", sensitivity=1.0, scale=1.0)  # pure eps 1
        accepted = _race(acct, event, threads=8, per_thread=4)
        spent = acct.pure_epsilon("edge")
        over += spent > 10.0 + 1e-9
        lost += (len(acct) != accepted) or (abs(spent - accepted) > 1e-9)
        assert accepted <= 10
    assert over == 0 and lost == 0


def test_threads_on_an_approximate_budget_keep_every_accepted_event(tiny_switch_interval):
    acct = PrivacyAccountant(budget={"edge": (3.0, 1e-5)})
    event = gaussian_event(unit="edge", sensitivity=1.0, noise_std=3.0)
    accepted = _race(acct, event, threads=6, per_thread=10)
    assert len(acct) == accepted == len(acct.events_of("edge"))
    assert acct.epsilon("edge") <= 3.0 * (1 + 1e-9)
    with pytest.raises(PrivacyBudgetExceeded):  # the budget is exhausted, not overrun
        for _ in range(100):
            acct.register(event)


def test_accountant_pickles_and_deep_copies_with_its_lock():
    import copy
    import pickle

    acct = PrivacyAccountant(budget={"edge": (2.0, 1e-5)})
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=4.0))
    for clone in (copy.deepcopy(acct), pickle.loads(pickle.dumps(acct))):
        assert clone.events == acct.events
        assert clone.epsilon("edge") == acct.epsilon("edge")
        clone.register(laplace_event(unit="edge", sensitivity=1.0, scale=4.0))  # a working, separate lock
        assert len(clone) == 2 and len(acct) == 1


def test_a_register_during_pickling_never_reaches_the_copy_half_way(monkeypatch):
    # pickle writes the state out after __getstate__ returns: force a register in between
    import pickle

    from pyg_private.accounting.composition import Composition

    acct = PrivacyAccountant()
    acct.register(gaussian_event(unit="edge", sensitivity=1.0, noise_std=1.0, name="edge0"))
    acct.register(gaussian_event(unit="node", sensitivity=1.0, noise_std=1.0, name="node0"))
    original, fired = Composition.__reduce_ex__, []

    def hook(self, protocol):
        if not fired:
            fired.append(1)
            t = threading.Thread(target=lambda: acct.register(
                gaussian_event(unit="node", sensitivity=1.0, noise_std=0.5, name="late")))
            t.start()
            t.join()
        return original(self, protocol)

    monkeypatch.setattr(Composition, "__reduce_ex__", hook)
    copy_ = pickle.loads(pickle.dumps(acct))
    monkeypatch.setattr(Composition, "__reduce_ex__", original)
    assert fired and len(acct.events_of("node")) == 2
    # the copy is the ledger before the late release, consistently: events and compositions agree
    assert len(copy_.events_of("node")) == copy_.composition("node").num_events == 1
    rebuilt = PrivacyAccountant.from_state_dict(copy_.state_dict())
    assert rebuilt.epsilon("node", 1e-5) == copy_.epsilon("node", 1e-5)
