"""GCON's floating-point-safe fit: the budget split, the coupled noise, the certified gradient and the
grid release of PerturbedAPPRConv (sampler="safe", the default)."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

import pyg_private.nn.perturbed_appr_conv as gcon_module
from pyg_private import PrivacyAccountant
from pyg_private.accounting.approximate_minimizer import chained_guarantee, chained_profile, split_budget
from pyg_private.accounting.gdp import gdp_delta
from pyg_private.mechanisms.coupled_objective_noise import (
    SCALE,
    plan_coupled_objective_noise,
    sample_coupled_objective_noise,
)
from pyg_private.mechanisms.randomness import RandomSource
from pyg_private.nn import PerturbedAPPRConv
from pyg_private.utils.newton_solver import gradient_norm_bound, solve_separable_ridge
from pyg_private.utils.separable_loss import SeparableLoss
from test_perturbed_appr_conv import _graph  # the same small graph


@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-6), (1.0, 1e-5), (8.0, 1e-3)])
def test_the_split_chains_back_to_at_most_the_target(epsilon, delta):
    b = split_budget(epsilon, delta)
    eps, dlt = chained_guarantee(b.epsilon_exact, b.delta_exact, b.epsilon_close, b.delta_close)
    assert eps <= epsilon and dlt <= delta
    assert eps > epsilon * (1 - 1e-12) and dlt > delta * (1 - 1e-6)  # tight: nothing wasted
    assert b.epsilon_close == epsilon / 128 and b.delta_coupling == b.delta_close / 1024
    # the chain itself: eps_o + 2 eps_c and delta_c + e^eps_c delta_o + e^(eps_o + eps_c) delta_c
    e2, d2 = chained_guarantee(1.0, 1e-6, 0.01, 1e-7)
    assert e2 == pytest.approx(1.02) and d2 == pytest.approx(1e-7 + math.exp(0.01) * 1e-6 + math.exp(1.01) * 1e-7)


def test_the_chained_profile_is_a_valid_envelope_and_reaches_small_deltas():
    op = ((1e-12, 1e-9, 1e-6, 1e-3), (3.0, 2.0, 1.4, 1.0))
    mu = 0.002
    deltas, epsilons = chained_profile(op, mu_gaussian=mu, epsilon_close=1 / 128, delta_coupling=1e-20)
    assert all(b > a for a, b in zip(deltas, deltas[1:])) and all(b <= a for a, b in zip(epsilons, epsilons[1:]))
    assert deltas[0] < 1e-10  # the Gaussian closeness has a whole profile, not one delta
    for d, e in zip(deltas, epsilons):  # every point is attained by some (op point, closeness multiple)
        ok = any(chained_guarantee(eo, do, k / 128, gdp_delta(mu=mu, epsilon=k / 128) + 1e-20) == (e, d)
                 for do, eo in zip(*op) for k in (1, 2, 4, 8, 16, 32, 64))
        assert ok


def test_coupled_noise_follows_the_erlang_radius_and_uniform_direction():
    d, c, beta = 5, 4000, 0.5
    plan = plan_coupled_objective_noise(d, c, beta, 1e-9)
    # seed 1: over 200 seeds the p-values of the first check were uniform (2% below 0.01); seed 0
    # gave the smallest, 2e-4, after the sampler's word layout changed
    b = sample_coupled_objective_noise(plan, RandomSource(generator=torch.Generator().manual_seed(1)))
    assert b.shape == (d, c) and b.dtype == torch.float64
    radius = b.norm(dim=0).numpy()
    assert stats.kstest(radius, stats.gamma(d, scale=1 / beta).cdf).pvalue > 1e-3
    assert stats.kstest(radius * 1.05, stats.gamma(d, scale=1 / beta).cdf).pvalue < 1e-6  # the test has power
    direction = (b / b.norm(dim=0)).numpy()
    assert np.abs(direction.mean(axis=1)).max() < 4 / math.sqrt(c)  # E u = 0
    assert np.abs((direction ** 2).mean(axis=1) - 1 / d).max() < 0.02  # E u_i^2 = 1/d
    # public bounds: the radius quantile and the coupling error (tiny next to the noise)
    assert plan.radius_bound == pytest.approx(stats.gamma(d, scale=1 / beta).isf(1e-9 / (2 * c)), rel=1e-9)
    assert plan.error_bound < 1e-9 * plan.radius_bound


def test_coupled_noise_grid_values_are_the_rounded_variables():
    """With a scripted source the radius and direction come from integer steps of 2^-45: rebuild them."""
    plan = plan_coupled_objective_noise(3, 2, 1.0, 1e-9)
    src = RandomSource(generator=torch.Generator().manual_seed(5))
    b = sample_coupled_objective_noise(plan, src)
    src2 = RandomSource(generator=torch.Generator().manual_seed(5))
    from pyg_private.mechanisms.exact_integer_noise import RoundedNoiseSampler
    k = RoundedNoiseSampler("laplace", SCALE).sample(6, src2).abs().view(3, 2).double()
    v = RoundedNoiseSampler("gaussian", SCALE).sample(6, src2).view(3, 2).double()
    expected = v * ((k.sum(0) / SCALE) / v.norm(dim=0))  # the implementation's order of operations
    assert torch.equal(b, expected)


def test_gradient_bound_covers_an_extended_precision_gradient():
    """At a float64 minimiser the computed gradient is rounding noise: the exact one (80-bit numpy
    longdouble, the float64 inputs taken as exact) is often larger; the bound covers every case."""
    n, d, c = 300, 8, 3
    plain_fails = 0
    for seed in range(24):
        g = torch.Generator().manual_seed(seed)
        z = torch.randn(n, d, generator=g, dtype=torch.float64)
        z = z / z.norm(dim=1, keepdim=True)
        y = torch.nn.functional.one_hot(torch.randint(c, (n,), generator=g), c).double()
        lin = torch.randn(d, c, generator=g, dtype=torch.float64) * 50
        name, hd = ("soft_margin", None) if seed % 2 else ("pseudo_huber", 0.3)
        loss = SeparableLoss(name, c, hd)
        second = 1 / (4 * c) if name == "soft_margin" else 1 / c
        theta = solve_separable_ridge(z, y, loss, regularization=0.7, linear_term=lin, tol=1e-15, max_iter=30).theta
        bound = gradient_norm_bound(z, y, theta, loss, regularization=0.7, linear_term=lin, second_bound=second)
        computed = float((z.T @ loss.first(z @ theta, y) / n + 0.7 * theta + lin / n).norm())
        zl, yl, tl, ll = (t.numpy().astype(np.longdouble) for t in (z, y, theta, lin))
        m = zl @ tl
        if name == "soft_margin":
            first = (1 / (1 + np.exp(-m)) - yl) / c
        else:
            first = (m - yl) / (c * np.sqrt(1 + ((m - yl) / hd) ** 2))
        exact = float(np.sqrt(((zl.T @ first / n + 0.7 * tl + ll / n) ** 2).sum()))
        assert exact <= bound < exact + 1e-11  # covered, and not vacuous
        plain_fails += exact > computed
    assert plain_fails >= 3  # the float64 norm alone would not be a bound


def test_safe_fit_releases_a_grid_valued_head_near_the_float_minimiser():
    x, ei, y = _graph()
    acct = PrivacyAccountant(budget={"edge": (2.5, 2.5e-3)})
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=1.0, delta=1e-3, accountant=acct)
    assert layer.sampler == "safe" and layer.granularity is None
    fit = layer.fit(x, ei, y, generator=torch.Generator().manual_seed(1))
    (event,) = acct.events
    eps, delta = event.approx
    assert 0.999 < eps <= 1.0 and delta <= 1e-3 and event.mechanism == "objective_perturbation_safe"
    assert event.profile is not None and 0 < acct.epsilon("edge", 1e-7) < 3  # composes at smaller deltas too
    g = layer.granularity
    assert g is not None and math.frexp(g)[0] == 0.5  # a power of two
    steps = layer.weight / g
    assert torch.equal(steps, steps.round())  # every released value is a multiple of the grid
    assert set(layer.state_dict()) == {"weight"} and fit.converged
    # the head solves the objective perturbed by the coupled noise drawn from the same seeded source
    cal = fit.calibration
    plan = layer._safe_plan(x, ei, layer.propagation(x, ei), cal, 40)
    noise = sample_coupled_objective_noise(plan.noise, RandomSource(generator=torch.Generator().manual_seed(1)))
    targets = torch.nn.functional.one_hot(y, 3).double()
    ref = solve_separable_ridge(layer.propagation(x, ei), targets, layer.loss,
                                regularization=cal.Lambda + cal.Lambda_prime, linear_term=noise, tol=1e-12).theta
    assert (layer.weight - ref).norm() < 20 * plan.release_std * math.sqrt(18) + plan.radius
    assert (layer.weight - ref).norm() > 0  # the closeness noise is there


def test_safe_fit_is_seed_reproducible_and_fresh_without_a_seed():
    x, ei, y = _graph()
    kw = dict(alpha=0.4, steps=2, epsilon=4.0, delta=1e-3, accountant=PrivacyAccountant())
    a, b, c = (PerturbedAPPRConv(6, 3, **kw) for _ in range(3))
    a.fit(x, ei, y, generator=torch.Generator().manual_seed(7))
    b.fit(x, ei, y, generator=torch.Generator().manual_seed(7))
    c.fit(x, ei, y)
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)


def test_an_uncertified_solve_raises_after_the_charge_and_releases_nothing(monkeypatch):
    x, ei, y = _graph()
    acct = PrivacyAccountant()
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=1.0, delta=1e-3, accountant=acct)
    monkeypatch.setattr(gcon_module, "gradient_norm_bound", lambda *a, **k: 1.0)
    with pytest.raises(RuntimeError, match="could not certify"):
        layer.fit(x, ei, y)
    assert len(acct) == 1 and layer.weight is None and layer.granularity is None


def test_secure_mode_and_bad_options():
    x, ei, y = _graph()
    acct = PrivacyAccountant()
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=(0, math.inf), epsilon=1.0, delta=1e-3, accountant=acct,
                              secure_mode=True)
    layer.fit(x, ei, y)
    assert len(acct) == 1 and layer.granularity is not None
    with pytest.raises(ValueError, match="seeded"):
        layer.fit(x, ei, y, generator=torch.Generator().manual_seed(0))
    assert len(acct) == 1  # refused before the charge
    with pytest.raises(ValueError, match="granularity"):
        PerturbedAPPRConv(6, 3, alpha=0.4, epsilon=1.0, delta=1e-3, sampler="float", granularity=2.0 ** -40)
    with pytest.raises(ValueError, match="sampler"):
        PerturbedAPPRConv(6, 3, alpha=0.4, epsilon=1.0, delta=1e-3, sampler="exact")


def test_head_follows_the_input_dtype_survives_float_and_checks_loaded_shapes():
    x, ei, y = _graph()
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=2.0, delta=1e-3, accountant=PrivacyAccountant())
    layer.fit(x, ei, y)
    assert layer(x, ei).dtype == torch.float64
    assert layer(x.float(), ei).dtype == torch.float32
    layer.float()  # casts the released head: forward still works
    assert layer.weight.dtype == torch.float32 and layer(x.float(), ei).shape == (40, 3)
    fresh = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=2.0, delta=1e-3)
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(fresh.weight, layer.weight.double())
    wrong = PerturbedAPPRConv(6, 4, alpha=0.4, steps=2, epsilon=2.0, delta=1e-3)
    with pytest.raises(RuntimeError, match="size mismatch"):
        wrong.load_state_dict(layer.state_dict())


def test_module_protocols_share_the_ledger_and_refuse_torchscript():
    import copy
    import pickle

    x, ei, y = _graph()
    acct = PrivacyAccountant()
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=2.0, delta=1e-3, accountant=acct)
    layer.fit(x, ei, y)
    best = copy.deepcopy(layer)
    assert best.accountant is acct and torch.equal(best.weight, layer.weight)
    best.fit(x, ei, y)  # charged to the same ledger
    assert len(acct) == 2
    restored = pickle.loads(pickle.dumps(layer))
    assert torch.equal(restored(x, ei), layer(x, ei))
    assert "unit='edge'" in repr(layer) and "sampler='safe'" in repr(layer)
    with pytest.raises(RuntimeError, match="TorchScript"):
        torch.jit.script(layer)


def test_split_budget_large_epsilon_is_a_clear_error_and_no_overflow():
    """eps 600: e^(eps_o + eps_c) would overflow a float; the split is computed without it and
    stays within the target. eps 1000: the closeness share of delta underflows, a ValueError
    naming `epsilon` (it was a bare OverflowError)."""
    b = split_budget(600.0, 1e-5)
    e, d = chained_guarantee(b.epsilon_exact, b.delta_exact, b.epsilon_close, b.delta_gaussian + b.delta_coupling)
    assert e <= 600.0 and d <= 1e-5 and b.delta_exact > 0.9 * 1e-5 * math.exp(-b.epsilon_close) * 0.99
    with pytest.raises(ValueError, match="epsilon"):
        split_budget(1000.0, 1e-5)
