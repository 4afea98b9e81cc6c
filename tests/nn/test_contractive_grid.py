"""The grid (floating-point-safe) release of ContractiveGraphLayer: hop values on the grid, the
inflated one-hop bound that the convergent analysis needs, the event, the distinguisher audit."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.audit import floating_point_audit, grid_possible
from pyg_private.nn import ContractiveGraphLayer
from pyg_private.nn import contractive_graph_layer as cgl_module


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def ring(n, chords=()):
    edges = [(i, (i + 1) % n) for i in range(n)] + list(chords)
    ei = torch.tensor(edges, dtype=torch.long).t()
    return torch.cat([ei, ei.flip(0)], dim=1)


def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def no_projection(monkeypatch):
    """Make the row projection the identity, so that the hop values themselves are returned."""
    monkeypatch.setattr(cgl_module, "_clip_rows", lambda x, out=None, slack_dtype=None: x)


def test_hop_values_are_exact_multiples_of_the_granularity(no_projection):
    x = torch.rand(50, 8, dtype=torch.float64, generator=gen(0)) * 0.1
    for dtype in (torch.float64, torch.float32):
        layer = ContractiveGraphLayer(1, 0.9, 0.8, 0.1, min_degree=1, noise_multiplier=2.0, generator=gen(1))
        out = layer(x.to(dtype), ring(50))
        g = layer.granularity
        assert g is not None and math.frexp(g)[0] == 0.5
        assert out.dtype == dtype
        assert torch.equal(torch.remainder(out.double(), g), torch.zeros_like(out.double()))
        # the noise has the calibrated std sigma * Delta' (Delta' = Delta (1 + <= 2^-16))
        noiseless = ContractiveGraphLayer(1, 0.9, 0.8, 0.1, min_degree=1, noise_multiplier=0.0)(x.to(dtype), ring(50))
        std = float((out.double() - noiseless.double()).std())
        assert std == pytest.approx(2.0 * layer.sensitivity, rel=0.1)


def test_outputs_stay_in_the_ball_in_both_precisions():
    x = torch.randn(200, 16, generator=gen(2), dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        layer = ContractiveGraphLayer(4, 0.9, 0.9, 0.1, min_degree=1, noise_multiplier=3.0, generator=gen(3))
        out = layer(x.to(dtype), ring(200))
        assert out.dtype == dtype
        assert bool((out.norm(dim=1) <= 1).all())  # in the output dtype's own arithmetic
        assert bool((out.double().norm(dim=1) <= 1).all())


def test_one_edge_moves_the_coupled_hops_by_at_most_the_inflated_bound():
    """Identical noise (same seed), one chord toggled: hop k moves by at most
    Delta' sum_{j<k} C_L^j with Delta' = Delta + (1 + C_L) sqrt(N F) g, the bound the grid's
    accounting uses (the hop's rounding included)."""
    n, f = 12, 3
    for c, a1, beta in [(0.9, 1.0, 0.0), (0.6, 0.7, 0.5), (0.99, 0.5, 2.0)]:
        x = torch.randn(n, f, generator=gen(int(c * 100)), dtype=torch.float64)
        worst = 0.0
        for K in (1, 2, 4):
            for seed in range(5):
                a = ContractiveGraphLayer(K, c, a1, beta, min_degree=1, noise_multiplier=0.3, generator=gen(seed))
                b = ContractiveGraphLayer(K, c, a1, beta, min_degree=1, noise_multiplier=0.3, generator=gen(seed))
                out_a, out_b = a(x, ring(n)), b(x, ring(n, [(0, 6)]))
                g = a.granularity
                assert g == b.granularity
                delta = a.sensitivity + (1 + c) * math.sqrt(n * f) * g
                assert delta <= a.sensitivity * (1 + 2.0 ** -16)
                bound = delta * sum(c ** j for j in range(K))
                dist = float((out_a - out_b).norm())
                assert dist <= bound, (c, a1, beta, K, seed, dist, bound)
                worst = max(worst, dist / bound)
        assert worst > 0.05  # not vacuous: the toggled chord does move the release


def test_event_records_the_grid_and_keeps_mu():
    acct = PrivacyAccountant()
    x = torch.rand(30, 4, dtype=torch.float64, generator=gen(4))
    layer = ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=1.5, accountant=acct, generator=gen(5))
    layer(x, ring(30))
    (ev,) = acct.events_of("edge")
    float_layer = ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=1.5, sampler="float")
    assert ev.mu == pytest.approx(float_layer.mu, rel=1e-15)
    assert ev.params["granularity"] == layer.granularity and ev.params["sampler"] == "safe"
    assert layer.sensitivity < ev.params["grid_sensitivity"] <= layer.sensitivity * (1 + 2.0 ** -16)
    assert "sampler='safe'" in repr(layer)


