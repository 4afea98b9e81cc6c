"""LP / PM / MB samplers (specs/privge.md §2.6): densities, unbiasedness, variances, the
spec's table, density ratios."""
import math

import numpy as np
import pytest
import torch

from pyg_private.mechanisms.ldp_baselines import (
    laplace_ldp_scale,
    laplace_ldp_variance,
    multibit_default_k,
    multibit_moments,
    multibit_probability,
    multibit_scale,
    piecewise_default_k,
    piecewise_grid,
    piecewise_moments,
    piecewise_params,
    sample_laplace_ldp,
    sample_multibit,
    sample_piecewise,
)
from pyg_private.mechanisms.square_wave import sample_k_subsets

from moment_checks import mean_var_checks




# spec §2.3 table: eps', worst-case Var_PM (|x| = 1), Var_MB (x = 0), Var_LP = 8/eps^2 (d = k = 1)
SPEC_TABLE = [
    (0.01, 5.33e4, 4.0e4, 8.0e4),
    (0.1, 533.2, 400.7, 800.0),
    (1.0, 5.224, 4.683, 8.0),
    (3.0, 0.4929, 1.221, 0.889),
    (3.5, 0.3394, 1.128, 0.653),
    (5.0, 0.1299, 1.027, 0.32),
]


@pytest.mark.parametrize("eps,v_pm,v_mb,v_lp", SPEC_TABLE)
def test_spec_table(eps, v_pm, v_mb, v_lp):
    xs = torch.tensor([-1.0, 0.0, 0.5, 1.0], dtype=torch.float64)
    _, var_pm = piecewise_moments(xs, eps)
    _, var_mb = multibit_moments(xs, eps)
    assert float(var_pm.max()) == float(var_pm[3]) == pytest.approx(v_pm, rel=1e-3)
    assert float(var_mb.max()) == float(var_mb[1]) == pytest.approx(v_mb, rel=1e-3)
    assert laplace_ldp_variance(eps, 1) == pytest.approx(v_lp, rel=1e-3)


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
def test_piecewise_density_is_a_density_with_ratio_e_eps(eps):
    prm = piecewise_params(eps)
    assert prm.s == pytest.approx((math.exp(eps / 2) + 1) / (math.exp(eps / 2) - 1), rel=1e-12)
    assert prm.p == pytest.approx((math.exp(eps) - math.exp(eps / 2)) / (2 * math.exp(eps / 2) + 2), rel=1e-12)
    # window width s - 1 at density p, the rest (length s + 1) at p e^-eps: total mass 1
    assert prm.p * (prm.s - 1) + prm.q * (prm.s + 1) == pytest.approx(1.0, rel=1e-12)
    assert prm.p / prm.q == pytest.approx(math.exp(eps), rel=1e-12)


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_piecewise_sampler_is_unbiased_with_the_spec_variance(eps):
    gen = torch.Generator().manual_seed(1)
    xs = [-1.0, -0.2, 0.0, 0.7, 1.0]
    n = 100_000
    y = sample_piecewise(torch.tensor(xs, dtype=torch.float64).repeat_interleave(n), eps, generator=gen)
    s = piecewise_params(eps).s
    high = piecewise_grid(eps).high  # the safe sampler's grid reaches s within half a step
    assert abs(high - s) <= 1e-6 and float(y.abs().max()) <= high
    for i, x in enumerate(xs):
        mean, var = piecewise_moments(x, eps)
        mean_var_checks(y[i * n:(i + 1) * n], float(mean), float(var))


def _pm_edges(eps, per_region=5):
    """Breakpoints of the PM densities for x = -1 ([-s, 1-s... ]) and x = +1 (s: the safe
    sampler's largest output, within half a grid step of the continuous s)."""
    s = max(piecewise_params(eps).s, piecewise_grid(eps).high)
    # x = -1: window [-s, -1]; x = +1: window [1, s]
    return np.unique(np.concatenate([np.linspace(-s, -1, per_region + 1), np.linspace(-1, 1, per_region + 1),
                                     np.linspace(1, s, per_region + 1)]))


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_piecewise_density_ratio_for_inputs_minus_one_and_one(eps):
    n = 300_000
    gen = torch.Generator().manual_seed(2)
    a = sample_piecewise(torch.full((n,), -1.0, dtype=torch.float64), eps, generator=gen).numpy()
    b = sample_piecewise(torch.full((n,), 1.0, dtype=torch.float64), eps, generator=gen).numpy()
    edges = _pm_edges(eps)
    ca, _ = np.histogram(a, bins=edges)
    cb, _ = np.histogram(b, bins=edges)
    assert ca.sum() == n and cb.sum() == n and (ca > 0).all() and (cb > 0).all()
    excess = np.abs(np.log(ca / cb)) - eps - 5 * np.sqrt(1 / ca + 1 / cb)
    assert excess.max() <= 0
    assert np.abs(np.log(ca / cb)).max() == pytest.approx(eps, abs=0.05)  # the bound is attained


