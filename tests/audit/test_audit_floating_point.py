"""The floating-point distinguisher audit (issue 14; Mironov 2012, Jin et al. 2022): the
possibility predicates against brute force, and the audit on float samplers (caught) and
grid samplers (nothing to catch)."""
import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from pyg_private.accounting import gdp_mu
from pyg_private.audit import (
    FloatingPointAuditResult,
    additive_float_possible,
    additive_noise_audit,
    clopper_pearson,
    floating_point_audit,
    grid_possible,
    uniform_affine_possible,
)
from pyg_private.mechanisms._noise import gaussian_noise, laplace_noise

f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
INF, NAN = math.inf, math.nan
_NP = {f16: np.float16, f32: np.float32, f64: np.float64}
_UINT = {f16: np.uint16, bf16: np.uint16, f32: np.uint32, f64: np.uint64}


# --------------------------------------------------------------------------- brute-force oracles

def all_values(dtype) -> torch.Tensor:
    """Every value of a 16-bit float dtype (NaNs included), from its bit patterns."""
    return torch.from_numpy(np.arange(2 ** 16, dtype=np.uint16).view(np.int16)).view(dtype)


def _keys(x: np.ndarray) -> np.ndarray:
    """Ordered int64 keys of float32 / float64 values (no NaN), written independently of the module."""
    bits = x.view(np.int64 if x.dtype == np.float64 else np.int32).astype(np.int64)
    sign = bits < 0
    mag = bits & (np.iinfo(np.int64 if x.dtype == np.float64 else np.int32).max)
    return np.where(sign, -mag - 1, bits)


def _unkeys(k: np.ndarray, np_dtype) -> np.ndarray:
    itype = np.int64 if np_dtype == np.float64 else np.int32
    mag = np.where(k < 0, -(k + 1), k)
    bits = np.where(k < 0, mag + np.iinfo(itype).min, mag)
    return bits.astype(itype).view(np_dtype)


def oracle_additive(y: torch.Tensor, a: float, compute_dtype) -> np.ndarray:
    """Exists finite z of ``compute_dtype`` with ``(fl(a + z)).to(y.dtype) == y``, by bisection over all
    finite z for the first z whose output reaches y (numpy arithmetic, torch's conversion)."""
    npc = _NP[compute_dtype]
    a = npc(a)
    yt = y.reshape(-1)

    def out(z):
        with np.errstate(over="ignore", invalid="ignore"):
            s = (a + z).astype(npc)
        return torch.from_numpy(np.ascontiguousarray(s)).to(y.dtype)

    big = np.finfo(npc).max
    lo_k = np.full(yt.shape, _keys(np.array([-big], dtype=npc))[0])
    hi_k = np.full(yt.shape, _keys(np.array([big], dtype=npc))[0])
    first = out(_unkeys(lo_k, npc))
    last = out(_unkeys(hi_k, npc))
    # invariant: out(lo) < y <= out(hi); bisect while the gap exceeds one float
    for _ in range(70):
        active = lo_k < hi_k - 1  # hi_k - lo_k itself can overflow int64 here
        if not active.any():
            break
        mid = (lo_k >> 1) + (hi_k >> 1) + (lo_k & hi_k & 1)  # floor of the mean, without overflow
        reach = (out(_unkeys(mid, npc)) >= yt).numpy()
        hi_k = np.where(active & reach, mid, hi_k)
        lo_k = np.where(active & ~reach, mid, lo_k)
    assert not (lo_k < hi_k - 1).any()
    at = out(_unkeys(hi_k, npc))
    possible = torch.where(first >= yt, first == yt, (last >= yt) & (at == yt))
    return possible.numpy().reshape(y.shape)


