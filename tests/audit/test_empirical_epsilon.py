"""Empirical epsilon lower bounds (privacy auditing, issue 7): Clopper-Pearson, the
hypothesis-testing bound, and audits of mechanisms with known epsilon."""
import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from pyg_private.accounting.randomized_response import truth_probability
from pyg_private.audit import (
    EpsilonLowerBound,
    best_threshold_lower_bound,
    clopper_pearson,
    empirical_epsilon_lower_bound,
)
from pyg_private.mechanisms import LaplaceMechanism, flip_edges


# --------------------------------------------------------------------------- helpers

def laplace_worlds(n: int, *, seed: int, epsilon: float | None = None, scale: float | None = None):
    """``n`` releases of a counting query (sensitivity 1) in the 'in' world (value 1) and
    the 'out' world (value 0), drawn by the library's Laplace mechanism."""
    g = torch.Generator().manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no accountant: these are audit trials
        mech = LaplaceMechanism(1.0, epsilon=epsilon, scale=scale, generator=g)
        return mech(torch.ones(n, dtype=torch.float64)), mech(torch.zeros(n, dtype=torch.float64))


def _pairs_reported(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    adj = torch.zeros(n, n, dtype=torch.bool)
    adj[edge_index[0], edge_index[1]] = True
    i, j = torch.triu_indices(n, n, 1)
    return adj[i, j].to(torch.float64)


def rr_worlds(n_nodes: int, *, epsilon: float, seed: int):
    """Randomized response on every node pair (the library's ``flip_edges``): the 'in'
    world is the complete graph (every bit 1), the 'out' world the empty graph (every bit
    0), so each of the n(n-1)/2 pairs is one independent trial of the audited bit."""
    q = truth_probability(epsilon=epsilon)
    g = torch.Generator().manual_seed(seed)
    i, j = torch.triu_indices(n_nodes, n_nodes, 1)
    complete = torch.cat([torch.stack([i, j]), torch.stack([j, i])], dim=1)
    empty = torch.empty(2, 0, dtype=torch.long)
    out_in = flip_edges(complete, n_nodes, q, generator=g)
    out_out = flip_edges(empty, n_nodes, q, generator=g)
    return _pairs_reported(out_in, n_nodes), _pairs_reported(out_out, n_nodes)


# --------------------------------------------------------------------------- Clopper-Pearson

@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (9, 10), (10, 10), (37, 200), (1234, 20000)])
@pytest.mark.parametrize("c", [0.9, 0.95, 0.999])
def test_clopper_pearson_matches_scipy_exact(k, n, c):
    low = binomtest(k, n, alternative="greater").proportion_ci(confidence_level=c, method="exact").low
    high = binomtest(k, n, alternative="less").proportion_ci(confidence_level=c, method="exact").high
    assert clopper_pearson(k, n, c, "lower") == pytest.approx(low, rel=1e-9, abs=1e-12)
    assert clopper_pearson(k, n, c, "upper") == pytest.approx(high, rel=1e-9, abs=1e-12)
    # a two-sided interval at level c is the pair of one-sided bounds at (1 + c) / 2
    two = binomtest(k, n).proportion_ci(confidence_level=c, method="exact")
    assert clopper_pearson(k, n, (1 + c) / 2, "lower") == pytest.approx(two.low, rel=1e-9, abs=1e-12)
    assert clopper_pearson(k, n, (1 + c) / 2, "upper") == pytest.approx(two.high, rel=1e-9, abs=1e-12)


def test_clopper_pearson_closed_forms_at_the_edges():
    n, c = 50, 0.95
    assert clopper_pearson(0, n, c, "lower") == 0.0
    assert clopper_pearson(0, n, c, "upper") == pytest.approx(1 - (1 - c) ** (1 / n), rel=1e-12)
    assert clopper_pearson(n, n, c, "upper") == 1.0
    assert clopper_pearson(n, n, c, "lower") == pytest.approx((1 - c) ** (1 / n), rel=1e-12)


