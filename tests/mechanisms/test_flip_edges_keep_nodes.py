"""flip_edges with keep_nodes, and EdgeRandomizedResponse(keep_nodes=..., delta=...).

A pair incident to a kept node is reported truthfully; every other pair is randomized
response with truth probability q (a true edge survives with probability q, a non-edge
appears with probability 1 - q), independently. Rates are checked over many draws with
binomial tolerances of about 4 standard errors (pooled) and 5 (per pair).
"""
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, erdos_renyi_graph

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import (
    DEFAULT_ORDERS,
    calibrated_truth_probability,
    randomized_response_rdp,
    truth_probability,
)
from pyg_private.mechanisms import flip_edges
from pyg_private.transforms import EdgeRandomizedResponse
from pyg_private.utils import simple_undirected

N = 30
KEEP = [0, 7, 7, 29]  # a duplicate on purpose



def _truth(seed=0, n=N, p=0.3):
    torch.manual_seed(seed)
    ei, _ = simple_undirected(erdos_renyi_graph(n, p), n)
    return ei


def _dense(edge_index, n):
    a = torch.zeros(n, n, dtype=torch.long)
    a[edge_index[0], edge_index[1]] = 1
    return a


def _check_simple(out, n):
    assert out.dtype == torch.long and out.dim() == 2 and out.size(0) == 2
    assert bool((out[0] != out[1]).all())  # no self-loops
    assert torch.equal(out, coalesce(out, num_nodes=n))  # sorted, no duplicates
    a = _dense(out, n)
    assert torch.equal(a, a.t())  # symmetric


class _Tally:
    """Counts, over draws, how often each pair is reported as an edge."""

    def __init__(self, truth, n, keep):
        self.n, self.truth = n, _dense(truth, n)
        kept = torch.zeros(n, dtype=torch.bool)
        kept[torch.tensor(keep)] = True
        iu = torch.triu_indices(n, n, 1)
        self.iu = iu
        self.free = ~(kept[iu[0]] | kept[iu[1]])  # pairs that are randomised
        self.bit = self.truth[iu[0], iu[1]].bool()
        self.kept = kept
        self.counts = torch.zeros(iu.size(1), dtype=torch.long)
        self.new_per_draw, self.kept_per_draw = [], []
        self.draws = 0

    def add(self, out):
        _check_simple(out, self.n)
        a = _dense(out, self.n)
        # every pair at a kept node carries its true bit, in every draw
        assert torch.equal(a[self.kept], self.truth[self.kept])
        upper = a[self.iu[0], self.iu[1]]
        self.counts += upper
        self.new_per_draw.append(int(upper[self.free & ~self.bit].sum()))
        self.kept_per_draw.append(int(upper[self.free & self.bit].sum()))
        self.draws += 1

    def check_rates(self, q):
        t = self.draws
        for mask, rate in ((self.free & self.bit, q), (self.free & ~self.bit, 1.0 - q)):
            k = int(mask.sum())
            assert k > 20
            freq = self.counts[mask].double() / t
            pooled = float(freq.mean())
            assert abs(pooled - rate) < 4 * math.sqrt(rate * (1 - rate) / (k * t))
            assert float((freq - rate).abs().max()) < 5 * math.sqrt(rate * (1 - rate) / t)
        # the counts have binomial variances (independent pairs, not a fixed number of flips)
        for per_draw, mask, rate in ((self.new_per_draw, self.free & ~self.bit, 1.0 - q),
                                     (self.kept_per_draw, self.free & self.bit, q)):
            k = int(mask.sum())
            # sd of a sample variance of near-normal counts: sqrt(2 / (t - 1)) relative; allow 5
            assert np.var(per_draw, ddof=1) == pytest.approx(k * rate * (1 - rate), rel=5 * math.sqrt(2 / (t - 1)))


def test_kept_pairs_are_true_and_the_others_flip_at_the_right_rates():
    truth = _truth()
    q = truth_probability(epsilon=1.0)
    tally = _Tally(truth, N, KEEP)
    assert 0 < int(_dense(truth, N)[0].sum()) < N - 1  # node 0 has edges and non-edges
    gen = torch.Generator().manual_seed(0)
    keep = torch.tensor(KEEP)
    for _ in range(2500):
        tally.add(flip_edges(truth, N, q, keep_nodes=keep, generator=gen))
    tally.check_rates(q)


def test_rates_at_a_low_truth_probability():
    truth = _truth(seed=1, p=0.15)
    q = 0.55
    tally = _Tally(truth, N, [3])
    gen = torch.Generator().manual_seed(1)
    for _ in range(1000):
        tally.add(flip_edges(truth, N, q, keep_nodes=[3], generator=gen))
    tally.check_rates(q)


def test_the_tolerances_can_fail():
    # the same tally at a wrong q (5% off) is rejected
    truth = _truth()
    tally = _Tally(truth, N, KEEP)
    gen = torch.Generator().manual_seed(2)
    for _ in range(1000):
        tally.add(flip_edges(truth, N, 0.7, keep_nodes=KEEP, generator=gen))
    with pytest.raises(AssertionError):
        tally.check_rates(0.735)


