r"""DP-PushFlowCap accounting: sensitivity, RDP curve, calibration (spec noisy_diffusion.md §4.1).

Delta_1 = (3 - alpha)(1 - (1 - alpha)^T) eta. A release of C columns with i.i.d.
Laplace(b) costs C g_alpha(b, Delta_1), whose order-infinity entry is C Delta_1 / b. The
reference curve here is Mironov's closed form written out directly (no logaddexp).
"""
import math

import numpy as np
import pytest

from pyg_private import PrivacyAccountant
from pyg_private.accounting import (
    DEFAULT_ORDERS,
    laplace_rdp,
    push_flow_noise_scale,
    push_flow_rdp,
    push_flow_sensitivity,
    rdp_event,
    rdp_to_dp,
)

DELTA_BC = 1 / 333_983  # BlogCatalog's 1/|E|


def _mironov(alpha, rho, b):
    x = rho / b
    return math.log(alpha / (2 * alpha - 1) * math.exp((alpha - 1) * x)
                    + (alpha - 1) / (2 * alpha - 1) * math.exp(-alpha * x)) / (alpha - 1)


def _eps(scale, delta, *, eta=1e-6, alpha=0.2, t=100, c=1, orders=DEFAULT_ORDERS):
    rdp = push_flow_rdp(orders, noise_scale=scale, eta=eta, alpha=alpha, num_iterations=t, num_columns=c)
    return rdp_to_dp(orders=orders, rdp=rdp, delta=delta)[0]


def test_sensitivity_by_hand():
    assert push_flow_sensitivity(eta=1e-6, alpha=0.2, num_iterations=100) == pytest.approx(
        2.8e-6 * (1 - 0.8 ** 100), rel=1e-14)
    assert push_flow_sensitivity(eta=1e-6, alpha=0.2, num_iterations=1) == pytest.approx(2.8e-6 * 0.2, rel=1e-14)
    assert push_flow_sensitivity(eta=1.0, alpha=0.5, num_iterations=1) == pytest.approx(1.25, rel=1e-15)
    assert push_flow_sensitivity(eta=1.0, alpha=0.5, num_iterations=3) == pytest.approx(2.5 * 0.875, rel=1e-15)
    # T -> infinity: (3 - alpha) eta; linear in eta
    assert push_flow_sensitivity(eta=2e-8, alpha=0.15, num_iterations=10_000) == pytest.approx(2.85 * 2e-8, rel=1e-14)
    assert push_flow_sensitivity(eta=3e-6, alpha=0.2, num_iterations=50) == pytest.approx(
        3 * push_flow_sensitivity(eta=1e-6, alpha=0.2, num_iterations=50), rel=1e-14)
    # a tiny alpha keeps full precision (log1p / expm1): (3 - a)(1 - (1-a)^T) ~ 3 a T
    assert push_flow_sensitivity(eta=1.0, alpha=1e-12, num_iterations=10) == pytest.approx(3e-11, rel=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    (dict(eta=0.0, alpha=0.2, num_iterations=10), "eta"),
    (dict(eta=-1e-6, alpha=0.2, num_iterations=10), "eta"),
    (dict(eta=1e-6, alpha=0.0, num_iterations=10), "alpha"),
    (dict(eta=1e-6, alpha=1.0, num_iterations=10), "alpha"),
    (dict(eta=1e-6, alpha=0.2, num_iterations=0), "num_iterations"),
])
def test_sensitivity_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        push_flow_sensitivity(**kwargs)


@pytest.mark.parametrize("columns", [1, 3, 10])
def test_rdp_curve_is_columns_times_the_laplace_curve(columns):
    eta, b = 1e-6, 4e-6
    sens = push_flow_sensitivity(eta=eta, alpha=0.2, num_iterations=100)
    curve = push_flow_rdp(DEFAULT_ORDERS, noise_scale=b, eta=eta, alpha=0.2, num_iterations=100, num_columns=columns)
    assert curve.shape == (len(DEFAULT_ORDERS),)
    np.testing.assert_allclose(curve, columns * laplace_rdp(DEFAULT_ORDERS, sensitivity=sens, scale=b), rtol=1e-15)
    for i, a in enumerate(DEFAULT_ORDERS[:-1]):
        if a <= 200:  # the direct formula overflows nowhere here: (a - 1) x <= 200 * 0.7
            assert curve[i] == pytest.approx(columns * _mironov(a, sens, b), rel=1e-9, abs=1e-15)
    assert math.isinf(DEFAULT_ORDERS[-1])
    assert curve[-1] == pytest.approx(columns * sens / b, rel=1e-15)
    assert np.all(np.diff(curve) >= -1e-15)  # non-decreasing in the order
    assert np.all(curve <= curve[-1] * (1 + 1e-15))


