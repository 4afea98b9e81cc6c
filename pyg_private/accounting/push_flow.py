r"""Sensitivity and calibration of DP-PushFlowCap (Epasto et al., NeurIPS 2022).

The capped push-flow PPR of :func:`pyg_private.utils.push_flow_cap_ppr` lets node
:math:`v` push a total flow of at most :math:`\eta\, d_v` over the whole run. Epasto et
al. (Theorem 4.3, as implemented in google-research ``private_personalized_pagerank``)
bound the :math:`\ell_1` change of its output when one edge changes by

.. math::
    \Delta_1 = (3 - \alpha)\,\big(1 - (1 - \alpha)^{T}\big)\,\eta

for restart probability :math:`\alpha` and :math:`T` push iterations; personalized use
(the seed uncapped) covers edges not incident to the seed only. The release adds
i.i.d. :math:`\mathrm{Lap}(0, b)` to every coordinate, so one column costs the Laplace
RDP curve :math:`g_\alpha(b, \Delta_1)` (all the shift on one coordinate is the worst
case: the multi-dimensional Laplace bound of Wei, Chien and Li, NeurIPS 2024,
arXiv:2407.00077, App. F.2, Eq. (46)); :math:`C` columns released to one party compose
to :math:`C\,g_\alpha(b, \Delta_1)`. The bound is checked by brute force on small graphs
in ``tests/nn/test_push_flow_sensitivity.py``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .calibration import calibrate_noise
from .conversion import rdp_to_dp
from .laplace import laplace_rdp
from .orders import DEFAULT_ORDERS, check_orders
from .validation import check_delta, check_epsilon, check_positive, check_positive_int, check_restart_probability

__all__ = ["push_flow_sensitivity", "push_flow_rdp", "push_flow_noise_scale"]


def push_flow_sensitivity(*, eta: float, alpha: float, num_iterations: int) -> float:
    r""":math:`\Delta_1 = (3 - \alpha)(1 - (1 - \alpha)^T)\,\eta`, the :math:`\ell_1` edge
    sensitivity of the capped push-flow output."""
    eta = check_positive(eta, "eta")
    alpha = check_restart_probability(alpha)
    t = check_positive_int(num_iterations, "num_iterations")
    return (3.0 - alpha) * -np.expm1(t * np.log1p(-alpha)) * eta


def push_flow_rdp(orders: Sequence[float] = DEFAULT_ORDERS, *, noise_scale: float, eta: float, alpha: float,
                  num_iterations: int, num_columns: int = 1) -> np.ndarray:
    """RDP curve of a release of ``num_columns`` DP-PushFlowCap columns with Laplace scale ``noise_scale``."""
    orders = check_orders(orders)
    sens = push_flow_sensitivity(eta=eta, alpha=alpha, num_iterations=num_iterations)
    c = check_positive_int(num_columns, "num_columns")
    return c * laplace_rdp(orders, sensitivity=sens, scale=check_positive(noise_scale, "noise_scale"))


def push_flow_noise_scale(*, epsilon: float, delta: float, eta: float, alpha: float, num_iterations: int,
                          num_columns: int = 1, orders: Sequence[float] = DEFAULT_ORDERS) -> float:
    """Smallest Laplace scale whose ``num_columns``-column release meets ``(epsilon, delta)``.

    ``delta = 0`` is the pure target :math:`b = C\\Delta_1/\\epsilon`; otherwise the
    RDP curve is converted at ``delta`` (as the paper does for this baseline) and
    inverted by monotone root finding, on the safe side.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=True)
    sens = push_flow_sensitivity(eta=eta, alpha=alpha, num_iterations=num_iterations)
    c = check_positive_int(num_columns, "num_columns")
    if d == 0.0:
        return c * sens / eps
    orders = check_orders(orders)

    def eps_of(b: float) -> float:
        rdp = push_flow_rdp(orders, noise_scale=b, eta=eta, alpha=alpha, num_iterations=num_iterations,
                            num_columns=c)
        return rdp_to_dp(orders=orders, rdp=rdp, delta=d)[0]

    return calibrate_noise(eps_of, eps, min_scale=sens * 1e-12, max_scale=2.0 * c * sens / eps)
