"""BoundInDegree: the transform's map is the layers' cap, local to each node, and PyG-shaped."""
import copy
import pickle

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data, HeteroData

from pyg_private.transforms import BoundInDegree
from pyg_private.utils.degree_cap import cap_in_degree


def _random_graph(n=40, p=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.triu(torch.rand(n, n, generator=g) < p, 1)
    return (a | a.t()).nonzero().t()


def test_keeps_at_most_the_cap_per_target_and_equals_the_layers_map():
    ei = _random_graph()
    data = BoundInDegree(3, key=99)(Data(edge_index=ei, num_nodes=40))
    kept = data.edge_index
    assert int(torch.bincount(kept[1], minlength=40).max()) == 3
    assert torch.equal(kept[:, torch.argsort(kept[1] * 40 + kept[0])], cap_in_degree(ei, 40, 3, 99))
    pairs = set(map(tuple, ei.t().tolist()))
    assert set(map(tuple, kept.t().tolist())) <= pairs


def test_a_targets_kept_entries_depend_on_its_own_entries_only():
    ei = _random_graph(seed=1)
    full = BoundInDegree(4, key=5)(Data(edge_index=ei, num_nodes=40)).edge_index
    others = ei[:, (ei[1] == 7) | (torch.arange(ei.size(1)) % 3 == 0)]  # node 7's entries, a third of the rest
    part = BoundInDegree(4, key=5)(Data(edge_index=others, num_nodes=40)).edge_index
    assert sorted(full[0, full[1] == 7].tolist()) == sorted(part[0, part[1] == 7].tolist())


def test_edge_attributes_follow_and_the_key_decides():
    ei = _random_graph(seed=2)
    w = torch.arange(ei.size(1), dtype=torch.float)
    out = BoundInDegree(2, key=1)(Data(edge_index=ei, edge_weight=w, edge_attr=w[:, None], num_nodes=40))
    assert torch.equal(ei[:, out.edge_weight.long()], out.edge_index)
    assert torch.equal(out.edge_attr[:, 0], out.edge_weight)
    other = BoundInDegree(2, key=2)(Data(edge_index=ei, num_nodes=40)).edge_index
    assert not torch.equal(other, out.edge_index)
    seeded = [BoundInDegree(2, generator=torch.Generator().manual_seed(4)).key for _ in range(2)]
    assert seeded[0] == seeded[1]


def test_heterogeneous_compose_copy_and_bad_input():
    h = HeteroData()
    h["user"].num_nodes, h["item"].num_nodes = 5, 3
    h["user", "buys", "item"].edge_index = torch.tensor([[0, 1, 2, 3, 4, 0], [0, 0, 0, 0, 0, 1]])
    out = T.Compose([BoundInDegree(2, key=3)])(h)
    assert torch.bincount(out["user", "buys", "item"].edge_index[1]).tolist() == [2, 1]
    t = BoundInDegree(2, key=3)
    assert pickle.loads(pickle.dumps(t)).key == copy.deepcopy(t).key == 3
    assert repr(t) == "BoundInDegree(max_in_degree=2)"
    for bad in (0, -1, 2.5, True):
        with pytest.raises((ValueError, TypeError)):
            BoundInDegree(bad)
    with pytest.raises(ValueError, match="key"):
        BoundInDegree(2, key=-1)
