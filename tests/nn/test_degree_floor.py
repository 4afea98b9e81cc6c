"""The degree floor of ContractiveGraphLayer: normalising by max(deg, D) makes Eq. 6 at D hold for
every graph, checked by brute force through the layer's own hop.

For every graph on 2..5 nodes and every edge that can be added (each pair is also the removal
of that edge from the larger graph), the change of one noiseless hop,
``C_L alpha1 (A_D(G + e) - A_D(G)) X``, is maximised over X with rows in the unit ball: exactly
for one feature column (all sign vectors, the extreme points) and by a power method with as
many columns as nodes. The operators come from the layer's own code (``_normalized_adjacency``
and ``_hop`` on identity features, all graphs at once as one block-diagonal graph).
Measured maxima / Eq. 6 (figures of this search): 0.872 (D = 1), 0.836 (D = 2), 0.842 (D = 3);
without the floor the same search reaches 1.456 x Eq. 6 at D = 1 (two isolated nodes joined),
so the search can fail.
"""
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.accounting.contractive import edge_sensitivity
from pyg_private.nn import ContractiveGraphLayer
from pyg_private.utils.adjacency import normalized_adjacency_csr
from brute_force import block_diagonal_edge_index, sup_frobenius

C_L = 0.9


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def _operators(layer, n, masks, pairs):
    """The layer's hop map ``X -> C_L alpha1 A X`` as an [n, n] matrix for every edge set in
    ``masks`` (bit k: pair k), computed by the layer on one block-diagonal graph."""
    ei = block_diagonal_edge_index(masks, pairs, n)
    total = n * len(masks)
    crow, col = layer._read_graph(ei, total)
    adj, self_loop = layer._normalized_adjacency(crow, col, torch.float64)
    eye = torch.eye(n, dtype=torch.float64).repeat(len(masks), 1)
    return layer._hop(adj, self_loop, eye, None, None).view(len(masks), n, n).numpy()


def _edge_toggles(layer, max_nodes, rng):
    """Largest measured change of one hop over every graph on 2..max_nodes nodes and every
    single-edge toggle."""
    worst = 0.0
    for n in range(2, max_nodes + 1):
        pairs = list(itertools.combinations(range(n), 2))
        masks = list(range(1 << len(pairs)))
        ops = _operators(layer, n, masks, pairs)
        small, large = zip(*[(m, m | 1 << k) for m in masks for k in range(len(pairs)) if not m >> k & 1])
        worst = max(worst, float(sup_frobenius(ops[list(large)] - ops[list(small)], rng).max()))
    return worst


@pytest.mark.parametrize("D, expected", [(1, 0.8718), (2, 0.8359), (3, 0.8422)])
def test_floor_keeps_eq6_on_every_graph_up_to_five_nodes(D, expected):
    layer = ContractiveGraphLayer(1, C_L, 1.0, min_degree=D, degree_floor=True, noise_multiplier=0.0)
    assert layer.sensitivity == edge_sensitivity(contraction=C_L, alpha1=1.0, min_degree=D)
    worst = _edge_toggles(layer, 5, np.random.default_rng(D))
    ratio = worst / layer.sensitivity
    assert ratio <= 1.0 + 1e-12
    assert ratio == pytest.approx(expected, abs=2e-3)  # the search is not vacuous


def test_without_the_floor_the_same_search_breaks_eq6():
    # the plain normalisation on the same graphs (isolated and degree-one nodes included), D = 1
    layer = ContractiveGraphLayer(1, C_L, 1.0, min_degree=1, noise_multiplier=0.0)
    worst = _edge_toggles(layer, 4, np.random.default_rng(0))
    assert worst / layer.sensitivity > 1.45  # sqrt(2) C_L (two isolated nodes joined) vs Eq. 6 at D = 1


@pytest.mark.parametrize("D", [2, 4])
def test_floor_keeps_eq6_on_random_larger_graphs(D):
    rng = np.random.default_rng(10 + D)
    layer = ContractiveGraphLayer(1, C_L, 1.0, min_degree=D, degree_floor=True, noise_multiplier=0.0)
    worst = 0.0
    for t in range(12):
        n = int(rng.integers(6, 10))
        pairs = list(itertools.combinations(range(n), 2))
        base = sum(1 << k for k in range(len(pairs)) if rng.random() < rng.uniform(0.1, 0.8))
        masks = [base] + [base ^ (1 << k) for k in range(len(pairs))]
        ops = _operators(layer, n, masks, pairs)
        worst = max(worst, float(sup_frobenius(ops[1:] - ops[:1], rng, starts=1).max()))
    assert worst <= layer.sensitivity * (1 + 1e-12)


