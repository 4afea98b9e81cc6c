"""appr_propagate against a dense NumPy reference on small graphs.

With Â = A + I (or A), D the degree matrix of Â (a power of a zero degree taken as 0) and
Ã = D^(r-1) Â D^(-r), GCON Eq. 9:

    R_0 = I,   R_m = alpha sum_{i<m} (1-alpha)^i Ã^i + (1-alpha)^m Ã^m,   R_inf = alpha (I - (1-alpha) Ã)^-1.

The reference sums the series (and inverts for m = inf) directly; the library runs the
recursion H_k = (1-alpha) Ã H_{k-1} + alpha X, so the two are independent computations.
"""
import math

import numpy as np
import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph, to_torch_coo_tensor, to_torch_csr_tensor

from pyg_private.utils import appr_propagate, simple_undirected
from pyg_private.utils.adjacency import csr_indices, power_normalized_adjacency_csr

try:
    from torch_sparse import SparseTensor
except ImportError:  # the optional backend
    SparseTensor = None

ALPHA = 0.3


def appr_matrix_dense(edge_index, n, alpha, steps, r, self_loops):
    """Dense R_m of GCON Eq. 9 (NumPy float64), for the graph ``edge_index`` on ``n`` nodes."""
    a = np.zeros((n, n))
    a[edge_index[0].numpy(), edge_index[1].numpy()] = 1.0
    if self_loops:
        a += np.eye(n)
    d = a.sum(1)
    with np.errstate(divide="ignore"):
        left = np.where(d > 0, d ** (r - 1.0), 0.0)
        right = np.where(d > 0, d ** (-r), 0.0)
    a_tilde = left[:, None] * a * right[None, :]
    if steps == 0:
        return np.eye(n)
    if math.isinf(steps):
        return alpha * np.linalg.inv(np.eye(n) - (1.0 - alpha) * a_tilde)
    out, power = np.zeros((n, n)), np.eye(n)
    for i in range(steps):
        out += alpha * (1.0 - alpha) ** i * power
        power = a_tilde @ power
    return out + (1.0 - alpha) ** steps * power


def _graph(n=12, p=0.3, seed=0, isolated=2):
    """An Erdos-Renyi graph on n nodes plus ``isolated`` extra nodes without edges (canonical form)."""
    torch.manual_seed(seed)
    return simple_undirected(erdos_renyi_graph(n, p), n + isolated)


def _features(n, f=3, seed=1, dtype=torch.float64):
    return torch.randn(n, f, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("r", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("steps", [0, 1, 2, 5, math.inf])
def test_matches_dense_reference(steps, r, self_loops):
    ei, n = _graph()
    x = _features(n)
    out = appr_propagate(x, ei, alpha=ALPHA, steps=steps, r=r, self_loops=self_loops)
    expected = appr_matrix_dense(ei, n, ALPHA, steps, r, self_loops) @ x.numpy()
    assert out.dtype == torch.float64 and out.shape == x.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-12 if math.isfinite(steps) else 1e-8)


@pytest.mark.parametrize("seed", [3, 4])
def test_random_graphs_and_alphas(seed):
    ei, n = _graph(n=20, p=0.15, seed=seed, isolated=1)
    x = _features(n, f=4, seed=seed)
    for alpha in (0.05, 0.5, 1.0):
        for r in (0.2, 0.7):
            for self_loops in (True, False):
                for steps in (3, math.inf):
                    out = appr_propagate(x, ei, alpha=alpha, steps=steps, r=r, self_loops=self_loops)
                    ref = appr_matrix_dense(ei, n, alpha, steps, r, self_loops) @ x.numpy()
                    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-7)


