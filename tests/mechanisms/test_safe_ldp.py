"""Floating-point-safe local randomisers (issue 14): the square wave / HDS, PM, MB and LP on
power-of-two grids, exactly sampled.

Exact likelihood ratios from the pmf formulas (256-bit), the samplers against their pmf
(chi-square on coarse grids), every release a multiple of the stated granularity, the discrete
moments (closed forms = sums over the exact pmf = empirical), secure mode, seeded
reproducibility, the float sampler still reachable, and a floating-point distinguisher: with the
float sampler a large share of the releases under x = 0.3 is impossible under x = -0.7, with the
safe one none is."""
import math
import os

import mpmath
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant
from pyg_private.accounting.errors import UntrackedPrivacyWarning
from pyg_private.mechanisms import randomness
from pyg_private.sampling.words import chacha20_openssl
from pyg_private.mechanisms.exact_integer_noise import _table
from pyg_private.mechanisms.ldp_baselines import (
    laplace_ldp_granularity,
    laplace_ldp_scale,
    multibit_exact_probabilities,
    piecewise_grid,
    piecewise_moments,
    piecewise_params,
    sample_laplace_ldp,
    sample_multibit,
    sample_piecewise,
)
from pyg_private.mechanisms.randomness import RandomSource
from pyg_private.mechanisms.square_wave import (
    ExactTrial,
    _uniform_below,
    hds_coefficient,
    hds_moments,
    hds_perturb,
    rescale_on_grid,
    rescaled_granularity,
    sample_k_subsets,
    sample_square_wave,
    square_wave_grid,
    square_wave_moments,
    square_wave_params,
)
from pyg_private.transforms import (
    HDSFeaturePerturb,
    LaplaceFeaturePerturb,
    MultiBitFeaturePerturb,
    PiecewiseFeaturePerturb,
)

from moment_checks import mean_var_checks

pytestmark = pytest.mark.filterwarnings("ignore", category=UntrackedPrivacyWarning)

F64 = torch.float64


def _exp(eps):
    ctx = mpmath.MPContext()
    ctx.prec = 400
    return ctx.exp(ctx.mpf(eps)), ctx


def _on_grid(y: torch.Tensor, g: float, odd: bool = False) -> torch.Tensor:
    """Finite multiples of the power of two ``g`` (odd multiples if ``odd``); fmod is exact."""
    ok = torch.isfinite(y) & (torch.fmod(y, g) == 0)
    if odd:
        ok &= torch.fmod(y, 2 * g) != 0
    return ok


def _chi2_ok(counts: np.ndarray, probs: np.ndarray) -> bool:
    expected = probs * counts.sum()
    df = len(counts) - 1
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    return chi2 < df + 6 * math.sqrt(2 * df) + 1


# ------------------------------------------------------------------------------- exact ratios
@pytest.mark.parametrize("eps", [0.05, 1.0, 3.0, 200.0])
@pytest.mark.parametrize("kind", ["square-wave", "piecewise"])
def test_two_level_grids_have_the_exact_ratio_bound(kind, eps):
    """The pmf under the two extreme inputs (window at either end) and under x = 0.3: same support,
    every ratio 1 or E, and E < e^eps in 400-bit arithmetic (also with eps shared by k = 3)."""
    make = square_wave_grid if kind == "square-wave" else piecewise_grid
    e, ctx = _exp(eps)
    total = 3 * eps  # a node budget shared by k = 3 coordinates: the three ratios compose to < e^total
    e_total, _ = _exp(total)
    e_part, _ = _exp(total / 3)  # the per-coordinate float the event records
    for grid, bound, k in ((make(eps, granularity=2.0 ** -4 if kind == "square-wave" else None), e, 1),
                           (make(total, 3), min(e_part, e_total ** (ctx.mpf(1) / 3)), 3)):
        p, q = grid.levels()
        assert p > 0 and q > 0 and abs(grid.window * p + grid.far * q - 1) < ctx.mpf(2) ** -200
        ratio = ctx.mpf(p) / ctx.mpf(q)
        assert ratio < bound and ctx.mpf(grid.ratio) < bound and ratio ** k < e_total
        assert ratio > bound * (1 - ctx.mpf(2) ** -150)  # and not needlessly below
        starts = grid.start(torch.tensor([-1.0, 1.0, 0.3], dtype=F64))
        assert 0 <= int(starts[0]) <= int(starts[2]) <= int(starts[1]) <= grid.far
        if kind == "square-wave":  # the window's two extreme positions are reached
            assert int(starts[0]) == 0 and int(starts[1]) == grid.far
    grid = make(eps, granularity=2.0 ** -4) if kind == "square-wave" else make(eps, granularity=2.0 ** -3)
    if grid.total <= 4096:  # the whole pmf, output by output
        rows = [grid.exact_pmf(x) for x in (-1.0, 1.0, 0.3)]
        for a in rows:
            assert abs(ctx.fsum(a) - 1) < ctx.mpf(2) ** -200
            for b in rows:
                worst = max(ctx.mpf(u) / ctx.mpf(v) for u, v in zip(a, b))
                assert worst < e and min(a) > 0


