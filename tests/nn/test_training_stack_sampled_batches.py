"""A neighbour-sampled batch is refused wherever its sampling metadata can be seen (the components
that receive the ``Data``), whatever the options: ``symmetrize=True``, which the layers' own error
suggests for directed input, does not let it through. (The layers take tensors, which carry no trace
of the sampler: there only a directed batch can be refused, see test_minibatch_semantics.py.)"""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant
from pyg_private.datasets import load_chain
from pyg_private.models import CaribouConfig, GCONConfig, run_caribou, run_gcon, run_progap
from pyg_private.models.progap import ProGAPConfig
from pyg_private.transforms import EdgeRandomizedResponse

# what PyG's NeighborLoader / LinkNeighborLoader / HGTLoader, ShaDowKHopSampler and GraphSAINT attach
SAMPLER_KEYS = ("n_id", "e_id", "input_id", "batch_size", "num_sampled_nodes", "num_sampled_edges", "seed_time",
                "_orig_edge_index", "root_n_id", "node_norm", "edge_norm")


def _graph(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ei = to_undirected(erdos_renyi_graph(n, 0.15), num_nodes=n)
    return F.normalize(torch.rand(n, 4, generator=g), dim=1), ei


def _neighbor_loader_batch(x, ei, seeds, fanout, gen):
    """What a one-hop NeighborLoader batch holds: the seeds first, up to ``fanout`` sampled in-edges
    each, the nodes relabelled, and the sampler's metadata."""
    keep = []
    for v in seeds.tolist():
        incoming = (ei[1] == v).nonzero().squeeze(1)
        keep.append(incoming[torch.randperm(incoming.numel(), generator=gen)[:fanout]])
    e_id = torch.cat(keep)
    src, dst = ei[:, e_id]
    others = src[~torch.isin(src, seeds)].unique()
    n_id = torch.cat([seeds, others])
    local = torch.full((x.size(0),), -1, dtype=torch.long)
    local[n_id] = torch.arange(n_id.numel())
    return Data(x=x[n_id], edge_index=torch.stack([local[src], local[dst]]), n_id=n_id, e_id=e_id,
                input_id=torch.arange(seeds.numel()), batch_size=seeds.numel(),
                num_sampled_nodes=[seeds.numel(), others.numel()], num_sampled_edges=[e_id.numel()])


@pytest.fixture()
def batch():
    x, ei = _graph()
    return _neighbor_loader_batch(x, ei, torch.arange(6), 3, torch.Generator().manual_seed(0))


def test_edge_randomized_response_refuses_a_sampled_batch_even_with_symmetrize(batch):
    acct = PrivacyAccountant()
    for symmetrize in (True, False):
        with pytest.raises(ValueError, match=r"sampled subgraph.*'n_id'.*symmetrize=True does not change"):
            EdgeRandomizedResponse(1.0, accountant=acct, symmetrize=symmetrize)(batch.clone())
    assert len(acct) == 0


@pytest.mark.parametrize("key", SAMPLER_KEYS)
def test_every_sampler_attribute_is_refused_alone(key):
    x, ei = _graph()
    data = Data(x=x, edge_index=ei)
    data[key] = torch.arange(3)
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match=repr(key)):
        EdgeRandomizedResponse(1.0, accountant=acct, symmetrize=True)(data)
    assert len(acct) == 0


def test_the_list_of_sampler_attributes_is_the_library_s():
    from pyg_private.nn._call_checks import SAMPLING_METADATA

    assert set(SAMPLING_METADATA) == set(SAMPLER_KEYS)


def test_a_hetero_batch_is_refused_by_any_of_its_stores():
    from pyg_private.nn._call_checks import reject_sampled_batch

    data = HeteroData()
    data["paper"].x = torch.rand(4, 2)
    data["paper"].n_id = torch.arange(4)
    with pytest.raises(ValueError, match="'n_id'"):
        reject_sampled_batch("layer", data)


def test_disjoint_graphs_of_a_dataloader_are_not_a_sampled_batch():
    """A DataLoader over a graph dataset collates disjoint graphs (``batch``, ``ptr``): not refused."""
    from pyg_private.nn._call_checks import reject_sampled_batch

    graphs = [Data(x=torch.rand(3, 2), edge_index=torch.tensor([[0, 1], [1, 0]])) for _ in range(3)]
    reject_sampled_batch("layer", Batch.from_data_list(graphs))
    out = EdgeRandomizedResponse(1.0, accountant=PrivacyAccountant())(Batch.from_data_list(graphs))
    assert out.num_nodes == 9


def _symmetrised(batch):
    """The sampled batch as an undirected simple graph (what symmetrize=True would make of it)."""
    out = batch.clone()
    out.edge_index = to_undirected(batch.edge_index[:, batch.edge_index[0] != batch.edge_index[1]],
                                   num_nodes=batch.num_nodes)
    out.y = torch.arange(batch.num_nodes) % 2
    mask = torch.ones(batch.num_nodes, dtype=torch.bool)
    out.train_mask, out.val_mask, out.test_mask = mask, mask, mask
    return out


def test_the_recipes_refuse_a_sampled_batch_before_anything(batch):
    data = _symmetrised(batch)
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="run_caribou got a sampled subgraph"):
        run_caribou(data, CaribouConfig("caribou", K=1, encoder_dim=4, hidden=4, epochs=1), epsilon=1.0, delta=1e-3,
                    min_degree=0, accountant=acct, seed=0)
    with pytest.raises(ValueError, match="run_gcon got a sampled subgraph"):
        run_gcon(data, GCONConfig(epochs=1), epsilon=1.0, delta=1e-3, accountant=acct, seed=0)
    with pytest.raises(ValueError, match="run_progap got a sampled subgraph"):
        run_progap(data, ProGAPConfig(), epsilon=1.0, delta=1e-3, accountant=acct, seed=0)
    assert len(acct) == 0


def test_the_whole_graph_released_once_still_runs():
    """The advice of the refusal: the recipe on the whole graph (no sampler metadata) runs."""
    chain = load_chain("Chain-S", seed=0)
    acct = PrivacyAccountant()
    run_caribou(chain, CaribouConfig("caribou", K=1, encoder_dim=4, hidden=4, epochs=1), epsilon=2.0, delta=1e-2,
                min_degree=0, accountant=acct, seed=0)
    assert len(acct) >= 1
