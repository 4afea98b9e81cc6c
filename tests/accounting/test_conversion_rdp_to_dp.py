"""Independent checks of ``rdp_to_dp``: RDP -> (epsilon, delta), minimised over the orders and the pure track.

A conversion is safe when it is never tighter than the mechanism's exact privacy profile. The exact
profiles used here are computed independently of the library's RDP code:

* Gaussian (mu-GDP): the Dong-Roth-Su delta(eps), inverted with mpmath;
* Laplace with shift/scale ratio x: delta(eps) = int (p - e^eps q)_+ = 1 - e^((eps - x)/2) for eps < x,
  checked below by quadrature;
* binary randomized response with truth probability q: delta(eps) = (q - e^eps (1 - q))_+.
"""
import math
import warnings

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from pyg_private.accounting import (
    DEFAULT_ORDERS,
    gdp_rdp,
    laplace_rdp,
    randomized_response_rdp,
    rdp_to_dp,
)

ORDERS = np.array(DEFAULT_ORDERS)
FINITE = ORDERS[np.isfinite(ORDERS)]


def _gdp_epsilon_mp(mu: float, delta: float) -> float:
    """Exact epsilon of mu-GDP at delta: bisection on the Dong-Roth-Su delta(eps) at 50 digits."""
    with mp.workdps(50):
        m = mp.mpf(mu)

        def d(e):
            return mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2)

        if d(0) <= delta:
            return 0.0
        lo, hi = mp.mpf(0), mp.mpf(1)
        while d(hi) > delta:
            hi *= 2
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
        return float(hi)


def _laplace_exact_epsilon(x: float, delta: float) -> float:
    return max(x + 2.0 * math.log1p(-delta), 0.0)


def _rr_exact_epsilon(q: float, delta: float) -> float:
    return max(math.log((q - delta) / (1.0 - q)), 0.0) if delta < q else 0.0


def _balle_reference(orders, rdp, delta):
    """Balle et al. (2020, Thm. 21) minimised over the finite orders, written out in plain Python."""
    best = (math.inf, math.nan)
    for a, r in zip(orders, rdp):
        if not (math.isfinite(a) and math.isfinite(r)):
            continue
        eps = r + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
        if eps < best[0]:
            best = (eps, a)
    return best


def _standard_reference(orders, rdp, delta):
    best = (math.inf, math.nan)
    for a, r in zip(orders, rdp):
        if not (math.isfinite(a) and math.isfinite(r)):
            continue
        eps = r + math.log(1 / delta) / (a - 1)
        if eps < best[0]:
            best = (eps, a)
    return best


def test_laplace_profile_closed_form_matches_quadrature():
    # the closed form used as ground truth below: delta(eps) = int (p - e^eps q)_+ dx
    for x in (0.05, 0.7, 2.0):
        for eps in (0.0, 0.3 * x, 0.9 * x):
            def integrand(y):
                return max(math.exp(-abs(y - x)) / 2 - math.exp(eps) * math.exp(-abs(y)) / 2, 0.0)

            val = sum(integrate.quad(integrand, a, b, epsabs=1e-15, epsrel=1e-12)[0]
                      for a, b in [(-np.inf, 0.0), (0.0, x / 2), (x / 2, x), (x, np.inf)])
            assert val == pytest.approx(1 - math.exp((eps - x) / 2), rel=1e-9)


@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-5, 1e-3, 0.1])
def test_gaussian_curve_between_exact_and_standard(mu, delta):
    curve = gdp_rdp(mu, ORDERS)
    balle, _ = rdp_to_dp(orders=ORDERS, rdp=curve, delta=delta)
    standard, _ = rdp_to_dp(orders=ORDERS, rdp=curve, delta=delta, conversion="standard")
    exact = _gdp_epsilon_mp(mu, delta)
    assert balle >= exact  # never tighter than the truth
    assert balle <= standard


@pytest.mark.parametrize("mu", [0.05, 1.0, 10.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-5, 0.1])
def test_matches_written_out_formulas(mu, delta):
    curve = gdp_rdp(mu, ORDERS)
    eps, order = rdp_to_dp(orders=ORDERS, rdp=curve, delta=delta)
    ref_eps, ref_order = _balle_reference(ORDERS, curve, delta)
    assert eps == pytest.approx(max(ref_eps, 0.0), rel=1e-12, abs=1e-15)
    if ref_eps > 0:
        assert order == ref_order
    eps, order = rdp_to_dp(orders=ORDERS, rdp=curve, delta=delta, conversion="standard")
    ref_eps, ref_order = _standard_reference(ORDERS, curve, delta)
    assert eps == pytest.approx(ref_eps, rel=1e-12) and order == ref_order


