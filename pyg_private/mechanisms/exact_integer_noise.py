r"""Exact samplers of integer noise from uniform random words: the rounded Laplace and rounded
Gaussian distributions, and Bernoulli trials of irrational probability.

Floating-point samplers of continuous noise break differential privacy in practice: some outputs are
impossible under one input and possible under its neighbour (Mironov, "On significance of the least
significant bits for differential privacy", CCS 2012; Jin et al., "Are we there yet? Timing and
floating-point attacks on differential privacy systems", S&P 2022). The safe mechanisms of this
package therefore release on a grid (see :mod:`pyg_private.mechanisms.grid`): the query is rounded
to the grid and **integer** noise, sampled here exactly, is added. The noise is the continuous
Laplace or Gaussian variable rounded to the nearest integer,

.. math::
    P(K = k) = P\big(k - \tfrac12 \le X < k + \tfrac12\big), \qquad
    X \sim \mathrm{Lap}(0, b) \text{ or } N(0, \sigma^2),

so a release ``grid value + K`` is a *post-processing* (rounding) of the continuous mechanism run on
the grid value, and keeps its privacy guarantee exactly (Laplace: pure DP and its RDP curve;
Gaussian: :math:`\mu`-GDP). No discrete-Gaussian analysis is needed. A third kind,
``"two_laplace"``, is the rounded sum :math:`X = L_1 + L_2` of two independent
:math:`\mathrm{Lap}(0, b)` variables, the per-step noise of noisy graph diffusion (Wei, Chien and Li,
NeurIPS 2024), with density and survival function (:math:`x \ge 0`)

.. math::
    f(x) = \frac{1}{4b}\Big(1 + \frac{|x|}{b}\Big) e^{-|x|/b}, \qquad
    P(|X| \ge x) = \tfrac12\, e^{-x/b}\,\Big(2 + \frac{x}{b}\Big),

variance :math:`4b^2`; see :meth:`_Table.two_laplace_margin` for its fast acceptance ratio.

**How a sample is drawn (all integer comparisons on uniform 63-bit words).** The integers are
grouped into signed cells of :math:`w = 2^j` consecutive values, :math:`w \approx` scale / 2^r (the
positive cells :math:`[cw, cw + w)`, the negative cells :math:`(-(c + 1)w, -cw]`, so that a value is
always ``base[cell] + offset`` and no sign is applied). A cell is chosen with Walker's alias method
(Walker 1977; Vose 1991) whose table is computed once, in 256-bit arithmetic (``mpmath``), from the
exact cell probabilities: the top bits of a word give the slot, the next bits are compared with the
slot's split point. A value in the cell is then drawn uniformly (``j`` random bits) and accepted
with probability :math:`P(K = k) / \max_{\text{cell}} P`, which is at least 0.7 and close to 1 in
the bulk; the acceptance bits are first compared with an integer threshold below the cell's
smallest probability (which accepts about 99% of the samples), and only the others with
:math:`\exp(\cdot)` evaluated in float64, **decided only when the bits lie farther than a proven
margin from it** (:math:`2^{-44}` relative for the Laplace ratio, which is exact;
:math:`26/\sigma^2 + 2^{-44}` for the Gaussian, covering the integral's deviation from the density
ratio; :math:`1/(12 b^2) + 2^{-44}` for the sum of two Laplace, likewise); a comparison the bits
cannot decide reads one more word, and what that leaves (probability about :math:`2^{-43}`) is
decided in 256-bit arithmetic with as many further words as it needs. A tie with an alias split
is broken the same way (the split's next 63 bits, then 256 bits). When the slot, 12 split bits,
the offset and at least 8 acceptance bits fit in one word (noise scales up to about
:math:`2^{35}` steps), a sample reads one word; otherwise two or three. The outermost tail (beyond
10 standard deviations, 50 Laplace scales or 55 scales of the two-Laplace sum) is drawn exactly
by inversion in 256-bit arithmetic. The
samples are therefore exact up to the 256-bit precision of the tables: the sampled distribution
differs from the stated one by less than :math:`10^{-60}` in total variation (far below any
reported privacy figure; not added to the ledger).

**Speed.** The first pass (the alias choice, the value in its cell, the cheap threshold) runs as
one fused C loop over each chunk of words (``_first_pass_native``, built at installation where a
C compiler exists; about 1.8 ns a sample against 4.5 ns for the same integer computation as torch
operations, :func:`first_pass`, which runs otherwise and on other devices). Both give the same
samples from the same words; ``tests/mechanisms/test_native_first_pass.py`` compares them. A grid
release (:meth:`RoundedNoiseSampler.add_to_grid_`) fuses the first pass with the grid step in one
loop, vectorised with AVX-512 where the CPU has it (about 1.3 ns a sample with the grid step,
against 1.8 + 0.8 ns for the two passes), again with the same results as the composition.

Scales below :data:`MIN_SCALE` (:math:`2^{20}` grid steps) are refused: the grid is chosen fine
enough by :func:`pyg_private.mechanisms.grid.choose_granularity`.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Literal, Optional

import mpmath
import torch
from torch import Tensor

from .._native import load_native
from ._workspace import borrow, reserve
from .randomness import WORD_BITS, RandomSource, _workers, run_staged, run_tasks

# the fused first pass in C, and fused with the grid step (optional: built at installation where a
# C compiler exists)
_native = load_native("mechanisms._first_pass_native")
_native_grid = load_native("mechanisms._grid_step_native")

__all__ = ["RoundedNoiseSampler", "rounded_laplace", "rounded_gaussian", "rounded_two_laplace", "exact_bernoulli",
           "MIN_SCALE", "MAX_SCALE"]

Kind = Literal["laplace", "gaussian", "two_laplace"]

#: Smallest noise scale (Laplace ``b`` or Gaussian ``sigma``) in grid steps.
MIN_SCALE = 2.0 ** 20
#: Largest one: samples stay below 2^62 in magnitude, and float64 holds every cell offset exactly.
MAX_SCALE = 2.0 ** 46
_PREC = 256  # bits of the alias tables and of every exact comparison
_SPLIT_SHORT = 12  # bits compared with an alias split when one word holds a whole sample
_SPLIT_LONG = 50  # ... when the split has a word of its own
_MIN_ACCEPT = 8  # fewest acceptance bits of the one-word layout
_EXTEND_LIMIT = 52  # acceptance bits up to which an undecided float comparison reads one more word
# table covers |k| < T * scale; beyond: exact tail path (mass e^-50 = 2e-22, 2 Phi(-10) = 2e-23,
# e^-55 (2 + 55) / 2 = 3.7e-23 for the two-Laplace sum)
_TAILS = {"laplace": 50.0, "gaussian": 10.0, "two_laplace": 55.0}
_CELLS = {"laplace": 5, "gaussian": 7, "two_laplace": 5}  # r: about 2^r cells per scale
_FLOAT_MARGIN = 2.0 ** -44
#: Whether the fused grid pass may use its AVX-512 loop where the CPU has it (the same results as its
#: scalar loop; the tests switch it off to compare the two).
_GRID_SIMD = True
_CHUNK = 1 << 16  # samples per vectorised pass (2^15 to 2^17 measured; 2^16 the fastest)
_TASK = 1 << 19  # samples per task of one thread, with its own random stream
#: Device types on which a task's first pass (and a grid release's grid step) runs as one Triton
#: launch (:mod:`~pyg_private.mechanisms._exact_noise_triton`; the same samples as the torch pass). The
#: tests add ``"cpu"`` under Triton's interpreter.
_TRITON_DEVICES = {"cuda"}


def _pool_size(n: int) -> int:
    """Entries of the scratch set of a task of ``n`` samples: the power of two at least ``n``, at most one
    chunk (the pool then holds a few sizes only, and :meth:`RoundedNoiseSampler.reserve` knows them)."""
    return min(_CHUNK, 1 << max(0, int(n) - 1).bit_length())


def _sample_scratch(size: int, device: torch.device) -> Callable[[], list[Tensor]]:
    """The factory of one scratch set of :meth:`RoundedNoiseSampler._sample_task`."""
    return lambda: [torch.empty(size, dtype=torch.int64, device=device) for _ in range(5)] + \
        [torch.empty(size, dtype=torch.bool, device=device)]


def _triton():
    """The Triton kernels' module (it imports triton: on the first task on a Triton device only)."""
    from . import _exact_noise_triton

    return _exact_noise_triton


