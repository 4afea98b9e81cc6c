r"""Exact samplers of integer noise from uniform random words: the rounded Laplace, rounded Gaussian
and rounded two-Laplace distributions (:class:`RoundedNoiseSampler`).

Floating-point samplers of continuous noise break differential privacy in practice: some outputs are
impossible under one input and possible under its neighbour (Mironov, "On significance of the least
significant bits for differential privacy", CCS 2012; Jin et al., "Are we there yet? Timing and
floating-point attacks on differential privacy systems", S&P 2022). The safe mechanisms of this
package therefore release on a grid (see :mod:`pyg_private.sampling.grid`): the query is rounded
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

variance :math:`4b^2`; see :meth:`~pyg_private.sampling.tables.AliasTable.two_laplace_margin` for
its fast acceptance ratio.

**How a sample is drawn (all integer comparisons on uniform 63-bit words).** The alias table of
:mod:`pyg_private.sampling.tables` (cells of :math:`2^j` values chosen with Walker's alias method, a
value uniform in its cell, accepted with its exact probability ratio) is read in two stages:

* **the first pass**, over a cache-sized chunk of words (or a whole task on a GPU): the alias
  choice of the cell, the value in it and a cheap integer acceptance threshold, which settles about
  99% of the samples; it runs on a backend of :mod:`pyg_private.sampling.backends` (C loops on the
  CPU, Triton on CUDA, torch operations anywhere), all with the same results;
* **the finish** of the flagged samples (:meth:`RoundedNoiseSampler._finish_flagged`), together,
  here: the acceptance test in float64, decided only when the bits lie farther than a proven
  margin from it; a comparison the bits cannot decide reads one more word, and what that leaves
  (probability about :math:`2^{-43}`) is decided in 256-bit arithmetic with as many further words as
  it needs (:func:`~pyg_private.sampling.bernoulli.exact_bernoulli`). A tie with an alias split is
  broken the same way (the split's next 63 bits, then 256 bits). A rejected value is drawn again in
  its cell. The outermost tail is drawn exactly by inversion in 256-bit arithmetic.

The samples are therefore exact up to the 256-bit precision of the tables: the sampled distribution
differs from the stated one by less than :math:`10^{-60}` in total variation (far below any
reported privacy figure; not added to the ledger).

**Tasks and streams.** The work is split into tasks of :data:`_TASK` samples, each with its own
stream (:meth:`~pyg_private.sampling.words.RandomSource.spawn`) on torch's threads, and each task
into chunks of :data:`_CHUNK`; every backend reads the words in the same order, so a seeded source
gives the same samples whatever the backend and the number of threads.

**On a GPU: the device release.** A release on a CUDA device (:meth:`sample`, :meth:`add_to_grid_`
of contiguous tensors) runs as :mod:`~pyg_private.sampling.device_release`: the first pass of every
task into slots of a fixed capacity, bounded finishing rounds on the device, and one host
synchronisation for the whole release, with an exact host path for what is left. The law is the
same; the words are read in another order (one stream for all the tasks, the finish on blocks of
words drawn a round at a time), so from the same source its noise differs from the CPU path's for
the flagged samples (and for every sample beyond the first task). Its Triton kernels and its torch
fallback give the same bits from the same words.

**Speed.** The C first pass takes about 1.8 ns a sample against 4.5 ns for the same integer
computation as torch operations; ``tests/mechanisms/test_native_first_pass.py`` compares them. A
grid release (:meth:`RoundedNoiseSampler.add_to_grid_`) fuses the first pass with the grid step in
one loop, vectorised with AVX-512 where the CPU has it (about 1.3 ns a sample with the grid step,
against 1.8 + 0.8 ns for the two passes), again with the same results as the composition.

Scales below :data:`~pyg_private.sampling.tables.MIN_SCALE` (:math:`2^{20}` grid steps) are refused:
the grid is chosen fine enough by :func:`pyg_private.sampling.grid.choose_granularity`.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

from . import backends, device_release
from .backends import Backend
from .bernoulli import exact_bernoulli
from .grid import _CLAMP, add_noise_on_grid_, check_granularity
from .tables import KINDS, MAX_SCALE, MIN_SCALE, Kind, alias_table
from .threads import run_staged, run_tasks, workers
from .words import WORD_BITS, RandomSource
from .workspace import borrow, reserve

__all__ = ["RoundedNoiseSampler", "rounded_laplace", "rounded_gaussian", "rounded_two_laplace", "exact_bernoulli",
           "MIN_SCALE", "MAX_SCALE"]

_EXTEND_LIMIT = 52  # acceptance bits up to which an undecided float comparison reads one more word
_CHUNK = 1 << 16  # samples per vectorised pass (2^15 to 2^17 measured; 2^16 the fastest)
_TASK = 1 << 19  # samples per task of one thread, with its own random stream


def _pool_size(n: int) -> int:
    """Entries of the scratch set of a chunked task of ``n`` samples: the power of two at least ``n``, at
    most one chunk (the pool then holds a few sizes only, and :meth:`RoundedNoiseSampler.reserve` knows them)."""
    return min(_CHUNK, 1 << max(0, int(n) - 1).bit_length())


def _task_size(n: int) -> int:
    """Entries of the scratch set of a whole-task backend for a task of ``n``: the power of two at least ``n``."""
    return 1 << max(0, int(n) - 1).bit_length()


def _scratch_set(backend: Backend, size: int, words: int, device: torch.device,
                 grid: bool) -> Callable[[], list[Tensor]]:
    """The factory of one scratch set: ``words`` int64 word buffers, then the backend's buffers."""
    return lambda: [torch.empty(size, dtype=torch.int64, device=device) for _ in range(words)] + \
        backend.scratch(size, device, grid)


