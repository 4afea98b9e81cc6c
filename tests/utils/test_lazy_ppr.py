"""lazy_ppr and push_flow_cap_ppr against dense NumPy closed forms on small graphs.

Lazy PPR (spec ``noisy_diffusion.md`` §2, Eq. 11) with restart probability alpha,
b = 1 - alpha and W = (I + A D^-1) / 2 (a column of A D^-1 is zero at an isolated node):

    s_0 = s,   s_k = b W s_{k-1} + (1 - b) s.

By induction s_K = (b W)^K s + (1 - b) sum_{k<K} (b W)^k s: true for K = 0, and if it holds
for K then b W s_K + (1 - b) s = (b W)^{K+1} s + (1 - b) sum_{k=1}^{K} (b W)^k s + (1 - b) s.
Since ||b W||_1 <= b < 1, s_K -> (1 - b) (I - b W)^{-1} s.

Push flow without caps pushes the whole residual each round: r_t = ((1 - alpha) W)^t s and
p_T = alpha sum_{t<T} ((1 - alpha) W)^t s, i.e. p_T = s_T - (b W)^T s exactly.
"""
import numpy as np
import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private.utils import lazy_ppr, adjacency_csr, push_flow_cap_ppr, seed_matrix, simple_undirected



def _graph(n, p, seed, isolated=0):
    """An Erdos-Renyi graph on n nodes plus `isolated` extra nodes without edges."""
    torch.manual_seed(seed)
    ei = erdos_renyi_graph(n, p)
    ei, total = simple_undirected(ei, n + isolated)
    return ei, total


def _walk(edge_index, n):
    """Dense W = (I + A D^-1) / 2 in NumPy; isolated nodes give a zero column of A D^-1."""
    a = np.zeros((n, n))
    a[edge_index[0].numpy(), edge_index[1].numpy()] = 1.0
    d = a.sum(0)
    ad = np.divide(a, d[None, :], out=np.zeros_like(a), where=d[None, :] > 0)
    return 0.5 * (np.eye(n) + ad), d


def _one_hot(seeds, n):
    s = np.zeros((n, len(seeds)))
    s[seeds, np.arange(len(seeds))] = 1.0
    return s


def _closed_form(w, s, beta, k):
    """(1 - b) sum_{j<K} (bW)^j s + (bW)^K s, by explicit matrix powers."""
    bw = beta * w
    total = np.zeros_like(s)
    power = np.eye(w.shape[0])
    for _ in range(k):
        total += power @ s
        power = bw @ power
    return (1 - beta) * total + power @ s


def _recursion(w, s, beta, k):
    p = s.copy()
    for _ in range(k):
        p = beta * w @ p + (1 - beta) * s
    return p


@pytest.mark.parametrize("alpha, k", [(0.2, 0), (0.2, 1), (0.2, 7), (0.15, 40), (0.5, 100), (0.9, 3)])
def test_k_step_iterate_equals_the_closed_form(alpha, k):
    ei, n = _graph(25, 0.15, seed=0, isolated=3)  # three isolated nodes, and ER may leave more
    w, _ = _walk(ei, n)
    seeds = [0, 4, 24, 26]  # 26 is isolated
    s = _one_hot(seeds, n)
    expected = _closed_form(w, s, 1 - alpha, k)
    # the closed form is the recursion (checks the derivation in the module docstring)
    np.testing.assert_allclose(expected, _recursion(w, s, 1 - alpha, k), rtol=0, atol=1e-14)
    out = lazy_ppr(ei, n, seed_index=seeds, alpha=alpha, num_iterations=k)
    assert out.dtype == torch.float64 and out.shape == (n, len(seeds))
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-13)


def test_many_iterations_converge_to_the_resolvent():
    ei, n = _graph(30, 0.12, seed=1, isolated=2)
    w, _ = _walk(ei, n)
    beta = 0.8
    s = _one_hot([0, 5, 31], n)  # 31 is isolated: its column is (1-b)/(1-b/2) e_31
    limit = (1 - beta) * np.linalg.solve(np.eye(n) - beta * w, s)
    out = lazy_ppr(ei, n, seed_index=[0, 5, 31], alpha=1 - beta, num_iterations=300).numpy()
    np.testing.assert_allclose(out, limit, rtol=0, atol=1e-12)  # 0.8^300 ~ 1e-29
    assert out[31, 2] == pytest.approx(0.2 / 0.6, abs=1e-12) and np.abs(np.delete(out[:, 2], 31)).max() == 0
    # few iterations are visibly not converged (the test can fail)
    early = lazy_ppr(ei, n, seed_index=[0, 5, 31], alpha=1 - beta, num_iterations=5).numpy()
    assert np.abs(early - limit).max() > 1e-3


