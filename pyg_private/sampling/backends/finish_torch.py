r"""The steps of the device release (:mod:`~pyg_private.sampling.device_release`) as torch operations:
the reference of the Triton kernels of :mod:`~pyg_private.sampling.backends.finish_triton`, and the
fallback where Triton does not run. Every step has fixed shapes (no boolean indexing, no
``nonzero``, no value read on the host), so a release runs without waiting for the device.

**The slots.** A release keeps, for every task, a region of ``capacity`` *slots* for its flagged
samples (:class:`Slots`): the sample's index, its first-pass words, its rounded value ``q`` (grid
releases) and the finishing state. Slot ``S`` (one past the last) is a dummy that the torch first
pass writes what it does not list into; nothing reads it.

**The states** (:data:`EMPTY` ... :data:`EXACT`): a listed sample starts :data:`FIRST`; a round
leaves it :data:`DONE` (accepted, its noise in ``val``), :data:`PENDING` (rejected: a fresh value
of its ``cell`` next round), or hands it to the host as :data:`TIE` (an alias tie that one more
word did not decide), :data:`TAIL` (a tail cell) or :data:`EXACT` (an acceptance test that the
float64 bounds and one more word did not decide). What the host needs to continue exactly is kept:
the first-pass words and the tie word (``kl``) of a tie, the acceptance bits (``kh``) and the word
after them (``kl``) of an undecided test.

**Float arithmetic shared bit for bit with the kernels.** The acceptance ratio is the tables'
:meth:`~pyg_private.sampling.tables.AliasTable.density_ratio` with the same operations in the same
order, except that :math:`e^x` is :func:`exp_small`, a Horner polynomial of basic operations (no
library ``exp``, whose last bit differs between libraries), and the two-Laplace quotient is one
correctly rounded division: every operation is an IEEE-754 basic operation, so torch and Triton
(compiled without fused multiply-add) give the same bits. Its error stays far inside the tables'
float margin (see :func:`exp_small`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..words import WORD_BITS
from . import torch_ops

__all__ = ["EMPTY", "FIRST", "PENDING", "DONE", "TIE", "TAIL", "EXACT", "Slots", "exp_small", "finish_params",
           "max_exp_argument", "rounded", "TorchSteps", "STEPS"]

#: Slot states (see the module's docstring).
EMPTY, FIRST, PENDING, DONE, TIE, TAIL, EXACT = 0, 1, 2, 3, 4, 5, 6
_EXP_DEGREE = 12
#: ``1/k!`` for ``k = 12, 11, ..., 1``, each the float64 number nearest to it.
EXP_COEFFICIENTS = tuple(float(Fraction(1, math.factorial(k))) for k in range(_EXP_DEGREE, 0, -1))
#: The largest ``|x|`` :func:`exp_small` is used at.
EXP_RANGE = 0.125
_TWO63 = 2.0 ** WORD_BITS
_INT64_MIN = -(1 << 63)
#: Acceptance bits up to which an undecided float comparison reads one more word (the sampler's limit).
EXTEND_LIMIT = 52


@dataclass
class Slots:
    """The slot arrays of one release (``S + 1`` entries each, the last a dummy): ``idx`` (the
    sample's index in the release), ``words`` (its ``words_per_sample`` first-pass words), ``q``
    (its rounded value, grid releases only), ``state``, ``cell``, ``val`` (the value drawn last),
    ``kh`` and ``kl`` (the bits the host continues from)."""

    size: int
    idx: Tensor
    words: list[Tensor]
    q: Optional[Tensor]
    state: Tensor
    cell: Tensor
    val: Tensor
    kh: Tensor
    kl: Tensor

    @classmethod
    def of(cls, buffers: Sequence[Tensor], size: int, per: int, grid: bool) -> "Slots":
        """The slots laid over ``buffers`` (``4 + per + grid + 4`` int64 tensors of ``size + 1``)."""
        it = iter(buffers)
        idx = next(it)
        words = [next(it) for _ in range(per)]
        q = next(it) if grid else None
        state, cell, val, kh, kl = (next(it) for _ in range(5))
        return cls(size, idx, words, q, state, cell, val, kh, kl)

    @staticmethod
    def count(per: int, grid: bool) -> int:
        """How many arrays :meth:`of` takes."""
        return 1 + per + int(grid) + 5


def exp_small(x: Tensor) -> Tensor:
    r""":math:`e^x` for float64 ``x`` with :math:`|x| \le 1/8`, as the kernels compute it: the Taylor
    polynomial of degree 12 in Horner's form, ``p <- p * x + c`` from :math:`c_{12} = 1/12!` down to
    :math:`c_0 = 1`, every product and sum rounded to nearest.

    **Error.** The truncation is below :math:`|x|^{13}/13! < 2^{-72}`. Horner's rounding error
    (Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, Sec. 5.1) is at most
    :math:`\gamma_{24} \sum_k c_k |x|^k \le 24u(1 + 2^{-48})\, e^{|x|}`, and the coefficients' own
    rounding adds :math:`u\, e^{|x|}`, :math:`u = 2^{-53}`; relative to :math:`e^x \ge e^{-|x|}` the
    total is below :math:`26u\, e^{1/4} < 2^{-48}`. The tables' float margin allots :math:`2^{-44}`
    to all the float64 errors of the ratio, whose other operations (the argument, the two-Laplace
    quotient and product, the scaling of the bounds) add a few units of :math:`u`: the polynomial
    leaves it more than ten times what it needs. ``tests/mechanisms/test_device_finish.py`` compares it
    with 256-bit :math:`e^x`."""
    p = torch.full_like(x, EXP_COEFFICIENTS[0])
    for c in EXP_COEFFICIENTS[1:]:
        p.mul_(x).add_(c)
    return p.mul_(x).add_(1.0)


def max_exp_argument(t) -> float:
    """The largest ``|x|`` the table's ratio takes ``e^x`` of (an upper bound): magnitudes of one
    table cell, ``0 <= m - r < w``, ``m < C w``."""
    w, c_max = float(t.w), float(t.num_cells)
    if t.kind == "gaussian":
        return (w - 1) * (2.0 * c_max * w) * 0.5 / t.scale ** 2
    return (w - 1) / t.scale


def finish_params(t) -> list[float]:
    """The float64 constants of the finishing rounds, in the order the kernel reads them: the two
    scaled bounds, the ratio of value 0, ``-1/b``, ``-1/(2 sigma^2)``, the scale, then
    :data:`EXP_COEFFICIENTS`."""
    return [t.accept_scale, t.reject_scale, t.zero_ratio, -1.0 / t.scale, -0.5 / t.scale ** 2, t.scale,
            *EXP_COEFFICIENTS]


def density_ratio(kind: str, scale: float, m: Tensor, r: Tensor) -> Tensor:
    """:meth:`AliasTable.density_ratio` with :func:`exp_small` (the operations of the kernels)."""
    diff = (m - r).to(torch.float64)
    if kind == "gaussian":
        return exp_small(diff.mul_((m + r).to(torch.float64)).mul_(-0.5 / scale ** 2))
    e = exp_small(diff.mul_(-1.0 / scale))
    if kind == "two_laplace":
        return e.mul_((m.to(torch.float64) + scale).div_(r.to(torch.float64) + scale))
    return e


def rounded(v: Tensor, s: float, lim: float) -> Tensor:
    """``clamp(round(v * s), -lim, lim)`` as int64, half to even, a NaN as ``INT64_MIN``: the kernels'
    ``_rounded`` (the product formed in ``v``'s dtype; a subnormal ``v`` gives 0 either way)."""
    x = v * s
    x = torch.where(x > lim, lim, torch.where(x < -lim, -lim, x))  # a NaN passes both
    nan = torch.isnan(x)
    q = torch.where(nan, 0.0, x).round_().to(torch.int64)
    return q.masked_fill_(nan, _INT64_MIN)


def _layout(t, first: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Offsets and acceptance bits from a sample's words as :meth:`AliasTable.offset_and_bits`
    reads them (``first``: the words in their places; unused places may be anything)."""
    a = t.accept_bits
    if t.words_per_sample == 1:
        return (first[0] >> a) & (t.w - 1), first[0] & ((1 << a) - 1)
    if t.words_per_sample == 2:
        return first[1] >> a, first[1] & ((1 << a) - 1)
    return first[2] >> (WORD_BITS - t.j), first[1]


def fresh_words(t) -> int:
    """Fresh value words a later round reads per slot (the offset and the bits of a new value)."""
    return 1 if t.words_per_sample <= 2 else 2


class TorchSteps:
    """The three steps of the device release as torch operations (any device)."""

    name = "torch"

    def first_pass(self, t, tables: dict, words: Sequence[Tensor], target: Tensor,
                   step: Optional[tuple[float, float, float]], slots: Slots, base: int, cap: int, start: int,
                   ws: Tensor) -> None:
        """The first pass of one task: noise (``step is None``: into ``target``) or the grid release
        of ``target`` for the samples before the ``cap``-th flagged one (the values from there on
        are left as they are), the first ``cap`` flagged samples listed in slots ``base, base + 1,
        ...`` in increasing order, the count of all flagged samples into ``ws[1]``."""
        m = words[0].numel()
        device = words[0].device
        offset, bits = t.offset_and_bits(list(words))
        k = target if step is None else torch.empty(m, dtype=torch.int64, device=device)
        scratch = [torch.empty(m, dtype=torch.int64, device=device) for _ in range(3)] + \
            [torch.empty(m, dtype=torch.bool, device=device)]
        fast = [tables["packed3"]] if "packed3" in tables else [tables["base3"], tables["cheap3"]]
        flag = torch_ops.first_pass(words[0], offset, bits, k, scratch, tables["split_high"], fast,
                                    WORD_BITS - t.slot_bits, t.low_shift, t.accept_bits)
        f = flag.to(torch.int64)
        before = f.cumsum(0).sub_(f)  # flagged samples before each sample
        ws[1].copy_(f.sum())
        within = before < cap
        listed = flag & within
        pos = torch.where(listed, before + base, slots.size)  # unlisted: the dummy slot
        slots.idx.index_put_((pos,), torch.arange(start, start + m, dtype=torch.int64, device=device))
        for saved, w in zip(slots.words, words):
            saved.index_put_((pos,), w)
        if step is not None:
            s, g, lim = step
            q = rounded(target, s, lim)
            new = q.add(k).to(target.dtype).mul_(g)  # the int64 sum wraps
            target.copy_(torch.where(within & ~flag, new, target))
            slots.q.index_put_((pos,), q)

    def finish_round(self, t, tables: dict, slots: Slots, fresh: Sequence[Tensor], first: bool) -> None:
        """One finishing round over every slot, masks instead of compaction. ``first``: the listed
        samples (:data:`FIRST`) from their first-pass words, ``fresh`` = [the tie word, the extension
        word]; else the :data:`PENDING` ones with a fresh value of their cell, ``fresh`` = [the
        value's word(s), the extension word]. The extension word is left out when the acceptance
        bits exceed :data:`EXTEND_LIMIT`."""
        n = slots.size
        extend = t.accept_bits <= EXTEND_LIMIT
        state = slots.state[:n]
        active = state == (FIRST if first else PENDING)
        zero = torch.zeros(n, dtype=torch.int64, device=state.device)
        if first:
            w0 = slots.words[0][:n]
            slot = w0 >> (WORD_BITS - t.slot_bits)
            low = (w0 >> t.low_shift) & ((1 << t.split_bits) - 1)
            split = tables["split_int"].index_select(0, slot)
            tie = low == split
            v = fresh[0]
            following = tables["split_next"].index_select(0, slot)
            keep = torch.where(tie, v < following, low < split)
            tie_exact = tie & (v == following)
            cell = tables["slot_cell"].index_select(0, torch.where(keep, slot, tables["alias_t"].index_select(0, slot)))
            offset, bits = _layout(t, [w[:n] for w in slots.words])
            x = fresh[1] if extend else zero
        else:
            cell = slots.cell[:n]
            nw = fresh_words(t)
            offset, bits = _layout(t, [fresh[0]] if t.words_per_sample == 1 else [None, *fresh[:nw]])
            x = fresh[nw] if extend else zero
        value = tables["base"].index_select(0, cell) + offset
        cheap = bits < tables["cheap"].index_select(0, cell)
        m = value.abs()
        ratio = density_ratio(t.kind, t.scale, m, tables["ref"].index_select(0, cell))
        ratio = torch.where(m == 0, t.zero_ratio, ratio)
        bf = bits.to(torch.float64)
        y_acc, y_rej = ratio * t.accept_scale, ratio * t.reject_scale
        acc = (bf + 1.0) <= y_acc
        rej = ~acc & (bf >= y_rej)
        if extend:  # one more word, compared exactly (the sampler's _slow_accept)
            und = ~acc & ~rej
            lower = torch.where(und, (y_acc - bf).mul_(_TWO63), 0.0).clamp_(min=-1.0).floor_().to(torch.int64)
            upper = (y_rej - bf).mul_(_TWO63)
            can = und & (upper < _TWO63)
            upper = torch.where(can, upper, 0.0).ceil_().to(torch.int64)
            acc = acc | (und & (x < lower))
            rej = rej | (can & (x >= upper))
        new = torch.where(cheap | acc, DONE, torch.where(rej, PENDING, EXACT))
        known = x
        if first:
            new = torch.where(tie_exact, TIE, torch.where(cell >= t.pos_tail, TAIL, new))
            known = torch.where(tie_exact, v, x)
        slots.state[:n] = torch.where(active, new, state)
        slots.cell[:n] = torch.where(active, cell, slots.cell[:n])
        slots.val[:n] = torch.where(active, value, slots.val[:n])
        slots.kh[:n] = torch.where(active, bits, slots.kh[:n])
        slots.kl[:n] = torch.where(active, known, slots.kl[:n])

    def write(self, slots: Slots, target: Tensor, step: Optional[tuple[float, float, float]]) -> None:
        """The finished (:data:`DONE`) slots' noise into ``target`` at their indices, or their grid
        values ``g * (q + k)``. Fixed shapes: the other slots write what one finished slot writes
        (or ``target[0]`` its own value when none finished), so no index is written twice with
        different values."""
        n = slots.size
        flat = target.view(-1)
        done = slots.state[:n] == DONE
        idx = slots.idx[:n]
        src = slots.val[:n] if step is None else slots.q[:n].add(slots.val[:n]).to(target.dtype).mul_(step[1])
        first = done.to(torch.int8).argmax().view(1)  # (a tensor index, never a Python int: no read)
        anyone = done.any()
        rep_idx = torch.where(anyone, idx.index_select(0, first), 0)
        rep_src = torch.where(anyone, src.index_select(0, first), flat[:1])
        flat.index_put_((torch.where(done, idx, rep_idx),), torch.where(done, src, rep_src))


STEPS = TorchSteps()
