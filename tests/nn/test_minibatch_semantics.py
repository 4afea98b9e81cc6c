"""Mini-batching semantics of the release layers (README, "Mini-batches"): a neighbour-sampled batch
is refused with the reason, the precompute pattern costs one event whatever the batching of the
head, and disjoint graphs compose in parallel."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import MLP
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant
from pyg_private.nn import ContractiveGraphLayer, NoisyPPRDiffusion, PrecomputedPropagation


def _graph(n=60, seed=0):
    torch.manual_seed(seed)
    ei = to_undirected(erdos_renyi_graph(n, 0.1), num_nodes=n)
    x = F.normalize(torch.rand(n, 5), dim=1)
    return x, ei


def _neighbour_sample(ei, n, seeds, fanout, gen):
    """What a one-hop NeighborLoader batch holds: for each seed, up to ``fanout`` sampled in-edges."""
    keep = []
    for v in seeds.tolist():
        incoming = (ei[1] == v).nonzero().squeeze(1)
        keep.append(incoming[torch.randperm(incoming.numel(), generator=gen)[:fanout]])
    return ei[:, torch.cat(keep)]


@pytest.mark.parametrize("make", [
    lambda acct: ContractiveGraphLayer(K=2, contraction=0.9, min_degree=0, noise_multiplier=1.0, accountant=acct),
    lambda acct: NoisyPPRDiffusion(0.2, 5, 1e-3, noise_scale=1.0, accountant=acct),
])
def test_a_neighbour_sampled_batch_is_refused_with_the_reason_and_no_charge(make):
    x, ei = _graph()
    batch = _neighbour_sample(ei, 60, torch.arange(10), 3, torch.Generator().manual_seed(0))
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="NeighborLoader"):
        make(acct)(x, batch)
    assert len(acct) == 0


def test_the_head_trained_on_node_minibatches_costs_one_release():
    x, ei = _graph()
    y = torch.randint(3, (60,))
    acct = PrivacyAccountant()
    model = PrecomputedPropagation(
        ContractiveGraphLayer(K=2, contraction=0.9, min_degree=0, noise_multiplier=1.0, accountant=acct),
        MLP([10, 16, 3], norm=None))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):  # epochs
        for idx in torch.randperm(60).split(16):  # node mini-batches of the head
            opt.zero_grad()
            F.cross_entropy(model(x, ei)[idx], y[idx]).backward()
            opt.step()
    assert len(acct) == 1
    features = model.head_input(x, ei)
    assert len(acct) == 1 and features.shape == (60, 10)


def test_disjoint_graphs_compose_in_parallel_and_the_same_releases_in_sequence_cost_more():
    graphs = [_graph(20, seed=s) for s in range(4)]
    seq, par = PrivacyAccountant(), PrivacyAccountant()
    make = lambda acct: ContractiveGraphLayer(K=2, contraction=0.9, min_degree=0, noise_multiplier=1.0,  # noqa: E731
                                              accountant=acct, cached=False)
    layer_seq, layer_par = make(seq), make(par)
    for x, ei in graphs:
        layer_seq(x, ei)
    with par.parallel("epoch") as part:
        for i, (x, ei) in enumerate(graphs):
            with part(i):
                layer_par(x, ei)
    one = PrivacyAccountant()
    make(one)(*graphs[0])
    assert par.epsilon("edge", 1e-5) == pytest.approx(one.epsilon("edge", 1e-5), rel=1e-9)
    assert seq.epsilon("edge", 1e-5) > 1.5 * par.epsilon("edge", 1e-5)
