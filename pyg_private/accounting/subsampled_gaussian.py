r"""RDP of DP-SGD: the Poisson-subsampled Gaussian mechanism, through Opacus.

We do not re-derive Mironov, Talwar and Zhang's (2019) analysis: finite orders are
computed by :func:`opacus.accountants.analysis.rdp.compute_rdp`. Its numerics get
slow and lose meaning at astronomic orders, so orders above ``max_order`` are
reported as ``inf`` (no bound claimed), as are orders where its arithmetic overflows, which is always safe; order ``inf`` is ``inf``
(the subsampled Gaussian is not pure DP). With ``sample_rate == 1`` the mechanism is
the plain Gaussian mechanism, exactly :math:`\sqrt{T}/\sigma`-GDP.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .validation import check_positive, check_positive_int, check_probability

__all__ = ["subsampled_gaussian_rdp"]

#: Orders above this are left unbounded for subsampled Gaussian curves.
MAX_SUBSAMPLED_ORDER = 4096.0


def subsampled_gaussian_rdp(
    orders: "np.ndarray | tuple[float, ...]",
    *,
    noise_multiplier: float,
    sample_rate: float,
    steps: int = 1,
    max_order: float = MAX_SUBSAMPLED_ORDER,
) -> np.ndarray:
    """RDP of ``steps`` subsampled Gaussian steps at each order (``inf`` above ``max_order``)."""
    sigma = check_positive(noise_multiplier, "noise_multiplier")
    q = check_probability(sample_rate, "sample_rate", low_open=True)
    steps = check_positive_int(steps, "steps")
    a = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    out = np.full_like(a, math.inf)
    ok = np.isfinite(a) & (a <= max_order)
    if ok.any():
        vals = _one_step_rdp(q, sigma, tuple(a[ok].tolist())) * steps  # compute_rdp's own rule: steps x one step
        # Opacus' log-space sums overflow to NaN at very large orders: claim no bound there.
        out[ok] = np.where(np.isfinite(vals) & (vals >= 0), vals, math.inf)
    return out


@functools.lru_cache(maxsize=1024)
def _one_step_rdp(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    """One step's RDP at ``orders`` (cached: the calibrations evaluate the same curve many times;
    read-only)."""
    from opacus.accountants.analysis.rdp import compute_rdp  # Opacus is imported on the first curve computed

    with np.errstate(all="ignore"):
        vals = np.asarray(compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=list(orders)), dtype=np.float64)
    vals.setflags(write=False)
    return vals
