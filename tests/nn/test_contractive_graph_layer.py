"""ContractiveGraphLayer: the perturbed contractive hops, their accounting, caching and validation."""
import math
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning, gdp_epsilon
from pyg_private.accounting.contractive import contraction_factor, edge_sensitivity
from pyg_private.nn import ContractiveGraphLayer

TINY = 1e-12  # a noise multiplier this small leaves the deterministic map (std = TINY * Delta; float
# sampler: the grid release refuses noise this far below the values)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def ring(n: int) -> torch.Tensor:
    i = torch.arange(n)
    return to_undirected(torch.stack([i, (i + 1) % n]), num_nodes=n)


def dense_reference(x, x0, edge_index, K, c, a1, beta):
    """The noise-free recursion with a dense A_hat = D^-1/2 (A + I) D^-1/2 and the global mean."""
    n = x.shape[0]
    a = np.zeros((n, n))
    a[edge_index[0].numpy(), edge_index[1].numpy()] = 1.0
    a += np.eye(n)
    d = a.sum(1)
    a_hat = a / np.sqrt(np.outer(d, d))
    clip = lambda m: m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1.0)  # noqa: E731
    x0 = clip(x0)
    h = clip(x)
    for _ in range(K):
        h = clip(c * (a1 * a_hat @ h + (1 - a1) * h.mean(0, keepdims=True)) + beta * x0)
    return h


@pytest.mark.parametrize("K,c,a1,beta", [(1, 0.9, 1.0, 0.0), (5, 0.7, 0.8, 0.5), (20, 0.5, 0.3, 2.0)])
def test_noise_free_hops_match_the_dense_recursion(K, c, a1, beta):
    torch.manual_seed(0)
    ei = erdos_renyi_graph(30, 0.15)
    x = torch.randn(30, 4, dtype=torch.float64) * 2  # rows outside the ball get clipped
    layer = ContractiveGraphLayer(K, c, a1, beta, min_degree=0, noise_multiplier=TINY, sampler="float")
    out = layer(x, ei)
    ref = dense_reference(x.numpy(), x.numpy(), ei, K, c, a1, beta)
    assert out.dtype == torch.float64 and not out.requires_grad
    assert np.allclose(out.numpy(), ref, atol=1e-9)
    assert bool((out.norm(dim=1) <= 1 + 1e-12).all())


def test_one_gdp_event_per_forward_convergent_and_linear():
    ei = ring(12)
    x = torch.rand(12, 3)
    for accounting, factor in (("convergent", contraction_factor(10, 0.9)), ("linear", 10.0)):
        acct = PrivacyAccountant()
        layer = ContractiveGraphLayer(10, 0.9, min_degree=1, noise_multiplier=3.0, accounting=accounting,
                                      accountant=acct, cached=False)
        layer(x, ei)
        layer(x, ei)
        events = acct.events_of("edge")
        assert len(events) == 2
        mu = math.sqrt(factor) / 3.0
        assert events[0].mu == pytest.approx(mu, rel=1e-12)
        # two releases compose exactly in GDP
        assert acct.epsilon("edge", 1e-5) == pytest.approx(gdp_epsilon(mu=math.sqrt(2) * mu, delta=1e-5), rel=1e-9)
    assert contraction_factor(10, 0.9) < 10.0  # the saving the convergent analysis buys


def test_noise_std_is_multiplier_times_the_declared_sensitivity():
    layer = ContractiveGraphLayer(3, 0.8, 0.7, min_degree=4, noise_multiplier=2.0)
    assert layer.sensitivity == edge_sensitivity(contraction=0.8, alpha1=0.7, min_degree=4)
    assert layer.noise_std == pytest.approx(2.0 * layer.sensitivity)
    # empirical std of one hop with x = 0 and C_L small: the output is pure noise, clipped rarely
    gen = torch.Generator().manual_seed(3)
    small = ContractiveGraphLayer(1, 0.5, min_degree=1, noise_multiplier=0.05, generator=gen)
    out = small(torch.zeros(4000, 2), ring(4000))
    assert out.std().item() == pytest.approx(small.noise_std, rel=0.03)


