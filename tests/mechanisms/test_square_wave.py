"""Extended square wave and HDS (PrivGE, specs/privge.md §2): constants, moments, support,
density ratio, total variation, k-subset sampler. The authors' buggy variant (spec §2.7(1))
is implemented here only, to show that the statistical checks can fail."""
import math
from decimal import Decimal, getcontext

import numpy as np
import pytest
import torch

from pyg_private.mechanisms.square_wave import (
    MAX_COORDINATE_EPSILON,
    hds_coefficient,
    hds_moments,
    hds_perturb,
    sample_k_subsets,
    sample_square_wave,
    square_wave_b,
    square_wave_density,
    square_wave_moments,
    square_wave_params,
)

from moment_checks import mean_var_checks


def _reference(eps: float):
    """b, b e^eps and C_1 from the closed forms in 60-digit decimal arithmetic."""
    getcontext().prec = 60
    e = Decimal(eps)
    E = e.exp()
    b = (e * E - E + 1) / (E * (E - e - 1))
    return b, b * E, b * (E - 1) / (b * E + 1)


@pytest.mark.parametrize("eps", [1e-8, 1e-6, 1e-4, 2e-4, 1e-3, 9.99e-3, 1e-2, 1.01e-2, 0.05, 0.3, 1.0, 3.5, 5.0,
                                 30.0, 50.0, 200.0, 700.0])
def test_constants_match_high_precision(eps):
    prm = square_wave_params(eps)
    b, be, c1 = _reference(eps)
    for got, want in ((prm.b, b), (prm.be, be), (prm.c1, c1)):
        assert math.isfinite(got)
        assert abs(Decimal(got) - want) <= Decimal("1e-12") * abs(want)
    assert 0.0 < prm.b < 1.0
    # p/q = e^eps and the total mass 2bp + 2q = 1
    assert prm.p / prm.q == pytest.approx(math.exp(eps), rel=1e-12)
    assert 2 * prm.b * prm.p + 2 * prm.q == pytest.approx(1.0, rel=1e-12)
    assert prm.near_probability == pytest.approx(2 * prm.b * prm.p, rel=1e-12)


def test_b_has_no_nan_and_is_monotone_down_to_1e_8():
    grid = np.geomspace(1e-8, 700.0, 400)
    bs = np.array([square_wave_b(e) for e in grid])
    assert np.isfinite(bs).all() and (bs > 0).all() and (bs < 1).all()
    assert (np.diff(bs) < 0).all()
    assert square_wave_b(1e-8) == pytest.approx(1 - 2e-8 / 3, abs=1e-15)
    # the naive float32 formula the spec warns about really is NaN at 1e-4
    e = torch.tensor(1e-4, dtype=torch.float32)
    E = torch.exp(e)
    assert torch.isnan((e * E - E + 1) / (E * (E - e - 1))) or abs(float((e * E - E + 1) / (E * (E - e - 1)))
                                                                  - square_wave_b(1e-4)) > 1e-3


# spec §2.3 table: eps', b, C_1, worst-case raw variance, worst-case variance of output / C_1
SPEC_TABLE = [
    (0.01, 0.99336, 0.00498, 1.3245, 5.33e4),
    (0.1, 0.93550, 0.04837, 1.2485, 533.5),
    (1.0, 0.51217, 0.36788, 0.7465, 5.516),
    (3.0, 0.12743, 0.68326, 0.3543, 0.759),
    (3.5, 0.08842, 0.72291, 0.3116, 0.596),
    (5.0, 0.02813, 0.80135, 0.2294, 0.357),
]


@pytest.mark.parametrize("eps,b,c1,var_raw,var_unbiased", SPEC_TABLE)
def test_spec_table(eps, b, c1, var_raw, var_unbiased):
    prm = square_wave_params(eps)
    assert prm.b == pytest.approx(b, abs=6e-6)
    assert prm.c1 == pytest.approx(c1, abs=6e-6)
    _, var = square_wave_moments(torch.tensor([0.0, 0.5, 1.0]), eps)  # worst case at |x| = 1
    assert float(var.max()) == float(var[2]) == pytest.approx(var_raw, abs=6e-5)
    assert float(var[2]) / prm.c1**2 == pytest.approx(var_unbiased, rel=2e-3)


