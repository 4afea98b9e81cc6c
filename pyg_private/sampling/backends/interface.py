"""What a backend of the exact sampler is: the first pass over a batch of random words, alone and fused
with the grid step, and where it runs.

The first pass (stated as torch operations in :func:`~pyg_private.sampling.backends.torch_ops.first_pass`)
turns each sample's words into the alias-chosen cell's ``base + offset`` and flags the samples the
sampler must finish itself (an alias tie, a tail cell, acceptance bits the cheap threshold does not
accept; about 1%). The grid first pass does the same and, in the same loop, writes the grid release
``g * (clamp(round(v * s), -L, L) + k)`` over every value ``v``, keeping the rounded value ``q`` of
each flagged sample so that the sampler can write ``g * (q + k')`` once its noise ``k'`` is finished.
Every backend computes exactly the same integers and floats from the same words; the tests compare
them bit for bit. What a backend does not do: draw words, split work into tasks and chunks, borrow
scratch buffers or finish flagged samples; :class:`~pyg_private.sampling.sampler.RoundedNoiseSampler`
does that, the same way for every backend.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from ..tables import AliasTable

__all__ = ["Backend"]


class Backend:
    """One implementation of the first pass. Subclasses set the class attributes and override
    :meth:`first_pass` (and, where they fuse the grid step, :meth:`fuses_grid` and
    :meth:`grid_first_pass`); one instance, ``BACKEND``, per module, named in
    :data:`pyg_private.sampling.backends.REGISTRY`."""

    #: A short name (the scratch pool's keys; ``RoundedNoiseSampler.native = False`` skips ``"native_c"``).
    name: str = ""
    #: The device types it serves (``None``: every device).
    devices: Optional[set[str]] = None
    #: Whether it takes only contiguous tensors (``out`` of the samples, the values of a grid release).
    contiguous_only: bool = True
    #: ``False``: a task's words are drawn and passed a cache-sized chunk at a time (CPU loops);
    #: ``True``: all the task's words are drawn first (chunk by chunk, in the same order) and passed
    #: in one call (one launch, and one synchronisation to read the flagged count).
    whole_task: bool = False

    def available(self) -> bool:
        """Whether it can run in this installation (its extension built, its package installed)."""
        return True

    def serves(self, device: torch.device, contiguous: bool = True) -> bool:
        """Whether it runs the first pass of tensors on ``device`` (contiguous or not)."""
        return ((self.devices is None or device.type in self.devices) and (contiguous or not self.contiguous_only)
                and self.available())

    def scratch(self, size: int, device: torch.device, grid: bool) -> list[Tensor]:
        """New scratch buffers for batches of up to ``size`` samples on ``device`` (``grid``: for
        :meth:`grid_first_pass`), handed back to every call; the sampler pools them."""
        return []

    def first_pass(self, table: "AliasTable", tables: dict[str, Tensor], words: Sequence[Tensor], out: Tensor,
                   scratch: list[Tensor]) -> Tensor:
        """The first pass of one batch: ``words`` (``table.words_per_sample`` int64 tensors of the
        batch's size, as the source drew them), ``tables`` (``table.on(device)``), the values into
        ``out``. Returns the indices (in the batch, increasing, int64) of the flagged samples."""
        raise NotImplementedError

    def fuses_grid(self, table: "AliasTable", dtype: torch.dtype, granularity: float) -> bool:
        """Whether :meth:`grid_first_pass` takes values of ``dtype`` on the grid ``granularity``
        with this table (otherwise the sampler composes :meth:`first_pass` and the grid step)."""
        return False

    def grid_first_pass(self, table: "AliasTable", tables: dict[str, Tensor], words: Sequence[Tensor],
                        values: Tensor, step: tuple[float, float, float],
                        scratch: list[Tensor]) -> tuple[Tensor, Tensor]:
        """The first pass of one batch fused with the grid step on ``values`` (in place;
        ``step = (s, g, L)``). Returns the flagged samples' indices (in the batch, increasing) and
        their rounded values ``q`` (views of the scratch buffers: the sampler copies them)."""
        raise NotImplementedError