@pytest.mark.parametrize("x", [1e-3, 1e-2, 0.1, 1.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-9])
def test_pure_track_used_when_smaller(x, delta):
    eps, order = rdp_to_dp(orders=ORDERS, rdp=laplace_rdp(ORDERS, sensitivity=x, scale=1.0), delta=delta)
    assert eps == x and order == math.inf
    # without order inf the finite orders (<= 1e6) cannot reach it
    eps_finite, _ = rdp_to_dp(orders=FINITE, rdp=laplace_rdp(FINITE, sensitivity=x, scale=1.0), delta=delta)
    assert eps_finite > x


@pytest.mark.parametrize("x", [1e-3, 1e-2, 0.1, 1.0])
def test_laplace_at_spec_delta(x):
    # spec §3.6: at delta = 3e-6 the guarantee is "effectively pure DP". With orders up to 1e6 and
    # Balle's conversion, the finite order ~1.65e5 is in fact a hair better than the pure track
    # (by ~6e-6 absolute), and still above the exact Laplace profile (x - 6.000009e-6).
    delta = 3e-6
    eps, order = rdp_to_dp(orders=ORDERS, rdp=laplace_rdp(ORDERS, sensitivity=x, scale=1.0), delta=delta)
    assert _laplace_exact_epsilon(x, delta) <= eps < x
    assert math.isfinite(order) and order > 1e5
    assert eps == pytest.approx(x, abs=1e-5)
    # with Mironov's conversion the pure track wins exactly
    eps_std, order_std = rdp_to_dp(orders=ORDERS, rdp=laplace_rdp(ORDERS, sensitivity=x, scale=1.0),
                                   delta=delta, conversion="standard")
    assert eps_std == x and order_std == math.inf
    # an Opacus-style grid capped at 63 cannot certify much below log(1/delta)/62 (spec §3.6):
    # with rdp >= 0 Balle's bound at alpha = 63 is log(62/63) + (log(1/delta) - log 63)/62 = 0.1223
    small = ORDERS[ORDERS <= 63]
    eps_capped, _ = rdp_to_dp(orders=small, rdp=laplace_rdp(small, sensitivity=x, scale=1.0), delta=delta)
    assert eps_capped >= math.log(62 / 63) + (math.log(1 / delta) - math.log(63)) / 62
    eps_capped_std, _ = rdp_to_dp(orders=small, rdp=laplace_rdp(small, sensitivity=x, scale=1.0), delta=delta,
                                  conversion="standard")
    assert eps_capped_std >= math.log(1 / delta) / 62  # about 0.2, as the spec says


@settings(max_examples=50, deadline=None)
@given(x=st.floats(1e-4, 10.0), log10_delta=st.floats(-12.0, -1.0))
def test_laplace_never_tighter_than_exact_profile(x, log10_delta):
    delta = 10.0 ** log10_delta
    eps, _ = rdp_to_dp(orders=ORDERS, rdp=laplace_rdp(ORDERS, sensitivity=x, scale=1.0), delta=delta)
    assert _laplace_exact_epsilon(x, delta) <= eps <= x


@settings(max_examples=50, deadline=None)
@given(q=st.floats(0.51, 0.9999), log10_delta=st.floats(-12.0, -1.0))
def test_randomized_response_never_tighter_than_exact_profile(q, log10_delta):
    delta = 10.0 ** log10_delta
    pure = math.log(q / (1 - q))
    eps, _ = rdp_to_dp(orders=ORDERS, rdp=randomized_response_rdp(ORDERS, q=q), delta=delta)
    assert _rr_exact_epsilon(q, delta) <= eps <= pure * (1 + 1e-14)


@settings(max_examples=30, deadline=None)
@given(mu=st.floats(0.01, 20.0), log10_delta=st.floats(-12.0, -1.0))
def test_gaussian_never_tighter_than_exact_property(mu, log10_delta):
    delta = 10.0 ** log10_delta
    eps, _ = rdp_to_dp(orders=ORDERS, rdp=gdp_rdp(mu, ORDERS), delta=delta)
    assert eps >= _gdp_epsilon_mp(mu, delta)


