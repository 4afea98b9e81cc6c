"""``RoundedNoiseSampler.add_to_grid_`` (the sampler's first pass fused with the grid step in C, with
an AVX-512 loop where the CPU has one) releases exactly what the composition
``add_noise_on_grid_(values, sampler.sample(n, source), g)`` releases, bit for bit and from the same
random words: on values that exercise every branch of the grid step, across the sampler's chunks and
tasks, with the flagged samples (ties, slow acceptance, rejections) finished in the Python code."""
import pytest
import torch

from pyg_private.mechanisms import exact_integer_noise as E
from pyg_private.mechanisms import grid as G
from pyg_private.mechanisms.exact_integer_noise import RoundedNoiseSampler
from pyg_private.mechanisms.randomness import RandomSource
from pyg_private.sampling import sampler as S
from pyg_private.sampling.backends import native_c

fused = pytest.mark.skipif(not (native_c.available() and native_c.grid_step_available()),
                           reason="the C extensions are not built")


def _seeded(seed: int) -> RandomSource:
    return RandomSource(generator=torch.Generator().manual_seed(seed))


def _values(n: int, dtype: torch.dtype, on_scale: bool, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(n, generator=gen, dtype=torch.float64) * torch.exp2(torch.randint(-30, 40, (n,), generator=gen))
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5, -0.5, 2.5, -0.0, 2.0 ** 62, -(2.0 ** 70),
                            1e300, 5e-324, 2.0 ** 23 + 0.5], dtype=torch.float64)
    v[:min(n, special.numel())] = special[:n]
    v = (v if on_scale else v * 2.0 ** -20).to(dtype)
    tiny = torch.finfo(dtype).tiny  # subnormals of the buffer's dtype, both signs: flushed by the C loops
    v[special.numel():special.numel() + n // 16] *= tiny
    return v


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int64)


def _count_flagged(sampler, monkeypatch) -> list:
    seen = []
    finish = sampler._finish_flagged

    def spy(out, index, words, source):
        seen.append(index.numel())
        finish(out, index, words, source)

    monkeypatch.setattr(sampler, "_finish_flagged", spy)
    return seen


KINDS = [("gaussian", 2.0 ** 20), ("gaussian", 3.3e7), ("two_laplace", 1.7 * 2.0 ** 22), ("laplace", 2.0 ** 30),
         ("two_laplace", 2.0 ** 36.1), ("gaussian", 2.0 ** 40)]  # the last: two words a sample


def test_both_word_layouts_are_covered():
    assert {RoundedNoiseSampler(k, s)._t.words_per_sample for k, s in KINDS} == {1, 2}


@pytest.mark.parametrize("kind, scale", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("on_scale", [False, True])
@pytest.mark.parametrize("n", [1, 9, 70_001])
def test_equals_sample_then_grid_step(kind, scale, dtype, on_scale, n):
    sampler = RoundedNoiseSampler(kind, scale)
    v = _values(n, dtype, on_scale, seed=n)
    a, b = v.clone(), v.clone()
    assert sampler.add_to_grid_(a, 2.0 ** -20, _seeded(n), on_scale=on_scale) is a
    G.add_noise_on_grid_(b, sampler.sample(n, _seeded(n)), 2.0 ** -20, on_scale=on_scale)
    assert torch.equal(_bits(a), _bits(b))


@fused
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind, scale, words", [("gaussian", 5.5e6, 1), ("gaussian", 2.0 ** 40, 2)])
def test_across_tasks_with_flagged_samples(dtype, kind, scale, words, monkeypatch):
    """Two tasks (spawned streams) and a few thousand flagged samples, among them alias ties
    (probability 2^-12 each) and rejections: the same release as the composition."""
    n = S._TASK + 80_000
    sampler = RoundedNoiseSampler(kind, scale)
    assert sampler._t.words_per_sample == words
    flagged = _count_flagged(sampler, monkeypatch)
    v = _values(n, dtype, False, seed=3)
    a, b = v.clone(), v.clone()
    sampler.add_to_grid_(a, 2.0 ** -20, _seeded(11))
    assert len(flagged) == 2 and sum(flagged) > 1000  # both tasks finished their flagged samples
    G.add_noise_on_grid_(b, sampler.sample(n, _seeded(11)), 2.0 ** -20)
    assert torch.equal(_bits(a), _bits(b))


@fused
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [7, 8, 65, 70_001])
@pytest.mark.parametrize("scale", [3.3e7, 2.0 ** 40])
def test_simd_loop_matches_scalar_loop(dtype, n, scale, monkeypatch):
    if not native_c._grid_step_native.simd_available():
        pytest.skip("no AVX-512 on this CPU: only the scalar loop runs")
    sampler = RoundedNoiseSampler("gaussian", scale)
    v = _values(n, dtype, False, seed=5)
    a, b = v.clone(), v.clone()
    sampler.add_to_grid_(a, 2.0 ** -20, _seeded(2))
    monkeypatch.setattr(native_c, "_GRID_SIMD", False)
    sampler.add_to_grid_(b, 2.0 ** -20, _seeded(2))
    assert torch.equal(_bits(a), _bits(b))


