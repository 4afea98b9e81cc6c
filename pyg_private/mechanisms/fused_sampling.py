r"""An optional compiled first pass of the exact rounded-noise samplers (``torch.compile``).

The exact samplers of :mod:`pyg_private.mechanisms.exact_integer_noise` spend their time in about
twenty elementwise integer operations per sample (the alias step, the uniform offset in the cell,
the cheap acceptance test, the sign). Run one operation at a time they cost about 25 ns a sample on
a CPU core; fused into one loop by ``torch.compile`` (Inductor's C++ backend) about 5 ns. The fused
pass computes **the same function of the same random words** as the eager code: every sample whose
cell tie, acceptance test or tail needs more than the cheap integer comparison is flagged and
finished by the eager code, exactly as before. So enabling it changes the speed, never a sample.

It needs a C++ compiler at run time and compiles for about 5-20 seconds on first use (Inductor
caches the result on disk for later processes), so it is **off by default**: enable it with
:func:`set_compiled_samplers` or the environment variable ``PYG_PRIVATE_COMPILE_SAMPLERS=1``. If
compilation fails, the samplers fall back to the eager code with a warning.
"""
from __future__ import annotations

import os
import threading
import warnings
from typing import Callable, Optional

import torch
from torch import Tensor

__all__ = ["set_compiled_samplers", "compiled_samplers_enabled", "first_pass", "fused_first_pass",
           "compilation_failed"]

_state = {"enabled": os.environ.get("PYG_PRIVATE_COMPILE_SAMPLERS", "0") == "1", "fn": None, "failed": False}
_lock = threading.Lock()


def set_compiled_samplers(enabled: bool) -> None:
    """Use (or stop using) the compiled first pass in every exact sampler of this process."""
    if not isinstance(enabled, bool):
        raise TypeError(f"`enabled` must be True or False; got {enabled!r}")
    _state["enabled"] = enabled


def compiled_samplers_enabled() -> bool:
    """Whether the compiled first pass is enabled (it may still have fallen back to eager)."""
    return bool(_state["enabled"]) and not _state["failed"]


def first_pass(w1: Tensor, w2: Tensor, w3: Tensor, split_int: Tensor, alias: Tensor, cheap: Tensor,
               consts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One pass over uniform 63-bit words: the alias cell, the signed candidate value, the offset
    and acceptance bits, and a flag for the samples the eager code must finish.

    ``consts`` (``int64``): slot shift, split shift, split mask, offset shift, offset mask,
    acceptance mask, cell width exponent ``j``, tail cell. ``w3`` is ``w2`` when the offset shares
    the acceptance word."""
    slot = w1 >> consts[0]
    low = (w1 >> consts[1]) & consts[2]
    split = split_int[slot]
    cell = torch.where(low < split, slot, alias[slot])
    negative = w2 >> 62
    offset = (w3 >> consts[3]) & consts[4]
    bits = w2 & consts[5]
    k = (cell << consts[6]) + offset
    accept = bits < cheap[cell]
    value = (k ^ -negative) + negative
    flag = (low == split) | (~accept) | (cell == consts[7])
    return value, cell, offset, bits, flag


def fused_first_pass() -> Optional[Callable]:
    """The compiled :func:`first_pass`, or ``None`` when disabled or unavailable."""
    if not compiled_samplers_enabled():
        return None
    with _lock:
        if _state["fn"] is None:
            _state["fn"] = torch.compile(first_pass, dynamic=False)  # compiled at its first call
    return _state["fn"]


def compilation_failed(error: Exception) -> None:
    """Record that the compiled pass failed (no compiler, unsupported platform): eager from now on."""
    _state["failed"] = True
    warnings.warn(f"compiled samplers unavailable ({type(error).__name__}: {error}); using the eager code",
                  RuntimeWarning, stacklevel=3)
