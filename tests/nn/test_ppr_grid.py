"""The grid (floating-point-safe) releases of NoisyPPRDiffusion and DPPushFlowCap: values on the grid,
the noise scale, the events (curve unchanged, grid recorded, the rounding absorbed exactly), the coupled
one-edge bounds with the inflated shift, secure mode, the kept float path and the distinguisher audit."""
from __future__ import annotations

import contextlib
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning, push_flow_rdp
from pyg_private.accounting.pabi import lazy_ppr_rdp
from pyg_private.audit import additive_float_possible, floating_point_audit, grid_possible
from pyg_private.mechanisms._noise import TwoLaplaceStream, laplace_noise
from pyg_private.nn import DPPushFlowCap, NoisyPPRDiffusion
from pyg_private.nn import noisy_ppr_diffusion as npd_module
from pyg_private.utils import push_flow_cap_ppr, simple_undirected

TOL = 2.0 ** -16


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


@contextlib.contextmanager
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def ring(n, chords=()):
    """A ring with chords, as the validated (coalesced) edge_index the layers compute on."""
    edges = [(i, (i + 1) % n) for i in range(n)] + list(chords)
    ei = torch.tensor(edges, dtype=torch.long).t()
    return simple_undirected(torch.cat([ei, ei.flip(0)], dim=1), n)[0]


def gen(seed):
    return torch.Generator().manual_seed(seed)


def one_hot(n, seeds):
    x = torch.zeros(n, len(seeds), dtype=torch.float64)
    x[list(seeds), list(range(len(seeds)))] = 1.0
    return x


def on_grid(y, g):
    return bool(grid_possible(y, g).all())


# ------------------------------------------------------------------ NoisyPPRDiffusion

def test_diffusion_values_are_multiples_of_the_granularity():
    n = 60
    for personalized in (False, True):
        layer = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=10, personalized=personalized,
                                  generator=gen(0))
        with float64_default():
            out = layer(edge_index=ring(n, [(0, 30), (5, 40)]), seed_index=[0, 7, 59], num_nodes=n)
        g = layer.granularity
        assert g is not None and math.frexp(g)[0] == 0.5
        assert out.dtype == torch.float64 and on_grid(out, g)
        beta = 0.8  # the coarsest grid with (1 + beta) N g <= 2^-16 rho and sigma / g >= 2^20
        assert (1 + beta) * n * g <= TOL * 2 * beta * 1e-2 and 1e-3 / g >= 2.0 ** 20
        assert (1 + beta) * n * 2 * g > TOL * 2 * beta * 1e-2 or 1e-3 / (2 * g) < 2.0 ** 20
    # signals (not one-hot) too, and a projection is post-processing of the grid values
    x = torch.rand(n, 4, dtype=torch.float64, generator=gen(1))
    layer = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=5, generator=gen(2))
    assert on_grid(layer(x, ring(n)), layer.granularity)
    projected = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=5, output_projection="simplex",
                                  generator=gen(2))(x, ring(n))
    torch.testing.assert_close(projected.sum(0), torch.ones(4, dtype=torch.float64))


def test_diffusion_noise_has_the_inflated_scale():
    """One step: y = R(phi(s)) + g K, so y - phi(s) has std 2 sigma' (two Laplace of scale sigma'),
    sigma' = sigma (1 + (1 + beta) N g / (2 beta eta)) <= sigma (1 + 2^-16)."""
    n, c = 2000, 10
    x = one_hot(n, range(0, 2 * c, 2))
    layer = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-3, num_iterations=1, generator=gen(3))
    out = layer(x, ring(n))
    exact = NoisyPPRDiffusion(noise_scale=0.0, eta=1e-3, num_iterations=1)(x, ring(n))
    grid = layer.plan_grid(n)
    assert grid.granularity == layer.granularity
    assert 1e-3 < grid.noise_scale <= 1e-3 * (1 + TOL) * (1 + 2.0 ** -50)
    diff = (out - exact).reshape(-1)
    assert float(diff.std()) == pytest.approx(2 * grid.noise_scale, rel=0.03)
    assert abs(float(diff.mean())) < 5 * 2e-3 / math.sqrt(diff.numel())


