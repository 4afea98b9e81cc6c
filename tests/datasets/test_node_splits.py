"""Seeded node splits: per class (GCON), random fractions (CARIBOU, PrivGE), counts."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from pyg_private.datasets import (
    attach_split,
    per_class_split,
    random_count_split,
    random_fraction_split,
    random_split,
)


def _sizes(split):
    return [int(m.sum()) for m in split]


def _disjoint(split):
    return int(torch.stack(split).sum(0).max()) <= 1


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def labels():
    # 7 classes of unequal sizes (30 + 2c nodes), 252 nodes, in shuffled order.
    y = torch.cat([torch.full((30 + 2 * c,), c) for c in range(7)])
    return y[torch.randperm(y.numel(), generator=torch.Generator().manual_seed(5))]


# ----------------------------------------------------------------- per_class_split
def test_per_class_sizes_and_counts(labels):
    split = per_class_split(labels, 20, 40, 72, seed=0)  # 252 - 140 = 112 = 40 + 72
    assert _sizes(split) == [140, 40, 72] and _disjoint(split)
    assert torch.bincount(labels[split[0]], minlength=7).tolist() == [20] * 7
    assert all(m.dtype == torch.bool and m.shape == labels.shape for m in split)


def test_per_class_defaults_are_gcon(labels):
    y = labels.repeat(10)  # 2520 nodes
    assert _sizes(per_class_split(y)) == [140, 500, 1000]


def test_per_class_is_deterministic_under_the_seed(labels):
    assert _same(per_class_split(labels, 5, 20, 30, seed=3),
                 per_class_split(labels, 5, 20, 30, seed=3))
    assert not _same(per_class_split(labels, 5, 20, 30, seed=3),
                     per_class_split(labels, 5, 20, 30, seed=4))


def test_per_class_test_rest(labels):
    split = per_class_split(labels, 10, 50, None, seed=0)
    assert _sizes(split) == [70, 50, labels.numel() - 120] and _disjoint(split)
    assert bool(torch.stack(split).any(0).all())


def test_per_class_generator_argument(labels):
    g = torch.Generator().manual_seed(3)
    assert _same(per_class_split(labels, 5, 20, 30, seed=g),
                 per_class_split(labels, 5, 20, 30, seed=3))


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_per_class=31), "num_per_class"),          # class 0 has 30 nodes
    (dict(num_per_class=-1), "num_per_class"),
    (dict(num_per_class=20, num_val=40, num_test=73), "num_val"),  # 112 left
    (dict(num_per_class=1, num_classes=8), "num_per_class"),  # class 7 is empty
    (dict(num_per_class=1, num_classes=3), "num_classes"),
    (dict(seed=-1), "seed"),
])
def test_per_class_bad_arguments(labels, kwargs, match):
    kwargs = {"num_val": 10, "num_test": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        per_class_split(labels, **kwargs)


@pytest.mark.parametrize("y", [torch.rand(10), torch.zeros(5, 2, dtype=torch.long),
                               torch.tensor([0, -1, 1]), torch.zeros(0, dtype=torch.long)])
def test_per_class_bad_labels(y):
    with pytest.raises(ValueError, match="`y`"):
        per_class_split(y, 0, 0, 0)


def test_per_class_type_errors(labels):
    with pytest.raises(TypeError, match="num_per_class"):
        per_class_split(labels, 2.5)
    with pytest.raises(TypeError, match="seed"):
        per_class_split(labels, 2, 10, 10, seed="0")


# ------------------------------------------------------------------- random splits
def test_caribou_fractions():
    split = random_fraction_split(2708, seed=0)
    assert _sizes(split) == [270, 2708 - 270 - 541, 541] and _disjoint(split)
    assert bool(torch.stack(split).any(0).all())


def test_privge_fractions():
    split = random_split(1000, 0.5, 0.25, 0.25, 7)
    assert _sizes(split) == [500, 250, 250] and _disjoint(split)


def test_fraction_rounding_is_robust():
    assert _sizes(random_split(100, 0.29, None, 0.71)) == [29, 0, 71]


def test_random_split_is_deterministic_under_the_seed():
    assert _same(random_split(500, 0.5, 0.25, 0.25, seed=1),
                 random_split(500, 0.5, 0.25, 0.25, seed=1))
    assert not _same(random_split(500, 0.5, 0.25, 0.25, seed=1),
                     random_split(500, 0.5, 0.25, 0.25, seed=2))


@pytest.mark.parametrize("args, match", [
    ((100, 1.5, None, 0.2), "train"),
    ((100, 0.1, -0.1, 0.2), "val"),
    ((100, 0.1, None, float("nan")), "test"),
    ((100, 0.6, None, 0.5), "`train` \\+ `test`"),
    ((100, 0.5, 0.3, 0.3), "`train` \\+ `val` \\+ `test`"),
    ((0, 0.1, None, 0.2), "num_nodes"),
])
def test_random_split_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        random_split(*args)


def test_count_split():
    split = random_count_split(48, num_train=8, num_test=32, seed=0)
    assert _sizes(split) == [8, 8, 32] and _disjoint(split)
    assert _sizes(random_count_split(48, num_train=8, num_val=3, num_test=32)) == [8, 3, 32]
    with pytest.raises(ValueError, match="num_train"):
        random_count_split(48, num_train=20, num_test=30)
    with pytest.raises(ValueError, match="num_val"):
        random_count_split(48, num_train=8, num_val=9, num_test=32)


@settings(max_examples=60, deadline=None)
@given(num_nodes=st.integers(1, 300),
       fractions=st.lists(st.floats(0, 1), min_size=3, max_size=3),
       rest=st.booleans(), seed=st.integers(0, 2**32))
def test_random_split_properties(num_nodes, fractions, rest, seed):
    total = sum(fractions)
    if total > 1:
        fractions = [f / total / (1 + 1e-9) for f in fractions]
    train, val, test = fractions
    split = random_split(num_nodes, train, None if rest else val, test, seed=seed)
    assert _disjoint(split)
    sizes = _sizes(split)
    assert abs(sizes[0] - train * num_nodes) < 1 + 1e-6
    assert abs(sizes[2] - test * num_nodes) < 1 + 1e-6
    if rest:
        assert sum(sizes) == num_nodes
    else:
        assert sum(sizes) <= num_nodes and abs(sizes[1] - val * num_nodes) < 1 + 1e-6


# -------------------------------------------------------------------- attach_split
def test_attach_split_returns_a_copy():
    data = Data(x=torch.ones(10, 2), edge_index=torch.tensor([[0, 1], [1, 0]]))
    split = random_split(10, 0.5, 0.2, 0.3, seed=0)
    out = attach_split(data, split)
    assert out.train_mask is split[0] and out.val_mask is split[1] and out.test_mask is split[2]
    assert "train_mask" not in data and out.x is data.x


def test_attach_split_checks_shapes():
    data = Data(x=torch.ones(10, 2))
    with pytest.raises(ValueError, match="train_mask"):
        attach_split(data, random_split(9, 0.5, 0.2, 0.3))
    with pytest.raises(ValueError, match="split"):
        attach_split(data, random_split(10, 0.5, 0.2, 0.3)[:2])