def test_calibration_meets_the_target_tightly():
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(10, 0.9, min_degree=1, epsilon=1.0, delta=1e-5, accountant=acct)
    layer(torch.rand(10, 2), ring(10))
    eps = acct.epsilon("edge", 1e-5)
    assert eps <= 1.0 and eps == pytest.approx(1.0, rel=1e-6)
    assert layer.noise_multiplier == pytest.approx(11.301, abs=1e-3)  # spec §4.5 (exact GDP conversion)


def test_budget_is_enforced_before_any_noise():
    gen = torch.Generator().manual_seed(0)
    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-5)})
    layer = ContractiveGraphLayer(5, 0.9, min_degree=1, epsilon=0.8, delta=1e-5, accountant=acct, generator=gen)
    layer(torch.rand(8, 2), ring(8))
    state = gen.get_state()
    with pytest.raises(PrivacyBudgetExceeded):
        layer(torch.rand(8, 2), ring(8))
    assert torch.equal(gen.get_state(), state)
    assert len(acct.events_of("edge")) == 1


def test_cache_reuses_one_release():
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(4, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct, cached=True)
    x, ei = torch.rand(10, 3), ring(10)
    a = layer(x, ei)
    a.zero_()  # the caller's copy only
    b = layer(x, ei)
    assert len(acct.events_of("edge")) == 1 and b.abs().sum() > 0
    layer(x + 1, ei)
    assert len(acct.events_of("edge")) == 2
    layer.forget_release()  # reset_parameters() would keep it
    layer(x, ei)
    assert len(acct.events_of("edge")) == 3


def test_batched_graphs_use_their_own_mean():
    torch.manual_seed(1)
    e1, e2 = ring(6), erdos_renyi_graph(5, 0.5)
    x1, x2 = torch.rand(6, 3, dtype=torch.float64), torch.rand(5, 3, dtype=torch.float64)
    layer = ContractiveGraphLayer(3, 0.8, 0.5, 0.3, min_degree=0, noise_multiplier=TINY, sampler="float")
    both = layer(torch.cat([x1, x2]), torch.cat([e1, e2 + 6], 1), batch=torch.tensor([0] * 6 + [1] * 5))
    assert torch.allclose(both[:6], layer(x1, e1), atol=1e-12)
    assert torch.allclose(both[6:], layer(x2, e2, ), atol=1e-12)


def test_sparse_inputs_match_edge_index():
    ei = ring(9)
    x = torch.rand(9, 2)
    kwargs = dict(min_degree=1, noise_multiplier=0.5)
    ref = ContractiveGraphLayer(3, 0.9, generator=torch.Generator().manual_seed(2), **kwargs)(x, ei)
    sp = torch.sparse_coo_tensor(ei, torch.ones(ei.size(1)), (9, 9))
    out = ContractiveGraphLayer(3, 0.9, generator=torch.Generator().manual_seed(2), **kwargs)(x, sp)
    assert torch.equal(ref, out)


def test_edge_sensitivity_holds_for_the_layer_on_small_graphs():
    # one noise-free hop on G and G minus an edge, for graphs whose minimum degree without the edge is
    # the declared bound; the projection is 1-Lipschitz, so the output distance must stay below Delta_e.
    # degree_floor=True is the plain normalisation on these graphs (every degree >= d_min) and lets
    # the layer accept G minus the edge, whose minimum degree is the bound itself
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(60):
        n = int(rng.integers(5, 11))
        ei = erdos_renyi_graph(n, 0.6)
        deg = torch.bincount(ei[0], minlength=n)
        row, col = ei[:, ei[0] < ei[1]]
        if row.numel() == 0:
            continue
        k = int(rng.integers(row.numel()))
        u, v = int(row[k]), int(col[k])
        keep = ~(((ei[0] == u) & (ei[1] == v)) | ((ei[0] == v) & (ei[1] == u)))
        without = ei[:, keep]
        d_min = int(torch.bincount(without[0], minlength=n).min())
        if d_min < 1 or deg.min() < 1:
            continue
        layer = ContractiveGraphLayer(1, 0.9, 1.0, min_degree=d_min, degree_floor=True, noise_multiplier=TINY, sampler="float")
        for _ in range(5):
            x = torch.tensor(rng.normal(size=(n, 3)), dtype=torch.float64)
            x = x / x.norm(dim=1, keepdim=True)  # on the sphere: the extreme points of the ball
            dist = (layer(x, ei) - layer(x, without)).norm().item()
            worst = max(worst, dist / layer.sensitivity)
    assert 0.05 < worst <= 1.0 + 1e-9