def test_rdp_validation():
    with pytest.raises(ValueError, match="noise_scale"):
        push_flow_rdp(noise_scale=0.0, eta=1e-6, alpha=0.2, num_iterations=10)
    with pytest.raises(ValueError, match="num_columns"):
        push_flow_rdp(noise_scale=1.0, eta=1e-6, alpha=0.2, num_iterations=10, num_columns=0)
    with pytest.raises(ValueError, match="orders"):
        push_flow_rdp((0.5, 2.0), noise_scale=1.0, eta=1e-6, alpha=0.2, num_iterations=10)


@pytest.mark.parametrize("epsilon, columns", [(0.1, 1), (1.0, 1), (1.0, 4), (3.0, 2)])
def test_pure_calibration_is_columns_sensitivity_over_epsilon(epsilon, columns):
    sens = push_flow_sensitivity(eta=1e-6, alpha=0.2, num_iterations=100)
    b = push_flow_noise_scale(epsilon=epsilon, delta=0.0, eta=1e-6, alpha=0.2, num_iterations=100,
                              num_columns=columns)
    assert b == pytest.approx(columns * sens / epsilon, rel=1e-15)
    assert _eps(b, 0.0, c=columns) == pytest.approx(epsilon, rel=1e-12)


@pytest.mark.parametrize("epsilon, delta, columns", [
    (0.01, DELTA_BC, 1), (0.1, DELTA_BC, 1), (1.0, DELTA_BC, 1), (1.0, 1e-5, 5), (0.5, 1e-2, 1), (2.0, 1e-3, 20),
])
def test_calibration_at_delta_is_safe_and_tight(epsilon, delta, columns):
    kwargs = dict(eta=1e-6, alpha=0.2, num_iterations=100, num_columns=columns)
    b = push_flow_noise_scale(epsilon=epsilon, delta=delta, **kwargs)
    spent = _eps(b, delta, c=columns)
    assert spent <= epsilon and spent == pytest.approx(epsilon, rel=1e-6)
    # 0.1% less noise breaks the target: the scale is the smallest one
    assert _eps(b * 0.999, delta, c=columns) > epsilon
    # never more noise than the pure calibration (the order-infinity track is part of the grid)
    pure = push_flow_noise_scale(epsilon=epsilon, delta=0.0, **kwargs)
    assert b <= pure * (1 + 1e-12)
    # the accountant agrees with the conversion used to calibrate
    acct = PrivacyAccountant()
    acct.register(rdp_event(unit="edge", orders=DEFAULT_ORDERS, name="ppr", mechanism="dp_push_flow_cap",
                            rdp=push_flow_rdp(DEFAULT_ORDERS, noise_scale=b, **kwargs)))
    assert acct.epsilon("edge", delta) == pytest.approx(spent, rel=1e-12)
    assert acct.epsilon("edge", delta) <= epsilon


def test_calibration_is_monotone_and_scale_invariant():
    kw = dict(delta=DELTA_BC, alpha=0.2, num_iterations=100)
    eps_grid = [0.01, 0.05, 0.1, 0.5, 1.0, 3.0]
    scales = [push_flow_noise_scale(epsilon=e, eta=1e-6, **kw) for e in eps_grid]
    assert all(a > b for a, b in zip(scales, scales[1:]))  # more epsilon, less noise
    # epsilon decreases in the scale
    eps_of_b = [_eps(b, DELTA_BC) for b in np.geomspace(1e-7, 1e-3, 15)]
    assert all(a >= b for a, b in zip(eps_of_b, eps_of_b[1:])) and eps_of_b[0] > eps_of_b[-1]
    # the scale is proportional to eta (everything depends on Delta_1 / b)
    assert push_flow_noise_scale(epsilon=0.5, eta=3e-8, **kw) == pytest.approx(
        0.03 * push_flow_noise_scale(epsilon=0.5, eta=1e-6, **kw), rel=1e-9)
    # more columns need more noise, at most proportionally
    one = push_flow_noise_scale(epsilon=0.5, eta=1e-6, **kw)
    ten = push_flow_noise_scale(epsilon=0.5, eta=1e-6, num_columns=10, **kw)
    assert one < ten <= 10 * one * (1 + 1e-12)


@pytest.mark.parametrize("kwargs, match", [
    (dict(epsilon=0.0, delta=1e-5), "epsilon"), (dict(epsilon=-1.0, delta=1e-5), "epsilon"),
    (dict(epsilon=1.0, delta=1.0), "delta"), (dict(epsilon=1.0, delta=-1e-5), "delta"),
    (dict(epsilon=1.0, delta=1e-5, num_columns=0), "num_columns"),
    (dict(epsilon=1.0, delta=1e-5, eta=0.0), "eta"),
])
def test_noise_scale_validation(kwargs, match):
    args = dict(eta=1e-6, alpha=0.2, num_iterations=100)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        push_flow_noise_scale(**args)