def test_isolated_nodes_without_self_loops_get_alpha_x():
    ei, n = _graph(isolated=3)  # nodes 12, 13, 14 have no edge
    x = _features(n)
    for steps in (1, 4, math.inf):
        out = appr_propagate(x, ei, alpha=ALPHA, steps=steps, r=0.5, self_loops=False)
        torch.testing.assert_close(out[-3:], ALPHA * x[-3:], rtol=0, atol=1e-14)
        assert torch.isfinite(out).all()
    # with self-loops an isolated node keeps its own features: Ã has a 1 on its diagonal
    out = appr_propagate(x, ei, alpha=ALPHA, steps=math.inf, r=0.5, self_loops=True)
    torch.testing.assert_close(out[-3:], x[-3:], rtol=0, atol=1e-9)


@pytest.mark.parametrize("r", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("self_loops", [True, False])
def test_builder_is_the_dense_normalisation(r, self_loops):
    ei, n = _graph()
    crow, col = csr_indices(ei, n)
    adj, diag = power_normalized_adjacency_csr(crow, col, r=r, self_loops=self_loops, weight=0.7)
    dense = adj.to_dense().numpy() + (np.diag(diag.squeeze(-1).numpy()) if self_loops else 0.0)
    assert (diag is None) == (not self_loops)
    np.testing.assert_allclose(dense, 0.7 * (appr_matrix_dense(ei, n, 0.0, 1, r, self_loops)), atol=1e-15)
    assert torch.equal(adj.col_indices(), col)  # no sort: the input order is kept


def test_row_stochastic_for_r0_with_self_loops():
    ei, n = _graph(n=30, p=0.2)
    crow, col = csr_indices(ei, n)
    adj, diag = power_normalized_adjacency_csr(crow, col, r=0.0, self_loops=True)
    row_sums = adj @ torch.ones(n, 1, dtype=torch.float64) + diag
    torch.testing.assert_close(row_sums, torch.ones(n, 1, dtype=torch.float64), rtol=0, atol=1e-15)
    for dtype, atol in ((torch.float64, 1e-13), (torch.float32, 1e-5)):
        const = torch.full((n, 1), 2.5, dtype=dtype)
        out = appr_propagate(const, ei, alpha=0.1, steps=[1, 5, 20, math.inf])
        torch.testing.assert_close(out, torch.full((n, 4), 2.5 / 4, dtype=dtype), rtol=0, atol=atol)


def test_concatenation_with_one_over_s_in_one_pass():
    ei, n = _graph()
    x = _features(n, f=2)
    steps = [2, math.inf, 0, 5, 2]
    out = appr_propagate(x, ei, alpha=ALPHA, steps=steps, r=0.5, self_loops=False)
    assert out.shape == (n, 2 * len(steps))
    blocks = [appr_propagate(x, ei, alpha=ALPHA, steps=m, r=0.5, self_loops=False) for m in steps]
    torch.testing.assert_close(out, torch.cat(blocks, dim=1) / len(steps), rtol=0, atol=1e-15)
    ref = np.concatenate([appr_matrix_dense(ei, n, ALPHA, m, 0.5, False) @ x.numpy() for m in steps], 1) / 5
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-8)
    # a one-element sequence is the plain result (s = 1); a tensor of step counts is accepted too
    torch.testing.assert_close(appr_propagate(x, ei, alpha=ALPHA, steps=[5]), appr_propagate(x, ei, alpha=ALPHA,
                                                                                            steps=5))
    for seq in (torch.tensor([1, 3]), np.array([1, 3]), range(1, 4, 2)):  # other sequences of step counts
        torch.testing.assert_close(appr_propagate(x, ei, alpha=ALPHA, steps=seq),
                                   appr_propagate(x, ei, alpha=ALPHA, steps=(1, 3)))


