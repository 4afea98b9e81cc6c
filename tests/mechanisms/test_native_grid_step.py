"""The fused C grid step (``_grid_step_native``) computes exactly what the torch operations of
:func:`add_noise_on_grid_` compute: compared bit for bit on values that exercise every branch
(halves, values beyond 2^52 / 2^23 steps, the 2^61 clamp, subnormal results, signed zeros, a NaN,
noise that wraps int64), in float32 and float64, on and off the scale."""
import shutil
import sysconfig

import pytest
import torch

from pyg_private._native import native_enabled
from pyg_private.mechanisms import grid as G

needs_native = pytest.mark.skipif(not G.grid_step_native_available(), reason="the C grid step is not built")


def test_built_wherever_a_compiler_is():
    """`make install` builds the extension where a C compiler exists; a silent fallback would cost
    five passes over every release."""
    if not native_enabled():
        pytest.skip("PYG_PRIVATE_NATIVE=0: the extensions are disabled")
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") is None:
        pytest.skip("no C compiler: the torch grid step runs")
    assert G.grid_step_native_available(), "pyg_private.sampling.backends._grid_step_native is missing: run `make install`"


def _values(dtype, n=20000, seed=0):
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(n, generator=gen, dtype=torch.float64) * torch.exp2(torch.randint(-40, 70, (n,), generator=gen))
    halves = (torch.randint(-2**20, 2**20, (n // 4,), generator=gen) + 0.5).to(torch.float64)
    special = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 2.0 ** 52 + 1, -(2.0 ** 53), 2.0 ** 61,
                            2.0 ** 62, -(2.0 ** 70), 1e300, -1e300, 5e-324, 2.0 ** 23 + 0.5, 2.0 ** 24 + 1],
                           dtype=torch.float64)
    tiny = torch.finfo(dtype).tiny  # subnormal values of the buffer's dtype, both signs (flushed by the C loop)
    sub = (torch.rand(n // 8, generator=gen, dtype=torch.float64) * 2 - 1) * tiny
    return torch.cat([base, halves, special, sub, torch.tensor([tiny, -tiny, tiny / 2], dtype=torch.float64)]).to(dtype)


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("log2_g", [-30, -3, 0, 7, -100, 100])
@pytest.mark.parametrize("on_scale", [False, True])
def test_bit_identical_to_torch(dtype, log2_g, on_scale):
    v = _values(dtype)
    gen = torch.Generator().manual_seed(log2_g + 200)
    noise = torch.randint(-2**40, 2**40, (v.numel(),), generator=gen)
    noise[:5] = torch.tensor([2**62, -(2**62), 2**63 - 1, -(2**63), 0])  # sums that wrap
    g = 2.0 ** log2_g
    a, b = v.clone(), v.clone()
    G.add_noise_on_grid_(a, noise, g, on_scale=on_scale, native=True)
    G.add_noise_on_grid_(b, noise, g, on_scale=on_scale, native=False)
    assert torch.equal(a.view(torch.int32 if dtype == torch.float32 else torch.int64),
                       b.view(torch.int32 if dtype == torch.float32 else torch.int64))


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nan_matches_torch(dtype):
    v = torch.tensor([float("nan"), 1.0], dtype=dtype)
    noise = torch.tensor([3, 4])
    a, b = v.clone(), v.clone()
    G.add_noise_on_grid_(a, noise, 2.0 ** -10, native=True)
    G.add_noise_on_grid_(b, noise, 2.0 ** -10, native=False)
    assert torch.equal(a, b)


@needs_native
def test_out_of_range_granularity_and_layouts_fall_back():
    v = torch.randn(40, 6, dtype=torch.float64)
    noise = torch.randint(-100, 100, (240,))
    for g in (2.0 ** -101, 2.0 ** 101):  # outside the in-dtype scaling range: the torch path
        a, b = v.clone(), v.clone()
        G.add_noise_on_grid_(a, noise, g, native=True)
        G.add_noise_on_grid_(b, noise, g, native=False)
        assert torch.equal(a, b)
    t = v.t()  # not contiguous: the torch path, same values
    a, b = t.clone(), t.clone().contiguous()
    G.add_noise_on_grid_(a, noise, 2.0 ** -8, native=True)
    G.add_noise_on_grid_(b, noise, 2.0 ** -8, native=False)
    assert torch.equal(a, b)


def test_values_are_on_the_grid():
    v = torch.randn(1000, dtype=torch.float64)
    noise = torch.randint(-2**30, 2**30, (1000,))
    g = 2.0 ** -20
    out = G.add_noise_on_grid_(v.clone(), noise, g)
    assert torch.equal(torch.remainder(out, g), torch.zeros(1000, dtype=torch.float64))
    assert torch.equal((out / g).to(torch.int64), torch.round(v / g).to(torch.int64) + noise)
