r"""Rényi DP of the Laplace mechanism (Mironov 2017, Prop. 6).

For Laplace noise of scale :math:`\sigma` (density :math:`e^{-|x|/\sigma}/2\sigma`; the
standard deviation is :math:`\sqrt2\sigma`) and a shift :math:`\rho`, with
:math:`x = \rho/\sigma`:

.. math::
    g_\alpha(\sigma, \rho) = \frac{1}{\alpha - 1}\log\left(
        \frac{\alpha}{2\alpha - 1} e^{(\alpha - 1)x} + \frac{\alpha - 1}{2\alpha - 1} e^{-\alpha x}\right),

the function :math:`g_\alpha` of Wei, Chien and Li, "Differentially Private Graph Diffusion
with Applications in Personalized PageRanks" (NeurIPS 2024, arXiv:2407.00077), Theorem 1,
evaluated with ``logaddexp`` so it never overflows. As :math:`\alpha \to \infty` it tends
to :math:`x`, the pure :math:`\epsilon`. For i.i.d. Laplace noise on several coordinates
and a shift :math:`h` with :math:`\lVert h\rVert_1 \le \rho`, the divergence is
:math:`\sum_i g_\alpha(\sigma, |h_i|)` (their App. F.2); :math:`g_\alpha` is convex in the
shift (a log-sum-exp of linear functions) and zero at 0, so the worst case puts all the
shift on one coordinate and the same :math:`g_\alpha(\sigma, \rho)` applies.
"""
from __future__ import annotations

import numpy as np

from .validation import check_non_negative, check_positive

__all__ = ["laplace_rdp", "laplace_rdp_ratio"]


def laplace_rdp_ratio(orders: "np.ndarray | tuple[float, ...] | float", ratio: "np.ndarray | float") -> np.ndarray:
    r"""Vectorised :math:`g_\alpha` as a function of the shift/scale ratio :math:`x = \rho/\sigma`.

    ``orders`` and ``ratio`` broadcast against each other (e.g. ``orders[:, None]`` and
    ``ratio[None, :]``); orders must be ``> 1`` (``inf`` allowed), ratios ``>= 0``.
    """
    a = np.asarray(orders, dtype=np.float64)
    x = np.asarray(ratio, dtype=np.float64)
    if (a <= 1).any() or np.isnan(a).any():
        raise ValueError("`orders` must all be > 1")
    if (x < 0).any() or np.isnan(x).any():
        raise ValueError("`ratio` must be non-negative")
    a, x = np.broadcast_arrays(a, x)
    out = x.astype(np.float64, copy=True)  # order inf: g = x
    fin = np.isfinite(a)
    af, xf = a[fin], x[fin]
    if af.size:
        log_p = np.log(af) - np.log(2.0 * af - 1.0) + (af - 1.0) * xf
        log_q = np.log(af - 1.0) - np.log(2.0 * af - 1.0) - af * xf
        val = np.logaddexp(log_p, log_q) / (af - 1.0)
        # g is non-negative and below x; clamp the last ulp of rounding
        out[fin] = np.clip(val, 0.0, xf)
    return out


def laplace_rdp(orders: "np.ndarray | tuple[float, ...] | float", *, sensitivity: float, scale: float) -> np.ndarray:
    r"""The Laplace RDP curve :math:`g_\alpha(\sigma, \rho)` at each order.

    Args:
        orders: Rényi orders ``> 1``; ``inf`` gives the pure epsilon ``rho / sigma``.
        sensitivity: the :math:`\ell_1` shift bound :math:`\rho \ge 0`.
        scale: the Laplace scale :math:`\sigma > 0` (not the standard deviation).
    """
    rho = check_non_negative(sensitivity, "sensitivity")
    sigma = check_positive(scale, "scale")
    return np.atleast_1d(laplace_rdp_ratio(orders, rho / sigma))