def test_clopper_pearson_vectorised_and_ordered():
    k = np.array([0, 3, 7, 10])
    lo = clopper_pearson(k, 10, 0.95, "lower")
    hi = clopper_pearson(k, 10, 0.95, "upper")
    assert isinstance(lo, np.ndarray) and lo.shape == (4,)
    assert np.all(lo <= k / 10) and np.all(k / 10 <= hi)
    assert np.all(np.diff(lo) > 0) and np.all(np.diff(hi) > 0)
    for kk, l, h in zip(k, lo, hi):
        assert l == pytest.approx(clopper_pearson(int(kk), 10, 0.95, "lower"))
        assert h == pytest.approx(clopper_pearson(int(kk), 10, 0.95, "upper"))
    assert isinstance(clopper_pearson(3, 10, 0.95, "lower"), float)


@pytest.mark.parametrize("c", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_clopper_pearson_rejects_invalid_confidence(c):
    with pytest.raises(ValueError, match="confidence"):
        clopper_pearson(3, 10, c, "lower")


def test_clopper_pearson_rejects_invalid_arguments():
    with pytest.raises(ValueError, match="side"):
        clopper_pearson(3, 10, 0.95, "two-sided")
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson(11, 10, 0.95, "lower")
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson(-1, 10, 0.95, "upper")
    with pytest.raises(ValueError, match="trials"):
        clopper_pearson(0, 0, 0.95, "upper")
    with pytest.raises(TypeError):
        clopper_pearson(2.5, 10, 0.95, "lower")
    with pytest.raises(TypeError):
        clopper_pearson(3, 10, True, "lower")


# --------------------------------------------------------------------------- the bound

def test_bound_matches_the_formula_with_bonferroni_split():
    tp, fp, n_pos, n_neg, c = 700, 250, 1000, 1000, 0.95
    res = empirical_epsilon_lower_bound(tp, fp, n_pos, n_neg, confidence=c)
    lo = clopper_pearson(tp, n_pos, 0.975, "lower")
    hi = clopper_pearson(fp, n_neg, 0.975, "upper")
    expected = max(math.log(lo / hi), math.log((1 - hi) / (1 - lo)), 0.0)
    assert isinstance(res, EpsilonLowerBound)
    assert res.epsilon == pytest.approx(expected, rel=1e-12)
    assert (res.tpr_lower, res.fpr_upper) == (pytest.approx(lo), pytest.approx(hi))
    assert (res.tp, res.fp, res.positives, res.negatives) == (tp, fp, n_pos, n_neg)
    assert (res.tpr, res.fpr, res.confidence, res.delta) == (0.7, 0.25, c, 0.0)
    assert 0 < res.epsilon < math.log(0.7 / 0.25)  # below the plug-in estimate
    with pytest.raises(Exception):
        res.epsilon = 3.0  # frozen


def test_bound_uses_the_complementary_inequality():
    # TPR 0.99, FPR 0.5: TPR/FPR < 2 but (1 - FPR)/(1 - TPR) = 50
    res = empirical_epsilon_lower_bound(9900, 5000, 10000, 10000)
    lo, hi = res.tpr_lower, res.fpr_upper
    assert res.epsilon == pytest.approx(math.log((1 - hi) / (1 - lo)), rel=1e-12)
    assert res.epsilon > math.log(20)
    # swapping what "member" means (the complementary test) gives the same bound
    swapped = empirical_epsilon_lower_bound(5000, 100, 10000, 10000)
    assert swapped.epsilon > math.log(20)


def test_bound_delta_lowers_it_and_can_zero_it():
    base = empirical_epsilon_lower_bound(700, 250, 1000, 1000).epsilon
    with_delta = empirical_epsilon_lower_bound(700, 250, 1000, 1000, delta=0.1).epsilon
    assert 0 < with_delta < base
    assert empirical_epsilon_lower_bound(700, 250, 1000, 1000, delta=0.9).epsilon == 0.0


def test_bound_higher_confidence_is_lower():
    e = [empirical_epsilon_lower_bound(700, 250, 1000, 1000, confidence=c).epsilon for c in (0.5, 0.9, 0.99, 0.9999)]
    assert all(a > b for a, b in zip(e, e[1:]))


@pytest.mark.parametrize("tp,fp", [(0, 0), (0, 100), (100, 100), (50, 50), (100, 0)])
def test_bound_edge_counts(tp, fp):
    res = empirical_epsilon_lower_bound(tp, fp, 100, 100)
    assert math.isfinite(res.epsilon) and res.epsilon >= 0.0
    if tp == fp:
        assert res.epsilon == 0.0  # no separation: nothing can be claimed
    if (tp, fp) == (100, 0):
        # a perfect test on 100 trials: the bound is finite and limited by the sample size
        lo, hi = (0.025) ** (1 / 100), 1 - 0.025 ** (1 / 100)
        assert res.epsilon == pytest.approx(math.log(lo / hi), rel=1e-9)
        assert 3.0 < res.epsilon < 5.0


def test_bound_rejects_invalid_arguments():
    with pytest.raises(ValueError, match="confidence"):
        empirical_epsilon_lower_bound(5, 1, 10, 10, confidence=1.0)
    with pytest.raises(ValueError, match="delta"):
        empirical_epsilon_lower_bound(5, 1, 10, 10, delta=1.0)
    with pytest.raises(ValueError, match="delta"):
        empirical_epsilon_lower_bound(5, 1, 10, 10, delta=-0.1)
    with pytest.raises(ValueError, match="tp"):
        empirical_epsilon_lower_bound(11, 1, 10, 10)
    with pytest.raises(ValueError, match="fp"):
        empirical_epsilon_lower_bound(5, 11, 10, 10)
    with pytest.raises(ValueError, match="positives"):
        empirical_epsilon_lower_bound(0, 0, 0, 10)
    with pytest.raises(TypeError):
        empirical_epsilon_lower_bound(5.0, 1, 10, 10)


def test_bound_coverage_at_the_boundary():
    """Randomized response with eps = 1 meets TPR = e^eps FPR with equality: the bound must
    exceed the true eps in at most 1 - confidence of the repetitions."""
    rng = np.random.default_rng(0)
    eps, n, reps = 1.0, 300, 400
    q = truth_probability(epsilon=eps)
    tps = rng.binomial(n, q, size=reps)
    fps = rng.binomial(n, 1 - q, size=reps)
    bounds = np.array([empirical_epsilon_lower_bound(int(t), int(f), n, n).epsilon for t, f in zip(tps, fps)])
    assert (bounds > eps).mean() <= 0.05
    # ... while a naive plug-in estimate overshoots about half of the time
    naive = np.log(tps / fps)
    assert (naive > eps).mean() > 0.3


# --------------------------------------------------------------------------- threshold sweep

def test_threshold_sweep_api_and_determinism():
    s_in, s_out = laplace_worlds(4000, epsilon=1.0, seed=11)
    a = best_threshold_lower_bound(s_in, s_out, seed=5)
    b = best_threshold_lower_bound(s_in.numpy(), s_out.numpy().tolist(), seed=5)
    assert a == b
    assert a.split is True and a.direction in ("greater", "less") and a.threshold is not None
    assert a.positives == 2000 and a.negatives == 2000  # evaluated on the held-out halves
    # the reversed direction is found when the scores are negated
    neg = best_threshold_lower_bound(-s_in, -s_out, seed=5)
    assert neg.epsilon == pytest.approx(a.epsilon, abs=0.05)  # ties at the threshold differ
    assert {neg.direction, a.direction} == {"greater", "less"}
    # without the split every sample is used and the result is the maximum over the tests
    full = best_threshold_lower_bound(s_in, s_out, split=False)
    assert full.split is False and full.positives == 4000
    m_in = (s_in.numpy() >= full.threshold) if full.direction == "greater" else (s_in.numpy() < full.threshold)
    assert full.tp == int(m_in.sum())


def test_threshold_sweep_rejects_bad_scores():
    with pytest.raises(ValueError, match="empty"):
        best_threshold_lower_bound([], [0.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):
        best_threshold_lower_bound([0.0, float("nan")], [0.0, 1.0])
    with pytest.raises(ValueError, match="2 scores"):
        best_threshold_lower_bound([1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="max_thresholds"):
        best_threshold_lower_bound([1.0, 2.0], [0.0, 1.0], max_thresholds=1)


def test_identical_worlds_give_zero_or_little():
    rng = np.random.default_rng(3)
    res = best_threshold_lower_bound(rng.normal(size=5000), rng.normal(size=5000), seed=0)
    assert res.epsilon < 0.1


# --------------------------------------------------------------------------- audits of known mechanisms

@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_laplace_audit_is_below_and_close_to_the_true_epsilon(eps):
    s_in, s_out = laplace_worlds(20000, epsilon=eps, seed=0)
    res = best_threshold_lower_bound(s_in, s_out, seed=0)
    assert eps / 2 < res.epsilon <= eps


def test_laplace_audit_tightens_with_more_trials():
    small = best_threshold_lower_bound(*laplace_worlds(2000, epsilon=1.0, seed=1), seed=1).epsilon
    large = best_threshold_lower_bound(*laplace_worlds(200000, epsilon=1.0, seed=2), seed=2).epsilon
    assert small < large <= 1.0
    assert large > 0.9


def test_randomized_response_audit_is_below_and_close_to_the_true_epsilon():
    eps = 1.0
    bits_in, bits_out = rr_worlds(201, epsilon=eps, seed=0)  # 20100 trials per world
    # the natural fixed test, no selection: member iff the pair is reported
    direct = empirical_epsilon_lower_bound(int(bits_in.sum()), int(bits_out.sum()), bits_in.numel(), bits_out.numel())
    assert 0.5 < direct.epsilon <= eps
    assert direct.tpr == pytest.approx(truth_probability(epsilon=eps), abs=0.01)
    swept = best_threshold_lower_bound(bits_in, bits_out, seed=0)
    assert 0.5 < swept.epsilon <= eps


def test_randomized_response_audit_tightens_with_more_trials():
    def bound(n_nodes, seed):
        b_in, b_out = rr_worlds(n_nodes, epsilon=1.0, seed=seed)
        return empirical_epsilon_lower_bound(int(b_in.sum()), int(b_out.sum()), b_in.numel(), b_out.numel()).epsilon

    small = bound(64, 1)    # 2016 trials per world
    large = bound(633, 2)   # 200028 trials per world
    assert small < large <= 1.0
    assert large > 0.95


def test_broken_laplace_is_caught():
    """Noise 10x too small for the claimed eps = 1 (true eps = 10): the audit proves eps > 1
    at 99.9% confidence, with room to spare."""
    claimed = 1.0
    s_in, s_out = laplace_worlds(20000, scale=0.1 / claimed, seed=4)
    res = best_threshold_lower_bound(s_in, s_out, confidence=0.999, seed=4)
    assert res.epsilon > 5 * claimed
    assert res.epsilon <= 10.0  # still a valid lower bound on the true eps


def test_broken_randomized_response_is_caught():
    """Randomized response run at eps = 3 while claiming eps = 1."""
    bits_in, bits_out = rr_worlds(201, epsilon=3.0, seed=5)
    res = empirical_epsilon_lower_bound(int(bits_in.sum()), int(bits_out.sum()), bits_in.numel(), bits_out.numel(),
                                        confidence=0.999)
    assert 1.0 < res.epsilon <= 3.0
    assert res.epsilon > 2.5