def test_mass_is_preserved_without_isolated_nodes():
    ei, n = _graph(40, 0.2, seed=2)
    deg = torch.bincount(ei[0], minlength=n)
    assert int(deg.min()) > 0
    out = lazy_ppr(ei, n, seed_index=torch.arange(n), alpha=0.2, num_iterations=50)
    torch.testing.assert_close(out.sum(0), torch.ones(n, dtype=torch.float64), rtol=0, atol=1e-12)
    assert bool((out >= 0).all())
    # a general signal keeps its total too (W is column-stochastic)
    x = torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(lazy_ppr(ei, n, x=x, num_iterations=20).sum(0), x.sum(0), rtol=0, atol=1e-12)
    # with an isolated node mass leaks: b/2 of the isolated seed's mass per step
    ei2, n2 = _graph(40, 0.2, seed=2, isolated=1)
    leak = lazy_ppr(ei2, n2, seed_index=[n2 - 1], num_iterations=50)
    assert float(leak.sum()) < 0.34


def test_batched_columns_equal_single_columns():
    ei, n = _graph(35, 0.1, seed=3, isolated=2)
    seeds = [3, 0, 36, 3, 17]  # repeated seed and an isolated one
    batched = lazy_ppr(ei, n, seed_index=torch.tensor(seeds), alpha=0.25, num_iterations=60)
    for c, v in enumerate(seeds):
        single = lazy_ppr(ei, n, seed_index=v, alpha=0.25, num_iterations=60)
        assert single.shape == (n, 1)
        torch.testing.assert_close(batched[:, c:c + 1], single, rtol=0, atol=1e-15)
    torch.testing.assert_close(batched[:, 0], batched[:, 3], rtol=0, atol=0)


def test_x_signals_equal_seed_index_and_are_linear():
    ei, n = _graph(30, 0.15, seed=4)
    seeds = torch.tensor([2, 9, 29])
    by_seed = lazy_ppr(ei, n, seed_index=seeds, alpha=0.3, num_iterations=25)
    s, checked = seed_matrix(seeds, n)
    assert torch.equal(checked, seeds) and torch.equal(s.sum(0), torch.ones(3, dtype=torch.float64))
    by_x = lazy_ppr(ei, n, x=s, alpha=0.3, num_iterations=25)
    torch.testing.assert_close(by_x, by_seed, rtol=0, atol=1e-15)
    by_x32 = lazy_ppr(ei, n, x=s.float(), alpha=0.3, num_iterations=25)  # cast to float64 inside
    assert by_x32.dtype == torch.float64
    torch.testing.assert_close(by_x32, by_seed, rtol=0, atol=1e-15)
    # a 1-D signal is one column; a mixture of seeds gives the mixture of columns (linearity)
    mix = lazy_ppr(ei, n, x=0.5 * s[:, 0] + 0.25 * s[:, 1] + 0.25 * s[:, 2], alpha=0.3, num_iterations=25)
    assert mix.shape == (n, 1)
    torch.testing.assert_close(mix[:, 0], by_seed @ torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64),
                               rtol=0, atol=1e-15)
    # x may have more rows than the edges reach: the extra nodes are isolated
    x = torch.zeros(n + 2, 1, dtype=torch.float64)
    x[n + 1, 0] = 1.0
    out = lazy_ppr(ei, x=x, num_iterations=10)
    assert out.shape == (n + 2, 1)
    assert out[n + 1, 0] == pytest.approx(0.2 * sum(0.4 ** k for k in range(10)) + 0.4 ** 10, abs=1e-15)


def test_sparse_adjacency_and_directed_input():
    ei, n = _graph(20, 0.2, seed=5)
    ref = lazy_ppr(ei, n, seed_index=[0, 1])
    adj = torch.sparse_coo_tensor(ei, torch.ones(ei.size(1)), (n, n), check_invariants=True)
    for sparse in (adj, adj.to_sparse_csr()):
        torch.testing.assert_close(lazy_ppr(sparse, seed_index=[0, 1]), ref, rtol=0, atol=0)
    directed = torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match="directed"):
        lazy_ppr(directed, seed_index=[0])
    torch.testing.assert_close(lazy_ppr(directed, seed_index=[0], symmetrize=True),
                               lazy_ppr(to_undirected(directed), seed_index=[0]), rtol=0, atol=0)


def test_adjacency_csr_is_a_d_inverse_product():
    ei, n = _graph(15, 0.3, seed=6, isolated=1)
    adj, deg = adjacency_csr(ei, n)
    w, d = _walk(ei, n)
    np.testing.assert_array_equal(deg.numpy(), d)
    dense = adj.to_dense().numpy()
    np.testing.assert_array_equal(dense, dense.T)
    np.testing.assert_array_equal(dense.sum(0), d)
    x = np.random.default_rng(0).random((n, 2))
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)[:, None]
    got = (adj @ torch.from_numpy(x * inv)).numpy()
    np.testing.assert_allclose(0.5 * (x + got), w @ x, rtol=0, atol=1e-15)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(seed_index=[0], alpha=0.0), ValueError, "alpha"),
    (dict(seed_index=[0], alpha=1.0), ValueError, "alpha"),
    (dict(seed_index=[0], alpha=-0.1), ValueError, "alpha"),
    (dict(seed_index=[0], alpha=1.5), ValueError, "alpha"),
    (dict(seed_index=[0], num_iterations=-1), ValueError, "num_iterations"),
    (dict(seed_index=[0], num_iterations=2.5), ValueError, "num_iterations"),
    (dict(), ValueError, "exactly one"),
    (dict(seed_index=[0], x=torch.ones(6, 1)), ValueError, "exactly one"),
    (dict(seed_index=[6]), ValueError, "seed_index"),
    (dict(seed_index=[-1]), ValueError, "seed_index"),
    (dict(seed_index=torch.tensor([], dtype=torch.long)), ValueError, "empty"),
    (dict(seed_index=[0.0]), TypeError, "integer"),
    (dict(x=torch.ones(6, 2, 1)), ValueError, "shape"),
])
def test_validation_errors(kwargs, error, match):
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    with pytest.raises(error, match=match):
        lazy_ppr(ei, 6, **kwargs)


