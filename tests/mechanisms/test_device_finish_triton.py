"""The device release's Triton kernels (``pyg_private.sampling.backends.finish_triton``) compute
exactly what its torch steps (``finish_torch``) compute from the same words: each step on crafted
inputs (the three sides of alias splits and a tie word equal to the split's next bits and its
neighbours, the tail cells, acceptance bits at the cheap threshold and at the float64 bounds,
extension words at their exact boundaries, value 0, inactive slots; grid values with halves,
signed zeros, subnormals, huge values, infinities and NaN), and whole releases (one-, two- and
three-word layouts, forced ties and 256-bit comparisons, every sample flagged with two rounds,
overflowing capacities) bit for bit; a release with the kernels synchronises the host once.
Under Triton's interpreter on the CPU (a fresh interpreter with ``TRITON_INTERPRET=1``); the PTX for
an sm_90 GPU is checked without a GPU; on CUDA the tests marked ``cuda`` compare with the CPU."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton", reason="the optional triton package is not installed")

TESTS = str(Path(__file__).resolve().parents[1])

COMMON = textwrap.dedent('''
    import copy, sys, warnings
    import torch
    warnings.simplefilter("ignore")
    sys.path.insert(0, TESTS)
    from pyg_private.sampling import RoundedNoiseSampler
    from pyg_private.sampling import device_release as D
    from pyg_private.sampling import sampler as S
    from pyg_private.sampling.backends import finish_torch as F
    from pyg_private.sampling.backends import triton_ops
    from sampler_helpers import force_exact_paths, seeded_source

    M63 = (1 << 63) - 1


    def all_flagged(sampler, **kw):
        forced = force_exact_paths(sampler, **kw)
        forced._t.cheap = torch.zeros_like(forced._t.cheap)
        forced._t._build_fast()
        return forced


    def steps(name):
        if name == "torch":
            return F.STEPS
        from pyg_private.sampling.backends import finish_triton
        return finish_triton.STEPS


    def special_values(n, dtype, seed):
        gen = torch.Generator().manual_seed(seed)
        v = torch.randn(n, generator=gen, dtype=torch.float64) * torch.exp2(
            torch.randint(-30, 40, (n,), generator=gen).to(torch.float64))
        special = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.0 ** 52 + 1, 2.0 ** 62, -(2.0 ** 70), 1e300,
                                5e-324, float("inf"), -float("inf"), float("nan")], dtype=torch.float64)
        v[:special.numel()] = special
        v[special.numel()::31] = float("nan")
        v = v.to(dtype)
        v[7::23] = torch.finfo(dtype).tiny / 4  # subnormal
        v[11::29] = -0.0
        return v
''')

WHOLE = COMMON + textwrap.dedent('''
    from sync_counter import count_host_syncs

    torch.set_num_threads(1)
    S._TASK, S._CHUNK = 1 << 10, 1 << 8
    D.DEVICES = {"cuda", "cpu"}
    bad, syncs = [], []
    real_capacity = D.capacity


    def run(sampler, name, fn):
        triton_ops.BACKEND.devices = {"cuda", "cpu"} if name == "triton" else {"cuda"}
        return fn(sampler)


    cases = [("gaussian", 20, {}), ("laplace", 38, {}), ("two_laplace", 44, {}), ("gaussian", 41, {}),
             ("gaussian", 29, {"force": True}), ("two_laplace", 33, {"all": True, "rounds": 2}),
             ("laplace", 30, {"cap": 2}), ("gaussian", 25, {"all": True, "rounds": 1, "cap": 40})]
    for number, (kind, log_scale, opt) in enumerate(cases):
        s = RoundedNoiseSampler(kind, 2.0 ** log_scale)
        if opt.get("force"):
            s = force_exact_paths(s, split_bits=3, margin=2.0 ** -6)
        if opt.get("all"):
            s = all_flagged(s, split_bits=3, margin=2.0 ** -6)
        D.ROUNDS = opt.get("rounds")
        D.capacity = (lambda m, p, eta=None, c=opt["cap"]: min(int(m), c)) if "cap" in opt else real_capacity
        n = 2 * S._TASK + 99
        out = {}
        for name in ("torch", "triton"):
            x = run(s, name, lambda s_: s_.sample(n, seeded_source(number)))
            grids = []
            for dtype in (torch.float32, torch.float64):
                v = special_values(n, dtype, number)
                run(s, name, lambda s_: s_.add_to_grid_(v, 2.0 ** -20, seeded_source(100 + number)))
                grids.append(v.view(torch.int32 if dtype == torch.float32 else torch.int64))
            on_scale = special_values(n, torch.float64, number + 1)
            run(s, name, lambda s_: s_.add_to_grid_(on_scale, 2.0 ** -24, seeded_source(200 + number),
                                                     on_scale=True))
            out[name] = (x, *grids, on_scale.view(torch.int64))
        for label, a, b in zip(("samples", "grid f32", "grid f64", "on scale"), out["torch"], out["triton"]):
            if not torch.equal(a, b):
                bad.append(f"{kind} 2^{log_scale} {opt}: {label} differ")
        if not opt:  # one host read a release with the kernels
            triton_ops.BACKEND.devices = {"cuda", "cpu"}
            src = seeded_source(7)
            with count_host_syncs() as c:
                s.sample(n, src)
            v = torch.randn(n)
            with count_host_syncs() as c2:
                s.add_to_grid_(v, 2.0 ** -20, src)
            syncs.append((c.count, c2.count))
    print("BAD", bad)
    print("SYNCS", syncs)
''')

STEPS = COMMON + textwrap.dedent('''
    torch.set_num_threads(1)
    bad = []


    def rand63(n, gen):
        return torch.randint(0, 1 << 62, (n,), generator=gen) * 2 + torch.randint(0, 2, (n,), generator=gen)


    def pick(options, gen):
        """One of the option tensors per lane."""
        which = torch.randint(0, len(options), options[0].shape, generator=gen)
        out = options[0].clone()
        for i, o in enumerate(options):
            out = torch.where(which == i, o, out)
        return out


    def bounds(t, value, cell, bits):
        """The float64 acceptance bounds of finish_torch for these values and the exact boundary
        words of the extension (as the round computes them)."""
        tables = t.on(torch.device("cpu"))
        m = value.abs()
        ratio = F.density_ratio(t.kind, t.scale, m, tables["ref"].index_select(0, cell))
        ratio = torch.where(m == 0, t.zero_ratio, ratio)
        return ratio * t.accept_scale, ratio * t.reject_scale


    def crafted_bits(t, value, cell, gen):
        a = t.accept_bits
        tables = t.on(torch.device("cpu"))
        y_acc, y_rej = bounds(t, value, cell, None)
        top = (1 << a) - 1 if a < 63 else M63
        cheap = tables["cheap"].index_select(0, cell)
        fl = lambda y: y.clamp(0, 2.0 ** 62).floor().to(torch.int64)
        options = [cheap - 1, cheap, fl(y_acc) - 1, fl(y_acc), fl(y_rej), fl(y_rej) + 1,
                   torch.randint(0, 1 << min(a, 62), value.shape, generator=gen), torch.full_like(value, top)]
        return pick(options, gen).clamp(0, top)


    def crafted_ext(t, value, cell, bits, gen):
        y_acc, y_rej = bounds(t, value, cell, bits)
        bf = bits.to(torch.float64)
        lower = ((y_acc - bf) * 2.0 ** 63).clamp(-1.0, 2.0 ** 62).floor().to(torch.int64)
        upper = ((y_rej - bf) * 2.0 ** 63).clamp(0.0, 2.0 ** 62).ceil().to(torch.int64)
        options = [lower - 1, lower, lower + 1, upper - 1, upper, rand63(value.numel(), gen)]
        return pick(options, gen).clamp(0, M63)


    def compose(t, slot, low, offset, bits, gen):
        """The first-pass words of these fields (the tables' layout)."""
        sb, a, j = t.slot_bits, t.accept_bits, t.j
        head = (slot << (63 - sb)) | (low << t.low_shift)
        if t.words_per_sample == 1:
            return [head | (offset << a) | bits]
        head = head | (rand63(slot.numel(), gen) & ((1 << t.low_shift) - 1))
        if t.words_per_sample == 2:
            return [head, (offset << a) | bits]
        return [head, bits, (offset << (63 - j)) | (rand63(slot.numel(), gen) & ((1 << (63 - j)) - 1))]


    def fresh_value_words(t, offset, bits, gen):
        a, j = t.accept_bits, t.j
        if t.words_per_sample == 1:  # (the slot and split bits above: anything)
            return [(rand63(offset.numel(), gen) >> (a + j) << (a + j)) | (offset << a) | bits]
        if t.words_per_sample == 2:
            return [(offset << a) | bits]
        return [bits, (offset << (63 - j)) | (rand63(offset.numel(), gen) & ((1 << (63 - j)) - 1))]


    def new_slots(t, size, grid):
        buffers = [torch.zeros(size + 1, dtype=torch.int64) for _ in range(F.Slots.count(t.words_per_sample, grid))]
        return F.Slots.of(buffers, size, t.words_per_sample, grid)


    def copy_slots(slots):
        return F.Slots(slots.size, slots.idx.clone(), [w.clone() for w in slots.words],
                       None if slots.q is None else slots.q.clone(), slots.state.clone(), slots.cell.clone(),
                       slots.val.clone(), slots.kh.clone(), slots.kl.clone())


    def same(a, b):
        names = ("idx", "q", "state", "cell", "val", "kh", "kl")
        diff = [k for k in names if getattr(a, k) is not None and not torch.equal(getattr(a, k)[:a.size],
                                                                                  getattr(b, k)[:b.size])]
        diff += [f"word {i}" for i, (x, y) in enumerate(zip(a.words, b.words)) if not torch.equal(x[:a.size],
                                                                                                  y[:b.size])]
        return diff


    states = set()
    LAYOUTS = [("gaussian", 20), ("gaussian", 40), ("gaussian", 41), ("laplace", 36), ("laplace", 38),
               ("laplace", 46), ("two_laplace", 32.7), ("two_laplace", 38), ("two_laplace", 44)]
    for number, (kind, log_scale) in enumerate(LAYOUTS):
        base_t = RoundedNoiseSampler(kind, 2.0 ** log_scale)._t
        for t in (base_t, force_exact_paths(RoundedNoiseSampler(kind, 2.0 ** log_scale), split_bits=3,
                                            margin=2.0 ** -6)._t):
            gen = torch.Generator().manual_seed(number)
            name = f"{kind} 2^{log_scale} words={t.words_per_sample} split_bits={t.split_bits}"
            tables = D._tables(t, torch.device("cpu"))
            S_ = 600
            n = S_
            # -- round 1 on crafted first-pass states
            nslots = len(t.split)
            tails = {t.pos_tail, t.neg_tail}
            special = [i for i in range(nslots) if int(t.slot_cell[i]) in tails or
                       int(t.slot_cell[t.alias_t[i]]) in tails] + [0, 1, nslots - 1]
            slot = pick([torch.randint(1, nslots, (n,), generator=gen),
                         torch.tensor(special)[torch.randint(0, len(special), (n,), generator=gen)]], gen)
            split = t.split_int.index_select(0, slot)
            low = pick([split - 1, split, split + 1, torch.randint(0, 1 << t.split_bits, (n,), generator=gen)], gen)
            low = low.clamp(0, (1 << t.split_bits) - 1)
            keep = low < split  # (a tie: either cell, as the tie word decides)
            cell = t.slot_cell.index_select(0, torch.where(keep, slot, t.alias_t.index_select(0, slot)))
            offset = pick([torch.zeros(n, dtype=torch.int64), torch.full((n,), t.w - 1),
                           torch.randint(0, t.w, (n,), generator=gen)], gen)
            value = t.base.index_select(0, cell) + offset
            bits = crafted_bits(t, value, cell, gen)
            words = compose(t, slot, low, offset, bits, gen)
            slots = new_slots(t, S_, False)
            for saved, w in zip(slots.words, words):
                saved[:n] = w
            slots.state[:n] = pick([torch.full((n,), F.FIRST)] * 6 + [torch.full((n,), k) for k in
                                                                        (F.EMPTY, F.DONE, F.EXACT, F.PENDING)], gen)
            following = t.split_next.index_select(0, slot)
            tie_word = pick([following - 1, following, following + 1, rand63(n, gen)], gen).clamp(0, M63)
            ext = crafted_ext(t, value, cell, bits, gen)
            a, b = copy_slots(slots), copy_slots(slots)
            fresh = [tie_word, ext] if t.accept_bits <= F.EXTEND_LIMIT else [tie_word]
            steps("torch").finish_round(t, tables, a, fresh, True)
            steps("triton").finish_round(t, tables, b, fresh, True)
            diff = same(a, b)
            states |= set(a.state[:n].tolist())
            if diff:
                bad.append(f"{name} round 1: {diff}")
            # -- a later round on crafted pending states (cells 0 and C often: value 0)
            c_max = t.num_cells
            cell = pick([torch.zeros(n, dtype=torch.int64), torch.full((n,), c_max),
                         torch.randint(0, 2 * c_max, (n,), generator=gen)], gen)
            offset = pick([torch.zeros(n, dtype=torch.int64), torch.full((n,), t.w - 1),
                           torch.randint(0, t.w, (n,), generator=gen)], gen)
            value = t.base.index_select(0, cell) + offset
            bits = crafted_bits(t, value, cell, gen)
            fresh = fresh_value_words(t, offset, bits, gen)
            if t.accept_bits <= F.EXTEND_LIMIT:
                fresh.append(crafted_ext(t, value, cell, bits, gen))
            slots.state[:n] = pick([torch.full((n,), F.PENDING)] * 4 + [torch.full((n,), F.DONE)], gen)
            slots.cell[:n] = cell
            a, b = copy_slots(slots), copy_slots(slots)
            steps("torch").finish_round(t, tables, a, fresh, False)
            steps("triton").finish_round(t, tables, b, fresh, False)
            diff = same(a, b)
            states |= set(a.state[:n].tolist())
            if diff:
                bad.append(f"{name} later round: {diff}")
            # -- the first pass of a task with a capacity, samples and grid, and the write
            m = 700
            gen_words = [rand63(m, gen) for _ in range(t.words_per_sample)]
            for grid, dtype in ((False, None), (True, torch.float32), (True, torch.float64)):
                for cap in (3, 40, m):
                    res = {}
                    for which in ("torch", "triton"):
                        sl = new_slots(t, 2 * m, grid)
                        ws = torch.full((1 + m // 64 + 4,), 5, dtype=torch.int64)
                        target = special_values(m, dtype, number) if grid else torch.full((m,), -7)
                        step = (2.0 ** 20, 2.0 ** -20, 2.0 ** 61) if grid else None
                        steps(which).first_pass(t, tables, [w.clone() for w in gen_words], target, step, sl, 5,
                                                cap, 1000, ws)
                        sl.state[:2 * m] = torch.where(sl.idx[:2 * m] > 0, F.DONE, F.EMPTY)
                        sl.val[:2 * m] = sl.idx[:2 * m] * 7919 - 12345
                        written = target.clone()
                        idx = sl.idx[:2 * m].clone()
                        sl.idx[:2 * m] = torch.where(idx > 0, idx - 1000, 0)
                        steps(which).write(sl, written, step)
                        sl.idx[:2 * m] = idx
                        res[which] = (sl, int(ws[1]), target, written)
                    (sa, ca, ta, wa), (sb, cb, tb, wb) = res["torch"], res["triton"]
                    view = (lambda x: x) if not grid else (lambda x: x.view(torch.int32 if dtype == torch.float32
                                                                            else torch.int64))
                    if ca != cb or same(sa, sb) or not torch.equal(view(ta), view(tb)) or \\
                            not torch.equal(view(wa), view(wb)):
                        bad.append(f"{name} first pass grid={grid} {dtype} cap={cap}: {ca} {cb} {same(sa, sb)}")
    print("BAD", bad)
    print("STATES", sorted(states))
''')


def _interpret(script: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", f"TESTS = {TESTS!r}\n" + script], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_interpreted_steps_match_the_torch_steps():
    out = _interpret(STEPS)
    assert "BAD []" in out, out[-3000:]
    states = set(eval(out.split("STATES ")[1].splitlines()[0]))
    assert {2, 3, 4, 5, 6} <= states, states  # pending, done, and a tie, a tail and a test handed over


def test_interpreted_releases_match_the_torch_releases_with_one_sync():
    out = _interpret(WHOLE)
    assert "BAD []" in out, out[-3000:]
    syncs = eval(out.split("SYNCS ")[1].splitlines()[0])
    assert syncs and all(c == (1, 1) for c in syncs), syncs


def test_finish_kernels_compile_for_cuda_without_fused_or_flushed_arithmetic():
    """Every kernel variant of the device release compiles for an sm_90 GPU (Triton's own ptxas, no
    GPU needed), with no fused multiply-add and no flush of subnormals; the rounds' two-Laplace
    quotient is an IEEE division (``div.rn.f64``), their integer-to-float conversions round to
    nearest; the first passes have the look-back's acquire loads and release exchanges."""
    from pyg_private.sampling.backends import finish_triton as X

    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:  # pragma: no cover - depends on the Triton version
        pytest.skip("this Triton has no ASTSource / GPUTarget")
    if "nvidia" not in getattr(__import__("triton.backends", fromlist=["backends"]), "backends", {}):
        pytest.skip("Triton's NVIDIA backend is not installed")
    ints = {"n", "start", "cap", "slot_shift", "low_shift", "accept_bits", "offset_mask", "amask", "offset_shift",
            "split_mask", "pos_tail"}

    def ptx(fn, pointers=None, **constexprs):
        signature = {a: "i64" if a in ints else "fp32" if a in ("s", "g", "lim") else "*i64"
                     for a in fn.arg_names if a not in constexprs}
        signature.update(pointers or {})
        signature.update({a: "constexpr" for a in constexprs})
        source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4, "enable_fp_fusion": False}).asm["ptx"]

    codes = []
    for per in (1, 2, 3):
        code = ptx(X._release_samples_kernel, MODE=per, PER=per, ORDERED=True, BLOCK=1024)
        assert "ld.global.gpu.acquire.b64" in code and "atom.global.gpu.release.exch.b64" in code
        codes.append(code)
        for f in ("fp32", "fp64"):
            codes.append(ptx(X._release_grid_kernel, {"values": f"*{f}"}, MODE=per, PER=per, DOUBLE=f == "fp64",
                             ORDERED=True, BLOCK=1024))
        for kind in (0, 1, 2):
            for first in (True, False):
                code = ptx(X._round_kernel, {"params": "*fp64"}, FIRST=first, PER=per, KIND=kind,
                           EXTEND=per < 3, BLOCK=256)
                assert "cvt.rn.f64.s64" in code and "mul.rn.f64" in code and "add.rn.f64" in code
                assert ("div.rn.f64" in code) == (kind == 2), (kind, first, per)
                codes.append(code)
    for target in ("*fp32", "*fp64", "*i64"):
        codes.append(ptx(X._write_kernel, {"target": target}, GRID=target != "*i64", BLOCK=256))
    for code in codes:
        assert "fma" not in code and ".ftz" not in code


@pytest.mark.cuda
def test_cuda_device_release_matches_the_torch_steps_and_syncs_once():
    """On CUDA: the same words (the CPU's seeded words copied) give the torch steps' samples and
    released values on the CPU, bit for bit; a release with a fresh source (its ChaCha20 key
    uploaded) synchronises the host once (``torch.cuda.set_sync_debug_mode`` warns at every
    synchronising operation)."""
    import warnings

    from pyg_private.sampling import RoundedNoiseSampler
    from pyg_private.sampling import device_release as D
    from pyg_private.sampling.words import RandomSource

    class Copied(RandomSource):  # the CPU source's words, handed to the device
        def __init__(self, seed):
            super().__init__("cuda", generator=torch.Generator("cuda"))
            self._cpu = RandomSource("cpu", generator=torch.Generator().manual_seed(seed))

        def words(self, n, out=None):
            w = self._cpu.words(n).to("cuda", non_blocking=False)
            return w if out is None else out.copy_(w)

    def cpu_source(seed):
        return RandomSource("cpu", generator=torch.Generator().manual_seed(seed))

    D_devices = set(D.DEVICES)
    try:
        for kind, log_scale in (("gaussian", 30), ("laplace", 38), ("two_laplace", 44)):
            sampler = RoundedNoiseSampler(kind, 2.0 ** log_scale)
            n = 3 * (1 << 19) + 17
            D.DEVICES = {"cuda"}
            got = sampler.sample(n, Copied(3)).cpu()
            values = torch.randn(n, dtype=torch.float32)
            released = sampler.add_to_grid_(values.cuda(), 2.0 ** -20, Copied(5)).cpu()
            D.DEVICES = {"cuda", "cpu"}
            assert torch.equal(got, sampler.sample(n, cpu_source(3)))
            assert torch.equal(released, sampler.add_to_grid_(values.clone(), 2.0 ** -20, cpu_source(5)))
            D.DEVICES = {"cuda"}
            x = torch.randn(n, device="cuda")
            sampler.reserve(n, "cuda", dtype=torch.float32, granularity=2.0 ** -20)
            sampler.reserve(n, "cuda")
            torch.cuda.synchronize()
            for release in (lambda: sampler.add_to_grid_(x, 2.0 ** -20, RandomSource("cuda")),
                            lambda: sampler.sample(n, RandomSource("cuda", secure=True))):
                with warnings.catch_warnings(record=True) as caught:  # a fresh stream (its key uploaded) too
                    warnings.simplefilter("always")
                    torch.cuda.set_sync_debug_mode("warn")
                    try:
                        release()
                    finally:
                        torch.cuda.set_sync_debug_mode("default")
                assert sum("synchroniz" in str(w.message) for w in caught) == 1, [str(w.message) for w in caught]
    finally:
        D.DEVICES = D_devices
