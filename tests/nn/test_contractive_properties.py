"""ContractiveGraphLayer: properties of the released chain, checked on the layer itself.

What each test proves (every check runs the library's forward; NumPy only picks inputs):

* ``test_k_hop_run_is_the_prefix_of_a_longer_run`` -- the premise of the coupled checks:
  a K = k run with a generator seed reproduces the first k hops of a longer run with the
  same seed (one ``randn`` of shape [N, F] per hop; chaining K = 1 runs through
  ``forward(x, edge_index, x0)`` gives the same chain), so "hop k" can be read off a K = k run.
* ``test_identical_noise_edge_coupling_on_small_graphs`` -- brute force over paths, cycles,
  stars, wheels, random and regular graphs on 5..12 nodes, D = declared ``min_degree`` in
  {1, 2} holding for the graph *without* the edge (run with ``degree_floor=True``, which is
  the plain normalisation on these graphs, all of whose degrees are >= D, and lets the layer
  accept the graph without the edge, whose minimum degree is D): with identical noise, removing one edge
  moves hop k by at most ``layer.sensitivity * sum_{j<k} C_L^j`` (exactly ``Delta`` at k = 1),
  for several C_L, alpha1, beta, noise multipliers 1e-9 and 0.5, inputs on the unit sphere
  (best of random draws and a power-method maximiser); also the sharper one-step form
  d_k <= C_L d_{k-1} + Delta with the measured d_{k-1}. It checks that the search comes close
  to the bound at hop 1 (~0.92 of Delta), so it is not vacuous.
* ``test_brute_force_catches_a_wrongly_declared_min_degree`` -- the same measurement (of the
  layer's unchecked hop) exceeds the sensitivity when D is read off the cycle *with* the edge,
  so the brute force can fail; the layer itself now refuses that declaration.
* ``test_hops_after_the_first_are_contractive`` -- with the same X0 and noise, the map
  X -> Pi(C_L(alpha1 Â X + (1 - alpha1) mean X) + beta X0 + Z) computed by the layer
  (``forward(X, ei, x0=X0)``) is C_L-Lipschitz in Frobenius norm, k hops C_L^k-Lipschitz,
  and the constant is attained (Â's Perron vector), so a wrong constant is caught.
  ``test_the_first_hop_is_not_contractive_without_a_shared_x0`` is the contrast: with x0
  defaulting to x the map is (C_L + beta)-Lipschitz (Remark 1: hop 1 need not contract).
* ``test_output_rows_stay_in_the_unit_ball`` -- every output row has norm <= 1 + 1e-12
  (float64), for big noise, beta = 15, inputs far outside the ball.
* ``test_float32_output_rows_stay_in_the_unit_ball`` -- the same at 1e-12 for float32
  outputs (the projection divides by the norm times 1 + (F + 4)u, so rounding cannot leave
  the ball; it failed before that slack, at 1 + ~6e-8).
* ``test_projection_of_huge_finite_rows`` -- rows with entries > ~1e154 used to overflow
  the row norm and be "projected" to 0; they land on the unit sphere.
* ``test_accountant_convergent_never_above_linear`` -- the epsilon a PrivacyAccountant
  records for one forward with convergent accounting is <= the linear one (same noise
  multiplier), equal at K = 1, non-decreasing in K and constant for C_L = 0, K in 1..30.
* ``test_cached_reuse_charges_nothing_and_misses_charge_once`` -- a cached reuse returns the
  same tensor, draws no noise and charges nothing even with the budget exhausted; a change
  of x0, of the graph or of ``batch`` is a new release (one event each); uncached forwards
  of identical inputs charge one event each and draw fresh noise.
"""
import functools
import itertools
import warnings

import networkx as nx
import numpy as np
import pytest
import torch

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.accounting.contractive import edge_sensitivity
from pyg_private.nn import ContractiveGraphLayer as _Layer

