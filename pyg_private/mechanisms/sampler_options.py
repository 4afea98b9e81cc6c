"""The ``sampler`` / ``secure_mode`` arguments every noisy component takes, checked in one place."""
from __future__ import annotations

from typing import Literal, Optional

import torch

from .randomness import resolve_secure_mode

__all__ = ["Sampler", "check_sampler", "check_sampler_options", "check_grid_tolerance"]

Sampler = Literal["safe", "float"]


def check_sampler(sampler: object) -> str:
    """``sampler`` if it is ``"safe"`` or ``"float"``; ``ValueError`` otherwise."""
    if sampler not in ("safe", "float"):
        raise ValueError(f"`sampler` must be 'safe' (exact integer noise, grid-valued releases) or 'float' (the "
                         f"floating-point sampler, not safe against floating-point attacks); got {sampler!r}")
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
