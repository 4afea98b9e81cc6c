"""Parallel composition: releases on disjoint parts cost the maximum over parts (``acct.parallel``)."""
import copy
import json
import math
import pickle
import threading

import pytest
import torch

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import (
    approximate_dp_event,
    compose,
    gaussian_event,
    gdp_epsilon,
    laplace_event,
    randomized_response_event,
)
from pyg_private.accounting import parallel as parallel_module
from pyg_private.mechanisms import GaussianMechanism, LaplaceMechanism

DELTA = 1e-5


def _batches(n=4):
    gen = torch.Generator().manual_seed(0)
    return [torch.rand(3, generator=gen) for _ in range(n)]


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_four_disjoint_batches_cost_one_batch(kind):
    def mechanism(acct):
        if kind == "gaussian":
            return GaussianMechanism(1.0, noise_std=2.0, accountant=acct, generator=torch.Generator().manual_seed(1))
        return LaplaceMechanism(1.0, scale=2.0, accountant=acct, generator=torch.Generator().manual_seed(1))

    sequential, parallel, single = PrivacyAccountant(), PrivacyAccountant(), PrivacyAccountant()
    mech = mechanism(sequential)
    for batch in _batches():
        mech(batch)
    mech = mechanism(parallel)
    with parallel.parallel("epoch-0") as part:
        for i, batch in enumerate(_batches()):
            with part(i):
                mech(batch)  # the mechanism charges as usual: the part comes from the context
    mechanism(single)(_batches()[0])

    seq_eps, par_eps, one_eps = (a.epsilon("edge", DELTA) for a in (sequential, parallel, single))
    print(f"{kind}: 4 disjoint batches, sequential eps={seq_eps:.6f}, parallel eps={par_eps:.6f}, "
          f"one batch eps={one_eps:.6f}")
    assert par_eps == one_eps  # exactly one batch's cost
    assert seq_eps > 1.5 * par_eps
    assert len(parallel) == 4 and len(parallel.events_of("edge")) == 4
    if kind == "laplace":
        assert parallel.pure_epsilon("edge") == pytest.approx(single.pure_epsilon("edge"), rel=1e-12)
        assert sequential.pure_epsilon("edge") == pytest.approx(4 * single.pure_epsilon("edge"), rel=1e-12)
    else:
        ev = single.events[0]
        assert par_eps == pytest.approx(gdp_epsilon(mu=ev.mu, delta=DELTA), rel=1e-9)


def test_parts_compose_sequentially_and_the_group_with_the_rest():
    acct = PrivacyAccountant(pld=False)
    g = lambda std: gaussian_event(unit="edge", sensitivity=1.0, noise_std=std)  # noqa: E731
    acct.register(g(4.0))  # before the group: sequential
    with acct.parallel("p") as part:
        with part(0):
            acct.register(g(2.0))
            acct.register(g(2.0))  # part 0: mu^2 = 1/4 + 1/4
        with part(1):
            acct.register(g(1.0))  # part 1: mu^2 = 1, the worst part
        acct.register(g(4.0))  # inside the block but in no part: sequential
    mu = math.sqrt(1 / 16 + 1 + 1 / 16)
    assert acct.composition("edge").mu == pytest.approx(mu, rel=1e-12)
    assert acct.epsilon("edge", DELTA) == pytest.approx(gdp_epsilon(mu=mu, delta=DELTA), rel=1e-9)
    row = acct.report()["edge"]
    assert row["num_events"] == 5
    (group,) = row["parallel"]
    assert group["name"] == "p" and group["parts"] == 2 and group["num_events"] == 3 and group["worst_part"] == 1
    assert group["epsilon"] == pytest.approx(gdp_epsilon(mu=1.0, delta=DELTA), rel=1e-9)
    text = str(acct.report())
    assert "max over 2 disjoint parts" in text and "worst part 1" in text and "parallel group" in text