@pytest.mark.parametrize("eps", [0.05, 1.0, 4.0])
@pytest.mark.parametrize("x", [-1.0, -0.3, 0.6, 1.0])
def test_density_integrates_to_the_closed_form_moments(eps, x):
    prm = square_wave_params(eps)
    n = 200_000
    y = torch.linspace(prm.low, prm.high, n + 1, dtype=torch.float64)
    mid = (y[1:] + y[:-1]) / 2
    w = (prm.high - prm.low) / n
    f = square_wave_density(mid, x, eps)
    mean, var = square_wave_moments(x, eps)
    assert float((f * w).sum()) == pytest.approx(1.0, abs=2e-5)
    assert float((mid * f * w).sum()) == pytest.approx(float(mean), abs=2e-5)
    m2 = float((mid * mid * f * w).sum())
    assert m2 - float(mean) ** 2 == pytest.approx(float(var), abs=5e-5)
    assert float(square_wave_density(prm.high + 1e-9, x, eps)) == 0.0




@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_sampler_moments_and_support(eps):
    gen = torch.Generator().manual_seed(11)
    prm = square_wave_params(eps)
    xs = [-1.0, -0.3, 0.0, 0.6, 1.0]
    x = torch.tensor(xs, dtype=torch.float64).repeat_interleave(100_000)
    y = sample_square_wave(x, eps, generator=gen)
    assert y.dtype == torch.float64
    assert float(y.min()) >= prm.low and float(y.max()) <= prm.high
    for i, xi in enumerate(xs):
        mean, var = square_wave_moments(xi, eps)
        mean_var_checks(y[i * 100_000:(i + 1) * 100_000], float(mean), float(var))


def _buggy_square_wave(x: torch.Tensor, eps: float, gen: torch.Generator) -> torch.Tensor:
    """The authors' SquareWave as the spec describes it (§2.7(1)): regions drawn with the
    right probabilities, but after `x` is rebound the middle branch samples U[-b, b] and
    the right branch U[b, 1+b]. NOT LDP; test-only."""
    prm = square_wave_params(eps)
    u = torch.rand((2, *x.shape), dtype=torch.float64, generator=gen)
    left_mass = prm.q * (x + 1.0)
    mid_mass = prm.near_probability
    left = u[0] < left_mass
    mid = ~left & (u[0] < left_mass + mid_mass)
    y_left = -1.0 - prm.b + (x + 1.0) * u[1]
    y_mid = -prm.b + 2 * prm.b * u[1]
    y_right = prm.b + u[1]
    return torch.where(left, y_left, torch.where(mid, y_mid, y_right))


def _region_edges(b: float, per_region: int) -> np.ndarray:
    """Bin edges that never straddle the density's breakpoints for inputs -1 and +1."""
    return np.unique(np.concatenate([np.linspace(-1 - b, -1 + b, per_region + 1),
                                     np.linspace(-1 + b, 1 - b, per_region + 1),
                                     np.linspace(1 - b, 1 + b, per_region + 1)]))


def _log_ratio_excess(a: torch.Tensor, b: torch.Tensor, eps: float, edges: np.ndarray, z: float = 5.0) -> float:
    """max over bins of |log(count_a / count_b)| - eps - z * SE; > 0 is a violation of the
    e^eps density ratio (inf where one input never reaches a bin the other does)."""
    ca, _ = np.histogram(a.numpy(), bins=edges)
    cb, _ = np.histogram(b.numpy(), bins=edges)
    if ((ca == 0) != (cb == 0)).any() or ca.sum() < a.numel() or cb.sum() < b.numel():
        return math.inf
    both = (ca > 0) & (cb > 0)
    ca, cb = ca[both].astype(float), cb[both].astype(float)
    return float(np.max(np.abs(np.log(ca / cb)) - eps - z * np.sqrt(1 / ca + 1 / cb)))


def _total_variation(a: torch.Tensor, b: torch.Tensor, edges: np.ndarray) -> float:
    ca, _ = np.histogram(a.numpy(), bins=edges)
    cb, _ = np.histogram(b.numpy(), bins=edges)
    return 0.5 * float(np.abs(ca / a.numel() - cb / b.numel()).sum())


