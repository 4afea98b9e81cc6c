"""The in-degree cap of the node-level sum aggregation: the map, and the sensitivity it implies,
by brute force over every graph on six nodes, and attained."""
import itertools
import math

import numpy as np
import pytest
import torch

from pyg_private.accounting import PrivacyAccountant
from pyg_private.nn import ProGAPAggregation
from pyg_private.utils.degree_cap import (cap_in_degree, cap_in_degree_csr, capped_sum_aggregation_node_sensitivity,
                                          draw_cap_key, pair_priority)


def _priorities(n, key):
    u, w = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    return pair_priority(u.reshape(-1), w.reshape(-1), key).reshape(n, n).numpy()


def _capped(adj, cap, prio):
    """An independent numpy version of the cap on a batch of dense adjacencies [B, n, n] (row u: the
    neighbours u sums): keep the `cap` neighbours first in the order of (priority, id)."""
    n = adj.shape[-1]
    order = np.stack([np.lexsort((np.arange(n), prio[u])) for u in range(n)])  # per row: by priority, then id
    rows = np.arange(n)[:, None]
    in_order = adj[:, rows, order]
    rank = np.cumsum(in_order, axis=2)  # 1-based rank among the present neighbours
    kept_in_order = in_order & (rank <= cap)
    kept = np.zeros_like(adj)
    kept[:, rows, order] = kept_in_order
    return kept


def _all_graphs(n):
    pairs = list(itertools.combinations(range(n), 2))
    masks = np.arange(1 << len(pairs))
    adj = np.zeros((masks.size, n, n), dtype=bool)
    for k, (a, b) in enumerate(pairs):
        bit = (masks >> k & 1).astype(bool)
        adj[:, a, b] = bit
        adj[:, b, a] = bit
    return adj


def test_cap_matches_an_independent_implementation():
    rng = np.random.default_rng(0)
    for n, cap, key in ((12, 3, 5), (30, 4, 2 ** 40 + 7), (9, 1, 0)):
        a = np.triu(rng.random((n, n)) < 0.5, 1)
        a = a | a.T
        ei = torch.tensor(np.argwhere(a).T)  # rows sorted: (u, w) pairs, u the target
        got = cap_in_degree(ei.flip(0), n, cap, key)  # [source, target]
        dense = np.zeros((n, n), dtype=bool)
        dense[got[1].numpy(), got[0].numpy()] = True
        want = _capped(a[None], cap, _priorities(n, key))[0]
        assert (dense == want).all()
        assert dense.sum(1).max() <= cap and (dense <= a).all()


def test_capped_csr_is_canonical_and_keeps_short_rows():
    crow, col = torch.tensor([0, 2, 7, 7]), torch.tensor([1, 2, 0, 2, 3, 4, 5])
    new_crow, new_col = cap_in_degree_csr(crow, col, 3, key=11)
    assert new_crow.tolist() == [0, 2, 5, 5]
    assert new_col[:2].tolist() == [1, 2]  # a row within the cap is kept whole
    kept = new_col[2:5].tolist()
    assert kept == sorted(kept) and set(kept) <= {0, 2, 3, 4, 5}
    assert cap_in_degree_csr(crow, col, 5, key=11)[1] is col  # nothing above the cap: unchanged


@pytest.mark.parametrize("key", [0, 123456789, 2 ** 63 - 1])
def test_sensitivity_holds_on_every_graph_of_six_nodes(key):
    """Every graph on 6 nodes, every removed node, caps 1 to 4: the change of A_cap H is at most
    sqrt(min(D, M)^2 + c M) for every H with rows in the unit ball, M the graph's largest degree.
    Sound check: ||row_r(B H)|| <= sum_w |B_rw|, so sum_r (sum_w |B_rw|)^2 bounds ||B H||_F^2."""
    n = 6
    adj = _all_graphs(n)
    prio = _priorities(n, key)
    max_deg = adj.sum(2).max(1)
    for cap in (1, 2, 3, 4):
        kept = _capped(adj, cap, prio).astype(np.int64)
        for v in range(n):
            removed = adj.copy()
            removed[:, v, :] = False
            removed[:, :, v] = False
            diff = kept - _capped(removed, cap, prio)
            worst = (np.abs(diff).sum(2) ** 2).sum(1)
            has_edges = max_deg > 0
            bound = np.array([capped_sum_aggregation_node_sensitivity(int(m), cap) ** 2 if m > 0 else 0.0
                              for m in max_deg])
            assert (worst[has_edges] <= bound[has_edges] + 1e-9).all()
            assert (worst[~has_edges] == 0).all()
            # the rows that change: v's, and those that ranked v among their first `cap`
            changed = np.abs(diff).sum(2) > 0
            ranked_v = kept[:, :, v] > 0
            ranked_v[:, v] = True
            assert not (changed & ~ranked_v).any()