def test_incomparable_parts_take_the_maximum_over_combinations():
    # part a: one Laplace (pure 1.0); part b: one Gaussian. Which is worse depends on delta.
    lap = laplace_event(unit="node", sensitivity=1.0, scale=1.0)
    gau = gaussian_event(unit="node", sensitivity=1.0, noise_std=1.5)
    rest = laplace_event(unit="node", sensitivity=1.0, scale=5.0)
    acct = PrivacyAccountant()
    acct.register(rest)
    with acct.parallel("g") as part:
        with part("a"):
            acct.register(lap)
        with part("b"):
            acct.register(gau)
    for delta in (1e-3, 1e-8):
        expected = max(compose([rest, lap]).epsilon(delta), compose([rest, gau]).epsilon(delta))
        assert acct.epsilon("node", delta) == pytest.approx(expected, rel=1e-12)
        assert acct.epsilon("node", delta) < compose([rest, lap, gau]).epsilon(delta)
    # two such groups: every combination of worst parts is composed
    with acct.parallel("h") as part:
        with part(0):
            acct.register(lap)
        with part(1):
            acct.register(gau)
    for delta in (1e-3, 1e-8):
        expected = max(compose([rest, a, b]).epsilon(delta) for a in (lap, gau) for b in (lap, gau))
        assert acct.epsilon("node", delta) == pytest.approx(expected, rel=1e-12)


def test_dominated_and_duplicate_parts_are_dropped():
    g = gaussian_event(unit="edge", sensitivity=1.0, noise_std=2.0)
    lap = laplace_event(unit="edge", sensitivity=1.0, scale=2.0)
    group = parallel_module.ParallelGroup("x")
    for part, events in {0: [g, lap], 1: [g], 2: [g, lap], 3: [lap]}.items():
        for e in events:
            group = group.add(part, e)
    (only,) = group.maximal(g.unit)  # parts 1 and 3 are inside part 0 (= part 2)
    assert only.num_events == 2


def test_many_distinct_parts_are_bounded_not_undercounted(monkeypatch):
    events = [laplace_event(unit="edge", sensitivity=1.0, scale=s) for s in (1.0, 1.5, 2.0)]
    events += [gaussian_event(unit="edge", sensitivity=1.0, noise_std=s) for s in (1.0, 1.5)]

    def ledger():
        acct = PrivacyAccountant(pld=False)
        for name in ("a", "b", "c"):
            with acct.parallel(name) as part:
                for i, e in enumerate(events):
                    with part(i):
                        acct.register(e)
        return acct

    exact = ledger().epsilon("edge", DELTA)  # 5**3 = 125 combinations
    monkeypatch.setattr(parallel_module, "MAX_SELECTIONS", 8)
    bounded_acct = ledger()
    bounded = bounded_acct.epsilon("edge", DELTA)
    sequential = compose(events * 3).epsilon(DELTA, use_pld=False)
    assert exact <= bounded * (1 + 1e-12)  # a valid bound: never below the exact maximum
    assert bounded < sequential
    assert "bounded by dominating releases" in bounded_acct.report()["edge"]["conversion"]


def test_budget_is_checked_on_the_group_maximum_before_noise():
    probe = PrivacyAccountant()
    LaplaceMechanism(1.0, scale=1.0, accountant=probe)(torch.zeros(1))
    e = probe.pure_epsilon("edge")  # one release (a little over 1: the grid's rounding is charged too)
    acct = PrivacyAccountant(budget={"edge": 1.0 + 2.5 * e})
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=1.0))  # pure eps 1
    gen = torch.Generator().manual_seed(0)
    mech = LaplaceMechanism(1.0, scale=1.0, accountant=acct, generator=gen)
    with acct.parallel("epoch") as part:
        for i in range(3):
            with part(i):
                mech(torch.zeros(1))
                mech(torch.zeros(1))  # every part at 2e, the group at 2e, the unit at 1 + 2e
        state, rng = json.dumps(acct.state_dict()), gen.get_state().clone()
        with part(1), pytest.raises(PrivacyBudgetExceeded, match="part 1 of parallel group 'epoch'"):
            mech(torch.zeros(1))  # the group's maximum would reach 3: refused
        assert json.dumps(acct.state_dict()) == state
        assert torch.equal(gen.get_state(), rng), "noise was drawn for a refused release"
        with pytest.raises(PrivacyBudgetExceeded):
            mech(torch.zeros(1))  # sequential: 1 + 2e + e
    assert acct.pure_epsilon("edge") == pytest.approx(1.0 + 2 * e, rel=1e-12)
    assert len(acct) == 7