@pytest.mark.parametrize("kwargs,match", [
    (dict(contraction=1.0), "contraction"),
    (dict(contraction=-0.1), "contraction"),
    (dict(alpha1=1.5), "alpha1"),
    (dict(beta=-1.0), "beta"),
    (dict(K=0), "K"),
    (dict(level="graph"), "level"),
    (dict(accounting="tight"), "accounting"),
    (dict(min_degree=None), "min_degree"),
    (dict(level="node"), "max_degree"),
    (dict(noise_multiplier=None), "exactly one"),
    (dict(noise_multiplier=None, epsilon=1.0), "delta"),
    (dict(delta=1e-5), "delta"),
])
def test_bad_arguments_raise(kwargs, match):
    args = dict(K=2, contraction=0.9, min_degree=1, noise_multiplier=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ContractiveGraphLayer(**args)


def test_bad_inputs_raise_before_any_charge():
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(2, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct)
    with pytest.raises(ValueError, match="directed"):
        layer(torch.rand(3, 2), torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="NaN"):
        layer(torch.full((3, 2), float("nan")), ring(3))
    with pytest.raises(ValueError, match="x0"):
        layer(torch.rand(3, 2), ring(3), x0=torch.rand(3, 5))
    assert len(acct.events_of("edge")) == 0


def test_repr_names_the_key_numbers():
    r = repr(ContractiveGraphLayer(4, 0.8, 0.9, 0.1, min_degree=2, noise_multiplier=1.5))
    assert "K=4" in r and "contraction=0.8" in r and "noise_multiplier=1.5" in r


def test_node_level_uses_the_universe_sensitivity_and_the_node_unit():
    from pyg_private.utils.degree_bounds import universe_node_sensitivity

    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(3, 0.9, 0.8, 0.5, level="node", min_degree=1, max_degree=10, num_nodes=12,
                                  noise_multiplier=2.0, accountant=acct)
    assert layer.sensitivity == universe_node_sensitivity(contraction=0.9, alpha1=0.8, alpha2=0.2, beta=0.5,
                                                          min_degree=1, max_degree=10, num_nodes=12)
    layer(torch.rand(12, 3), ring(12))
    assert len(acct.events_of("node")) == 1 and len(acct.events_of("edge")) == 0


def _csr(ei: torch.Tensor, n: int, values=None) -> torch.Tensor:
    from torch_geometric.utils import to_torch_csr_tensor

    return to_torch_csr_tensor(ei, values, size=(n, n))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_csr_input_takes_the_fast_path_and_matches_edge_index(dtype):
    from pyg_private.utils.adjacency import simple_undirected_csr

    torch.manual_seed(3)
    n = 40
    ei = erdos_renyi_graph(n, 0.2)  # isolated nodes possible
    ei = ei[:, torch.randperm(ei.size(1))]  # edge_index in any order; the CSR is sorted
    csr = _csr(ei, n)
    crow, col = simple_undirected_csr(csr, n)  # accepted as it is
    assert torch.equal(crow, csr.crow_indices()) and torch.equal(col, csr.col_indices())
    x = torch.randn(n, 5, dtype=dtype) * 2
    x0, x_copy = torch.rand(n, 5, dtype=dtype), x.clone()
    kwargs = dict(K=4, contraction=0.8, alpha1=0.7, beta=0.3, min_degree=0, noise_multiplier=0.5)
    ref = ContractiveGraphLayer(generator=torch.Generator().manual_seed(5), **kwargs)(x, ei, x0)
    out = ContractiveGraphLayer(generator=torch.Generator().manual_seed(5), **kwargs)(x, csr, x0)
    assert out.dtype == dtype and torch.equal(ref, out) and torch.equal(x, x_copy)
    # a CSR with unsorted columns is valid for torch; it takes the general path to the same graph
    perm = torch.cat([torch.arange(a, b).flip(0) for a, b in zip(csr.crow_indices()[:-1], csr.crow_indices()[1:])])
    shuffled = torch.sparse_csr_tensor(csr.crow_indices(), csr.col_indices()[perm], csr.values(), (n, n))
    assert simple_undirected_csr(shuffled, n) is None
    out = ContractiveGraphLayer(generator=torch.Generator().manual_seed(5), **kwargs)(x, shuffled, x0)
    assert torch.equal(ref, out)
    # the cache knows the graph in either form
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(accountant=acct, cached=True, **kwargs)
    assert torch.equal(layer(x, ei, x0), layer(x, csr, x0)) and len(acct.events_of("edge")) == 1


def test_csr_input_that_is_not_a_simple_undirected_graph_raises_before_any_charge():
    from pyg_private.utils.adjacency import simple_undirected_csr

    n = 6
    directed = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])  # a directed cycle
    undirected = to_undirected(directed, num_nodes=n)
    loop = torch.cat([undirected, torch.tensor([[2], [2]])], 1)
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(2, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct)
    x = torch.rand(n, 3)
    for adj, match in ((_csr(directed, n), "directed"), (_csr(loop, n), "self-loops"),
                       (_csr(undirected, n, 2 * torch.ones(undirected.size(1))), "unweighted")):
        assert simple_undirected_csr(adj, n) is None
        with pytest.raises(ValueError, match=match):
            layer(x, adj)
    with pytest.raises(ValueError, match="does not match"):
        layer(torch.rand(n + 1, 3), _csr(undirected, n))
    assert len(acct.events_of("edge")) == 0
    # symmetrize=True: the directed CSR becomes the undirected graph
    kwargs = dict(K=2, contraction=0.9, min_degree=1, noise_multiplier=1.0, symmetrize=True)
    out = ContractiveGraphLayer(generator=torch.Generator().manual_seed(1), **kwargs)(x, _csr(directed, n))
    ref = ContractiveGraphLayer(generator=torch.Generator().manual_seed(1), **kwargs)(x, undirected)
    assert torch.equal(out, ref)


