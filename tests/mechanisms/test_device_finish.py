"""The device release (``pyg_private.sampling.device_release``) with its torch steps, on CPU tensors
(the CPU added to the devices it serves): the law of the finished samples (chi-square against the
256-bit probabilities, with every sample flagged, ties and 256-bit comparisons forced, few rounds),
the exact overflow path (tiny capacities: the values after the cap-th flagged sample are left
untouched and redrawn), one host synchronisation per release (every synchronising operation
counted), the exact flag probability and the capacity bound, the polynomial exp against 256-bit
arithmetic, and the CPU path's outputs unchanged (pinned hashes). The Triton kernels are compared
with these torch steps in ``test_device_finish_triton.py``."""
from __future__ import annotations

import hashlib
import math

import mpmath
import numpy as np
import pytest
import torch
from scipy import stats

from moment_checks import mean_var_checks
from pyg_private.sampling import RoundedNoiseSampler
from pyg_private.sampling import device_release as D
from pyg_private.sampling import sampler as S
from pyg_private.sampling.backends import finish_torch as F
from pyg_private.sampling.backends import torch_ops
from sampler_helpers import fast_path_cases, force_exact_paths, seeded_source
from sync_counter import count_host_syncs


def all_flagged(sampler, *, split_bits=None, margin=None):
    """A copy whose first pass flags every sample (cheap thresholds 0), optionally with few split
    bits (ties) and a wide float margin (256-bit comparisons)."""
    forced = force_exact_paths(sampler, split_bits=split_bits, margin=margin)
    forced._t.cheap = torch.zeros_like(forced._t.cheap)
    forced._t._build_fast()
    return forced


def chi_square_p(sampler, x: torch.Tensor, edges_in_scale) -> float:
    """Goodness of fit of |K| binned at ``edges * scale`` against the exact probabilities."""
    t = sampler._t
    edges = [0] + [int(round(e * sampler.scale)) for e in edges_in_scale]
    survival = [t.tail_mass(e) if e > 0 else mpmath.mpf(1) for e in edges] + [mpmath.mpf(0)]
    expected = np.array([float(survival[i] - survival[i + 1]) for i in range(len(edges))]) * x.numel()
    counts = np.bincount(np.searchsorted(np.array(edges[1:]), x.abs().numpy(), side="right"), minlength=len(edges))
    return float(stats.chisquare(counts, expected / expected.sum() * counts.sum()).pvalue)


EDGES = {"gaussian": [0.05, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0], "laplace": [0.05, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0],
         "two_laplace": [0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0]}