@pytest.mark.parametrize("eps", [0.05, 0.2, 1.0, 3.0])
def test_density_ratio_and_total_variation_for_inputs_minus_one_and_one(eps):
    n = 300_000
    prm = square_wave_params(eps)
    gen = torch.Generator().manual_seed(5)
    lo = torch.full((n,), -1.0, dtype=torch.float64)
    hi = torch.full((n,), 1.0, dtype=torch.float64)
    ya, yb = sample_square_wave(lo, eps, generator=gen), sample_square_wave(hi, eps, generator=gen)
    edges = _region_edges(prm.b, 6)
    assert _log_ratio_excess(ya, yb, eps, edges) <= 0.0
    # on the three regions the densities are constant: the histogram TV is the exact TV,
    # which equals C_1 for the square wave and must not exceed tanh(eps/2)
    regions = _region_edges(prm.b, 1)
    tol = 3.0 * math.sqrt(len(regions) / n)
    tv = _total_variation(ya, yb, regions)
    assert tv == pytest.approx(prm.c1, abs=tol)
    assert tv <= math.tanh(eps / 2) + tol
    # the authors' variant: the output for x=+1 never reaches most of (1-b, 1+b], so the
    # ratio test fails at every eps. Its exact TV is 2q (b >= 1/2) or q(1 + 2b) (b < 1/2):
    # ~0.5 only for small eps (the spec's "~0.5 for every eps'" is the small-eps limit),
    # above tanh(eps/2) there (0.05, 0.2) but not at eps = 1 or 3.
    ba, bb = _buggy_square_wave(lo, eps, gen), _buggy_square_wave(hi, eps, gen)
    assert _log_ratio_excess(ba, bb, eps, edges) == math.inf
    fine = np.unique(np.concatenate([np.linspace(-1 - prm.b, 1 + prm.b, 61), [-prm.b, prm.b, 1 - prm.b]]))
    tv_buggy = _total_variation(ba, bb, fine)
    assert tv_buggy == pytest.approx(2 * prm.q if prm.b >= 0.5 else prm.q * (1 + 2 * prm.b), abs=0.02)
    if eps <= 0.2:
        assert tv_buggy > math.tanh(eps / 2) + 3.0 * math.sqrt(60 / n)
    if eps == 0.05:  # spec §2.7: buggy means -0.48 at x=+1 and +0.73 at x=-1
        assert float(bb.mean()) == pytest.approx(-0.48, abs=0.01)
        assert float(ba.mean()) == pytest.approx(0.73, abs=0.01)


def test_density_ratio_check_catches_a_slightly_wrong_window():
    """A sampler whose window is 5% too wide (a subtler bug than §2.7) also fails."""
    eps, n = 1.0, 300_000
    prm = square_wave_params(eps)
    gen = torch.Generator().manual_seed(9)

    def wide(x):
        u = torch.rand((2, n), dtype=torch.float64, generator=gen)
        return torch.where(u[0] < prm.near_probability * 1.05, x + prm.b * (2 * u[1] - 1),
                           -1 - prm.b + 2 * u[1] + 2 * prm.b * (2 * u[1] >= x + 1))

    ya, yb = wide(torch.full((n,), -1.0, dtype=torch.float64)), wide(torch.full((n,), 1.0, dtype=torch.float64))
    assert _log_ratio_excess(ya, yb, eps, _region_edges(prm.b, 6)) > 0.0


@pytest.mark.parametrize("d,k", [(5, 2), (12, 3), (6, 5), (4, 4), (16, 14), (40, 13)])  # k > 12: the bitmap path
def test_k_subsets_are_uniform_without_replacement(d, k):
    gen = torch.Generator().manual_seed(3)
    n = 60_000
    s = sample_k_subsets(n, d, k, generator=gen)
    assert s.shape == (n, k) and s.dtype == torch.long
    assert bool((s[:, 1:] > s[:, :-1]).all())  # sorted, hence distinct
    assert int(s.min()) >= 0 and int(s.max()) < d
    counts = torch.zeros(d).index_add_(0, s.view(-1), torch.ones(n * k))
    p = k / d
    assert (counts / n - p).abs().max() <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12
    # pairs: Pr[i and j both taken] = k(k-1) / (d(d-1))
    both = ((s == 0).any(1) & (s == 1).any(1)).double().mean()
    p2 = k * (k - 1) / (d * (d - 1))
    assert abs(float(both) - p2) <= 5 * math.sqrt(p2 * (1 - p2) / n) + 1e-12
    if math.comb(d, k) > 1000:
        return
    # every k-subset equally likely (chi-square over the C(d, k) subsets)
    code = (s * torch.tensor([d**i for i in range(k)])).sum(1)
    _, freq = code.unique(return_counts=True)
    m = math.comb(d, k)
    assert freq.numel() == m
    chi2 = float(((freq.double() - n / m) ** 2 / (n / m)).sum())
    assert chi2 < m - 1 + 6 * math.sqrt(2 * (m - 1)) + 1