def test_num_iterations_zero_returns_the_signal():
    ei, n = _graph(10, 0.3, seed=7)
    out = lazy_ppr(ei, n, seed_index=[4], num_iterations=0)
    assert torch.equal(out, seed_matrix([4], n)[0])


# ------------------------------------------------------------------ push flow

def test_uncapped_push_flow_is_lazy_ppr_without_the_last_power():
    ei, n = _graph(30, 0.15, seed=8)  # no isolated nodes: every node may push
    assert int(torch.bincount(ei[0], minlength=n).min()) > 0
    w, _ = _walk(ei, n)
    seeds = [0, 13, 13, 29]
    s = _one_hot(seeds, n)
    for alpha, t in [(0.2, 1), (0.2, 12), (0.35, 30)]:
        beta = 1 - alpha
        expected = _closed_form(w, s, beta, t) - np.linalg.matrix_power(beta * w, t) @ s
        for personalized in (False, True):
            p = push_flow_cap_ppr(ei, n, seeds, alpha=alpha, num_iterations=t, eta=1e300, personalized=personalized)
            assert p.dtype == torch.float64 and p.shape == (n, len(seeds))
            np.testing.assert_allclose(p.numpy(), expected, rtol=0, atol=1e-14)


def test_uncapped_push_flow_converges_to_lazy_ppr():
    ei, n = _graph(40, 0.1, seed=9, isolated=2)
    seeds = [1, 7, 40]  # 40 is isolated: only the personalized (uncapped) seed pushes there
    ref = lazy_ppr(ei, n, seed_index=seeds, alpha=0.2, num_iterations=400)
    p = push_flow_cap_ppr(ei, n, seeds, alpha=0.2, num_iterations=400, eta=1e300, personalized=True)
    torch.testing.assert_close(p, ref, rtol=0, atol=1e-12)
    plain = push_flow_cap_ppr(ei, n, seeds, alpha=0.2, num_iterations=400, eta=1e300, personalized=False)
    torch.testing.assert_close(plain[:, :2], ref[:, :2], rtol=0, atol=1e-12)
    assert float(plain[:, 2].abs().max()) == 0.0  # an isolated node has cap 0 and never pushes


def test_caps_bound_every_capped_entry():
    # p = alpha * h and h_v <= eta * d_v while v is capped, so p_v <= alpha * eta * d_v
    ei, n = _graph(50, 0.08, seed=10, isolated=2)
    deg = torch.bincount(ei[0], minlength=n).double()
    alpha, eta = 0.2, 2e-3
    seeds = torch.tensor([0, 3, 3, 51, 20])
    bound = (alpha * eta * deg).unsqueeze(-1)
    cols = torch.arange(seeds.numel())
    for personalized in (False, True):
        p = push_flow_cap_ppr(ei, n, seeds, alpha=alpha, num_iterations=100, eta=eta, personalized=personalized)
        assert bool((p >= 0).all()) and bool((p.sum(0) <= 1 + 1e-12).all())
        capped = torch.ones_like(p, dtype=torch.bool)
        if personalized:
            capped[seeds, cols] = False
        slack = (bound - p)[capped]
        assert float(slack.min()) >= -1e-15 * float(bound.max())
        # the caps bind (the check is not vacuous): some non-seed entries sit exactly on the bound
        assert int((slack.abs() <= 1e-12 * float(bound.max())).sum()) > 10
        if personalized:  # the uncapped seeds exceed their degree bound by far
            assert bool((p[seeds, cols] > 10 * bound[seeds, 0]).all())
            assert float(p[51, 3]) > 0.2  # isolated seed keeps alpha + (1-alpha)/2 per unit pushed
        else:
            assert float(p[:, 3].abs().max()) == 0.0  # isolated, capped at 0
    # the caps cost mass: the capped estimate is far from lazy PPR
    ref = lazy_ppr(ei, n, seed_index=seeds, alpha=alpha, num_iterations=100)
    plain = push_flow_cap_ppr(ei, n, seeds, alpha=alpha, num_iterations=100, eta=eta, personalized=False)
    assert float((ref - plain).abs().max()) > 0.2


def test_x_sets_the_node_count_of_an_edgeless_graph():
    out = lazy_ppr(torch.empty(2, 0, dtype=torch.long), x=torch.ones(3, 1, dtype=torch.float64), num_iterations=100)
    torch.testing.assert_close(out, torch.full((3, 1), 0.2 / 0.6, dtype=torch.float64), rtol=0, atol=1e-15)
