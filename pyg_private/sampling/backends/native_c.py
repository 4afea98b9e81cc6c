"""The native C backend (CPU): the sampler's first pass, alone and fused with the grid step, as C loops
over a chunk of words, with the GIL released.

Two optional extensions, built from the C sources beside this module by ``setup.py`` where a C
compiler exists (``PYG_PRIVATE_NATIVE=0`` makes the package ignore them, see
:mod:`pyg_private._native`):

* ``_first_pass_native.c``: the first pass of
  :func:`~pyg_private.sampling.backends.torch_ops.first_pass` in one loop (about 1.8 ns a sample
  against 4.5 ns for the torch operations), the flagged indices compacted;
* ``_grid_step_native.c``: the grid step ``g * (clamp(round(v * s), -L, L) + k)`` alone
  (:func:`grid_step`, for :func:`~pyg_private.sampling.grid.add_noise_on_grid_`) and fused with the
  first pass (one or two words a sample; eight samples at a time in AVX-512 registers where the CPU
  has them, :data:`_GRID_SIMD`; about 1.3 ns a sample with its grid step against 1.8 + 0.8 ns for
  the two passes).

Both give the torch operations' results bit for bit (``-ffp-contract=off``: no fused multiply-add);
``tests/mechanisms/test_native_first_pass.py``, ``test_native_grid_step.py`` and
``test_fused_grid_sampling.py`` compare them.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ..._native import native_attribute
from ..words import WORD_BITS
from .interface import Backend

__all__ = ["available", "grid_step_available", "native_first_pass", "native_grid_first_pass", "grid_step", "BACKEND"]

#: The extensions, module attributes ``_first_pass_native`` and ``_grid_step_native`` (``None`` where not
#: built), loaded on first access (PEP 562): importing this module loads no shared library.
_EXTENSIONS = {"_first_pass_native": "sampling.backends._first_pass_native",
               "_grid_step_native": "sampling.backends._grid_step_native"}


def __getattr__(name: str):
    if name in _EXTENSIONS:
        return native_attribute(globals(), name, _EXTENSIONS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _first_pass_ext():
    return native_attribute(globals(), "_first_pass_native", _EXTENSIONS["_first_pass_native"])


def _grid_step_ext():
    return native_attribute(globals(), "_grid_step_native", _EXTENSIONS["_grid_step_native"])

#: Whether the fused grid pass may use its AVX-512 loop where the CPU has it (the same results as its
#: scalar loop; the tests switch it off to compare the two).
_GRID_SIMD = True


def available() -> bool:
    """Whether the fused C first pass (``_first_pass_native``) is installed; without it the same
    integer computation runs as torch operations."""
    return _first_pass_ext() is not None


def grid_step_available() -> bool:
    """Whether the C grid step (``_grid_step_native``) is installed."""
    return _grid_step_ext() is not None


def _check(name: str, n: int, *tensors: Tensor) -> None:
    for x in tensors:
        if x.dtype != torch.int64 or x.device.type != "cpu" or not x.is_contiguous() or x.numel() < n:
            raise RuntimeError(f"native {name}: buffers must be contiguous int64 CPU tensors of the chunk's size")


def native_first_pass(words: Sequence[Tensor], offset: Tensor, bits: Tensor, out: Tensor, flagged: Tensor, start: int,
                      tables: dict[str, Tensor], t) -> int:
    """The first pass in one C loop over a chunk: writes ``out`` and the indices ``start + i`` of the
    flagged samples into ``flagged[:count]``; returns ``count``. ``offset`` and ``bits`` (two or three
    words a sample) as :meth:`~pyg_private.sampling.tables.AliasTable.offset_and_bits` gives them.
    The buffers must be contiguous int64 CPU tensors of the chunk's size (``flagged`` at least as
    long; ``RuntimeError`` otherwise)."""
    n = out.numel()
    _check("first pass", n, words[0], out, flagged)
    slot_shift = WORD_BITS - t.slot_bits
    ext = _first_pass_ext()
    if t.words_per_sample == 1:
        return ext.first_pass_packed(words[0].data_ptr(), n, out.data_ptr(), flagged.data_ptr(), start,
                                     tables["split_high"].data_ptr(), tables["packed3"].data_ptr(),
                                     slot_shift, t.low_shift, t.accept_bits, t.w - 1)
    return ext.first_pass_split(words[0].data_ptr(), offset.data_ptr(), bits.data_ptr(), n,
                                out.data_ptr(), flagged.data_ptr(), start,
                                tables["split_high"].data_ptr(), tables["base3"].data_ptr(),
                                tables["cheap3"].data_ptr(), slot_shift, t.low_shift)


def native_grid_first_pass(words: Sequence[Tensor], values: Tensor, step: tuple[float, float, float], index: Tensor,
                           kept: Tensor, start: int, tables: dict[str, Tensor], t) -> int:
    """The first pass fused with the grid step in one C loop over a chunk of contiguous float32 or
    float64 CPU ``values`` (in place), one or two words a sample: the flagged samples' indices
    ``start + i`` into ``index[:count]`` and their rounded values into ``kept[:count]``; returns
    ``count``."""
    m = values.numel()
    per = t.words_per_sample
    table1, table2 = (tables["packed3"], None) if per == 1 else (tables["base3"], tables["cheap3"])
    return _grid_step_ext().grid_first_pass(
        words[0].data_ptr(), 0 if per == 1 else words[1].data_ptr(), m, values.data_ptr(),
        64 if values.dtype == torch.float64 else 32, step[0], step[1], step[2], index.data_ptr(), kept.data_ptr(),
        start, tables["split_high"].data_ptr(), table1.data_ptr(), 0 if table2 is None else table2.data_ptr(),
        WORD_BITS - t.slot_bits, t.low_shift, t.accept_bits, t.w - 1, _GRID_SIMD)


def grid_step(values: Tensor, noise: Tensor, scale: float, granularity: float, clamp: float) -> None:
    """``values <- g * (clamp(round(values * scale), -L, L) + noise)`` in one C loop (contiguous
    float32/float64 CPU ``values``, contiguous int64 CPU ``noise`` of the same size; the caller checks)."""
    _grid_step_ext().grid_step(values.data_ptr(), noise.data_ptr(), values.numel(),
                               64 if values.dtype == torch.float64 else 32, scale, granularity, clamp)


class NativeC(Backend):
    """The C loops, a chunk at a time, on contiguous CPU tensors."""

    name = "native_c"
    devices = {"cpu"}

    def available(self) -> bool:
        return _first_pass_ext() is not None

    def scratch(self, size: int, device: torch.device, grid: bool) -> list[Tensor]:
        # grid: the flagged indices and their rounded values; else the offsets, the bits, the flagged indices
        return [torch.empty(size, dtype=torch.int64) for _ in range(2 if grid else 3)]

    def first_pass(self, table, tables: dict[str, Tensor], words: Sequence[Tensor], out: Tensor,
                   scratch: list[Tensor]) -> Tensor:
        offset = bits = None
        if table.words_per_sample > 1:
            m = out.numel()
            offset, bits = table.offset_and_bits(words, out=(scratch[0][:m], scratch[1][:m]))
        flagged = scratch[2]
        return flagged[:native_first_pass(words, offset, bits, out, flagged, 0, tables, table)]

    def fuses_grid(self, table, dtype: torch.dtype, granularity: float) -> bool:
        return (_grid_step_ext() is not None and table.words_per_sample <= 2
                and dtype in (torch.float32, torch.float64) and 2.0 ** -100 <= granularity <= 2.0 ** 100)

    def grid_first_pass(self, table, tables: dict[str, Tensor], words: Sequence[Tensor], values: Tensor,
                        step: tuple[float, float, float], scratch: list[Tensor]) -> tuple[Tensor, Tensor]:
        index, kept = scratch
        count = native_grid_first_pass(words, values, step, index, kept, 0, tables, table)
        return index[:count], kept[:count]


BACKEND = NativeC()