@pytest.mark.parametrize("eps", [0.2, 1.0, 3.0])
def test_multibit_probabilities_and_ratio(eps):
    x = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0], dtype=torch.float64)
    e = math.exp(eps)
    spec = 1 / (e + 1) + (x + 1) / 2 * (e - 1) / (e + 1)
    assert torch.allclose(multibit_probability(x, eps), spec, rtol=1e-13)
    p = multibit_probability(x, eps)
    assert float(p[-1] / p[0]) == pytest.approx(e, rel=1e-12)  # Pr[+1 | 1] / Pr[+1 | -1]
    assert float((1 - p[0]) / (1 - p[-1])) == pytest.approx(e, rel=1e-12)
    gen = torch.Generator().manual_seed(4)
    n = 100_000
    y = sample_multibit(x.repeat_interleave(n), eps, generator=gen)
    assert set(y.unique().tolist()) <= {-1.0, 1.0}
    freq = (y.view(5, n) > 0).double().mean(1)
    assert (freq - p).abs().max() <= 5 * math.sqrt(0.25 / n)


@pytest.mark.parametrize("mech", ["pm", "mb"])
def test_high_dimensional_versions_are_unbiased_with_the_spec_variance(mech):
    """k-sampling at eps/k, rescaled; d=8, k=3, eps=2."""
    d, k, eps, n = 8, 3, 2.0, 40_000
    gen = torch.Generator().manual_seed(7)
    row = torch.linspace(-1, 1, d, dtype=torch.float64)
    idx = sample_k_subsets(n, d, k, generator=gen)
    xs = row.expand(n, d).gather(1, idx)
    if mech == "pm":
        vals = sample_piecewise(xs, eps / k, generator=gen) * (d / k)
        moments = piecewise_moments
    else:
        vals = sample_multibit(xs, eps / k, generator=gen) * multibit_scale(eps, k, d)
        moments = multibit_moments
    out = torch.zeros(n, d, dtype=torch.float64).scatter_(1, idx, vals)
    mean, var = moments(row, eps, k, d)
    # the safe PM's mean is x up to the rounding of its window's position (half a grid step)
    assert torch.allclose(mean, row, rtol=0.0, atol=1e-6) if mech == "pm" else torch.equal(mean, row)
    for j in range(d):
        mean_var_checks(out[:, j], float(row[j]), float(var[j]))


def test_laplace_ldp():
    assert laplace_ldp_scale(0.5, 10) == 40.0
    gen = torch.Generator().manual_seed(8)
    x = torch.tensor([[-1.0, 0.0, 0.5, 1.0]], dtype=torch.float64).expand(50_000, 4)
    y = sample_laplace_ldp(x, 4.0, generator=gen)  # scale 2, variance 8
    for j in range(4):
        mean_var_checks(y[:, j], float(x[0, j]), laplace_ldp_variance(4.0, 4))


def test_default_k_as_in_the_reference_code():
    assert [piecewise_default_k(e, 100) for e in (0.01, 2.4, 2.5, 7.6, 1000.0)] == [1, 1, 1, 3, 100]
    assert [multibit_default_k(e, 100) for e in (0.01, 2.17, 2.18, 6.6, 1000.0)] == [1, 1, 1, 3, 100]


def test_tiny_and_large_budgets_stay_finite():
    gen = torch.Generator().manual_seed(0)
    x = torch.linspace(-1, 1, 11, dtype=torch.float64)
    for eps in (1e-8, 700.0):
        assert torch.isfinite(sample_piecewise(x, eps, generator=gen)).all()
        assert torch.isfinite(sample_multibit(x, eps, generator=gen)).all()
        assert all(math.isfinite(v) for v in (piecewise_params(eps).s, piecewise_params(eps).p))
    assert math.isfinite(multibit_scale(1e-6, 1, 10))


def test_validation():
    with pytest.raises(ValueError):
        piecewise_params(0.0)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        sample_piecewise(torch.tensor([1.2]), 1.0)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        multibit_probability(torch.tensor([-1.2]), 1.0)
    with pytest.raises(ValueError, match="2-D"):
        sample_laplace_ldp(torch.zeros(3), 1.0)
    with pytest.raises(ValueError, match="k"):
        multibit_scale(1.0, 5, 4)
