"""PrivateLinkSplit: the part of a pair does not depend on the graph (brute force), parts disjoint
and covering their shares, evaluation negatives uniform in their part and drawn without the graph,
outputs in RandomLinkSplit's layout, refusals."""
import itertools
import pickle

import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.utils import erdos_renyi_graph, to_undirected

import pyg_private.transforms.private_link_split as split_module
from pyg_private.transforms import PrivateLinkSplit
from pyg_private.utils import LinkSplitRule
from pyg_private.utils.pair_sampling import PARTS

N = 12
ALL_PAIRS = list(itertools.combinations(range(N), 2))


def _graph(pairs, n=N, **extra):
    pairs = list(pairs)
    ei = torch.tensor(pairs, dtype=torch.long).t() if pairs else torch.empty(2, 0, dtype=torch.long)
    x = torch.arange(n, dtype=torch.float).view(-1, 1).repeat(1, 2)
    return Data(x=x, edge_index=to_undirected(ei, num_nodes=n), **extra)


def _pairs(t):
    return {(min(u, v), max(u, v)) for u, v in t.t().tolist()}


def _sets(split, data):
    """(message, train, val positives, test positives) as sets of pairs."""
    tr, va, te = split(data)
    pos = lambda d: _pairs(d.edge_label_index[:, d.edge_label.bool()])  # noqa: E731
    return _pairs(tr.edge_index), _pairs(tr.edge_label_index), pos(va), pos(te)


def _rule_parts(rule, n=N):
    every = list(itertools.combinations(range(n), 2))
    return dict(zip(every, rule.part_of(torch.tensor(every).t(), n).tolist()))


def test_a_pair_lands_in_the_part_of_the_hash_whatever_the_graph():
    """Brute force: every pair of a 12-node graph, present or absent, falls in the part the rule gives,
    and adding or removing any one edge changes only that edge's own part's set, by that edge."""
    split = PrivateLinkSplit(num_val=0.15, num_test=0.15, num_message=0.4, num_train=0.2, key=7,
                             generator=torch.Generator().manual_seed(0))
    parts = _rule_parts(split.rule)
    assert set(parts.values()) == {0, 1, 2, 3, 4}  # every part, and pairs in none (shares sum to 0.9)
    torch.manual_seed(0)
    base = sorted(_pairs(erdos_renyi_graph(N, 0.4)))
    before = _sets(split, _graph(base))
    for pair in ALL_PAIRS:
        for part, edges in enumerate(before):
            assert (pair in edges) == (pair in base and parts[pair] == part)
        changed = sorted(set(base) ^ {pair})  # add it if absent, remove it if present
        after = _sets(split, _graph(changed))
        for part in range(4):
            expected = before[part] ^ {pair} if parts[pair] == part else before[part]
            assert after[part] == expected, (pair, PARTS[part])


