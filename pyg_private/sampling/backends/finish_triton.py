r"""The steps of the device release (:mod:`~pyg_private.sampling.device_release`) as Triton kernels:
what :class:`~pyg_private.sampling.backends.finish_torch.TorchSteps` computes, bit for bit, in one
launch a step, on a CUDA device (or CPU tensors under ``TRITON_INTERPRET=1``, as the tests run them).

* **The first pass of a task with a capacity** (``_release_samples_kernel``,
  ``_release_grid_kernel``): the first pass of
  :mod:`~pyg_private.sampling.backends.triton_kernels` (its ``_noise_of``, its decoupled look-back
  ``_ranks`` and its grid rounding ``_rounded``), where each sample also learns how many flagged
  samples precede it. The first ``cap`` flagged samples are listed in the task's slots with their
  words and rounded values; a grid release writes every value before the ``cap``-th flagged sample
  except the flagged ones, and leaves every value from there on untouched (the host redraws them if
  the slots fill up, see :mod:`~pyg_private.sampling.device_release`). The flagged count is the
  launch's workspace entry 1, on the device.
* **A finishing round** (``_round_kernel``): every slot in one launch, masks instead of compaction.
* **The write** (``_write_kernel``): the finished slots' noise, or grid values, at their indices.

The float arithmetic of a round is float64 basic operations only (the Horner ``exp`` of
:func:`~pyg_private.sampling.backends.finish_torch.exp_small`; a float64 division, ``div.rn.f64``),
its constants read from a float64 tensor (Triton would pass a Python float as float32), the kernels
compiled without fused multiply-add: the torch steps' bits. Integers as in
:mod:`~pyg_private.sampling.backends.triton_kernels` (63-bit words, so arithmetic shifts are logical
ones; masks formed on the host).
"""
from __future__ import annotations

import contextlib
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..words import WORD_BITS
from . import triton_kernels as X
from .finish_torch import EXTEND_LIMIT, Slots, fresh_words

__all__ = ["TritonSteps", "STEPS"]

