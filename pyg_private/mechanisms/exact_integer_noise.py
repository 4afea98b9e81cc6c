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
grouped into cells of :math:`w = 2^j` consecutive values, :math:`w \approx` scale / 2^r. A cell is
chosen with Walker's alias method (Walker 1977; Vose 1991) whose table is computed once, in 256-bit
arithmetic (``mpmath``), from the exact cell probabilities: one word gives the slot (its top bits)
and a 50-bit comparison with the slot's split point. A value in the cell is then drawn uniformly
(``j`` random bits) and accepted with probability :math:`P(K = k) / \max_{\text{cell}} P`, which
is at least 0.7 and close to 1 in the bulk; the test compares a word with
:math:`\exp(\cdot)` evaluated in float64 **only when the word lies farther than a proven margin
from it** (:math:`2^{-44}` relative for the Laplace ratio, which is exact;
:math:`26/\sigma^2 + 2^{-44}` for the Gaussian, covering the integral's deviation from the density
ratio; :math:`1/(12 b^2) + 2^{-44}` for the sum of two Laplace, likewise), and otherwise, with
probability about :math:`2^{-35}`, in 256-bit arithmetic with as many further random bits as the
comparison needs. The rare cases (a tie with an alias split, the outermost tail beyond 10 standard
deviations, 50 Laplace scales or 55 scales of the two-Laplace sum) take the same exact path. The
samples are therefore exact up to the 256-bit precision of the tables: the sampled distribution
differs from the stated one by less than :math:`10^{-60}` in total variation (far below any
reported privacy figure; not added to the ledger).