def _triton_scratch(size: int, per: int, device: torch.device) -> Callable[[], list[Tensor]]:
    """The factory of one scratch set of a Triton task of up to ``size`` samples: the words, the flagged
    indices, the kept grid values and the launch's workspace."""
    return lambda: [torch.empty(size, dtype=torch.int64, device=device) for _ in range(per + 2)] + \
        [torch.empty(_triton().workspace_size(size), dtype=torch.int64, device=device)]


def _task_size(n: int) -> int:
    """Samples of the Triton scratch set for a task of ``n``: the power of two at least ``n``."""
    return 1 << max(0, int(n) - 1).bit_length()


def _grid_scratch(size: int, per: int) -> Callable[[], list[Tensor]]:
    """The factory of one scratch set of :meth:`RoundedNoiseSampler._grid_pass` (CPU)."""
    return lambda: [torch.empty(size, dtype=torch.int64) for _ in range(2 + per)]


def _mp(prec: int = _PREC):
    ctx = mpmath.MPContext()
    ctx.prec = prec
    return ctx


class _Table:
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
        ctx = _mp()
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
        # slot s holds cell s - 1 (mod slots): slot 0 holds the last, empty, cell (see first_pass)
        self.split, self.alias = _vose(ctx, [m / total for m in masses[-1:] + masses[:-1]])
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
        """The split tables for ``split_bits`` bits and the tables of :func:`first_pass`, indexed by
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
def _table(kind: Kind, scale: float) -> _Table:
    return _Table(kind, scale)


def _vose(ctx, probs):
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


def first_pass(word: Tensor, offset: Tensor, bits: Tensor, out: Tensor, scratch: tuple[Tensor, Tensor, Tensor, Tensor],
               split_high: Tensor, tables: list[Tensor], slot_shift: int, low_shift: int, accept_bits: int) -> Tensor:
    """One pass over a batch: writes ``base + offset`` of the alias-chosen cell into ``out`` and
    returns the flags of the samples the eager code must finish (an alias tie, a tail cell, bits the
    cheap threshold does not accept), in ``scratch[3]``.

    ``offset`` and ``bits`` come from :meth:`_Table.offset_and_bits`; ``tables`` is ``[packed]``
    (base and threshold in one entry) or ``[base, threshold]``, indexed by
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


