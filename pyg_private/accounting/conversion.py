r"""RDP -> :math:`(\epsilon, \delta)` conversion, minimised over the orders including infinity.

For a finite order :math:`\alpha` we use the conversion of Balle et al. (2020,
Theorem 21), through Opacus' :func:`opacus.accountants.analysis.rdp.get_privacy_spent`:

.. math::
    \epsilon = \epsilon_{\mathrm{RDP}}(\alpha) + \log\frac{\alpha - 1}{\alpha}
               - \frac{\log \delta + \log \alpha}{\alpha - 1},

which is never looser than Mironov's :math:`\epsilon_{\mathrm{RDP}}(\alpha) +
\log(1/\delta)/(\alpha - 1)` (``conversion="standard"``, kept for comparisons with
papers that use it). The order-infinity entry is the pure-DP track:
:math:`\epsilon_{\mathrm{RDP}}(\infty)` holds with :math:`\delta = 0`, hence for every
:math:`\delta`. The result is the minimum over all tracks.
"""
from __future__ import annotations

import math
import warnings
from typing import Literal, Sequence

import numpy as np

from .validation import check_delta

__all__ = ["rdp_to_dp"]


def rdp_to_dp(
    *,
    orders: Sequence[float],
    rdp: Sequence[float],
    delta: float,
    conversion: Literal["balle", "standard"] = "balle",
) -> tuple[float, float]:
    """Convert an RDP curve to ``(epsilon, best_order)`` at ``delta``.

    Args:
        orders: Rényi orders (``> 1``; ``math.inf`` allowed).
        rdp: RDP values at those orders (``inf`` means "no bound at this order").
        delta: target delta in ``[0, 1)``; ``delta = 0`` uses the order-infinity track only.
        conversion: ``"balle"`` (default, tighter) or ``"standard"`` (Mironov, Prop. 3).

    Returns:
        ``(epsilon, order)``: the smallest epsilon over the grid and the order reaching it
        (``math.inf`` for the pure-DP track). ``(inf, nan)`` when no order gives a bound.
    """
    delta = check_delta(delta, allow_zero=True)
    a = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    if a.shape != r.shape or a.ndim != 1:
        raise ValueError(f"`orders` and `rdp` must be 1-D of equal length; got {a.shape} and {r.shape}")
    if np.isnan(r).any() or (r < 0).any():
        raise ValueError("`rdp` values must be non-negative (inf allowed), without NaN")
    if conversion not in ("balle", "standard"):
        raise ValueError(f"`conversion` must be 'balle' or 'standard'; got {conversion!r}")

    best_eps, best_order = math.inf, math.nan
    pure = np.isinf(a)
    if pure.any():
        eps_inf = float(r[pure].min())
        if eps_inf < best_eps:
            best_eps, best_order = eps_inf, math.inf
    finite = ~pure & np.isfinite(r)
    if delta > 0 and finite.any():
        af, rf = a[finite], r[finite]
        if conversion == "balle":
            # Opacus (about a second to import with its dependencies) is imported on the first conversion
            from opacus.accountants.analysis.rdp import get_privacy_spent

            with warnings.catch_warnings():  # Opacus warns when the optimum sits at a grid end
                warnings.simplefilter("ignore")
                eps, order = get_privacy_spent(orders=af, rdp=rf, delta=delta)
        else:
            cand = rf + math.log(1.0 / delta) / (af - 1.0)
            i = int(np.argmin(cand))
            eps, order = cand[i], af[i]
        eps = max(float(eps), 0.0)
        if eps < best_eps:
            best_eps, best_order = eps, float(order)
    return best_eps, best_order
