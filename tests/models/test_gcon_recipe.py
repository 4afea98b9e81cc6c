"""The GCON recipe: one event per run, pseudo-labels on every node, the cached search, GCN reference."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from pyg_private.datasets import attach_split, per_class_split
from pyg_private.models import GCONConfig, gcon_grid, run_gcn, run_gcon, search_gcon

FAST = dict(epochs=20, encoder_dim=8)


@pytest.fixture(scope="module")
def graph():
    g = torch.Generator().manual_seed(0)
    n, c = 60, 3
    y = torch.arange(n) % c
    x = torch.nn.functional.one_hot(y, c).float() + 0.8 * torch.randn(n, c, generator=g)
    x = torch.cat([x, torch.randn(n, 5, generator=g)], dim=1)
    src = torch.randint(n, (300,), generator=g)
    dst = torch.randint(n, (300,), generator=g)
    keep = (y[src] == y[dst]) & (src != dst)
    ei = to_undirected(torch.stack([src[keep], dst[keep]]), num_nodes=n)
    return attach_split(Data(x=x, edge_index=ei, y=y), per_class_split(y, 5, 15, 30, seed=0))


def test_one_event_and_the_rows_the_loss_covers(graph):
    r = run_gcon(graph, GCONConfig(pseudo_labels=False, **FAST), epsilon=2.0, delta=1e-3, seed=0)
    (event,) = r.accountant.events
    eps, delta = event.approx  # the safe fit charges at most the target (eps/128 twice to the closeness)
    assert 2.0 * (1 - 1e-9) < eps <= 2.0 and delta <= 1e-3 and event.unit.value == "edge"
    assert r.fit.num_rows == 15 and r.fit.converged
    p = run_gcon(graph, GCONConfig(pseudo_labels=True, **FAST), epsilon=2.0, delta=1e-3, seed=0)
    assert p.fit.num_rows == 60  # n_1 = n with the encoder's labels
    assert 0 <= p.test_accuracy <= 1


def test_logit_embedding_has_the_class_width(graph):
    r = run_gcon(graph, GCONConfig(embedding="logits", **FAST), epsilon=2.0, delta=1e-3, seed=0)
    assert r.fit.calibration.d == 3
    h = run_gcon(graph, GCONConfig(embedding="hidden", **FAST), epsilon=2.0, delta=1e-3, seed=0)
    assert h.fit.calibration.d == 8


def test_search_reuses_encodings_and_selects_on_validation(graph):
    grid = gcon_grid(alpha=(0.4, 0.8), epochs=(20,), encoder_dim=(8,))
    cache = {}
    best, runs = search_gcon([graph, graph], grid, epsilon=1.0, delta=1e-3, seeds=(0, 1), cache=cache)
    assert len(cache) == 2 and best in grid and len(runs) == 2  # one encoding per run, shared by the grid
    scores = {c: sum(run_gcon(graph, c, epsilon=1.0, delta=1e-3, seed=s).val_accuracy for s in (0, 1)) for c in grid}
    assert scores[best] == max(scores.values())


def test_gcn_reference_learns(graph):
    val, test = run_gcn(graph, hidden=16, epochs=50, seed=0)
    assert test > 0.6


def test_gcn_reference_sparse_path_is_the_same_model(graph):
    """Sparse features take forward_sparse: the same logits as GCNConv's forward (eval mode), and
    run_gcn on a sparse copy of the features reaches the dense path's accuracy on this graph."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    from pyg_private.models.gcon import _GCN

    torch.manual_seed(0)
    x = torch.where(torch.rand(graph.num_nodes, 40) < 0.05, 1.0, 0.0)
    model = _GCN(40, 16, 3, 0.5).eval()
    ei, w = gcn_norm(graph.edge_index, num_nodes=graph.num_nodes, add_self_loops=True)
    adj = torch.sparse_coo_tensor(ei.flip(0), w, (graph.num_nodes,) * 2).coalesce()
    dense, sparse = model(x, graph.edge_index), model.forward_sparse(x.to_sparse().coalesce(), adj)
    assert torch.allclose(dense, sparse, atol=1e-6) and dense.abs().max() > 1e-3
    one_hot = graph.clone()
    one_hot.x = torch.nn.functional.one_hot(graph.y, 20).float()  # 5% dense: the sparse path; labels leak in
    val, test = run_gcn(one_hot, hidden=16, epochs=100, seed=0)
    assert test > 0.9


def test_released_inference_spends_the_same_budget_on_two_releases(graph):
    """inference="released": half the budget for the head, half for one GAP aggregation that the
    predictions read instead of the private graph; the ledger stays within (epsilon, delta)."""
    r = run_gcon(graph, GCONConfig(inference="released", **FAST), epsilon=2.0, delta=1e-3, seed=0)
    names = [e.name for e in r.accountant.events]
    assert len(names) == 2 and "gcon_inference_aggregation" in names
    assert r.accountant.epsilon("edge", 1e-3) <= 2.0 + 1e-9
    assert 0.0 <= r.test_accuracy <= 1.0


def test_released_inference_is_refused_whole_when_the_budget_cannot_pay_both(graph):
    from pyg_private.accounting import PrivacyAccountant, PrivacyBudgetExceeded

    acct = PrivacyAccountant(budget={"edge": (1.5, 1e-3)})  # the head's half (1.0) fits, not both halves
    with pytest.raises(PrivacyBudgetExceeded):
        run_gcon(graph, GCONConfig(inference="released", **FAST), epsilon=2.0, delta=1e-3, seed=0, accountant=acct)
    assert len(acct.events) == 0