def test_check_uses_the_current_part():
    acct = PrivacyAccountant(budget={"edge": 2.0})
    ev = laplace_event(unit="edge", sensitivity=1.0, scale=1.0)
    with acct.parallel("g") as part:
        with part(0):
            acct.register(ev)
            acct.register(ev)
        with part(1):
            assert acct.check(ev) == pytest.approx(2.0)
        with pytest.raises(PrivacyBudgetExceeded):
            acct.check(ev)  # sequential: 3
        assert acct.check(ev, partition=("g", 2)) == pytest.approx(2.0)


def test_state_dict_pickle_and_deepcopy_keep_the_groups():
    acct = PrivacyAccountant(budget={"edge": (5.0, 1e-5)})
    acct.register(gaussian_event(unit="edge", sensitivity=1.0, noise_std=3.0))
    with acct.parallel("epoch-0") as part:
        for i in range(3):
            with part(i):
                acct.register(gaussian_event(unit="edge", sensitivity=1.0, noise_std=2.0 + i))
                acct.register(randomized_response_event(unit="node", epsilon=0.5))
                acct.register(gaussian_event(unit="graph", sensitivity=1.0, noise_std=1.0 + i))
    scope = acct.parallel("open")
    scope.__enter__()  # a group still open when saved
    with scope(7):
        acct.register(approximate_dp_event(unit="edge", epsilon=0.2, delta=1e-7))
    state = json.loads(json.dumps(acct.state_dict()))
    clones = [PrivacyAccountant.from_state_dict(state), pickle.loads(pickle.dumps(acct)), copy.deepcopy(acct)]
    loaded = PrivacyAccountant()
    loaded.load_state_dict(state)
    clones.append(loaded)
    for clone in clones:
        assert clone.events == acct.events
        assert clone.parallel_groups == acct.parallel_groups
        for unit in ("edge", "node", "graph"):
            assert clone.epsilon(unit, 1e-5) == acct.epsilon(unit, 1e-5)
        assert clone.report() == acct.report()
        # the open group is still open in the clone, the closed one refuses new releases
        clone.register(approximate_dp_event(unit="edge", epsilon=0.1, delta=1e-8), partition=("open", 7))
        with pytest.raises(ValueError, match="not open"):
            clone.register(approximate_dp_event(unit="edge", epsilon=0.1, delta=1e-8), partition=("epoch-0", 0))
    scope.__exit__(None, None, None)
    assert acct.parallel_groups["open"]["closed"]
    assert len(acct) == 11
    assert acct.parallel_groups["epoch-0"]["units"] == ["edge", "graph", "node"]


def test_version_one_state_still_loads():
    acct = PrivacyAccountant()
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=2.0))
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=2.0))
    old = {"format": "pyg_private.PrivacyAccountant", "version": 1, "conversion": "balle", "pld": True,
           "budget": {}, "events": [e.to_dict() for e in acct.events]}
    again = PrivacyAccountant.from_state_dict(old)
    assert again.events == acct.events and again.epsilon("edge", DELTA) == acct.epsilon("edge", DELTA)


@pytest.mark.parametrize(
    "misuse, message",
    [
        ("reopen", "cannot be reopened"),
        ("nested_part", "belongs to one part"),
        ("nested_group", "nested parallel groups"),
        ("closed", "not open"),
        ("bad_key", "int or a str"),
        ("bad_partition", "pair"),
    ],
)
def test_misuse_raises_before_any_charge(misuse, message):
    acct = PrivacyAccountant()
    ev = laplace_event(unit="edge", sensitivity=1.0, scale=2.0)
    with acct.parallel("g") as part:
        with part(0):
            acct.register(ev)
    before = json.dumps(acct.state_dict())
    with pytest.raises((ValueError, TypeError), match=message):
        if misuse == "reopen":
            with acct.parallel("g"):
                pass
        elif misuse == "nested_part":
            with acct.parallel("h") as p2, p2(0), p2(1):
                pass
        elif misuse == "nested_group":
            with acct.parallel("h") as p2, p2(0), acct.parallel("k"):
                pass
        elif misuse == "closed":
            with part(1):
                acct.register(ev)
        elif misuse == "bad_key":
            part(1.5)
        else:
            acct.register(ev, partition="g")
    assert json.dumps(acct.state_dict()) == before


