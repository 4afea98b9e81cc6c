"""One-run auditing (Steinke, Nasr and Jagielski 2023): the p-value, the epsilon lower
bound, the guessing rule and validation."""
import math

import numpy as np
import pytest
import torch
from scipy.special import expit
from scipy.stats import binom

from pyg_private.audit import (
    OneRunAudit,
    clopper_pearson,
    one_run_audit,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)


def _q(eps: float) -> float:
    """e^eps / (1 + e^eps), computed as the module does (scipy's expit: exact to the ulp)."""
    assert expit(eps) == pytest.approx(math.exp(eps) / (1.0 + math.exp(eps)), rel=1e-15)
    return float(expit(eps))


def _delta_term_loop(r: int, v: int, q: float) -> float:
    """max_{i=1..v} P[v - i <= Binom(r, q) < v] / i by summing the pmf in plain Python."""
    best = 0.0
    for i in range(1, v + 1):
        mass = sum(math.comb(r, k) * q ** k * (1 - q) ** (r - k) for k in range(v - i, v))
        best = max(best, mass / i)
    return best


# --------------------------------------------------------------------------- p-value

@pytest.mark.parametrize("m,r,v,eps", [(100, 50, 40, 1.0), (1000, 1000, 700, 0.5), (10, 10, 10, 2.0),
                                       (50, 20, 0, 1.0), (30, 7, 3, 0.0)])
def test_p_value_delta0_is_binomial_tail(m, r, v, eps):
    assert one_run_p_value(m, r, v, eps) == min(1.0, float(binom.sf(v - 1, r, _q(eps))))


def test_p_value_monotone_in_delta_and_epsilon():
    ps = [one_run_p_value(500, 200, 150, 1.0, d) for d in (0.0, 1e-6, 1e-4, 1e-3)]
    assert all(a < b for a, b in zip(ps, ps[1:]))
    # the p-value *increases* with epsilon: a larger claimed epsilon is harder to reject
    pe = [one_run_p_value(500, 200, 150, e) for e in (0.0, 0.5, 1.0, 1.5, 3.0)]
    assert all(a < b for a, b in zip(pe, pe[1:]))
    assert one_run_p_value(500, 200, 150, 50.0) == pytest.approx(1.0)


@pytest.mark.parametrize("r,v,eps", [(12, 9, 0.7), (20, 15, 1.3), (8, 8, 0.2), (15, 3, 1.0), (1, 1, 0.5)])
def test_p_value_delta_term_matches_brute_force(r, v, eps):
    m, delta = 40, 1e-3
    q = _q(eps)
    expected = float(binom.sf(v - 1, r, q)) + 2 * m * delta * _delta_term_loop(r, v, q)
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(min(1.0, expected), rel=1e-9, abs=1e-15)


# --------------------------------------------------------------------------- lower bound

def test_lower_bound_all_correct_matches_clopper_pearson_by_hand():
    # v = r = m = 1000 at 95%: the Clopper-Pearson lower bound on q is 0.05 ** (1/1000)
    # = 0.997009, and logit(0.997009) = log(333.3) = 5.809
    eps = one_run_epsilon_lower_bound(1000, 1000, 1000, confidence=0.95)
    p_lo = 0.05 ** (1 / 1000)
    assert clopper_pearson(1000, 1000, 0.95, "lower") == pytest.approx(p_lo, rel=1e-12)
    assert eps == pytest.approx(math.log(p_lo / (1 - p_lo)), abs=1e-8)
    assert 5.80 < eps < 5.82


@pytest.mark.parametrize("r,v", [(1000, 700), (200, 150), (50, 40), (10, 10)])
def test_lower_bound_delta0_is_logit_of_clopper_pearson(r, v):
    lo = clopper_pearson(v, r, 0.95, "lower")
    eps = one_run_epsilon_lower_bound(r, r, v, confidence=0.95)
    assert eps == pytest.approx(math.log(lo / (1 - lo)), abs=1e-8)


@pytest.mark.parametrize("delta", [0.0, 1e-5, 1e-3])
def test_lower_bound_lands_on_the_safe_side(delta):
    m, r, v = 2000, 1000, 720
    eps = one_run_epsilon_lower_bound(m, r, v, delta=delta, confidence=0.95)
    assert eps > 0
    assert one_run_p_value(m, r, v, eps, delta) <= 0.05
    assert one_run_p_value(m, r, v, eps * (1 + 1e-6) + 1e-9, delta) > 0.05 - 1e-9


def test_lower_bound_zero_at_chance_and_decreasing_in_delta():
    assert one_run_epsilon_lower_bound(1000, 1000, 500) == 0.0
    assert one_run_epsilon_lower_bound(1000, 0, 0) == 0.0
    assert one_run_epsilon_lower_bound(1000, 10, 0) == 0.0
    b = [one_run_epsilon_lower_bound(1000, 1000, 800, delta=d) for d in (0.0, 1e-6, 1e-4, 1e-3)]
    assert all(x >= y for x, y in zip(b, b[1:])) and b[0] > b[-1] > 0
    # huge delta: nothing can be claimed
    assert one_run_epsilon_lower_bound(1000, 1000, 800, delta=0.01) == 0.0
    # more confidence, smaller bound
    assert one_run_epsilon_lower_bound(1000, 1000, 800, confidence=0.99) < one_run_epsilon_lower_bound(
        1000, 1000, 800, confidence=0.9)


# --------------------------------------------------------------------------- the audit

