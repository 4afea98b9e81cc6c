"""Generic noise calibration: the smallest noise scale that reaches a target epsilon.

Every noisy component calibrates through :func:`calibrate_noise` with the *same*
function the accountant uses to charge it, so calibration is the exact inverse of the
accounting. The search always lands on the safe side: the returned scale ``s``
satisfies ``epsilon_of_scale(s) <= target`` in floating point, and it raises when the
target cannot be met. (Compare ``dp_accounting.mechanism_calibration`` and Opacus'
``get_noise_multiplier``.)
"""
from __future__ import annotations

import math
from typing import Callable

from .validation import check_epsilon, check_positive

__all__ = ["calibrate_noise"]


def calibrate_noise(
    epsilon_of_scale: Callable[[float], float],
    target_epsilon: float,
    *,
    min_scale: float = 1e-12,
    max_scale: float = 1e12,
    rtol: float = 1e-12,
) -> float:
    """Smallest noise scale whose epsilon does not exceed ``target_epsilon``.

    Args:
        epsilon_of_scale: epsilon as a function of the noise scale; must be
            non-increasing (more noise never costs more privacy).
        target_epsilon: the target, ``> 0``.
        min_scale, max_scale: the search interval for the scale.
        rtol: relative precision of the returned scale.

    Returns:
        A scale ``s`` with ``epsilon_of_scale(s) <= target_epsilon``, within ``rtol``
        (relative) of the smallest such scale.

    Raises:
        ValueError: if even ``max_scale`` exceeds the target (it cannot be met), or if
            ``min_scale`` already meets it (the target needs no noise in the interval).
    """
    target = check_epsilon(target_epsilon, "target_epsilon")
    lo_s = check_positive(min_scale, "min_scale")
    hi_s = check_positive(max_scale, "max_scale")
    if not lo_s < hi_s:
        raise ValueError(f"`min_scale` must be below `max_scale`; got {min_scale!r} >= {max_scale!r}")

    def excess(log_scale: float) -> float:
        eps = float(epsilon_of_scale(math.exp(log_scale)))
        if math.isnan(eps):
            raise ValueError(f"epsilon_of_scale returned NaN at scale {math.exp(log_scale)!r}")
        return eps - target

    lo, hi = math.log(lo_s), math.log(hi_s)
    if excess(hi) > 0:
        raise ValueError(
            f"target_epsilon={target!r} cannot be met: even noise scale {hi_s:g} gives "
            f"epsilon {epsilon_of_scale(hi_s)!r}"
        )
    if excess(lo) <= 0:
        raise ValueError(
            f"target_epsilon={target!r} is already met at the smallest noise scale {lo_s:g}; "
            "widen `min_scale` or check the target"
        )
    # Geometric bracketing first: cheap, and keeps Brent away from flat plateaus.
    while hi - lo > 1.0:
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    from scipy.optimize import brentq  # SciPy's optimizers load in about half a second: imported on first use

    root = brentq(excess, lo, hi, xtol=rtol * 1e-3, rtol=rtol * 1e-2, maxiter=500)
    # Brent's root may sit a hair on the wrong side: step up until the target holds, testing
    # the very float that is returned (exp(log(s)) is not always s).
    scale = math.exp(root)
    step = scale * rtol * 1e-2
    while float(epsilon_of_scale(scale)) > target:
        scale += step
        step *= 2.0
    return scale
