"""Argument checks shared by the accounting functions and the noisy components.

Every check raises a ``ValueError`` (or ``TypeError``) that names the argument, the
allowed range and the value received, never an ``assert``.
"""
from __future__ import annotations

import math
from numbers import Real

__all__ = [
    "check_epsilon",
    "check_delta",
    "check_positive",
    "check_non_negative",
    "check_probability",
    "check_positive_int",
    "check_restart_probability",
]


def _as_float(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"`{name}` must be a real number; got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"`{name}` must not be NaN")
    return value


def check_epsilon(epsilon: object, name: str = "epsilon", *, allow_inf: bool = False) -> float:
    """``epsilon > 0`` (finite unless ``allow_inf``)."""
    eps = _as_float(epsilon, name)
    if eps <= 0 or (math.isinf(eps) and not allow_inf):
        rng = "(0, inf]" if allow_inf else "(0, inf)"
        raise ValueError(f"`{name}` must lie in {rng}; got {epsilon!r}")
    return eps


def check_delta(delta: object, name: str = "delta", *, allow_zero: bool = False) -> float:
    """``0 < delta < 1`` (or ``0 <= delta < 1`` when ``allow_zero``)."""
    d = _as_float(delta, name)
    low_ok = d >= 0 if allow_zero else d > 0
    if not (low_ok and d < 1):
        rng = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"`{name}` must lie in {rng}; got {delta!r}")
    return d


def check_positive(value: object, name: str, *, allow_inf: bool = False) -> float:
    """``value > 0`` and finite (unless ``allow_inf``)."""
    v = _as_float(value, name)
    if v <= 0 or (math.isinf(v) and not allow_inf):
        raise ValueError(f"`{name}` must be a positive {'' if allow_inf else 'finite '}number; got {value!r}")
    return v


def check_non_negative(value: object, name: str, *, allow_inf: bool = False) -> float:
    """``value >= 0`` and finite (unless ``allow_inf``)."""
    v = _as_float(value, name)
    if v < 0 or (math.isinf(v) and not allow_inf):
        raise ValueError(f"`{name}` must be a non-negative {'' if allow_inf else 'finite '}number; got {value!r}")
    return v


def check_probability(value: object, name: str, *, low_open: bool = False, high_open: bool = False) -> float:
    """``value`` in [0, 1], with either end optionally open."""
    v = _as_float(value, name)
    low_ok = v > 0 if low_open else v >= 0
    high_ok = v < 1 if high_open else v <= 1
    if not (low_ok and high_ok):
        rng = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ValueError(f"`{name}` must lie in {rng}; got {value!r}")
    return v


def check_restart_probability(value: object, name: str = "alpha") -> float:
    """A PPR restart probability, in the open interval (0, 1)."""
    a = check_positive(value, name)
    if not a < 1.0:
        raise ValueError(f"`{name}` (restart probability) must lie in (0, 1); got {value!r}")
    return a


def check_positive_int(value: object, name: str) -> int:
    """An ``int`` >= 1 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                value = int(value)
            else:
                raise TypeError
        except TypeError:
            raise TypeError(f"`{name}` must be an integer; got {type(value).__name__} {value!r}") from None
    if value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1; got {value!r}")
    return int(value)
