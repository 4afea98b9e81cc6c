"""The PrivGE recipe: one local release per run (every node charged epsilon once), the
propagation is appr_propagate without self-loops, the link split keeps held-out edges out of
the propagation graph, epsilon = inf and the non-private run charge nothing, the rank AUC."""
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from pyg_private.accounting import PrivacyAccountant
from pyg_private.datasets import attach_split, random_split
from pyg_private.models import PrivGEConfig, run_privge_link, run_privge_node
from pyg_private.models.privge import (link_split, perturb_features, privge_embedding, privge_grid,
                                      propagation_steps, roc_auc, search_privge)
from pyg_private.utils.appr import appr_propagate

FAST = dict(hidden=16, epochs=15, patience=5, tol=1e-6)


@pytest.fixture(scope="module")
def graph():
    g = torch.Generator().manual_seed(0)
    n, c, d = 80, 3, 12
    y = torch.arange(n) % c
    x = (torch.rand(n, d, generator=g) < 0.3).float()
    x[torch.arange(n), y] = 1.0
    src = torch.randint(n, (400,), generator=g)
    dst = torch.randint(n, (400,), generator=g)
    keep = ((y[src] == y[dst]) | (torch.rand(400, generator=g) < 0.2)) & (src != dst)
    ei = to_undirected(torch.stack([src[keep], dst[keep]]), num_nodes=n)
    return attach_split(Data(x=x, edge_index=ei, y=y), random_split(n, 0.5, 0.25, 0.25, 0))


@pytest.mark.parametrize("mechanism,k", [("hds", 3), ("laplace", None), ("piecewise", None), ("multibit", 2)])
def test_every_node_charged_epsilon_exactly_once(graph, mechanism, k):
    r = run_privge_node(graph, PrivGEConfig(mechanism=mechanism, k=k, **FAST), 1.5, seed=0)
    assert len(r.accountant.events) == 1
    (event,) = r.accountant.events
    assert event.unit.value == "local"
    eps = r.accountant.node_epsilons()
    assert eps.shape == (graph.num_nodes,)
    np.testing.assert_allclose(eps, 1.5, rtol=1e-12)
    assert r.accountant.pure_epsilon("local") == pytest.approx(1.5)
    assert 0.0 <= r.val <= 1.0 and 0.0 <= r.test <= 1.0
    assert graph.get("ldp") is None and graph.get("ldp_mask") is None  # the input is not modified


@pytest.mark.parametrize("config", [PrivGEConfig(mechanism="hds", k=2, **FAST), PrivGEConfig(mechanism="none", **FAST)])
def test_infinite_epsilon_and_non_private_charge_nothing(graph, config):
    r = run_privge_node(graph, config, math.inf, seed=0)
    assert len(r.accountant.events) == 0
    if config.mechanism == "none":
        r2 = run_privge_node(graph, config, 1.0, seed=0)  # "none" ignores epsilon: raw features, no charge
        assert len(r2.accountant.events) == 0
    x, k = perturb_features(graph, config, math.inf, PrivacyAccountant(), seed=0)
    assert k is None and torch.equal(x, graph.x.float())


def test_release_is_seeded_and_per_run(graph):
    c = PrivGEConfig(mechanism="hds", k=3, **FAST)
    a, _ = perturb_features(graph, c, 1.0, PrivacyAccountant(), seed=0)
    b, _ = perturb_features(graph, c, 1.0, PrivacyAccountant(), seed=0)
    other, _ = perturb_features(graph, c, 1.0, PrivacyAccountant(), seed=1)
    assert torch.equal(a, b) and not torch.equal(a, other)
    assert bool(((a != 0).sum(1) == 3).all())  # HDS: exactly k non-zeros per row


@pytest.mark.parametrize("r", [0.0, 0.3, 1.0])
def test_propagation_equals_appr_propagate_without_self_loops(graph, r):
    c = PrivGEConfig(mechanism="hds", k=3, alpha=0.2, r=r, standardize=False, **FAST)
    x, _ = perturb_features(graph, c, 2.0, PrivacyAccountant(), seed=0)
    z = privge_embedding(x, graph.edge_index, c)
    m = propagation_steps(c)
    assert m == math.ceil(math.log(1e-6) / math.log(0.8))
    ref = appr_propagate(x, graph.edge_index, alpha=0.2, steps=m, r=r, self_loops=False)
    torch.testing.assert_close(z, ref)
    # and it is the PPR Pi = alpha (I - (1 - alpha) D^(r-1) A D^(-r))^(-1) (spec §3.1)
    n = graph.num_nodes
    A = torch.zeros(n, n, dtype=torch.float64)
    A[graph.edge_index[0], graph.edge_index[1]] = 1.0
    deg = A.sum(1)
    dp = lambda p: torch.diag(torch.where(deg > 0, deg.clamp(min=1) ** p, torch.zeros_like(deg)))  # noqa: E731
    P = dp(r - 1) @ A @ dp(-r)
    Pi = 0.2 * torch.linalg.inv(torch.eye(n, dtype=torch.float64) - 0.8 * P)
    torch.testing.assert_close(z.double(), Pi @ x.double(), atol=1e-4, rtol=1e-4)


