"""Independent checks of the Laplace RDP curve ``laplace_rdp`` (specs/noisy_diffusion.md §3.1, §3.8).

The reference is the Rényi divergence D_alpha(Lap(rho, sigma) || Lap(0, sigma)) integrated
numerically with mpmath (40 digits), never the closed form the library implements.
"""
import math
import warnings

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyg_private.accounting import DEFAULT_ORDERS, laplace_rdp


def _renyi_laplace(alpha: float, rho: float, sigma: float, dps: int = 40) -> mp.mpf:
    """D_alpha(Lap(rho, sigma) || Lap(0, sigma)) = log(int p^a q^(1-a)) / (a - 1), by quadrature."""
    with mp.workdps(dps):
        a, r, s = mp.mpf(alpha), mp.mpf(rho), mp.mpf(sigma)

        def integrand(x):
            log_p = -abs(x - r) / s
            log_q = -abs(x) / s
            return mp.exp(a * log_p + (1 - a) * log_q) / (2 * s)

        integral = mp.quad(integrand, [-mp.inf, 0, r, mp.inf])
        return mp.log(integral) / (a - 1)


def _kl_laplace(rho: float, sigma: float) -> mp.mpf:
    """KL(Lap(rho, sigma) || Lap(0, sigma)) by quadrature."""
    with mp.workdps(40):
        r, s = mp.mpf(rho), mp.mpf(sigma)

        def integrand(x):
            p = mp.exp(-abs(x - r) / s) / (2 * s)
            return p * (abs(x) - abs(x - r)) / s

        return mp.quad(integrand, [-mp.inf, 0, r, mp.inf])


def _tol(alpha: float, x: float) -> float:
    # float64 evaluation of log(...)/(alpha - 1): a few ulps of (alpha - 1) x and of 1, over (alpha - 1)
    return 1e-15 * (x + 1.0 / (alpha - 1.0))


@pytest.mark.parametrize("alpha", [1.01, 1.5, 2.0, 10.0, 100.0])
@pytest.mark.parametrize("ratio", [1e-3, 1e-2, 0.1, 1.0, 3.0])
def test_matches_numerical_renyi_divergence(alpha, ratio):
    sigma = 0.7
    rho = ratio * sigma
    ref = float(_renyi_laplace(alpha, rho, sigma))
    ours = float(laplace_rdp([alpha], sensitivity=rho, scale=sigma)[0])
    assert abs(ours - ref) <= 1e-9 * ref + _tol(alpha, ratio), (alpha, ratio, ours, ref)


@pytest.mark.parametrize("alpha", [1.5, 2.0, 100.0])
def test_tiny_ratio_is_accurate_in_absolute_terms(alpha):
    # At x = 1e-6 the curve (~ alpha x^2 / 2 ~ 1e-12) is computed as log(1 + 1e-12)/(alpha-1) in
    # float64, so only absolute accuracy (~1e-16) is possible; it must still hold.
    ratio = 1e-6
    ref = float(_renyi_laplace(alpha, ratio, 1.0))
    ours = float(laplace_rdp([alpha], sensitivity=ratio, scale=1.0)[0])
    assert abs(ours - ref) <= _tol(alpha, ratio)


def test_large_orders_match_quadrature():
    for alpha in (1000.0, 1e4):
        for ratio in (1e-3, 0.5):
            ref = float(_renyi_laplace(alpha, ratio, 1.0, dps=60))
            ours = float(laplace_rdp([alpha], sensitivity=ratio, scale=1.0)[0])
            assert ours == pytest.approx(ref, rel=1e-9, abs=_tol(alpha, ratio))


def test_spec_reference_value_g2():
    # spec §3.4: epsilon(K=1) = 1.0229e-5 is g_2(sigma=0.01, rho_diff=3.2e-5)
    ours = float(laplace_rdp([2.0], sensitivity=3.2e-5, scale=0.01)[0])
    assert ours == pytest.approx(1.0229e-5, rel=5e-5)
    assert ours == pytest.approx(float(_renyi_laplace(2.0, 3.2e-5, 0.01)), rel=1e-9)


def test_only_the_ratio_matters():
    grid = np.array([1.5, 2.0, 10.0, 1e3, math.inf])
    a = laplace_rdp(grid, sensitivity=3.0, scale=2.0)
    b = laplace_rdp(grid, sensitivity=1.5e-6, scale=1e-6)
    np.testing.assert_allclose(a, b, rtol=1e-13)


@pytest.mark.parametrize("rho,sigma", [(1.0, 1.0), (3.2e-5, 0.01), (7.0, 0.5), (0.0, 2.0)])
def test_order_infinity_is_pure_epsilon_exactly(rho, sigma):
    assert laplace_rdp([math.inf], sensitivity=rho, scale=sigma)[0] == rho / sigma
    out = laplace_rdp(DEFAULT_ORDERS, sensitivity=rho, scale=sigma)
    assert out[-1] == rho / sigma