def test_zero_noise_multiplier_is_the_non_private_reference():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="non-private"):
        ContractiveGraphLayer(3, 0.9, min_degree=0, noise_multiplier=0.0, accountant=PrivacyAccountant())
    layer = ContractiveGraphLayer(3, 0.9, min_degree=0, noise_multiplier=0.0)
    assert layer.noise_std == 0.0 and math.isinf(layer.mu)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "untracked privacy" warning: nothing private is claimed
        out = layer(x, ei)
    noisy = ContractiveGraphLayer(3, 0.9, min_degree=0, noise_multiplier=1e-12, sampler="float")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        assert torch.allclose(out, noisy(x, ei), atol=1e-9)
        # the grid release: small noise is still a valid grid (same map up to the noise) ...
        safe = ContractiveGraphLayer(3, 0.9, min_degree=0, noise_multiplier=1e-8)
        assert torch.allclose(out, safe(x, ei), atol=1e-6)
        # ... noise 2^40 times below the values is refused before anything is charged
        acct = PrivacyAccountant()
        with pytest.raises(ValueError, match="too small for a grid release"):
            ContractiveGraphLayer(3, 0.9, min_degree=0, noise_multiplier=1e-12, accountant=acct)(x, ei)
        assert len(acct) == 0
    with pytest.raises(ValueError):
        ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=-1.0)