def test_csr_coo_and_edge_index_inputs_agree():
    ei, n = _graph()
    x = _features(n)
    ref = appr_propagate(x, ei, alpha=ALPHA, steps=[3, math.inf], r=0.5, self_loops=False)
    inputs = [to_torch_csr_tensor(ei, size=(n, n)), to_torch_coo_tensor(ei, size=(n, n)),
              torch.sparse_csr_tensor(*csr_indices(ei, n), torch.ones(ei.size(1), dtype=torch.float64), (n, n))]
    if SparseTensor is not None:
        inputs.append(SparseTensor.from_edge_index(ei, sparse_sizes=(n, n)))
    for adj in inputs:
        torch.testing.assert_close(appr_propagate(x, adj, alpha=ALPHA, steps=[3, math.inf], r=0.5, self_loops=False),
                                   ref, rtol=0, atol=1e-15)
    # an unsorted edge_index is the same graph
    perm = torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(appr_propagate(x, ei[:, perm], alpha=ALPHA, steps=[3, math.inf], r=0.5,
                                              self_loops=False), ref, rtol=0, atol=1e-15)


def test_float32_kept_and_input_untouched():
    ei, n = _graph()
    x64 = _features(n)
    x = x64.float()
    before = x.clone()
    for steps in (0, 3, math.inf, [0, 2, math.inf]):
        out = appr_propagate(x, ei, alpha=0.1, steps=steps)
        assert out.dtype == torch.float32
        ref = appr_propagate(x64, ei, alpha=0.1, steps=steps)
        torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-5)
    assert torch.equal(x, before)
    out = appr_propagate(x, ei, alpha=ALPHA, steps=0)
    assert out.data_ptr() != x.data_ptr()  # a copy, never the caller's tensor
    ints = appr_propagate(torch.ones(n, 2, dtype=torch.long), ei, alpha=ALPHA, steps=2)
    assert ints.dtype == torch.float64


def test_alpha_one_is_the_identity():
    ei, n = _graph()
    x = _features(n)
    out = appr_propagate(x, ei, alpha=1.0, steps=[0, 4, math.inf])
    torch.testing.assert_close(out, torch.cat([x, x, x], 1) / 3)


def test_directed_graph_raises_and_symmetrize_fixes_it():
    ei, n = _graph()
    directed = ei[:, ei[0] < ei[1]]
    x = _features(n)
    with pytest.raises(ValueError, match="directed"):
        appr_propagate(x, directed, alpha=ALPHA, steps=2)
    with pytest.raises(ValueError, match="directed"):
        appr_propagate(x, to_torch_csr_tensor(directed, size=(n, n)), alpha=ALPHA, steps=2)
    torch.testing.assert_close(appr_propagate(x, directed, alpha=ALPHA, steps=2, symmetrize=True),
                               appr_propagate(x, ei, alpha=ALPHA, steps=2))
    with pytest.raises(ValueError, match="self-loops"):
        appr_propagate(x, torch.cat([ei, torch.tensor([[0], [0]])], 1), alpha=ALPHA, steps=2)
    with pytest.raises(ValueError, match="duplicate"):
        appr_propagate(x, torch.cat([ei, ei[:, :2]], 1), alpha=ALPHA, steps=2)
    weighted = torch.sparse_csr_tensor(*csr_indices(ei, n), torch.full((ei.size(1),), 2.0), (n, n))
    with pytest.raises(ValueError, match="unweighted"):
        appr_propagate(x, weighted, alpha=ALPHA, steps=2)


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5, float("nan")])
def test_bad_alpha_raises(alpha):
    ei, n = _graph()
    with pytest.raises(ValueError, match="alpha"):
        appr_propagate(_features(n), ei, alpha=alpha, steps=2)


@pytest.mark.parametrize("steps, error", [(-1, ValueError), (1.5, ValueError), ([], ValueError),
                                          ([2, -3], ValueError), (True, TypeError), (float("nan"), TypeError),
                                          ("5", TypeError), (-math.inf, ValueError)])
def test_bad_steps_raise(steps, error):
    ei, n = _graph()
    with pytest.raises(error, match="steps"):
        appr_propagate(_features(n), ei, alpha=ALPHA, steps=steps)


