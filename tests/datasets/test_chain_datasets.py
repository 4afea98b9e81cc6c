"""CARIBOU's chain datasets (Table 6), built with the IGNN generator."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import degree, is_undirected

from pyg_private.datasets import CHAIN_PRESETS, chain_dataset, load_chain

TABLE_6 = {  # name: (nodes, chains, nodes per chain, train, test)
    "Chain-S": (48, 6, 8, 8, 32),
    "Chain-M": (60, 6, 10, 10, 40),
    "Chain-L": (90, 6, 15, 15, 60),
    "Chain-X": (150, 10, 15, 25, 100),
}


@pytest.mark.parametrize("name", sorted(TABLE_6))
def test_preset_matches_table_6(name):
    nodes, chains, length, train, test = TABLE_6[name]
    preset = CHAIN_PRESETS[name]
    assert preset.num_nodes == nodes
    assert preset.num_classes * preset.num_chains_per_class == chains
    data = load_chain(name, seed=0)
    assert data.num_nodes == nodes and data.x.shape == (nodes, 5)
    assert data.edge_index.size(1) == 2 * chains * (length - 1)
    sizes = [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)]
    assert sizes == [train, nodes - train - test, test]
    assert int(torch.stack([data.train_mask, data.val_mask, data.test_mask]).sum(0).max()) == 1


@pytest.mark.parametrize("name", sorted(TABLE_6))
def test_chain_structure(name):
    nodes, chains, length, _, _ = TABLE_6[name]
    data = load_chain(name, seed=1)
    ei = data.edge_index
    assert is_undirected(ei, num_nodes=nodes) and not bool((ei[0] == ei[1]).any())
    deg = degree(ei[0], nodes)
    assert int(deg.min()) == 1 and int(deg.max()) == 2
    pos = torch.arange(nodes) % length
    assert bool((deg[(pos == 0) | (pos == length - 1)] == 1).all())
    # Edges join consecutive nodes of the same chain only.
    assert bool(((ei[0] - ei[1]).abs() == 1).all())
    assert bool((ei[0] // length == ei[1] // length).all())
    # Labels are constant along a chain; half of the chains per class.
    chain = torch.arange(nodes) // length
    for k in range(chains):
        assert data.y[chain == k].unique().numel() == 1
    assert torch.bincount(data.y).tolist() == [nodes // 2, nodes // 2]


@pytest.mark.parametrize("name", sorted(TABLE_6))
def test_features(name):
    nodes, _, length, _, _ = TABLE_6[name]
    data = load_chain(name, seed=2)
    first = torch.arange(nodes) % length == 0
    assert float(data.x[~first].abs().max()) <= 1e-4  # non-first nodes: noise only
    one_hot = torch.nn.functional.one_hot(data.y[first], 5).float()
    assert torch.allclose(data.x[first], one_hot, atol=1e-4)  # one-hot added to noise
    assert float((data.x[first] - one_hot).abs().max()) > 0  # noise is kept
    assert data.x.dtype == torch.float and data.y.dtype == torch.long


def test_seed_determinism():
    a, b, c = load_chain("Chain-S", seed=5), load_chain("Chain-S", seed=5), load_chain("Chain-S", 6)
    assert torch.equal(a.x, b.x) and torch.equal(a.train_mask, b.train_mask)
    assert not torch.equal(a.x, c.x) and not torch.equal(a.train_mask, c.train_mask)
    assert torch.equal(a.edge_index, c.edge_index) and torch.equal(a.y, c.y)


def test_noise_free_chains():
    data = load_chain("chain-m", noise=0.0)  # names are case-insensitive
    first = torch.arange(60) % 10 == 0
    assert float(data.x[~first].abs().max()) == 0.0
    assert data.x[first].sum(1).tolist() == [1.0] * 6


def test_general_generator():
    data = chain_dataset(3, 2, 4, feature_dim=3, noise=0.0, num_train=6, num_val=6,
                         num_test=6, seed=0)
    assert data.num_nodes == 24 and data.y.tolist() == [0] * 8 + [1] * 8 + [2] * 8
    assert data.x[::4].tolist() == [[1, 0, 0]] * 2 + [[0, 1, 0]] * 2 + [[0, 0, 1]] * 2
    assert [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)] == [6] * 3


@pytest.mark.parametrize("kwargs, match", [
    (dict(chain_length=1), "chain_length"),
    (dict(num_classes=0), "num_classes"),
    (dict(num_chains_per_class=0), "num_chains_per_class"),
    (dict(feature_dim=1), "feature_dim"),
    (dict(noise=-1.0), "noise"),
    (dict(noise=float("inf")), "noise"),
    (dict(num_train=40, num_test=40), "num_train"),
    (dict(num_train=-1), "num_train"),
])
def test_bad_arguments(kwargs, match):
    args = {"num_classes": 2, "num_chains_per_class": 3, "chain_length": 8,
            "num_train": 8, "num_test": 32, **kwargs}
    with pytest.raises(ValueError, match=match):
        chain_dataset(**args)


def test_unknown_preset():
    with pytest.raises(ValueError, match="name"):
        load_chain("Chain-XL")