def test_diffusion_event_keeps_the_curve_and_records_the_grid():
    n = 50
    for personalized in (False, True):
        acct = PrivacyAccountant()
        kw = dict(noise_scale=1e-4, eta=1e-5, num_iterations=30, personalized=personalized)
        layer = NoisyPPRDiffusion(accountant=acct, generator=gen(4), **kw)
        layer(edge_index=ring(n, [(3, 20)]), seed_index=torch.tensor([1, 2, 2]), num_nodes=n)
        (ev,) = acct.events
        cols = 2 if personalized else 3
        curve = lazy_ppr_rdp(layer.orders, noise_scale=1e-4, num_iterations=30, eta=1e-5, alpha=0.2,
                             personalized=personalized)
        np.testing.assert_array_equal(ev.rdp, cols * curve)  # the float sampler's curve, exactly
        float_layer = NoisyPPRDiffusion(sampler="float", **kw)
        np.testing.assert_array_equal(ev.rdp, float_layer.event(cols).rdp)
        p = ev.params
        assert p["sampler"] == "safe" and p["granularity"] == layer.granularity and p["dim"] == n
        assert float_layer.event(cols).params["sampler"] == "float"
        # the rounding is absorbed exactly: rho' / sigma' <= rho / sigma in rational arithmetic, with
        # rho' = 2 beta eta + (1 + beta) N g; eta' and sigma' at most (1 + 2^-16) times eta and sigma
        beta, g = Fraction(1.0 - 0.2), Fraction(p["granularity"])
        rho, rho_grid = 2 * beta * Fraction(1e-5), 2 * beta * Fraction(1e-5) + (1 + beta) * n * g
        assert rho_grid / Fraction(p["grid_noise_scale"]) <= rho / Fraction(1e-4)
        assert 2 * beta * Fraction(p["grid_eta"]) >= rho_grid
        assert 1e-5 < p["grid_eta"] <= 1e-5 * (1 + TOL) * (1 + 2.0 ** -50)
        # so the curve at (sigma', eta') lies below the charged one
        grid_curve = lazy_ppr_rdp(layer.orders, noise_scale=p["grid_noise_scale"], num_iterations=30,
                                  eta=p["grid_eta"], alpha=0.2, personalized=personalized)
        assert np.all(grid_curve <= curve * (1 + 1e-12))


def test_diffusion_coupled_one_edge_bound_with_the_inflated_shift():
    """Identical noise (same seed), one edge toggled at a seed: per column, the l1 distance of the
    releases after K steps is at most rho' sum_{j<K} beta^j with rho' = 2 beta eta', the per-step shift
    the accounting uses (rounding included)."""
    n, beta = 24, 0.8
    worst = 0.0
    for K in (1, 3, 8):
        for seed in range(4):
            kw = dict(alpha=1 - beta, noise_scale=1e-4, eta=0.05, num_iterations=K)
            a, b = NoisyPPRDiffusion(generator=gen(seed), **kw), NoisyPPRDiffusion(generator=gen(seed), **kw)
            x = one_hot(n, [0, 6, 12])
            out_a, out_b = a(x, ring(n)), b(x, ring(n, [(0, 6), (12, 18)]))
            assert a.granularity == b.granularity
            rho = 2 * beta * a.plan_grid(n).eta
            assert rho <= 2 * beta * 0.05 * (1 + TOL) * (1 + 2.0 ** -50)
            bound = rho * sum(beta ** j for j in range(K))
            dist = (out_a - out_b).abs().sum(0)
            assert bool((dist <= bound).all()), (K, seed, dist, bound)
            worst = max(worst, float(dist.max()) / bound)
    assert worst > 0.4  # not vacuous (measured 0.50: one toggled edge moves a column by about beta eta)