def test_bad_features_and_options_raise():
    ei, n = _graph()
    x = _features(n)
    for bad in (float("nan"), float("inf")):
        y = x.clone()
        y[3, 1] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            appr_propagate(y, ei, alpha=ALPHA, steps=2)
    with pytest.raises(ValueError, match=r"\[N, F\]"):
        appr_propagate(x[:, 0], ei, alpha=ALPHA, steps=2)
    with pytest.raises(ValueError, match="num_nodes"):
        appr_propagate(x, ei, alpha=ALPHA, steps=2, num_nodes=n + 1)
    with pytest.raises(ValueError):  # an edge to a node x has no row for
        appr_propagate(x[:5], ei, alpha=ALPHA, steps=2)
    with pytest.raises(ValueError, match="`r`"):
        appr_propagate(x, ei, alpha=ALPHA, steps=2, r=1.5)
    with pytest.raises(TypeError, match="steps"):
        appr_propagate(x, ei, alpha=ALPHA, steps=None)
    with pytest.raises(ValueError, match="tol"):
        appr_propagate(x, ei, alpha=ALPHA, steps=math.inf, tol=-1.0)
    with pytest.raises(ValueError, match="max_iter"):
        appr_propagate(x, ei, alpha=ALPHA, steps=math.inf, max_iter=0)
    with pytest.raises(RuntimeError, match="did not converge in max_iter=5"):
        appr_propagate(x, ei, alpha=0.01, steps=math.inf, max_iter=5)


def test_infinite_steps_stop_at_tol():
    ei, n = _graph()
    x = _features(n)
    exact = appr_matrix_dense(ei, n, 0.1, math.inf, 0.0, True) @ x.numpy()
    loose = appr_propagate(x, ei, alpha=0.1, steps=math.inf, tol=1e-3).numpy()
    tight = appr_propagate(x, ei, alpha=0.1, steps=math.inf, tol=0.0).numpy()  # to the rounding floor
    assert np.abs(loose - exact).max() <= 9 * 1e-3  # (1 - alpha) / alpha times the last change
    assert np.abs(tight - exact).max() <= 1e-12


# --- steps=inf at the rounding level (float32 on graphs with high-degree nodes) ---------------

from pyg_private.utils import appr as appr_module  # noqa: E402  (the stopping rule's helpers)


def _star(n):
    """The star on n nodes: node 0 joined to every other node (degree n - 1)."""
    leaves = torch.arange(1, n)
    hub = torch.zeros(n - 1, dtype=torch.long)
    return torch.stack([torch.cat([hub, leaves]), torch.cat([leaves, hub])])