def native_available() -> bool:
    """Whether the fused C first pass (:mod:`pyg_private.mechanisms._first_pass_native`) is installed;
    without it the same integer computation runs as torch operations (:func:`first_pass`)."""
    return _native is not None


def _native_first_pass(words: list[Tensor], offset: Tensor, bits: Tensor, out: Tensor, flagged: Tensor, start: int,
                       tables: dict[str, Tensor], t: "_Table") -> int:
    """:func:`first_pass` in one C loop over a chunk: writes ``out`` and the (global) indices of the
    flagged samples into ``flagged[:count]``; returns ``count``. The caller guarantees CPU, int64,
    contiguous buffers of the chunk's size (``flagged`` at least as long)."""
    n = out.numel()
    for x in (words[0], out, flagged):
        if x.dtype != torch.int64 or x.device.type != "cpu" or not x.is_contiguous() or x.numel() < n:
            raise RuntimeError("native first pass: buffers must be contiguous int64 CPU tensors of the chunk's size")
    slot_shift = WORD_BITS - t.slot_bits
    if t.words_per_sample == 1:
        return _native.first_pass_packed(words[0].data_ptr(), n, out.data_ptr(), flagged.data_ptr(), start,
                                         tables["split_high"].data_ptr(), tables["packed3"].data_ptr(), slot_shift,
                                         t.low_shift, t.accept_bits, t.w - 1)
    return _native.first_pass_split(words[0].data_ptr(), offset.data_ptr(), bits.data_ptr(), n, out.data_ptr(),
                                    flagged.data_ptr(), start, tables["split_high"].data_ptr(),
                                    tables["base3"].data_ptr(), tables["cheap3"].data_ptr(), slot_shift, t.low_shift)


def exact_bernoulli(p, known: int, known_bits: int, source: RandomSource, ctx=None) -> bool:
    """Whether ``U < p`` for a uniform ``U`` whose first ``known_bits`` bits are the integer ``known``,
    drawing further 63-bit words from ``source`` until the comparison is decided (``p`` an mpmath
    number in [0, 1]: a dyadic rational, so the loop ends once its bits are exhausted)."""
    ctx = ctx or _mp()
    t = ctx.mpf(p) * (1 << known_bits)
    while True:
        f = int(ctx.floor(t))
        if known != f:
            return known < f
        t = t - f  # exact: the fraction of a dyadic number
        if t == 0:  # U >= p; equality has probability 0
            return False
        t = t * (1 << WORD_BITS)
        known = int(source.words(1)[0])