def test_guessing_rule_and_tie_breaking():
    scores = torch.tensor([0.1, 0.2, 0.3, 0.4])
    included = torch.tensor([False, False, True, True])
    a = one_run_audit(scores, included, guesses=4)
    assert isinstance(a, OneRunAudit)
    assert (a.canaries, a.guesses, a.correct, a.auc) == (4, 4, 4, 1.0)
    # r = 3: top 1 guessed in (index 3), bottom 2 guessed out (0, 1)
    assert one_run_audit(scores, included, guesses=3).correct == 3
    # reversed labels: everything wrong
    assert one_run_audit(scores, ~included, guesses=4).correct == 0
    # all scores tied: stable order by index, so "in" = the last index, "out" = the first
    tied = torch.zeros(4)
    assert one_run_audit(tied, torch.tensor([False, True, False, True]), guesses=2).correct == 2
    assert one_run_audit(tied, torch.tensor([True, False, True, False]), guesses=2).correct == 0


def test_bonferroni_over_guesses():
    rng = np.random.default_rng(0)
    inc = rng.random(3000) < 0.5
    scores = inc * 1.0 + rng.normal(0, 1.0, inc.size)
    res = one_run_audit(scores, inc, guesses=[100, 300, 1000, 3000, 300])
    assert res.guesses_tried == (100, 300, 1000, 3000)
    per = 1 - 0.05 / 4
    order = np.argsort(scores, kind="stable")
    bounds = []
    for r in res.guesses_tried:
        v = int(inc[order[scores.size - r // 2:]].sum() + (~inc[order[: r - r // 2]]).sum())
        bounds.append(one_run_epsilon_lower_bound(inc.size, r, v, confidence=per))
    assert res.epsilon == pytest.approx(max(bounds)) and res.epsilon > 0
    assert res.guesses == res.guesses_tried[int(np.argmax(bounds))]
    assert res.confidence == 0.95
    single = one_run_audit(scores, inc, guesses=res.guesses)
    assert single.epsilon >= res.epsilon  # no split: a larger bound
    assert 0.6 < res.auc < 0.8


def test_ceiling_is_the_perfect_attacks_bound_and_delta_caps_it():
    rng = np.random.default_rng(1)
    inc = rng.permutation(np.arange(4000) < 2000)  # balanced, so that a perfect attack gets all r right
    noisy = one_run_audit(inc * 0.2 + rng.normal(0, 1.0, inc.size), inc, guesses=4000, delta=1 / 5278)
    perfect = one_run_audit(inc * 1.0, inc, guesses=4000, delta=1 / 5278)
    assert perfect.epsilon == pytest.approx(perfect.ceiling) and noisy.ceiling == perfect.ceiling
    assert 0 <= noisy.epsilon < noisy.ceiling
    assert 5.0 < perfect.ceiling < 5.5  # measured 5.21: the 2 m delta term caps it (6.8 at delta = 0)
    four = one_run_audit(inc * 1.0, inc, guesses=(400, 1000, 2000, 4000), delta=1 / 5278)
    assert 3.5 < four.ceiling < 3.9  # measured 3.67: a Bonferroni split over four counts costs 1.5
    assert one_run_audit(inc * 1.0, inc, guesses=4000).ceiling > 6.5


# --------------------------------------------------------------------------- validation

def test_validation_errors():
    with pytest.raises(ValueError, match="exceeds the number of guesses"):
        one_run_p_value(10, 5, 6, 1.0)
    with pytest.raises(ValueError, match="exceeds the number of canaries"):
        one_run_epsilon_lower_bound(10, 11, 5)
    with pytest.raises(ValueError, match="confidence"):
        one_run_epsilon_lower_bound(10, 10, 5, confidence=1.0)
    with pytest.raises(ValueError, match="confidence"):
        one_run_epsilon_lower_bound(10, 10, 5, confidence=0.0)
    with pytest.raises(ValueError, match="delta"):
        one_run_p_value(10, 10, 5, 1.0, delta=1.0)
    with pytest.raises(ValueError, match="delta"):
        one_run_p_value(10, 10, 5, 1.0, delta=-0.1)
    with pytest.raises(ValueError, match="epsilon"):
        one_run_p_value(10, 10, 5, -0.5)
    with pytest.raises(ValueError, match="epsilon"):
        one_run_p_value(10, 10, 5, float("nan"))
    with pytest.raises(ValueError, match="m"):
        one_run_p_value(0, 0, 0, 1.0)
    with pytest.raises(TypeError):
        one_run_p_value(10, 5.0, 3, 1.0)
    s, inc = torch.randn(6), torch.tensor([True, False] * 3)
    with pytest.raises(ValueError, match="same length"):
        one_run_audit(s[:5], inc, guesses=2)
    with pytest.raises(ValueError, match="NaN"):
        one_run_audit(torch.tensor([0.0, float("nan"), 1.0, 2.0, 3.0, 4.0]), inc, guesses=2)
    with pytest.raises(ValueError, match="both included and excluded"):
        one_run_audit(s, torch.ones(6, dtype=torch.bool), guesses=2)
    with pytest.raises(ValueError, match="both included and excluded"):
        one_run_audit(s, torch.zeros(6, dtype=torch.bool), guesses=2)
    with pytest.raises(ValueError, match="exceeds the number of canaries"):
        one_run_audit(s, inc, guesses=7)
    with pytest.raises(ValueError, match="guesses"):
        one_run_audit(s, inc, guesses=0)
    with pytest.raises(ValueError, match="empty"):
        one_run_audit(s, inc, guesses=[])
    with pytest.raises(ValueError, match="boolean"):
        one_run_audit(s, torch.arange(6), guesses=2)