@pytest.mark.parametrize("self_loops", [False, True])
@pytest.mark.parametrize("r", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_float32_star_converges_at_its_rounding_level(alpha, r, self_loops):
    # Without self-loops the float32 iterates of this star end in a cycle whose largest change is
    # about 10-60 eps * max|H| (the hub sums 1999 terms), above the 8 eps * max|H| floor of the
    # change criterion: before the stall rule this raised "did not converge in max_iter".
    n = 2000
    ei = _star(n)
    x = _features(n, f=8, seed=0, dtype=torch.float32)
    out = appr_propagate(x, ei, alpha=alpha, steps=math.inf, r=r, self_loops=self_loops)
    assert out.dtype == torch.float32
    ref = appr_propagate(x.double(), ei, alpha=alpha, steps=math.inf, r=r, self_loops=self_loops)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
    # as good as the float32 iteration gets: many more iterations do not improve it
    far = appr_propagate(x, ei, alpha=alpha, steps=[20 * math.ceil(1 / alpha) + 400], r=r, self_loops=self_loops)
    err, err_far = float((out.double() - ref).abs().max()), float((far.double() - ref).abs().max())
    assert err <= 2 * err_far + 1e-6 * float(ref.abs().max())


def test_float32_star_still_raises_when_max_iter_is_too_small():
    n = 2000
    x = _features(n, f=8, seed=0, dtype=torch.float32)
    with pytest.raises(RuntimeError, match="did not converge in max_iter=20"):
        appr_propagate(x, _star(n), alpha=0.1, steps=math.inf, r=0.5, self_loops=False, max_iter=20)


def test_float64_star_unchanged_and_to_tol():
    n = 300
    ei = _star(n)
    x = _features(n, f=2, seed=3)
    for r, self_loops in ((0.0, True), (0.5, False), (1.0, False)):
        exact = appr_matrix_dense(ei, n, 0.1, math.inf, r, self_loops) @ x.numpy()
        out = appr_propagate(x, ei, alpha=0.1, steps=math.inf, r=r, self_loops=self_loops, tol=0.0).numpy()
        assert np.abs(out - exact).max() <= 1e-12 * np.abs(exact).max() * n


def test_stall_window_outlasts_the_exact_contraction():
    for alpha in (1e-3, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9, 0.999):
        window = appr_module._stall_window(alpha)
        assert window == math.ceil(2 / alpha) + 5
        assert (1 - alpha) ** window < appr_module._PROGRESS  # exact iterations always make progress


def _run_rule(changes, alpha, noise):
    """Feed a sequence of weighted changes to the stall rule as ``_recursion`` does; return the
    (1-based) iteration at which it stops, or None."""
    window = appr_module._stall_window(alpha)
    best, since = math.inf, 0
    for k, c in enumerate(changes, 1):
        best, since = appr_module._stall_update(best, since, c)
        if since >= window and (since - window) % window == 0 and appr_module._at_rounding_level(c, noise, alpha):
            return k
    return None


def test_stall_update_records_only_halving_progress():
    best, since = appr_module._stall_update(math.inf, 0, 1.0)
    assert (best, since) == (1.0, 0)  # the first change is recorded
    assert appr_module._stall_update(1.0, 0, 0.6) == (1.0, 1)  # not below half: no progress
    assert appr_module._stall_update(1.0, 7, 0.49) == (0.49, 0)
    assert appr_module._stall_update(1.0, 3, 2.0) == (1.0, 4)


def test_stall_rule_never_fires_while_the_change_shrinks_geometrically():
    for alpha in (0.01, 0.1, 0.5):
        # (down to 1e-250; a change of 0 stops by the tolerance criterion before this rule)
        changes = [(1 - alpha) ** k for k in range(round(math.log(1e-250) / math.log(1 - alpha)))]
        assert _run_rule(changes, alpha, noise=1.0) is None  # even with a huge noise bound
        # nor with a slower, exactly contracting change that dips below half within each window
        changes = [(1 - alpha / 2) ** k for k in range(round(math.log(1e-250) / math.log(1 - alpha / 2)))]
        assert _run_rule(changes, alpha, noise=1.0) is None


def test_stall_rule_fires_on_a_cycle_at_the_rounding_level_only():
    alpha = 0.1
    window = appr_module._stall_window(alpha)
    decay = [(1 - alpha) ** k for k in range(300)]
    level = decay[-1]
    cycle = decay + [level * 3, level * 2] * 200  # a 2-cycle just above where the decay ended
    stop = _run_rule(cycle, alpha, noise=level)  # within 4 / alpha * noise
    assert stop is not None and len(decay) < stop <= len(decay) + window + 1
    assert _run_rule(cycle, alpha, noise=level * 1e-3) is None  # far above the rounding level: no stop
    assert _run_rule([0.5] * (10 * window), alpha, noise=0.5 * alpha / 4) == window + 1
    assert _run_rule([0.5] * (10 * window), alpha, noise=0.5 * alpha / 4.001) is None  # exactly 4 / alpha
    assert _run_rule([0.5] * window, alpha, noise=1.0) is None  # not before a whole window without progress


def test_stall_rule_terminates_on_simulated_rounding_noise():
    # c_{k+1} <= (1 - alpha) c_k + 2 noise, with rounding noise of random size below the bound:
    # the rule stops, and stops only at the rounding level.
    gen = np.random.default_rng(0)
    for alpha in (0.05, 0.1, 0.5):
        for noise in (1e-7, 1e-4):
            c, changes = 1.0, []
            for _ in range(20_000):
                changes.append(c)
                c = (1 - alpha) * c * gen.uniform(0.9, 1.0) + 2 * noise * gen.uniform(0.0, 1.0)
            stop = _run_rule(changes, alpha, noise)
            # within the exact decay to the noise level plus a few windows
            assert stop is not None
            assert stop <= math.log(noise) / math.log(1 - alpha) + 3 * appr_module._stall_window(alpha)
            assert changes[stop - 1] <= 4 / alpha * noise


def test_rounding_noise_bounds_one_float32_step():
    # the error of one float32 step (with the float32 operator, against the same step in float64)
    # is within the bound the stall rule uses, in the weighted norm max |D^-r E|
    n = 2000
    ei = _star(n)
    x = _features(n, f=8, seed=1, dtype=torch.float32)
    crow, col = csr_indices(ei, n)
    for r, self_loops in ((0.5, False), (0.9, True), (0.0, True)):
        adj, diag = power_normalized_adjacency_csr(crow, col, r=r, self_loops=self_loops, weight=0.9,
                                                   dtype=torch.float32)
        restart = x * 0.1
        h = appr_propagate(x, ei, alpha=0.1, steps=7, r=r, self_loops=self_loops)
        step = torch.addmm(restart, adj, h)
        exact = torch.addmm(restart.double(), adj.to(torch.float64), h.double())
        if diag is not None:
            step.addcmul_(h, diag)
            exact.addcmul_(h.double(), diag.double())
        weight = appr_module._norm_weight(crow, r, self_loops, torch.float64)
        error = (step.double() - exact).abs()
        if weight is not None:
            error = error * weight.unsqueeze(-1)
        bound = appr_module._rounding_noise(h, restart, adj, diag, crow,
                                            None if weight is None else weight.float())
        assert 0 < float(error.max()) <= bound


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("r, self_loops", [(0.0, True), (0.5, False)])
@pytest.mark.parametrize("steps", [10, math.inf])
def test_c_kernel_path_is_bit_identical_to_the_torch_path(dtype, r, self_loops, steps, monkeypatch):
    """The recursion's ``alpha X + (1 - alpha) Ã H`` with CsrProduct's kernel and the restart added in
    row blocks gives the torch path's values bit for bit (the package's order of summation on both;
    blocks of 97 rows here, so that many block boundaries and a short last block are crossed), and
    one step stays within the rounding bound of torch.addmm's own order."""
    from pyg_private.utils import appr as appr_module
    from pyg_private.utils.csr_product import CsrProduct, csr_product_available, summation_error_bound

    if not csr_product_available():
        pytest.skip("the C CSR product is not built or this CPU has no AVX2")
    monkeypatch.setattr(appr_module, "_RESTART_ROWS", 97)
    torch.manual_seed(3)
    n = 1500
    ei = simple_undirected(erdos_renyi_graph(n, 12 / n), n)[0]
    x = _features(n, f=37, seed=4, dtype=dtype) * 1e3
    kw = dict(alpha=0.15, steps=steps, r=r, self_loops=self_loops)
    fast = appr_propagate(x, ei, **kw)
    monkeypatch.setattr(appr_module, "CsrProduct", lambda adj: CsrProduct(adj, native=False))
    reference = appr_propagate(x, ei, **kw)
    assert torch.equal(fast, reference)
    crow, col = csr_indices(ei, n)
    adj, diag = power_normalized_adjacency_csr(crow, col, r=r, self_loops=self_loops, weight=0.85, dtype=dtype)
    ours = torch.empty_like(x)
    appr_module._restarted_product(CsrProduct(adj), adj, fast, x, 0.15, ours)
    theirs = torch.addmm(x, adj, fast, beta=0.15)
    bound = summation_error_bound(adj, fast) + 2 * torch.finfo(dtype).eps * (x.abs() * 0.15 + ours.abs())
    assert bool(((ours.double() - theirs.double()).abs() <= bound.double()).all())