def test_edge_cases_of_keep_nodes():
    truth = _truth(seed=3)
    q = 0.6
    # keeping every node (or all but one) reports the truth
    for keep in (torch.arange(N), torch.arange(1, N)):
        for s in range(5):
            assert torch.equal(flip_edges(truth, N, q, keep_nodes=keep, generator=torch.Generator().manual_seed(s)),
                               truth)
    # an empty keep set is the plain mechanism, draw for draw
    for s in range(5):
        plain = flip_edges(truth, N, q, generator=torch.Generator().manual_seed(s))
        empty = flip_edges(truth, N, q, keep_nodes=torch.tensor([], dtype=torch.long),
                           generator=torch.Generator().manual_seed(s))
        assert torch.equal(plain, empty)
    # reproducible with a seeded generator; isolated kept nodes stay isolated
    ei = truth[:, (truth[0] < 25) & (truth[1] < 25)]  # nodes 25..29 have no true edges
    a = flip_edges(ei, N, q, keep_nodes=[26, 27], generator=torch.Generator().manual_seed(9))
    b = flip_edges(ei, N, q, keep_nodes=[26, 27], generator=torch.Generator().manual_seed(9))
    assert torch.equal(a, b)
    deg = torch.bincount(a[0], minlength=N)
    assert deg[26] == deg[27] == 0 and int(deg[25]) > 0


# ---------------------------------------------------------------- the transform

def test_transform_keeps_nodes_and_charges_one_event_per_call():
    truth = _truth(seed=4)
    acct = PrivacyAccountant()
    rr = EdgeRandomizedResponse(epsilon=1.0, keep_nodes=KEEP, accountant=acct, allow_recompose=True,
                                generator=torch.Generator().manual_seed(4))  # 400 releases of one graph
    q = truth_probability(epsilon=1.0)
    assert rr.q == q and rr.keep_nodes.tolist() == KEEP
    tally = _Tally(truth, N, KEEP)
    for i in range(400):
        data = Data(edge_index=truth.clone(), num_nodes=N, edge_attr=torch.ones(truth.size(1), 2))
        out = rr(data)
        assert "edge_attr" not in out
        tally.add(out.edge_index)
        assert len(acct) == i + 1
    tally.check_rates(q)
    event = acct.events[0]
    assert event.unit.value == "edge" and event.mechanism == "randomized_response"
    assert event.params["kept_nodes"] == len(KEEP)
    np.testing.assert_allclose(event.rdp, randomized_response_rdp(event.orders, q=q), rtol=1e-15)
    assert acct.pure_epsilon("edge") == pytest.approx(400 * 1.0, rel=1e-12)
    assert "keep_nodes=4" in repr(rr)


def test_transform_refuses_bad_keep_nodes_before_charging():
    acct = PrivacyAccountant()
    data = Data(edge_index=_truth(seed=5), num_nodes=N)
    for bad in ([N], [-1], [0, 40]):
        with pytest.raises(ValueError, match="keep_nodes"):
            EdgeRandomizedResponse(epsilon=1.0, keep_nodes=bad, accountant=acct)(data.clone())
    assert len(acct) == 0
    # a budget exceeded also refuses before anything is drawn
    gen = torch.Generator().manual_seed(0)
    tight = PrivacyAccountant(budget={"edge": 0.5})
    state = gen.get_state().clone()
    with pytest.raises(PrivacyBudgetExceeded):
        EdgeRandomizedResponse(epsilon=1.0, keep_nodes=[0], accountant=tight, generator=gen)(data.clone())
    assert torch.equal(gen.get_state(), state) and len(tight) == 0


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-5), (0.1, 1e-3), (3.0, 1 / 333_983), (0.5, 1e-2),
                                            (2.0, 0.1)])
def test_delta_calibration_is_tight_and_safe(epsilon, delta):
    pure_q = truth_probability(epsilon=epsilon)
    rr = EdgeRandomizedResponse(epsilon=epsilon, delta=delta)
    assert rr.q == calibrated_truth_probability(epsilon=epsilon, delta=delta)
    assert pure_q <= rr.q < 1.0
    assert rr.flip_probability == pytest.approx(2 * (1 - rr.q), rel=1e-15)
    acct = PrivacyAccountant()
    rr.accountant = acct
    rr(Data(edge_index=_truth(seed=6), num_nodes=N))
    spent = acct.epsilon("edge", delta)
    assert spent <= epsilon and spent == pytest.approx(epsilon, rel=1e-6)
    # the pure calibration spends exactly epsilon at delta 0 and less than epsilon at delta
    pure = PrivacyAccountant()
    EdgeRandomizedResponse(epsilon=epsilon, accountant=pure)(Data(edge_index=_truth(seed=6), num_nodes=N))
    assert pure.pure_epsilon("edge") == pytest.approx(epsilon, rel=1e-12)
    assert pure.epsilon("edge", delta) <= spent * (1 + 1e-12)
    if delta >= 1e-3:  # at a large delta the RDP conversion buys a visibly higher q
        assert rr.q > pure_q + 1e-4


def test_delta_arguments():
    assert EdgeRandomizedResponse(epsilon=1.0, delta=0.0).q == truth_probability(epsilon=1.0)
    with pytest.raises(ValueError, match="delta"):
        EdgeRandomizedResponse(flip_probability=0.5, delta=1e-5)
    with pytest.raises(ValueError, match="delta"):
        EdgeRandomizedResponse(epsilon=1.0, delta=1.0)
    with pytest.raises(ValueError, match="delta"):
        EdgeRandomizedResponse(epsilon=1.0, delta=-1e-5)
    assert calibrated_truth_probability(epsilon=1.0, delta=1e-5, orders=DEFAULT_ORDERS[:-1]) >= \
        truth_probability(epsilon=1.0) - 1e-12
