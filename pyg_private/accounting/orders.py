"""The grid of Rényi orders the library evaluates RDP curves on.

Opacus' default grid stops at order 63. That is wrong for this library. Laplace and
PABI guarantees (Wei, Chien and Li, NeurIPS 2024, arXiv:2407.00077) are converted to
(epsilon, delta) by their Prop. E.1, ``eps_RDP(alpha) + log(1/delta) / (alpha - 1)``, which
is tightest as the order goes to infinity (the Laplace curve becomes linear there and the
``log(1/delta)`` term vanishes); a grid capped at 64 cannot certify an epsilon below
``log(1/delta) / 63`` (about 0.2 at delta = 3e-6). Our grid runs from 1.01 up to
1e6 (Opacus' orders up to 63, log-spaced above 64) and ends with ``math.inf``, the pure-DP limit
``D_inf = lim D_alpha``.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

__all__ = ["DEFAULT_ORDERS", "check_orders"]


def _default_orders() -> tuple[float, ...]:
    # Opacus' RDPAccountant grid (1.1 ... 10.9 by 0.1, then 12 ... 63) is a subset, so a
    # DP-SGD-only ledger is never looser here than in Opacus.
    small = [1.01, 1.02, 1.05] + [1 + x / 10.0 for x in range(1, 100)]
    mid = [float(a) for a in range(11, 65)]
    large = list(np.geomspace(64.0, 1e6, 60)[1:])
    grid = sorted({round(float(a), 10) for a in small + mid + large})
    return tuple(grid) + (math.inf,)


#: Rényi orders used when a caller gives none: 1.01 ... 1e6 and ``math.inf``.
DEFAULT_ORDERS: tuple[float, ...] = _default_orders()


def check_orders(orders: Iterable[float], name: str = "orders") -> tuple[float, ...]:
    """Validate a grid of Rényi orders: each ``> 1`` (``inf`` allowed), strictly increasing."""
    try:
        grid = tuple(float(a) for a in orders)
    except TypeError:
        raise TypeError(f"`{name}` must be an iterable of numbers; got {orders!r}") from None
    if not grid:
        raise ValueError(f"`{name}` must contain at least one order")
    for a in grid:
        if math.isnan(a) or a <= 1:
            raise ValueError(f"`{name}`: every Rényi order must be > 1 (math.inf allowed); got {a!r}")
    if any(b <= a for a, b in zip(grid, grid[1:])):
        raise ValueError(f"`{name}` must be strictly increasing")
    return grid