def test_square_wave_grid_matches_the_paper_constants():
    for eps in (0.05, 1.0, 5.0):
        prm, grid = square_wave_params(eps), square_wave_grid(eps)
        assert grid.step <= 2.0 ** -22 and grid.window // 2 >= 2 ** 20
        assert grid.kappa == pytest.approx(prm.c1, rel=1e-6)
        assert grid.second_moment == pytest.approx(prm.second_moment, rel=1e-6)
        assert grid.high <= 1 + prm.b + grid.step / 2 and grid.granularity == grid.step / 2
        assert hds_coefficient(eps * 4, 4, 10) == pytest.approx(0.4 * grid.kappa, rel=1e-12)
        assert hds_coefficient(eps * 4, 4, 10, sampler="float") == pytest.approx(0.4 * prm.c1, rel=1e-14)
    for eps in (0.05, 1.0, 5.0):
        prm, grid = piecewise_params(eps), piecewise_grid(eps)
        assert grid.window >= 2 ** 22 and abs(grid.high - prm.s) <= grid.step
        assert grid.kappa == pytest.approx(2 / (prm.s + 1), rel=1e-6)


@pytest.mark.parametrize("eps", [0.1, 1.0, 30.0, 700.0])
def test_multibit_exact_ratio(eps):
    e, ctx = _exp(eps)
    xs = [-1.0, -0.25, 0.0, 0.3, 1.0]
    probs = [[ctx.mpf(p) for p in multibit_exact_probabilities(x, eps)] for x in xs]
    for plus, minus in probs:
        assert abs(plus + minus - 1) < ctx.mpf(2) ** -250
    # affine in x: the continuous (1 + x tanh(eps/2)) / 2, with E in place of e^eps
    assert float(probs[3][0]) == pytest.approx((1 + 0.3 * math.tanh(eps / 2)) / 2, rel=1e-12)
    for a in probs:
        for b in probs:
            assert a[0] / b[0] < e and a[1] / b[1] < e
    assert probs[-1][0] / probs[0][0] > e * (1 - ctx.mpf(2) ** -150)