triton = X.triton
if triton is not None:
    import triton.language as tl

    _noise_of, _ranks, _rounded = X._noise_of, X._ranks, X._rounded

    @triton.jit
    def _save(flag, within, c, offs, start, word, second, third, idx, sw0, sw1, sw2, PER: tl.constexpr):
        """List the flagged samples below the capacity at their ranks ``c``: index and words."""
        listed = flag & within
        tl.store(idx + c, start + offs, mask=listed)
        tl.store(sw0 + c, tl.load(word + offs, mask=listed, other=0), mask=listed)
        if PER >= 2:
            tl.store(sw1 + c, tl.load(second + offs, mask=listed, other=0), mask=listed)
        if PER == 3:
            tl.store(sw2 + c, tl.load(third + offs, mask=listed, other=0), mask=listed)
        return listed

    @triton.jit(do_not_specialize=["n", "start", "cap"])
    def _release_samples_kernel(word, second, third, out, idx, sw0, sw1, sw2, ws, n, start, cap, split_high, t1, t2,
                                slot_shift, low_shift, accept_bits, offset_mask, amask, offset_shift,
                                MODE: tl.constexpr, PER: tl.constexpr, ORDERED: tl.constexpr, BLOCK: tl.constexpr):
        ticket = tl.atomic_add(ws, 1, sem="relaxed")
        offs = ticket * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        k, flag = _noise_of(word, second, third, offs, inside, split_high, t1, t2, slot_shift, low_shift,
                            accept_bits, offset_mask, amask, offset_shift, MODE)
        tl.store(out + offs, k, mask=inside)
        c = _ranks(flag, ticket, ws, ORDERED)  # flagged samples before each sample (ORDERED: always)
        _save(flag, c < cap, c, offs, start, word, second, third, idx, sw0, sw1, sw2, PER)

    @triton.jit(do_not_specialize=["n", "start", "cap"])
    def _release_grid_kernel(word, second, third, values, idx, sw0, sw1, sw2, kept, ws, n, start, cap, s, g, lim,
                             split_high, t1, t2, slot_shift, low_shift, accept_bits, offset_mask, amask,
                             offset_shift, MODE: tl.constexpr, PER: tl.constexpr, DOUBLE: tl.constexpr,
                             ORDERED: tl.constexpr, BLOCK: tl.constexpr):
        ticket = tl.atomic_add(ws, 1, sem="relaxed")
        offs = ticket * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        k, flag = _noise_of(word, second, third, offs, inside, split_high, t1, t2, slot_shift, low_shift,
                            accept_bits, offset_mask, amask, offset_shift, MODE)
        v = tl.load(values + offs, mask=inside, other=0.0)
        q = _rounded(v, s, lim, DOUBLE)
        c = _ranks(flag, ticket, ws, ORDERED)
        within = c < cap
        tl.store(values + offs, (q + k).to(v.dtype) * g, mask=inside & within & (flag == 0))  # the sum wraps
        listed = _save(flag, within, c, offs, start, word, second, third, idx, sw0, sw1, sw2, PER)
        tl.store(kept + c, q, mask=listed)

    @triton.jit
    def _exp_small(x, params):
        # finish_torch.exp_small: Horner from 1/12! (params[6]) down to 1/1! (params[17]), then 1
        p = tl.zeros_like(x) + tl.load(params + 6)
        for i in tl.static_range(1, 12):
            p = p * x + tl.load(params + 6 + i)
        return p * x + 1.0

    @triton.jit
    def _density(m, r, params, KIND: tl.constexpr):
        # finish_torch.density_ratio; KIND 0 Laplace, 1 Gaussian, 2 two-Laplace
        diff = (m - r).to(tl.float64)
        if KIND == 1:
            e = _exp_small((diff * (m + r).to(tl.float64)) * tl.load(params + 4), params)
        else:
            e = _exp_small(diff * tl.load(params + 3), params)
            if KIND == 2:
                scale = tl.load(params + 5)
                e = e * ((m.to(tl.float64) + scale) / (r.to(tl.float64) + scale))  # div.rn.f64
        return e

    @triton.jit
    def _layout(w0, w1, w2, accept_bits, offset_mask, amask, offset_shift, PER: tl.constexpr):
        if PER == 1:
            offset = (w0 >> accept_bits) & offset_mask
            bits = w0 & amask
        elif PER == 2:
            offset = w1 >> accept_bits
            bits = w1 & amask
        else:
            offset = w2 >> offset_shift
            bits = w1
        return offset, bits

    @triton.jit(do_not_specialize=["n"])
    def _round_kernel(state, cell, val, kh, kl, w0p, w1p, w2p, f0p, f1p, fxp, split_int, split_next, alias_t,
                      slot_cell, base, cheap, ref, params, n, slot_shift, low_shift, split_mask, accept_bits,
                      offset_mask, amask, offset_shift, pos_tail, FIRST: tl.constexpr, PER: tl.constexpr,
                      KIND: tl.constexpr, EXTEND: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        st = tl.load(state + offs, mask=inside, other=0)
        if FIRST:
            active = inside & (st == 1)
            w0 = tl.load(w0p + offs, mask=active, other=0)
            slot = w0 >> slot_shift
            low = (w0 >> low_shift) & split_mask
            split = tl.load(split_int + slot, mask=active, other=0)
            tie = low == split
            v = tl.load(f0p + offs, mask=active, other=0)
            following = tl.load(split_next + slot, mask=active, other=0)
            keep = tl.where(tie, v < following, low < split)
            tie_exact = tie & (v == following)
            chosen = tl.where(keep, slot, tl.load(alias_t + slot, mask=active, other=0))
            c = tl.load(slot_cell + chosen, mask=active, other=0)
            w1 = w0
            w2 = w0
            if PER >= 2:
                w1 = tl.load(w1p + offs, mask=active, other=0)
            if PER == 3:
                w2 = tl.load(w2p + offs, mask=active, other=0)
            offset, bits = _layout(w0, w1, w2, accept_bits, offset_mask, amask, offset_shift, PER)
        else:
            active = inside & (st == 2)
            c = tl.load(cell + offs, mask=active, other=0)
            f0 = tl.load(f0p + offs, mask=active, other=0)
            f1 = f0
            if PER == 3:
                f1 = tl.load(f1p + offs, mask=active, other=0)
            offset, bits = _layout(f0, f0, f1, accept_bits, offset_mask, amask, offset_shift, PER)
        if EXTEND:
            x = tl.load(fxp + offs, mask=active, other=0)
        else:
            x = offs * 0
        value = tl.load(base + c, mask=active, other=0) + offset
        cheap_ok = bits < tl.load(cheap + c, mask=active, other=0)
        m = tl.where(value < 0, -value, value)
        ratio = _density(m, tl.load(ref + c, mask=active, other=1), params, KIND)
        ratio = tl.where(m == 0, tl.load(params + 2), ratio)
        bf = bits.to(tl.float64)
        y_acc = ratio * tl.load(params + 0)
        y_rej = ratio * tl.load(params + 1)
        acc = (bf + 1.0) <= y_acc
        rej = (acc == 0) & (bf >= y_rej)
        if EXTEND:  # one more word, compared exactly
            und = (acc == 0) & (rej == 0)
            lower = tl.where(und, (y_acc - bf) * 9223372036854775808.0, 0.0)
            lower = tl.floor(tl.where(lower < -1.0, -1.0, lower)).to(tl.int64)
            upper = (y_rej - bf) * 9223372036854775808.0
            can = und & (upper < 9223372036854775808.0)
            upper = tl.ceil(tl.where(can, upper, 0.0)).to(tl.int64)
            acc = acc | (und & (x < lower))
            rej = rej | (can & (x >= upper))
        new = tl.where(cheap_ok | acc, 3, tl.where(rej, 2, 6)).to(tl.int64)
        known = x
        if FIRST:
            new = tl.where(tie_exact, 4, tl.where(c >= pos_tail, 5, new)).to(tl.int64)
            known = tl.where(tie_exact, v, x)
        tl.store(state + offs, new, mask=active)
        tl.store(cell + offs, c, mask=active)
        tl.store(val + offs, value, mask=active)
        tl.store(kh + offs, bits, mask=active)
        tl.store(kl + offs, known, mask=active)

    @triton.jit(do_not_specialize=["n"])
    def _write_kernel(state, idx, val, q, target, n, g, GRID: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        done = (offs < n) & (tl.load(state + offs, mask=offs < n, other=0) == 3)
        i = tl.load(idx + offs, mask=done, other=0)
        k = tl.load(val + offs, mask=done, other=0)
        if GRID:
            total = tl.load(q + offs, mask=done, other=0) + k  # wraps
            tl.store(target + i, total.to(target.dtype.element_ty) * g, mask=done)
        else:
            tl.store(target + i, k, mask=done)

_KINDS = {"laplace": 0, "gaussian": 1, "two_laplace": 2}
_ROUND_BLOCK = 256


def _device(t: Tensor):
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


def _warps(block: int) -> int:
    return 4 if block >= 512 else (2 if block >= 128 else 1)


class TritonSteps:
    """:class:`~pyg_private.sampling.backends.finish_torch.TorchSteps` as Triton launches."""

    name = "triton"

    def first_pass(self, t, tables: dict, words: Sequence[Tensor], target: Tensor,
                   step: Optional[tuple[float, float, float]], slots: Slots, base: int, cap: int, start: int,
                   ws: Tensor) -> None:
        n = words[0].numel()
        per = t.words_per_sample
        mode, second, third, split_high, t1, t2, ints = X._layout(words, None, None, n, target.device, tables, t)
        saved = [w[base:] for w in slots.words] + [slots.words[0][base:]] * (3 - per)
        head = (words[0], second, third, target, slots.idx[base:], *saved)
        if step is None:
            args = head + (n, int(start), int(cap), split_high, t1, t2, *ints)
            X._launch(_release_samples_kernel, n, target.device, None, None, "lookback", X.BLOCK, ws, args, 8,
                      MODE=mode, PER=per)
        else:
            s, g, lim = (float(x) for x in step)
            args = head + (slots.q[base:], n, int(start), int(cap), s, g, lim, split_high, t1, t2, *ints)
            X._launch(_release_grid_kernel, n, target.device, None, None, "lookback", X.BLOCK, ws, args, 9,
                      MODE=mode, PER=per, DOUBLE=target.dtype == torch.float64)

    def finish_round(self, t, tables: dict, slots: Slots, fresh: Sequence[Tensor], first: bool) -> None:
        n = slots.size
        if n == 0:
            return
        per = t.words_per_sample
        extend = t.accept_bits <= EXTEND_LIMIT
        w = slots.words + [slots.words[0]] * (3 - per)
        if first:
            f0, f1, fx = fresh[0], fresh[0], fresh[1] if extend else fresh[0]
        else:
            nw = fresh_words(t)
            f0, f1 = fresh[0], fresh[nw - 1]
            fx = fresh[nw] if extend else fresh[0]
        a = t.accept_bits
        ints = (WORD_BITS - t.slot_bits, t.low_shift, (1 << t.split_bits) - 1, a, t.w - 1, (1 << a) - 1,
                WORD_BITS - t.j, t.pos_tail)
        names = ("split_int", "split_next", "alias_t", "slot_cell", "base", "cheap", "ref", "finish_f64")
        with _device(slots.state):
            _round_kernel[(triton.cdiv(n, _ROUND_BLOCK),)](
                slots.state, slots.cell, slots.val, slots.kh, slots.kl, w[0], w[1], w[2], f0, f1, fx,
                *(tables[k] for k in names), n, *ints, FIRST=bool(first), PER=per, KIND=_KINDS[t.kind],
                EXTEND=extend, BLOCK=_ROUND_BLOCK, num_warps=_warps(_ROUND_BLOCK), enable_fp_fusion=False)

    def write(self, slots: Slots, target: Tensor, step: Optional[tuple[float, float, float]]) -> None:
        n = slots.size
        if n == 0:
            return
        grid = step is not None
        g = float(step[1]) if grid else 1.0
        with _device(slots.state):
            _write_kernel[(triton.cdiv(n, _ROUND_BLOCK),)](
                slots.state, slots.idx, slots.val, slots.q if grid else slots.val, target, n, g, GRID=grid,
                BLOCK=_ROUND_BLOCK, num_warps=_warps(_ROUND_BLOCK), enable_fp_fusion=False)


STEPS = TritonSteps()
