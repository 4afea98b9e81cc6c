r"""The exact noise sampler's first pass, alone and fused with the grid step, as Triton kernels: what
``_first_pass_native.c`` and ``_grid_step_native.c`` (:mod:`~pyg_private.sampling.backends.native_c`)
compute on the CPU, bit for bit, for tensors on a CUDA device (or CPU tensors under
``TRITON_INTERPRET=1``, which the tests use). The sampler runs them through
:mod:`~pyg_private.sampling.backends.triton_ops`; this module is the kernels and their launchers.

**The first pass** (:func:`first_pass_triton`, the contract of
:func:`~pyg_private.sampling.backends.native_c.native_first_pass`): per sample the word's top
bits give the alias slot, the next bits are compared with the slot's split (keep the slot below it,
take its alias above it, flag a tie), the chosen cell's base plus the offset is written to ``out``,
and the sample is flagged when its acceptance bits are not below the cell's cheap threshold. Both
table layouts of the C code: one word a sample with the packed ``(base << a) | threshold`` entries
(``packed3``), or two or three words with separate ``base3`` / ``cheap3`` tables; there the offset
and the acceptance bits are either given (as the C pass takes them) or formed in the kernel from
the second (and third) word, as :meth:`~pyg_private.sampling.tables.AliasTable.offset_and_bits`
forms them.

**The grid step** (:func:`grid_first_pass_triton`, the contract of ``_grid_step_native.grid_first_pass``):
the same noise ``k`` and, in the same program, every value ``v`` of a float32 or float64 buffer
becomes ``g * (clamp(round(v * s), -L, L) + k)``: a subnormal ``v`` becomes a zero of its sign
first (integer operations on its bits, as the C loop does), the product ``v * s`` is formed in the
buffer's dtype, the clamp comes before the rounding (comparisons, so a NaN passes through), the
rounding is half to even, a NaN becomes ``INT64_MIN``, the int64 sum wraps, and the sum is
converted to the buffer's dtype (round to nearest) and multiplied by ``g``. A flagged sample's
rounded value ``q`` is kept beside its index, so that the caller finishes its noise ``k'`` and
writes ``g * (q + k')`` over the provisional value. One, two **or three** words a sample (the C
loop takes one or two).

**How the arithmetic is kept identical.**

* *Integers.* The words are 63-bit (non-negative ``int64``), so Triton's arithmetic right shift of
  a signed word equals the C code's logical shift of ``uint64_t``; the packed entry's shift is
  arithmetic (floor) in both (the bases may be negative). The C code's unsigned comparison of the
  acceptance bits compares two values masked below ``2^a``, ``a <= 62``: non-negative, so the
  signed comparison agrees. The masks ``2^a - 1`` and ``w - 1`` are formed on the host (a shift of
  a 32-bit constant would overflow in the kernel). The int64 sum ``q + k`` wraps in both.
* *Rounding half to even.* Triton's float-to-integer conversion truncates, so the kernel rounds
  first: below ``2^52`` (float64) or ``2^23`` (float32) in magnitude, ``(x + m) - m`` with
  ``m = ±2^52`` (``±2^23``) of ``x``'s sign lies where the unit in the last place is 1, so the
  hardware's addition rounds it to an integer, ties to even (the parity of ``2^52 + n`` is ``n``'s);
  at and above, every value is an integer already. That is what ``cvtsd2si`` / ``cvtss2si``
  compute in the C loop (and its portable fallback is the same formula). The kernels are compiled
  with ``enable_fp_fusion=False``, so no product is fused into a sum.
* *Constants.* Triton passes Python floats as float32: ``s``, ``g`` and the clamp ``L`` must be
  float32 numbers (powers of two in ``[2^-100, 2^100]`` and ``2^61`` are; the wrapper checks), and
  a product of a float64 value with them is formed in float64. With ``s <= 2^100`` the C loop's
  subnormal flush is always on (the smallest normal number times ``s`` is below 1/2), and every
  result ``g * (q + k)`` is zero or normal (``|g| >= 2^-100``): a GPU that flushes float32
  subnormals to zero computes the same values.
* *Flagged indices in increasing order, one launch.* Each program takes a ticket from an atomic
  counter (in launch order of the programs that actually run), counts its flagged samples,
  publishes the count, then adds its predecessors' counts with a decoupled look-back (Merrill and
  Garland, "Single-pass parallel prefix scan with decoupled look-back", 2016): it waits only on
  programs with smaller tickets, which are already running, so it never deadlocks; the flagged
  indices are written at their rank, i.e. in increasing order, as the C loop lists them. The count
  stays a device tensor (no host synchronisation). ``compaction="sort"`` is the alternative with
  no waiting: programs reserve their slots with an atomic add (any order) and the list is sorted
  on the device afterwards (more launches, the same result).

Optional, like the C modules: without the ``triton`` package :func:`triton_available` is ``False``.
``tests/mechanisms/test_exact_noise_triton.py`` compares these kernels with the C loops and the torch
first pass.
"""
from __future__ import annotations

