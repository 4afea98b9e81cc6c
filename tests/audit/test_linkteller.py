"""LinkTeller influence attack (edge inference through the inference API): it recovers the
edges of a GCN and of the non-private contractive layer, finds nothing in a graph-free
model, and is reduced to chance by a noisy layer that charges every query."""
import math

import pytest
import torch
from torch_geometric.nn import GCNConv
from torch_geometric.utils import stochastic_blockmodel_graph

from pyg_private.accounting import PrivacyAccountant
from pyg_private.audit import (
    LinkTellerResult,
    influence_matrix,
    linkteller_attack,
    linkteller_scores,
    sample_attack_nodes,
)
from pyg_private.nn import ContractiveGraphLayer

N = 80


@pytest.fixture(scope="module")
def graph():
    """A two-block SBM on 80 nodes (about 200 undirected edges, both directions stored)."""
    torch.manual_seed(0)
    edge_index = stochastic_blockmodel_graph([40, 40], [[0.1, 0.02], [0.02, 0.1]])
    x = torch.randn(N, 16)
    return x, edge_index


def _num_undirected(edge_index: torch.Tensor) -> int:
    lo = torch.minimum(edge_index[0], edge_index[1])
    hi = torch.maximum(edge_index[0], edge_index[1])
    keep = lo != hi
    return torch.unique(lo[keep] * N + hi[keep]).numel()


def _gcn_query(edge_index):
    torch.manual_seed(1)
    conv1, conv2 = GCNConv(16, 32), GCNConv(32, 8)
    return lambda f: conv2(conv1(f, edge_index).relu(), edge_index)


# --------------------------------------------------------------------------- attacks

def test_gcn_edges_are_recovered(graph):
    x, edge_index = graph
    nodes = torch.arange(N)
    result = linkteller_attack(_gcn_query(edge_index), x, edge_index, nodes)
    assert isinstance(result, LinkTellerResult)
    density = result.positives / (result.positives + result.negatives)
    assert result.positives == _num_undirected(edge_index)
    assert result.positives + result.negatives == N * (N - 1) // 2
    assert result.auc > 0.9  # measured 0.970
    assert result.advantage == max(result.auc, 1 - result.auc)
    assert result.precision_at_k > 5 * density  # measured 0.61 vs density 0.063
    assert result.queries == 1 + N
    assert result.scores.shape == result.labels.shape == (result.positives + result.negatives,)
    assert result.pairs.shape == (2, result.scores.numel())
    assert bool((result.pairs[0] < result.pairs[1]).all())
    # labels agree with the graph
    truth = torch.zeros(N, N, dtype=torch.bool)
    truth[edge_index[0], edge_index[1]] = True
    assert torch.equal(result.labels, truth[result.pairs[0], result.pairs[1]])


def test_gcn_on_sampled_nodes(graph):
    x, edge_index = graph
    nodes = sample_attack_nodes(edge_index, N, 15, generator=torch.Generator().manual_seed(1))
    result = linkteller_attack(_gcn_query(edge_index), x, edge_index, nodes)
    assert result.positives >= 15
    assert result.queries == 1 + nodes.numel()
    assert result.auc > 0.9  # measured 0.965


def test_graph_free_model_leaks_nothing(graph):
    x, edge_index = graph
    torch.manual_seed(2)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    nodes = torch.arange(0, N, 2)
    influence = influence_matrix(mlp, x, nodes)
    off_diagonal = ~torch.eye(nodes.numel(), dtype=torch.bool)
    assert bool((influence[off_diagonal] == 0).all())
    assert bool((influence.diagonal() > 0).all())  # a node does influence its own output
    result = linkteller_attack(mlp, x, edge_index, nodes)
    assert result.auc == 0.5 and result.advantage == 0.5
    # all scores tie: the tie-averaged precision at k is the density of the pair set
    assert result.precision_at_k == pytest.approx(result.positives / (result.positives + result.negatives))