def test_local_releases_in_a_part_are_charged_per_node():
    acct = PrivacyAccountant()
    with acct.parallel("g") as part:
        with part(0):
            acct.register(laplace_event(unit="local", sensitivity=1.0, scale=1.0, nodes=[0, 1], num_nodes=4))
        with part(1):
            acct.register(laplace_event(unit="local", sensitivity=1.0, scale=1.0, nodes=[2, 3], num_nodes=4))
    assert acct.node_epsilons().tolist() == [1.0, 1.0, 1.0, 1.0]  # each node once: parallel by construction
    assert acct.parallel_groups == {}  # nothing central was charged to the group: it left no trace


def test_threads_carry_their_own_part():
    acct = PrivacyAccountant(budget={"edge": 3.0}, pld=False)
    ev = laplace_event(unit="edge", sensitivity=1.0, scale=1.0)
    accepted = [0] * 6
    with acct.parallel("g") as part:
        barrier = threading.Barrier(6)

        def worker(i):
            barrier.wait()
            with part(i):
                for _ in range(5):
                    try:
                        acct.register(ev)
                        accepted[i] += 1
                    except PrivacyBudgetExceeded:
                        pass

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # a thread started inside a part is not in it: its release is sequential (the safe side)
        outcome = []

        def child():
            try:
                acct.register(ev)
                outcome.append("charged")
            except PrivacyBudgetExceeded:
                outcome.append("refused")

        with part(99):  # an empty part: a release there keeps the maximum at 3
            t = threading.Thread(target=child)
            t.start()
            t.join()
            assert outcome == ["refused"]  # the child is not in part 99: sequential, 3 + 1 > 3
            acct.register(ev)  # this thread is: it fits
    assert accepted == [3] * 6
    assert len(acct) == 19 and acct.pure_epsilon("edge") == pytest.approx(3.0)


def test_threads_racing_sequential_and_parallel_releases_never_overrun():
    ev = laplace_event(unit="edge", sensitivity=1.0, scale=1.0)
    for _ in range(10):
        acct = PrivacyAccountant(budget={"edge": 6.0}, pld=False)
        with acct.parallel("g"):
            barrier = threading.Barrier(4)

            def worker(i):
                barrier.wait()
                for _ in range(8):
                    try:
                        if i == 0:
                            acct.register(ev)
                        else:
                            acct.register(ev, partition=("g", i))
                    except PrivacyBudgetExceeded:
                        pass

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        runs = acct.state_dict()["ledger"]
        seq = sum(r[1] for r in runs if len(r) == 2)
        per_part = {}
        for r in runs:
            if len(r) == 4:
                per_part[r[3]] = per_part.get(r[3], 0) + r[1]
        assert seq + max(per_part.values(), default=0) <= 6
        assert acct.pure_epsilon("edge") == pytest.approx(seq + max(per_part.values(), default=0))
        assert len(acct) == seq + sum(per_part.values())


def test_a_dataloader_of_disjoint_graphs_through_a_private_layer():
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader

    from pyg_private.nn import ContractiveGraphLayer

    def ring(n):
        i = torch.arange(n)
        ei = torch.stack([i, (i + 1) % n])
        return torch.cat([ei, ei.flip(0)], 1)

    gen = torch.Generator().manual_seed(0)
    graphs = [Data(x=torch.rand(5, 3, generator=gen), edge_index=ring(5)) for _ in range(8)]
    loader = DataLoader(graphs, batch_size=2)  # 4 batches of 2 whole graphs: disjoint edge sets

    def run(parallel):
        acct = PrivacyAccountant()
        layer = ContractiveGraphLayer(K=2, contraction=0.9, min_degree=1, noise_multiplier=2.0, accountant=acct,
                                      generator=torch.Generator().manual_seed(1))
        if parallel:
            with acct.parallel("epoch-0") as part:
                for i, batch in enumerate(loader):
                    with part(i):
                        layer(batch.x, batch.edge_index)
        else:
            for batch in loader:
                layer(batch.x, batch.edge_index)
        return acct

    seq, par = run(False), run(True)
    (ev, *_) = par.events
    assert len(seq) == len(par) == 4
    assert par.epsilon("edge", DELTA) == pytest.approx(gdp_epsilon(mu=ev.mu, delta=DELTA), rel=1e-9)
    assert seq.epsilon("edge", DELTA) == pytest.approx(gdp_epsilon(mu=2 * ev.mu, delta=DELTA), rel=1e-9)