def candidates(a: float, dtype, compute_dtype, n: int, seed: int) -> torch.Tensor:
    """Outputs fl(a + z) for z of many magnitudes (possible), their neighbours (often not), and
    special values."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.randint(-60, 20, (n,), generator=g).to(f64)) * (torch.rand(n, generator=g, dtype=f64) + 1)
    z = (mag * torch.sign(torch.rand(n, generator=g, dtype=f64) - 0.5)).to(compute_dtype)
    y = (torch.tensor(a, dtype=compute_dtype) + z).to(dtype)
    inf = torch.full_like(y, INF)
    ys = [y, torch.nextafter(y, inf), torch.nextafter(y, -inf), torch.nextafter(torch.nextafter(y, inf), inf)]
    fi = torch.finfo(dtype)
    special = torch.tensor([0.0, -0.0, fi.tiny, -fi.tiny, fi.tiny * fi.eps, fi.max, -fi.max, INF, -INF, NAN,
                            a, 1e-30, -1e-30, 2.0 ** -30, 0.5, -0.5, 1.0, 2.0], dtype=f64).to(dtype)
    return torch.cat(ys + [special])


# --------------------------------------------------------------------------- additive_float_possible

@pytest.mark.parametrize("dtype", [f16, bf16])
@pytest.mark.parametrize("a", [0.0, 0.1, 1.0, -3.5, 1000.0, 2.0 ** -24, -(2.0 ** -14), 0.333, 60000.0, INF, -INF])
def test_additive_exhaustive_16bit(dtype, a):
    """Every 16-bit y against the image of fl(a + z) over every finite 16-bit z (the sum is exact in
    float64 and rounded once, by numpy for float16; torch's own 16-bit addition rounds through
    float32, which is innocuous for a sum: 24 >= 2 * 11 + 1)."""
    values = all_values(dtype)
    a_t = torch.tensor(a, dtype=f64).to(dtype)
    z = values[torch.isfinite(values)]
    if dtype == f16:
        with np.errstate(over="ignore"):
            image = (a_t.double().numpy() + z.double().numpy()).astype(np.float16).astype(np.float64)
    else:  # bfloat16: float32 addition then rounding (innocuous, 24 >= 2 * 8 + 1)
        image = (a_t.float() + z.float()).to(bf16).double().numpy()
    expected = np.isin(values.double().numpy(), image)  # by value: -0.0 matches 0.0, NaN matches nothing
    got = additive_float_possible(values, a_t).numpy()
    assert (got == expected).all(), values[torch.from_numpy(got != expected)][:10]
    assert 0 < expected.sum() < values.numel()


@pytest.mark.parametrize("dtype,compute", [(f16, f32), (bf16, f32), (f16, f64), (bf16, f64)])
@pytest.mark.parametrize("a", [0.0, 0.1, 1.0, -3.5, 1000.0, 1e-30, 3e38])
def test_additive_mixed_exhaustive_16bit(dtype, compute, a):
    """Every 16-bit y, the sum carried out in a wider dtype and converted by torch (float64 -> float16
    rounds twice, through float32): against the bisection oracle over all wide z."""
    values = all_values(dtype)
    a_c = float(torch.tensor(a, dtype=f64).to(compute))
    got = additive_float_possible(values, torch.tensor(a_c, dtype=compute), compute_dtype=compute).numpy()
    assert (got == oracle_additive(values, a_c, compute)).all()


@pytest.mark.parametrize("dtype,compute", [(f32, f32), (f64, f64), (f32, f64)])
@pytest.mark.parametrize("a", [0.0, 0.1, 1.0, -1.1, 12345.678, 1e-300, 2.0 ** -140, 1e30, -3e38])
def test_additive_against_bisection_oracle(dtype, compute, a):
    a_c = float(torch.tensor(a, dtype=f64).to(compute))
    y = candidates(a_c, dtype, compute, 400, seed=hash((str(dtype), str(compute), a)) % 2 ** 31)
    got = additive_float_possible(y, torch.tensor(a_c, dtype=compute), compute_dtype=compute).numpy()
    expected = oracle_additive(y, a_c, compute)
    assert (got == expected).all(), y[torch.from_numpy(got != expected)][:10]
    assert expected.any() and not expected.all()


def test_additive_float32_window_enumeration():
    """float32, same dtype: enumerate every z within 3000 floats of fl(y - a); the window brackets y
    (monotonicity), so the enumeration is exhaustive."""
    g = torch.Generator().manual_seed(3)
    checked = 0
    for a in np.float32([0.1, 1.0, -7.25, 3e-5]):
        y = candidates(float(a), f32, f32, 30, seed=int(g.seed() % 2 ** 31))
        y = y[torch.isfinite(y)].numpy()
        z0 = (y - a).astype(np.float32)
        keys = _keys(z0)[:, None] + np.arange(-3000, 3001)[None, :]
        z = _unkeys(keys.reshape(-1), np.float32).reshape(keys.shape)
        with np.errstate(over="ignore", invalid="ignore"):
            out = (a + z).astype(np.float32)
        inside = (out[:, 0] < y) & (out[:, -1] > y)
        expected = (out == y[:, None]).any(axis=1)
        assert (inside | expected).all()
        got = additive_float_possible(torch.from_numpy(y), torch.tensor(a)).numpy()
        assert (got == expected).all()
        checked += len(y)
    assert checked > 100


def test_additive_hand_made_cases():
    # the smallest noise reaching 1 + 2^-52 from a = 1 is 2^52 floats away from fl(y - a): one step is enough
    assert additive_float_possible(torch.tensor(1 + 2.0 ** -52, dtype=f64), 1.0)
    # cancellation: fl(0.1 + z) near 0 is a multiple of ulp(0.1) / 2, never 1e-30; from a = 0 anything is
    assert not additive_float_possible(torch.tensor(1e-30, dtype=f64), 0.1)
    assert additive_float_possible(torch.tensor(1e-30, dtype=f64), 0.0)
    assert not additive_float_possible(torch.tensor(1e-30, dtype=f32), 0.1)
    assert additive_float_possible(torch.tensor(1e-30, dtype=f32), 0.0)
    # float32 vs float64: 2^-30 is a multiple of 2^-56 (float64 near 0.1) but not of 2^-27 (float32)
    y64, y32 = torch.tensor(2.0 ** -30, dtype=f64), torch.tensor(2.0 ** -30, dtype=f32)
    assert additive_float_possible(y64, 0.1)
    assert not additive_float_possible(y32, 0.1)
    assert additive_float_possible(y32, torch.tensor(0.1, dtype=f32).double(), compute_dtype=f64)
    # -0.248... on a 2^-40 grid: fl(0.1 + z) there is an odd multiple of 2^-55
    y = torch.tensor(float.fromhex("-0x1.fc20d69p-3"), dtype=f64)
    assert not additive_float_possible(y, 0.1)
    assert additive_float_possible(y, 0.0)


def test_additive_infinities_and_nan():
    big = torch.finfo(f64).max
    y = torch.tensor([INF, -INF, NAN, 1.0], dtype=f64)
    assert additive_float_possible(y, 1.0).tolist() == [False, False, False, True]
    # big/2 + big overflows; near 1 the sums big/2 + z step by ulp(big/2) = 2^970
    assert additive_float_possible(y, big / 2).tolist() == [True, False, False, False]
    assert additive_float_possible(y, -big).tolist() == [False, True, False, False]
    assert additive_float_possible(y, INF).tolist() == [True, False, False, False]
    assert additive_float_possible(y, -INF).tolist() == [False, True, False, False]
    y32 = torch.tensor([INF, NAN], dtype=f32)  # float32 overflow from a float64 sum
    assert additive_float_possible(y32, 1.0, compute_dtype=f64).tolist() == [True, False]
    with pytest.raises(ValueError, match="NaN"):
        additive_float_possible(y, NAN)


def test_additive_shapes_and_validation():
    y = torch.tensor([[0.5, 1e-30, 2.0]], dtype=f64).expand(4, 3)
    a = torch.tensor([0.0, 0.1, 0.1], dtype=f64)
    out = additive_float_possible(y, a)
    assert out.shape == (4, 3) and out.dtype == torch.bool
    assert out.tolist() == [[True, False, True]] * 4
    assert additive_float_possible(y[:, :1], a).shape == (4, 3)  # broadcast both ways
    assert additive_float_possible(torch.tensor(0.5, dtype=f64), a.reshape(3, 1)).shape == (3, 1)
    assert additive_float_possible(torch.empty(0, 3, dtype=f64), a).shape == (0, 3)
    assert additive_float_possible(torch.tensor([0.5], dtype=f64), torch.tensor(0.25, dtype=f32))  # exact widening
    assert additive_float_possible(torch.tensor([0.5], dtype=f64), 1)  # a Python int
    with pytest.raises(ValueError, match="exactly representable"):
        additive_float_possible(torch.tensor([0.5], dtype=f32), torch.tensor(0.1, dtype=f64))
    with pytest.raises(ValueError, match="wider"):
        additive_float_possible(torch.tensor([0.5], dtype=f64), 0.0, compute_dtype=f32)
    with pytest.raises(ValueError, match="wider"):
        additive_float_possible(torch.tensor([0.5], dtype=f16), 0.0, compute_dtype=bf16)
    with pytest.raises(TypeError):
        additive_float_possible(torch.tensor([1, 2]), 0.0)
    with pytest.raises(TypeError):
        additive_float_possible([0.5], 0.0)
    with pytest.raises(TypeError):
        additive_float_possible(torch.tensor([0.5]), "0")


# --------------------------------------------------------------------------- grid_possible

def test_grid_possible_against_fractions():
    g = torch.Generator().manual_seed(0)
    k = torch.randint(-10 ** 6, 10 ** 6, (300,), generator=g).to(f64)
    for step in (2.0 ** -10, 1.0, 2.0 ** 5, 2.0 ** -1070):
        y = torch.cat([k * step, k * step + torch.rand(300, generator=g, dtype=f64) * step,
                       torch.tensor([0.0, -0.0, 2.0 ** -1074, 1e300, INF, -INF, NAN], dtype=f64)])
        expected = [math.isfinite(v) and (Fraction(v) / Fraction(step)).denominator == 1 for v in y.tolist()]
        assert grid_possible(y, step).tolist() == expected
    y32 = torch.tensor([0.0, 1.0, 2.0 ** -149, 3e38, INF], dtype=f32)
    assert grid_possible(y32, 2.0 ** -149).tolist() == [True, True, True, True, False]
    assert grid_possible(y32, 2.0 ** -200).tolist() == [True, True, True, True, False]  # below the subnormals
    assert grid_possible(y32, 2.0 ** 200).tolist() == [True, False, False, False, False]  # above the range
    assert grid_possible(y32, 2.0 ** 127).tolist() == [True, False, False, False, False]
    assert grid_possible(torch.tensor([0.5, 0.75], dtype=f16), 0.5).tolist() == [True, False]


@pytest.mark.parametrize("bad", [0.3, 3.0, 0.0, -0.5, INF, NAN, 2.0 ** 0.5])
def test_grid_possible_rejects_bad_granularity(bad):
    with pytest.raises(ValueError, match="power of two"):
        grid_possible(torch.zeros(2, dtype=f64), bad)


def test_grid_possible_type_errors():
    with pytest.raises(TypeError):
        grid_possible(torch.zeros(2), True)
    with pytest.raises(TypeError):
        grid_possible(torch.zeros(2), "0.5")


# --------------------------------------------------------------------------- uniform_affine_possible

def test_torch_rand_lattice():
    """torch.rand on the CPU: float64 on 2^-53 Z, float32 on 2^-24 Z, both using the last bit."""
    g = torch.Generator().manual_seed(1)
    for dtype, bits in ((f64, 53), (f32, 24)):
        k = torch.rand(10 ** 5, generator=g, dtype=dtype).double() * 2.0 ** bits
        assert (k == k.round()).all()
        assert 0.45 < (torch.fmod(k, 2) == 1).double().mean() < 0.55


@pytest.mark.parametrize("dtype,bits", [(f16, 11), (f16, 6), (bf16, 8), (f32, 12), (f64, 10)])
@pytest.mark.parametrize("low,width", [(0.0, 1.0), (-1.3, 2.6), (0.7, -0.45), (5.0, 1e-3), (-2.0, 0.0), (0.1, 3.0)])
def test_uniform_affine_brute_force(dtype, bits, low, width):
    low_t, width_t = torch.tensor(low, dtype=f64).to(dtype), torch.tensor(width, dtype=f64).to(dtype)
    u = torch.arange(2 ** bits, dtype=f64).to(dtype) * 2.0 ** -bits
    image = (low_t + width_t * u).double().numpy()
    if dtype in (f16, bf16):
        y = all_values(dtype)
    else:
        base = torch.from_numpy(image).to(dtype)
        inf = torch.full_like(base, INF)
        y = torch.cat([base, torch.nextafter(base, inf), torch.nextafter(base, -inf),
                       torch.tensor([NAN, INF, 0.0, low], dtype=f64).to(dtype)])
    expected = np.isin(y.double().numpy(), image)
    got = uniform_affine_possible(y, low_t, width_t, bits=bits).numpy()
    assert (got == expected).all()
    assert expected.any()


def test_uniform_affine_full_lattice_and_samples():
    g = torch.Generator().manual_seed(2)
    for dtype in (f64, f32):
        u = torch.rand(2000, generator=g, dtype=dtype)
        low = torch.tensor([-1.3, 0.2, 7.0], dtype=f64).to(dtype)
        width = torch.tensor([2.6, 0.01, -3.0], dtype=f64).to(dtype)
        y = low + width * u[:, None]
        assert uniform_affine_possible(y, low, width).all()  # default bits: the dtype's digits
        off = torch.nextafter(y, torch.full_like(y, INF))
        assert not uniform_affine_possible(off, low, width).all()
    # (2^53 - 1) 2^-53 is the largest u: y = 1 is out of reach of fl(0 + 1 * u), 1 - 2^-53 is not
    assert uniform_affine_possible(torch.tensor([1.0, 1 - 2.0 ** -53, 0.0], dtype=f64), 0.0, 1.0).tolist() == [
        False, True, True]
    with pytest.raises(ValueError, match="bits"):
        uniform_affine_possible(torch.tensor([0.5]), 0.0, 1.0, bits=53)
    with pytest.raises(ValueError, match="bits"):
        uniform_affine_possible(torch.tensor([0.5], dtype=f64), 0.0, 1.0, bits=0)
    with pytest.raises(ValueError, match="finite"):
        uniform_affine_possible(torch.tensor([0.5], dtype=f64), 0.0, INF)


# --------------------------------------------------------------------------- the audit: positive controls

def _float_laplace(scale, generator):
    return lambda v: v + laplace_noise(v.shape, scale, device=v.device, generator=generator)


def test_audit_catches_float_laplace():
    """Laplace, sensitivity 1, epsilon 1, a = 0 vs b = 1 in float64 (issue 14 reports 27% at 1e6)."""
    g = torch.Generator().manual_seed(0)
    res = additive_noise_audit(torch.zeros(1, dtype=f64), torch.ones(1, dtype=f64), _float_laplace(1.0, g),
                               num_releases=30_000)
    assert isinstance(res, FloatingPointAuditResult)
    assert res.identified_a > 0 and res.rate > 0.01
    assert 0.24 < res.rate_a < 0.30  # about 27%
    assert res.identified_b == 0  # from a = 0 every float is a possible output (z = y)
    assert res.delta_lower > 0.2 and res.upper >= res.rate
    assert res.coordinate_rate == res.rate and res.coordinates == 1


def test_audit_catches_float_laplace_non_dyadic_and_eps_01():
    g = torch.Generator().manual_seed(1)
    res = additive_noise_audit(torch.tensor([0.1], dtype=f64), torch.tensor([1.1], dtype=f64),
                               _float_laplace(1.0, g), num_releases=30_000)
    assert res.identified_a > 0 and res.identified_b > 0 and res.rate > 0.01  # both sides give themselves away
    res = additive_noise_audit(torch.tensor([0.1], dtype=f64), torch.tensor([1.1], dtype=f64),
                               _float_laplace(10.0, g), num_releases=30_000)  # epsilon 0.1
    assert res.identified > 0 and res.rate > 0.01


def test_audit_catches_float_gaussian():
    std = 1.0 / gdp_mu(epsilon=1.0, delta=1e-5)
    g = torch.Generator().manual_seed(2)
    res = additive_noise_audit(torch.zeros(1, dtype=f64), torch.ones(1, dtype=f64),
                               lambda v: v + gaussian_noise(v.shape, std, device=v.device, generator=g),
                               num_releases=30_000)
    assert res.identified_a > 0 and res.rate > 0.01


def test_audit_vector_releases_and_float32():
    g = torch.Generator().manual_seed(3)
    a = torch.tensor([0.0, 0.1, 5.0], dtype=f32)
    b = torch.tensor([1.0, 1.1, 6.0], dtype=f32)
    release = lambda v: v + laplace_noise(v.shape, 1.0, device=v.device, generator=g).to(f32)  # noqa: E731
    res = additive_noise_audit(a, b, release, num_releases=5000, batch_size=1024)
    assert res.coordinates == 3 and res.num_releases == 5000
    # a release is caught when any coordinate is: more releases than coordinates
    assert res.rate > res.coordinate_rate > 0.05
    # float64 sums cast to float32 (the library's float sampler on float32 queries): the cast hides them
    release64 = lambda v: (v.double() + laplace_noise(v.shape, 1.0, device=v.device, generator=g)).to(f32)  # noqa
    res = additive_noise_audit(a, b, release64, num_releases=5000, compute_dtype=f64)
    assert res.identified == 0


# --------------------------------------------------------------------------- the audit: negative controls

def _grid_release(step, generator, spread=10 ** 6):
    def release(v):
        k = torch.randint(-spread, spread, v.shape, generator=generator, device=v.device)
        return step * (torch.round(v / step) + k.to(v.dtype))
    return release


def test_audit_grid_sampler_identifies_nothing():
    g = torch.Generator().manual_seed(4)
    step = 2.0 ** -20
    res = additive_noise_audit(torch.tensor([0.1], dtype=f64), torch.tensor([1.1], dtype=f64),
                               _grid_release(step, g), num_releases=100_000, granularity=step)
    assert res.identified == 0 and res.rate == 0.0 and res.delta_lower == 0.0
    assert res.upper < 3.1e-5
    assert res.upper == pytest.approx(1 - 0.05 ** (1 / 200_000), rel=1e-9)  # the rule of three, pooled


def test_check_own_rejects_a_wrong_model():
    g = torch.Generator().manual_seed(5)
    # float Laplace releases are off the grid
    with pytest.raises(RuntimeError, match="does not model the sampler"):
        additive_noise_audit(torch.zeros(1, dtype=f64), torch.ones(1, dtype=f64), _float_laplace(1.0, g),
                             num_releases=1000, granularity=2.0 ** -20)
    # grid releases are not fl(0.1 + z) for any z
    with pytest.raises(RuntimeError, match="does not model the sampler"):
        additive_noise_audit(torch.tensor([0.1], dtype=f64), torch.tensor([1.1], dtype=f64),
                             _grid_release(2.0 ** -40, g, spread=2 ** 41), num_releases=1000)


# --------------------------------------------------------------------------- floating_point_audit

def test_floating_point_audit_counts_exactly():
    """Scripted releases and predicates (2.0 is impossible under A, 1.0 under B): exact counts."""
    ya = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]], dtype=f64)
    yb = torch.tensor([[2.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=f64)

    def sampler(rows):
        queue = list(rows)
        return lambda n: torch.stack([queue.pop(0) for _ in range(n)])

    res = floating_point_audit(sampler(ya), sampler(yb), lambda y: y != 2.0, lambda y: y != 1.0,
                               num_releases=4, batch_size=3, progress=True)
    assert (res.identified_a, res.identified_b, res.identified) == (2, 1, 3)
    assert res.coordinate_rate == 4 / 16 and res.rate == 3 / 8 and res.coordinates == 2
    assert (res.rate_a, res.rate_b) == (0.5, 0.25)
    assert res.upper == pytest.approx(clopper_pearson(3, 8, 0.95, "upper"))
    assert res.delta_lower == pytest.approx(clopper_pearson(2, 4, 0.975, "lower"))
    assert "3 of 8 releases" in str(res) and "37.500%" in str(res)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.rate = 0.0
    # a release impossible under its own input: the predicates do not model the sampler
    with pytest.raises(RuntimeError, match="input B are impossible"):
        floating_point_audit(sampler(ya), sampler(yb), lambda y: y != 2.0, lambda y: y != 0.0, num_releases=4)


def test_floating_point_audit_validation():
    ok = lambda y: torch.ones_like(y, dtype=torch.bool)  # noqa: E731
    s = lambda n: torch.zeros(n, 2)  # noqa: E731
    with pytest.raises(ValueError, match="first dimension"):
        floating_point_audit(lambda n: torch.zeros(n + 1), s, ok, ok, num_releases=3)
    with pytest.raises(ValueError, match="bool tensor"):
        floating_point_audit(s, s, ok, lambda y: torch.ones(y.shape), num_releases=3)
    with pytest.raises(ValueError, match="empty"):
        floating_point_audit(lambda n: torch.zeros(n, 0), s, ok, ok, num_releases=3)
    shapes = iter([(2, 2), (1, 3)])
    with pytest.raises(ValueError, match="first batch"):
        floating_point_audit(lambda n: torch.zeros(next(shapes)), s, ok, ok, num_releases=3, batch_size=2)
    with pytest.raises(ValueError):
        floating_point_audit(s, s, ok, ok, num_releases=0)
    with pytest.raises(TypeError):
        floating_point_audit(s, s, ok, ok, num_releases=2.5)
    with pytest.raises(ValueError):
        floating_point_audit(s, s, ok, ok, num_releases=3, confidence=1.0)
    res = floating_point_audit(s, s, ok, ok, num_releases=3)
    assert res.identified == 0 and res.upper == pytest.approx(1 - 0.05 ** (1 / 6))
    with pytest.raises(ValueError, match="one shape"):
        additive_noise_audit(torch.zeros(2), torch.zeros(3), lambda v: v, num_releases=2)
    with pytest.raises(ValueError, match="power of two"):
        additive_noise_audit(torch.zeros(2), torch.zeros(2), lambda v: v, num_releases=2, granularity=0.3)