def test_query_count_and_no_grad(graph):
    x, edge_index = graph
    gcn = _gcn_query(edge_index)
    calls, grad_modes = [], []

    def query(f):
        calls.append(f)
        grad_modes.append(torch.is_grad_enabled())
        return gcn(f)

    nodes = torch.tensor([3, 7, 11, 40, 41])
    influence = influence_matrix(query, x, nodes, perturbation=0.05)
    assert influence.shape == (5, 5) and influence.dtype == torch.float64
    assert len(calls) == 1 + nodes.numel()
    assert not any(grad_modes)
    # the baseline is x itself; query k scales row nodes[k-1] by 1.05 and nothing else
    assert torch.equal(calls[0], x)
    for k, u in enumerate(nodes.tolist(), start=1):
        changed = (calls[k] != x).any(dim=1).nonzero().view(-1).tolist()
        assert changed in ([u], [])  # [] only for an all-zero row
        assert torch.allclose(calls[k][u], 1.05 * x[u])


def test_targets_and_perturbation_scale(graph):
    x, edge_index = graph
    gcn = _gcn_query(edge_index)
    nodes, targets = torch.tensor([0, 5]), torch.tensor([1, 2, 3, 0])
    influence = influence_matrix(gcn, x, nodes, targets=targets)
    assert influence.shape == (2, 4)
    base = gcn(x).detach()
    x2 = x.clone()
    x2[5] *= 1.01
    expected = (gcn(x2).detach()[targets] - base[targets]).double().norm(dim=1) / 0.01
    assert torch.allclose(influence[1], expected, rtol=1e-4, atol=1e-6)


def test_symmetric_and_asymmetric_scores():
    # a directed chain 0 -> 1 -> 2: node u influences only itself and its successor
    a = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    x = torch.eye(3, dtype=torch.float64)
    influence = influence_matrix(lambda f: a.double() @ f, x, torch.arange(3))
    assert influence[0, 1] == pytest.approx(1.0) and influence[1, 0] == 0
    assert linkteller_scores(influence, symmetric=False).equal(influence)
    sym = linkteller_scores(influence)
    assert torch.allclose(sym, sym.T) and sym[0, 1] == pytest.approx(0.5)
    assert torch.allclose(sym, (influence + influence.T) / 2)
    edge_index = torch.tensor([[1], [0]])  # stored in one direction only: still the undirected pair (0, 1)
    one_way = linkteller_attack(lambda f: a.double() @ f, x, edge_index, torch.arange(3), symmetric=False)
    assert torch.allclose(one_way.scores, torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64))
    assert one_way.labels.tolist() == [True, False, False]
    assert one_way.pairs.tolist() == [[0, 0, 1], [1, 2, 2]]
    both_ways = linkteller_attack(lambda f: a.double() @ f, x, edge_index, torch.arange(3))
    assert torch.allclose(both_ways.scores, torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="square"):
        linkteller_scores(torch.zeros(2, 3))


def test_sample_attack_nodes(graph):
    _, edge_index = graph
    g = torch.Generator().manual_seed(5)
    nodes = sample_attack_nodes(edge_index, N, 10, generator=g)
    again = sample_attack_nodes(edge_index, N, 10, generator=torch.Generator().manual_seed(5))
    assert torch.equal(nodes, again)
    assert nodes.dtype == torch.long
    assert torch.equal(nodes, torch.unique(nodes))  # unique and sorted
    inside = torch.isin(edge_index[0], nodes) & torch.isin(edge_index[1], nodes) & (edge_index[0] != edge_index[1])
    assert _num_undirected(edge_index[:, inside]) >= 10
    # every returned node is the endpoint of an edge whose other endpoint was also returned
    for u in nodes.tolist():
        assert bool(torch.isin(edge_index[1, edge_index[0] == u], nodes).any())
    assert 2 <= nodes.numel() <= 20
    # all edges: every non-isolated node
    everything = sample_attack_nodes(edge_index, N, _num_undirected(edge_index))
    assert torch.equal(everything, torch.unique(edge_index))
    # a pair stored once or twice is one edge
    assert torch.equal(sample_attack_nodes(torch.tensor([[0, 1, 2], [1, 0, 2]]), 3, 1), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="num_edges"):
        sample_attack_nodes(torch.tensor([[0, 1, 2], [1, 0, 2]]), 3, 2)  # the self-loop is no edge
    with pytest.raises(ValueError, match="num_edges"):
        sample_attack_nodes(edge_index, N, 0)
    with pytest.raises(ValueError, match="edge_index"):
        sample_attack_nodes(edge_index, 10, 1)


# --------------------------------------------------------------------------- our layers

def _unit_ball(x):
    return x / (4 * x.norm(dim=1, keepdim=True))  # rows of norm 1/4: no clipping of the input


