r"""Rényi DP of binary randomized response (Mironov 2017, Prop. 5).

A bit is reported truthfully with probability :math:`q \in (1/2, 1)` and flipped
otherwise. With :math:`q = e^\epsilon / (1 + e^\epsilon)` it is pure
:math:`\epsilon`-DP, and its RDP curve is

.. math::
    \epsilon(\alpha) = \frac{1}{\alpha - 1}\log\left(q^\alpha (1 - q)^{1 - \alpha}
                      + (1 - q)^\alpha q^{1 - \alpha}\right),

tending to :math:`\log(q / (1 - q))` as :math:`\alpha \to \infty`. The Edge-Flipping
baseline of Wei, Chien and Li (NeurIPS 2024, arXiv:2407.00077, Sec. 4.1 and App. E),
which replaces each adjacency bit by a uniform bit with probability :math:`p`, is
randomized response with :math:`q = 1 - p/2`; one edge changes one bit, so the
edge-level cost is this curve.
"""
from __future__ import annotations

import math

import numpy as np

from .validation import check_epsilon, check_probability

__all__ = ["randomized_response_rdp", "truth_probability", "calibrated_truth_probability",
           "resolve_truth_probability"]


def truth_probability(*, epsilon: float | None = None, flip_probability: float | None = None) -> float:
    r"""The probability :math:`q` of reporting the true bit.

    Exactly one of ``epsilon`` (then :math:`q = e^\epsilon/(1+e^\epsilon)`) or
    ``flip_probability`` :math:`p \in (0, 1]` (replace by a uniform bit with probability
    :math:`p`, so :math:`q = 1 - p/2`) must be given.
    """
    if (epsilon is None) == (flip_probability is None):
        raise ValueError("give exactly one of `epsilon` or `flip_probability`")
    if epsilon is not None:
        eps = check_epsilon(epsilon)
        q = float(1.0 / (1.0 + math.exp(-eps)))
        if not q < 1.0:
            raise ValueError(f"`epsilon` = {eps!r} is too large for randomized response: the probability of the "
                             "true bit rounds to 1 in float64 (no randomisation); use epsilon < 36")
        # the samplers draw with this float q exactly: round it down until q / (1 - q) <= e^epsilon holds
        # exactly (checked in 256-bit arithmetic), so the mechanism run is never above epsilon
        import mpmath  # imported on the first calibration, not with the module

        with mpmath.workprec(256):
            bound = mpmath.exp(mpmath.mpf(eps))
            while mpmath.mpf(q) > bound * (1 - mpmath.mpf(q)):
                q = math.nextafter(q, 0.0)
        return q
    p = check_probability(flip_probability, "flip_probability", low_open=True)
    return 1.0 - p / 2.0


def randomized_response_rdp(orders: "np.ndarray | tuple[float, ...] | float", *, q: float) -> np.ndarray:
    r"""The RDP curve of binary randomized response with truth probability ``q``."""
    q = check_probability(q, "q")
    if not 0.5 <= q < 1.0:
        raise ValueError(f"`q` (probability of the true bit) must lie in [0.5, 1); got {q!r}")
    a = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    if (a <= 1).any() or np.isnan(a).any():
        raise ValueError("`orders` must all be > 1")
    lq, lp = math.log(q), math.log1p(-q)
    pure = lq - lp
    out = np.empty_like(a)
    inf = np.isinf(a)
    out[inf] = pure
    af = a[~inf]
    if af.size:
        val = np.logaddexp(af * lq + (1.0 - af) * lp, af * lp + (1.0 - af) * lq) / (af - 1.0)
        out[~inf] = np.clip(val, 0.0, pure)
    return out


def calibrated_truth_probability(*, epsilon: float, delta: float, orders: "tuple[float, ...] | None" = None) -> float:
    r"""The largest :math:`q` whose randomized-response curve converts to at most
    ``(epsilon, delta)``-DP.

    ``delta = 0`` is the pure :math:`q = e^\epsilon/(1+e^\epsilon)`. For ``delta > 0``
    the curve is converted at ``delta`` (the accountant's rule) and inverted by monotone
    root finding on the flip probability :math:`p = 2(1-q)`, on the safe side. It is how
    Wei et al. (2024) calibrate the Edge-Flipping baseline (RDP converted at
    :math:`\delta = 1/|E|`); the gain over the pure calibration is small.
    """
    from .calibration import calibrate_noise
    from .conversion import rdp_to_dp
    from .orders import DEFAULT_ORDERS, check_orders
    from .validation import check_delta

    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=True)
    pure_q = truth_probability(epsilon=eps)
    if d == 0.0:
        return pure_q
    grid = check_orders(DEFAULT_ORDERS if orders is None else orders)

    def eps_of_flip(p: float) -> float:
        return rdp_to_dp(orders=grid, rdp=randomized_response_rdp(grid, q=1.0 - p / 2.0), delta=d)[0]

    pure_p = 2.0 * (1.0 - pure_q)
    flip = calibrate_noise(eps_of_flip, eps, min_scale=pure_p * 1e-6, max_scale=min(1.0, 2.0 * pure_p))
    return 1.0 - flip / 2.0


def resolve_truth_probability(*, epsilon: float | None = None, delta: float | None = None,
                              flip_probability: float | None = None) -> float:
    """:math:`q` from ``epsilon`` (pure), ``epsilon`` with ``delta`` (calibrated on the RR
    curve at ``delta``) or ``flip_probability``: the argument rule of the RR-based modules."""
    if delta is not None:
        if epsilon is None:
            raise ValueError("`delta` is only used with `epsilon`")
        if flip_probability is not None:
            raise ValueError("give exactly one of `epsilon` or `flip_probability`")
        return calibrated_truth_probability(epsilon=epsilon, delta=delta)
    return truth_probability(epsilon=epsilon, flip_probability=flip_probability)