# The premises of the bound (exact coupling, contraction, sensitivity) concern the map itself: they
# are checked on the float sampler, whose hops are the exact-arithmetic map plus Gaussian noise. The
# grid release adds its rounding, bounded in tests/nn/test_contractive_grid.py.
ContractiveGraphLayer = functools.partial(_Layer, sampler="float")

TINY = 1e-9  # noise multiplier of the (near) noise-free runs
F = 3  # feature columns of the brute force


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def edge_index_of(edges, n):
    """Undirected edge_index (both directions) of a set of pairs (i, j)."""
    if not edges:
        return torch.empty(2, 0, dtype=torch.long)
    e = torch.tensor(sorted(edges), dtype=torch.long).t()
    return torch.cat([e, e.flip(0)], 1)


def degrees(edges, n):
    d = np.zeros(n, dtype=int)
    for i, j in edges:
        d[i] += 1
        d[j] += 1
    return d


def norm_adj(edges, n):
    A = np.eye(n)
    for i, j in edges:
        A[i, j] = A[j, i] = 1.0
    s = 1.0 / np.sqrt(A.sum(1))
    return A * s[:, None] * s[None, :]


def sphere(rng, n, f):
    x = rng.standard_normal((n, f))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def max_rows_on_sphere(N, rng, f, restarts=4, iters=60):
    """An X (rows on the unit sphere) with large ||N X||_F: generalised power method."""
    Q = N.T @ N
    best, best_val = None, -1.0
    for _ in range(restarts):
        X = sphere(rng, N.shape[1], f)
        for _ in range(iters):
            G = Q @ X
            nrm = np.linalg.norm(G, axis=1, keepdims=True)
            X = np.where(nrm > 1e-14, G / np.maximum(nrm, 1e-300), X)
        val = np.linalg.norm(N @ X)
        if val > best_val:
            best, best_val = X, val
    return best


def run(layer, x, edge_index, seed, x0=None):
    layer.generator = torch.Generator().manual_seed(seed)
    return layer(x, edge_index, x0)


def simple(edges):
    return {(min(i, j), max(i, j)) for i, j in edges}