@pytest.mark.parametrize("ratio", [0.1, 1.0, 3.0])
def test_alpha_to_one_is_kl_divergence(ratio):
    kl_formula = ratio + math.exp(-ratio) - 1.0  # spec §3.1
    kl_numeric = float(_kl_laplace(ratio, 1.0))
    assert kl_formula == pytest.approx(kl_numeric, rel=1e-12)
    near_one = float(laplace_rdp([1.0 + 1e-6], sensitivity=ratio, scale=1.0)[0])
    assert near_one == pytest.approx(kl_formula, rel=1e-4)
    # and the curve increases from the KL value
    assert float(laplace_rdp([1.01], sensitivity=ratio, scale=1.0)[0]) >= kl_formula * (1 - 1e-12)


@pytest.mark.parametrize("alpha,ratio", [(2.0, 1e-3), (10.0, 1e-4), (100.0, 1e-5), (1.5, 1e-2)])
def test_small_alpha_x_is_quadratic(alpha, ratio):
    g = float(laplace_rdp([alpha], sensitivity=ratio, scale=1.0)[0])
    assert g == pytest.approx(alpha * ratio ** 2 / 2.0, rel=alpha * ratio)


def test_large_order_asymptotics_without_overflow():
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        out = laplace_rdp([1e6, math.inf], sensitivity=50.0, scale=1.0)
    assert np.isfinite(out).all()
    alpha, x = 1e6, 50.0
    # g = x + log(alpha / (2 alpha - 1)) / (alpha - 1) + O(e^{-(2 alpha - 1) x})
    expected = x + math.log(alpha / (2 * alpha - 1)) / (alpha - 1)
    assert out[0] == pytest.approx(expected, rel=1e-14)
    assert out[0] < x and out[1] == x
    # the whole default grid at an extreme ratio is finite and <= x
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        curve = laplace_rdp(DEFAULT_ORDERS, sensitivity=1e3, scale=1.0)
    assert np.isfinite(curve).all() and (curve <= 1e3).all() and (curve >= 0).all()


@pytest.mark.parametrize("ratio", [0.0, 1e-6, 1e-3, 0.1, 1.0, 10.0, 50.0])
def test_monotone_in_order(ratio):
    curve = laplace_rdp(DEFAULT_ORDERS, sensitivity=ratio, scale=1.0)
    diffs = np.diff(curve)
    assert (diffs >= -4 * np.spacing(np.maximum(curve[1:], 1e-300))).all()
    assert curve[0] >= 0.0 and curve[-1] == ratio


@settings(max_examples=60, deadline=None)
@given(
    alpha=st.one_of(st.floats(1.0 + 1e-9, 10.0), st.floats(10.0, 1e6)),
    ratio=st.floats(0.0, 50.0),
)
def test_bounded_by_pure_epsilon_and_non_negative(alpha, ratio):
    g = float(laplace_rdp([alpha], sensitivity=ratio, scale=1.0)[0])
    assert 0.0 <= g <= ratio
    assert math.isfinite(g)


@settings(max_examples=40, deadline=None)
@given(
    alpha=st.floats(1.05, 1e4),
    parts=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=5),
    rho=st.floats(1e-3, 5.0),
)
def test_l1_split_shift_costs_no_more_than_one_coordinate(alpha, parts, rho):
    # spec §3.1 (App. F.2): sum_i g(|h_i|) <= g(rho) when ||h||_1 <= rho
    total = sum(parts)
    if total == 0:
        return
    shifts = [rho * p / total for p in parts]
    split = sum(float(laplace_rdp([alpha], sensitivity=h, scale=1.0)[0]) for h in shifts)
    whole = float(laplace_rdp([alpha], sensitivity=rho, scale=1.0)[0])
    assert split <= whole * (1 + 1e-12) + 1e-15


def test_monotone_in_shift_and_scale():
    grid = np.array([1.5, 2.0, 10.0, 1e3, math.inf])
    rhos = [0.0, 0.01, 0.1, 1.0, 2.0]
    curves = [laplace_rdp(grid, sensitivity=r, scale=1.0) for r in rhos]
    for lo, hi in zip(curves, curves[1:]):
        assert (hi >= lo).all()
    assert (curves[0] == 0).all()
    scales = [0.5, 1.0, 2.0, 4.0]
    curves = [laplace_rdp(grid, sensitivity=1.0, scale=s) for s in scales]
    for bigger_noise, smaller_noise in zip(curves[1:], curves):
        assert (bigger_noise <= smaller_noise).all()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(orders=[1.0], sensitivity=1.0, scale=1.0),
        dict(orders=[0.5, 2.0], sensitivity=1.0, scale=1.0),
        dict(orders=[float("nan")], sensitivity=1.0, scale=1.0),
        dict(orders=[2.0], sensitivity=-1.0, scale=1.0),
        dict(orders=[2.0], sensitivity=1.0, scale=0.0),
        dict(orders=[2.0], sensitivity=1.0, scale=-1.0),
        dict(orders=[2.0], sensitivity=float("nan"), scale=1.0),
    ],
)
def test_invalid_arguments_raise(kwargs):
    orders = kwargs.pop("orders")
    with pytest.raises(ValueError):
        laplace_rdp(orders, **kwargs)