def test_the_floored_layer_releases_within_the_bound_and_without_a_check():
    # the whole forward (noiseless, projected) on graphs with isolated and degree-one nodes, which
    # the unfloored layer refuses at min_degree=2; the projection is 1-Lipschitz
    rng = np.random.default_rng(3)
    D, K = 2, 3
    floored = [ContractiveGraphLayer(k, C_L, 1.0, min_degree=D, degree_floor=True, noise_multiplier=0.0)
               for k in (1, K)]
    acct = PrivacyAccountant()
    ContractiveGraphLayer(K, C_L, min_degree=D, degree_floor=True, noise_multiplier=1.0, accountant=acct)(
        torch.rand(7, 2), erdos_renyi_graph(7, 0.2))  # charged: no check to fail
    assert len(acct.events_of("edge")) == 1
    delta = floored[0].sensitivity
    for t in range(30):
        n = 7
        ei = erdos_renyi_graph(n, 0.25)
        u, v = sorted(rng.choice(n, 2, replace=False).tolist())
        has = bool(((ei[0] == u) & (ei[1] == v)).any())
        other = ei[:, ~(((ei[0] == u) & (ei[1] == v)) | ((ei[0] == v) & (ei[1] == u)))] if has else \
            torch.cat([ei, torch.tensor([[u, v], [v, u]])], 1)
        x = torch.tensor(rng.standard_normal((n, 4)))
        x = x / x.norm(dim=1, keepdim=True)
        for k, layer in zip((1, K), floored):
            dist = (layer(x, ei) - layer(x, other)).norm().item()
            assert dist <= delta * sum(C_L**j for j in range(k)) * (1 + 1e-12), (t, k, dist)
        with pytest.raises(ValueError, match="min_degree"):
            if int(torch.bincount(ei[0], minlength=n).min()) < D + 1:
                ContractiveGraphLayer(1, C_L, min_degree=D, noise_multiplier=0.0)(x, ei)
            else:
                raise ValueError("min_degree: this graph happens to satisfy the rule")


def test_floor_is_the_plain_normalisation_when_every_degree_reaches_it():
    from pyg_private.utils.degree_bounds import floored_normalized_adjacency_csr

    # e.g. Cora (no isolated node) with D = 1: the floor changes nothing but the validity of D
    torch.manual_seed(0)
    for D in (1, 2, 3):
        n = 12
        i = torch.arange(n)
        ei = torch.cat([torch.stack([i, (i + s) % n]) for s in range(1, D + 1)], 1)
        ei = torch.cat([ei, ei.flip(0)], 1)
        x = torch.randn(n, 5, dtype=torch.float64)
        plain = ContractiveGraphLayer(4, C_L, 0.7, 0.3, min_degree=0, noise_multiplier=0.0)(x, ei)
        floored = ContractiveGraphLayer(4, C_L, 0.7, 0.3, min_degree=D, degree_floor=True, noise_multiplier=0.0)
        assert torch.equal(floored(x, ei), plain)
        noisy = ContractiveGraphLayer(4, C_L, 0.7, 0.3, min_degree=D, degree_floor=True, noise_multiplier=2.0)
        assert noisy.noise_std == 2.0 * edge_sensitivity(contraction=C_L, alpha1=0.7, min_degree=D)
    crow = torch.tensor([0, 1, 2, 2])  # nodes 0 - 1, node 2 isolated
    col = torch.tensor([1, 0])
    b, t = normalized_adjacency_csr(crow, col, weight=0.5)
    a, s = floored_normalized_adjacency_csr(crow, col, floor=0, weight=0.5)
    assert torch.equal(a.to_dense(), b.to_dense()) and torch.equal(s, t)  # floor 0: the plain normalisation
    a, s = floored_normalized_adjacency_csr(crow, col, floor=1, weight=0.5)  # only the isolated node is floored
    assert torch.equal(a.to_dense(), b.to_dense()) and torch.equal(s[:2], t[:2]) and s[2].item() == pytest.approx(0.25)
    a, s = floored_normalized_adjacency_csr(crow, col, floor=2, weight=1.0)
    assert torch.allclose(a.to_dense()[0, 1], torch.tensor(1 / 3, dtype=torch.float64))  # 1/sqrt(3 * 3)
    assert torch.allclose(s.squeeze(), torch.full((3,), 1 / 3, dtype=torch.float64))


def test_floored_operator_is_entrywise_below_the_plain_one_and_contractive():
    from pyg_private.utils.degree_bounds import floored_normalized_adjacency_csr

    torch.manual_seed(1)
    for t in range(20):
        n = 15
        ei = erdos_renyi_graph(n, 0.05 + 0.02 * t)
        deg = torch.bincount(ei[0], minlength=n)
        crow = torch.zeros(n + 1, dtype=torch.long)
        crow[1:] = torch.cumsum(deg, 0)
        order = torch.argsort(ei[0] * n + ei[1])
        col = ei[1][order]
        plain, ps = normalized_adjacency_csr(crow, col)
        dense_plain = plain.to_dense() + torch.diag(ps.squeeze(1))
        for D in (1, 3, 6):
            a, s = floored_normalized_adjacency_csr(crow, col, floor=D)
            dense = a.to_dense() + torch.diag(s.squeeze(1))
            assert bool((dense <= dense_plain + 1e-15).all()) and bool((dense >= 0).all())
            assert torch.linalg.matrix_norm(dense, ord=2).item() <= 1.0 + 1e-12
            assert torch.linalg.eigvalsh(dense).abs().max().item() <= 1.0 + 1e-12
    assert math.isclose(float(torch.linalg.matrix_norm(dense_plain, ord=2)), 1.0, rel_tol=1e-12)