def _tight_graph(key, cap, m):
    """Node 0 with m neighbours 1..m of degree cap + 1: each ranks node 0 first (its other cap
    neighbours are fresh nodes ranked after 0 in the key's order)."""
    edges, nxt = [], m + 1
    for u in range(1, m + 1):
        edges.append((0, u))
        found = 0
        while found < cap:
            w = nxt
            nxt += 1
            if int(pair_priority(torch.tensor([u]), torch.tensor([w]), key)) > \
                    int(pair_priority(torch.tensor([u]), torch.tensor([0]), key)):
                edges.append((u, w))
                found += 1
    n = nxt
    ei = torch.tensor(edges).t()
    return torch.cat([ei, ei.flip(0)], 1), n


def _aggregate(layer, x, ei):
    out = layer(x, ei)
    return out[:, x.size(1):]


@pytest.mark.parametrize("cap,m", [(2, 6), (3, 4)])
def test_the_bound_is_attained_and_breaks_the_uncapped_formula(cap, m):
    """The layer's own capped sum: v with m neighbours that each rank it first, h_v = e and every
    other row -e. The change is exactly sqrt(cap^2 + 4m) (the bound), more than sqrt(cap (cap + 1)),
    what the cap alone would give without the promotions."""
    layer = ProGAPAggregation(level="node", max_degree=m, degree_cap=cap, noise_multiplier=0.0, cached=False)
    ei, n = _tight_graph(layer.cap_key, cap, m)
    x = -torch.ones(n, 1, dtype=torch.float64)
    x[0] = 1.0
    full = _aggregate(layer, x, ei)
    keep = (ei != 0).all(0)
    x_removed = x.clone()
    x_removed[0] = 0.0
    without = _aggregate(layer, x_removed, ei[:, keep])
    change = float(torch.linalg.norm(full - without))
    assert change == pytest.approx(capped_sum_aggregation_node_sensitivity(m, cap), rel=1e-12)
    assert change == pytest.approx(math.sqrt(cap ** 2 + 4 * m), rel=1e-12)
    assert change > math.sqrt(cap * (cap + 1)) + 1


def test_formula_values_and_the_uncapped_case():
    assert capped_sum_aggregation_node_sensitivity(1000, 50) == pytest.approx(math.sqrt(2500 + 4000))
    assert capped_sum_aggregation_node_sensitivity(10, None) == pytest.approx(math.sqrt(110))
    assert capped_sum_aggregation_node_sensitivity(10, 10) == pytest.approx(math.sqrt(110))
    assert capped_sum_aggregation_node_sensitivity(10, 25) == pytest.approx(math.sqrt(110))  # no promotion
    with pytest.raises(ValueError):
        capped_sum_aggregation_node_sensitivity(10, 0)


def test_layer_charges_the_capped_sensitivity_once_and_reuses_its_key():
    acct = PrivacyAccountant()
    gen = torch.Generator().manual_seed(3)
    layer = ProGAPAggregation(level="node", max_degree=40, degree_cap=5, noise_multiplier=2.0, accountant=acct,
                              generator=gen)
    assert layer.sensitivity == pytest.approx(math.sqrt(25 + 160))
    assert "degree_cap=5" in repr(layer)
    again = ProGAPAggregation(level="node", max_degree=40, degree_cap=5, noise_multiplier=2.0,
                              generator=torch.Generator().manual_seed(3))
    assert again.cap_key == layer.cap_key  # seeded: the same capped graph
    g = torch.Generator().manual_seed(0)
    a = torch.triu(torch.rand(60, 60, generator=g) < 0.4, 1)
    ei = (a | a.t()).nonzero().t()
    assert int(torch.bincount(ei[0]).max()) <= 40
    x = torch.randn(60, 4, generator=g)
    layer(x, ei)
    layer(x, ei)  # cached
    assert len(acct.events) == 1
    assert acct.events[0].unit == "node"
    capped = cap_in_degree(ei, 60, 5, layer.cap_key)
    assert int(torch.bincount(capped[1]).max()) == 5  # the graph had rows above the cap
    with pytest.raises(ValueError, match="node-level"):
        ProGAPAggregation(level="edge", degree_cap=5, noise_multiplier=1.0)
    with pytest.raises(ValueError):
        ProGAPAggregation(level="node", max_degree=10, degree_cap=0, noise_multiplier=1.0)
    assert isinstance(draw_cap_key(), int) and 0 <= draw_cap_key() < 2 ** 64


def test_capped_layer_survives_copy_pickle_and_state_dict():
    import copy
    import pickle
    layer = ProGAPAggregation(level="node", max_degree=40, degree_cap=5, noise_multiplier=1.0,
                              generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    a = torch.triu(torch.rand(30, 30, generator=g) < 0.5, 1)
    ei = (a | a.t()).nonzero().t()
    x = torch.randn(30, 3, generator=g)
    out = layer(x, ei)
    for twin in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert twin.cap_key == layer.cap_key and twin.degree_cap == 5
        assert torch.equal(twin(x, ei), out)  # the cached release, no new charge
    fresh = ProGAPAggregation(level="node", max_degree=40, degree_cap=5, noise_multiplier=1.0)
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(fresh(x, ei), out)
    other = ProGAPAggregation(level="node", max_degree=40, degree_cap=6, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="degree_cap"):
        other.load_state_dict(layer.state_dict())