class RoundedNoiseSampler:
    r"""Exact i.i.d. samples of the rounded Laplace (``kind="laplace"``, scale :math:`b`), rounded
    Gaussian (``kind="gaussian"``, standard deviation :math:`\sigma`) or rounded sum of two independent
    Laplace (``kind="two_laplace"``, each of scale :math:`b`; standard deviation :math:`2b`)
    distribution on the integers, the scale given in grid steps, in :math:`[2^{20}, 2^{46}]`.

    The alias table is built once per ``(kind, scale)`` (about 0.2 s) and cached.
    """

    def __init__(self, kind: Kind, scale: float) -> None:
        if kind not in _TAILS:
            raise ValueError(f"`kind` must be 'laplace', 'gaussian' or 'two_laplace'; got {kind!r}")
        scale = float(scale)
        if not (MIN_SCALE <= scale <= MAX_SCALE):
            raise ValueError(f"the noise scale must lie in [2^20, 2^46] grid steps; got {scale!r} "
                             "(choose the granularity with `choose_granularity`)")
        self.kind, self.scale = kind, scale
        self._t = _table(kind, scale)
        self.native = _native is not None  # the fused C first pass on CPU tensors (same samples either way)

    def sample(self, n: int, source: RandomSource, out: Tensor | None = None) -> Tensor:
        """``n`` samples (``int64`` on ``source.device``), written into ``out`` when given.

        On the CPU the work is split into tasks of :data:`_TASK` samples run on
        ``torch.get_num_threads()`` threads, each task with its own stream from
        :meth:`RandomSource.spawn` (so a seeded source gives the same samples whatever the
        number of threads)."""
        n = int(n)
        if out is None:
            out = torch.empty(n, dtype=torch.int64, device=source.device)
        self._run_tasks(n, source, lambda lo, hi, stream: self._sample_task(out[lo:hi], stream))
        return out

    def add_to_grid_(self, values: Tensor, granularity: float, source: RandomSource, *,
                     on_scale: bool = False) -> Tensor:
        r"""The grid release of ``values`` with this sampler's noise, in place:
        ``values <- g * (round(values / g) + K)`` (``on_scale=True``: ``values`` already divided by ``g``),
        ``K`` the samples :meth:`sample` would draw for ``values.numel()`` entries from ``source``.

        It equals :func:`~pyg_private.mechanisms.grid.add_noise_on_grid_` ``(values,
        self.sample(values.numel(), source), granularity, on_scale=on_scale)`` bit for bit, from the
        same random words. For contiguous float32/float64 CPU values and one or two words a sample
        (every noise scale below :math:`2^{39}` grid steps), where both C extensions are built, the
        sampler's first pass and the grid step run as one loop
        (:mod:`~pyg_private.mechanisms._grid_step_native`, eight samples at a time in AVX-512
        registers where the CPU has them): the noise of the accepted samples is never written out,
        and the flagged ones (about 1%) are finished as in :meth:`sample`, then written over their
        provisional values. Beyond :data:`_TASK` values the tasks have their own streams, as in
        :meth:`sample`; their C passes run on torch's threads while this thread finishes the
        flagged draws (:func:`~pyg_private.mechanisms.randomness.run_staged`). Otherwise it runs the
        composition above."""
        from .grid import _CLAMP, add_noise_on_grid_, check_granularity  # grid imports this module

        g = check_granularity(granularity)
        if self._triton_grid(values, g):  # one launch a task (the same tasks and streams as sample())
            flat = values.view(-1)
            step = (1.0 if on_scale else 1.0 / g, g, _CLAMP)
            self._run_tasks(flat.numel(), source,
                            lambda lo, hi, stream: self._grid_task_triton(flat[lo:hi], step, stream))
            return values
        if not self._fused(values, g):
            return add_noise_on_grid_(values, self.sample(values.numel(), source), g, on_scale=on_scale)
        flat = values.view(-1)
        step = (1.0 if on_scale else 1.0 / g, g, _CLAMP)
        n = flat.numel()
        starts = list(range(0, n, _TASK))
        if len(starts) <= 1:
            self._grid_finish(flat, step, source, self._grid_pass(flat, step, source))
            return values
        streams = source.spawn(len(starts))  # as sample() spawns them: the same words
        parts = [flat[a:min(a + _TASK, n)] for a in starts]
        run_staged(lambda i: self._grid_pass(parts[i], step, streams[i]),  # C passes on the worker threads
                   lambda i, pending: self._grid_finish(parts[i], step, streams[i], pending), len(starts),
                   source.device)
        return values

    def add_to_grid_staged_(self, values: Tensor, granularity: float, source: RandomSource, *,
                            on_scale: bool = False) -> Callable[[], None]:
        """:meth:`add_to_grid_` in two stages: this call runs the fused C pass (the words and the loop
        release the GIL) and returns the second stage, which finishes the flagged draws (Python)
        and writes their values. Call it once, in any thread, before ``values`` is read: the result
        is :meth:`add_to_grid_`'s, bit for bit (the stream's words are drawn in the same order).
        Where the fused pass does not run, or for more than :data:`_TASK` values (several
        streams), the whole release happens here and the second stage does nothing."""
        from .grid import _CLAMP, check_granularity  # grid imports this module

        g = check_granularity(granularity)
        if values.numel() > _TASK or not self._fused(values, g):
            self.add_to_grid_(values, g, source, on_scale=on_scale)
            return lambda: None
        flat = values.view(-1)
        step = (1.0 if on_scale else 1.0 / g, g, _CLAMP)
        pending = self._grid_pass(flat, step, source)
        return lambda: self._grid_finish(flat, step, source, pending)

    def _fused(self, values: Tensor, g: float) -> bool:
        """Whether the fused C pass takes ``values`` on the grid ``g``."""
        return self._fused_for(values.device, values.dtype, g) and values.is_contiguous()

    @staticmethod
    def _triton_on(device: torch.device) -> bool:
        """Whether the tasks on ``device`` run their first pass as Triton launches."""
        return torch.device(device).type in _TRITON_DEVICES and _triton().triton_available()

    def _triton_grid(self, values: Tensor, g: float) -> bool:
        """Whether the Triton kernel takes the grid release of ``values`` on the grid ``g``."""
        return (self._triton_on(values.device) and values.dtype in (torch.float32, torch.float64)
                and values.is_contiguous() and 2.0 ** -100 <= g <= 2.0 ** 100)

    def _fused_for(self, device: torch.device, dtype: torch.dtype, g: float) -> bool:
        """Whether the fused C pass takes contiguous values of ``dtype`` on ``device`` on the grid ``g``."""
        return (self.native and _native_grid is not None and self._t.words_per_sample <= 2
                and torch.device(device).type == "cpu" and dtype in (torch.float32, torch.float64)
                and 2.0 ** -100 <= g <= 2.0 ** 100)

    def reserve(self, n: int, device: torch.device | str, *, dtype: Optional[torch.dtype] = None,
                granularity: Optional[float] = None, concurrent: int = 1) -> None:
        """Make, **before** the release is charged, the scratch sets that drawing ``n`` samples on
        ``device`` will borrow: for :meth:`sample`, or with ``dtype`` and ``granularity`` for the grid
        release :meth:`add_to_grid_` / :meth:`add_to_grid_staged_` of ``n`` contiguous values of that
        dtype; ``concurrent`` such draws at once (row blocks on worker threads). After it, the draws
        take their buffers from the pool (:mod:`~pyg_private.mechanisms._workspace`) and allocate
        none: an allocation failure raises here, before anything is charged."""
        n, device = int(n), torch.device(device)
        grid = dtype is not None and granularity is not None and self._fused_for(device, dtype, granularity)
        tasks = max(1, -(-n // _TASK))
        sizes = {}  # pool size -> number of tasks of that size
        for t in range(tasks):
            size = _pool_size(min(_TASK, n - t * _TASK) if n else 0)
            sizes[size] = sizes.get(size, 0) + 1
        if self._triton_on(device):
            per = self._t.words_per_sample
            for size in {_task_size(min(_TASK, n - t * _TASK)) for t in range(tasks)} if n else ():
                reserve(("exact_integer_noise_triton", device, per, size), _triton_scratch(size, per, device),
                        max(1, int(concurrent)))
            return
        for size, count in sizes.items():
            need = min(count, max(1, _workers(tasks, device))) * max(1, int(concurrent))
            if grid:
                per = self._t.words_per_sample
                reserve(("exact_integer_noise_grid", per, size), _grid_scratch(size, per), need)
            else:
                reserve(("exact_integer_noise", device, size), _sample_scratch(size, device), need)

    @staticmethod
    def _run_tasks(n: int, source: RandomSource, task: Callable[[int, int, RandomSource], None]) -> None:
        """``task(lo, hi, stream)`` over the tasks of :data:`_TASK` samples: one task on ``source``
        itself, or each on its own child stream (:meth:`RandomSource.spawn`) on torch's threads."""
        starts = list(range(0, n, _TASK))
        if len(starts) <= 1:
            task(0, n, source)
            return
        children = source.spawn(len(starts))
        run_tasks(lambda i: task(starts[i], min(starts[i] + _TASK, n), children[i]), len(starts), source.device)

    def _sample_task(self, out: Tensor, source: RandomSource) -> None:
        """Fill ``out`` from one stream: cache-sized chunks through :func:`first_pass` (with scratch
        buffers borrowed for the task), the flagged samples (about 1%) finished together, then the
        rejected values drawn again in their cells."""
        if self._triton_on(out.device) and out.is_contiguous():
            self._task_triton(out, None, None, source)
            return
        t = self._t
        n = out.numel()
        tables = t.on(out.device)
        per = t.words_per_sample
        slot_shift = WORD_BITS - t.slot_bits
        fast = [tables["packed3"]] if "packed3" in tables else [tables["base3"], tables["cheap3"]]
        flagged = []
        size = _pool_size(n)
        native = self.native and out.device.type == "cpu" and out.is_contiguous()
        with borrow(("exact_integer_noise", out.device, size), _sample_scratch(size, out.device)) as buffers:
            for start in range(0, n, _CHUNK):
                m = min(_CHUNK, n - start)
                part = [b[:m] for b in buffers]
                words = [source.words(m) for _ in range(per)]
                if native:
                    offset, bits = t.offset_and_bits(words, out=(part[0], part[1])) if per > 1 else (None, None)
                    count = _native_first_pass(words, offset, bits, out[start:start + m], part[2], start, tables, t)
                    idx = part[2][:count] - start
                else:
                    offset, bits = t.offset_and_bits(words, out=(part[0], part[1]))
                    flag = first_pass(words[0], offset, bits, out[start:start + m],
                                      (part[2], part[3], part[4], part[5]), tables["split_high"], fast, slot_shift,
                                      t.low_shift, t.accept_bits)
                    idx = flag.nonzero().squeeze(1)
                if idx.numel():
                    flagged.append((idx + start, [w.index_select(0, idx) for w in words]))
        if flagged:
            self._finish_flagged(out, torch.cat([f[0] for f in flagged]),
                                 [torch.cat([f[1][i] for f in flagged]) for i in range(per)], source)

    def _task_triton(self, out: Optional[Tensor], values: Optional[Tensor], step: Optional[tuple],
                     source: RandomSource) -> None:
        """One task as one Triton launch (:mod:`~pyg_private.mechanisms._exact_noise_triton`): the
        samples into ``out`` (:meth:`_sample_task`), or with ``values`` and ``step`` the grid release
        of :meth:`add_to_grid_`. The words are drawn chunk by chunk as :meth:`_sample_task` draws them
        (the same words, hence the same samples); the flagged samples, listed in increasing order on
        the device, are finished together after the one synchronisation (their count)."""
        t = self._t
        target = out if out is not None else values
        n, device = target.numel(), target.device
        per = t.words_per_sample
        size = _task_size(n)
        with borrow(("exact_integer_noise_triton", device, per, size), _triton_scratch(size, per, device)) as buffers:
            words = [b[:n] for b in buffers[:per]]
            index, kept, workspace = buffers[per][:n], buffers[per + 1][:n], buffers[per + 2]
            for start in range(0, n, _CHUNK):
                m = min(_CHUNK, n - start)
                for w in words:
                    source.words(m, out=w[start:start + m])
            tables, kernels = t.on(device), _triton()
            if values is None:
                count = kernels.first_pass_triton(words, None, None, out, index, 0, tables, t, workspace=workspace)
            else:
                count = kernels.grid_first_pass_triton(words, values, step, index, kept, 0, tables, t,
                                                       workspace=workspace)
            count = int(count)  # the one synchronisation
            if not count:
                return
            where = index[:count].clone()
            flagged_words = [w.index_select(0, where) for w in words]
            kept = kept[:count].clone()
        if values is None:
            self._finish_flagged(out, where, flagged_words, source)
        else:
            self._grid_finish(values, step, source, (where, kept, flagged_words))

    def _grid_task_triton(self, values: Tensor, step: tuple[float, float, float], source: RandomSource) -> None:
        """The grid release of one task's contiguous ``values`` as one Triton launch (see :meth:`_task_triton`)."""
        self._task_triton(None, values, step, source)

    def _grid_pass(self, values: Tensor, step: tuple[float, float, float], source: RandomSource) -> Optional[tuple]:
        """The first stage of :meth:`add_to_grid_` on the contiguous CPU ``values`` of one task (one
        or two words a sample): the words of each chunk drawn into borrowed buffers in
        :meth:`_sample_task`'s order and the fused C pass over them. Returns the flagged samples
        (their indices, rounded values ``q`` and words) for :meth:`_grid_finish`, or ``None``."""
        t = self._t
        n = values.numel()
        tables = t.on(values.device)
        per = t.words_per_sample
        size = _pool_size(n)
        flagged = []
        table1, table2 = (tables["packed3"], None) if per == 1 else (tables["base3"], tables["cheap3"])
        bits = 64 if values.dtype == torch.float64 else 32
        with borrow(("exact_integer_noise_grid", per, size), _grid_scratch(size, per)) as (index, kept, *buffers):
            for start in range(0, n, _CHUNK):
                m = min(_CHUNK, n - start)
                words = [source.words(m, out=b[:m]) for b in buffers]
                count = _native_grid.grid_first_pass(
                    words[0].data_ptr(), 0 if per == 1 else words[1].data_ptr(), m, values[start:].data_ptr(), bits,
                    step[0], step[1], step[2], index.data_ptr(), kept.data_ptr(), start,
                    tables["split_high"].data_ptr(), table1.data_ptr(), 0 if table2 is None else table2.data_ptr(),
                    WORD_BITS - t.slot_bits, t.low_shift, t.accept_bits, t.w - 1, _GRID_SIMD)
                if count:
                    idx = index[:count].clone()
                    local = idx - start
                    flagged.append((idx, kept[:count].clone(), [w.index_select(0, local) for w in words]))
        if not flagged:
            return None
        return (torch.cat([f[0] for f in flagged]), torch.cat([f[1] for f in flagged]),
                [torch.cat([f[2][i] for f in flagged]) for i in range(per)])

    def _grid_finish(self, values: Tensor, step: tuple[float, float, float], source: RandomSource,
                     pending: Optional[tuple]) -> None:
        """The second stage: the flagged samples finished together (:meth:`_finish_flagged`, more
        words from the same stream) and their values ``g * (q + K)`` written over the provisional
        ones, as :func:`~pyg_private.mechanisms.grid.add_noise_on_grid_` forms them."""
        if pending is None:
            return
        where, kept, words = pending
        noise = torch.empty(where.numel(), dtype=torch.int64, device=values.device)
        self._finish_flagged(noise, torch.arange(where.numel(), device=values.device), words, source)
        total = kept.add_(noise)  # wraps as the C sum does
        values[where] = torch.mul(total.to(values.dtype), torch.tensor(step[1], dtype=values.dtype))

    def _finish_flagged(self, out: Tensor, index: Tensor, words: list[Tensor], source: RandomSource) -> None:
        """The flagged samples' values into ``out`` at ``index``: :meth:`_finish`, then the rejected
        values drawn again in their cells until accepted."""
        cell, accept = self._finish(out, index, words, source)
        index, cell = index[~accept], cell[~accept]
        while index.numel():  # rejection: a fresh value of the same cell, until accepted
            value, accept = self._within(cell, source)
            out[index[accept]] = value[accept]
            index, cell = index[~accept], cell[~accept]

    def _finish(self, out: Tensor, index: Tensor, words: list[Tensor], source: RandomSource) -> tuple[Tensor, Tensor]:
        """Finish the flagged samples: an alias tie decided exactly, the tail cells drawn exactly,
        the acceptance test beyond the cheap threshold. Writes the accepted values into ``out`` at
        ``index``; returns the (decided) cells and which values were accepted."""
        t = self._t
        tables = t.on(out.device)
        slot = words[0] >> (WORD_BITS - t.slot_bits)
        low = (words[0] >> t.low_shift) & ((1 << t.split_bits) - 1)
        split_int = tables["split_int"].index_select(0, slot)
        keep = low < split_int
        tie = (low == split_int).nonzero().squeeze(1)
        if tie.numel():  # probability 2^-split_bits per sample: one more word decides, or 256 bits
            keep[tie] = self._break_ties(slot[tie], low[tie], source)
        cell = tables["slot_cell"].index_select(0, torch.where(keep, slot, tables["alias_t"].index_select(0, slot)))
        offset, bits = t.offset_and_bits(words)
        value = tables["base"].index_select(0, cell).add_(offset)
        accept = bits < tables["cheap"].index_select(0, cell)
        tail = cell >= t.pos_tail
        self._slow_accept(accept, ~tail, value, cell, bits, source)
        if bool(tail.any()):
            self._replace_tails(value, cell, tail, source)
            accept |= tail
        out[index[accept]] = value[accept]
        return cell, accept

    def _break_ties(self, slot: Tensor, low: Tensor, source: RandomSource) -> Tensor:
        """Whether each tied slot keeps itself: ``U < split`` where ``U``'s first ``split_bits`` bits
        equal the split's; the next 63 bits of both decide unless they are equal too (then 256 bits)."""
        t = self._t
        v = source.words(slot.numel())
        following = t.on(slot.device)["split_next"].index_select(0, slot)
        keep = v < following
        for i in (v == following).nonzero().squeeze(1).tolist():
            known = (int(low[i]) << WORD_BITS) | int(v[i])
            keep[i] = exact_bernoulli(t.split[int(slot[i])], known, t.split_bits + WORD_BITS, source, t.ctx)
        return keep

    def _slow_accept(self, accept: Tensor, eligible: Tensor, value: Tensor, cell: Tensor, bits: Tensor,
                     source: RandomSource) -> None:
        r"""Complete the acceptance test in place where the cheap threshold did not accept (among
        ``eligible``): ``U < p`` with ``U`` the acceptance bits followed by fresh words and ``p`` the
        value's acceptance probability.

        First in float64: accept when ``(bits + 1) / 2^a <= ratio (1 - margin)``, reject when
        ``bits / 2^a >= ratio (1 + margin)``. The rest (probability about :math:`2^{-a}`) reads one
        more word ``v`` and compares ``v`` with :math:`(y - \mathrm{bits})\,2^{63}`, ``y`` the two
        bounds above times :math:`2^a`: the difference is exact in float64 (``y`` lies within 2 of
        the integer ``bits`` and below :math:`2^{53}`, so both are multiples of ``y``'s last
        place), the scaling is exact, and the comparison is between integers. What even that
        leaves undecided (probability about :math:`2^{-43}`) is decided in 256-bit arithmetic."""
        t = self._t
        slow = (eligible & ~accept).nonzero().squeeze(1)
        if not slow.numel():
            return
        bs = bits.index_select(0, slow)
        ratio = self._ratio(value.index_select(0, slow), cell.index_select(0, slow))
        bf = bs.to(torch.float64)
        y_acc, y_rej = ratio * t.accept_scale, ratio * t.reject_scale
        acc = (bf + 1.0) <= y_acc
        undecided = ((~acc) & (bf < y_rej)).nonzero().squeeze(1)
        if undecided.numel():
            known, known_bits = bs.index_select(0, undecided), t.accept_bits
            if t.accept_bits <= _EXTEND_LIMIT:  # one more word, compared exactly
                v = source.words(undecided.numel())
                b_u = bf.index_select(0, undecided)
                lower = (y_acc.index_select(0, undecided) - b_u).mul_(2.0 ** WORD_BITS)  # < 2^63
                upper = (y_rej.index_select(0, undecided) - b_u).mul_(2.0 ** WORD_BITS)  # > 0
                yes = v < lower.floor().to(torch.int64)
                can_reject = upper < 2.0 ** WORD_BITS
                no = can_reject & (v >= torch.where(can_reject, upper, 0.0).ceil().to(torch.int64))
                acc[undecided] = yes
                rest = ~(yes | no)
                undecided, known = undecided[rest], (known[rest], v[rest])
                known_bits = t.accept_bits + WORD_BITS
            for i, u in enumerate(undecided.tolist()):  # decide exactly
                k = int(known[i]) if known_bits == t.accept_bits else \
                    (int(known[0][i]) << WORD_BITS) | int(known[1][i])
                acc[u] = exact_bernoulli(t.accept_probability(int(value[slow[u]])), k, known_bits, source, t.ctx)
        accept[slow] = acc

    def _within(self, cell: Tensor, source: RandomSource) -> tuple[Tensor, Tensor]:
        """A uniform value of each (table) cell, and whether the rejection test accepts it."""
        t = self._t
        tables = t.on(cell.device)
        offset, bits = t.offset_and_bits([source.words(cell.numel()) for _ in range(t.words_per_sample)])
        value = tables["base"].index_select(0, cell).add_(offset)
        accept = bits < tables["cheap"].index_select(0, cell)
        self._slow_accept(accept, torch.ones_like(accept), value, cell, bits, source)
        return value, accept

    def _replace_tails(self, value: Tensor, cell: Tensor, tail: Tensor, source: RandomSource) -> None:
        """Draw the values of the tail cells exactly, in place (probability below 1e-21 per sample)."""
        for i in tail.nonzero().squeeze(1).tolist():
            value[i] = self._tail_sample(source, negative=int(cell[i]) == self._t.neg_tail)

    def _ratio(self, value: Tensor, cell: Tensor) -> Tensor:
        """float64 estimate of the acceptance probability of ``value`` in its ``cell`` (within
        ``margin`` of the exact value, relatively)."""
        t = self._t
        m = value.abs()
        ratio = t.density_ratio(m, t.on(value.device)["ref"].index_select(0, cell))
        zero = m == 0
        if bool(zero.any()):  # P(M = 0) / P(M = 1)
            ratio = torch.where(zero, torch.full_like(ratio, t.zero_ratio), ratio)
        return ratio

    def _tail_sample(self, source: RandomSource, negative: bool) -> int:
        """A value of the positive tail ``K >= C w`` or of the negative one ``K <= -C w`` (exact)."""
        t = self._t
        start = t.num_cells * t.w  # the smallest magnitude of the tails
        if t.kind == "laplace":  # memoryless: M - start is distributed as M' - 1 given M' >= 1
            while True:
                m = int(self.sample(1, source)[0])
                if m != 0:
                    value = start + abs(m) - 1
                    return -value if negative else value
        ctx = t.ctx
        u = ctx.mpf(0)  # a 252-bit uniform
        for _ in range(4):
            u = (u + int(source.words(1)[0])) / (1 << WORD_BITS)
        base = t.tail_mass(start)
        # largest k >= start with P(M >= k) / P(M >= start) > u: exponential then binary search
        lo, step = start, t.w
        while t.tail_mass(lo + step) / base > u:
            lo, step = lo + step, step * 2
        hi = lo + step  # P(M >= hi)/base <= u < P(M >= lo)/base
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if t.tail_mass(mid) / base > u:
                lo = mid
            else:
                hi = mid
        return -lo if negative else lo


def rounded_laplace(n: int, scale: float, source: RandomSource) -> Tensor:
    """``n`` exact samples of ``round(Lap(0, scale))`` (scale in grid steps)."""
    return RoundedNoiseSampler("laplace", scale).sample(n, source)


def rounded_gaussian(n: int, std: float, source: RandomSource) -> Tensor:
    """``n`` exact samples of ``round(N(0, std^2))`` (std in grid steps)."""
    return RoundedNoiseSampler("gaussian", std).sample(n, source)


def rounded_two_laplace(n: int, scale: float, source: RandomSource) -> Tensor:
    """``n`` exact samples of ``round(Lap(0, scale) + Lap(0, scale))`` (scale in grid steps)."""
    return RoundedNoiseSampler("two_laplace", scale).sample(n, source)