def test_diffusion_secure_mode_and_argument_checks():
    with pytest.raises(ValueError, match="generator"):
        NoisyPPRDiffusion(noise_scale=1e-3, secure_mode=True, generator=gen(0))
    with pytest.raises(ValueError, match="sampler"):
        NoisyPPRDiffusion(noise_scale=1e-3, sampler="exact")
    with pytest.raises(ValueError, match="safe sampler"):
        NoisyPPRDiffusion(noise_scale=1e-3, sampler="float", secure_mode=True)
    with pytest.raises(ValueError, match="granularity"):
        NoisyPPRDiffusion(noise_scale=1e-3, sampler="float", granularity=2.0 ** -30)
    with pytest.raises(ValueError, match="power of two"):
        NoisyPPRDiffusion(noise_scale=1e-3, granularity=3e-9)
    acct = PrivacyAccountant()
    layer = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=3, secure_mode=True, accountant=acct,
                              cached=False)
    a = layer(edge_index=ring(10), seed_index=[0], num_nodes=10)
    b = layer(edge_index=ring(10), seed_index=[0], num_nodes=10)
    assert not torch.equal(a, b) and len(acct) == 2
    layer.generator = gen(1)  # a seeded generator set later: refused before anything is charged
    with pytest.raises(ValueError, match="generator"):
        layer(edge_index=ring(10), seed_index=[0], num_nodes=10)
    assert len(acct) == 2
    # a noise scale no grid can serve, or a grid too coarse: refused before any charge
    for bad in (NoisyPPRDiffusion(noise_scale=1e-300, accountant=acct),
                NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, granularity=2.0 ** -8, accountant=acct)):
        with pytest.raises(ValueError, match="too small for a grid release|too coarse"):
            bad(edge_index=ring(10), seed_index=[0], num_nodes=10)
    assert len(acct) == 2
    # a valid user grid is used and recorded
    fixed = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, granularity=2.0 ** -36, accountant=acct,
                              generator=gen(2))
    with float64_default():
        out = fixed(edge_index=ring(10), seed_index=[0], num_nodes=10)
    assert fixed.granularity == 2.0 ** -36 and on_grid(out, 2.0 ** -36)
    assert acct.events[-1].params["granularity"] == 2.0 ** -36


def test_diffusion_float_sampler_keeps_the_old_path():
    """sampler='float': phi(s) + TwoLaplaceStream noise (one step, reproduced from the same seed)."""
    n = 30
    x = one_hot(n, [0, 5])
    out = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=1, sampler="float", generator=gen(6))(
        x, ring(n))
    exact = NoisyPPRDiffusion(noise_scale=0.0, eta=1e-2, num_iterations=1)(x, ring(n))
    noise = TwoLaplaceStream(x.shape, 1e-3, device="cpu", generator=gen(6)).sample()
    assert torch.equal(out, exact + noise)


def test_diffusion_safe_sampler_draws_no_float_noise(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the float stream was used")

    monkeypatch.setattr(npd_module, "TwoLaplaceStream", refuse)
    NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=3)(edge_index=ring(10), seed_index=[0],
                                                                    num_nodes=10)


def test_diffusion_no_value_is_impossible_under_a_neighbouring_graph():
    """Distinguisher audit of two neighbouring graphs (one chord apart): every coordinate of every
    release is a multiple of g, hence possible under both (the integer noise has full support).
    2 x 20 releases of 64 x 64 coordinates: 163,840 coordinates, 0 identifications."""
    n = 64
    x = one_hot(n, range(n))
    ga, gb = ring(n), ring(n, [(0, 32)])
    layer = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=3, generator=gen(7))
    layer(x, ga)
    g = layer.granularity

    def sampler(graph):
        def draw(m):
            return torch.stack([layer(x, graph).reshape(-1) for _ in range(m)])
        return draw

    result = floating_point_audit(sampler(ga), sampler(gb), lambda y: grid_possible(y, g),
                                  lambda y: grid_possible(y, g), num_releases=20, batch_size=20)
    assert result.identified == 0 and result.coordinate_rate == 0.0
    assert 2 * result.num_releases * result.coordinates >= 1e5


# ------------------------------------------------------------------ DPPushFlowCap

def test_push_flow_values_are_on_the_grid_with_the_inflated_scale():
    n = 400
    seeds = torch.arange(0, 400, 8)
    kw = dict(noise_scale=1e-3, eta=1e-3, num_iterations=20)
    with float64_default():
        raw = DPPushFlowCap(clip_output=False, generator=gen(8), **kw)
        out = raw(edge_index=ring(n, [(0, 200)]), seed_index=seeds, num_nodes=n)
        clipped = DPPushFlowCap(generator=gen(8), **kw)(edge_index=ring(n, [(0, 200)]), seed_index=seeds,
                                                       num_nodes=n)
    g = raw.granularity
    assert on_grid(out, g) and on_grid(clipped, g)
    assert torch.equal(clipped, out.clamp(0, 1))  # the clip is post-processing, 0 and 1 on the grid
    grid = raw.plan_grid(n)
    assert n * g <= TOL * raw.sensitivity and 1e-3 / g >= 2.0 ** 20
    assert 2 * n * g > TOL * raw.sensitivity or 1e-3 / (2 * g) < 2.0 ** 20
    assert grid.sensitivity == pytest.approx(raw.sensitivity + n * g, rel=1e-15)
    assert 1e-3 < grid.noise_scale <= 1e-3 * (1 + TOL) * (1 + 2.0 ** -50)
    p = push_flow_cap_ppr(ring(n, [(0, 200)]), n, seeds, alpha=0.2, num_iterations=20, eta=1e-3,
                          personalized=False)
    diff = (out - p).reshape(-1)
    assert float(diff.std()) == pytest.approx(math.sqrt(2) * grid.noise_scale, rel=0.03)