class RoundedNoiseSampler:
    r"""Exact i.i.d. samples of the rounded Laplace (``kind="laplace"``, scale :math:`b`), rounded
    Gaussian (``kind="gaussian"``, standard deviation :math:`\sigma`) or rounded sum of two independent
    Laplace (``kind="two_laplace"``, each of scale :math:`b`; standard deviation :math:`2b`)
    distribution on the integers, the scale given in grid steps, in :math:`[2^{20}, 2^{46}]`.

    The alias table is built once per ``(kind, scale)`` (about 0.2 s) and cached. ``native``: whether
    CPU tensors may use the C backend (``True`` where it is built; the same samples either way).
    """

    def __init__(self, kind: Kind, scale: float) -> None:
        if kind not in KINDS:
            raise ValueError(f"`kind` must be 'laplace', 'gaussian' or 'two_laplace'; got {kind!r}")
        scale = float(scale)
        if not (MIN_SCALE <= scale <= MAX_SCALE):
            raise ValueError(f"the noise scale must lie in [2^20, 2^46] grid steps; got {scale!r} "
                             "(choose the granularity with `choose_granularity`)")
        self.kind, self.scale = kind, scale
        self._t = alias_table(kind, scale)
        self.native = backends.native_c.available()  # the C first pass on CPU tensors (same samples either way)

    def sample(self, n: int, source: RandomSource, out: Tensor | None = None) -> Tensor:
        """``n`` samples (``int64`` on ``source.device``), written into ``out`` when given.

        On the CPU the work is split into tasks of :data:`_TASK` samples run on
        ``torch.get_num_threads()`` threads, each task with its own stream from
        :meth:`RandomSource.spawn` (so a seeded source gives the same samples whatever the
        number of threads). On a CUDA device (a contiguous ``out``) it is one device release
        (:mod:`~pyg_private.sampling.device_release`): the same law, the words in another order."""
        n = int(n)
        if out is None:
            out = torch.empty(n, dtype=torch.int64, device=source.device)
        if device_release.serves(out.device, out.is_contiguous()):  # one host read for the whole release
            device_release.release(self, out, source)
            return out
        self._run_tasks(n, source, lambda lo, hi, stream: self._sample_task(out[lo:hi], stream))
        return out

    def add_to_grid_(self, values: Tensor, granularity: float, source: RandomSource, *,
                     on_scale: bool = False) -> Tensor:
        r"""The grid release of ``values`` with this sampler's noise, in place:
        ``values <- g * (round(values / g) + K)`` (``on_scale=True``: ``values`` already divided by ``g``),
        ``K`` the samples :meth:`sample` would draw for ``values.numel()`` entries from ``source``.

        It equals :func:`~pyg_private.sampling.grid.add_noise_on_grid_` ``(values,
        self.sample(values.numel(), source), granularity, on_scale=on_scale)`` bit for bit, from the
        same random words. Where a backend fuses the grid step (contiguous float32/float64 values:
        the C loop on the CPU for one or two words a sample, i.e. every noise scale below
        :math:`2^{39}` grid steps, eight samples at a time in AVX-512 registers where the CPU has
        them; one Triton launch a task on CUDA) the sampler's first pass and the grid step run as
        one pass: the noise of the accepted samples is never written out, and the flagged ones
        (about 1%) are finished as in :meth:`sample`, then written over their provisional values.
        Beyond :data:`_TASK` values the tasks have their own streams, as in :meth:`sample`; on the
        CPU their fused passes run on torch's threads while this thread finishes the flagged draws
        (:func:`~pyg_private.sampling.threads.run_staged`). Otherwise it runs the composition above.
        On a CUDA device (contiguous float32/float64 values) it is one device release
        (:mod:`~pyg_private.sampling.device_release`): the same law, the words in another order."""
        g = check_granularity(granularity)
        if self._device_grid(values.device, values.dtype, values.is_contiguous(), g):  # one host read in all
            device_release.release(self, values, source, (1.0 if on_scale else 1.0 / g, g, _CLAMP), on_scale)
            return values
        backend = self._grid_backend(values.device, values.dtype, g, values.is_contiguous())
        if backend is None:
            return add_noise_on_grid_(values, self.sample(values.numel(), source), g, on_scale=on_scale)
        flat = values.view(-1)
        step = (1.0 if on_scale else 1.0 / g, g, _CLAMP)
        n = flat.numel()
        starts = list(range(0, n, _TASK))
        if len(starts) <= 1:
            self._grid_finish(flat, step, source, self._grid_pass(backend, flat, step, source))
            return values
        streams = source.spawn(len(starts))  # as sample() spawns them: the same words
        parts = [flat[a:min(a + _TASK, n)] for a in starts]
        run_staged(lambda i: self._grid_pass(backend, parts[i], step, streams[i]),  # first passes on the workers
                   lambda i, pending: self._grid_finish(parts[i], step, streams[i], pending), len(starts),
                   source.device)
        return values

    def add_to_grid_staged_(self, values: Tensor, granularity: float, source: RandomSource, *,
                            on_scale: bool = False) -> Callable[[], None]:
        """:meth:`add_to_grid_` in two stages: this call runs the fused first pass (on the CPU the words
        and the C loop release the GIL) and returns the second stage, which finishes the flagged draws
        (Python) and writes their values. Call it once, in any thread, before ``values`` is read: the
        result is :meth:`add_to_grid_`'s, bit for bit (the stream's words are drawn in the same order).
        Where no backend fuses the grid step, or for more than :data:`_TASK` values (several
        streams), the whole release happens here and the second stage does nothing."""
        g = check_granularity(granularity)
        backend = self._grid_backend(values.device, values.dtype, g, values.is_contiguous())
        if values.numel() > _TASK or backend is None or \
                self._device_grid(values.device, values.dtype, values.is_contiguous(), g):
            self.add_to_grid_(values, g, source, on_scale=on_scale)
            return lambda: None
        flat = values.view(-1)
        step = (1.0 if on_scale else 1.0 / g, g, _CLAMP)
        pending = self._grid_pass(backend, flat, step, source)
        return lambda: self._grid_finish(flat, step, source, pending)

    @staticmethod
    def _device_grid(device: torch.device, dtype: torch.dtype, contiguous: bool, g: float) -> bool:
        """Whether the grid release of values of ``dtype`` on ``device`` on the grid ``g`` runs as a
        device release (:mod:`~pyg_private.sampling.device_release`: contiguous float32/float64 values
        on a device it serves, the grid in the range of the fused kernels)."""
        return (device_release.serves(device, contiguous) and dtype in (torch.float32, torch.float64)
                and 2.0 ** -100 <= g <= 2.0 ** 100)

    def _skip(self) -> tuple[str, ...]:
        return () if self.native else (backends.native_c.BACKEND.name,)

    def _sample_backend(self, device: torch.device, contiguous: bool = True) -> Backend:
        """The backend of the first pass of samples on ``device``."""
        return backends.for_samples(device, contiguous=contiguous, skip=self._skip())

    def _grid_backend(self, device: torch.device, dtype: torch.dtype, g: float,
                      contiguous: bool = True) -> Optional[Backend]:
        """The backend that fuses the grid release of values of ``dtype`` on ``device`` on the grid ``g``,
        or ``None`` (the composition)."""
        return backends.for_grid(self._t, device, dtype, g, contiguous=contiguous, skip=self._skip())

    def reserve(self, n: int, device: torch.device | str, *, dtype: Optional[torch.dtype] = None,
                granularity: Optional[float] = None, concurrent: int = 1) -> None:
        """Make, **before** the release is charged, the scratch sets that drawing ``n`` samples on
        ``device`` will borrow: for :meth:`sample`, or with ``dtype`` and ``granularity`` for the grid
        release :meth:`add_to_grid_` / :meth:`add_to_grid_staged_` of ``n`` contiguous values of that
        dtype; ``concurrent`` such draws at once (row blocks on worker threads). After it, the draws
        take their buffers from the pool (:mod:`~pyg_private.sampling.workspace`) and allocate
        none: an allocation failure raises here, before anything is charged."""
        n, device = int(n), torch.device(device)
        if device_release.serves(device):  # the grid release, or the samples of any other release
            grid = dtype is not None and granularity is not None and \
                self._device_grid(device, dtype, True, check_granularity(granularity))
            device_release.reserve(self, n, device, grid, concurrent)
            return
        backend = None
        if dtype is not None and granularity is not None:
            backend = self._grid_backend(device, dtype, granularity)
        grid = backend is not None
        if backend is None:  # samples (also those of the composition)
            backend = self._sample_backend(device)
        size_of = _task_size if backend.whole_task else _pool_size
        tasks = max(1, -(-n // _TASK))
        sizes = {}  # pool size -> number of tasks of that size
        for t in range(tasks):
            size = size_of(min(_TASK, n - t * _TASK) if n else 0)
            sizes[size] = sizes.get(size, 0) + 1
        for size, count in sizes.items():
            need = min(count, max(1, workers(tasks, device))) * max(1, int(concurrent))
            key, factory, _ = self._scratch(backend, size, device, grid)
            reserve(key, factory, need)

    def _scratch(self, backend: Backend, size: int, device: torch.device, grid: bool) -> tuple:
        """The pool key and the factory of a task's scratch set, and whether the words are drawn into
        its buffers: for a grid release and for a whole-task backend; a chunked task of samples draws
        each chunk's words afresh (:meth:`_first_passes`)."""
        into = grid or backend.whole_task
        per = self._t.words_per_sample if into else 0
        key = ("exact_integer_noise", backend.name, "grid" if grid else "samples", device, per, size)
        return key, _scratch_set(backend, size, per, device, grid), into

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

    def _first_passes(self, backend: Backend, n: int, device: torch.device, source: RandomSource, grid: bool,
                      run: Callable[[list[Tensor], int, int, list[Tensor]], tuple[Tensor, Optional[Tensor]]]) -> list:
        """The first pass of one task of ``n`` samples on ``backend``: the words drawn from ``source``
        a chunk of :data:`_CHUNK` at a time (``words_per_sample`` calls a chunk, in that order: the
        same words whatever the backend), and ``run(words, start, m, scratch)`` over each batch (a
        chunk, or the whole task for a whole-task backend) returning the flagged samples' indices in
        the batch and, for a grid release, their rounded values. Returns ``(indices in the task,
        their words, their rounded values or None)`` for every batch that flagged samples, copied
        out of the scratch buffers borrowed for the task."""
        per = self._t.words_per_sample
        size = _task_size(n) if backend.whole_task else _pool_size(n)
        key, factory, into = self._scratch(backend, size, device, grid)
        batch = max(n, 1) if backend.whole_task else _CHUNK
        flagged = []
        with borrow(key, factory) as scratch:
            buffers, scratch = (scratch[:per], scratch[per:]) if into else (None, scratch)
            for start in range(0, n, batch):
                m = min(batch, n - start)
                if into:
                    words = [b[:m] for b in buffers]
                    for lo in range(0, m, _CHUNK):
                        hi = min(lo + _CHUNK, m)
                        for w in words:
                            source.words(hi - lo, out=w[lo:hi])
                else:
                    words = [source.words(m) for _ in range(per)]
                idx, kept = run(words, start, m, scratch)
                if idx.numel():
                    flagged.append((idx + start, [w.index_select(0, idx) for w in words],
                                    None if kept is None else kept.clone()))
        return flagged

    def _sample_task(self, out: Tensor, source: RandomSource) -> None:
        """Fill ``out`` from one stream: the backend's first pass over the task (with scratch
        buffers borrowed for it), the flagged samples (about 1%) finished together, then the
        rejected values drawn again in their cells."""
        contiguous = out.is_contiguous()
        backend = self._sample_backend(out.device, contiguous)
        t = self._t
        tables = t.on(out.device)
        flagged = self._first_passes(
            backend, out.numel(), out.device, source, False,
            lambda words, start, m, scratch: (backend.first_pass(t, tables, words, out[start:start + m], scratch),
                                              None))
        if flagged:
            self._finish_flagged(out, torch.cat([f[0] for f in flagged]),
                                 [torch.cat([f[1][i] for f in flagged]) for i in range(t.words_per_sample)], source)

    def _grid_pass(self, backend: Backend, values: Tensor, step: tuple[float, float, float],
                   source: RandomSource) -> Optional[tuple]:
        """The first stage of :meth:`add_to_grid_` on the contiguous ``values`` of one task: the
        backend's fused first pass over them, the words drawn in :meth:`_sample_task`'s order.
        Returns the flagged samples (their indices, rounded values ``q`` and words) for
        :meth:`_grid_finish`, or ``None``."""
        t = self._t
        tables = t.on(values.device)
        flagged = self._first_passes(
            backend, values.numel(), values.device, source, True,
            lambda words, start, m, scratch: backend.grid_first_pass(t, tables, words, values[start:start + m], step,
                                                                     scratch))
        if not flagged:
            return None
        return (torch.cat([f[0] for f in flagged]), torch.cat([f[2] for f in flagged]),
                [torch.cat([f[1][i] for f in flagged]) for i in range(t.words_per_sample)])

    def _grid_finish(self, values: Tensor, step: tuple[float, float, float], source: RandomSource,
                     pending: Optional[tuple]) -> None:
        """The second stage: the flagged samples finished together (:meth:`_finish_flagged`, more
        words from the same stream) and their values ``g * (q + K)`` written over the provisional
        ones, as :func:`~pyg_private.sampling.grid.add_noise_on_grid_` forms them."""
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
