"""The ``sampler`` / ``secure_mode`` arguments every noisy component takes, checked in one place."""
from __future__ import annotations

import threading
import warnings
from typing import Literal, Optional

import torch

from ..sampling.words import resolve_secure_mode

__all__ = ["Sampler", "FloatSamplerWarning", "check_sampler", "check_sampler_options", "check_grid_tolerance"]

Sampler = Literal["safe", "float"]


class FloatSamplerWarning(UserWarning):
    """A component uses the floating-point sampler (``sampler="float"``), which is open to
    floating-point attacks (issued once per process)."""


_float_warned = False
_float_lock = threading.Lock()


def _warn_float_sampler() -> None:
    global _float_warned
    with _float_lock:
        first, _float_warned = not _float_warned, True
    if first:
        warnings.warn(
            "sampler='float' draws floating-point Laplace/Gaussian noise, which is open to floating-point attacks "
            "(Mironov 2012; Jin et al. 2022): a float sum value + noise can be impossible under a neighbouring "
            "input and then reveals it with certainty. It is for benchmarks and audits only; the default "
            "sampler='safe' releases on a power-of-two grid with exactly sampled noise. (Its noise comes from a "
            "private generator seeded from the OS unless a `generator` is passed; this warning is issued once.)",
            FloatSamplerWarning, stacklevel=4)


def check_sampler(sampler: object) -> str:
    """``sampler`` if it is ``"safe"`` or ``"float"``; ``ValueError`` otherwise. ``"float"`` issues a
    :class:`FloatSamplerWarning` once per process."""
    if sampler not in ("safe", "float"):
        raise ValueError(f"`sampler` must be 'safe' (exact integer noise, grid-valued releases) or 'float' (the "
                         f"floating-point sampler, not safe against floating-point attacks); got {sampler!r}")
    if sampler == "float":
        _warn_float_sampler()
    return str(sampler)


def check_sampler_options(sampler: object, secure_mode: object, generator: Optional[torch.Generator], *,
                          granularity: object = None) -> tuple[str, Optional[bool]]:
    """Validate a component's ``sampler`` and ``secure_mode`` (``None``: the process-wide default)
    together with its ``generator``: ``secure_mode=True`` needs the safe sampler and no seeded
    generator (also when it comes from the process-wide default at construction time); a
    ``granularity`` belongs to the safe sampler."""
    sampler = check_sampler(sampler)
    if sampler == "float" and granularity is not None:
        raise ValueError("`granularity` is a setting of the safe sampler; the float sampler has no grid")
    if secure_mode is not None and not isinstance(secure_mode, bool):
        raise TypeError(f"`secure_mode` must be True, False or None; got {secure_mode!r}")
    if sampler == "float" and secure_mode:
        raise ValueError("`secure_mode=True` needs the safe sampler (`sampler='safe'`)")
    if sampler == "safe":
        resolve_secure_mode(secure_mode, generator)  # refuse a seeded generator in secure mode now
    return sampler, secure_mode


def check_grid_tolerance(tolerance: object) -> float:
    """``grid_tolerance`` (the bound on the grid's sensitivity inflation, relative) as a positive float."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < float("inf"):
        raise ValueError(f"`grid_tolerance` must be a positive number; got {tolerance!r}")
    return float(tolerance)