def test_secure_mode_and_bad_sampler_arguments():
    x = torch.rand(10, 2, dtype=torch.float64, generator=gen(6))
    with pytest.raises(ValueError, match="generator"):
        ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, secure_mode=True, generator=gen(0))
    with pytest.raises(ValueError, match="sampler"):
        ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, sampler="exact")
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, secure_mode=True, accountant=acct,
                                  cached=False)
    a, b = layer(x, ring(10)), layer(x, ring(10))
    assert not torch.equal(a, b) and len(acct) == 2


def test_no_grid_value_is_impossible_under_a_neighbouring_graph(no_projection):
    """Distinguisher audit of the hop values of two neighbouring graphs (one chord apart): every
    coordinate of every release is a multiple of the granularity, hence possible under both
    graphs (the integer noise has full support). 2 x 20 releases of 64 x 64 coordinates:
    163,840 coordinates, 0 identifications."""
    n, f = 64, 64
    x = torch.rand(n, f, dtype=torch.float64, generator=gen(7)) * 0.2
    ga, gb = ring(n), ring(n, [(0, 32)])
    layer = ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, generator=gen(8))
    layer(x, ga)
    g = layer.granularity

    def sampler(graph):
        def draw(m):
            return torch.stack([layer(x, graph).reshape(-1) for _ in range(m)])
        return draw

    result = floating_point_audit(sampler(ga), sampler(gb), lambda y: grid_possible(y, g),
                                  lambda y: grid_possible(y, g), num_releases=20, batch_size=20)
    assert result.identified == 0 and result.coordinate_rate == 0.0
    assert 2 * result.num_releases * result.coordinates >= 1e5  # coordinates per release


def test_process_wide_secure_mode_refuses_a_seeded_layer_before_any_charge():
    from pyg_private.mechanisms import secure_mode

    x = torch.rand(10, 2, dtype=torch.float64, generator=gen(9))
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct, generator=gen(1))
    with secure_mode():
        with pytest.raises(ValueError, match="generator"):
            layer(x, ring(10))
    assert len(acct) == 0
    layer(x, ring(10))  # outside the context: the seeded (experimental) run is allowed again
    assert len(acct) == 1


def test_gap_hops_are_never_impossible_under_a_neighbouring_graph(monkeypatch):
    """GAPAggregation's noisy sums (renormalisation switched off) on two graphs one chord apart:
    every coordinate is on the grid, hence possible under both; 2 x 20 releases of 64 x 64."""
    from pyg_private.nn import GAPAggregation
    from pyg_private.nn import gap_aggregation as gap_module

    monkeypatch.setattr(torch.nn.functional, "normalize", lambda v, dim=-1: v)
    monkeypatch.setattr(gap_module, "_normalize_rows_", lambda v: v)
    n, f = 64, 64
    x = torch.rand(n, f, dtype=torch.float64, generator=gen(10))
    ga, gb = ring(n), ring(n, [(0, 32)])
    layer = GAPAggregation(1, noise_multiplier=1.0, generator=gen(11))
    layer(x, ga)
    g = layer.granularity

    def sampler(graph):
        return lambda m: torch.stack([layer(x, graph)[:, f:].reshape(-1) for _ in range(m)])

    result = floating_point_audit(sampler(ga), sampler(gb), lambda y: grid_possible(y, g),
                                  lambda y: grid_possible(y, g), num_releases=20, batch_size=20)
    assert result.identified == 0 and 2 * result.num_releases * result.coordinates >= 1e5


def test_process_wide_secure_mode_leaves_the_float_sampler_alone():
    """secure_mode concerns the safe sampler: a float-sampler layer with a seeded generator is not
    refused under the process-wide default (it was, at construction)."""
    from pyg_private.mechanisms import secure_mode
    from pyg_private.nn import GAPAggregation

    with secure_mode():
        ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, sampler="float", generator=gen(0))
        GAPAggregation(1, noise_multiplier=1.0, sampler="float", generator=gen(0))
        with pytest.raises(ValueError, match="generator"):
            ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, generator=gen(0))