def test_push_flow_event_keeps_the_curve_and_records_the_grid():
    acct = PrivacyAccountant()
    n = 40
    layer = DPPushFlowCap(noise_scale=1e-5, eta=1e-6, num_iterations=50, accountant=acct, generator=gen(9))
    layer(edge_index=ring(n), seed_index=torch.tensor([1, 2, 3]), num_nodes=n)
    (ev,) = acct.events
    kw = dict(noise_scale=1e-5, eta=1e-6, alpha=0.2, num_iterations=50)
    np.testing.assert_array_equal(ev.rdp, push_flow_rdp(layer.orders, num_columns=3, **kw))
    p = ev.params
    assert p["sampler"] == "safe" and p["granularity"] == layer.granularity and p["dim"] == n
    sens, g = Fraction(layer.sensitivity), Fraction(p["granularity"])
    assert (sens + n * g) / Fraction(p["grid_noise_scale"]) <= sens / Fraction(1e-5)  # Delta'/b' <= Delta/b
    assert Fraction(p["grid_sensitivity"]) >= sens + n * g
    assert p["grid_sensitivity"] <= layer.sensitivity * (1 + TOL) * (1 + 2.0 ** -50)


def test_push_flow_coupled_one_edge_bound():
    """Same noise, one edge toggled: per column the l1 distance is at most Delta_1 + N g (the
    sensitivity of the rounded column that the grid release is calibrated for)."""
    n = 30
    seeds = torch.tensor([0, 3, 15])
    worst = 0.0
    for seed in range(4):
        kw = dict(noise_scale=1e-2, eta=0.05, num_iterations=30, clip_output=False)
        a, b = DPPushFlowCap(generator=gen(seed), **kw), DPPushFlowCap(generator=gen(seed), **kw)
        with float64_default():
            out_a = a(edge_index=ring(n), seed_index=seeds, num_nodes=n)
            out_b = b(edge_index=ring(n, [(0, 15)]), seed_index=seeds, num_nodes=n)
        bound = a.plan_grid(n).sensitivity
        dist = (out_a - out_b).abs().sum(0)
        assert bool((dist <= bound).all()), (dist, bound)
        worst = max(worst, float(dist.max()) / bound)
    assert worst > 0.1  # measured 0.18


def test_push_flow_secure_mode_float_path_and_checks():
    with pytest.raises(ValueError, match="generator"):
        DPPushFlowCap(noise_scale=1e-3, secure_mode=True, generator=gen(0))
    with pytest.raises(ValueError, match="granularity"):
        DPPushFlowCap(noise_scale=1e-3, sampler="float", granularity=2.0 ** -30)
    acct = PrivacyAccountant()
    layer = DPPushFlowCap(noise_scale=1e-3, secure_mode=True, accountant=acct, cached=False)
    a = layer(edge_index=ring(10), seed_index=[0], num_nodes=10)
    b = layer(edge_index=ring(10), seed_index=[0], num_nodes=10)
    assert not torch.equal(a, b) and len(acct) == 2
    layer.generator = gen(1)
    with pytest.raises(ValueError, match="generator"):
        layer(edge_index=ring(10), seed_index=[0], num_nodes=10)
    assert len(acct) == 2
    # sampler='float': p + laplace_noise from the same seed, clipped
    with float64_default():
        out = DPPushFlowCap(noise_scale=1e-3, eta=1e-2, sampler="float", generator=gen(2))(
            edge_index=ring(10), seed_index=[0, 4], num_nodes=10)
    p = push_flow_cap_ppr(ring(10), 10, torch.tensor([0, 4]), alpha=0.2, num_iterations=100, eta=1e-2,
                          personalized=False)
    ref = (p + laplace_noise(p.shape, 1e-3, device=p.device, generator=gen(2))).clamp(0, 1)
    assert torch.equal(out, ref)


