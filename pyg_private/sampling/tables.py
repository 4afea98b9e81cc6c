r"""The exact alias tables of the rounded noise distributions: pure math (``mpmath``, 256 bits), no state
but a cache, no random words.

A table describes how :class:`~pyg_private.sampling.sampler.RoundedNoiseSampler` turns uniform 63-bit
words into exact samples of the rounded Laplace, rounded Gaussian or rounded two-Laplace distribution
(the distributions are defined in :mod:`pyg_private.sampling.sampler`):

**Cells and the alias choice.** The integers are grouped into signed cells of :math:`w = 2^j`
consecutive values, :math:`w \approx` scale / 2^r (the positive cells :math:`[cw, cw + w)`, the
negative cells :math:`(-(c + 1)w, -cw]`, so that a value is always ``base[cell] + offset`` and no
sign is applied). A cell is chosen with Walker's alias method (Walker, "An efficient method for
generating discrete random variables with general distributions", ACM TOMS 1977; Vose, "A linear
algorithm for generating random numbers with a given distribution", IEEE TSE 1991) whose table is
computed once, in 256-bit arithmetic, from the exact cell probabilities: the top bits of a word give
the slot, the next bits are compared with the slot's split point.

**The value in its cell.** A value in the cell is drawn uniformly (``j`` random bits) and accepted
with probability :math:`P(K = k) / \max_{\text{cell}} P`, which is at least 0.7 and close to 1 in
the bulk; the acceptance bits are first compared with an integer threshold below the cell's
smallest probability (:meth:`AliasTable._build_cheap`, which accepts about 99% of the samples), and
only the others with :math:`\exp(\cdot)` evaluated in float64 (:meth:`AliasTable.density_ratio`),
decided only when the bits lie farther than a proven margin from it (:math:`2^{-44}` relative for
the Laplace ratio, which is exact; :math:`26/\sigma^2 + 2^{-44}` for the Gaussian, covering the
integral's deviation from the density ratio; :math:`1/(12 b^2) + 2^{-44}` for the sum of two
Laplace, see :meth:`AliasTable.two_laplace_margin`). The exact probabilities
(:meth:`AliasTable.pmf_m`, :meth:`AliasTable.tail_mass`) decide what the float comparison cannot.

**The word layout** (:meth:`AliasTable._layout`). When the slot, 12 split bits, the offset and at
least 8 acceptance bits fit in one word (noise scales up to about :math:`2^{35}` steps), a sample
reads one word; otherwise two or three. The outermost tail (beyond 10 standard deviations, 50
Laplace scales or 55 scales of the two-Laplace sum) has cells of its own, drawn exactly by inversion.

**The fast-path tables** (:meth:`AliasTable._build_fast`): per alias slot and side of its split, the
chosen cell's base and cheap threshold, indexed so that the first pass is integer arithmetic and
gathers only (:mod:`pyg_private.sampling.backends`); :meth:`AliasTable.on` keeps a copy per device.
"""
from __future__ import annotations

import functools
import math
from typing import Literal

import torch
from torch import Tensor

from .words import WORD_BITS

__all__ = ["AliasTable", "alias_table", "vose_alias", "mp_context", "Kind", "KINDS", "MIN_SCALE", "MAX_SCALE"]

Kind = Literal["laplace", "gaussian", "two_laplace"]

#: Smallest noise scale (Laplace ``b`` or Gaussian ``sigma``) in grid steps.
MIN_SCALE = 2.0 ** 20
#: Largest one: samples stay below 2^62 in magnitude, and float64 holds every cell offset exactly.
MAX_SCALE = 2.0 ** 46
_PREC = 256  # bits of the alias tables and of every exact comparison
_SPLIT_SHORT = 12  # bits compared with an alias split when one word holds a whole sample
_SPLIT_LONG = 50  # ... when the split has a word of its own
_MIN_ACCEPT = 8  # fewest acceptance bits of the one-word layout
# table covers |k| < T * scale; beyond: exact tail path (mass e^-50 = 2e-22, 2 Phi(-10) = 2e-23,
# e^-55 (2 + 55) / 2 = 3.7e-23 for the two-Laplace sum)
_TAILS = {"laplace": 50.0, "gaussian": 10.0, "two_laplace": 55.0}
_CELLS = {"laplace": 5, "gaussian": 7, "two_laplace": 5}  # r: about 2^r cells per scale
_FLOAT_MARGIN = 2.0 ** -44

