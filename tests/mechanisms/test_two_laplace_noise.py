r"""The exact sampler of round(L1 + L2), L1, L2 independent Lap(0, b) (kind "two_laplace"): its law,
the closed form of its probabilities, the float fast path's proven margin (and that the margin test
catches a wrong formula), the cheap thresholds, the forced exact paths and the tail.

X = L1 + L2 has density f(x) = (1/(4b)) (1 + |x|/b) e^{-|x|/b} and P(|X| >= x) = e^{-x/b} (2 + x/b) / 2
(see test_two_laplace_stream.py for the derivation); Var X = 4 b^2.
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from scipy import stats
from scipy.stats import chisquare

from pyg_private.mechanisms import exact_integer_noise as E
from pyg_private.sampling import sampler as sampler_module
from pyg_private.mechanisms._noise import TwoLaplaceStream
from sampler_helpers import fast_path_cases as _cases
from sampler_helpers import force_exact_paths as _force
from sampler_helpers import seeded_source as _source

SCALES = [2.0 ** 20, 2.0 ** 29 * 1.45, 2.0 ** 41 * 1.1]
EDGES = [0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]  # |K| bins, in units of b


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
    obs = np.append(counts[keep], counts[~keep].sum()) if (~keep).any() else counts[keep]
    exp = np.append(expected[keep], expected[~keep].sum()) if (~keep).any() else expected[keep]
    return float(chisquare(obs, exp).pvalue)


def _continuous_cdf(x, b):
    z = np.abs(np.asarray(x, dtype=np.float64)) / b
    tail = np.exp(-z) * (2.0 + z) / 4.0
    return np.where(np.asarray(x) >= 0, 1.0 - tail, tail)


# ------------------------------------------------------------------------------------------- the law

def test_distribution_matches_the_rounded_two_laplace_law():
    for i, b in enumerate(SCALES):
        s = E.RoundedNoiseSampler("two_laplace", b)
        x = s.sample(200_000, _source(i))
        assert x.dtype == torch.int64
        assert _chi_square_p(s, x, EDGES) > 1e-4
        assert abs(float((x > 0).double().mean()) - 0.5) < 0.005  # sign symmetric
        assert abs(float(x.double().mean()) / b) < 5 * 2 / math.sqrt(x.numel())
        # Var(L1 + L2) = 4 b^2: std 2b (the rounding adds 1/12, nothing at these scales)
        assert x.double().std().item() / b == pytest.approx(2.0, rel=0.02)
    # the chi-square test has power: one Laplace of the same variance (scale sqrt(2) b) is rejected
    s = E.RoundedNoiseSampler("two_laplace", SCALES[1])
    lap = E.RoundedNoiseSampler("laplace", SCALES[1] * math.sqrt(2)).sample(200_000, _source(9))
    assert _chi_square_p(s, lap, EDGES) < 1e-10


def test_agrees_with_the_continuous_law_and_the_float_stream():
    """Scaled back by b, the samples follow the continuous CDF (the rounding is 2^-20 of b) and the
    float sampler that ``sampler="float"`` keeps (two-sample test)."""
    b = 2.0 ** 20
    x = E.rounded_two_laplace(100_000, b, _source(4)).double().numpy() / b
    assert stats.kstest(x, lambda t: _continuous_cdf(t, 1.0)).pvalue > 1e-3
    assert stats.kstest(x, lambda t: _continuous_cdf(t, 1.06)).pvalue < 1e-6  # the test has power
    stream = TwoLaplaceStream((100_000,), 1.0, device="cpu", generator=torch.Generator().manual_seed(5))
    assert stats.ks_2samp(x, stream.sample().numpy()).pvalue > 1e-3


def test_pmf_closed_form_matches_the_survival_function():
    """P(M = k) = e^{-k/b} ((2 + k/b) sinh d - d cosh d), d = 1/(2b), is the difference of the
    survival function P(|X| >= k - 1/2) = e^{-(k-1/2)/b} (2 + (k-1/2)/b) / 2 at 256 bits, and the
    probabilities of |K| sum to 1."""
    for b in SCALES[:2]:
        t = E.RoundedNoiseSampler("two_laplace", b)._t
        for k in (1, 2, 17, int(b) // 3, int(b), 7 * int(b), 40 * int(b)):
            diff = t.tail_mass(k) - t.tail_mass(k + 1)
            assert abs(t.pmf_m(k) / diff - 1) < mpmath.mpf(2) ** -200
        assert t.pmf_m(0) + t.tail_mass(1) == 1
        ctx = t.ctx
        u = (ctx.mpf(1) - ctx.mpf(0.5)) / ctx.mpf(b)
        assert abs(t.tail_mass(1) - ctx.exp(-u) * (2 + u) / 2) < mpmath.mpf(2) ** -240


# --------------------------------------------------------------------------- the margin and its proof

def test_exact_ratio_is_the_density_ratio_with_a_shifted_scale():
    """The derivation of ``two_laplace_margin``: P(M = k)/P(M = r) = e^{-(k-r)/b} (cb + k)/(cb + r),
    c = 2 - d coth d, so the exact ratio over the density ratio D is 1 + e (k - r)/((b + k)(b + r - e)),
    e = b (d coth d - 1) in [0, 1/(12 b)]: within [D, D (1 + 1/(12 b^2))]."""
    ctx = mpmath.MPContext()
    ctx.prec = 256
    for x in (1e-9, 1e-3, 0.1, 0.5, 1.0, 3.0, 30.0):  # x coth x <= 1 + x^2/3
        x = ctx.mpf(x)
        assert 1 <= x / ctx.tanh(x) <= 1 + x * x / 3
    for b in SCALES:
        s = E.RoundedNoiseSampler("two_laplace", b)
        t = s._t
        B = ctx.mpf(b)
        d = 1 / (2 * B)
        e = B * (d / ctx.tanh(d) - 1)
        assert 0 <= e <= 1 / (12 * B)
        worst = ctx.mpf(0)
        for c in (0, 1, 2, t.num_cells // 2, t.num_cells - 1):
            r = t.reference(c)
            for k in (r, r + 1, c * t.w + t.w // 2, c * t.w + t.w - 1):
                exact = t.accept_probability(k)
                density = ctx.exp(-(ctx.mpf(k) - r) / B) * (B + k) / (B + r)
                shifted = ctx.exp(-(ctx.mpf(k) - r) / B) * (B - e + k) / (B - e + r)
                assert abs(exact / shifted - 1) < ctx.mpf(2) ** -200
                excess = exact / density - 1
                assert abs(excess - e * (k - r) / ((B + k) * (B + r - e))) < ctx.mpf(2) ** -190
                assert 0 <= excess <= 1 / (12 * B * B)
                worst = max(worst, excess)
        assert worst > 1 / (12 * B * B) / 1000  # the deviation is real: about w / (12 b^3)
        assert t.margin == 2.0 ** -44 + 1.0 / (12.0 * b * b)


def _fast_path_within_margin(s: E.RoundedNoiseSampler, ratio_fn=None) -> list:
    """The (k, float ratio, exact ratio) triples where the float ratio misses the margin."""
    t = s._t
    values, cells = _cases(s, count=60)
    ratio = (ratio_fn or s._ratio)(values, cells)
    missed = []
    for ki, r in zip(values.tolist(), ratio.tolist()):
        exact = float(t.accept_probability(ki))
        assert 0 < exact <= 1
        if abs(r - exact) > exact * t.margin:
            missed.append((ki, r, exact))
    return missed


@pytest.mark.parametrize("b", SCALES)
def test_float_fast_path_stays_inside_its_margin(b):
    """The float64 acceptance ratio is within the proven margin of the exact (256-bit) one, for
    values across every part of the table, cell 0 and value 0 included."""
    assert _fast_path_within_margin(E.RoundedNoiseSampler("two_laplace", b)) == []


def test_margin_test_catches_a_wrong_float_formula():
    """The margin is tight enough to matter: float formulas that are wrong by far less than a
    percent fall outside it (so the test above would catch such a mutation)."""
    s = E.RoundedNoiseSampler("two_laplace", SCALES[0])
    t = s._t

    def mutated(kind):
        def ratio(value, cell):
            k = value.abs()
            kf = k.to(torch.float64)
            ref = t.ref.index_select(0, cell).to(torch.float64)
            b = t.scale
            if kind == "laplace":  # the polynomial factor forgotten: the one-Laplace ratio
                out = torch.exp((ref - kf) / b)
            elif kind == "scale":  # the exponent's scale off by 2^-30
                out = torch.exp((ref - kf) / (b * (1 + 2.0 ** -30))) * (b + kf) / (b + ref)
            else:  # the polynomial factor shifted by one grid step
                out = torch.exp((ref - kf) / b) * (b + kf + 1) / (b + ref + 1)
            return torch.where(k == 0, torch.full_like(out, t.zero_ratio), out)
        return ratio

    for kind in ("laplace", "scale", "shift"):
        assert len(_fast_path_within_margin(s, mutated(kind))) > 10, kind


def test_cheap_thresholds_never_exceed_a_cell_s_smallest_probability():
    """A word below a cell's integer threshold is accepted without looking at its value: the
    threshold must lie below every acceptance probability of the cell (its far end, and value 0
    in cell 0), times 2^accept_bits."""
    for b in SCALES[:2]:
        t = E.RoundedNoiseSampler("two_laplace", b)._t
        scale = 2 ** t.accept_bits
        cells = sorted({0, 1, 2, t.num_cells - 1, *np.random.default_rng(1).integers(0, t.num_cells, 40).tolist()})
        for c in cells:
            far = t.accept_probability(c * t.w + t.w - 1)
            low = min(far, t.accept_probability(0)) if c == 0 else far
            for cell, end in ((c, c * t.w + t.w - 1), (t.num_cells + c, -(c * t.w + t.w - 1))):  # both signs
                assert t.cell_of(end) == cell
                assert int(t.cheap[cell]) <= low * scale, cell
                assert int(t.cheap[cell]) >= low * scale * (1 - 2.0 ** -40) - 2  # and not needlessly low
        # the tail slots and the padding: always flagged (a tail value is drawn exactly)
        assert t.cheap[2 * t.num_cells:].eq(0).all()


# ----------------------------------------------------------------------- the exact paths, the tail

def test_exact_paths_give_the_same_law(monkeypatch):
    """Forcing alias ties (3 split bits) and the 256-bit acceptance test (margin 0.3): still the law."""
    s = E.RoundedNoiseSampler("two_laplace", SCALES[1])
    calls = {"n": 0}
    real = E.exact_bernoulli

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(sampler_module, "exact_bernoulli", counting)
    x = _force(s, split_bits=3, margin=0.3).sample(6_000, _source(3))
    assert calls["n"] > 1_000  # the exact comparisons did run
    assert _chi_square_p(s, x, [0.25, 0.5, 1.0, 2.0, 3.0, 5.0]) > 1e-4


def test_tail_path():
    """The tail beyond the table (55 b, probability 3.7e-23) is sampled exactly from the conditional
    law: P(M >= x0 + t | M >= x0) = e^{-t/b} (2 + (x0 + t)/b) / (2 + x0/b), mean excess about
    b (1 + 1/57)."""
    s = E.RoundedNoiseSampler("two_laplace", SCALES[0])
    t = s._t
    start = t.num_cells * t.w
    assert start >= 55 * s.scale and float(t.tail_mass(start)) < 4e-23
    draws = [s._tail_sample(_source(i), negative=i % 2 == 1) for i in range(80)]
    mags = np.abs(draws)
    assert (mags >= start).all()
    excess = (mags - start) / s.scale
    assert 0.7 < excess.mean() < 1.4
    assert {np.sign(d) for d in draws} == {-1, 1}


def test_tail_cell_is_replaced(monkeypatch):
    s = E.RoundedNoiseSampler("two_laplace", SCALES[0])
    t = s._t
    forced = _force(s)
    forced._t.split = [0] * len(t.split)  # every slot goes to its alias ...
    forced._t.alias = [t.neg_tail + 1] * len(t.split)  # ... the negative tail (slot c + 1 holds cell c)
    forced._t._build_fast()
    monkeypatch.setattr(E.RoundedNoiseSampler, "_tail_sample", lambda self, src, negative: -54321 if negative else 0)
    assert (forced.sample(10, _source()) == -54321).all()


def test_scale_range_kind_and_reproducibility():
    with pytest.raises(ValueError, match="2\\^20"):
        E.RoundedNoiseSampler("two_laplace", 1000.0)
    with pytest.raises(ValueError, match="two_laplace"):
        E.RoundedNoiseSampler("two-laplace", 2.0 ** 21)
    a = E.rounded_two_laplace(3000, 2.0 ** 22, _source(7))
    b = E.RoundedNoiseSampler("two_laplace", 2.0 ** 22).sample(3000, _source(7))
    assert torch.equal(a, b) and not torch.equal(a, E.rounded_two_laplace(3000, 2.0 ** 22, _source(8)))
    # the other kinds are untouched by the new one
    assert E.RoundedNoiseSampler("laplace", 2.0 ** 22)._t.margin == 2.0 ** -44
