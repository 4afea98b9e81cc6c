"""Grid-valued (floating-point-safe) releases of the output-perturbation mechanisms, the grid
helpers, and the random sources (seeded, default, secure)."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_private.accounting import PrivacyAccountant
from pyg_private.accounting.errors import UntrackedPrivacyWarning
from pyg_private.mechanisms import GaussianMechanism, LaplaceMechanism
from pyg_private.mechanisms.grid import (
    check_granularity,
    choose_granularity,
    from_grid,
    round_to_grid,
    validate_granularity,
)
from pyg_private.mechanisms.randomness import (
    RandomSource,
    get_secure_mode,
    resolve_secure_mode,
    secure_mode,
    set_secure_mode,
)


pytestmark = pytest.mark.filterwarnings("ignore", category=UntrackedPrivacyWarning)


# -- grid helpers ------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0.0, -0.5, 0.3, 3.0, float("nan"), float("inf"), 1e-400])
def test_granularity_must_be_a_power_of_two(bad):
    with pytest.raises(ValueError, match="power of two"):
        check_granularity(bad)


@pytest.mark.parametrize("bad", [True, "2**-10", None])
def test_granularity_type(bad):
    with pytest.raises(TypeError):
        check_granularity(bad)


def test_choose_granularity_bounds_the_inflation():
    for norm, dim in [("l1", 1), ("l1", 1000), ("l2", 10 ** 6), ("l2", 7)]:
        for sens, scale in [(1.0, 1.0), (0.3, 20.0), (2.0, 0.05)]:
            g = choose_granularity(scale=scale, sensitivity=sens, dim=dim, norm=norm)
            assert check_granularity(g) == g
            inflation = dim * g if norm == "l1" else math.sqrt(dim) * g
            assert inflation <= 2.0 ** -16 * sens
            assert 2.0 ** 20 <= scale / g <= 2.0 ** 46
            # the coarsest such power of two: doubling breaks one of the two conditions
            assert 2 * inflation > 2.0 ** -16 * sens or scale / (2 * g) < 2.0 ** 20


def test_validate_granularity_refuses_too_coarse_grids():
    with pytest.raises(ValueError, match="too coarse"):
        validate_granularity(0.5, scale=1e6, sensitivity=1.0, dim=4, norm="l1")  # 4 * 0.5 > 1
    with pytest.raises(ValueError, match="2\\^20"):
        validate_granularity(2.0 ** -4, scale=1.0, sensitivity=1.0, dim=1, norm="l2")  # 16 steps only
    assert validate_granularity(2.0 ** -30, scale=1.0, sensitivity=1.0, dim=100, norm="l2") == 2.0 ** -30


def test_round_trip_and_clamp():
    g = 2.0 ** -10
    v = torch.tensor([0.1, -3.3, 1e30, -1e30, 0.0], dtype=torch.float64)
    steps = round_to_grid(v, g)
    assert steps.dtype == torch.int64
    assert int(steps[2]) == 2 ** 61 and int(steps[3]) == -(2 ** 61)
    back = from_grid(steps, g)
    assert torch.equal(torch.remainder(back, g), torch.zeros_like(back))
    assert abs(float(back[0]) - 0.1) <= g / 2


# -- the mechanisms ------------------------------------------------------------------------------
def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_releases_are_exact_multiples_of_the_granularity(dtype):
    q = torch.linspace(-7.3, 11.1, 500, dtype=dtype).reshape(20, 25)
    for mech in (LaplaceMechanism(1.0, epsilon=1.0, generator=_gen()),
                 GaussianMechanism(1.0, epsilon=1.0, delta=1e-5, generator=_gen())):
        out = mech(q)
        g = mech.granularity
        assert check_granularity(g) == g
        assert out.dtype == dtype and out.shape == q.shape
        assert torch.equal(torch.remainder(out.double(), g), torch.zeros_like(out.double()))
        assert not torch.equal(out, q)


def test_noise_has_the_calibrated_scale():
    q = torch.zeros(200_000, dtype=torch.float64)
    lap = LaplaceMechanism(2.0, epsilon=0.5, generator=_gen(1))
    x = lap(q)
    assert float(x.std()) == pytest.approx(math.sqrt(2) * lap.scale, rel=0.02)
    gau = GaussianMechanism(1.0, noise_std=3.0, generator=_gen(2))
    assert float(gau(q).std()) == pytest.approx(3.0, rel=0.02)


def test_event_charges_the_rounded_query():
    acct = PrivacyAccountant()
    mech = GaussianMechanism(1.0, epsilon=1.0, delta=1e-5, accountant=acct, generator=_gen())
    mech(torch.zeros(10_000))
    (ev,) = acct.events
    g = mech.granularity
    assert ev.params["granularity"] == g and ev.params["dim"] == 10_000
    assert ev.params["sensitivity"] == pytest.approx(1.0 + 100 * g)  # sqrt(10^4) g
    assert ev.params["sensitivity"] <= 1.0 + 2.0 ** -16
    assert acct.epsilon("edge", 1e-5) == pytest.approx(1.0, rel=1e-6)  # recalibrated: the target holds


def test_float_sampler_stays_reachable_and_has_no_grid():
    acct = PrivacyAccountant()
    mech = LaplaceMechanism(1.0, scale=1.0, accountant=acct, sampler="float", generator=_gen())
    out = mech(torch.full((1000,), 0.1, dtype=torch.float64))
    assert mech.granularity is None
    assert acct.events[0].params["sampler"] == "float"
    assert acct.pure_epsilon("edge") == pytest.approx(1.0)
    assert bool((torch.remainder(out, 2.0 ** -20) != 0).any())  # off any coarse grid
    with pytest.raises(ValueError, match="sampler"):
        LaplaceMechanism(1.0, scale=1.0, sampler="exact")
    with pytest.raises(ValueError, match="granularity"):
        LaplaceMechanism(1.0, scale=1.0, sampler="float", granularity=2.0 ** -20)


def test_bad_granularity_raises_before_any_charge():
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="power of two"):
        LaplaceMechanism(1.0, epsilon=1.0, granularity=0.1)
    mech = LaplaceMechanism(1.0, epsilon=1.0, accountant=acct, granularity=0.25, generator=_gen())
    with pytest.raises(ValueError, match="too coarse"):
        mech(torch.zeros(8))  # 8 * 0.25 = 2 > sensitivity 1
    assert len(acct) == 0
    mech2 = GaussianMechanism(1.0, noise_std=1.0, accountant=acct, granularity=2.0 ** -2, generator=_gen())
    with pytest.raises(ValueError, match="2\\^20"):
        mech2(torch.zeros(1))  # only 4 grid steps per standard deviation
    assert len(acct) == 0


def test_explicit_granularity_is_used_and_charged():
    acct = PrivacyAccountant()
    mech = LaplaceMechanism(1.0, scale=1.0, accountant=acct, granularity=2.0 ** -24, generator=_gen())
    out = mech(torch.zeros(16))
    assert mech.granularity == 2.0 ** -24
    assert acct.events[0].params["sensitivity"] == pytest.approx(1.0 + 16 * 2.0 ** -24)
    assert torch.equal(torch.remainder(out, 2.0 ** -24), torch.zeros_like(out))


# -- randomness -----------------------------------------------------------------------------------
def test_sources_give_uniform_63_bit_words():
    for src in (RandomSource(), RandomSource(secure=True), RandomSource(generator=_gen())):
        w = src.words(200_000)
        assert w.dtype == torch.int64 and bool((w >= 0).all())
        for bit in (0, 31, 62):
            assert abs(float(((w >> bit) & 1).double().mean()) - 0.5) < 0.01


def test_secure_mode_switches_and_refuses_seeded_generators():
    assert get_secure_mode() is False
    with secure_mode():
        assert get_secure_mode() is True
        assert resolve_secure_mode(None, None) is True
        with pytest.raises(ValueError, match="generator"):
            resolve_secure_mode(None, _gen())
        assert resolve_secure_mode(False, _gen()) is False
        out = LaplaceMechanism(1.0, epsilon=1.0)(torch.zeros(5))
        assert out.shape == (5,)
    assert get_secure_mode() is False
    with pytest.raises(ValueError, match="generator"):
        GaussianMechanism(1.0, noise_std=1.0, secure_mode=True, generator=_gen())
    with pytest.raises(TypeError):
        set_secure_mode(1)
    acct = PrivacyAccountant()
    mech = GaussianMechanism(1.0, noise_std=1.0, secure_mode=True, accountant=acct)
    a, b = mech(torch.zeros(100)), mech(torch.zeros(100))
    assert not torch.equal(a, b) and len(acct) == 2


def test_default_source_ignores_torch_manual_seed():
    torch.manual_seed(0)
    a = LaplaceMechanism(1.0, epsilon=1.0)(torch.zeros(50))
    torch.manual_seed(0)
    b = LaplaceMechanism(1.0, epsilon=1.0)(torch.zeros(50))
    assert not torch.equal(a, b)  # the default stream is seeded from the OS, not from torch
    c = LaplaceMechanism(1.0, epsilon=1.0, generator=_gen(5))(torch.zeros(50))
    d = LaplaceMechanism(1.0, epsilon=1.0, generator=_gen(5))(torch.zeros(50))
    assert torch.equal(c, d)  # a seeded generator reproduces (and voids the guarantee)


# -- the floating-point distinguisher ---------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda **kw: LaplaceMechanism(1.0, epsilon=1.0, **kw),
    lambda **kw: GaussianMechanism(1.0, epsilon=1.0, delta=1e-5, **kw),
])
def test_distinguisher_catches_the_float_sampler_and_not_the_safe_one(make):
    """Inputs 0.1 and 1.1 (sensitivity 1): the float sampler's releases identify the input with
    certainty in a large fraction of cases; the grid release in none of 2 x 10^5."""
    from pyg_private.audit import additive_noise_audit

    a, b = torch.tensor(0.1, dtype=torch.float64), torch.tensor(1.1, dtype=torch.float64)
    leaky = additive_noise_audit(a, b, make(sampler="float", generator=_gen(0)), num_releases=20_000)
    assert leaky.identified > 1000 and leaky.rate > 0.05
    g = 2.0 ** -30
    safe = additive_noise_audit(a, b, make(granularity=g, generator=_gen(1)), num_releases=100_000, granularity=g)
    assert safe.identified == 0 and safe.upper < 3.1e-5


def test_parallel_tasks_are_reproducible_whatever_the_thread_count():
    from pyg_private.mechanisms.exact_integer_noise import RoundedNoiseSampler

    sampler = RoundedNoiseSampler("gaussian", 2.0 ** 25)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        a = sampler.sample(1_200_000, RandomSource(generator=_gen(3)))  # three tasks
        torch.set_num_threads(1)
        b = sampler.sample(1_200_000, RandomSource(generator=_gen(3)))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(a, b)
    assert not torch.equal(a[:500_000], a[600_000:1_100_000])  # tasks have their own streams