def test_push_flow_distinguisher_catches_the_float_sampler_and_not_the_grid():
    """Two neighbouring graphs, the noiseless columns known: the float release (unclipped) is often
    impossible under the other graph; the grid release never (2 x 40 releases of 40 x 40 = 128,000
    coordinates)."""
    n = 40
    seeds = torch.arange(n)
    ga, gb = ring(n), ring(n, [(0, 20)])
    pa, pb = (push_flow_cap_ppr(e, n, seeds, alpha=0.2, num_iterations=30, eta=0.05, personalized=False).reshape(-1)
              for e in (ga, gb))
    assert not torch.equal(pa, pb)

    def sampler(layer, graph):
        def draw(m):
            with float64_default():
                return torch.stack([layer(edge_index=graph, seed_index=seeds, num_nodes=n).reshape(-1)
                                    for _ in range(m)])
        return draw

    kw = dict(noise_scale=0.1, eta=0.05, num_iterations=30, clip_output=False)
    leaky = DPPushFlowCap(sampler="float", generator=gen(10), **kw)
    result = floating_point_audit(sampler(leaky, ga), sampler(leaky, gb), lambda y: additive_float_possible(y, pa),
                                  lambda y: additive_float_possible(y, pb), num_releases=5, batch_size=5)
    assert result.identified == 10  # every release has an impossible coordinate under the other graph
    safe = DPPushFlowCap(generator=gen(11), **kw)
    safe(edge_index=ga, seed_index=seeds, num_nodes=n)
    g = safe.granularity
    result = floating_point_audit(sampler(safe, ga), sampler(safe, gb), lambda y: grid_possible(y, g),
                                  lambda y: grid_possible(y, g), num_releases=40, batch_size=40)
    assert result.identified == 0 and 2 * result.num_releases * result.coordinates >= 1e5


def test_grid_error_names_the_smallest_tolerance_that_works():
    """At ogbn-products' size the default grid cannot hold the diffusion's values within 2^60 steps:
    the error (raised by plan_grid, before any charge) names the smallest power-of-two tolerance that
    works, and half of it still fails."""
    import re

    kw = dict(alpha=0.2, num_iterations=100, eta=1e-7, epsilon=0.1, delta=1e-8, personalized=True)
    n = 2_449_029
    with pytest.raises(ValueError, match=r"grid_tolerance` to .* \(2\^-14;") as info:
        NoisyPPRDiffusion(**kw).plan_grid(n)
    tol = float(re.search(r"grid_tolerance` to ([0-9.e-]+)", str(info.value)).group(1))
    assert NoisyPPRDiffusion(**kw, grid_tolerance=tol).plan_grid(n).granularity > 0
    with pytest.raises(ValueError, match="2\\^60 steps"):
        NoisyPPRDiffusion(**kw, grid_tolerance=tol / 2).plan_grid(n)


def test_noisy_ppr_takes_a_canonical_csr_as_it_is():
    """A CSR adjacency already simple and undirected is used as it is: the release (seeded noise
    included) equals the edge_index one, is cached under it (a second call costs nothing), and a
    directed CSR goes through the general path, which refuses it."""
    from torch_geometric.utils import to_torch_csr_tensor, to_undirected

    from pyg_private import PrivacyAccountant

    g = torch.Generator().manual_seed(0)
    n = 40
    ei = to_undirected(torch.randint(n, (2, 120), generator=g), num_nodes=n)
    ei = ei[:, ei[0] != ei[1]]
    adj = to_torch_csr_tensor(ei, size=(n, n))
    seeds = torch.tensor([0, 5, 7])
    kw = dict(alpha=0.2, num_iterations=10, eta=1e-3, noise_scale=1e-3)
    outs = [NoisyPPRDiffusion(**kw, generator=torch.Generator().manual_seed(1))(edge_index=a, seed_index=seeds,
                                                                               num_nodes=n) for a in (ei, adj)]
    assert torch.equal(outs[0], outs[1])
    acct = PrivacyAccountant()
    layer = NoisyPPRDiffusion(**kw, accountant=acct)
    first = layer(edge_index=adj, seed_index=seeds)
    assert torch.equal(layer(edge_index=adj, seed_index=seeds), first) and len(acct.events) == 1  # cached
    with pytest.raises(ValueError, match="directed|undirected|symmetr"):
        NoisyPPRDiffusion(**kw)(edge_index=to_torch_csr_tensor(ei[:, ei[0] < ei[1]], size=(n, n)), seed_index=seeds)