Scales below :data:`MIN_SCALE` (:math:`2^{20}` grid steps) are refused: the grid is chosen fine
enough by :func:`pyg_private.mechanisms.grid.choose_granularity`.
"""
from __future__ import annotations

import functools
import math
from typing import Literal

import mpmath
import torch
from torch import Tensor

from .randomness import WORD_BITS, RandomSource, run_tasks

__all__ = ["RoundedNoiseSampler", "rounded_laplace", "rounded_gaussian", "rounded_two_laplace", "exact_bernoulli",
           "MIN_SCALE", "MAX_SCALE"]

Kind = Literal["laplace", "gaussian", "two_laplace"]

#: Smallest noise scale (Laplace ``b`` or Gaussian ``sigma``) in grid steps.
MIN_SCALE = 2.0 ** 20
#: Largest one: samples stay below 2^62 in magnitude, and float64 holds every cell offset exactly.
MAX_SCALE = 2.0 ** 46
_PREC = 256  # bits of the alias tables and of every exact comparison
_SPLIT_BITS = 50  # bits of a word compared with an alias split in the fast path
_ACCEPT_BITS = 62  # bits of a word compared with an acceptance probability (the 63rd is the sign)
# table covers |k| < T * scale; beyond: exact tail path (mass e^-50 = 2e-22, 2 Phi(-10) = 2e-23,
# e^-55 (2 + 55) / 2 = 3.7e-23 for the two-Laplace sum)
_TAILS = {"laplace": 50.0, "gaussian": 10.0, "two_laplace": 55.0}
_CELLS = {"laplace": 5, "gaussian": 7, "two_laplace": 5}  # r: about 2^r cells per scale
_FLOAT_MARGIN = 2.0 ** -44
_CHUNK = 1 << 15  # samples per vectorised pass (cache-sized)
_TASK = 1 << 19  # samples per task of one thread, with its own random stream


def _mp(prec: int = _PREC):
    ctx = mpmath.MPContext()
    ctx.prec = prec
    return ctx


class _Table:
    """The alias table of the cells of one distribution (immutable, cached)."""

    def __init__(self, kind: Kind, scale: float) -> None:
        self.kind, self.scale = kind, float(scale)
        ctx = _mp()
        self.ctx = ctx
        r = _CELLS[kind]
        self.j = int(math.floor(math.log2(self.scale))) - r  # cell width w = 2^j, scale / w in [2^r, 2^(r+1))
        self.w = 1 << self.j
        self.num_cells = int(math.ceil(_TAILS[kind] * self.scale / self.w))  # cells 0 .. C-1 cover M < C w
        n = self.num_cells + 1  # + the tail slot
        self.slot_bits = max(1, int(math.ceil(math.log2(n))))
        slots = 1 << self.slot_bits
        self.tail = self.num_cells
        survival = [ctx.mpf(1)] + [self.tail_mass(c * self.w) for c in range(1, self.num_cells + 1)]
        masses = [survival[c] - survival[c + 1] for c in range(self.num_cells)]  # P(M in [cw, (c+1)w))
        masses.append(survival[-1])
        masses += [ctx.mpf(0)] * (slots - n)
        total = ctx.fsum(masses)
        self.split, self.alias = _vose(ctx, [m / total for m in masses])
        self.split_bits = _SPLIT_BITS
        self._build_fast()
        self.margin = _FLOAT_MARGIN + (26.0 / self.scale ** 2 if kind == "gaussian" else
                                       self.two_laplace_margin(self.scale) if kind == "two_laplace" else 0.0)
        # one word holds sign, offset and >= 30 acceptance bits when the cell is narrow enough (the
        # cheap test needs few bits; a comparison they cannot decide reads further words exactly)
        self.shared = self.j <= WORD_BITS - 1 - 30
        self.accept_bits = WORD_BITS - 1 - self.j if self.shared else WORD_BITS - 1
        # the float comparisons: accept when (bits + 1) / 2^b <= ratio (1 - m), reject when
        # bits / 2^b >= ratio (1 + m); 2^-50 covers the rounding of bits and of the products
        self.accept_scale = (1.0 - self.margin - 2.0 ** -50) * 2.0 ** self.accept_bits
        self.reject_scale = (1.0 + self.margin + 2.0 ** -50) * 2.0 ** self.accept_bits
        if kind == "laplace":  # P(M = 0) / P(M = 1) = e^x / (1 + e^-x), x = 1 / (2b)
            x = 0.5 / self.scale
            self.zero_ratio = math.exp(x) / (1.0 + math.exp(-x))
        elif kind == "two_laplace":  # from the exact probabilities (about 1/2): within 2^-52 of it
            self.zero_ratio = float(self.pmf_m(0) / self.pmf_m(1))
        else:  # P(M = 0) / P(M = 1) = exp(1 / (2 sigma^2)) / 2, up to the margin
            self.zero_ratio = 0.5 * math.exp(0.5 / self.scale ** 2)
        self._build_cheap()

    def _build_cheap(self) -> None:
        """Per cell, an integer threshold below which a word accepts every value of the cell: the
        float estimate of the cell's smallest acceptance probability (at its far end, or value 0 in
        cell 0) times ``1 - margin``, so a word below it lies below every value's probability."""
        w = self.w
        far = [c * w + w - 1 for c in range(self.num_cells)]
        ref = [max(c * w, 1) for c in range(self.num_cells)]
        if self.kind == "laplace":
            low = [math.exp(-(f - r) / self.scale) for f, r in zip(far, ref)]
        elif self.kind == "two_laplace":  # the density ratio, a lower bound of the exact one (see the margin)
            b = self.scale
            low = [math.exp(-(f - r) / b) * (b + f) / (b + r) for f, r in zip(far, ref)]
        else:
            low = [math.exp(-(f - r) * (f + r) / (2.0 * self.scale ** 2)) for f, r in zip(far, ref)]
        low[0] = min(low[0], self.zero_ratio)
        thresholds = [int(math.floor(a * self.accept_scale)) - 1 for a in low]
        thresholds += [1 << self.accept_bits] * (len(self.split) - self.num_cells)  # tail, padding: accept
        self.cheap = torch.tensor(thresholds, dtype=torch.int64)

    def _build_fast(self) -> None:
        unit = 1 << self.split_bits
        self.split_int = torch.tensor([int(mpmath.floor(s * unit)) for s in self.split], dtype=torch.int64)
        self.alias_t = torch.tensor(self.alias, dtype=torch.int64)
        self._devices = {}

    @property
    def consts(self) -> Tensor:
        """The integer constants of :func:`first_pass`."""
        slot_shift = WORD_BITS - self.slot_bits
        offset_shift = self.accept_bits if self.shared else WORD_BITS - self.j
        return torch.tensor([slot_shift, slot_shift - self.split_bits, (1 << self.split_bits) - 1, offset_shift,
                             self.w - 1, (1 << self.accept_bits) - 1, self.j, self.tail], dtype=torch.int64)

    def on(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """The fast-path tables (integer splits, aliases, cheap acceptance thresholds) on ``device``."""
        if device.type == "cpu":
            return self.split_int, self.alias_t, self.cheap
        if device not in self._devices:
            self._devices[device] = (self.split_int.to(device), self.alias_t.to(device), self.cheap.to(device))
        return self._devices[device]

    @staticmethod
    def two_laplace_margin(b: float) -> float:
        r"""Relative margin of the float64 acceptance ratio of the two-Laplace sum at scale ``b``
        (grid steps, :math:`b \ge 2^{20}`): :math:`1/(12 b^2)`, added to the float margin
        :math:`2^{-44}`.

        **The fast ratio.** For :math:`1 \le r \le k` in one cell (:math:`r` the cell's reference,
        :math:`0 \le k - r < w \le b/32`) the sampler evaluates the *density* ratio
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
        errs by less than :math:`8 \cdot 2^{-53}` relatively, well inside :math:`2^{-44}`. Value 0
        (cell 0) uses :math:`P(M = 0)/P(M = 1)` from the 256-bit probabilities, rounded once.
        ``tests/mechanisms/test_two_laplace_noise.py`` checks the bound against the 256-bit ratio
        and that it is tight enough to catch a wrong formula."""
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

    def reference(self, c: int) -> int:
        """The value of largest ``P(M = k)`` in cell ``c`` (the envelope is ``P(M = ref)``)."""
        return 1 if c == 0 else c * self.w

    def accept_probability(self, k: int):
        """Exact ``P(M = k) / P(M = ref)`` (256-bit)."""
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


def first_pass(w1: Tensor, w2: Tensor, w3: Tensor, split_int: Tensor, alias: Tensor, cheap: Tensor,
               consts: list[int]) -> tuple[Tensor, Tensor, Tensor]:
    """One pass over uniform 63-bit words: the alias cell, the signed candidate value, and a flag for
    the samples the eager code must finish (an alias tie, the tail cell, a word the cheap threshold
    does not accept).

    ``consts``: slot shift, split shift, split mask, offset shift, offset mask, acceptance mask, cell
    width exponent ``j``, tail cell. ``w3`` is ``w2`` when the offset shares the acceptance word.
    Written with integer arithmetic and table gathers only (``torch.where`` on a boolean mask costs
    about three integer operations): ``d >> 63`` is all ones exactly where ``d < 0``."""
    slot = w1 >> consts[0]
    d = (w1 >> consts[1]).bitwise_and_(consts[2]).sub_(split_int.index_select(0, slot))  # low - split
    other = alias.index_select(0, slot)
    cell = slot.sub_(other).bitwise_and_(d >> 63).add_(other)  # the slot when low < split, else its alias
    negative = w2 >> 62
    k = (w3 >> consts[3]).bitwise_and_(consts[4]).add_(cell, alpha=1 << consts[6])
    value = k.bitwise_xor_(negative.neg_()).sub_(negative)  # negative is -1 or 0 here: k or -k
    flag = (w2 & consts[5]) >= cheap.index_select(0, cell)
    flag |= d == 0
    flag |= cell == consts[7]
    return value, cell, flag


def exact_bernoulli(p, known: int, known_bits: int, source: RandomSource, ctx=None) -> bool:
    """Whether ``U < p`` for a uniform ``U`` whose first ``known_bits`` bits are the integer ``known``,
    drawing further 63-bit words from ``source`` until the comparison is decided (``p`` an mpmath
    number in [0, 1], exact to 256 bits)."""
    ctx = ctx or _mp()
    t = ctx.mpf(p) * (1 << known_bits)
    for _ in range(4):  # 256 bits of p: at most ~3 further words are meaningful
        f = int(ctx.floor(t))
        if known != f:
            return known < f
        t = (t - f) * (1 << WORD_BITS)
        known = int(source.words(1)[0])
    raise RuntimeError("exact comparison exhausted the 256-bit precision (probability below 2^-190)")


class RoundedNoiseSampler:
    r"""Exact i.i.d. samples of the rounded Laplace (``kind="laplace"``, scale :math:`b`), rounded
    Gaussian (``kind="gaussian"``, standard deviation :math:`\sigma`) or rounded sum of two independent
    Laplace (``kind="two_laplace"``, each of scale :math:`b`; standard deviation :math:`2b`)
    distribution on the integers, the scale given in grid steps, in :math:`[2^{20}, 2^{46}]`.

    The alias table is built once per ``(kind, scale)`` (about 0.1 s) and cached.
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

    def sample(self, n: int, source: RandomSource, out: Tensor | None = None) -> Tensor:
        """``n`` samples (``int64`` on ``source.device``), written into ``out`` when given.

        On the CPU the work is split into tasks of :data:`_TASK` samples run on
        ``torch.get_num_threads()`` threads, each task with its own stream from
        :meth:`RandomSource.spawn` (so a seeded source gives the same samples whatever the
        number of threads)."""
        n = int(n)
        if out is None:
            out = torch.empty(n, dtype=torch.int64, device=source.device)
        starts = list(range(0, n, _TASK))
        if len(starts) <= 1:
            self._sample_task(out, source)
            return out
        children = source.spawn(len(starts))

        def task(i: int) -> None:
            self._sample_task(out[starts[i]:starts[i] + _TASK], children[i])

        run_tasks(task, len(starts), source.device)
        return out

    def _sample_task(self, out: Tensor, source: RandomSource) -> None:
        """Fill ``out`` from one stream: cache-sized chunks through :func:`first_pass`, the flagged
        samples finished exactly, then the rejected values again."""
        t = self._t
        n = out.numel()
        split_int, alias, cheap = t.on(out.device)
        consts = t.consts.tolist()
        flagged_parts = []
        for start in range(0, n, _CHUNK):
            m = min(_CHUNK, n - start)
            w1, w2 = source.words(m), source.words(m)
            w3 = w2 if t.shared else source.words(m)
            value, cell, flag = first_pass(w1, w2, w3, split_int, alias, cheap, consts)
            out[start:start + m] = value
            idx = flag.nonzero().squeeze(1)
            if idx.numel():  # about 1%: ties, the full acceptance test, tails (finished below, together)
                w2i = w2.index_select(0, idx)
                w3i = w2i if t.shared else w3.index_select(0, idx)
                flagged_parts.append((idx + start, w1.index_select(0, idx), cell.index_select(0, idx),
                                      (w3i >> consts[3]) & consts[4], w2i & consts[5], w2i >> (WORD_BITS - 1)))
        cells, retry = [], []
        if flagged_parts:
            index, w1, cell, offset, bits, negative = (torch.cat(p) for p in zip(*flagged_parts))
            cell, accept = self._finish(out, index, w1, cell, offset, bits, negative, source)
            if not bool(accept.all()):
                cells.append(cell[~accept])
                retry.append(index[~accept])
        if retry:  # rejection: a fresh value of the same cell, until accepted
            index, cell = torch.cat(retry), torch.cat(cells)
            while index.numel():
                value, accept = self._within(cell, source)
                out[index[accept]] = value[accept]
                index, cell = index[~accept], cell[~accept]

    def _finish(self, out: Tensor, index: Tensor, w1: Tensor, cell: Tensor, offset: Tensor, bits: Tensor,
                negative: Tensor, source: RandomSource) -> tuple[Tensor, Tensor]:
        """Finish the samples the first pass flagged: an alias tie decided exactly, the tail cell,
        the acceptance test beyond the cheap threshold. Writes the accepted values into ``out`` at
        ``index``; returns the (decided) cells and which values were accepted."""
        t = self._t
        slot = w1 >> (WORD_BITS - t.slot_bits)
        low = (w1 >> (WORD_BITS - t.slot_bits - t.split_bits)) & ((1 << t.split_bits) - 1)
        split_int, _, cheap = t.on(w1.device)
        tie = low == split_int.index_select(0, slot)
        if bool(tie.any()):  # probability 2^-50 per sample: the exact comparison
            cell = cell.clone()
            for i in tie.nonzero().squeeze(1).tolist():
                s = int(slot[i])
                keep = exact_bernoulli(t.split[s], int(low[i]), t.split_bits, source, t.ctx)
                cell[i] = s if keep else t.alias[s]
        k = torch.add(offset, cell, alpha=t.w)
        accept = bits < cheap.index_select(0, cell)
        self._slow_accept(accept, k, offset, bits, source)
        value = torch.where(negative.bool(), -k, k)
        tail = cell == t.tail
        if bool(tail.any()):
            self._replace_tails(value, tail, source)
            accept |= tail
        out[index[accept]] = value[accept]
        return cell, accept

    def _slow_accept(self, accept: Tensor, k: Tensor, offset: Tensor, bits: Tensor, source: RandomSource) -> None:
        """Complete the acceptance test in place where the cheap threshold did not accept: the
        value's own probability in float64 outside the margin, 256-bit arithmetic inside it."""
        t = self._t
        slow = (~accept).nonzero().squeeze(1)
        if not slow.numel():
            return
        ks, bs = k[slow], bits[slow]
        ratio = self._ratio(ks, offset[slow])
        bf = bs.to(torch.float64)
        acc = (bf + 1.0) <= ratio * t.accept_scale
        undecided = (~acc) & (bf < ratio * t.reject_scale)
        if bool(undecided.any()):  # about 2^-35 per sample: decide exactly
            for i in undecided.nonzero().squeeze(1).tolist():
                acc[i] = exact_bernoulli(t.accept_probability(int(ks[i])), int(bs[i]), t.accept_bits, source, t.ctx)
        accept[slow] = acc

    def _within(self, cell: Tensor, source: RandomSource) -> tuple[Tensor, Tensor]:
        """A uniform value of each cell with a random sign, and whether the rejection test accepts it
        (values of the tail cell are drawn by the exact tail path, accepted)."""
        t = self._t
        word = source.words(cell.numel())
        negative = (word >> (WORD_BITS - 1)).bool()
        if t.shared:  # sign, offset and acceptance bits from one word
            offset = (word >> t.accept_bits) & (t.w - 1)
        else:
            offset = source.words(cell.numel()) >> (WORD_BITS - t.j)
        bits = word & ((1 << t.accept_bits) - 1)
        k = torch.add(offset, cell, alpha=t.w)
        # cheap test first: below the cell's smallest acceptance probability (integer threshold)
        accept = bits < t.on(cell.device)[2].index_select(0, cell)
        self._slow_accept(accept, k, offset, bits, source)
        value = torch.where(negative, -k, k)  # the sign of M = 0 is irrelevant
        tail = cell == t.tail
        if bool(tail.any()):
            self._replace_tails(value, tail, source)
            accept |= tail
        return value, accept

    def _replace_tails(self, value: Tensor, tail: Tensor, source: RandomSource) -> None:
        """Draw the values of the tail cell exactly, in place (probability below 1e-21 per sample)."""
        for i in tail.nonzero().squeeze(1).tolist():
            value[i] = self._tail_sample(source)

    def _ratio(self, k: Tensor, offset: Tensor) -> Tensor:
        """float64 estimate of the acceptance probability ``P(M = k) / P(M = ref)`` of values ``k`` at
        ``offset`` within their cell (within ``margin`` of the exact value, relatively)."""
        t = self._t
        kf = k.to(torch.float64)
        ref = (kf - offset.to(torch.float64)).clamp_(min=1.0)  # the cell's most likely value
        if t.kind == "laplace":
            ratio = ref.sub_(kf).mul_(1.0 / t.scale).exp_()
        elif t.kind == "two_laplace":  # the density ratio e^{-(k - ref)/b} (b + k) / (b + ref)
            poly = (kf + t.scale).div_(ref + t.scale)
            ratio = ref.sub_(kf).mul_(1.0 / t.scale).exp_().mul_(poly)
        else:
            ratio = (ref - kf).mul_(ref.add_(kf)).mul_(0.5 / t.scale ** 2).exp_()
        zero = k == 0
        if bool(zero.any()):  # P(M = 0) / P(M = 1)
            ratio = torch.where(zero, torch.full_like(ratio, t.zero_ratio), ratio)
        return ratio

    def _tail_sample(self, source: RandomSource) -> int:
        """A magnitude from the tail ``M >= C w`` (exact), with a random sign."""
        t = self._t
        start = t.num_cells * t.w
        sign = bool(int(source.words(1)[0]) & 1)
        if t.kind == "laplace":  # memoryless: M - start is distributed as M' - 1 given M' >= 1
            while True:
                m = int(self.sample(1, source)[0])
                if m != 0:
                    value = start + abs(m) - 1
                    return -value if sign else value
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
        return -lo if sign else lo


def rounded_laplace(n: int, scale: float, source: RandomSource) -> Tensor:
    """``n`` exact samples of ``round(Lap(0, scale))`` (scale in grid steps)."""
    return RoundedNoiseSampler("laplace", scale).sample(n, source)


def rounded_gaussian(n: int, std: float, source: RandomSource) -> Tensor:
    """``n`` exact samples of ``round(N(0, std^2))`` (std in grid steps)."""
    return RoundedNoiseSampler("gaussian", std).sample(n, source)


def rounded_two_laplace(n: int, scale: float, source: RandomSource) -> Tensor:
    """``n`` exact samples of ``round(Lap(0, scale) + Lap(0, scale))`` (scale in grid steps)."""
    return RoundedNoiseSampler("two_laplace", scale).sample(n, source)

