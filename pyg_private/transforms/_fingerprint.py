"""CRC-32 fingerprints of the raw inputs a noisy transform has released.

A noisy ``BaseTransform`` used as a dataset's ``transform=`` runs again at every access,
on a fresh copy of the same raw data that carries no mark of the previous release. The
transforms remember a fingerprint of every raw input they released and refuse a second
release of the same input unless the caller opts in (``allow_recompose=True``).
"""
from __future__ import annotations

import zlib

import torch
from torch import Tensor

__all__ = ["crc32_update", "crc32_rows"]


def crc32_update(chunk: Tensor, crc: int = 0) -> int:
    """``crc`` updated with a 2-D chunk: the CRC-32 of its bytes on the CPU; elsewhere the
    CRC-32 of two float64 reductions per row (its sum and a weighted sum), so that only
    ``2 * rows`` numbers cross to the host."""
    if chunk.device.type == "cpu":
        return zlib.crc32(chunk.contiguous().view(torch.uint8).numpy() if chunk.dtype == torch.bfloat16
                          else chunk.contiguous().numpy(), crc)
    c = chunk.to(torch.float64)
    w = torch.linspace(1.0, 2.0, c.size(1), dtype=torch.float64, device=c.device)
    summary = torch.stack([c.sum(1), c.mv(w)]).cpu().numpy()
    return zlib.crc32(summary, crc)


def crc32_rows(t: Tensor, rows: int = 1 << 20) -> int:
    """The fingerprint of a whole 2-D tensor, ``rows`` rows at a time."""
    crc = 0
    for start in range(0, t.size(0), rows):
        crc = crc32_update(t[start:start + rows], crc)
    return crc