def _laplace_loss_pmf_pessimistic(x: float, n: int) -> np.ndarray:
    """Privacy loss L = |Y| - |Y - x| of one Laplace release under P = Lap(x, 1), on n grid points in [-x, x].

    L = -x with probability e^-x / 2, L = +x with probability 1/2, and in between L = 2Y - x has
    density e^(-(x - L)/2) / 4. Each grid cell's mass is put on its upper end, so every loss is
    rounded up and the delta computed from it is an upper bound on the true delta.
    """
    edges = np.linspace(-x, x, n)
    pmf = np.zeros(n)
    pmf[1:] = 0.5 * (np.exp(-(x - edges[1:]) / 2) - np.exp(-(x - edges[:-1]) / 2))
    pmf[0] += 0.5 * math.exp(-x)
    pmf[-1] += 0.5
    return pmf


@pytest.mark.parametrize("x,k,delta", [(0.05, 50, 1e-5), (0.5, 10, 1e-5), (0.3, 20, 1e-8)])
def test_composed_laplace_never_tighter_than_exact(x, k, delta):
    # Exact delta(eps) of k Laplace releases = E_P[(1 - e^(eps - sum of k losses))_+], by an FFT
    # convolution of the (pessimistically rounded) loss distribution: an upper bound on the truth.
    eps, _ = rdp_to_dp(orders=ORDERS, rdp=k * laplace_rdp(ORDERS, sensitivity=x, scale=1.0), delta=delta)
    assert eps <= k * x
    n = 2001
    pmf = _laplace_loss_pmf_pessimistic(x, n)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-14)
    size = k * (n - 1) + 1
    nfft = 1 << (size - 1).bit_length()
    total = np.clip(np.fft.irfft(np.fft.rfft(pmf, nfft) ** k, nfft)[:size], 0.0, None)
    losses = np.linspace(-k * x, k * x, size)
    true_delta_upper = float(np.sum(total * np.clip(-np.expm1(eps - losses), 0.0, None)))
    assert true_delta_upper <= delta


@pytest.mark.parametrize("conversion", ["balle", "standard"])
def test_delta_zero_uses_only_order_infinity(conversion):
    curve = laplace_rdp(ORDERS, sensitivity=0.3, scale=1.0)
    assert rdp_to_dp(orders=ORDERS, rdp=curve, delta=0.0, conversion=conversion) == (0.3, math.inf)
    eps, order = rdp_to_dp(orders=FINITE, rdp=curve[:-1], delta=0.0, conversion=conversion)
    assert eps == math.inf and math.isnan(order)
    eps, order = rdp_to_dp(orders=ORDERS, rdp=gdp_rdp(1.0, ORDERS), delta=0.0, conversion=conversion)
    assert eps == math.inf and math.isnan(order)


def test_infinite_values_mean_no_bound():
    eps, order = rdp_to_dp(orders=[2.0, 3.0, math.inf], rdp=[math.inf, 1.0, math.inf], delta=1e-5)
    assert order == 3.0
    assert eps == pytest.approx(1.0 + math.log(2 / 3) - (math.log(1e-5) + math.log(3)) / 2, rel=1e-14)
    eps, order = rdp_to_dp(orders=[2.0, math.inf], rdp=[math.inf, math.inf], delta=1e-5)
    assert eps == math.inf and math.isnan(order)


def test_never_negative_and_monotone_in_delta():
    curve = laplace_rdp(ORDERS, sensitivity=0.01, scale=1.0)
    eps, _ = rdp_to_dp(orders=ORDERS, rdp=curve, delta=0.5)
    assert eps == 0.0
    for c in (curve, gdp_rdp(1.0, ORDERS), randomized_response_rdp(ORDERS, q=0.8)):
        last = math.inf
        for delta in np.geomspace(1e-14, 0.5, 40):
            e, _ = rdp_to_dp(orders=ORDERS, rdp=c, delta=float(delta))
            assert 0.0 <= e <= last
            last = e


def test_no_warnings_leak():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rdp_to_dp(orders=[1.5, 2.0], rdp=[0.1, 0.2], delta=1e-5)  # optimum at a grid end


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(orders=[2.0, 3.0], rdp=[0.1, float("nan")], delta=1e-5),
        dict(orders=[2.0, 3.0], rdp=[0.1, -0.1], delta=1e-5),
        dict(orders=[2.0, math.inf], rdp=[0.1, -1e-12], delta=1e-5),
        dict(orders=[2.0, 3.0], rdp=[0.1], delta=1e-5),
        dict(orders=[2.0, 3.0], rdp=[0.1, 0.2], delta=-1e-5),
        dict(orders=[2.0, 3.0], rdp=[0.1, 0.2], delta=1.0),
        dict(orders=[2.0, 3.0], rdp=[0.1, 0.2], delta=float("nan")),
        dict(orders=[2.0, 3.0], rdp=[0.1, 0.2], delta=1e-5, conversion="mironov"),
    ],
)
def test_invalid_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        rdp_to_dp(**kwargs)