def test_large_magnitude_release_propagates(graph):
    # LP at a small epsilon: entries ~1e5; the finite default steps never stall
    c = PrivGEConfig(mechanism="laplace", k=None, alpha=0.1, r=0.1, standardize=False, tol=1e-4)
    x, _ = perturb_features(graph, c, 0.01, PrivacyAccountant(), seed=1)
    z = privge_embedding(x, graph.edge_index, c)
    assert bool(torch.isfinite(z).all()) and propagation_steps(c) == 88


def test_link_split_keeps_held_out_edges_out_of_the_propagation_graph(graph):
    train, val, test = link_split(graph, seed=0)
    tr = {tuple(e) for e in train.edge_index.t().tolist()}
    assert all((v, u) in tr for u, v in tr)  # undirected
    for part in (val, test):
        pos = part.edge_label_index[:, part.edge_label == 1].t().tolist()
        neg = part.edge_label_index[:, part.edge_label == 0].t().tolist()
        assert len(pos) == len(neg) > 0
        assert not any((u, v) in tr or (v, u) in tr for u, v in pos)
    full = {tuple(e) for e in graph.edge_index.t().tolist()}
    n_und = len(full) // 2
    assert len(tr) // 2 + int((val.edge_label == 1).sum()) + int((test.edge_label == 1).sum()) == n_und
    # the recipe propagates on train.edge_index: the embedding equals that propagation
    c = PrivGEConfig(mechanism="hds", k=2, standardize=False, **FAST)
    r = run_privge_link(graph, c, 1.0, seed=0)
    assert len(r.accountant.events) == 1
    np.testing.assert_allclose(r.accountant.node_epsilons(), 1.0)
    x, _ = perturb_features(graph, c, 1.0, PrivacyAccountant(), seed=0)
    z_train = privge_embedding(x, train.edge_index, c)
    z_full = privge_embedding(x, graph.edge_index, c)
    assert not torch.allclose(z_train, z_full)
    assert 0.0 <= r.val <= 1.0 and 0.0 <= r.test <= 1.0


def test_link_split_is_seeded(graph):
    a, b = link_split(graph, 3), link_split(graph, 3)
    assert torch.equal(a[0].edge_index, b[0].edge_index) and torch.equal(a[2].edge_label_index, b[2].edge_label_index)


def test_roc_auc_ranks_and_ties():
    assert roc_auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1])) == pytest.approx(0.75)
    assert roc_auc(torch.tensor([1.0, 1.0, 1.0, 1.0]), torch.tensor([0, 1, 0, 1])) == pytest.approx(0.5)
    g = torch.Generator().manual_seed(0)
    s, lab = torch.randn(200, generator=g).round(decimals=1), torch.rand(200, generator=g) < 0.4
    brute = ((s[lab][:, None] > s[~lab][None]).double() + 0.5 * (s[lab][:, None] == s[~lab][None]).double()).mean()
    assert roc_auc(s, lab) == pytest.approx(float(brute))
    with pytest.raises(ValueError):
        roc_auc(torch.ones(3), torch.ones(3))


def test_search_reuses_each_runs_single_release(graph):
    grid = privge_grid(PrivGEConfig(mechanism="hds", k=2, **FAST), alpha=(0.1, 0.3), r=(0.0, 0.5))
    cache: dict = {}
    best, runs = search_privge([graph, graph], grid, epsilon=1.0, seeds=[0, 1], cache=cache)
    assert best in grid and len(runs) == 2
    assert sum(1 for key in cache if key[0] == "release") == 2  # one release per run, shared by the grid
    assert all(len(r.accountant.events) == 1 for r in runs)


def test_config_validation():
    with pytest.raises(ValueError):
        PrivGEConfig(mechanism="sw")
    with pytest.raises(ValueError):
        PrivGEConfig(mechanism="hds", k=None)
    with pytest.raises(ValueError):
        run_privge_node(Data(), PrivGEConfig(), 0.0)