import contextlib
import math
from typing import Optional, Sequence

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the installation
    triton = None

__all__ = ["triton_available", "first_pass_triton", "grid_first_pass_triton", "workspace_size"]

_WORD_BITS = 63  # words.WORD_BITS (not imported: the module stays importable on its own)
#: samples per program (a power of two)
BLOCK = 1024
_COMPACTIONS = ("lookback", "sort")
_INT64_MAX = (1 << 63) - 1


def triton_available() -> bool:
    """Whether the ``triton`` package is installed (a CUDA device is still needed to run the kernels,
    except under ``TRITON_INTERPRET=1``)."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _noise_of(word, second, third, offs, inside, split_high, t1, t2, slot_shift, low_shift, accept_bits,
                  offset_mask, amask, offset_shift, MODE: tl.constexpr):
        """``(k, flag)`` of the samples ``offs``: the first pass of ``_first_pass_native.c``.
        MODE 1: one word, ``t1`` the packed entries; 0: offsets and bits given (``second``, ``third``);
        2: the second word holds offset and bits; 3: the second word is the bits, the third the offset."""
        w = tl.load(word + offs, mask=inside, other=0)
        slot = w >> slot_shift
        d = (w >> low_shift) - tl.load(split_high + slot, mask=inside, other=0)
        pick = 3 * slot + (d > 0).to(tl.int64) - (d < 0).to(tl.int64)
        if MODE == 1:
            e = tl.load(t1 + pick, mask=inside, other=0)
            k = ((w >> accept_bits) & offset_mask) + (e >> accept_bits)  # arithmetic shift of e: floor
            flag = (w & amask) >= (e & amask)
        else:
            if MODE == 0:
                offset = tl.load(second + offs, mask=inside, other=0)
                bits = tl.load(third + offs, mask=inside, other=0)
            elif MODE == 2:
                u = tl.load(second + offs, mask=inside, other=0)
                offset = u >> accept_bits
                bits = u & amask
            else:
                bits = tl.load(second + offs, mask=inside, other=0)
                offset = tl.load(third + offs, mask=inside, other=0) >> offset_shift
            k = offset + tl.load(t1 + pick, mask=inside, other=0)
            flag = bits >= tl.load(t2 + pick, mask=inside, other=0)
        return k, flag & inside

    @triton.jit
    def _ranks(flag, ticket, ws, ORDERED: tl.constexpr):
        """The positions of this program's flagged samples in the compacted list; adds their count to
        ``ws[1]``. ``ws``: [ticket counter, total, one state a program], zero at the launch. ORDERED:
        decoupled look-back (a state is ``count << 2 | 1`` once this program's count is known,
        ``inclusive prefix << 2 | 2`` once its predecessors' are), so the list is in increasing order;
        else the slots are reserved by an atomic add (any order between programs)."""
        f = flag.to(tl.int32)
        count = tl.sum(f, axis=0).to(tl.int64)
        local = (tl.cumsum(f, axis=0) - f).to(tl.int64)
        if ORDERED:
            tl.atomic_xchg(ws + 2 + ticket, (count << 2) | tl.where(ticket == 0, 2, 1), sem="release")
            prefix = count * 0
            j = ticket - 1
            while j >= 0:
                state = tl.atomic_add(ws + 2 + j, 0, sem="acquire")
                kind = state & 3
                prefix += tl.where(kind == 0, 0, state >> 2)
                j = tl.where(kind == 2, -1, tl.where(kind == 1, j - 1, j))  # 0: not published yet, poll again
            tl.atomic_xchg(ws + 2 + ticket, ((prefix + count) << 2) | 2, sem="release")
            tl.atomic_add(ws + 1, count, sem="relaxed")
        else:
            prefix = tl.atomic_add(ws + 1, count, sem="relaxed")
        return prefix + local

    @triton.jit
    def _rounded(v, s, lim, DOUBLE: tl.constexpr):
        """``clamp(round(v * s), -lim, lim)`` as int64 (a NaN becomes ``INT64_MIN``): the grid step's
        rounded value ``q`` of ``_grid_step_native.c``, for float64 (``DOUBLE``) or float32 ``v``."""
        # a subnormal value becomes a zero of its sign (flush_f64 / flush_f32 of the C loop)
        if DOUBLE:
            b = v.to(tl.int64, bitcast=True)
            sub = ((b >> 52) & 0x7FF) == 0
            v = tl.where(sub, b & (-9223372036854775807 - 1), b).to(tl.float64, bitcast=True)
            big = 4503599627370496.0  # 2^52
        else:
            b = v.to(tl.int32, bitcast=True)
            sub = ((b >> 23) & 0xFF) == 0
            v = tl.where(sub, b & (-2147483647 - 1), b).to(tl.float32, bitcast=True)
            big = 8388608.0  # 2^23
        x = v * s  # with s <= 2^100 the C loop's flush is always on (flush_ok_f64 / flush_ok_f32)
        x = tl.where(x > lim, lim, tl.where(x < -lim, -lim, x)).to(v.dtype)  # a NaN passes both
        nan = x != x
        x = tl.where(nan, 0.0, x).to(v.dtype)
        m = tl.where(x < 0, -big, big).to(v.dtype)
        r = tl.where(tl.abs(x) < big, (x + m) - m, x)  # half to even (see the module's docstring)
        return tl.where(nan, -9223372036854775807 - 1, r.to(tl.int64))

    @triton.jit
    def _first_pass_kernel(word, second, third, out, flagged, ws, n, start, split_high, t1, t2, slot_shift,
                           low_shift, accept_bits, offset_mask, amask, offset_shift, MODE: tl.constexpr,
                           ORDERED: tl.constexpr, BLOCK: tl.constexpr):
        ticket = tl.atomic_add(ws, 1, sem="relaxed")  # the programs' order of arrival
        offs = ticket * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        k, flag = _noise_of(word, second, third, offs, inside, split_high, t1, t2, slot_shift, low_shift,
                            accept_bits, offset_mask, amask, offset_shift, MODE)
        tl.store(out + offs, k, mask=inside)
        rank = _ranks(flag, ticket, ws, ORDERED)
        tl.store(flagged + rank, start + offs, mask=flag)

    @triton.jit
    def _grid_pass_kernel(word, second, third, values, flagged, kept, ws, n, start, s, g, lim, split_high, t1, t2,
                          slot_shift, low_shift, accept_bits, offset_mask, amask, offset_shift, MODE: tl.constexpr,
                          DOUBLE: tl.constexpr, ORDERED: tl.constexpr, BLOCK: tl.constexpr):
        ticket = tl.atomic_add(ws, 1, sem="relaxed")
        offs = ticket * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        k, flag = _noise_of(word, second, third, offs, inside, split_high, t1, t2, slot_shift, low_shift,
                            accept_bits, offset_mask, amask, offset_shift, MODE)
        v = tl.load(values + offs, mask=inside, other=0.0)
        q = _rounded(v, s, lim, DOUBLE)
        tl.store(values + offs, (q + k).to(v.dtype) * g, mask=inside)  # the int64 sum wraps
        rank = _ranks(flag, ticket, ws, ORDERED)
        tl.store(flagged + rank, start + offs, mask=flag)
        tl.store(kept + rank, q, mask=flag)


def workspace_size(n: int, block: int = BLOCK) -> int:
    """Entries of the int64 workspace of one launch over ``n`` samples (see ``workspace=``)."""
    return 2 + -(-int(n) // int(block))


def _check(name: str, x: Optional[Tensor], n: int, device: torch.device, dtype=torch.int64) -> None:
    if x is None or x.dtype != dtype or x.device != device or not x.is_contiguous() or x.numel() < n:
        raise RuntimeError(f"triton {name}: buffers must be contiguous {dtype} tensors on {device} of the "
                           "batch's size")


def _layout(words: Sequence[Tensor], offset: Optional[Tensor], bits: Optional[Tensor], n: int,
            device: torch.device, tables: dict, t) -> tuple:
    """The kernel's MODE, its second and third inputs, tables and integer parameters."""
    per = t.words_per_sample
    if len(words) < per:
        raise ValueError(f"this table takes {per} words a sample; got {len(words)}")
    _check("first pass", words[0], n, device)
    if per == 1:
        mode, second, third = 1, words[0], words[0]  # (never read)
        t1, t2 = tables["packed3"], tables["packed3"]
    elif offset is not None or bits is not None:
        _check("first pass", offset, n, device)
        _check("first pass", bits, n, device)
        mode, second, third = 0, offset, bits
        t1, t2 = tables["base3"], tables["cheap3"]
    else:
        for w in words[1:per]:
            _check("first pass", w, n, device)
        mode, second, third = (2, words[1], words[1]) if per == 2 else (3, words[1], words[2])
        t1, t2 = tables["base3"], tables["cheap3"]
    for table in (tables["split_high"], t1, t2):
        _check("first pass", table, 1, device)
    a = t.accept_bits
    ints = (_WORD_BITS - t.slot_bits, t.low_shift, a, t.w - 1, (1 << a) - 1, _WORD_BITS - t.j)
    return mode, second, third, tables["split_high"], t1, t2, ints


def _launch(kernel, n: int, device: torch.device, flagged: Tensor, kept: Optional[Tensor], compaction: str,
            block: int, workspace: Optional[Tensor], args: tuple, at: int, **constants) -> Tensor:
    """Zero the workspace, launch ``kernel`` over ``n`` samples (the workspace its argument ``at``);
    returns the count (a device tensor)."""
    if compaction not in _COMPACTIONS:
        raise ValueError(f"`compaction` must be one of {_COMPACTIONS}; got {compaction!r}")
    if block < 16 or block & (block - 1):
        raise ValueError(f"`block` must be a power of two, at least 16; got {block}")
    programs = triton.cdiv(n, block) if n else 0
    if workspace is None:
        ws = torch.zeros(2 + programs, dtype=torch.int64, device=device)
    else:
        _check("workspace", workspace, 2 + programs, device)
        ws = workspace[:2 + programs].zero_()
    if programs == 0:
        return ws[1]
    ordered = compaction == "lookback"
    if not ordered:
        flagged[:n].fill_(_INT64_MAX)  # the unused slots sort last
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        kernel[(programs,)](*args[:at], ws, *args[at:], ORDERED=ordered, BLOCK=block,
                            num_warps=4 if block >= 512 else (2 if block >= 128 else 1), enable_fp_fusion=False,
                            **constants)
    if not ordered:
        ranked, order = torch.sort(flagged[:n])
        flagged[:n] = ranked
        if kept is not None:
            kept[:n] = kept[:n][order]
    return ws[1]


def first_pass_triton(words: Sequence[Tensor], offset: Optional[Tensor], bits: Optional[Tensor], out: Tensor,
                      flagged: Tensor, start: int, tables: dict, t, *, compaction: str = "lookback",
                      block: int = BLOCK, workspace: Optional[Tensor] = None) -> Tensor:
    """:func:`~pyg_private.sampling.backends.native_c.native_first_pass` as one Triton launch:
    writes ``out`` (``base + offset`` of the alias-chosen cell) and the global indices
    (``start + i``) of the flagged samples into ``flagged[:count]`` in increasing order; returns
    ``count`` as a 0-dim int64 tensor on the device (no host synchronisation: read it once when the
    flagged samples are finished).

    ``words``: the sample's words (int64 in ``[0, 2^63)`` as :meth:`RandomSource.words` draws them,
    ``t.words_per_sample`` of them, contiguous, on the device of ``out``); ``tables``:
    ``t.on(device)``. With two or three words a sample, ``offset`` and ``bits`` as
    :meth:`AliasTable.offset_and_bits` gives them, or both ``None`` (formed in the kernel
    from ``words[1]`` and ``words[2]``; the same values). ``flagged`` at least as long as ``out``.

    ``workspace``: an int64 device tensor of at least :func:`workspace_size` entries (zeroed here;
    the count is its entry 1, so read the count before the workspace is reused); without it one is
    allocated. ``compaction="sort"`` allocates the sort's outputs."""
    if triton is None:
        raise RuntimeError("the triton package is not installed")
    n = out.numel()
    device = out.device
    _check("first pass", out, n, device)
    _check("first pass", flagged, n, device)
    mode, second, third, split_high, t1, t2, ints = _layout(words, offset, bits, n, device, tables, t)
    args = (words[0], second, third, out, flagged, n, int(start), split_high, t1, t2, *ints)
    return _launch(_first_pass_kernel, n, device, flagged, None, compaction, block, workspace, args, 5, MODE=mode)


def _exact_f32(x: float) -> bool:
    return math.isfinite(x) and float(torch.tensor(x, dtype=torch.float32)) == x


def grid_first_pass_triton(words: Sequence[Tensor], values: Tensor, step: tuple[float, float, float],
                           flagged: Tensor, kept: Tensor, start: int, tables: dict, t, *,
                           compaction: str = "lookback", block: int = BLOCK,
                           workspace: Optional[Tensor] = None) -> Tensor:
    """``_grid_step_native.grid_first_pass`` as one Triton launch: the first pass of
    :func:`first_pass_triton` fused with the grid step on the contiguous float32/float64 ``values``
    (in place: ``g * (clamp(round(v * s), -L, L) + k)``, ``step = (s, g, L)`` as
    :meth:`RoundedNoiseSampler.add_to_grid_` forms it). The flagged samples' global indices go to
    ``flagged[:count]`` (increasing) and their rounded values ``q`` to ``kept[:count]``; their values
    are provisional (the caller writes ``g * (q + k')`` over them). Returns ``count``, a 0-dim int64
    device tensor. ``words``: one, two or three a sample (``t.words_per_sample``), formed into offset
    and bits in the kernel. ``s`` and ``g`` must be powers of two in ``[2^-100, 2^100]`` (``s`` may be
    1) and ``L`` a float32 number (``ValueError`` otherwise). ``workspace`` as in
    :func:`first_pass_triton`."""
    if triton is None:
        raise RuntimeError("the triton package is not installed")
    n = values.numel()
    device = values.device
    if values.dtype not in (torch.float32, torch.float64) or not values.is_contiguous():
        raise RuntimeError("triton grid pass: the values must be contiguous float32 or float64")
    s, g, lim = (float(x) for x in step)
    for name, x in (("scale", s), ("granularity", g)):
        if not (2.0 ** -100 <= x <= 2.0 ** 100 and math.frexp(x)[0] == 0.5):
            raise ValueError(f"triton grid pass: the {name} must be a power of two in [2^-100, 2^100]; got {x!r}")
    if not (_exact_f32(lim) and lim > 0):
        raise ValueError(f"triton grid pass: the clamp must be a positive float32 number; got {lim!r}")
    _check("grid pass", flagged, n, device)
    _check("grid pass", kept, n, device)
    mode, second, third, split_high, t1, t2, ints = _layout(words, None, None, n, device, tables, t)
    args = (words[0], second, third, values, flagged, kept, n, int(start), s, g, lim, split_high, t1, t2, *ints)
    return _launch(_grid_pass_kernel, n, device, flagged, kept, compaction, block, workspace, args, 6, MODE=mode,
                   DOUBLE=values.dtype == torch.float64)
