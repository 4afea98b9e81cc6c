"""The Triton kernels of the exact sampler's first pass and of its fusion with the grid step
(``pyg_private.sampling.backends.triton_kernels``) compute exactly what the C loops (``_first_pass_native``,
``_grid_step_native``, scalar and AVX-512) and the torch first pass compute: the same ``out``, the same
flagged indices in the same (increasing) order, the same released values bit for bit and the same
kept rounded values. Every kind, the one-, two- and three-word layouts, seeded words and crafted ones
(the three sides of alias splits, ties included, the tail cells, acceptance bits at the cheap
threshold and one below it, the first and last offsets of a cell), float32 and float64 values with
halves, signed zeros, subnormals, huge values, infinities and NaN (whose int64 sum wraps), on and off
the grid's scale, at granularities from 2^-100 to 2^100; both compactions of the flagged list.

Under Triton's interpreter on the CPU (a fresh interpreter with ``TRITON_INTERPRET=1``, which is read
when the kernels are defined) and, where a GPU is present, on CUDA against the CPU loops."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

triton = pytest.importorskip("triton", reason="the optional triton package is not installed")

CASES = textwrap.dedent('''
    import copy
    import math
    import time
    import warnings

    import torch

    from pyg_private.mechanisms import exact_integer_noise as E
    from pyg_private.mechanisms import grid as G
    from pyg_private.sampling.backends import native_c as C
    from pyg_private.sampling.backends.triton_kernels import first_pass_triton, grid_first_pass_triton, workspace_size

    warnings.simplefilter("ignore")
    NATIVE = E.native_available() and C._grid_step_native is not None
    SIMD = NATIVE and C._grid_step_native.simd_available()
    # (kind, log2 scale): each kind at one, two and three words a sample
    LAYOUTS = [("gaussian", 20), ("gaussian", 40), ("gaussian", 41), ("laplace", 36), ("laplace", 38),
               ("laplace", 46), ("two_laplace", 32.7), ("two_laplace", 38), ("two_laplace", 40)]


    def forced(t):
        """The table with 3 alias split bits: ties are common (as in sampler_helpers.force_exact_paths)."""
        f = copy.copy(t)
        f.split_bits = 3
        f._build_fast()
        return f


    def crafted(t, gen, random_slots=48):
        """Words (one list a word of the sample) that hit every side of alias splits, the tail cells,
        the cheap threshold and its neighbour, and the ends of the cells."""
        sb, s, a, j = t.slot_bits, t.split_bits, t.accept_bits, t.j
        slots = len(t.split)
        cell = t.slot_cell
        tails = {t.pos_tail, t.neg_tail}
        chosen = {0, 1, slots - 1}
        chosen |= {i for i in range(slots) if int(cell[i]) in tails or int(cell[t.alias_t[i]]) in tails}
        chosen |= set(torch.randint(0, slots, (random_slots,), generator=gen).tolist())
        rows = []
        for slot in sorted(chosen):
            split = int(t.split_int[slot])
            for low in (split - 1, split, split + 1):
                if not 0 <= low < (1 << s):
                    continue
                side = (low > split) - (low < split)
                cheap = int(t.cheap3[3 * slot + side])
                for bits in {cheap, cheap - 1, 0, (1 << min(a, 62)) - 1}:
                    if bits < 0:
                        continue
                    for offset in (0, t.w - 1):
                        rows.append((slot, low, offset, bits))
        junk = lambda k: torch.randint(0, 1 << 62, (len(rows),), generator=gen) & ((1 << k) - 1)
        slot, low, offset, bits = (torch.tensor(c, dtype=torch.int64) for c in zip(*rows))
        head = (slot << (63 - sb)) | (low << t.low_shift)
        if t.words_per_sample == 1:
            return [head | (offset << a) | bits]
        head = head | junk(t.low_shift)
        if t.words_per_sample == 2:
            return [head, (offset << a) | bits]
        return [head, bits, (offset << (63 - j)) | junk(63 - j)]


    def words_for(t, m, seed):
        gen = torch.Generator().manual_seed(seed)
        special = crafted(t, gen)
        return [torch.cat([torch.randint(0, 1 << 62, (m,), generator=gen) * 2 +
                           torch.randint(0, 2, (m,), generator=gen), w]) for w in special]


    def values(n, dtype, seed):
        gen = torch.Generator().manual_seed(seed)
        base = torch.randn(n, generator=gen, dtype=torch.float64) * torch.exp2(
            torch.randint(-40, 70, (n,), generator=gen).to(torch.float64))
        special = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 2.0 ** 52 + 1, -(2.0 ** 53), 2.0 ** 61,
                                2.0 ** 62, -(2.0 ** 70), 1e300, -1e300, 5e-324, 2.0 ** 23 + 0.5, 2.0 ** 24 + 1,
                                float("inf"), -float("inf"), float("nan")], dtype=torch.float64)
        halves = (torch.randint(-2 ** 20, 2 ** 20, (n,), generator=gen) + 0.5).to(torch.float64)
        v = torch.where(torch.rand(n, generator=gen) < 0.2, halves, base)
        v[:special.numel()] = special
        v[special.numel()::37] = float("nan")  # with negative noise too: the int64 sum wraps
        v[5::41] = -float("inf")
        v = v.to(dtype)
        tiny = torch.finfo(dtype).tiny
        v[7::23] = (torch.rand(len(v[7::23]), generator=gen, dtype=torch.float64) * 2 - 1).to(dtype) * tiny
        v[11::29] = -0.0
        return v


    def bits_of(x):
        return x.view(torch.int32 if x.dtype == torch.float32 else torch.int64)


    def torch_pass(t, words, start):
        """out and flagged indices of the torch first pass (and of the C loop where built), on the CPU."""
        tables = t.on(torch.device("cpu"))
        m = words[0].numel()
        offset, bits = t.offset_and_bits(words)
        offset, bits = offset.contiguous(), bits.contiguous()
        out = torch.empty(m, dtype=torch.int64)
        scratch = [torch.empty(m, dtype=torch.int64) for _ in range(3)] + [torch.empty(m, dtype=torch.bool)]
        fast = [tables["packed3"]] if "packed3" in tables else [tables["base3"], tables["cheap3"]]
        flag = E.first_pass(words[0], offset, bits, out, scratch, tables["split_high"], fast,
                            63 - t.slot_bits, t.low_shift, t.accept_bits)
        refs = {"torch": (out, flag.nonzero().squeeze(1) + start)}
        if NATIVE:
            out_n, flagged = torch.empty(m, dtype=torch.int64), torch.empty(m, dtype=torch.int64)
            count = E._native_first_pass(words, offset, bits, out_n, flagged, start, tables, t)
            refs["C"] = (out_n, flagged[:count].clone())
        return refs, offset, bits


    def grid_refs(t, words, v, step, on_scale, start, noise, flag_index):
        """Released values, flagged indices and kept values: the torch composition, and the fused C
        loop (scalar and AVX-512) where built (one or two words)."""
        g = step[1]
        a = v.clone()
        G.add_noise_on_grid_(a, noise, g, on_scale=on_scale, native=False)
        if on_scale:
            q = v.clone().clamp_(-G._CLAMP, G._CLAMP).round_().to(torch.int64)
        else:
            q = G.round_to_grid(v, g)
        refs = {"torch": (a, flag_index, q[flag_index - start])}
        if NATIVE and t.words_per_sample <= 2:
            tables = t.on(torch.device("cpu"))
            per = t.words_per_sample
            for simd in ((False, True) if SIMD else (False,)):
                b = v.clone()
                m = v.numel()
                index, kept = torch.empty(m, dtype=torch.int64), torch.empty(m, dtype=torch.int64)
                count = C._grid_step_native.grid_first_pass(
                    words[0].data_ptr(), 0 if per == 1 else words[1].data_ptr(), m, b.data_ptr(),
                    64 if v.dtype == torch.float64 else 32, step[0], step[1], step[2], index.data_ptr(),
                    kept.data_ptr(), start, tables["split_high"].data_ptr(),
                    (tables["packed3"] if per == 1 else tables["base3"]).data_ptr(),
                    0 if per == 1 else tables["cheap3"].data_ptr(), 63 - t.slot_bits, t.low_shift, t.accept_bits,
                    t.w - 1, simd)
                refs["C simd" if simd else "C"] = (b, index[:count].clone(), kept[:count].clone())
        return refs


    def compare(device, m=1500, block=None, seed=0, log=print):
        """Every comparison on ``device`` (``block``: samples a program; by default 64 or 256, varying
        with the layout); returns the failures."""
        bad = []
        dev = torch.device(device)
        timings = []
        for number, (kind, log_scale) in enumerate(LAYOUTS):
            t = E._table(kind, 2.0 ** log_scale)
            size = block or (64 if number % 4 == 0 else 256)
            for table in ((t, forced(t)) if number % 3 == 0 else (t,)):
                name = f"{kind} 2^{log_scale} words={table.words_per_sample}" + \\
                       (" split_bits=3" if table is not t else "")
                words = words_for(table, m, seed + number)
                start = 12345 if number % 2 else (1 << 33) + 7
                refs, offset, bits = torch_pass(table, words, start)
                tables = table.on(dev)
                dwords = [w.to(dev) for w in words]
                n = words[0].numel()
                for given in ((False, True) if table.words_per_sample > 1 else (False,)):
                    for compaction in ("lookback", "sort"):
                        out = torch.full((n,), -7, dtype=torch.int64, device=dev)
                        flagged = torch.full((n + 3,), -7, dtype=torch.int64, device=dev)
                        # a given workspace (not zero: the wrapper zeroes it), or one of the wrapper's
                        ws = torch.full((workspace_size(n, size) + 3,), 5, dtype=torch.int64, device=dev) \
                            if given else None
                        clock = time.perf_counter()
                        count = first_pass_triton(dwords, offset.to(dev) if given else None,
                                                  bits.to(dev) if given else None, out, flagged, start, tables,
                                                  table, compaction=compaction, block=size, workspace=ws)
                        timings.append((n, time.perf_counter() - clock))
                        if not (isinstance(count, torch.Tensor) and count.device == dev and count.dim() == 0):
                            bad.append(f"{name}: the count is not a 0-dim device tensor")
                        c = int(count)
                        for ref, (out_r, flagged_r) in refs.items():
                            if not torch.equal(out.cpu(), out_r):
                                bad.append(f"{name} given={given} {compaction}: out differs from {ref}")
                            if not torch.equal(flagged[:c].cpu(), flagged_r):
                                bad.append(f"{name} given={given} {compaction}: flagged differ from {ref}")
                flag_index = refs["torch"][1]
                noise = refs["torch"][0]
                if table is not t:
                    continue
                for dtype in (torch.float32, torch.float64):
                    v = values(n, dtype, seed + number)
                    for on_scale, g in ((False, 2.0 ** -20), (True, 2.0 ** -20), (False, 2.0 ** -100),
                                        (False, 2.0 ** 100), (False, 1.0)):
                        if number % 3 and g in (2.0 ** -100, 2.0 ** 100, 1.0):
                            continue  # the extreme granularities on one layout of each kind
                        step = (1.0 if on_scale else 1.0 / g, g, G._CLAMP)
                        refs_g = grid_refs(table, words, v, step, on_scale, start, noise, flag_index)
                        for compaction in (("lookback", "sort") if g == 2.0 ** -20 and not on_scale else
                                           ("lookback",)):
                            dv = v.to(dev, copy=True)  # (on the CPU, .to would return v itself)
                            index = torch.full((n,), -7, dtype=torch.int64, device=dev)
                            kept = torch.full((n,), -7, dtype=torch.int64, device=dev)
                            clock = time.perf_counter()
                            count = grid_first_pass_triton(dwords, dv, step, index, kept, start, tables, table,
                                                           compaction=compaction, block=size)
                            timings.append((n, time.perf_counter() - clock))
                            c = int(count)
                            label = f"{name} {dtype} on_scale={on_scale} g=2^{math.log2(g):g} {compaction}"
                            for ref, (vr, ir, kr) in refs_g.items():
                                if not torch.equal(bits_of(dv.cpu()), bits_of(vr)):
                                    bad.append(f"{label}: values differ from {ref}")
                                if not torch.equal(index[:c].cpu(), ir) or not torch.equal(kept[:c].cpu(), kr):
                                    bad.append(f"{label}: flagged or kept differ from {ref}")
        samples = sum(n for n, _ in timings)
        seconds = sum(s for _, s in timings)
        log(f"TIMING {len(timings)} launches, {samples} samples, {seconds:.2f} s, "
            f"{1e6 * seconds / samples:.1f} us a sample; C: {NATIVE}, AVX-512: {SIMD}")
        return bad
''')

INTERPRETED = CASES + textwrap.dedent('''
    import torch
    from pyg_private.sampling.backends.triton_kernels import first_pass_triton

    bad = compare("cpu")
    # no samples: no launch, a zero count
    t = E._table("gaussian", 2.0 ** 20)
    empty = torch.empty(0, dtype=torch.int64)
    if int(first_pass_triton([empty], None, None, empty, empty, 0, t.on(torch.device("cpu")), t)) != 0:
        bad.append("empty batch")
    # the default block (one partial program)
    words = words_for(t, 100, 9)
    refs, _, _ = torch_pass(t, words, 0)
    n = words[0].numel()
    out, flagged = torch.empty(n, dtype=torch.int64), torch.empty(n, dtype=torch.int64)
    c = int(first_pass_triton(words, None, None, out, flagged, 0, t.on(torch.device("cpu")), t))
    if not (torch.equal(out, refs["torch"][0]) and torch.equal(flagged[:c], refs["torch"][1])):
        bad.append("default block")
    print("BAD", bad)
''')


def test_interpreted_kernels_give_the_c_loops_results():
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BAD []" in done.stdout, done.stdout[-3000:]


def test_wrappers_refuse_bad_inputs():
    """Checked before any launch (no kernel runs here)."""
    from pyg_private.mechanisms import exact_integer_noise as E
    from pyg_private.sampling.backends.triton_kernels import first_pass_triton, grid_first_pass_triton

    t = E._table("gaussian", 2.0 ** 40)  # two words a sample
    tables = t.on(torch.device("cpu"))
    w = [torch.zeros(8, dtype=torch.int64) for _ in range(2)]
    good = torch.zeros(8, dtype=torch.int64)
    with pytest.raises(ValueError, match="2 words"):
        first_pass_triton(w[:1], None, None, good, good.clone(), 0, tables, t)
    for out in (torch.zeros(8, dtype=torch.int32), torch.zeros(16, dtype=torch.int64)[::2]):
        with pytest.raises(RuntimeError, match="contiguous"):
            first_pass_triton(w, None, None, out, good.clone(), 0, tables, t)
    with pytest.raises(RuntimeError, match="contiguous"):
        first_pass_triton(w, None, None, good, good[:4].clone(), 0, tables, t)
    with pytest.raises(ValueError, match="compaction"):
        first_pass_triton(w, None, None, good, good.clone(), 0, tables, t, compaction="atomic")
    v = torch.zeros(8)
    for step in ((3.0, 1 / 3.0, 2.0 ** 61), (2.0 ** 101, 2.0 ** -101, 2.0 ** 61), (1.0, 1.0, 0.1)):
        with pytest.raises(ValueError):
            grid_first_pass_triton(w, v, step, good.clone(), good.clone(), 0, tables, t)
    with pytest.raises(RuntimeError, match="float32 or float64"):
        grid_first_pass_triton(w, v.half(), (1.0, 1.0, 2.0 ** 61), good.clone(), good.clone(), 0, tables, t)


def test_compiles_for_cuda_without_fused_or_flushed_arithmetic():
    """Every kernel variant compiles for an sm_90 GPU (no GPU needed: Triton's own ptxas), and its PTX
    has what the bit-for-bit argument assumes: no fused multiply-add, no flush of subnormals,
    round-to-nearest integer-to-float conversions, and the look-back's acquire loads and release
    exchanges."""
    from pyg_private.sampling.backends import triton_kernels as X

    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:  # pragma: no cover - depends on the Triton version
        pytest.skip("this Triton has no ASTSource / GPUTarget")
    if "nvidia" not in getattr(__import__("triton.backends", fromlist=["backends"]), "backends", {}):
        pytest.skip("Triton's NVIDIA backend is not installed")
    types = {"n": "i64", "start": "i64", "s": "fp32", "g": "fp32", "lim": "fp32", "slot_shift": "i32",
             "low_shift": "i32", "accept_bits": "i32", "offset_mask": "i64", "amask": "i64", "offset_shift": "i32"}

    def ptx(fn, values=None, **constexprs):
        signature = {a: types.get(a, "*i64") for a in fn.arg_names if a not in constexprs}
        if values:
            signature["values"] = values
        signature.update({a: "constexpr" for a in constexprs})
        source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4, "enable_fp_fusion": False}).asm["ptx"]

    variants = [(ptx(X._first_pass_kernel, MODE=mode, ORDERED=ordered, BLOCK=1024), ordered)
                for mode in (0, 1, 2, 3) for ordered in (True, False)]
    for double in (True, False):
        for mode in (1, 2, 3):
            code = ptx(X._grid_pass_kernel, "*fp64" if double else "*fp32", MODE=mode, DOUBLE=double, ORDERED=True,
                       BLOCK=1024)
            f = "f64" if double else "f32"
            assert f"cvt.rn.{f}.s64" in code and f"mul.rn.{f}" in code and f"add.rn.{f}" in code, (double, mode)
            variants.append((code, True))
    for code, ordered in variants:
        assert "fma" not in code and ".ftz" not in code
        assert ("ld.global.gpu.acquire.b64" in code and "atom.global.gpu.release.exch.b64" in code) == ordered


def _cuda_namespace() -> dict:
    namespace: dict = {}
    exec(CASES, namespace)
    return namespace


@pytest.mark.cuda
def test_cuda_kernels_give_the_c_loops_results():
    """Every interpreted comparison again on the GPU (blocks of 64 and of the default size)."""
    ns = _cuda_namespace()
    from pyg_private.sampling.backends import triton_kernels as X

    assert ns["compare"]("cuda", block=64) == []
    assert ns["compare"]("cuda", m=50_000, block=X.BLOCK) == []


@pytest.mark.cuda
@pytest.mark.parametrize("kind, log_scale", [("gaussian", 26), ("laplace", 38), ("two_laplace", 40)])
@pytest.mark.parametrize("compaction", ["lookback", "sort"])
def test_cuda_large_batch_matches_the_cpu(kind, log_scale, compaction):
    """About 4 million samples (thousands of programs waiting on their predecessors' counts), with a
    forced table that flags a sample in eight: the same out, flagged list and released values as the
    CPU loops (C where built, else torch)."""
    ns = _cuda_namespace()
    from pyg_private.mechanisms import exact_integer_noise as E
    from pyg_private.sampling.backends.triton_kernels import first_pass_triton, grid_first_pass_triton

    n = (1 << 22) + 77
    for t in (E._table(kind, 2.0 ** log_scale), ns["forced"](E._table(kind, 2.0 ** log_scale))):
        gen = torch.Generator().manual_seed(log_scale)
        words = [torch.randint(0, 1 << 62, (n,), generator=gen) * 2 + torch.randint(0, 2, (n,), generator=gen)
                 for _ in range(t.words_per_sample)]
        start = 1 << 20
        refs, _, _ = ns["torch_pass"](t, words, start)
        out_r, flagged_r = refs.get("C", refs["torch"])
        dev = torch.device("cuda")
        dwords = [w.to(dev) for w in words]
        out = torch.empty(n, dtype=torch.int64, device=dev)
        flagged = torch.empty(n, dtype=torch.int64, device=dev)
        count = first_pass_triton(dwords, None, None, out, flagged, start, t.on(dev), t, compaction=compaction)
        c = int(count)
        assert c == flagged_r.numel() > 1000
        assert torch.equal(out.cpu(), out_r)
        assert torch.equal(flagged[:c].cpu(), flagged_r)
        for dtype in (torch.float32, torch.float64):
            v = ns["values"](n, dtype, 3)
            step = (2.0 ** 20, 2.0 ** -20, 2.0 ** 61)
            refs_g = ns["grid_refs"](t, words, v, step, False, start, refs["torch"][0], refs["torch"][1])
            dv = v.to(dev)
            index = torch.empty(n, dtype=torch.int64, device=dev)
            kept = torch.empty(n, dtype=torch.int64, device=dev)
            c = int(grid_first_pass_triton(dwords, dv, step, index, kept, start, t.on(dev), t, compaction=compaction))
            for ref, (vr, ir, kr) in refs_g.items():
                assert torch.equal(ns["bits_of"](dv.cpu()), ns["bits_of"](vr)), ref
                assert torch.equal(index[:c].cpu(), ir) and torch.equal(kept[:c].cpu(), kr), ref
