"""Independent checks of ``subsampled_gaussian_rdp`` (Opacus' analysis, used up to order 4096).

The reference integrates the Rényi divergence of the Poisson-subsampled Gaussian mechanism,
D_alpha((1 - q) N(0, s^2) + q N(1, s^2) || N(0, s^2)) (Mironov, Talwar and Zhang 2019), with mpmath.
Our grid has many *fractional* orders above 63, where Opacus uses its series for fractional
orders (never exercised by Opacus' own integer grid), so those orders are checked too.
"""
import math

import mpmath as mp
import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from pyg_private.accounting import DEFAULT_ORDERS, subsampled_gaussian_rdp
from pyg_private.accounting.subsampled_gaussian import MAX_SUBSAMPLED_ORDER


def _renyi_subsampled_gaussian(alpha: float, q: float, s: float) -> float:
    def log_integrand_f(z):  # float version, to locate the peak
        lr = np.logaddexp(math.log1p(-q), math.log(q) + (2 * z - 1) / (2 * s * s))
        return -(-z * z / (2 * s * s) + alpha * lr)

    peak = minimize_scalar(log_integrand_f, bounds=(-10 * s, alpha + 10 * s), method="bounded",
                           options={"xatol": 1e-6}).x
    with mp.workdps(30):
        a, qq, ss = mp.mpf(alpha), mp.mpf(q), mp.mpf(s)

        def log_f(z):
            return (-z * z / (2 * ss * ss) - mp.log(ss * mp.sqrt(2 * mp.pi))
                    + a * mp.log(1 - qq + qq * mp.exp((2 * z - 1) / (2 * ss * ss))))

        zp = mp.mpf(peak)
        lp = log_f(zp)
        pts = sorted({-mp.inf, mp.mpf(0), mp.mpf(1), zp - 30 * ss, zp - 8 * ss, zp, zp + 8 * ss, zp + 30 * ss, mp.inf})
        integral = mp.quad(lambda z: mp.exp(log_f(z) - lp), pts)
        return float((mp.log(integral) + lp) / (a - 1))


def _grid_order(target: float) -> float:
    return min(DEFAULT_ORDERS, key=lambda o: abs(o - target))


@pytest.mark.parametrize("q,sigma", [(0.25, 1.1), (0.01, 1.0), (0.001, 0.8), (0.05, 2.0), (1e-4, 5.0)])
@pytest.mark.parametrize("target_order", [2.0, 7.5, 75.0, 145.0, 537.0])
def test_matches_numerical_renyi_divergence(q, sigma, target_order):
    alpha = _grid_order(target_order)
    ours = float(subsampled_gaussian_rdp([alpha], noise_multiplier=sigma, sample_rate=q)[0])
    ref = _renyi_subsampled_gaussian(alpha, q, sigma)
    assert ours == pytest.approx(ref, rel=1e-6), (q, sigma, alpha)


def test_steps_multiply():
    grid = np.array([2.0, 10.5, 100.0])
    one = subsampled_gaussian_rdp(grid, noise_multiplier=1.0, sample_rate=0.1)
    many = subsampled_gaussian_rdp(grid, noise_multiplier=1.0, sample_rate=0.1, steps=37)
    np.testing.assert_allclose(many, 37 * one, rtol=1e-14)


def test_full_batch_is_the_gaussian_mechanism():
    # q = 1: D_alpha(N(1, s^2) || N(0, s^2)) = alpha / (2 s^2), per step
    grid = np.array([o for o in DEFAULT_ORDERS if o <= MAX_SUBSAMPLED_ORDER])
    out = subsampled_gaussian_rdp(grid, noise_multiplier=1.3, sample_rate=1.0, steps=5)
    np.testing.assert_allclose(out, 5 * grid / (2 * 1.3 ** 2), rtol=1e-14)


def test_unbounded_above_max_order_and_at_infinity():
    out = subsampled_gaussian_rdp(DEFAULT_ORDERS, noise_multiplier=1.0, sample_rate=0.01)
    orders = np.array(DEFAULT_ORDERS)
    assert (out[orders > MAX_SUBSAMPLED_ORDER] == math.inf).all()
    assert out[-1] == math.inf  # not pure DP
    finite = out[np.isfinite(out)]
    assert (finite >= 0).all()
    # the finite part is monotone in the order (RDP is non-decreasing in alpha)
    assert (np.diff(finite) >= -1e-12 * finite[1:]).all()
    # inf is never replaced by a number
    assert not np.isnan(out).any()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(noise_multiplier=0.0, sample_rate=0.1),
        dict(noise_multiplier=-1.0, sample_rate=0.1),
        dict(noise_multiplier=1.0, sample_rate=0.0),
        dict(noise_multiplier=1.0, sample_rate=1.5),
        dict(noise_multiplier=1.0, sample_rate=0.1, steps=0),
    ],
)
def test_invalid_arguments_raise(kwargs):
    with pytest.raises((ValueError, TypeError)):
        subsampled_gaussian_rdp([2.0], **kwargs)