#: The kinds of noise a table is made for.
KINDS = tuple(_TAILS)


def mp_context(prec: int = _PREC):
    """A fresh ``mpmath`` context of ``prec`` bits (256 by default: the tables and every exact comparison)."""
    import mpmath  # here, not with the module: the tables are built on the first noise drawn

    ctx = mpmath.MPContext()
    ctx.prec = prec
    return ctx


class AliasTable:
    r"""The alias table of the signed cells of one distribution, and the fast-path tables (cached).

    **Cells.** With :math:`w = 2^j` and :math:`C` cells per side: the positive cell :math:`c`
    holds the values :math:`[cw, cw + w)`, the negative cell :math:`C + c` the values
    :math:`(-(c + 1)w, -cw]` (the same magnitudes), each with half the mass of the magnitudes
    :math:`M = |K|` in :math:`[cw, (c + 1)w)`; the tail cells :math:`2C` and :math:`2C + 1` hold
    :math:`K \ge Cw` and :math:`K \le -Cw`. (Value 0 lies in both cells 0, with half of
    :math:`P(M = 0)` in each.) A value is ``base[cell] + offset``, ``offset`` uniform in
    :math:`[0, w)`, accepted with probability :math:`P(M = |k|) / P(M = r)`, :math:`r` the cell's
    most likely magnitude (:math:`cw`, or 1 in cell 0)."""

    def __init__(self, kind: Kind, scale: float) -> None:
        self.kind, self.scale = kind, float(scale)
        ctx = mp_context()
        self.ctx = ctx
        r = _CELLS[kind]
        self.j = int(math.floor(math.log2(self.scale))) - r  # cell width w = 2^j, scale / w in [2^r, 2^(r+1))
        self.w = w = 1 << self.j
        self.num_cells = c_max = int(math.ceil(_TAILS[kind] * self.scale / w))  # magnitudes below C w per side
        self.pos_tail, self.neg_tail = 2 * c_max, 2 * c_max + 1
        self.slot_bits = max(1, int(math.ceil(math.log2(2 * c_max + 3))))  # at least one empty cell
        slots = 1 << self.slot_bits
        survival = [ctx.mpf(1)] + [self.tail_mass(c * w) for c in range(1, c_max + 1)]  # P(M >= cw)
        half = [(survival[c] - survival[c + 1]) / 2 for c in range(c_max)]  # P(M in [cw, (c+1)w)) / 2
        masses = half + half + [survival[-1] / 2] * 2 + [ctx.mpf(0)] * (slots - 2 * c_max - 2)
        total = ctx.fsum(masses)
        # slot s holds cell s - 1 (mod slots): slot 0 holds the last, empty, cell (see backends.torch_ops.first_pass)
        self.split, self.alias = vose_alias(ctx, [m / total for m in masses[-1:] + masses[:-1]])
        assert self.split[0] == 0
        cells = range(slots)
        self.base = torch.tensor([c * w if c < c_max else -(c - c_max + 1) * w + 1 if c < 2 * c_max else 0
                                  for c in cells], dtype=torch.int64)
        self.ref = torch.tensor([max((c % c_max) * w, 1) if c < 2 * c_max else 1 for c in cells], dtype=torch.int64)
        self.margin = _FLOAT_MARGIN + (26.0 / self.scale ** 2 if kind == "gaussian" else
                                       self.two_laplace_margin(self.scale) if kind == "two_laplace" else 0.0)
        if kind == "laplace":  # P(M = 0) / P(M = 1) = e^x / (1 + e^-x), x = 1 / (2b)
            x = 0.5 / self.scale
            self.zero_ratio = math.exp(x) / (1.0 + math.exp(-x))
        elif kind == "two_laplace":  # from the exact probabilities (about 1/2): within 2^-52 of it
            self.zero_ratio = float(self.pmf_m(0) / self.pmf_m(1))
        else:  # P(M = 0) / P(M = 1) = exp(1 / (2 sigma^2)) / 2, up to the margin
            self.zero_ratio = 0.5 * math.exp(0.5 / self.scale ** 2)
        self._layout()
        self._build_cheap()
        self._build_fast()

    # -- the word layout ----------------------------------------------------------------------------
    def _layout(self) -> None:
        """Which bits of which word each field takes. One word when it holds the slot, 12 split
        bits, the ``j`` offset bits and at least 8 acceptance bits (about 1.5% of the samples then
        miss the cheap threshold, against 1% with many bits; a tie, probability 2^-12, costs one
        more word); else a second word for the
        offset and the acceptance bits (a third for the offset when ``j > 33``)."""
        sb, j = self.slot_bits, self.j
        if WORD_BITS - sb - j - _SPLIT_SHORT >= _MIN_ACCEPT:
            self.words_per_sample, self.split_bits = 1, _SPLIT_SHORT
            self.accept_bits = WORD_BITS - sb - _SPLIT_SHORT - j
        else:
            self.split_bits = min(_SPLIT_LONG, WORD_BITS - sb)
            self.words_per_sample = 2 if WORD_BITS - j >= 30 else 3
            self.accept_bits = WORD_BITS - j if self.words_per_sample == 2 else WORD_BITS
        # the float comparisons: accept when (bits + 1) / 2^b <= ratio (1 - m), reject when
        # bits / 2^b >= ratio (1 + m); 2^-50 covers the rounding of bits and of the products
        self.accept_scale = (1.0 - self.margin - 2.0 ** -50) * 2.0 ** self.accept_bits
        self.reject_scale = (1.0 + self.margin + 2.0 ** -50) * 2.0 ** self.accept_bits

    def offset_and_bits(self, words: list[Tensor], out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """The cell offsets and the acceptance bits of a batch of samples (into ``out`` when given;
        with three words the bits are the second word itself)."""
        a = self.accept_bits
        offset, bits = out if out is not None else (None, None)
        if self.words_per_sample == 1:
            offset = torch.bitwise_right_shift(words[0], a, out=offset).bitwise_and_(self.w - 1)
            return offset, torch.bitwise_and(words[0], (1 << a) - 1, out=bits)
        if self.words_per_sample == 2:
            return (torch.bitwise_right_shift(words[1], a, out=offset),
                    torch.bitwise_and(words[1], (1 << a) - 1, out=bits))
        return torch.bitwise_right_shift(words[2], WORD_BITS - self.j, out=offset), words[1]

    # -- the fast-path tables -----------------------------------------------------------------------
    def _build_cheap(self) -> None:
        """Per cell, an integer threshold below which the acceptance bits accept every value of the
        cell: the float estimate of the cell's smallest acceptance probability (at its far end, or
        value 0 in cell 0) times ``(1 - margin) 2^accept_bits``, less one. The tail cells and the
        padding get 0: every sample there is flagged (a tail value is then drawn exactly)."""
        c_max, w = self.num_cells, self.w
        ref = self.ref[:c_max]
        low = self.density_ratio(torch.arange(c_max, dtype=torch.int64) * w + w - 1, ref)  # far ends
        low[0] = min(float(low[0]), self.zero_ratio)
        thresholds = (low * self.accept_scale).floor_().to(torch.int64).sub_(1)
        self.cheap = torch.cat([thresholds, thresholds,
                                torch.zeros(len(self.split) - 2 * c_max, dtype=torch.int64)])

    def _build_fast(self) -> None:
        """The split tables for ``split_bits`` bits and the tables of the first pass
        (:func:`~pyg_private.sampling.backends.torch_ops.first_pass`), indexed by
        ``3 slot + sign(low - split)``: the chosen cell's base and cheap threshold (0 for a tie)."""
        s = self.split_bits
        fixed = [s_ * (1 << s) for s_ in self.split]
        self.split_int = torch.tensor([int(self.ctx.floor(f)) for f in fixed], dtype=torch.int64)
        self.split_next = torch.tensor([int(self.ctx.floor((f - self.ctx.floor(f)) * (1 << WORD_BITS))) for f in fixed],
                                       dtype=torch.int64)
        self.alias_t = torch.tensor(self.alias, dtype=torch.int64)
        n = len(self.split)
        slots = torch.arange(n, dtype=torch.int64)
        self.slot_cell = (slots - 1) % n
        self.split_high = (slots << s) + self.split_int  # compared with slot 2^s + low
        # index 3 slot + sign(low - split): 3 s - 1 keeps the slot, 3 s + 1 takes its alias, 3 s is a tie
        i = torch.arange(3 * n - 1, dtype=torch.int64) + 1
        slot, side = i // 3, i % 3
        cell = torch.where(side == 0, self.slot_cell[slot], self.slot_cell[self.alias_t[slot]])
        tie = side == 1
        self.base3 = torch.where(tie, 0, self.base[cell])
        self.cheap3 = torch.where(tie, 0, self.cheap[cell])  # a tie is always flagged
        # one word: base and threshold in one entry (|base| < 2^(slot_bits - 1 + j), so it fits)
        self.packed3 = (self.base3 << self.accept_bits) | self.cheap3 if self.words_per_sample == 1 else None
        self.low_shift = WORD_BITS - self.slot_bits - s
        self._devices = {}
        self.derived = {}  # quantities their users derive from these tables (device_release), cached

    def on(self, device: torch.device) -> dict[str, Tensor]:
        """The integer tables on ``device``."""
        names = ("split_high", "packed3", "base3", "cheap3", "split_int", "split_next", "alias_t", "slot_cell", "base",
                 "cheap", "ref")
        if device not in self._devices:
            self._devices[device] = {name: getattr(self, name).to(device) for name in names
                                     if getattr(self, name) is not None}
        return self._devices[device]

    # -- the float ratio ----------------------------------------------------------------------------
    def density_ratio(self, m: Tensor, r: Tensor) -> Tensor:
        """float64 ratio of the continuous densities at magnitudes ``m`` and ``r`` (integers,
        ``0 <= m - r < w``): within ``margin`` of ``P(M = m) / P(M = r)`` for ``1 <= r``, and for the
        Laplace kinds never above it."""
        diff = (m - r).to(torch.float64)
        if self.kind == "laplace":
            return diff.mul_(-1.0 / self.scale).exp_()
        if self.kind == "two_laplace":  # e^{-(m - r)/b} (b + m) / (b + r)
            poly = (m.to(torch.float64) + self.scale).div_(r.to(torch.float64) + self.scale)
            return diff.mul_(-1.0 / self.scale).exp_().mul_(poly)
        return diff.mul_((m + r).to(torch.float64)).mul_(-0.5 / self.scale ** 2).exp_()

    @staticmethod
    def two_laplace_margin(b: float) -> float:
        r"""Relative margin of the float64 acceptance ratio of the two-Laplace sum at scale ``b``
        (grid steps, :math:`b \ge 2^{20}`): :math:`1/(12 b^2)`, added to the float margin
        :math:`2^{-44}`.

        **The fast ratio.** For magnitudes :math:`1 \le r \le k` in one cell (:math:`r` the cell's
        reference, :math:`0 \le k - r < w \le b/32`) the sampler evaluates the *density* ratio
        :math:`D = e^{-(k - r)/b}\,(b + k)/(b + r) = f(k)/f(r)`. The exact ratio of the rounded
        variable follows from the antiderivative of :math:`h(x) = (1 + x/b) e^{-x/b}`,
        :math:`-b\,e^{-x/b}(2 + x/b)`: with :math:`\delta = 1/(2b)`,

        .. math::
            P(M = k) = \tfrac{1}{2b}\int_{k - 1/2}^{k + 1/2} h
                = e^{-k/b}\,\big((2 + k/b)\sinh\delta - \delta\cosh\delta\big)
                = \sinh\delta\; e^{-k/b}\,(c + k/b), \qquad c = 2 - \delta\coth\delta,

        so :math:`P(M = k)/P(M = r) = e^{-(k - r)/b}\,(cb + k)/(cb + r)`: the density ratio with
        :math:`b` replaced by :math:`cb = b - e`, :math:`e = b(\delta\coth\delta - 1)`. Since
        :math:`1 \le x\coth x \le 1 + x^2/3` for all :math:`x`, :math:`0 \le e \le b\delta^2/3 =
        1/(12 b)`, and

        .. math::
            \frac{P(M = k)/P(M = r)}{D} - 1
                = \frac{1 - e/(b + k)}{1 - e/(b + r)} - 1
                = \frac{e\,(k - r)}{(b + k)(b + r - e)} \in \Big[0, \frac{e\,w}{b^2 (1 - e/b)}\Big]
                \subset \Big[0, \frac{1}{12 b^2}\Big]

        (:math:`w \le b/32`, :math:`e/b \le 2^{-43}`). So the exact ratio lies in
        :math:`[D, D(1 + 1/(12 b^2))]`: within :math:`1/(12b^2) \le 2^{-43.5}` of :math:`D`,
        relatively, and never below it (which also makes :math:`D` at a cell's far end a valid
        cheap threshold). The float64 evaluation of :math:`D` (an exact integer difference, a
        product by :math:`1/b`, ``exp`` of an argument below :math:`2^{-5}`, two sums and a quotient)
        errs by less than :math:`8 \cdot 2^{-53}` relatively, and the product with the cell-0
        factor :math:`P(M = 1)/(2P(M = 0))` (rounded once from 256 bits) by two ulps more: well
        inside :math:`2^{-44}`. ``tests/mechanisms/test_two_laplace_noise.py`` checks the bound
        against the 256-bit ratio and that it is tight enough to catch a wrong formula."""
        return 1.0 / (12.0 * b * b)

    # -- exact probabilities (256-bit) ------------------------------------------------------------
    def pmf_m(self, k: int):
        """``P(M = k)`` of the magnitude ``M = |K|``."""
        ctx = self.ctx
        if self.kind == "two_laplace":
            if k == 0:
                return 1 - self.tail_mass(1)
            # e^{-k/b} ((2 + k/b) sinh d - d cosh d), d = 1/(2b) (see two_laplace_margin)
            b = ctx.mpf(self.scale)
            d = 1 / (2 * b)
            u = ctx.mpf(k) / b
            return ctx.exp(-u) * ((2 + u) * ctx.sinh(d) - d * ctx.cosh(d))
        if self.kind == "laplace":
            x = ctx.mpf(1) / (2 * ctx.mpf(self.scale))
            if k == 0:
                return -ctx.expm1(-x)
            return 2 * ctx.sinh(x) * ctx.exp(-ctx.mpf(k) / ctx.mpf(self.scale))
        s = ctx.mpf(self.scale)
        if k == 0:
            return 1 - 2 * ctx.ncdf(-ctx.mpf(0.5) / s)
        return 2 * (ctx.ncdf(-(ctx.mpf(k) - ctx.mpf(0.5)) / s) - ctx.ncdf(-(ctx.mpf(k) + ctx.mpf(0.5)) / s))

    def tail_mass(self, k: int):
        """``P(M >= k)`` for ``k >= 1``."""
        ctx = self.ctx
        if self.kind == "laplace":
            return ctx.exp(-(ctx.mpf(k) - ctx.mpf(0.5)) / ctx.mpf(self.scale))
        if self.kind == "two_laplace":  # P(|X| >= x) = e^{-x/b} (2 + x/b) / 2 at x = k - 1/2
            u = (ctx.mpf(k) - ctx.mpf(0.5)) / ctx.mpf(self.scale)
            return ctx.exp(-u) * (2 + u) / 2
        return 2 * ctx.ncdf(-(ctx.mpf(k) - ctx.mpf(0.5)) / ctx.mpf(self.scale))

    def cell_of(self, value: int) -> int:
        """The cell holding the integer ``value`` (0 lies in both cells 0: the positive one is returned)."""
        c = abs(value) >> self.j
        if value >= 0:
            return c if c < self.num_cells else self.pos_tail
        return self.num_cells + c if c < self.num_cells else self.neg_tail

    def reference(self, c: int) -> int:
        """The magnitude of largest ``P(M = k)`` in the magnitude cell ``c``."""
        return 1 if c == 0 else c * self.w

    def accept_probability(self, k: int):
        """Exact ``P(M = |k|) / P(M = reference)`` (256-bit) for a value ``k`` of a table cell."""
        k = abs(k)
        return self.pmf_m(k) / self.pmf_m(self.reference(k >> self.j))



@functools.lru_cache(maxsize=64)
def alias_table(kind: Kind, scale: float) -> AliasTable:
    """The table of ``kind`` at ``scale`` grid steps (built once, about 0.2 s; the last 64 are cached)."""
    return AliasTable(kind, scale)


def vose_alias(ctx, probs):
    """Walker/Vose alias table: slot ``i`` keeps itself with probability ``split[i]``, else ``alias[i]``."""
    n = len(probs)
    q = [p * n for p in probs]
    split = [ctx.mpf(1)] * n
    alias = list(range(n))
    small = [i for i in range(n) if q[i] < 1]
    large = [i for i in range(n) if q[i] >= 1]
    while small and large:
        s, g = small.pop(), large.pop()
        split[s], alias[s] = q[s], g
        q[g] = q[g] - (1 - q[s])
        (small if q[g] < 1 else large).append(g)
    for i in small + large:  # leftovers equal 1 up to the working precision
        split[i], alias[i] = ctx.mpf(1), i
    return split, alias

