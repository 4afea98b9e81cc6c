"""User-item (bipartite) link prediction: PrivateLinkSplit on a HeteroData with one edge type, the
graph-blind negatives across the two sides, and run_link_prediction on the split."""
from __future__ import annotations

import math

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import HeteroData

from pyg_private import PrivacyAccountant
from pyg_private.models import LinkPredictionConfig, run_link_prediction
from pyg_private.transforms import PrivateLinkSplit
from pyg_private.transforms.private_link_split import bipartite_union
from pyg_private.utils import sample_pairs

USERS, ITEMS, GROUPS = 120, 90, 3


def user_item_graph(seed: int = 0, interactions: int = 900) -> HeteroData:
    """Users and items in 3 groups; a user interacts mostly (90%) with items of its group; each
    side's features carry its group plus noise (different widths on the two sides)."""
    g = torch.Generator().manual_seed(seed)
    user_group = torch.arange(USERS) % GROUPS
    item_group = torch.arange(ITEMS) % GROUPS
    u = torch.randint(0, USERS, (interactions,), generator=g)
    same = torch.rand(interactions, generator=g) < 0.9
    pick = torch.randint(0, ITEMS // GROUPS, (interactions,), generator=g) * GROUPS + user_group[u]
    i = torch.where(same, pick, torch.randint(0, ITEMS, (interactions,), generator=g))
    keys = torch.unique(u * ITEMS + i)
    data = HeteroData()
    data["user"].x = torch.nn.functional.one_hot(user_group, 8).float() + 0.3 * torch.randn(USERS, 8, generator=g)
    data["item"].x = torch.nn.functional.one_hot(item_group, 5).float() + 0.3 * torch.randn(ITEMS, 5, generator=g)
    data["user", "buys", "item"].edge_index = torch.stack([keys // ITEMS, keys % ITEMS])
    return data


def _split(data, key=7, **kwargs):
    return PrivateLinkSplit(key=key, generator=torch.Generator().manual_seed(0), **kwargs)(data)


def test_union_layout_and_every_pair_across_the_sides():
    data = user_item_graph()
    train, val, test = _split(data)
    n = USERS + ITEMS
    assert train.num_nodes == n and train.split_num_src == USERS and train.x.shape == (n, 13)
    assert torch.equal(train.x[:USERS, :8], data["user"].x) and torch.equal(train.x[USERS:, 8:], data["item"].x)
    assert float(train.x[:USERS, 8:].abs().sum()) == 0 and float(train.x[USERS:, :8].abs().sum()) == 0
    for pairs in (train.edge_index, train.edge_label_index, val.edge_label_index, test.edge_label_index):
        lo, hi = pairs.min(0).values, pairs.max(0).values
        assert bool((lo < USERS).all()) and bool((hi >= USERS).all())
    # every interaction lands in exactly one part
    total = train.edge_index.size(1) // 2 + train.edge_label_index.size(1) + int(val.edge_label.sum()) \
        + int(test.edge_label.sum())
    assert total == data["user", "buys", "item"].edge_index.size(1)
    assert int((val.edge_label == 0).sum()) == int(val.edge_label.sum())  # one negative per positive


def test_a_pairs_part_does_not_depend_on_the_other_interactions():
    data = user_item_graph()
    train, _, _ = _split(data)
    other = data.clone()
    ei = other["user", "buys", "item"].edge_index
    other["user", "buys", "item"].edge_index = ei[:, 1:]  # one interaction removed
    train2, _, _ = _split(other)
    removed = torch.tensor([[int(ei[0, 0])], [int(ei[1, 0]) + USERS]])

    def keys(t):
        return set((t[0] * 10_000 + t[1]).tolist())
    before = keys(train.edge_label_index) | keys(train.edge_index[:, train.edge_index[0] < train.edge_index[1]])
    after = keys(train2.edge_label_index) | keys(train2.edge_index[:, train2.edge_index[0] < train2.edge_index[1]])
    assert before - after <= keys(removed) and after <= before


def test_to_undirected_reverse_is_accepted_and_other_shapes_refused():
    data = user_item_graph()
    a = _split(data)[0]
    b = _split(T.ToUndirected()(data.clone()))[0]
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.edge_label_index, b.edge_label_index)
    two = data.clone()
    two["user", "likes", "item"].edge_index = data["user", "buys", "item"].edge_index[:, :10]
    with pytest.raises(ValueError, match="one edge type"):
        _split(two)
    same = HeteroData()
    same["user"].x = torch.randn(5, 2)
    same["user", "follows", "user"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match="joins one node type"):
        _split(same)
    dup = data.clone()
    ei = dup["user", "buys", "item"].edge_index
    dup["user", "buys", "item"].edge_index = torch.cat([ei, ei[:, :3]], dim=1)
    with pytest.raises(ValueError, match="twice; pass clean=True"):
        _split(dup)
    assert _split(dup, clean=True)[0].edge_index.size(1) == a.edge_index.size(1)
    bad = data.clone()
    bad["user", "buys", "item"].edge_index = torch.tensor([[0], [ITEMS]])
    with pytest.raises(ValueError, match="outside"):
        bipartite_union(bad)


def test_bipartite_negatives_are_uniform_across_the_sides():
    pairs = sample_pairs(50, 20_000, num_src=20, generator=torch.Generator().manual_seed(1))
    assert bool((pairs[0] < 20).all()) and bool((pairs[1] >= 20).all())
    counts = torch.bincount(pairs[0], minlength=20).double()
    chi2 = float(((counts - counts.mean()) ** 2 / counts.mean()).sum())
    assert chi2 < 60  # 19 degrees of freedom: far in the tail only if the sides were not uniform
    for bad in (0, 50, -1):
        with pytest.raises(ValueError, match="num_src"):
            sample_pairs(50, 10, num_src=bad)


def test_recipe_on_a_user_item_graph_one_ledger_and_cross_negatives(monkeypatch):
    train, val, test = _split(user_item_graph())
    import pyg_private.models.link_training as training
    seen = []
    real = training.sample_pairs

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out)
        return out
    monkeypatch.setattr(training, "sample_pairs", spy)
    acct = PrivacyAccountant()
    config = LinkPredictionConfig(epochs=5, feature_dim=8)
    result = run_link_prediction(train, val, test, config, epsilon=4.0, delta=1e-5, num_edges=900, accountant=acct,
                                 seed=0)
    assert seen and all(bool((s[0] < USERS).all() and (s[1] >= USERS).all()) for s in seen)
    assert math.isclose(acct.get_epsilon(1e-5), 4.0, rel_tol=0.02)
    free = run_link_prediction(train, val, test, config, epsilon=math.inf, delta=1e-5, seed=0)
    assert free.candidates["private"]["test"]["auc"] > 0.75  # the group structure is learnt without noise
    assert result.test["auc"] > 0.5


def test_mixed_splits_are_refused():
    train, val, test = _split(user_item_graph())
    del val.split_num_src
    with pytest.raises(ValueError, match="split_num_src"):
        run_link_prediction(train, val, test, LinkPredictionConfig(), epsilon=1.0, delta=1e-5, num_edges=900)


def test_a_homogeneous_union_carrying_split_num_src_is_split_as_the_user_item_graph():
    data = user_item_graph()
    union, n_s = bipartite_union(data)
    union.split_num_src = n_s
    hetero = _split(data)
    homo = _split(union)
    for a, b in zip(hetero, homo):
        assert b.split_num_src == USERS
        assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.edge_label_index, b.edge_label_index)
    for pairs in (homo[1].edge_label_index, homo[2].edge_label_index):  # negatives across the sides too
        assert bool((pairs.min(0).values < USERS).all()) and bool((pairs.max(0).values >= USERS).all())
    run_link_prediction(*homo, LinkPredictionConfig(epochs=1), epsilon=1.0, delta=1e-5, num_edges=900, seed=0)
    inside = union.clone()
    inside.split_num_src = USERS + 1  # item 0 joins the user side: its interactions are within one side
    with pytest.raises(ValueError, match="same side"):
        _split(inside)
    for bad in (0, USERS + ITEMS, True):
        inside.split_num_src = bad
        with pytest.raises(ValueError, match="split_num_src"):
            _split(inside)
