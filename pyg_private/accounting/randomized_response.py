r"""Rényi DP of binary randomized response (Mironov 2017, Prop. 5).

A bit is reported truthfully with probability :math:`q \in (1/2, 1)` and flipped
otherwise. With :math:`q = e^\epsilon / (1 + e^\epsilon)` it is pure
:math:`\epsilon`-DP, and its RDP curve is

.. math::
    \epsilon(\alpha) = \frac{1}{\alpha - 1}\log\left(q^\alpha (1 - q)^{1 - \alpha}
                      + (1 - q)^\alpha q^{1 - \alpha}\right),

tending to :math:`\log(q / (1 - q))` as :math:`\alpha \to \infty`. The edge-flipping
mechanism of ``specs/noisy_diffusion.md`` §4.2 (replace each adjacency bit by a
uniform bit with probability :math:`p`) is randomized response with
:math:`q = 1 - p/2`; one edge changes one bit, so the edge-level cost is this curve.
"""
from __future__ import annotations

import math

import numpy as np

from .validation import check_epsilon, check_probability

__all__ = ["randomized_response_rdp", "truth_probability"]


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
        return float(1.0 / (1.0 + math.exp(-eps)))
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
