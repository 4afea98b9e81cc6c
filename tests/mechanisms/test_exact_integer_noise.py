"""The exact integer samplers: distribution, the exact fallback paths, the float fast path's margin."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from pyg_private.mechanisms import exact_integer_noise as E
from sampler_helpers import force_exact_paths as _force
from sampler_helpers import seeded_source as _source

SCALES = {"gaussian": [2.0 ** 20, 2.0 ** 20 * 1.7, 2.0 ** 37 * 1.3], "laplace": [2.0 ** 20, 2.0 ** 29 * 1.45]}


def _chi_square_p(sampler: E.RoundedNoiseSampler, values: torch.Tensor, edges_in_scale) -> float:
    """Goodness of fit of |K| binned at ``edges * scale`` against the exact (256-bit) probabilities."""
    t = sampler._t
    edges = [0] + [int(round(e * sampler.scale)) for e in edges_in_scale]
    survival = [t.tail_mass(e) if e > 0 else mpmath.mpf(1) for e in edges] + [mpmath.mpf(0)]
    expected = np.array([float(survival[i] - survival[i + 1]) for i in range(len(edges))])
    m = values.abs().numpy()
    counts = np.bincount(np.searchsorted(np.array(edges[1:]), m, side="right"), minlength=len(edges))
    expected = expected / expected.sum() * len(m)
    keep = expected > 5
    rest = (~keep).sum()
    obs = np.append(counts[keep], counts[~keep].sum()) if rest else counts[keep]
    exp = np.append(expected[keep], expected[~keep].sum()) if rest else expected[keep]
    return float(chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_distribution_matches_the_rounded_continuous_law(kind):
    edges = [0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0] if kind == "gaussian" else \
        [0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0]
    for i, scale in enumerate(SCALES[kind]):
        s = E.RoundedNoiseSampler(kind, scale)
        x = s.sample(200_000, _source(i))
        assert x.dtype == torch.int64
        assert _chi_square_p(s, x, edges) > 1e-4
        # sign symmetric, mean zero, scale right
        assert abs(float((x > 0).double().mean()) - 0.5) < 0.005
        std = x.double().std().item() / scale
        assert std == pytest.approx(1.0 if kind == "gaussian" else math.sqrt(2), rel=0.02)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_float_fast_path_stays_inside_its_margin(kind):
    """The float64 acceptance ratio is within the proven margin of the exact (256-bit) one, for
    values across every part of the table, cell 0 and value 0 included."""
    for scale in SCALES[kind]:
        s = E.RoundedNoiseSampler(kind, scale)
        t = s._t
        rng = np.random.default_rng(0)
        cells = np.concatenate([[0, 0, 1, t.num_cells - 1], rng.integers(0, t.num_cells, 40)])
        offsets = np.concatenate([[0, 1, 0, t.w - 1], rng.integers(0, t.w, 40)])
        k = torch.tensor(cells * t.w + offsets, dtype=torch.int64)
        ratio = s._ratio(k, torch.tensor(offsets, dtype=torch.int64))
        for ki, r in zip(k.tolist(), ratio.tolist()):
            exact = float(t.accept_probability(ki))
            assert 0 < exact <= 1
            assert abs(r - exact) <= exact * t.margin, (ki, r, exact)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_exact_paths_give_the_same_law(kind, monkeypatch):
    """Forcing alias ties (3 split bits) and the 256-bit acceptance test (margin 0.3): still the law."""
    s = E.RoundedNoiseSampler(kind, SCALES[kind][1])
    calls = {"n": 0}
    real = E.exact_bernoulli

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(E, "exact_bernoulli", counting)
    forced = _force(s, split_bits=3, margin=0.3)
    x = forced.sample(6_000, _source(3))
    assert calls["n"] > 1_000  # the exact comparisons did run
    edges = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0] if kind == "gaussian" else [0.25, 0.5, 1.0, 2.0, 3.0, 5.0]
    assert _chi_square_p(s, x, edges) > 1e-4


def test_exact_bernoulli_decides_exactly():
    src = _source(1)
    third = mpmath.mpf(1) / 3
    # 1/3 = 0.010101...b: the first 4 bits 0101 (=5) tie, 0100 (=4) is below, 0110 above
    assert E.exact_bernoulli(third, 4, 4, src) is True
    assert E.exact_bernoulli(third, 6, 4, src) is False
    draws = [E.exact_bernoulli(third, 5, 4, _source(i)) for i in range(400)]
    # given the prefix 0101, U < 1/3 has probability (1/3 - 5/16) * 16 = 1/3
    assert abs(sum(draws) / 400 - 1 / 3) < 0.08


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_tail_path(kind):
    """The tail beyond the table (probability ~1e-22) is sampled exactly from the conditional law."""
    s = E.RoundedNoiseSampler(kind, SCALES[kind][0])
    t = s._t
    start = t.num_cells * t.w
    draws = [s._tail_sample(_source(i)) for i in range(200 if kind == "gaussian" else 60)]
    mags = np.abs(draws)
    assert (mags >= start).all()
    excess = (mags - start) / s.scale
    if kind == "laplace":  # memoryless: the excess is Exp(1)-like with mean 1
        assert 0.6 < excess.mean() < 1.5
    else:  # Gaussian tail beyond z = 10: the excess is about 1/z = 0.1 on average
        assert 0.05 < excess.mean() < 0.15
    assert {np.sign(d) for d in draws} == {-1, 1}


def test_tail_cell_is_replaced(monkeypatch):
    s = E.RoundedNoiseSampler("laplace", SCALES["laplace"][0])
    t = s._t
    forced = _force(s)
    forced._t.split_int = torch.zeros_like(t.split_int)  # every slot goes to its alias ...
    forced._t.alias_t = torch.full_like(t.alias_t, t.tail)  # ... the tail
    monkeypatch.setattr(E.RoundedNoiseSampler, "_tail_sample", lambda self, src: 12345)
    x = forced.sample(10, _source())
    assert (x == 12345).all()


def test_scale_range_and_kind_are_checked():
    with pytest.raises(ValueError, match="2\\^20"):
        E.RoundedNoiseSampler("gaussian", 1000.0)
    with pytest.raises(ValueError, match="2\\^46"):
        E.RoundedNoiseSampler("laplace", 2.0 ** 50)
    with pytest.raises(ValueError, match="kind"):
        E.RoundedNoiseSampler("uniform", 2.0 ** 21)


def test_seeded_source_is_reproducible_and_out_is_filled():
    s = E.RoundedNoiseSampler("gaussian", 2.0 ** 22)
    a = s.sample(5000, _source(7))
    out = torch.empty(5000, dtype=torch.int64)
    b = s.sample(5000, _source(7), out=out)
    assert b is out and torch.equal(a, b)
    assert not torch.equal(a, s.sample(5000, _source(8)))


# -- the accounting claim: a grid release is a post-processing of the continuous mechanism --------------
def test_rounded_laplace_is_no_less_private_than_the_laplace_mechanism():
    """The rounded Laplace pmf, shifted by an integer s (the rounded query's change in grid steps),
    has privacy loss at most s / b everywhere: the pure epsilon the Laplace event charges."""
    for b in (0.7, 2.5, 40.0):
        k = np.arange(-4000, 4001)
        x = 0.5 / b
        logp = np.where(k == 0, np.log(-np.expm1(-x)), np.log(np.sinh(x)) - np.abs(k) / b)  # no underflow
        assert np.exp(logp).sum() == pytest.approx(1.0, abs=1e-12)
        for s in (1, 2, 5):
            loss = np.abs(logp[s:] - logp[:-s])
            assert loss.max() <= s / b * (1 + 1e-12)
            assert loss.max() >= s / b * 0.99  # tight: the tails attain it


def test_rounded_gaussian_is_dominated_by_the_gaussian_mechanism():
    """Hockey-stick divergence of the rounded Gaussian shifted by s, computed exactly over the
    integers, never exceeds the GDP curve of mu = s / sigma that the Gaussian event charges."""
    from scipy.stats import norm

    from pyg_private.accounting import gdp_delta

    for sigma in (0.8, 2.5, 9.0):
        k = np.arange(-400, 401)
        pmf = norm.cdf((k + 0.5) / sigma) - norm.cdf((k - 0.5) / sigma)
        for s in (1, 2, 4):
            p, q = pmf[s:], pmf[:-s]  # P(K + s = k) against P(K = k)
            for eps in (0.0, 0.1, 0.5, 1.0, 2.0, 4.0):
                delta = np.clip(p - np.exp(eps) * q, 0, None).sum()
                assert delta <= gdp_delta(mu=s / sigma, epsilon=eps) + 1e-12, (sigma, s, eps)