@pytest.mark.parametrize("case", ["no_extension", "not_contiguous", "three_words", "integer_values"])
def test_other_inputs_take_the_composition(case, monkeypatch):
    scale, g = 3.3e7, 2.0 ** -20
    v = _values(3000, torch.float64, False, seed=1).view(100, 30)
    if case == "no_extension":
        monkeypatch.setattr(native_c, "_grid_step_native", None)
    elif case == "not_contiguous":
        v = v.t()
    elif case == "three_words":
        scale = 2.0 ** 45  # too many offset bits for two words a sample
        assert RoundedNoiseSampler("gaussian", scale)._t.words_per_sample == 3
    else:
        v, g = torch.randint(-1000, 1000, (100, 30)).to(torch.float16), 1.0
    sampler = RoundedNoiseSampler("gaussian", scale)
    a = v.clone()
    sampler.add_to_grid_(a, g, _seeded(4))
    b = v.clone()
    G.add_noise_on_grid_(b, sampler.sample(v.numel(), _seeded(4)), g)
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_thread_count_does_not_change_a_seeded_release():
    sampler = RoundedNoiseSampler("gaussian", 3.3e7)
    v = _values(S._TASK * 2 + 5, torch.float32, False, seed=8)
    threads = torch.get_num_threads()
    try:
        out = []
        for k in (1, 2):
            torch.set_num_threads(k)
            a = v.clone()
            sampler.add_to_grid_(a, 2.0 ** -20, _seeded(9))
            out.append(a)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(_bits(out[0]), _bits(out[1]))


def test_invalid_granularity_raises_before_any_draw():
    sampler = RoundedNoiseSampler("gaussian", 3.3e7)
    v = torch.zeros(10)
    for g in (0.3, -1.0, float("nan")):
        with pytest.raises(ValueError):
            sampler.add_to_grid_(v, g, _seeded(0))
    assert torch.equal(v, torch.zeros(10))


def test_words_into_a_buffer_are_the_same_words():
    out = torch.empty(1000, dtype=torch.int64)
    assert torch.equal(_seeded(3).words(1000, out=out), _seeded(3).words(1000))
    default = RandomSource()
    w = default.words(1000, out=out)
    assert w is out and int(w.min()) >= 0
    for bad in (torch.empty(1000, dtype=torch.int32), torch.empty(999, dtype=torch.int64),
                torch.empty(2000, dtype=torch.int64)[::2]):
        with pytest.raises(ValueError, match="contiguous int64"):
            default.words(1000, out=bad)


@pytest.mark.parametrize("kind, scale, n", [("gaussian", 3.3e7, 70_001), ("gaussian", 2.0 ** 45, 3000),
                                            ("gaussian", 3.3e7, S._TASK + 10)])
def test_staged_release_is_the_same_release(kind, scale, n):
    """The two stages (the C pass, then the flagged draws, possibly in another thread) give
    add_to_grid_'s values; values it cannot fuse, or more than one task, are released whole by the
    first stage."""
    sampler = RoundedNoiseSampler(kind, scale)
    v = _values(n, torch.float32, False, seed=6)
    a, b = v.clone(), v.clone()
    rest = sampler.add_to_grid_staged_(a, 2.0 ** -20, _seeded(12))
    rest()
    sampler.add_to_grid_(b, 2.0 ** -20, _seeded(12))
    assert torch.equal(_bits(a), _bits(b))


def test_grid_gaussian_blocks_the_same_on_one_and_two_threads():
    """The contractive and GAP hops' noise (row blocks, each with its own stream; passes on worker
    threads, flagged draws finished in the calling thread) does not depend on the thread count."""
    from pyg_private.nn._grid_gaussian import add_grid_gaussian_

    x = torch.randn(30_000, 50, generator=torch.Generator().manual_seed(1))
    threads = torch.get_num_threads()
    out = []
    try:
        for k in (1, 2):
            torch.set_num_threads(k)
            out.append(add_grid_gaussian_(x.clone(), 0.7, 2.0 ** -22, _seeded(5), post=lambda v: v.mul_(0.5)))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out[0], out[1])
    reference = x.clone()
    rows = 2 ** 19 // 50
    for part, stream in zip(reference.split(rows), _seeded(5).spawn(-(-30_000 // rows))):
        RoundedNoiseSampler("gaussian", 0.7 / 2.0 ** -22).add_to_grid_(part, 2.0 ** -22, stream)
        part.mul_(0.5)
    assert torch.equal(out[0], reference)


@pytest.mark.parametrize("threads", [1, 2])
def test_run_staged_runs_every_second_stage_in_order(threads):
    from pyg_private.mechanisms.randomness import run_staged

    seen = []
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        run_staged(lambda i: i * i, lambda i, r: seen.append((i, r)), 7, torch.device("cpu"))

        def boom(i):
            if i == 3:
                raise RuntimeError("stage one failed")
            return i

        with pytest.raises(RuntimeError, match="stage one failed"):
            run_staged(boom, lambda i, r: None, 6, torch.device("cpu"))
    finally:
        torch.set_num_threads(previous)
    assert seen == [(i, i * i) for i in range(7)]