def test_hds_moments_match_lemma_3_2():
    """Spec §2.3: d=10, k=3, eps=1; per-coordinate mean C x and the variance formula."""
    d, k, eps, n = 10, 3, 1.0, 40_000
    gen = torch.Generator().manual_seed(21)
    row = torch.linspace(-1, 1, d, dtype=torch.float64)
    out = hds_perturb(row.expand(n, d), eps, k, generator=gen)
    assert bool(((out != 0).sum(1) == k).all())
    mean, var = hds_moments(row, eps, k, d)
    c = hds_coefficient(eps, k, d)
    assert torch.allclose(mean, c * row)
    for j in range(d):
        mean_var_checks(out[:, j], float(mean[j]), float(var[j]))
    # the printed lemma's denominator (d b e^{eps/k} + 1) would be a different number
    prm = square_wave_params(eps / k)
    assert c != pytest.approx(k * prm.b * math.expm1(eps / k) / (d * prm.be + 1), rel=1e-3)
    # unbiased: mean x, variance / C^2
    ub = hds_perturb(row.expand(n, d), eps, k, generator=gen, unbiased=True)
    umean, uvar = hds_moments(row, eps, k, d, unbiased=True)
    assert torch.allclose(umean, row) and torch.allclose(uvar, var / c**2)
    for j in (0, 4, 9):
        mean_var_checks(ub[:, j], float(umean[j]), float(uvar[j]))


def test_spec_numbers_for_cora_and_small_epsilon():
    # Cora: d = 1433, k = 20, eps = 1: C = 3.4e-4, per-entry std ~ 0.13
    c = hds_coefficient(1.0, 20, 1433)
    assert c == pytest.approx(3.4e-4, rel=0.02)
    _, var = hds_moments(torch.tensor([0.0, 1.0]), 1.0, 20, 1433)
    assert math.sqrt(float(var.max())) == pytest.approx(0.13, abs=0.01)
    # eps -> 0: C ~ eps / (2d), independent of k
    for k in (1, 5, 50):
        assert hds_coefficient(1e-3, k, 100) == pytest.approx(1e-3 / 200, rel=1e-3)


def test_tiny_per_coordinate_epsilon_stays_finite():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(50, 100, generator=gen, dtype=torch.float64) * 2 - 1
    out = hds_perturb(x, 50 * 1e-8, 50, generator=gen)  # eps / k = 1e-8
    assert torch.isfinite(out).all() and bool(((out != 0).sum(1) == 50).all())
    _, var = hds_moments(x, 5e-7, 50, 100)
    assert torch.isfinite(var).all()


def test_validation():
    with pytest.raises(ValueError, match="epsilon"):
        square_wave_params(0.0)
    with pytest.raises(ValueError, match="epsilon"):
        square_wave_params(float("nan"))
    with pytest.raises(ValueError, match="700"):
        square_wave_params(MAX_COORDINATE_EPSILON * 1.01)
    with pytest.raises(TypeError):
        square_wave_params("1")
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        sample_square_wave(torch.tensor([1.5]), 1.0)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        sample_square_wave(torch.tensor([float("nan")]), 1.0)
    with pytest.raises(ValueError, match="k"):
        sample_k_subsets(3, 4, 5)
    with pytest.raises(ValueError, match="k"):
        hds_coefficient(1.0, 0, 4)
    with pytest.raises(ValueError, match="2-D"):
        hds_perturb(torch.zeros(3), 1.0, 1)
