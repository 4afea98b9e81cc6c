"""The sampler's Triton dispatch (a task's first pass, or a grid release's first pass and grid step, as
one launch) gives the torch path's samples and the composition's released values bit for bit from the
same words: under Triton's interpreter on CPU tensors (the CPU added to the Triton devices in a fresh
interpreter, which reads ``TRITON_INTERPRET`` when the kernels are defined), over several tasks and
chunks, one-, two- and three-word layouts, a table that flags many samples, float32 and float64 values
with NaN, infinities and a signed zero. On CUDA the tests marked ``cuda`` compare with the CPU."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton", reason="the optional triton package is not installed")

CHECK = textwrap.dedent('''
    import sys, warnings
    import torch
    warnings.simplefilter("ignore")
    sys.path.insert(0, TESTS)
    from pyg_private.mechanisms import exact_integer_noise as E
    from pyg_private.mechanisms import grid as G
    from pyg_private.sampling import sampler as S
    from pyg_private.sampling.backends import triton_ops
    from sampler_helpers import force_exact_paths, seeded_source

    torch.set_num_threads(1)  # the interpreter runs launches from one thread
    S._TASK, S._CHUNK = 1 << 11, 1 << 9  # several tasks, several chunks a task
    calls = []
    kernels = triton_ops.kernels()
    for name in ("first_pass_triton", "grid_first_pass_triton"):
        real = getattr(kernels, name)
        setattr(kernels, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
    bad = []
    for kind, log_scale in (("gaussian", 20), ("laplace", 38), ("two_laplace", 40), ("gaussian", 29)):
        sampler = E.RoundedNoiseSampler(kind, 2.0 ** log_scale)
        if log_scale == 29:  # 3 split bits and a wide margin: ties and slow acceptances everywhere
            sampler = force_exact_paths(sampler, split_bits=3, margin=2.0 ** -6)
        sampler.native = False
        n = 2 * S._TASK + 99
        triton_ops.BACKEND.devices = {"cuda"}
        ref = sampler.sample(n, seeded_source(4))
        triton_ops.BACKEND.devices = {"cuda", "cpu"}
        if not torch.equal(sampler.sample(n, seeded_source(4)), ref):
            bad.append((kind, log_scale, "sample"))
        for dtype in (torch.float32, torch.float64):
            v = (torch.randn(n, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2.0 ** -10).to(dtype)
            v[:5] = torch.tensor([float("nan"), float("inf"), -0.0, 2.0 ** 70, 0.5])
            got, want = v.clone(), v.clone()
            triton_ops.BACKEND.devices = {"cuda"}
            G.add_noise_on_grid_(want, sampler.sample(n, seeded_source(9)), 2.0 ** -20)
            triton_ops.BACKEND.devices = {"cuda", "cpu"}
            sampler.reserve(n, "cpu", dtype=dtype, granularity=2.0 ** -20)
            sampler.add_to_grid_(got, 2.0 ** -20, seeded_source(9))
            view = torch.int64 if dtype == torch.float64 else torch.int32
            if not torch.equal(got.view(view), want.view(view)):
                bad.append((kind, log_scale, str(dtype)))
    print("BAD", bad)
    print("CALLS", sorted(set(calls)), len(calls))
''')


def test_triton_dispatch_gives_the_torch_paths_values_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    script = f"TESTS = {str(Path(__file__).resolve().parents[1])!r}\n" + CHECK
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BAD []" in done.stdout, done.stdout
    calls = done.stdout.split("CALLS ")[1]
    assert "'first_pass_triton'" in calls and "'grid_first_pass_triton'" in calls  # the kernels did run


@pytest.mark.cuda
def test_cuda_sampler_and_grid_release_match_the_cpu(monkeypatch):
    """On CUDA, with the device release switched off (its finish reads the words in another order:
    ``test_device_finish_triton.py``): the task-by-task flow, a Triton first pass and the host's finish
    (the device release's exact overflow path), gives the CPU's samples and released values from the
    same seeded words (the CPU stream seeded alike: the device's seeded words come from a CUDA
    generator, so compare with words copied)."""
    from pyg_private.mechanisms.exact_integer_noise import RoundedNoiseSampler
    from pyg_private.mechanisms.randomness import RandomSource
    from pyg_private.sampling import device_release

    monkeypatch.setattr(device_release, "DEVICES", set())

    class Copied(RandomSource):  # the CPU source's words, handed to the device
        def __init__(self, seed):
            super().__init__("cuda", generator=torch.Generator("cuda"))
            self._cpu = RandomSource("cpu", generator=torch.Generator().manual_seed(seed))

        def words(self, n, out=None):
            w = self._cpu.words(n).to("cuda")
            return w if out is None else out.copy_(w)

        def spawn(self, count):
            return [Copied(int(s)) for s in self._cpu.words(count)]

    class CpuCopy(RandomSource):
        def __init__(self, seed):
            super().__init__("cpu", generator=torch.Generator().manual_seed(seed))

        def spawn(self, count):
            return [CpuCopy(int(s)) for s in self.words(count)]

    for kind, log_scale in (("gaussian", 30), ("laplace", 38), ("two_laplace", 44)):
        sampler = RoundedNoiseSampler(kind, 2.0 ** log_scale)
        n = 3 * (1 << 19) + 17
        assert torch.equal(sampler.sample(n, Copied(3)).cpu(), sampler.sample(n, CpuCopy(3)))
        values = torch.randn(n, dtype=torch.float32)
        got = sampler.add_to_grid_(values.cuda(), 2.0 ** -20, Copied(5)).cpu()
        assert torch.equal(got, sampler.add_to_grid_(values.clone(), 2.0 ** -20, CpuCopy(5)))
