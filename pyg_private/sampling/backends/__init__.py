"""The backends of the exact sampler's first pass, side by side behind one interface
(:class:`~pyg_private.sampling.backends.interface.Backend`), in order of preference:

* :mod:`~pyg_private.sampling.backends.native_c`: C loops over cache-sized chunks (CPU; optional
  extensions built at installation);
* :mod:`~pyg_private.sampling.backends.triton_ops`: one Triton launch a task (CUDA; where ``triton``
  is installed);
* :mod:`~pyg_private.sampling.backends.torch_ops`: torch operations (every device; the fallback).

All give the same samples and released values from the same words, bit for bit. The sampler asks
:func:`for_samples` and :func:`for_grid` which one serves a tensor: the first in :data:`REGISTRY`
that serves its device (and, for a grid release, fuses the grid step for its dtype and grid). A new
backend is one module defining ``BACKEND``, an instance of a :class:`Backend` subclass, added to
:data:`REGISTRY`.

The device release (:mod:`~pyg_private.sampling.device_release`) has steps of its own: the first
pass with a capacity, the finishing rounds and the write, as Triton kernels
(:mod:`~pyg_private.sampling.backends.finish_triton`) and torch operations
(:mod:`~pyg_private.sampling.backends.finish_torch`), the same bits from the same words.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import native_c, torch_ops, triton_ops
from .interface import Backend

__all__ = ["Backend", "REGISTRY", "for_samples", "for_grid"]

#: The backends in order of preference.
REGISTRY: list[Backend] = [native_c.BACKEND, triton_ops.BACKEND, torch_ops.BACKEND]


def for_samples(device: torch.device, *, contiguous: bool = True, skip: tuple[str, ...] = ()) -> Backend:
    """The backend that draws samples into a tensor on ``device`` (``skip``: names not to use)."""
    for backend in REGISTRY:
        if backend.name not in skip and backend.serves(device, contiguous):
            return backend
    raise RuntimeError(f"no backend of the exact sampler serves {device}")  # pragma: no cover - torch serves all


def for_grid(table, device: torch.device, dtype: torch.dtype, granularity: float, *, contiguous: bool = True,
             skip: tuple[str, ...] = ()) -> Optional[Backend]:
    """The backend that fuses the grid release of values of ``dtype`` on ``device`` on the grid
    ``granularity`` with ``table``'s first pass, or ``None`` (the sampler then composes the samples
    with the grid step)."""
    for backend in REGISTRY:
        if backend.name not in skip and backend.serves(device, contiguous) and \
                backend.fuses_grid(table, dtype, granularity):
            return backend
    return None