def edge_pairs(rng):
    """(edges of G, edges of G - e, n, D, family): min degree of G - e >= D, D in {1, 2}.

    Two framings: a base graph with min degree >= D plus one of its non-edges, and a graph
    minus one of its edges whose removal keeps min degree >= D. At most 3 edges per graph.
    """
    pairs = []

    def add(base, n, D, family):  # G = base + e, G - e = base
        assert degrees(base, n).min() >= D
        non_edges = [(i, j) for i in range(n) for j in range(i + 1, n) if (i, j) not in base]
        for k in rng.permutation(len(non_edges))[:3]:
            pairs.append((base | {non_edges[k]}, base, n, D, family + "+e"))

    def remove(graph, n, D, family):  # G = graph, G - e = graph - e
        valid = [e for e in sorted(graph) if degrees(graph - {e}, n).min() >= D]
        for k in rng.permutation(len(valid))[:3]:
            pairs.append((graph, graph - {valid[k]}, n, D, family + "-e"))

    def random_graph(n, D):
        while True:
            p = float(rng.uniform(0.2 + 0.1 * D, 0.7))
            g = {(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p}
            if degrees(g, n).min() >= D:
                return g

    for n in range(5, 13):
        path = {(i, i + 1) for i in range(n - 1)}
        cycle = path | {(0, n - 1)}
        star = {(0, i) for i in range(1, n)}
        wheel = star | {(i, i + 1) for i in range(1, n - 1)} | {(1, n - 1)}
        add(path, n, 1, "path")
        add(cycle, n, 2, "cycle")
        add(cycle, n, 1, "cycle")
        add(star, n, 1, "star")
        add(wheel, n, 2, "wheel")
        remove(path, n, 1, "path")
        remove(cycle, n, 1, "cycle")
        remove(wheel, n, 2, "wheel")
        for D in (1, 2):
            add(random_graph(n, D), n, D, f"gnp{D}")
            remove(random_graph(n, D), n, D, f"gnp{D}")
            if (n * D) % 2 == 0:  # D-regular: the near-worst case of Eq. (6)
                reg = simple(nx.random_regular_graph(D, n, seed=int(rng.integers(1 << 30))).edges())
                add(reg, n, D, f"regular{D}")
    return pairs


# --------------------------------------------------------------------------------------------
# 0. the coupling premise
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("beta, sigma", [(0.0, 0.5), (2.0, 0.05)])
def test_k_hop_run_is_the_prefix_of_a_longer_run(beta, sigma):
    rng = np.random.default_rng(0)
    n, K = 9, 5
    edges = {(i, (i + 1) % n) for i in range(n)} | {(0, 4), (2, 7)}
    ei = edge_index_of(simple(edges), n)
    x = torch.tensor(sphere(rng, n, F))
    kw = dict(contraction=0.8, alpha1=0.6, beta=beta, min_degree=1, noise_multiplier=sigma)

    # K = k runs with one seed ...
    full = [run(ContractiveGraphLayer(k, **kw), x, ei, seed=7) for k in range(1, K + 1)]
    # ... equal a chain of K = 1 runs sharing one generator, restarted at the previous hop
    # with the original X0 as the residual
    gen = torch.Generator().manual_seed(7)
    one = ContractiveGraphLayer(1, generator=gen, **kw)
    h = x
    for k in range(K):
        h = one(h, ei, x)
        assert torch.allclose(h, full[k], rtol=0, atol=1e-14), k
    # exactly one float64 randn of shape [N, F] per hop is drawn
    ref = torch.Generator().manual_seed(7)
    for k in range(1, K + 1):
        gen = torch.Generator().manual_seed(7)
        ContractiveGraphLayer(k, generator=gen, **kw)(x, ei)
        torch.randn(n, F, dtype=torch.float64, generator=ref)
        assert torch.equal(gen.get_state(), ref.get_state()), k
    assert not torch.allclose(full[0], run(ContractiveGraphLayer(1, **kw), x, ei, seed=8))  # noise matters


# --------------------------------------------------------------------------------------------
# 1. identical-noise coupling: one edge moves hop k by <= Delta * sum_{j<k} C_L^j
# --------------------------------------------------------------------------------------------
PARAMS = list(itertools.product((0.5, 0.9, 0.99), (1.0, 0.6), (0.0, 0.3, 2.0), (TINY, 0.5)))
K_MAX = 4


def test_identical_noise_edge_coupling_on_small_graphs():
    rng = np.random.default_rng(1)
    pairs = edge_pairs(rng)
    families = {p[4] for p in pairs}
    assert {"path+e", "path-e", "cycle+e", "cycle-e", "star+e", "wheel-e", "gnp1-e", "gnp2+e",
            "regular1+e", "regular2+e"} <= families
    layers = {}
    worst_hop1 = 0.0  # achieved / Delta at hop 1, (near) noise-free
    worst = 0.0  # achieved / bound over all hops and settings
    worst_step = 0.0  # achieved / (C_L * previous hop's distance + Delta), hops >= 2
    for t, (g, g_minus, n, D, family) in enumerate(pairs):
        c, a1, beta, sigma = PARAMS[t % len(PARAMS)]
        key = (c, a1, beta, sigma, D)
        if key not in layers:
            # the floor is the plain normalisation here (every degree >= D) and accepts G - e
            layers[key] = [ContractiveGraphLayer(k, c, a1, beta, min_degree=D, degree_floor=True,
                                                 noise_multiplier=sigma) for k in range(1, K_MAX + 1)]
        chain = layers[key]
        delta = chain[0].sensitivity
        assert delta == edge_sensitivity(contraction=c, alpha1=a1, min_degree=D)
        assert degrees(g_minus, n).min() >= D and len(g) == len(g_minus) + 1 and g_minus < g
        ei, ei_minus = edge_index_of(g, n), edge_index_of(g_minus, n)
        # inputs on the unit sphere: the best of 4 random draws, and a power-method maximiser of
        # the first hop's change ||C_L alpha1 (Â_G - Â_{G-e}) X||_F
        N = c * a1 * (norm_adj(g, n) - norm_adj(g_minus, n))
        draws = [sphere(rng, n, F) for _ in range(4)]
        inputs = [max(draws, key=lambda x: np.linalg.norm(N @ x)), max_rows_on_sphere(N, rng, F)]
        for x_np in inputs:
            x = torch.tensor(x_np)
            seed = 1000 + t
            previous = 0.0
            for k, layer in enumerate(chain, start=1):
                dist = (run(layer, x, ei, seed) - run(layer, x, ei_minus, seed)).norm().item()
                bound = delta * sum(c**j for j in range(k))
                assert dist <= bound * (1 + 1e-12) + 1e-12, (family, n, D, c, a1, beta, sigma, k, dist, bound)
                # the sharper one-step form: d_k <= C_L d_{k-1} + Delta with the measured d_{k-1}
                step = c * previous + delta
                assert dist <= step * (1 + 1e-12) + 1e-12, (family, n, D, c, a1, beta, sigma, k, dist, step)
                worst = max(worst, dist / bound)
                if k > 1:
                    worst_step = max(worst_step, dist / step)
                previous = dist
                if k == 1 and sigma == TINY:
                    worst_hop1 = max(worst_hop1, dist / delta)
    assert len(pairs) > 250
    # not vacuous: the search gets close to Eq. (6) (regular graphs: ~0.87 at D = 1, ~0.92 at D = 2)
    assert worst_hop1 > 0.85 and worst <= 1.0 + 1e-12


def unchecked_hop(layer, x, edge_index):
    """The layer's own contractive map of one hop (no noise, no projection, no bound check)."""
    crow, col = layer._read_graph(edge_index, x.size(0))
    adj, self_loop = layer._normalized_adjacency(crow, col, x.dtype)
    return layer._hop(adj, self_loop, x, None, None)


def test_brute_force_catches_a_wrongly_declared_min_degree():
    # an 8-cycle minus one edge: declared D = 2 (the minimum degree of the graph WITH the
    # edge) is violated at hop 1; D = 1 (without) holds
    rng = np.random.default_rng(2)
    n = 8
    cycle = {(i, i + 1) for i in range(n - 1)} | {(0, n - 1)}
    path = cycle - {(0, n - 1)}
    N = 0.9 * (norm_adj(cycle, n) - norm_adj(path, n))
    x = torch.tensor(max_rows_on_sphere(N, rng, F))
    wrong = ContractiveGraphLayer(1, 0.9, min_degree=2, noise_multiplier=0.5)
    dist = (unchecked_hop(wrong, x, edge_index_of(cycle, n)) - unchecked_hop(wrong, x, edge_index_of(path, n)))
    assert dist.norm().item() > 1.2 * wrong.sensitivity  # 0.820 vs 0.655 per C_L before the noise
    for graph in (cycle, path):  # the layer refuses the false declaration on either graph
        with pytest.raises(ValueError, match="min_degree"):
            run(wrong, x, edge_index_of(graph, n), 3)
    right = ContractiveGraphLayer(1, 0.9, min_degree=1, degree_floor=True, noise_multiplier=0.5)
    dist = (run(right, x, edge_index_of(cycle, n), 3) - run(right, x, edge_index_of(path, n), 3)).norm().item()
    assert dist <= right.sensitivity


# --------------------------------------------------------------------------------------------
# 2. contraction of the hops after the first
# --------------------------------------------------------------------------------------------
def in_ball(rng, n, f):
    return sphere(rng, n, f) * rng.uniform(0, 1, size=(n, 1)) ** (1 / f)


@pytest.mark.parametrize("c", [0.0, 0.3, 0.7, 0.95])
def test_hops_after_the_first_are_contractive(c):
    rng = np.random.default_rng(int(c * 100))
    graphs = []
    for n in (6, 12):
        graphs.append((simple(nx.gnp_random_graph(n, 0.4, seed=n).edges()), n))  # isolated nodes allowed
        graphs.append((simple(nx.random_regular_graph(3, n, seed=n).edges()), n))
        graphs.append(({(0, i) for i in range(1, n)}, n))  # star: Â's row sums exceed 1 at the hub
    worst, tight = 0.0, []
    for a1, beta, sigma in itertools.product((1.0, 0.5), (0.0, 0.7, 15.0), (TINY, 0.5)):
        layers = [ContractiveGraphLayer(k, c, a1, beta, min_degree=0, noise_multiplier=sigma) for k in (1, 3)]
        for t, (edges, n) in enumerate(graphs):
            ei = edge_index_of(edges, n)
            # Perron vector of Â (eigenvalue 1): X - X' along it is stretched by exactly C_L when
            # alpha1 = 1 (for a regular graph also by the mean), if nothing is clipped
            s = np.sqrt(degrees(edges, n) + 1.0)
            perron = 0.4 * np.outer(s / s.max(), [1.0, -0.5, 0.25]) / np.linalg.norm([1.0, -0.5, 0.25])
            x0 = torch.tensor(in_ball(rng, n, F))
            X = in_ball(rng, n, F)
            cases = [(X, in_ball(rng, n, F)), (X, (X + 0.05 * in_ball(rng, n, F)) / 1.05),
                     (sphere(rng, n, F), sphere(rng, n, F)), (perron, -perron)]
            for j, (xa, xb) in enumerate(cases):
                xa, xb = torch.tensor(xa), torch.tensor(xb)
                assert bool((xa.norm(dim=1) <= 1 + 1e-15).all() and (xb.norm(dim=1) <= 1 + 1e-15).all())
                gap = (xa - xb).norm().item()
                for k, layer in zip((1, 3), layers):
                    seed = 31 * t + j
                    diff = (run(layer, xa, ei, seed, x0) - run(layer, xb, ei, seed, x0)).norm().item()
                    ratio = diff / gap
                    assert ratio <= c**k + 1e-12, (n, a1, beta, sigma, j, k, ratio)
                    worst = max(worst, ratio / c if k == 1 and c > 0 else 0.0)
                    if j == 3 and beta == 0.0 and sigma == TINY and (a1 == 1.0 or len(set(s)) == 1):
                        tight.append(ratio / c**k if c > 0 else ratio)
    if c > 0:
        # attained: the check would catch any constant above C_L (e.g. alpha1 or the mean unweighted)
        assert all(r == pytest.approx(1.0, rel=1e-9) for r in tight) and len(tight) >= 6
        assert worst == pytest.approx(1.0, rel=1e-9)
    else:
        assert tight and all(r == 0.0 for r in tight)


def test_the_first_hop_is_not_contractive_without_a_shared_x0():
    # contrast: with x0 defaulting to x the residual moves with the input, so the map
    # x -> layer(x) is only (C_L + beta)-Lipschitz; the x0 argument is what the test above relies on
    n = 6
    ei = edge_index_of({(i, (i + 1) % n) for i in range(n)}, n)
    layer = ContractiveGraphLayer(1, 0.5, 1.0, 0.4, min_degree=1, noise_multiplier=TINY)
    xa = torch.full((n, 2), 0.5, dtype=torch.float64)
    diff = (run(layer, xa, ei, 0) - run(layer, -xa, ei, 0)).norm() / (2 * xa).norm()
    assert diff.item() == pytest.approx(0.5 + 0.4, rel=1e-9)


# --------------------------------------------------------------------------------------------
# 3. every output row in the unit ball
# --------------------------------------------------------------------------------------------
BALL_CASES = list(itertools.product((0.5, 50.0, 1e4), (0.0, 15.0), (1.0, 1e3, 1e8), (1, 3)))


def _ball_outputs(dtype):
    rng = np.random.default_rng(4)
    n = 10
    edges = {(i, (i + 1) % n) for i in range(n)} | {(0, 5)}
    ei = edge_index_of(edges, n)
    for t, (sigma, beta, scale, K) in enumerate(BALL_CASES):
        layer = ContractiveGraphLayer(K, 0.9, 0.7, beta, min_degree=1, noise_multiplier=sigma)
        x = torch.tensor(rng.standard_normal((n, 5)) * scale, dtype=dtype)
        x0 = torch.tensor(rng.standard_normal((n, 5)) * scale * 10, dtype=dtype)
        for x0_arg in (None, x0):
            out = run(layer, x, ei, t, x0_arg)
            assert out.dtype == dtype and bool(torch.isfinite(out).all())
            yield out.double().norm(dim=1)  # the exact norms of the returned values


def test_output_rows_stay_in_the_unit_ball():
    norms = torch.cat(list(_ball_outputs(torch.float64)))
    assert bool((norms <= 1 + 1e-12).all()), norms.max().item() - 1
    assert (norms > 1 - 1e-9).float().mean() > 0.5  # mostly clipped: the check bites


def test_float32_output_rows_stay_in_the_unit_ball():
    norms = torch.cat(list(_ball_outputs(torch.float32)))
    assert bool((norms <= 1 + 1e-12).all()), norms.max().item() - 1


def test_float32_output_rows_within_one_float32_rounding():
    norms = torch.cat(list(_ball_outputs(torch.float32)))
    assert bool((norms <= 1 + 2.0**-23).all()), norms.max().item() - 1


def test_projection_of_huge_finite_rows():
    # C_L = 0 gives Delta = 0, hence no noise: the output is Pi(beta * Pi(x0)) = x0 / ||x0|| for beta = 1
    ei = edge_index_of({(0, 1), (1, 2), (0, 2)}, 3)
    layer = ContractiveGraphLayer(1, 0.0, 1.0, 1.0, min_degree=1, noise_multiplier=1.0)
    x = torch.tensor([[3e200, 4e200], [1e300, 0.0], [-2e160, 2e160]], dtype=torch.float64)
    expected = torch.tensor([[0.6, 0.8], [1.0, 0.0], [-0.5**0.5, 0.5**0.5]], dtype=torch.float64)
    assert torch.allclose(layer(x, ei), expected, atol=1e-12)


# --------------------------------------------------------------------------------------------
# 4. accountant: convergent <= linear; events per forward and cached reuse
# --------------------------------------------------------------------------------------------
def test_accountant_convergent_never_above_linear():
    n = 5
    ei = edge_index_of({(i, (i + 1) % n) for i in range(n)}, n)
    x = torch.rand(n, 2, generator=torch.Generator().manual_seed(0))
    delta = 1e-5
    for c in (0.0, 0.3, 0.6, 0.9, 0.99):
        for sigma in (0.8, 4.0):
            previous = None
            for K in range(1, 31):
                eps = {}
                for accounting in ("convergent", "linear"):
                    acct = PrivacyAccountant()
                    layer = ContractiveGraphLayer(K, c, min_degree=1, noise_multiplier=sigma, accounting=accounting,
                                                  accountant=acct)
                    layer(x, ei)
                    assert len(acct.events_of("edge")) == 1
                    eps[accounting] = acct.epsilon("edge", delta)
                conv, lin = eps["convergent"], eps["linear"]
                assert conv <= lin, (c, sigma, K)
                if K == 1 or c == 0.0:
                    assert conv == pytest.approx(previous if K > 1 else lin, rel=1e-12)  # one Gaussian hop
                else:
                    assert previous <= conv * (1 + 1e-12) and conv < lin  # non-decreasing in K (up to rounding once
                    # rho_K has saturated), strictly below linear
                previous = conv


def test_cached_reuse_charges_nothing_and_misses_charge_once():
    n = 8
    ring = {(i, (i + 1) % n) for i in range(n)}
    ei = edge_index_of(ring, n)
    x = torch.rand(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(5)
    probe = ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=2.0)
    mu = probe.mu
    # a budget that one release fits and two do not
    budget = PrivacyAccountant()
    budget.register(probe.event())
    budget.register(probe.event())
    eps_two = budget.epsilon("edge", 1e-5)
    acct = PrivacyAccountant(budget={"edge": (eps_two * 0.99, 1e-5)})
    layer = ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=2.0, accountant=acct, cached=True,
                                  generator=gen)
    first = layer(x, ei)
    eps_one = acct.epsilon("edge")
    state = gen.get_state()
    for _ in range(3):  # cached reuse: same values, no noise drawn, nothing charged (budget exhausted)
        again = layer(x.clone(), ei.clone())
        assert torch.equal(again, first)
    assert torch.equal(gen.get_state(), state)
    assert len(acct.events_of("edge")) == 1 and acct.epsilon("edge") == eps_one
    # any change of the inputs is a new release, refused by the budget before any noise
    chord = edge_index_of(ring | {(0, 4)}, n)
    for args in ((x, ei, x * 0.5), (x, chord), (x, ei, None, torch.zeros(n, dtype=torch.long))):
        with pytest.raises(PrivacyBudgetExceeded):
            layer(*args)
        assert torch.equal(gen.get_state(), state) and len(acct.events_of("edge")) == 1
    # without a budget each miss is exactly one event, each reuse of the new cache none
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=2.0, accountant=acct, cached=True)
    calls = [(x, ei), (x, ei), (x, ei, x * 0.5), (x, ei, x * 0.5), (x, chord), (x, chord),
             (x, chord, None, torch.zeros(n, dtype=torch.long)), (x, chord, None, torch.zeros(n, dtype=torch.long))]
    for i, args in enumerate(calls):
        layer(*args)
        assert len(acct.events_of("edge")) == i // 2 + 1, i
    assert all(e.mu == pytest.approx(mu, rel=1e-15) for e in acct.events_of("edge"))
    # uncached: every forward of the same inputs is a fresh release with fresh noise
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=2.0, accountant=acct, cached=False)
    outs = [layer(x, ei) for _ in range(4)]
    assert len(acct.events_of("edge")) == 4
    assert not any(torch.equal(a, b) for a, b in itertools.combinations(outs, 2))
    assert acct.epsilon("edge", 1e-5) > eps_one


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_projection_is_non_expansive_across_the_boundary(dtype):
    """Rows just inside and just outside the unit sphere: the projection must not jump there
    (a clip that shrinks only rows outside the ball would move them by (F + 4)u)."""
    from pyg_private.nn.contractive_graph_layer import _clip_rows

    g = torch.Generator().manual_seed(0)
    u = torch.randn(2000, 64, generator=g, dtype=torch.float64)
    u = u / u.norm(dim=1, keepdim=True)
    eps = torch.finfo(dtype).eps
    for scale_a, scale_b in ((1 - 8 * eps, 1 + 8 * eps), (1.0, 1 + eps), (0.999, 1.001), (1 - 300 * eps, 1.0)):
        a, b = (scale_a * u).to(dtype), (scale_b * u).to(dtype)
        pa, pb = _clip_rows(a.clone()), _clip_rows(b.clone())
        d_in = (a.double() - b.double()).norm(dim=1)
        d_out = (pa.double() - pb.double()).norm(dim=1)
        assert bool((d_out <= d_in + 4 * eps).all()), float((d_out - d_in).max())
        assert bool((pa.double().norm(dim=1) <= 1).all()) and bool((pb.double().norm(dim=1) <= 1).all())