def test_laplace_ldp_rounded_noise_ratio():
    """LP safe: the rounded input is in [-1, 1] (no inflation) and the noise is the rounded
    Laplace of scale b/g: its pmf at k and k + 2/g (x = -1 vs x = +1, d = 1) differ by at most
    e^eps (checked on the exact 256-bit pmf at the window's edges and far out)."""
    eps, d = 2.0, 1
    g = laplace_ldp_granularity(eps, d)
    steps = laplace_ldp_scale(eps, d) / g
    assert 2.0 ** 20 <= steps <= 2.0 ** 46 and g <= 2.0 ** -20
    table = _table("laplace", steps)
    shift = round(2 / g)
    e, ctx = _exp(eps)

    def pmf(k):  # P(K = k), K symmetric
        return ctx.mpf(table.pmf_m(abs(k))) / (1 if k == 0 else 2)

    for k in [-shift - 3, -shift, -shift // 2, -1, 0, 1, 7, shift, 10 * shift]:
        r = pmf(k) / pmf(k + shift)
        assert 1 / e <= r * (1 + ctx.mpf(2) ** -200) and r <= e * (1 + ctx.mpf(2) ** -200)


# ----------------------------------------------------------------------- samplers vs the pmf
def _counts(values: torch.Tensor, grid) -> np.ndarray:
    idx = torch.round(values / grid.step + (grid.total - 1) / 2).to(torch.int64)
    assert torch.equal(grid.to_values(idx), values)  # every output is a grid point
    return torch.bincount(idx, minlength=grid.total).numpy()


@pytest.mark.parametrize("x", [-1.0, 0.3, 1.0])
def test_square_wave_sampler_matches_its_pmf(x):
    grid = square_wave_grid(1.0, granularity=2.0 ** -4)  # 16 far + 8 window points
    n = 120_000
    y = sample_square_wave(torch.full((n,), x, dtype=F64), 1.0, granularity=2.0 ** -4,
                           generator=torch.Generator().manual_seed(1))
    counts = _counts(y, grid)
    probs = np.array([float(p) for p in grid.exact_pmf(x)])
    assert _chi2_ok(counts, probs)


@pytest.mark.parametrize("x", [-1.0, 0.3, 1.0])
def test_piecewise_sampler_matches_its_pmf(x):
    grid = piecewise_grid(1.0, granularity=2.0 ** -3)
    assert 20 <= grid.total <= 80
    n = 120_000
    y = sample_piecewise(torch.full((n,), x, dtype=F64), 1.0, granularity=2.0 ** -3,
                         generator=torch.Generator().manual_seed(2))
    probs = np.array([float(p) for p in grid.exact_pmf(x)])
    assert _chi2_ok(_counts(y, grid), probs)


def test_multibit_sampler_matches_its_probabilities():
    n = 200_000
    for eps, x in [(1.0, -0.7), (1.0, 0.3), (0.2, 1.0), (50.0, 0.5)]:
        y = sample_multibit(torch.full((n,), x, dtype=F64), eps, generator=torch.Generator().manual_seed(3))
        assert set(y.unique().tolist()) <= {-1.0, 1.0}
        p = float(multibit_exact_probabilities(x, eps)[0])
        assert abs(float((y > 0).double().mean()) - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize("high", [1, 2, 3, 7, 480, 2 ** 20 + 1, 2 ** 31 - 1, 3 * 2 ** 40])
def test_uniform_below_is_uniform(high):
    source = RandomSource("cpu", generator=torch.Generator().manual_seed(4))
    word = source.words(200_000)
    value, bad = _uniform_below(word, high)
    if bad is not None:
        value = value[~bad]
    assert int(value.min()) >= 0 and int(value.max()) < high
    bins = min(high, 64)
    counts = torch.bincount(value * bins // high, minlength=bins).numpy()  # equal-width buckets
    widths = np.array([len(range(-(-b * high // bins), -(-(b + 1) * high // bins))) for b in range(bins)])
    if bins > 1:
        assert _chi2_ok(counts, widths / widths.sum())


class _ConstantWords(RandomSource):
    def __init__(self, value):
        super().__init__("cpu", generator=torch.Generator())
        self.value = value

    def words(self, n):
        return torch.full((int(n),), self.value, dtype=torch.int64)


def test_tiny_probabilities_keep_their_relative_precision():
    """p = 0.75 * 2^-300 is below exact_discrete.bernoulli's 252 bits: the trial splits it into
    300 fair bits all 0 and a Bernoulli(0.75); with all-zero words it succeeds, with words that
    have a top bit set it fails (a plain 252-bit comparison could not succeed at all)."""
    p = mpmath.mpf(0.75) * mpmath.mpf(2) ** -300
    trial = ExactTrial(p)
    assert trial.small and trial.zeros == 300
    assert bool(trial.sample(5, _ConstantWords(0)).all())
    assert not bool(trial.sample(5, _ConstantWords(1 << 62)).any())
    assert not bool(trial.sample(5, _ConstantWords(1)).any())  # a 1 among the first 63 bits
    grid = square_wave_grid(700.0)  # far mass e^-700-ish: the far branch is the trial's success
    trial, rare_is_near = grid._trial
    assert not rare_is_near and trial.small and trial.p > 0


# ---------------------------------------------------------------------------------- the grid
def test_every_release_is_a_multiple_of_the_granularity():
    gen = torch.Generator().manual_seed(5)
    x = torch.rand(2000, dtype=F64, generator=gen) * 2 - 1
    for eps in (0.05, 1.0, 8.0):
        grid = square_wave_grid(eps)
        y = sample_square_wave(x, eps, generator=gen)
        assert bool(_on_grid(y, grid.granularity, odd=True).all())
        assert float(y.abs().max()) <= grid.high
        y32 = y.to(torch.float32).to(F64)  # the transform's float32 output: still on the grid
        assert bool(_on_grid(y32, grid.granularity).all())
        if eps <= 1.0:  # b >= 1/4: the step is 2^-22 and float32 holds every output exactly
            assert grid.granularity == 2.0 ** -23 and torch.equal(y32, y)
        grid = piecewise_grid(eps)
        y = sample_piecewise(x, eps, generator=gen)
        assert bool(_on_grid(y, grid.granularity, odd=True).all()) and float(y.abs().max()) <= grid.high
    g = laplace_ldp_granularity(1.0, 4)
    y = sample_laplace_ldp(x.view(-1, 4), 1.0, generator=gen)
    assert bool(_on_grid(y, g).all())
    # rescaled values: a grid 2^20 times finer than their spacing, distinct values stay distinct
    assert rescaled_granularity(2.0 ** -23, 8.0) == 2.0 ** -20
    odd = torch.tensor([-3, -1, 1, 3], dtype=F64) * 2.0 ** -23
    vals, g_out = rescale_on_grid(odd.clone(), 1 / 0.3, 2.0 ** -23)
    assert g_out == 2.0 ** (math.floor(math.log2(2.0 ** -23 / 0.3)) - 20) and bool(_on_grid(vals, g_out).all())
    assert vals.unique().numel() == 4 and torch.allclose(vals, odd / 0.3, rtol=0, atol=g_out)


@pytest.mark.parametrize("make", [
    lambda **kw: HDSFeaturePerturb(1.0, 3, (0.0, 1.0), **kw),
    lambda **kw: HDSFeaturePerturb(1.0, 3, (0.0, 1.0), unbiased=True, **kw),
    lambda **kw: PiecewiseFeaturePerturb(2.0, 3, (0.0, 1.0), **kw),
    lambda **kw: MultiBitFeaturePerturb(2.0, 3, (0.0, 1.0), **kw),
    lambda **kw: LaplaceFeaturePerturb(2.0, (0.0, 1.0), **kw),
])
def test_transforms_release_multiples_of_their_granularity(make):
    n, d = 400, 10
    x = torch.rand(n, d, generator=torch.Generator().manual_seed(6))
    acct = PrivacyAccountant()
    t = make(accountant=acct, generator=torch.Generator().manual_seed(7))
    assert t.granularity is None and t.sampler == "safe"
    out = t(Data(x=x.clone(), num_nodes=n))
    g = t.granularity
    assert g is not None and math.frexp(g)[0] == 0.5
    assert out.x.dtype == torch.float32 and bool(_on_grid(out.x.to(F64), g).all())
    assert out.ldp["granularity"] == g and out.ldp["sampler"] == "safe"
    ev = acct.events[0]
    assert ev.params["sampler"] == "safe" and ev.params["granularity"] == g
    if not isinstance(t, LaplaceFeaturePerturb):  # the sampled coordinates are never 0
        assert bool(((out.x != 0).sum(1) == t._num_coordinates(d)).all())
        assert ev.pld == ("pure", ev.params["epsilon"] / ev.params["compositions"], ev.params["compositions"])
    # the float sampler: no grid, the same event otherwise
    acct2 = PrivacyAccountant()
    f = make(accountant=acct2, generator=torch.Generator().manual_seed(7), sampler="float")
    f(Data(x=x.clone(), num_nodes=n))
    assert f.granularity is None and acct2.events[0].params["sampler"] == "float"
    assert acct2.events[0].rdp == ev.rdp and acct2.events[0].pld == ev.pld


# -------------------------------------------------------------------------------- the moments
@pytest.mark.parametrize("kind", ["square-wave", "piecewise"])
def test_closed_form_moments_equal_the_sums_over_the_exact_pmf(kind):
    grid = square_wave_grid(1.0, granularity=2.0 ** -4) if kind == "square-wave" else \
        piecewise_grid(1.0, granularity=2.0 ** -3)
    values = [mpmath.mpf(v) for v in grid.values().tolist()]
    for x in (-1.0, -0.4, 0.0, 0.3, 1.0):
        pmf = grid.exact_pmf(x)
        m1 = mpmath.fsum(p * v for p, v in zip(pmf, values))
        m2 = mpmath.fsum(p * v * v for p, v in zip(pmf, values))
        assert float(grid.mean(x)) == pytest.approx(float(m1), abs=1e-14)
        assert float(grid.variance(x)) == pytest.approx(float(m2 - m1 * m1), rel=1e-12)


def test_discrete_moments_match_the_empirical_ones():
    """On a coarse grid the discrete moments differ visibly from the paper's: the sampler follows
    the discrete ones (square wave, HDS unbiased, PM)."""
    n = 200_000
    gen = torch.Generator().manual_seed(8)
    for x in (-1.0, 0.3, 0.77):
        y = sample_square_wave(torch.full((n,), x, dtype=F64), 1.0, granularity=2.0 ** -3, generator=gen)
        mean, var = square_wave_moments(x, 1.0, granularity=2.0 ** -3)
        mean_var_checks(y, float(mean), float(var))
        fmean, fvar = square_wave_moments(x, 1.0, sampler="float")
        assert abs(float(var) - float(fvar)) > 0.01  # the grid law is another law
        y = sample_piecewise(torch.full((n,), x, dtype=F64), 1.0, granularity=2.0 ** -3, generator=gen)
        mean, var = piecewise_moments(x, 1.0, granularity=2.0 ** -3)
        mean_var_checks(y, float(mean), float(var))
    # HDS with the default grid: Lemma 3.2 with the grid law's C and second moment
    d, k, eps, rows = 6, 2, 1.0, 40_000
    row = torch.tensor([-1.0, -0.5, 0.0, 0.3, 0.8, 1.0], dtype=F64)
    for unbiased in (False, True):
        out = hds_perturb(row.expand(rows, d), eps, k, unbiased=unbiased, generator=gen)
        mean, var = hds_moments(row, eps, k, d, unbiased=unbiased)
        for j in range(d):
            mean_var_checks(out[:, j], float(mean[j]), float(var[j]))


# ------------------------------------------------------------------ sources, seeds, float path
def test_secure_mode(monkeypatch):
    calls = []
    real = os.urandom

    def counting(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(chacha20_openssl.os, "urandom", counting)
    filled = []  # bytes of keystream (secure words come from a ChaCha20 stream keyed from os.urandom)
    real_fill = chacha20_openssl._ChaCha20Stream.fill
    monkeypatch.setattr(chacha20_openssl._ChaCha20Stream, "fill", lambda self, out: (filled.append(out.nbytes),
                                                                               real_fill(self, out))[1])
    x = torch.linspace(-1, 1, 50, dtype=F64)
    y = sample_square_wave(x, 1.0, secure_mode=True)
    assert calls and bool(_on_grid(y, square_wave_grid(1.0).granularity).all())
    with pytest.raises(ValueError, match="seeded"):
        sample_square_wave(x, 1.0, secure_mode=True, generator=torch.Generator())
    with pytest.raises(ValueError, match="safe sampler"):
        sample_piecewise(x, 1.0, secure_mode=True, sampler="float")
    with pytest.raises(ValueError, match="secure_mode"):
        HDSFeaturePerturb(1.0, 2, secure_mode=True, sampler="float")
    with pytest.raises(ValueError, match="seeded"):
        MultiBitFeaturePerturb(1.0, 1, secure_mode=True, generator=torch.Generator())
    with pytest.raises(TypeError, match="secure_mode"):
        LaplaceFeaturePerturb(1.0, secure_mode="yes")
    # the transform, by its own setting and by the process-wide one (read at every call)
    data = Data(x=torch.rand(30, 5), num_nodes=30)
    for kwargs in ({"secure_mode": True}, {}):
        calls.clear()
        filled.clear()
        t = HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=PrivacyAccountant(), **kwargs)
        with randomness.secure_mode(not kwargs):
            t(data.clone())
        assert calls  # keys from the OS
        assert sum(filled) + sum(calls) >= 8 * 30 * 2 * 3  # subsets and two words per sampled value
    # a seeded generator with the process-wide secure mode: refused before anything is charged
    acct = PrivacyAccountant()
    t = HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct, generator=torch.Generator())
    with randomness.secure_mode(), pytest.raises(ValueError, match="seeded"):
        t(data.clone())
    assert len(acct) == 0


def test_a_seeded_generator_reproduces():
    x = torch.rand(300, 6, dtype=F64) * 2 - 1
    z = x.view(-1)
    for fn in (lambda g: sample_square_wave(z, 0.7, generator=g),
               lambda g: sample_piecewise(z, 0.7, generator=g),
               lambda g: sample_multibit(z, 0.7, generator=g),
               lambda g: sample_laplace_ldp(x, 3.0, generator=g),
               lambda g: hds_perturb(x, 2.0, 3, generator=g, unbiased=True),
               lambda g: sample_k_subsets(300, 6, 3, generator=g)):
        a, b = fn(torch.Generator().manual_seed(9)), fn(torch.Generator().manual_seed(9))
        assert torch.equal(a, b) and not torch.equal(a, fn(torch.Generator().manual_seed(10)))
        assert not torch.equal(a, fn(None))  # unseeded: fresh OS-seeded words
    data = Data(x=torch.rand(40, 8), num_nodes=40)
    outs = [PiecewiseFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=PrivacyAccountant(),
                                    generator=torch.Generator().manual_seed(11))(data.clone()).x for _ in range(2)]
    assert torch.equal(*outs)


def _old_float_square_wave(x, eps, gen):
    """The float sampler as it was before issue 14 (one torch.rand per value)."""
    prm = square_wave_params(eps)
    eta = torch.rand(x.shape, dtype=F64, generator=gen)
    near = eta < prm.near_probability
    far_p = 1.0 / (prm.be + 1.0)
    w = torch.where(near, eta * (1.0 / prm.near_probability), (eta - prm.near_probability) * (1.0 / far_p))
    far = w * 2.0
    shift = (far < x + 1.0).to(F64).mul_(-2.0 * prm.b).add_(prm.b)
    far.sub_(1.0).add_(shift)
    out = torch.where(near, w.mul_(2.0 * prm.b).sub_(prm.b).add_(x), far)
    return out.clamp_(prm.low, prm.high)


def test_the_float_sampler_is_still_reachable():
    x = torch.rand(5000, dtype=F64) * 2 - 1
    y = sample_square_wave(x, 1.0, generator=torch.Generator().manual_seed(12), sampler="float")
    old = _old_float_square_wave(x, 1.0, torch.Generator().manual_seed(12))
    assert torch.equal(y, old)
    assert not bool(_on_grid(y, 2.0 ** -40).all())  # continuous: off any coarse grid
    for fn in (lambda s: sample_piecewise(x, 1.0, generator=torch.Generator().manual_seed(1), sampler=s),
               lambda s: sample_multibit(x, 1.0, generator=torch.Generator().manual_seed(1), sampler=s),
               lambda s: sample_k_subsets(100, 9, 4, generator=torch.Generator().manual_seed(1), sampler=s)):
        assert not torch.equal(fn("float"), fn("safe"))
    assert square_wave_moments(0.3, 1.0, sampler="float")[0] == pytest.approx(0.3 * square_wave_params(1.0).c1)
    with pytest.raises(ValueError, match="sampler"):
        sample_square_wave(x, 1.0, sampler="exact")
    with pytest.raises(ValueError, match="granularity"):
        sample_square_wave(x, 1.0, sampler="float", granularity=2.0 ** -10)
    with pytest.raises(ValueError, match="at most 1/2"):
        square_wave_grid(1.0, granularity=1.0)
    with pytest.raises(ValueError, match="too fine"):
        square_wave_grid(1.0, granularity=2.0 ** -60)


# ------------------------------------------------------------- the floating-point distinguisher
def _float_square_wave_possible(y: torch.Tensor, x: float, eps: float) -> torch.Tensor:
    """Whether each float64 ``y`` can be an output of ``sample_square_wave(x, eps, sampler="float")``.
    A superset model (an impossible verdict is a proof): the window branch is
    fl(fl(fl(w * 2b) - b) + x), the far branch fl(fl(2w - 1) + s) with s = -b or +b, for *any*
    float w in [0, 1) (the sampler's w = fl(eta / P) or fl((eta - P) * (1/(1-P))) is one), then
    clamped to [-1-b, 1+b]. Each branch is non-decreasing in w, so bisecting over the bit
    patterns of w (monotone for non-negative floats) finds the first w reaching y exactly."""
    prm = square_wave_params(eps)
    b = prm.b
    branches = [lambda w: w * (2.0 * b) - b + x, lambda w: w * 2.0 - 1.0 + (-b), lambda w: w * 2.0 - 1.0 + b]
    one = torch.tensor(1.0, dtype=F64).view(torch.int64)
    possible = (y == prm.low) | (y == prm.high)  # reached by clamping
    for f in branches:
        def value(key):
            return f(key.view(F64))
        lo = torch.full_like(y, -1, dtype=torch.int64)  # f(w_lo) < y by convention
        hi = torch.full_like(y, int(one) - 1, dtype=torch.int64)  # the largest float below 1
        reach = value(hi) >= y
        while True:
            active = hi - lo > 1
            if not bool(active.any()):
                break
            mid = lo + (hi - lo) // 2
            up = value(mid.clamp(min=0)) >= y
            hi = torch.where(active & up, mid, hi)
            lo = torch.where(active & ~up, mid, lo)
        possible |= reach & (value(hi) == y)
    return possible


def test_floating_point_distinguisher():
    """x = 0.3 against x = -0.7 at eps = 1: with the float sampler a large share of the releases
    under 0.3 cannot come from -0.7 (they identify the input with certainty); with the safe sampler
    every release is a grid point of the common support, possible under both (its pmf gives every
    grid point of [low, high] probability >= q_g > 0 under every input)."""
    eps, a, b = 1.0, 0.3, -0.7
    n_float = 100_000
    gen = torch.Generator().manual_seed(13)
    y = sample_square_wave(torch.full((n_float,), a, dtype=F64), eps, generator=gen, sampler="float")
    assert bool(_float_square_wave_possible(y, a, eps).all())  # the model contains the sampler's outputs
    impossible = ~_float_square_wave_possible(y, b, eps)
    share = float(impossible.double().mean())
    assert share > 0.2, share  # about half measured
    # the safe sampler: 10^6 releases under x = 0.3
    n = 1_000_000
    grid = square_wave_grid(eps)
    y = sample_square_wave(torch.full((n,), a, dtype=F64), eps, generator=gen)
    on_support = _on_grid(y, grid.granularity, odd=True) & (y.abs() <= grid.high)
    assert bool(on_support.all())
    p, q = grid.levels()
    assert min(p, q) > 0  # every support point has positive probability under x = -0.7 as well
    # the same through the transform: HDS releases under 0.3 and -0.7 share their support
    acct = PrivacyAccountant()
    t = HDSFeaturePerturb(eps, 1, accountant=acct, generator=torch.Generator().manual_seed(14))
    out = t(Data(x=torch.tensor([[a], [b]] * 5000, dtype=torch.float32), num_nodes=10_000)).x.to(F64)
    lo, hi = t.output_range(1)
    assert bool((_on_grid(out, t.granularity, odd=True) & (out >= lo) & (out <= hi)).all())