def test_the_hash_is_splitmix64_of_the_pair_and_symmetric():
    from pyg_private.utils.pair_sampling import pair_hash, splitmix64

    mask = (1 << 64) - 1

    def mix(z):
        z = (z + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    rng = torch.Generator().manual_seed(1)
    words = torch.randint(-(2 ** 63), 2 ** 63 - 1, (2000,), generator=rng)
    assert [w & mask for w in splitmix64(words).tolist()] == [mix(w & mask) for w in words.tolist()]
    key, n = 0xDEADBEEF12345678, 1000
    pairs = torch.randint(0, n, (2, 500), generator=rng)
    pairs = pairs[:, pairs[0] != pairs[1]]
    h = pair_hash(pairs, n, key)
    assert torch.equal(h, pair_hash(pairs.flip(0), n, key))
    lo, hi = pairs.min(0).values.tolist(), pairs.max(0).values.tolist()
    assert h.tolist() == [mix((u * n + v) ^ mix(key)) >> 11 for u, v in zip(lo, hi)]


def test_parts_are_disjoint_and_cover_their_shares():
    n, shares = 1000, (0.55, 0.15, 0.1, 0.1)
    rule = LinkSplitRule(12345, shares)
    pairs = torch.triu_indices(n, n, 1)  # all 499,500 pairs
    counts = torch.bincount(rule.part_of(pairs, n), minlength=5).double() / pairs.size(1)
    # binomial std below 7e-4: 0.004 is more than 5 std
    assert torch.allclose(counts[:4], torch.tensor(shares, dtype=torch.float64), atol=4e-3)
    assert abs(float(counts[4]) - 0.1) < 4e-3
    # on a graph: the four sets are disjoint and hold exactly the edges of a part
    torch.manual_seed(1)
    ei = erdos_renyi_graph(300, 0.05)
    sets = _sets(PrivateLinkSplit(num_val=0.1, num_test=0.1, num_message=0.55, num_train=0.15, key=3), Data(
        x=torch.zeros(300, 1), edge_index=ei))
    for a, b in itertools.combinations(sets, 2):
        assert not a & b
    edges = _pairs(ei)
    parts = dict(zip(sorted(edges), LinkSplitRule(3, shares).part_of(torch.tensor(sorted(edges)).t(), 300).tolist()))
    assert set().union(*sets) == {e for e, p in parts.items() if p < 4}


def test_outputs_follow_random_link_split_layout():
    torch.manual_seed(2)
    data = Data(x=torch.randn(50, 3), edge_index=erdos_renyi_graph(50, 0.2), y=torch.arange(50) % 3)
    data.edge_attr = torch.randn(data.edge_index.size(1), 2)
    split = PrivateLinkSplit(key=11, generator=torch.Generator().manual_seed(0))
    tr, va, te = split(data)
    for d in (tr, va, te):
        assert torch.equal(d.x, data.x) and torch.equal(d.y, data.y)
        assert torch.equal(d.edge_index, tr.edge_index) and "edge_attr" not in d
        assert d.split_key == 11 and d.split_shares == (0.7, 0.1, 0.1, 0.1)
        assert LinkSplitRule.of(d) == split.rule
    ei = tr.edge_index
    assert _pairs(ei) == _pairs(ei.flip(0)) and ei.size(1) == 2 * len(_pairs(ei))  # both directions, once
    assert bool((tr.edge_label == 1).all()) and tr.edge_label.dtype == torch.float32
    assert bool((tr.edge_label_index[0] < tr.edge_label_index[1]).all())
    for d, part in ((va, "val"), (te, "test")):
        pos = d.edge_label.bool()
        assert int(pos.sum()) == int((~pos).sum())  # neg_sampling_ratio = 1
        assert bool((split.rule.part_of(d.edge_label_index, 50) == PARTS.index(part)).all())
    assert "split_key" not in data and data.edge_attr is not None  # the input is left as it was


def test_negatives_are_uniform_in_their_part_and_never_read_the_graph(monkeypatch):
    # a dense graph whose val part is mostly edges: negatives are not filtered (some are edges, label 0)
    n = 10
    dense = _graph([p for p in itertools.combinations(range(n), 2) if (p[0] + p[1]) % 4], n=n)
    split = PrivateLinkSplit(num_val=0.3, num_test=0.1, num_message=0.4, num_train=0.1, key=5,
                             neg_sampling_ratio=400.0, generator=torch.Generator().manual_seed(0))
    _, va, _ = split(dense)
    neg = va.edge_label_index[:, ~va.edge_label.bool()]
    parts = _rule_parts(split.rule, n)
    val_pairs = {p for p, q in parts.items() if q == PARTS.index("val")}
    freq = {p: 0 for p in val_pairs}
    for pair in _pairs_list(neg):
        freq[pair] += 1
    assert set(freq) == val_pairs  # only val pairs, every one of them
    expected = neg.size(1) / len(val_pairs)
    assert max(abs(f - expected) for f in freq.values()) < 5 * expected ** 0.5  # about uniform
    assert _pairs(neg) & _pairs(dense.edge_index)  # true edges among the negatives (not excluded)

    # the negatives come from sample_pairs, which is given no edge at all
    calls = []
    real = split_module.sample_pairs

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(split_module, "sample_pairs", spy)
    split(dense)
    assert calls and all(not any(isinstance(a, torch.Tensor) for a in (*args, *kw.values()))
                         for args, kw in calls)

    # two graphs that differ outside the val part get the same val negatives from the same generator
    sparse = _graph([(0, 1), (2, 3)], n=n)
    extra = next(p for p, q in parts.items() if q == PARTS.index("message"))
    again = _graph([(0, 1), (2, 3), extra], n=n)
    outs = [PrivateLinkSplit(num_val=0.3, num_test=0.1, num_message=0.4, num_train=0.1, key=5,
                             neg_sampling_ratio=3.0, generator=torch.Generator().manual_seed(4))(g)[1]
            for g in (sparse, again)]
    assert torch.equal(outs[0].edge_label_index, outs[1].edge_label_index)


def _pairs_list(t):
    return [(min(u, v), max(u, v)) for u, v in t.t().tolist()]


def test_clean_maps_a_messy_graph_onto_its_simple_undirected_version():
    messy = torch.tensor([[0, 1, 1, 2, 3, 3], [1, 0, 2, 2, 4, 4]])  # a self-loop, one direction, a duplicate
    data = Data(x=torch.zeros(6, 1), edge_index=messy)
    with pytest.raises(ValueError, match="clean=True"):
        PrivateLinkSplit(key=1)(data)
    cleaned = _sets(PrivateLinkSplit(key=1, clean=True), data)
    simple = _sets(PrivateLinkSplit(key=1), Data(x=torch.zeros(6, 1),
                                                 edge_index=to_undirected(torch.tensor([[0, 1, 3], [1, 2, 4]]))))
    assert cleaned == simple


@pytest.mark.parametrize("kwargs, match", [
    ({"num_val": 0.0}, "num_val"), ({"num_test": 1.0}, "num_test"), ({"num_message": -0.1}, "num_message"),
    ({"num_train": 100}, "not a number of edges"), ({"num_val": True}, "num_val"),
    ({"num_message": 0.8, "num_train": 0.2}, "at most 1"), ({"neg_sampling_ratio": -1.0}, "neg_sampling_ratio"),
    ({"key": -1}, "key"), ({"key": 2 ** 64}, "key"),
])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PrivateLinkSplit(**kwargs)


def test_bad_inputs_are_refused():
    split = PrivateLinkSplit(key=1)
    hetero = HeteroData()
    hetero["user"].x = torch.zeros(3, 1)
    with pytest.raises(ValueError, match="one edge type"):
        split(hetero)
    with pytest.raises(ValueError, match="number of nodes"):
        split(Data(edge_index=to_undirected(torch.tensor([[0], [1]]))))
    with pytest.raises(ValueError, match="edge_index"):
        split(Data(x=torch.zeros(3, 1)))
    sampled = _graph([(0, 1)], n=4)
    sampled.n_id = torch.arange(4)
    with pytest.raises(ValueError, match="sampled subgraph"):
        split(sampled)


def test_key_repr_pickle_and_reproducibility():
    a, b = PrivateLinkSplit(), PrivateLinkSplit()
    assert a.key != b.key and 0 <= a.key < 2 ** 64  # drawn from the OS when not given
    t = PrivateLinkSplit(0.2, 0.05, num_message=0.6, num_train=0.15, key=255, generator=torch.Generator())
    assert repr(t) == ("PrivateLinkSplit(num_val=0.2, num_test=0.05, num_message=0.6, num_train=0.15, "
                       "neg_sampling_ratio=1, key=0xff, clean=False)")
    restored = pickle.loads(pickle.dumps(t))
    assert restored.generator is None and restored.rule == t.rule and repr(restored) == repr(t)
    data = _graph(ALL_PAIRS[::3])
    one = PrivateLinkSplit(key=9, generator=torch.Generator().manual_seed(3))(data)
    two = PrivateLinkSplit(key=9, generator=torch.Generator().manual_seed(3))(data)
    for x, y in zip(one, two):
        assert torch.equal(x.edge_index, y.edge_index) and torch.equal(x.edge_label_index, y.edge_label_index)
