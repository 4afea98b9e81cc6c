"""sample_pairs: uniform pairs u != v (optionally of one hash part), reproducible, never given a graph;
LinkSplitRule: validation and where it is read from."""
import itertools
from collections import Counter

import pytest
import torch
from torch_geometric.data import Data

from pyg_private.utils import LinkSplitRule, sample_pairs


def test_pairs_are_uniform_distinct_and_ordered():
    n, draws = 8, 28_000
    pairs = sample_pairs(n, draws, generator=torch.Generator().manual_seed(0))
    assert pairs.shape == (2, draws) and pairs.dtype == torch.long
    assert bool((pairs[0] < pairs[1]).all()) and int(pairs.max()) < n
    counts = Counter(map(tuple, pairs.t().tolist()))
    assert set(counts) == set(itertools.combinations(range(n), 2))
    expected = draws / 28
    assert max(abs(c - expected) for c in counts.values()) < 5 * expected ** 0.5
    assert sample_pairs(n, 0).shape == (2, 0)


def test_pairs_of_one_part_and_reproducibility():
    rule = LinkSplitRule(99, (0.5, 0.2, 0.2, 0.1))
    gen = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    for part in ("message", "train", "val", "test"):
        pairs = sample_pairs(300, 500, part=part, split=rule, generator=gen())
        assert pairs.shape == (2, 500) and bool((rule.part_of(pairs, 300) == rule.index(part)).all())
    a = sample_pairs(300, 100, part="val", split=rule, generator=gen())
    b = sample_pairs(300, 100, part=2, split=rule, generator=gen())
    assert torch.equal(a, b)
    # the rule read off data made by PrivateLinkSplit
    data = Data(x=torch.zeros(300, 1), split_key=99, split_shares=(0.5, 0.2, 0.2, 0.1))
    assert torch.equal(sample_pairs(300, 100, part="val", split=data, generator=gen()), a)


@pytest.mark.parametrize("kwargs, error", [
    ({"num_nodes": 1, "count": 3}, ValueError), ({"num_nodes": 5, "count": -1}, ValueError),
    ({"num_nodes": 5.0, "count": 3}, TypeError), ({"num_nodes": 5, "count": 3, "part": "val"}, ValueError),
    ({"num_nodes": 5, "count": 3, "split": LinkSplitRule(1, (0.1,) * 4)}, ValueError),
    ({"num_nodes": 5, "count": 3, "part": "train", "split": Data(x=torch.zeros(5, 1))}, ValueError),
    ({"num_nodes": 5, "count": 3, "part": "nope", "split": LinkSplitRule(1, (0.1,) * 4)}, ValueError),
])
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(error):
        sample_pairs(**kwargs)


@pytest.mark.parametrize("shares", [(0.5, 0.5, 0.1, 0.1), (0.0, 0.1, 0.1, 0.1), (0.1, 0.1, 0.1), (1, 0.1, 0.1, 0.1)])
def test_a_rule_validates_its_shares(shares):
    with pytest.raises(ValueError):
        LinkSplitRule(1, shares)