@pytest.fixture
def on_cpu(monkeypatch):
    """Device releases on CPU tensors (torch steps), small tasks and chunks."""
    monkeypatch.setattr(D, "DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(S, "_TASK", 1 << 11)
    monkeypatch.setattr(S, "_CHUNK", 1 << 9)
    torch.set_num_threads(1)


# -- the CPU path is unchanged ---------------------------------------------------------------------

# sha256 prefixes of the CPU path's samples and grid releases, computed before the device release
# existed (tasks of 2^12, chunks of 2^10: several tasks and chunks)
PINNED = {("gaussian", 2.0 ** 20): ("8630157fabbf43dd", "2023cc80253e4e25"),
          ("gaussian", 2.0 ** 37 * 1.3): ("cd1b4c3cd7db078a", "675bc70338f96f00"),
          ("laplace", 2.0 ** 29 * 1.45): ("4c9eba78e7fe52f3", "6fcd471eccf999dc"),
          ("laplace", 2.0 ** 46): ("df2b7ac88aaf2ae2", "94bf9097e1c76ed0"),
          ("two_laplace", 2.0 ** 33): ("fd42f525b48049e1", "6367d2c0535a139f"),
          ("gaussian", 2.0 ** 29): ("9f7a02ad9871e80a", "66b9b8cf147edddf")}


def test_cpu_path_outputs_are_unchanged(monkeypatch):
    monkeypatch.setattr(S, "_TASK", 1 << 12)
    monkeypatch.setattr(S, "_CHUNK", 1 << 10)
    assert "cpu" not in D.DEVICES
    for i, ((kind, scale), (h_samples, h_grid)) in enumerate(PINNED.items()):
        s = RoundedNoiseSampler(kind, scale)
        if i == len(PINNED) - 1:  # ties and 256-bit comparisons everywhere
            s = force_exact_paths(s, split_bits=3, margin=2.0 ** -6)
        for native in ((True, False) if i in (0, 5) else (s.native,)):
            s.native = native
            x = s.sample(3 * S._TASK + 77, seeded_source(i))
            assert hashlib.sha256(x.numpy().tobytes()).hexdigest()[:16] == h_samples, (kind, scale, native)
            v = torch.randn(2 * S._TASK + 5, generator=torch.Generator().manual_seed(i), dtype=torch.float64) * 0.125
            v32 = v.float()
            s.add_to_grid_(v, 2.0 ** -20, seeded_source(100 + i))
            s.add_to_grid_(v32, 2.0 ** -20, seeded_source(200 + i))
            digest = hashlib.sha256(v.numpy().tobytes() + v32.numpy().tobytes()).hexdigest()[:16]
            assert digest == h_grid, (kind, scale, native)


# -- the pieces ----------------------------------------------------------------------------------

def test_polynomial_exp_is_within_its_bound():
    ctx = mpmath.MPContext()
    ctx.prec = 256
    xs = torch.cat([torch.linspace(-F.EXP_RANGE, F.EXP_RANGE, 1001, dtype=torch.float64),
                    torch.tensor([0.0, -0.0, 2.0 ** -60, -(2.0 ** -30), F.EXP_RANGE, -F.EXP_RANGE],
                                 dtype=torch.float64),
                    (torch.rand(500, generator=torch.Generator().manual_seed(0), dtype=torch.float64) - 1) * 0.08])
    got = F.exp_small(xs.clone())
    worst = max(abs(float(ctx.mpf(g) / ctx.exp(ctx.mpf(x)) - 1)) for x, g in zip(xs.tolist(), got.tolist()))
    assert worst < 2.0 ** -51  # proven: below 2^-48; the tables' margin allots 2^-44
    for kind in ("gaussian", "laplace", "two_laplace"):
        for scale in (2.0 ** 20, 2.0 ** 20 * 1.99, 2.0 ** 33 * 1.5, 2.0 ** 46):
            assert F.max_exp_argument(RoundedNoiseSampler(kind, scale)._t) <= F.EXP_RANGE


@pytest.mark.parametrize("kind", ["gaussian", "laplace", "two_laplace"])
def test_device_ratio_stays_inside_the_float_margin(kind):
    """The rounds' float64 acceptance ratio (the polynomial exp) is within the tables' margin of the
    exact (256-bit) ratio, for values across the table, cell 0 and value 0 included."""
    for scale in (2.0 ** 20, 2.0 ** 20 * 1.7, 2.0 ** 37 * 1.3, 2.0 ** 46):
        s = RoundedNoiseSampler(kind, scale)
        t = s._t
        values, cells = fast_path_cases(s)
        m = values.abs()
        ratio = F.density_ratio(kind, t.scale, m, t.ref.index_select(0, cells))
        ratio = torch.where(m == 0, t.zero_ratio, ratio)
        for v, r in zip(values.tolist(), ratio.tolist()):
            exact = float(t.accept_probability(v))
            assert abs(r - exact) <= exact * t.margin, (kind, scale, v, r, exact)


@pytest.mark.parametrize("kind, log_scale, forced", [("gaussian", 20, False), ("laplace", 38, False),
                                                    ("two_laplace", 44, False), ("gaussian", 29, True)])
def test_flag_probability_is_the_first_pass_rate(kind, log_scale, forced):
    s = RoundedNoiseSampler(kind, 2.0 ** log_scale)
    if forced:
        s = force_exact_paths(s, split_bits=3, margin=2.0 ** -6)
    t = s._t
    n = 1 << 18
    src = seeded_source(log_scale)
    words = [src.words(n) for _ in range(t.words_per_sample)]
    offset, bits = t.offset_and_bits(words)
    tables = t.on(torch.device("cpu"))
    fast = [tables["packed3"]] if "packed3" in tables else [tables["base3"], tables["cheap3"]]
    scratch = [torch.empty(n, dtype=torch.int64) for _ in range(3)] + [torch.empty(n, dtype=torch.bool)]
    flag = torch_ops.first_pass(words[0], offset, bits, torch.empty(n, dtype=torch.int64), scratch,
                                tables["split_high"], fast, 63 - t.slot_bits, t.low_shift, t.accept_bits)
    p = D.flag_probability(t)
    assert abs(float(flag.double().mean()) - p) <= 5 * math.sqrt(p * (1 - p) / n)
    assert D.flag_probability(all_flagged(s)._t) == 1.0


def test_capacity_bounds_the_binomial_tail():
    for m in (1, 7, 100, 2048, 1 << 19):
        for p in (0.009, 0.045, 0.15, 0.6):
            cap = D.capacity(m, p)
            assert 1 <= cap <= m
            if cap < m:  # P(count >= cap) <= eta, exactly (scipy), and the Chernoff bound is tight enough
                assert stats.binom.logsf(cap - 1, m, p) <= math.log(D.OVERFLOW_PROBABILITY)
                assert cap < m * p + 20 * math.sqrt(m * p) + 60
    assert D.capacity(100, 1.0) == 100 and D.capacity(0, 0.5) == 0


# -- the law -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, scale", [("gaussian", 2.0 ** 20), ("laplace", 2.0 ** 38), ("two_laplace", 2.0 ** 44)])
def test_device_release_has_the_law(on_cpu, kind, scale):
    s = RoundedNoiseSampler(kind, scale)
    x = s.sample(60_000, seeded_source(11))
    assert chi_square_p(s, x, EDGES[kind]) > 1e-4
    var = {"gaussian": 1.0, "laplace": 2.0, "two_laplace": 4.0}[kind] * scale ** 2  # (+ 1/12: far below the error)
    mean_var_checks(x.double(), 0.0, var)


@pytest.mark.parametrize("kind", ["gaussian", "laplace", "two_laplace"])
def test_finished_samples_have_the_law(on_cpu, monkeypatch, kind):
    """Every sample flagged (each one finished by the rounds), ties one in eight, a float margin of
    2^-6 (many comparisons left to 256 bits on the host), two rounds (rejections left to the host)."""
    monkeypatch.setattr(D, "ROUNDS", 2)
    handed = []
    real = D._finish_on_host
    monkeypatch.setattr(D, "_finish_on_host", lambda *a: handed.append(1) or real(*a))
    s = all_flagged(RoundedNoiseSampler(kind, 2.0 ** 24 * 1.3), split_bits=3, margin=2.0 ** -6)
    x = s.sample(24_000, seeded_source(5))
    assert handed  # the host path ran
    assert chi_square_p(s, x, EDGES[kind]) > 1e-4
    v = torch.zeros(24_000, dtype=torch.float64)
    s.add_to_grid_(v, 2.0 ** -10, seeded_source(6))
    assert chi_square_p(s, (v * 2.0 ** 10).to(torch.int64), EDGES[kind]) > 1e-4


def test_overflow_leaves_the_rest_untouched_and_redraws_it(on_cpu, monkeypatch):
    """With 3 slots a task, the values after each task's 3rd flagged sample are left as they were
    by the first pass and redrawn by the host path: exactly that range, task by task."""
    monkeypatch.setattr(D, "capacity", lambda m, p, eta=None: min(int(m), 3))
    seen = []
    real = D._redraw

    def spy(sampler, part, step, on_scale, source):
        seen.append((part.data_ptr(), part.numel(), part.clone()))
        real(sampler, part, step, on_scale, source)

    monkeypatch.setattr(D, "_redraw", spy)
    s = RoundedNoiseSampler("gaussian", 2.0 ** 30)
    t = s._t
    n = 2 * S._TASK + 300
    v = torch.randn(n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    original = v.clone()
    s.add_to_grid_(v, 2.0 ** -24, seeded_source(3))
    # the flags of the same words (the first pass draws them task by task, chunk by chunk)
    src = seeded_source(3)
    tables = t.on(torch.device("cpu"))
    starts = []
    for lo in range(0, n, S._TASK):
        m = min(S._TASK, n - lo)
        words = [torch.empty(m, dtype=torch.int64)]
        for a in range(0, m, S._CHUNK):
            src.words(min(S._CHUNK, m - a), out=words[0][a:a + min(S._CHUNK, m - a)])
        offset, bits = t.offset_and_bits(words)
        scratch = [torch.empty(m, dtype=torch.int64) for _ in range(3)] + [torch.empty(m, dtype=torch.bool)]
        flag = torch_ops.first_pass(words[0], offset, bits, torch.empty(m, dtype=torch.int64), scratch,
                                    tables["split_high"], [tables["packed3"]], 63 - t.slot_bits, t.low_shift,
                                    t.accept_bits)
        third = int(flag.nonzero()[2])
        starts.append((lo + third + 1, min(lo + S._TASK, n) - (lo + third + 1)))
    assert [(ptr, size) for ptr, size, _ in seen] == [(v.data_ptr() + 8 * a, size) for a, size in starts]
    for (a, size), (_, _, before) in zip(starts, seen):
        assert torch.equal(before, original[a:a + size])  # untouched until the redraw
    assert not torch.equal(v[starts[0][0]:], original[starts[0][0]:])
    assert torch.equal(v * 2.0 ** 24, (v * 2.0 ** 24).round())


@pytest.mark.parametrize("cap", [1, "median"])
def test_overflow_path_keeps_the_law(on_cpu, monkeypatch, cap):
    """A capacity of one slot (every task overflows) or at the median count (half of them do): the
    same law, every sample flagged, ties and 256-bit comparisons forced."""
    s = all_flagged(RoundedNoiseSampler("gaussian", 2.0 ** 22), split_bits=3, margin=2.0 ** -8)
    if cap == 1:
        monkeypatch.setattr(D, "capacity", lambda m, p, eta=None: 1)
    else:
        s = RoundedNoiseSampler("laplace", 2.0 ** 22)
        p = D.flag_probability(s._t)
        monkeypatch.setattr(D, "capacity", lambda m, p_, eta=None: max(1, min(int(m), round(m * p))))
    monkeypatch.setattr(S, "_TASK", 1 << 9)
    x = s.sample(30_000, seeded_source(8))
    assert chi_square_p(s, x, EDGES[s.kind]) > 1e-4


# -- one host synchronisation a release ----------------------------------------------------------

@pytest.mark.parametrize("kind, scale", [("gaussian", 2.0 ** 20), ("laplace", 2.0 ** 38), ("two_laplace", 2.0 ** 44)])
def test_one_host_sync_per_release(on_cpu, kind, scale):
    s = RoundedNoiseSampler(kind, scale)
    for n in (1, 700, 3 * S._TASK + 5):
        s.reserve(n, "cpu")
        s.reserve(n, "cpu", dtype=torch.float32, granularity=2.0 ** -20)
        src, values = seeded_source(n), torch.randn(n)
        with count_host_syncs() as syncs:
            s.sample(n, src)
        assert syncs.count == 1, syncs.ops
        with count_host_syncs() as syncs:
            s.add_to_grid_(values, 2.0 ** -20, src)
        assert syncs.count == 1, syncs.ops
        with count_host_syncs() as syncs:
            s.add_to_grid_staged_(values, 2.0 ** -20, src)()
        assert syncs.count == 1, syncs.ops
    with count_host_syncs() as syncs:  # the counter sees the host path when it runs
        all_flagged(s, margin=2.0 ** -4).sample(500, seeded_source(1))
    assert syncs.count > 1


def test_a_layers_hop_is_one_release(on_cpu, monkeypatch):
    """The multi-hop layers' grid release of a hop (``add_grid_gaussian_``): on the device one release
    of the whole tensor (one host synchronisation), then ``post`` on its row blocks."""
    from pyg_private.nn import _grid_gaussian as G

    monkeypatch.setattr(G, "_BLOCK_ELEMENTS", 1 << 10)
    out = torch.randn(300, 16, generator=torch.Generator().manual_seed(0))
    before = out.clone()
    g = 2.0 ** -24
    G.reserve_grid_gaussian(out, 1.0, g)
    blocks = []
    with count_host_syncs() as syncs:
        G.add_grid_gaussian_(out, 1.0, g, seeded_source(4), post=lambda part: blocks.append(part.shape) or part * 2)
    assert syncs.count == 1, syncs.ops
    assert blocks == [(64, 16)] * 4 + [(44, 16)]
    steps = out / (2 * g)
    assert torch.equal(steps, steps.round()) and 0.9 < float((steps - (before / g).round()).std()) * g < 1.1


@pytest.mark.parametrize("kind, log_scale, forced", [("gaussian", 20, False), ("laplace", 38, False),
                                                    ("two_laplace", 44, False), ("gaussian", 41, False),
                                                    ("laplace", 30, True), ("two_laplace", 33, True)])
def test_rounds_take_the_cpu_finishs_decisions(kind, log_scale, forced):
    """A round decides what the CPU's finish decides from the same words: round 1 against
    ``RoundedNoiseSampler._finish`` and a later round against ``_within``, their words scripted in
    the order the CPU draws them (the tie words of the ties, then the extension words of the
    comparisons the float bounds leave open). Every slot the round finishes is accepted there with
    the same value, every slot it rejects is rejected there in the same cell."""
    from sampler_helpers import ScriptedSource

    s = RoundedNoiseSampler(kind, 2.0 ** log_scale)
    if forced:
        s = force_exact_paths(s, split_bits=3, margin=2.0 ** -6)
    t = s._t
    per, n = t.words_per_sample, 3000
    extend = t.accept_bits <= F.EXTEND_LIMIT
    tables = D._tables(t, torch.device("cpu"))
    src = seeded_source(log_scale)

    def undecided(value, cell, bits, eligible):
        """The CPU's open comparisons (``_slow_accept``), in index order."""
        slow = (eligible & ~(bits < t.cheap.index_select(0, cell))).nonzero().squeeze(1)
        ratio = s._ratio(value[slow], cell[slow])
        bf = bits[slow].to(torch.float64)
        acc = (bf + 1.0) <= ratio * t.accept_scale
        return slow[~acc & (bf < ratio * t.reject_scale)]

    def at_bounds(words, where, value, cell, gen):
        """The words with the acceptance bits of about half the samples moved next to the float
        bounds (where the extension word decides), in the layout's place."""
        a = t.accept_bits
        ratio = s._ratio(value, cell)
        y = torch.stack([ratio * t.accept_scale, ratio * t.reject_scale]).clamp(0, 2.0 ** 62).floor().to(torch.int64)
        pick = torch.randint(0, 2, (n,), generator=gen)
        crafted = (y.gather(0, pick.view(1, -1)).squeeze(0) - torch.randint(0, 2, (n,), generator=gen))
        crafted = crafted.clamp(0, (1 << a) - 1)
        moved = where & (torch.rand(n, generator=gen) < 0.5)
        words = [w.clone() for w in words]
        i = 0 if per == 1 else 1
        mask = (1 << a) - 1 if a < 63 else -1
        words[i] = torch.where(moved, crafted if per == 3 else (words[i] & ~mask) | crafted, words[i])
        return words

    def compare(slots, accept, value, cell):
        state = slots.state[:n]
        done, rejected = state == F.DONE, state == F.PENDING
        assert bool(done.any()) and (bool(rejected.any()) or forced)  # (a wide margin: no decided rejection)
        assert bool(accept[done].all()) and torch.equal(value[done], slots.val[:n][done])
        assert not bool(accept[rejected].any()) and torch.equal(cell[rejected], slots.cell[:n][rejected])

    # round 1: every slot a first-pass state
    words = [src.words(n) for _ in range(per)]
    tie_words, ext_words = src.words(n), src.words(n)
    slots = F.Slots.of([torch.zeros(n + 1, dtype=torch.int64) for _ in range(F.Slots.count(per, False))], n, per,
                       False)
    for saved, w in zip(slots.words, words):
        saved[:n] = w
    slots.state[:n] = F.FIRST
    slot = words[0] >> (63 - t.slot_bits)
    low = (words[0] >> t.low_shift) & ((1 << t.split_bits) - 1)
    split = t.split_int.index_select(0, slot)
    tie = low == split
    keep = torch.where(tie, tie_words < t.split_next.index_select(0, slot), low < split)
    cell = t.slot_cell.index_select(0, torch.where(keep, slot, t.alias_t.index_select(0, slot)))
    offset, bits = t.offset_and_bits(words)
    value = t.base.index_select(0, cell) + offset
    gen = torch.Generator().manual_seed(log_scale)
    if extend:
        words = at_bounds(words, cell < t.pos_tail, value, cell, gen)
        for saved, w in zip(slots.words, words):
            saved[:n] = w
    offset, bits = t.offset_and_bits(words)
    F.STEPS.finish_round(t, tables, slots, [tie_words, ext_words] if extend else [tie_words], True)
    script = tie_words[tie].tolist()
    if extend:
        script += ext_words[undecided(value, cell, bits, cell < t.pos_tail)].tolist()
    out = torch.full((n,), -1, dtype=torch.int64)
    cell_c, accept_c = s._finish(out, torch.arange(n), words, ScriptedSource(script, seed=1))
    compare(slots, accept_c, out, cell_c)
    # a later round: every slot rejected before, in the cells round 1 chose (tails aside)
    cells = torch.where(cell < t.pos_tail, cell, 0)
    blocks = [src.words(n) for _ in range(per)]  # as _within draws them: one block a word of the sample
    ext_words = src.words(n)
    offset, bits = t.offset_and_bits(blocks)
    value = t.base.index_select(0, cells) + offset
    if extend:
        blocks = at_bounds(blocks, torch.ones(n, dtype=torch.bool), value, cells, gen)
        offset, bits = t.offset_and_bits(blocks)
    fresh = blocks[-F.fresh_words(t):] if per > 1 else blocks
    slots.state[:n] = F.PENDING
    slots.cell[:n] = cells
    F.STEPS.finish_round(t, tables, slots, fresh + ([ext_words] if extend else []), False)
    script = [w for b in blocks for w in b.tolist()]
    if extend:
        script += ext_words[undecided(value, cells, bits, torch.ones(n, dtype=torch.bool))].tolist()
    value_c, accept_c = s._within(cells, ScriptedSource(script, seed=2))
    compare(slots, accept_c, value_c, cells)
