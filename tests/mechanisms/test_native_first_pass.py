"""The fused C first pass of the exact sampler (``_first_pass_native``) computes exactly what the
torch first pass computes: same values, same flagged samples, hence the same samples from the same
words, for every kind and word layout (one, two and three words a sample), on the exact paths too."""
from __future__ import annotations

import shutil
import sysconfig

import pytest
import torch
from sampler_helpers import force_exact_paths, seeded_source

from pyg_private._native import native_enabled
from pyg_private.mechanisms import exact_integer_noise as E
from pyg_private.sampling import sampler as sampler_module

needs_native = pytest.mark.skipif(not E.native_available(), reason="the C first pass is not built")

# (kind, log2 scale): each kind at one, two and three words a sample, and at the smallest scale
LAYOUTS = [("gaussian", 20), ("gaussian", 29), ("gaussian", 40), ("gaussian", 41), ("laplace", 36),
           ("laplace", 38), ("laplace", 46), ("two_laplace", 32.7), ("two_laplace", 38), ("two_laplace", 40)]


def test_built_wherever_a_compiler_is():
    """`make install` builds the extension where a C compiler exists; a silent fallback would halve
    the safe sampler's speed unnoticed."""
    if not native_enabled():
        pytest.skip("PYG_PRIVATE_NATIVE=0: the extensions are disabled")
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") is None:
        pytest.skip("no C compiler: the torch first pass runs")
    assert E.native_available(), "pyg_private.sampling.backends._first_pass_native is missing: run `make install`"


@needs_native
@pytest.mark.parametrize("kind,log_scale", LAYOUTS)
def test_same_samples_as_the_torch_pass(kind, log_scale):
    sampler = E.RoundedNoiseSampler(kind, 2.0 ** log_scale)
    n = 3 * sampler_module._CHUNK + 1234  # several chunks and a partial one
    got = {}
    for native in (True, False):
        sampler.native = native
        got[native] = sampler.sample(n, seeded_source(7))
    assert torch.equal(got[True], got[False])
    assert sampler._t.words_per_sample == (1 if log_scale < 38 or (kind == "gaussian" and log_scale < 40) else
                                           2 if log_scale < 40 or (kind == "gaussian" and log_scale < 41) else 3)


@needs_native
@pytest.mark.parametrize("kind,log_scale", [("gaussian", 29), ("laplace", 38), ("two_laplace", 40)])
def test_same_flags_on_the_exact_paths(kind, log_scale):
    """Few split bits (many ties) and a wide margin (many slow acceptances): the flagged samples,
    hence the samples, agree."""
    forced = force_exact_paths(E.RoundedNoiseSampler(kind, 2.0 ** log_scale), split_bits=3, margin=2.0 ** -6)
    t = forced._t
    tables = t.on(torch.device("cpu"))
    m = 5000
    words = [seeded_source(3).words(m) for _ in range(t.words_per_sample)]
    offset, bits = t.offset_and_bits(words)
    out_t = torch.empty(m, dtype=torch.int64)
    scratch = [torch.empty(m, dtype=torch.int64) for _ in range(3)] + [torch.empty(m, dtype=torch.bool)]
    fast = [tables["packed3"]] if "packed3" in tables else [tables["base3"], tables["cheap3"]]
    flag = E.first_pass(words[0], offset, bits, out_t, scratch, tables["split_high"], fast,
                        E.WORD_BITS - t.slot_bits, t.low_shift, t.accept_bits)
    out_n, flagged = torch.empty(m, dtype=torch.int64), torch.empty(m, dtype=torch.int64)
    count = E._native_first_pass(words, offset.contiguous(), bits.contiguous(), out_n, flagged, 100, tables, t)
    assert torch.equal(flagged[:count] - 100, flag.nonzero().squeeze(1))
    assert 0.05 * m < count < m  # the forced table flags many samples
    assert torch.equal(out_n[~flag], out_t[~flag])  # flagged values are recomputed by the slow path
    for native in (True, False):
        forced.native = native
        if native:
            a = forced.sample(m, seeded_source(5))
        else:
            b = forced.sample(m, seeded_source(5))
    assert torch.equal(a, b)


@needs_native
def test_threads_and_output_buffer(monkeypatch):
    """Tasks on two threads (the GIL is released in the loop), written into a given buffer."""
    sampler = E.RoundedNoiseSampler("gaussian", 2.0 ** 29)
    monkeypatch.setattr(sampler_module, "_TASK", 1 << 15)
    n = 5 * (1 << 15) + 17
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = torch.full((n,), -1, dtype=torch.int64)
        sampler.native = True
        sampler.sample(n, seeded_source(11), out=out)
        sampler.native = False
        reference = sampler.sample(n, seeded_source(11))
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(out, reference)


@needs_native
def test_wrapper_refuses_bad_buffers():
    sampler = E.RoundedNoiseSampler("gaussian", 2.0 ** 29)
    t = sampler._t
    tables = t.on(torch.device("cpu"))
    words = [seeded_source(0).words(64)]
    flagged = torch.empty(64, dtype=torch.int64)
    for out in (torch.empty(64, dtype=torch.int32), torch.empty(128, dtype=torch.int64)[::2]):
        with pytest.raises(RuntimeError, match="contiguous int64 CPU"):
            E._native_first_pass(words, None, None, out, flagged, 0, tables, t)
    with pytest.raises(RuntimeError, match="contiguous int64 CPU"):
        E._native_first_pass(words, None, None, torch.empty(64, dtype=torch.int64), flagged[:10], 0, tables, t)