def test_contractive_layer_without_noise_leaks(graph):
    x, edge_index = graph
    layer = ContractiveGraphLayer(K=2, contraction=0.9, min_degree=0, noise_multiplier=0)
    result = linkteller_attack(lambda f: layer(f, edge_index), _unit_ball(x), edge_index, torch.arange(N))
    assert result.auc > 0.8  # measured 0.983


def test_noisy_contractive_layer_charges_every_query(graph):
    x, edge_index = graph
    accountant = PrivacyAccountant()
    layer = ContractiveGraphLayer(K=2, contraction=0.9, min_degree=0, noise_multiplier=10.0,
                                  accountant=accountant, generator=torch.Generator().manual_seed(3))
    nodes = torch.arange(N)
    result = linkteller_attack(lambda f: layer(f, edge_index), _unit_ball(x), edge_index, nodes)
    assert result.positives > 150
    assert abs(result.auc - 0.5) < 0.15  # measured 0.502
    assert result.queries == 1 + N
    assert len(accountant) == 1 + N
    assert len(accountant.events_of("edge")) == 1 + N
    assert math.isfinite(accountant.epsilon("edge", 1e-5))


# --------------------------------------------------------------------------- validation

def test_validation(graph):
    x, edge_index = graph
    q = _gcn_query(edge_index)
    nodes = torch.arange(10)
    with pytest.raises(ValueError, match="shape"):
        influence_matrix(q, x[0], nodes)
    with pytest.raises(ValueError, match="floating"):
        influence_matrix(q, x.long(), nodes)
    bad = x.clone()
    bad[3, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        influence_matrix(q, bad, nodes)
    with pytest.raises(TypeError, match="x"):
        influence_matrix(q, x.tolist(), nodes)
    with pytest.raises(ValueError, match="nodes"):
        influence_matrix(q, x, torch.tensor([0, N]))
    with pytest.raises(ValueError, match="nodes"):
        influence_matrix(q, x, torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match="repeat"):
        influence_matrix(q, x, torch.tensor([1, 2, 1]))
    with pytest.raises(ValueError, match="nodes"):
        influence_matrix(q, x, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="targets"):
        influence_matrix(q, x, nodes, targets=torch.tensor([N + 3]))
    for p in (0.0, -0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="perturbation"):
            influence_matrix(q, x, nodes, perturbation=p)
    with pytest.raises(TypeError, match="perturbation"):
        influence_matrix(q, x, nodes, perturbation=True)
    # query outputs
    with pytest.raises(ValueError, match=r"\[N, C\]"):
        influence_matrix(lambda f: f.sum(dim=1), x, nodes)
    with pytest.raises(ValueError, match=r"\[N, C\]"):
        influence_matrix(lambda f: f[:5], x, nodes)
    with pytest.raises(ValueError, match=r"\[N, C\]"):
        influence_matrix(lambda f: f.numpy(), x, nodes)
    with pytest.raises(ValueError, match="NaN or infinite"):
        influence_matrix(lambda f: f / 0, x, nodes)
    shapes = iter([(N, 4), (N, 3)])
    with pytest.raises(ValueError, match="baseline"):
        influence_matrix(lambda f: torch.zeros(next(shapes)), x, nodes)
    # attack-level checks: made before any query
    calls = []

    def counted(f):
        calls.append(1)
        return q(f)

    with pytest.raises(ValueError, match="at least 2"):
        linkteller_attack(counted, x, edge_index, torch.tensor([0]))
    isolated = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="no attacked pair is an edge"):
        linkteller_attack(counted, x, isolated, torch.tensor([2, 3, 4]))
    with pytest.raises(ValueError, match="every attacked pair is an edge"):
        linkteller_attack(counted, x, isolated, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="num_nodes"):
        linkteller_attack(counted, x, edge_index, nodes, num_nodes=N + 1)
    with pytest.raises(ValueError, match="edge_index"):
        linkteller_attack(counted, x, torch.tensor([[0, N]]), nodes)
    with pytest.raises(ValueError, match="edge_index"):
        linkteller_attack(counted, x, torch.tensor([[0], [N]]), nodes)
    with pytest.raises(ValueError, match="perturbation"):
        linkteller_attack(counted, x, edge_index, nodes, perturbation=0.0)
    assert calls == []
