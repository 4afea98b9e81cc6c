r"""Gaussian differential privacy (Dong, Roth and Su 2022): exact conversions.

A mechanism is :math:`\mu`-GDP when distinguishing neighbours is no easier than
telling :math:`N(0, 1)` from :math:`N(\mu, 1)`. It is :math:`(\epsilon, \delta)`-DP
for every :math:`\epsilon \ge 0` with

.. math::
    \delta(\epsilon) = \Phi\left(-\frac{\epsilon}{\mu} + \frac{\mu}{2}\right)
                     - e^{\epsilon}\,\Phi\left(-\frac{\epsilon}{\mu} - \frac{\mu}{2}\right),

which is exact (no slack), and GDP composes exactly: :math:`\sqrt{\sum_i \mu_i^2}`.
All functions here are pure, keyword-friendly and evaluated in float64 via SciPy's
``log_ndtr`` so that tiny deltas do not underflow.
"""
from __future__ import annotations

import functools
import math
from types import ModuleType

import numpy as np

from .validation import check_delta, check_non_negative

__all__ = ["gdp_delta", "gdp_epsilon", "gdp_mu", "gdp_rdp"]

_MAX_MU = 1e4


def _boundary(valid, bad: float, good: float) -> float:
    """Bisect to adjacent floats between ``bad`` (``valid`` false) and ``good`` (true); return ``good``."""
    for _ in range(200):
        mid = 0.5 * (bad + good)
        if mid in (bad, good):
            break
        if valid(mid):
            good = mid
        else:
            bad = mid
    return good


@functools.cache
def _special() -> ModuleType:
    """``scipy.special``, imported on the first curve evaluated, not with the package (once: this
    function is in the calibrations' inner loops)."""
    import scipy.special

    return scipy.special


def gdp_delta(*, mu: float, epsilon: float) -> float:
    r"""The exact :math:`\delta(\epsilon)` of a :math:`\mu`-GDP mechanism."""
    mu = check_non_negative(mu, "mu")
    epsilon = check_non_negative(epsilon, "epsilon", allow_inf=True)
    if mu == 0.0 or math.isinf(epsilon):
        return 0.0
    log_ndtr = _special().log_ndtr
    log_a = float(log_ndtr(-epsilon / mu + mu / 2.0))
    log_b = epsilon + float(log_ndtr(-epsilon / mu - mu / 2.0))
    if log_b >= log_a:  # only through rounding: delta is never negative
        return 0.0
    return math.exp(log_a) * -math.expm1(log_b - log_a)


def gdp_epsilon(*, mu: float, delta: float) -> float:
    r"""The smallest :math:`\epsilon` with :math:`\delta(\epsilon) \le` ``delta`` for :math:`\mu`-GDP.

    The root is found by Brent's method on the decreasing :math:`\delta(\epsilon)` and
    then bisected to adjacent floats: the result is the smallest float (to one ulp) at
    which :math:`\delta(\epsilon) \le` ``delta`` holds, so it is never optimistic.
    """
    mu = check_non_negative(mu, "mu")
    delta = check_delta(delta)
    if mu == 0.0 or gdp_delta(mu=mu, epsilon=0.0) <= delta:
        return 0.0

    def excess(eps: float) -> float:
        return gdp_delta(mu=mu, epsilon=eps) - delta

    hi = max(1.0, mu * mu)
    while excess(hi) > 0:
        hi *= 2.0
    from scipy.optimize import brentq

    eps = brentq(excess, 0.0, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    # tighten to the float: the smallest eps (to one ulp) with delta(eps) <= delta
    good, bad = eps * (1 + 1e-9) + 1e-300, eps * (1 - 1e-9)
    while excess(good) > 0:
        good = good * 2.0
    if excess(bad) <= 0:
        bad = 0.0
    return float(_boundary(lambda e: excess(e) <= 0, bad, good))


def gdp_mu(*, epsilon: float, delta: float) -> float:
    r"""The largest :math:`\mu` such that :math:`\mu`-GDP is ``(epsilon, delta)``-DP.

    The inverse of :func:`gdp_epsilon`: the largest float (to one ulp) with
    :math:`\delta(\epsilon; \mu) \le` ``delta``, so that
    ``gdp_epsilon(mu=gdp_mu(...), delta=delta) <= epsilon``.
    """
    epsilon = check_non_negative(epsilon, "epsilon")
    delta = check_delta(delta)

    def excess(mu: float) -> float:
        return gdp_delta(mu=mu, epsilon=epsilon) - delta

    lo, hi = 1e-12, 1.0
    if excess(lo) > 0:
        raise ValueError(f"no mu > 1e-12 reaches epsilon={epsilon!r}, delta={delta!r}")
    while excess(hi) <= 0:
        hi *= 2.0
        if hi > _MAX_MU:
            raise ValueError(f"epsilon={epsilon!r}, delta={delta!r} is met by any mu up to {_MAX_MU}")
    from scipy.optimize import brentq

    mu = brentq(excess, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    # tighten to the float: the largest mu (to one ulp) with delta(epsilon; mu) <= delta
    good, bad = mu * (1 - 1e-9), mu * (1 + 1e-9)
    while excess(good) > 0:
        good = good / 2.0
    if excess(bad) <= 0:
        bad = hi
    mu = float(_boundary(lambda m: excess(m) <= 0, bad, good))
    # delta(eps; mu) wobbles at the rounding level (cancellation for small mu), so check both
    # forms of the contract on the returned float itself
    step = mu * 1e-15
    while excess(mu) > 0 or gdp_epsilon(mu=mu, delta=delta) > epsilon:
        mu -= step
        step *= 2.0
    return mu


def gdp_rdp(mu: float, orders: "tuple[float, ...] | np.ndarray") -> np.ndarray:
    r"""The RDP curve :math:`\alpha \mu^2 / 2` implied by :math:`\mu`-GDP (``inf`` at order ``inf``)."""
    mu = check_non_negative(mu, "mu")
    a = np.asarray(orders, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = a * (mu * mu) / 2.0
    if mu == 0.0:
        out = np.zeros_like(a)
    return out
