r"""The device release: a whole release of exact noise on a GPU with one host synchronisation.

:class:`~pyg_private.sampling.sampler.RoundedNoiseSampler` draws a sample in two stages: a first
pass that settles about 99% of the samples with integer arithmetic, and the finish of the others
(the *flagged* samples: an alias tie, a tail cell, acceptance bits above the cheap threshold). On
the CPU the finish runs on the host with compaction (the flagged list, then the undecided ones, then
the rejected ones: every step reads a count). On a device each such read waits for the device, so
here the whole release, every task of :data:`~pyg_private.sampling.sampler._TASK` samples, runs on
the device first, and the host reads **one** small tensor at the end:

1. **First pass, fixed capacity.** Task by task (the words drawn in the sampler's order, chunk by
   chunk), the first pass lists the first ``cap`` flagged samples of the task (their indices,
   words and rounded values) in the task's region of the *slots*, and counts all of them, on the
   device. ``cap`` (:func:`capacity`) is a Chernoff bound on the binomial count of flags: the
   flag of a sample is a function of its own uniform words only, true with the probability
   :func:`flag_probability` computes exactly from the table, so the count of a task of ``m``
   samples is :math:`\mathrm{Bin}(m, p)` and exceeds ``cap - 1`` with probability at most
   :data:`OVERFLOW_PROBABILITY`.
2. **R finishing rounds, masks instead of compaction** (:func:`rounds`). Before each round a fresh
   block of words is drawn, a fixed number per slot (the tie word and the extension word in round
   1; a new value's words and its extension word after), and every slot that is still working
   reads only its own words of that block. Round 1 decides ties with one more word, accepts with
   the cheap threshold or the float64 bounds or one more word; a rejected sample draws a new value
   of its cell in each later round. What a round cannot decide (an alias tie equal to the split's
   next 63 bits, a tail cell, an acceptance test the float bounds and one more word leave open) is
   handed to the host, as are the samples still rejected after ``R`` rounds.
3. **One synchronisation** reads the flagged counts, the index of each task's ``cap``-th flagged
   sample and the number of samples handed to the host (about zero); the exact host path then
   finishes those, and redraws the tasks whose slots filled up.

**Why the law is exact.** (a) *Fresh, independent words.* Every word a slot reads lies at a
position fixed before it is drawn (its round, its slot, its role), whatever the outcome of anything
else, and no word is read twice; so the words a working slot reads in round ``r`` are uniform and
independent of everything before. The finish of a sample is rejection sampling (von Neumann,
"Various techniques used in connection with random digits", 1951; Walker's alias method, then a
value uniform in its cell accepted with its exact probability ratio): its result has the target
law whatever the source of the successive independent proposals (Devroye, *Non-Uniform Random
Variate Generation*, 1986, Sec. II.3), so the device's rounds, and the host's continuation from the
exact state a round left (the bits of ``U`` already read, the cell of a rejected sample), give the
law of the CPU's finish. Every decision a round takes is the exact comparison of the uniform number
those bits begin with, as in the exact discrete Gaussian sampler of Canonne, Kamath and Steinke
(NeurIPS 2020), whose decisions are exact Bernoulli trials: the float64 bounds decide only outside
the tables' proven margin, and ties and undecided comparisons read further bits, on the host in
256-bit arithmetic. (b) *The capacity.* Let :math:`\tau` be the index of the ``cap``-th flagged
sample of a task. :math:`\{\tau = p\}` depends only on the first :math:`p` samples' words, so given
it (and those words) the later samples' words are still i.i.d. uniform and independent of the
first :math:`p` outputs: replacing the outputs after :math:`\tau` by an independent exact draw
(the host's sampler, on the values left untouched) leaves the joint law unchanged. This is what
happens when a task's slots fill up: nothing is dropped, every sample up to :math:`\tau` is
finished from its own first-pass state and every sample after it is drawn anew. (c) *No data in
any decision.* Which samples are flagged, the counts, the states and the host's work are functions
of the random words alone; the released values enter only the arithmetic of the grid step
(branch-free).

**What the timing can show.** Whether the host path runs (a full task, a sample handed over) is a
function of the random words only, so its law, and that of the time a release takes, is the same
for every input: it reveals nothing about the data. It is not independent of the noise (a tail
value is always handed over), so an observer who sees it together with the output learns a little
about the noise: an event of probability :math:`\eta` under the words, released beside an
:math:`(\varepsilon, \delta)` output, adds at most :math:`(1 + e^{\varepsilon})\eta` to
:math:`\delta`. The overflow has probability below ``tasks *`` :data:`OVERFLOW_PROBABILITY`; a
hand-over needs, per flagged sample, a tail cell (below :math:`10^{-21}`), a tie of 63 more bits
(:math:`2^{-63}`), an acceptance test that one more word leaves open (about twice the tables' float
margin: :math:`2^{-43}`, up to :math:`2^{-34}` for a Gaussian at the smallest scale) or a rejection
in every one of the ``R`` rounds (:func:`rounds`). The ledger does not charge this, as it does not
charge the CPU path's finishing rounds, whose number is visible in the same way: the accounting
covers the released values, not the time a release takes (timing attacks on samplers: Jin et al.,
"Are we there yet? Timing and floating-point attacks on differential privacy systems", S&P 2022;
floating-point ones: Mironov, CCS 2012).

**Memory.** The slots take ``6 + words_per_sample`` int64 arrays (one more for a grid release) of
the expected flagged count plus about nine of its standard deviations a task (the Chernoff bound at
:data:`OVERFLOW_PROBABILITY`), and the round blocks two or three more; the first pass reuses one
task's word buffers. All come from the scratch pool (:mod:`~pyg_private.sampling.workspace`, zeroed
when returned), made by :func:`reserve` before a release is charged.

**Backends.** The three device steps (first pass, round, write) are Triton kernels
(:mod:`~pyg_private.sampling.backends.finish_triton`) or, where Triton does not run, the torch
operations of :mod:`~pyg_private.sampling.backends.finish_torch`, bit for bit the same from the same
words. **Word order.** All tasks draw from the release's one source (the CPU path gives each task a
stream of its own from :meth:`RandomSource.spawn`, which on a device would copy a key per task from
the host), and the finish reads the round blocks described above. So from the same source the
device release and the CPU path give the same noise for the samples the first pass settles in a
release of one task, and different but identically distributed noise for the others.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from . import backends
from .backends import finish_torch
from .backends.finish_torch import DONE, EMPTY, EXACT, EXTEND_LIMIT, FIRST, PENDING, TAIL, TIE, Slots
from .bernoulli import exact_bernoulli
from .grid import add_noise_on_grid_
from .words import WORD_BITS, RandomSource
from .workspace import borrow, reserve as _reserve

__all__ = ["DEVICES", "OVERFLOW_PROBABILITY", "serves", "steps_for", "flag_probability", "capacity", "rounds",
           "release", "reserve", "host_reads"]

#: Device types whose releases run here (the tests add ``"cpu"``).
DEVICES: set[str] = {"cuda"}
#: Bound on the probability that a task's flagged samples fill its slots.
OVERFLOW_PROBABILITY = 2.0 ** -64
#: The finishing rounds aim at fewer than this many samples expected to be handed to the host for
#: rejections (performance only: whatever is left is finished exactly).
_LEFTOVER_TARGET = 2.0 ** -20
_MAX_ROUNDS = 16
#: ``None``: :func:`rounds` decides; an integer forces that many rounds (tests).
ROUNDS: Optional[int] = None

_reads = [0]


def host_reads() -> int:
    """How many times device releases have read the device from the host (a counter that only
    grows: one read a release unless the host path runs; the host path's own sampler calls, which
    read the device too, are not counted here)."""
    return _reads[0]


def _read(x: Tensor) -> list:
    _reads[0] += 1
    return x.tolist()


def serves(device: torch.device, contiguous: bool = True) -> bool:
    """Whether releases of (contiguous) tensors on ``device`` run as device releases."""
    return torch.device(device).type in DEVICES and contiguous


def steps_for(device: torch.device):
    """The Triton steps where the Triton backend serves ``device``, else the torch steps."""
    if backends.triton_ops.BACKEND.serves(torch.device(device)):
        from .backends import finish_triton  # imports triton
        return finish_triton.STEPS
    return finish_torch.STEPS


def flag_probability(t) -> float:
    """The probability that the first pass flags a sample of table ``t`` (exact up to float64
    rounding, rounded up): per alias slot, a tie, or the acceptance bits not below the chosen
    side's cheap threshold (0 for the tail cells). Computed on the host from the table (cached in
    ``t.derived``, which a rebuilt table empties)."""
    cache = t.derived
    if "flag_probability" not in cache:
        s, a = t.split_bits, t.accept_bits
        split = t.split_int.numpy().astype(np.float64)
        two_s = 2.0 ** s
        below = np.minimum(split, two_s) / two_s
        tie = (split < two_s) / two_s
        above = np.maximum(two_s - split - 1.0, 0.0) / two_s
        slots = np.arange(len(t.split))
        cheap = np.maximum(t.cheap3.numpy().astype(np.float64), 0.0)
        keep, alias = cheap[np.maximum(3 * slots - 1, 0)], cheap[3 * slots + 1]
        p = float(np.mean(below * (1.0 - keep / 2.0 ** a) + tie + above * (1.0 - alias / 2.0 ** a)))
        cache["flag_probability"] = min(1.0, p * (1.0 + 2.0 ** -30) + 2.0 ** -60)
    return cache["flag_probability"]


def capacity(m: int, p: float, eta: float = OVERFLOW_PROBABILITY) -> int:
    r"""The slots of a task of ``m`` samples whose samples are flagged independently with
    probability ``p``: the smallest ``k`` with the Chernoff bound
    :math:`P(\mathrm{Bin}(m, p) \ge k) \le e^{-m\,\mathrm{KL}(k/m \,\|\, p)} \le \eta`, or ``m``."""
    m = int(m)
    if m <= 0:
        return 0
    if p >= 1.0:
        return m
    log_eta = math.log(eta)

    def log_bound(k: int) -> float:
        x = k / m
        if x <= p:
            return 0.0
        if x >= 1.0:
            return m * math.log(p)
        return -m * (x * math.log(x / p) + (1.0 - x) * (math.log1p(-x) - math.log1p(-p)))

    if log_bound(m) > log_eta:
        return m
    lo, hi = max(1, int(m * p)), m  # log_bound(hi) <= log_eta
    while lo < hi:
        mid = (lo + hi) // 2
        if log_bound(mid) <= log_eta:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _rejection_estimate(t) -> float:
    """About the largest probability that a fresh value of a table cell is rejected (1 minus the
    ratio at the far end of a cell; value 0 aside)."""
    cache = t.derived
    if "rejection_estimate" not in cache:
        c = torch.arange(1, t.num_cells, dtype=torch.int64)
        far = t.density_ratio(c * t.w + t.w - 1, t.ref.index_select(0, c)).numpy()
        cache["rejection_estimate"] = float(1.0 - far.min()) if far.size else 0.5
    return cache["rejection_estimate"]


def rounds(t, slots: int) -> int:
    """The finishing rounds of a release with ``slots`` slots: enough that fewer than
    :data:`_LEFTOVER_TARGET` samples are expected to be rejected in every round (round 1 counted as
    a rejection), at least 2, at most :data:`_MAX_ROUNDS`. Performance only: what is left is
    finished exactly on the host."""
    if ROUNDS is not None:
        return max(1, int(ROUNDS))
    rho = min(max(_rejection_estimate(t), 2.0 ** -30), 0.5)
    need = math.log(_LEFTOVER_TARGET / max(slots, 1)) / math.log(rho)
    return int(min(_MAX_ROUNDS, max(2, 1 + math.ceil(need))))


class _Plan:
    """Sizes of one release: tasks, slots a task (``cap``; ``last_cap`` for the last task), rounds."""

    def __init__(self, sampler, n: int) -> None:
        from . import sampler as sampler_module  # its _TASK and _CHUNK are read at run time

        t = sampler._t
        self.task, self.chunk = sampler_module._TASK, sampler_module._CHUNK
        self.n, self.per = n, t.words_per_sample
        self.tasks = max(1, -(-n // self.task))
        self.first = min(n, self.task)  # the size of every task but the last
        self.last = n - (self.tasks - 1) * self.task
        p = flag_probability(t)
        self.cap, self.last_cap = capacity(self.first, p), capacity(self.last, p)
        self.slots = self.tasks * self.cap
        self.rounds = rounds(t, self.slots)
        self.extend = t.accept_bits <= EXTEND_LIMIT
        self.fresh = max(2 if self.extend else 1, finish_torch.fresh_words(t) + int(self.extend))

    def key(self, steps, device: torch.device, grid: bool) -> tuple:
        return ("device_release", steps.name, "grid" if grid else "samples", device, self.per, self.first,
                self.tasks, self.cap)

    def factory(self, device: torch.device, grid: bool):
        from .backends.triton_kernels import workspace_size

        size = 1 << max(0, self.first - 1).bit_length()  # the task's word buffers, a power of two

        def make() -> list[Tensor]:
            i64 = dict(dtype=torch.int64, device=device)
            return ([torch.empty(size, **i64) for _ in range(self.per)]
                    + [torch.empty(self.tasks, workspace_size(size), **i64)]
                    + [torch.zeros(self.slots + 1, **i64) for _ in range(Slots.count(self.per, grid))]
                    + [torch.empty(self.slots, **i64) for _ in range(self.fresh)])
        return make


def _tables(t, device: torch.device) -> dict:
    tables = t.on(device)
    if "finish_f64" not in tables:
        if finish_torch.max_exp_argument(t) > finish_torch.EXP_RANGE:  # pragma: no cover - every table passes
            raise RuntimeError("the device finish's polynomial exp does not cover this table")
        tables["finish_f64"] = torch.tensor(finish_torch.finish_params(t), dtype=torch.float64, device=device)
    return tables


def reserve(sampler, n: int, device: torch.device, grid: bool, concurrent: int = 1) -> None:
    """Make the buffers (and upload the tables) a device release of ``n`` samples will use."""
    if int(n) <= 0:
        return
    plan = _Plan(sampler, int(n))
    _tables(sampler._t, device)
    _reserve(plan.key(steps_for(device), device, grid), plan.factory(device, grid), max(1, int(concurrent)))


def release(sampler, target: Tensor, source: RandomSource, step: Optional[tuple[float, float, float]] = None,
            on_scale: bool = False) -> None:
    """The device release of ``sampler``'s noise into the contiguous ``target``: its samples
    (``int64``, ``step is None``), or the grid release ``target <- g (clamp(round(target s)) + K)``
    in place (float32/float64, ``step = (s, g, L)``; ``on_scale`` as in
    :meth:`RoundedNoiseSampler.add_to_grid_`). One host read unless the host path runs."""
    n = target.numel()
    if n == 0:
        return
    t = sampler._t
    device = target.device
    flat = target.view(-1)
    grid = step is not None
    plan = _Plan(sampler, n)
    steps = steps_for(device)
    tables = _tables(t, device)
    with borrow(plan.key(steps, device, grid), plan.factory(device, grid)) as buffers:
        per = plan.per
        words, ws = buffers[:per], buffers[per]
        slots = Slots.of(buffers[per + 1:per + 1 + Slots.count(per, grid)], plan.slots, per, grid)
        fresh = buffers[per + 1 + Slots.count(per, grid):]
        for i in range(plan.tasks):  # 1. the first passes
            lo = i * plan.task
            m = min(plan.task, n - lo)
            w = [b[:m] for b in words]
            for a in range(0, m, plan.chunk):  # the sampler's order: chunk by chunk, word by word
                b = min(a + plan.chunk, m)
                for x in w:
                    source.words(b - a, out=x[a:b])
            cap = plan.cap if i < plan.tasks - 1 else plan.last_cap
            steps.first_pass(t, tables, w, flat[lo:lo + m], step, slots, i * plan.cap, cap, lo, ws[i])
        counts = ws[:, 1]
        tasks = torch.arange(plan.tasks, dtype=torch.int64, device=device)
        caps = torch.where(tasks == plan.tasks - 1, plan.last_cap, plan.cap)  # (no host value copied)
        pos = torch.arange(plan.slots, dtype=torch.int64, device=device)
        task = pos // plan.cap
        limit = torch.minimum(counts, caps).index_select(0, task)
        slots.state[:plan.slots] = torch.where(pos - task * plan.cap < limit, FIRST, EMPTY)
        for r in range(plan.rounds):  # 2. the rounds, each on a fresh block of words
            need = (1 if r == 0 else finish_torch.fresh_words(t)) + int(plan.extend)
            block = [f[:plan.slots] for f in fresh[:need]]
            for f in block:
                source.words(plan.slots, out=f)
            steps.finish_round(t, tables, slots, block, r == 0)
        steps.write(slots, flat, step)
        last = slots.idx.index_select(0, tasks * plan.cap + caps - 1)
        state = slots.state[:plan.slots]
        left = ((state != EMPTY) & (state != DONE)).sum()
        summary = _read(torch.cat([counts, last, left.view(1)]))  # 3. the one synchronisation
        if summary[-1]:
            _finish_on_host(sampler, slots, flat, step, source)
        for i in range(plan.tasks):
            lo = i * plan.task
            hi, cap = min(lo + plan.task, n), (plan.cap if i < plan.tasks - 1 else plan.last_cap)
            after = summary[plan.tasks + i] + 1
            if summary[i] >= cap and after < hi:  # the slots filled up: redraw what follows the cap-th flag
                _redraw(sampler, flat[after:hi], step, on_scale, source)


def _redraw(sampler, part: Tensor, step, on_scale: bool, source: RandomSource) -> None:
    """An independent exact draw over ``part`` on the host path (the sampler's own tasks)."""
    if step is None:
        sampler._sample_task(part, source)
        return
    g = step[1]
    backend = sampler._grid_backend(part.device, part.dtype, g, True)
    if backend is not None:
        sampler._grid_finish(part, step, source, sampler._grid_pass(backend, part, step, source))
        return
    noise = torch.empty(part.numel(), dtype=torch.int64, device=part.device)
    sampler._sample_task(noise, source)
    add_noise_on_grid_(part, noise, g, on_scale=on_scale)


def _finish_on_host(sampler, slots: Slots, flat: Tensor, step, source: RandomSource) -> None:
    """Finish the slots a round handed over, exactly, from the state it left, in slot order, with
    fresh words of ``source``; then write them."""
    t = sampler._t
    state = slots.state[:slots.size]
    where = ((state != EMPTY) & (state != DONE)).nonzero().squeeze(1)
    _reads[0] += 1  # (nonzero reads its count)
    columns = torch.stack([a.index_select(0, where) for a in
                           [slots.state, slots.idx, slots.cell, slots.val, slots.kh, slots.kl, *slots.words]])
    rows = [tuple(r) for r in _read(columns.t())]
    extend = t.accept_bits <= EXTEND_LIMIT
    device = flat.device
    done: dict[int, int] = {}  # row -> noise
    pending: list[tuple[int, int]] = []  # (row, cell) to draw again in the cell
    for r, (st, _, cell, value, kh, kl, *words) in enumerate(rows):
        if st == TIE:  # U's first split_bits + 63 bits equal the split's: decide in 256 bits
            w0 = words[0]
            slot = w0 >> (WORD_BITS - t.slot_bits)
            low = (w0 >> t.low_shift) & ((1 << t.split_bits) - 1)
            keep = exact_bernoulli(t.split[slot], (low << WORD_BITS) | kl, t.split_bits + WORD_BITS, source, t.ctx)
            cell = int(t.slot_cell[slot if keep else int(t.alias_t[slot])])
            offset, bits = (int(x) for x in t.offset_and_bits([torch.tensor([w]) for w in words]))
            value = int(t.base[cell]) + offset
            if cell >= t.pos_tail:
                done[r] = sampler._tail_sample(source, negative=cell == t.neg_tail)
                continue
            on = dict(device=device)  # (the source draws on the device)
            accept = torch.tensor([bits < int(t.cheap[cell])], **on)
            sampler._slow_accept(accept, torch.tensor([True], **on), torch.tensor([value], **on),
                                 torch.tensor([cell], **on), torch.tensor([bits], **on), source)
            st = DONE if bool(accept[0]) else PENDING
        elif st == TAIL:
            done[r] = sampler._tail_sample(source, negative=cell == t.neg_tail)
            continue
        elif st == EXACT:  # U begins with the acceptance bits (and the extension word)
            known, known_bits = ((kh << WORD_BITS) | kl, t.accept_bits + WORD_BITS) if extend else (kh, t.accept_bits)
            st = DONE if exact_bernoulli(t.accept_probability(value), known, known_bits, source, t.ctx) else PENDING
        if st == DONE:
            done[r] = value
        else:
            pending.append((r, cell))
    while pending:  # rejection: a fresh value of the same cell, until accepted (the sampler's loop)
        values, accept = sampler._within(torch.tensor([c for _, c in pending], dtype=torch.int64, device=device),
                                         source)
        rest = []
        for (r, c), v, a in zip(pending, values.tolist(), accept.tolist()):
            if a:
                done[r] = v
            else:
                rest.append((r, c))
        pending = rest
    order = sorted(done)
    index = torch.tensor([rows[r][1] for r in order], dtype=torch.int64, device=device)
    noise = torch.tensor([done[r] for r in order], dtype=torch.int64, device=device)
    if step is None:
        flat.index_copy_(0, index, noise)
    else:
        q = slots.q.index_select(0, where.index_select(0, torch.tensor(order, dtype=torch.int64, device=device)))
        flat.index_copy_(0, index, q.add_(noise).to(flat.dtype).mul_(step[1]))
