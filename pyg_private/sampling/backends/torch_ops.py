"""The torch backend: the sampler's first pass as torch operations, on any device (the fallback, and
the reference the other backends are compared with). No fused grid step: the sampler composes the
samples with :func:`~pyg_private.sampling.grid.add_noise_on_grid_`."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ..words import WORD_BITS
from .interface import Backend

__all__ = ["first_pass", "BACKEND"]


def first_pass(word: Tensor, offset: Tensor, bits: Tensor, out: Tensor, scratch: tuple[Tensor, Tensor, Tensor, Tensor],
               split_high: Tensor, tables: list[Tensor], slot_shift: int, low_shift: int, accept_bits: int) -> Tensor:
    """One pass over a batch: writes ``base + offset`` of the alias-chosen cell into ``out`` and
    returns the flags of the samples the eager code must finish (an alias tie, a tail cell, bits the
    cheap threshold does not accept), in ``scratch[3]``.

    ``offset`` and ``bits`` come from :meth:`~pyg_private.sampling.tables.AliasTable.offset_and_bits`;
    ``tables`` is ``[packed]`` (base and threshold in one entry) or ``[base, threshold]``, indexed by
    ``3 slot + sign(low - split)``: keep the slot below its split, take the alias above it, and
    flag a tie. Slot 0 holds an empty cell whose split is 0, so its index is never negative.
    Integer arithmetic and two or three table gathers, no boolean masks, every result in
    ``scratch`` (three int64 buffers and a bool one of the batch's size)."""
    slot, pick, entry, flag = scratch
    torch.bitwise_right_shift(word, slot_shift, out=slot)
    torch.bitwise_right_shift(word, low_shift, out=pick)
    pick.sub_(torch.index_select(split_high, 0, slot, out=entry)).sign_().add_(slot, alpha=3)
    if len(tables) == 1:
        torch.index_select(tables[0], 0, pick, out=entry)
        torch.add(offset, torch.bitwise_right_shift(entry, accept_bits, out=slot), out=out)
        return torch.ge(bits, entry.bitwise_and_((1 << accept_bits) - 1), out=flag)
    torch.add(offset, torch.index_select(tables[0], 0, pick, out=entry), out=out)
    return torch.ge(bits, torch.index_select(tables[1], 0, pick, out=entry), out=flag)


class TorchOps(Backend):
    """:func:`first_pass` chunk by chunk, on any device, strided ``out`` included."""

    name = "torch"
    devices = None
    contiguous_only = False

    def scratch(self, size: int, device: torch.device, grid: bool) -> list[Tensor]:
        # offset, bits, then first_pass's slot, pick, entry and flag
        return [torch.empty(size, dtype=torch.int64, device=device) for _ in range(5)] + \
            [torch.empty(size, dtype=torch.bool, device=device)]

    def first_pass(self, table, tables: dict[str, Tensor], words: Sequence[Tensor], out: Tensor,
                   scratch: list[Tensor]) -> Tensor:
        m = out.numel()
        part = [b[:m] for b in scratch]
        offset, bits = table.offset_and_bits(words, out=(part[0], part[1]))
        fast = [tables["packed3"]] if "packed3" in tables else [tables["base3"], tables["cheap3"]]
        flag = first_pass(words[0], offset, bits, out, (part[2], part[3], part[4], part[5]), tables["split_high"],
                          fast, WORD_BITS - table.slot_bits, table.low_shift, table.accept_bits)
        return flag.nonzero().squeeze(1)


BACKEND = TorchOps()
