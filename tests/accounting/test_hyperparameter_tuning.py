"""Private hyperparameter tuning (Papernot and Steinke, ICLR 2022): Theorem 2 (truncated negative
binomial) and Theorem 6 (Poisson) against hand-computed values, monotonicity, the distributions'
means against Monte Carlo, and a brute force: the exact Rényi divergences of the best of K trials
of small discrete mechanisms, computed with mpmath at 50 digits, never exceed the bound."""
import math
import random

import mpmath as mp
import numpy as np
import pytest

from pyg_private.accounting import (
    DEFAULT_ORDERS,
    PrivacyAccountant,
    approximate_dp_event,
    gdp_event,
    gdp_rdp,
    laplace_event,
    rdp_event,
    subsampled_gaussian_event,
)
from pyg_private.accounting.composition import compose
from pyg_private.accounting.hyperparameter_tuning import (
    Poisson,
    TruncatedNegativeBinomial,
    expected_trials,
    poisson_rdp,
    sample_trials,
    trial_curve,
    truncated_negative_binomial_rdp,
    tuning_event,
    tuning_rdp,
    uniform_index,
)
from pyg_private.accounting.mechanism_events import pure_dp_event

ORDERS = DEFAULT_ORDERS
LN10 = math.log(10.0)


# ------------------------------------------------------------------ Theorem 2, by hand
def test_theorem2_gaussian_trial_hand_computed():
    # trial: 1-GDP, RDP alpha/2; K geometric with E[K] = 10 (eta = 1, gamma = 0.1).
    # hat-lambda on the grid minimising (hat-lambda - 1)/2 + ln(10)/hat-lambda is 2.1:
    # 0.55 + 2.302585093/2.1 = 1.646469092 (2.2 gives 1.646629588), so the constant is
    # (1 + eta) * 1.646469092 = 3.292938184, and eps'(lambda) = lambda/2 + 3.292938184 + ln(10)/(lambda - 1).
    curve = truncated_negative_binomial_rdp(ORDERS, gdp_rdp(1.0, ORDERS), eta=1.0, gamma=0.1)
    c = 2.0 * (0.55 + LN10 / 2.1)
    assert c == pytest.approx(3.2929381838038534, rel=1e-14)
    at = {a: curve[ORDERS.index(a)] for a in (2.0, 3.1, 5.0, 10.0)}
    # at 2 the raw bound 1 + c + ln 10 = 6.5955 is beaten by the one at 3.1 (RDP grows with the order)
    assert 1.0 + c + LN10 == pytest.approx(6.595523276797899, rel=1e-14)
    assert at[2.0] == pytest.approx(1.55 + c + LN10 / 2.1, rel=1e-12)
    assert at[2.0] == pytest.approx(5.93940727570578, rel=1e-12)
    assert at[3.1] == pytest.approx(5.93940727570578, rel=1e-12)
    assert at[5.0] == pytest.approx(2.5 + c + LN10 / 4.0, rel=1e-12) == pytest.approx(6.368584457052365, rel=1e-12)
    assert at[10.0] == pytest.approx(5.0 + c + LN10 / 9.0, rel=1e-12) == pytest.approx(8.548780971914303, rel=1e-12)
    assert math.isinf(curve[-1])  # a Gaussian has no pure-DP bound


@pytest.mark.parametrize("eta,gamma", [(-0.5, 0.01), (0.0, 0.05), (0.5, 0.25), (1.0, 0.1), (3.0, 0.3)])
def test_theorem2_matches_independent_loop_and_corollary4(eta, gamma):
    mu = 0.7
    r = gdp_rdp(mu, ORDERS)
    out = truncated_negative_binomial_rdp(ORDERS, r, eta=eta, gamma=gamma)
    mean = eta * (1 - gamma) / (gamma * (1 - gamma ** eta)) if eta != 0 else (1 / gamma - 1) / math.log(1 / gamma)
    fin = [a for a in ORDERS if math.isfinite(a)]
    const = (1 + eta) * min((1 - 1 / a) * a * mu * mu / 2 + math.log(1 / gamma) / a for a in fin)
    raw = [a * mu * mu / 2 + const + math.log(mean) / (a - 1) for a in fin]
    expected = [min(raw[i:]) for i in range(len(raw))]
    np.testing.assert_allclose(out[:-1], expected, rtol=1e-12)
    # Corollary 4 (zCDP, rho = mu^2/2): the continuous optimum is a lower bound of the grid's
    rho = mu * mu / 2
    lam = 1 + math.sqrt(math.log(mean) / rho) if mean > 1 else 2.0
    cor4 = rho * (lam - 1) + math.log(mean) / (lam - 1) + 2 * (1 + eta) * math.sqrt(rho * math.log(1 / gamma)) - eta * rho
    assert min(out[:-1]) >= cor4 - 1e-12
    assert min(out[:-1]) <= cor4 * 1.02  # the grid is fine enough to come within 2 %


@pytest.mark.parametrize("eta", [0.0, 1.0, 2.0])
def test_corollary3_pure_dp(eta):
    eps = 0.8
    event = pure_dp_event(unit="edge", epsilon=eps)
    out = truncated_negative_binomial_rdp(event.orders, event.rdp, eta=eta, gamma=0.05)
    assert out[-1] <= (2 + eta) * eps * (1 + 1e-12)
    assert out[-1] >= (2 + eta) * eps * 0.99  # the order-inf track is the corollary, up to the grid's finite hat-lambda
    assert np.all(np.diff(out) >= 0)


# ------------------------------------------------------------------ Theorem 6, by hand
def test_theorem6_gaussian_trial_hand_computed():
    # trial 0.5-GDP, K ~ Poisson(3). At lambda = 4: hat-eps = ln(4/3) = 0.287682072,
    # hat-delta = delta_GDP(0.5; 0.287682) = 0.0996761546, x = 4 * 0.125 + 3 * hat-delta = 0.799028464,
    # eps' = ln(e^-3 + 3 e^{3x}) / 3 = 1.165735488 (the paper's display x + ln(3)/3 = 1.165232560).
    out = poisson_rdp(ORDERS, gdp_rdp(0.5, ORDERS), mu=3.0, gdp_mu=0.5)
    x = 4 * 0.125 + 3 * 0.09967615459540585
    assert math.log(math.exp(-3) + 3 * math.exp(3 * x)) / 3 == pytest.approx(1.1657354875484442, rel=1e-12)
    assert out[ORDERS.index(4.0)] == pytest.approx(1.1657354875484442, rel=1e-9)
    assert out[ORDERS.index(4.0)] >= x + math.log(3) / 3  # never below the paper's display
    # without the exact GDP delta the curve's own (Balle et al.) conversion is used: valid, looser
    loose = poisson_rdp(ORDERS, gdp_rdp(0.5, ORDERS), mu=3.0)
    assert np.all(loose >= out - 1e-12)
    assert loose[ORDERS.index(4.0)] > out[ORDERS.index(4.0)] * 1.1


def test_theorem6_display_fails_without_the_empty_selection():
    """The paper's display eps + mu*delta + log(mu)/(lambda - 1) leaves out P[K=0] = e^-mu; for mu < 1
    it is below the true divergence. Ours keeps it."""
    mu, lam = 0.3, 1.5
    with mp.workdps(DPS):
        D, Dp = _threshold(0.05, 0.5)
        trial = _exact_curve(D, Dp)
        exact = _exact_selection_divergence(D, Dp, Poisson(mu), lam)
    eps = trial[ORDERS.index(lam)]
    display = max(eps + math.log(mu) / (lam - 1), 0.0)  # delta-hat is 0: the trial is 0.05-DP < ln 3
    assert exact > display + 1e-4
    assert poisson_rdp(ORDERS, trial, mu=mu)[ORDERS.index(lam)] >= exact


# ------------------------------------------------------------------ monotonicity
def test_monotone_in_eta_gamma_mu():
    r = gdp_rdp(0.5, ORDERS)
    by_eta = [truncated_negative_binomial_rdp(ORDERS, r, eta=e, gamma=0.1) for e in (-0.5, 0.0, 0.5, 1.0, 2.0)]
    by_gamma = [truncated_negative_binomial_rdp(ORDERS, r, eta=1.0, gamma=g) for g in (0.5, 0.2, 0.1, 0.01)]
    by_mu = [poisson_rdp(ORDERS, r, mu=m) for m in (1.0, 3.0, 10.0, 100.0)]
    by_trial = [truncated_negative_binomial_rdp(ORDERS, gdp_rdp(m, ORDERS), eta=1.0, gamma=0.1) for m in (0.1, 0.5, 1.0)]
    for seq in (by_eta, by_gamma, by_mu, by_trial):
        for lo, hi in zip(seq, seq[1:]):
            assert np.all(hi[:-1] >= lo[:-1] - 1e-12) and np.any(hi[:-1] > lo[:-1])
    for curve in by_eta + by_gamma + by_mu:
        assert np.all(np.diff(curve) >= 0)  # non-decreasing in the order


def test_one_trial_costs_at_least_the_trial():
    r = gdp_rdp(1.0, ORDERS)
    out = tuning_rdp(ORDERS, r, TruncatedNegativeBinomial.geometric(1.0001))
    assert np.all(out[:-1] >= r[:-1] * (1 - 1e-12))


# ------------------------------------------------------------------ distributions
def test_pmfs_and_means():
    geo = TruncatedNegativeBinomial.geometric(10)
    assert geo.gamma == pytest.approx(0.1)
    for k in (1, 2, 7):
        assert geo.pmf(k) == pytest.approx(0.1 * 0.9 ** (k - 1), rel=1e-12)
    log = TruncatedNegativeBinomial(eta=0.0, gamma=0.2)
    for k in (1, 3):
        assert log.pmf(k) == pytest.approx(0.8 ** k / (k * math.log(5)), rel=1e-12)
    assert log.mean == pytest.approx(4 / math.log(5), rel=1e-12)
    tnb = TruncatedNegativeBinomial(eta=0.5, gamma=0.25)
    assert tnb.mean == pytest.approx(3.0, rel=1e-12)  # 0.5 * 0.75 / (0.25 * (1 - 0.5))
    assert tnb.pmf(2) == pytest.approx(0.75 ** 2 / (0.25 ** -0.5 - 1) * (0.5 / 1) * (1.5 / 2), rel=1e-12)
    neg = TruncatedNegativeBinomial(eta=-0.5, gamma=0.05)
    assert neg.pmf(0) == 0.0 and neg.pmf(1) > 0
    for dist in (geo, log, tnb, neg, Poisson(4.0)):
        ks = range(0, 4000)
        assert math.fsum(dist.pmf(k) for k in ks) == pytest.approx(1.0, abs=1e-9)
        assert math.fsum(k * dist.pmf(k) for k in ks) == pytest.approx(dist.mean, rel=1e-8)
        assert expected_trials(dist) == dist.mean
    for eta in (-0.5, 0.0, 0.5, 1.0, 3.0):
        assert TruncatedNegativeBinomial.with_mean(eta, 10).mean == pytest.approx(10, rel=1e-10)
    assert TruncatedNegativeBinomial.logarithmic(10).eta == 0.0


@pytest.mark.parametrize("dist", [TruncatedNegativeBinomial.geometric(5), TruncatedNegativeBinomial.logarithmic(5),
                                  TruncatedNegativeBinomial.with_mean(0.5, 5), TruncatedNegativeBinomial.with_mean(-0.5, 5),
                                  TruncatedNegativeBinomial.with_mean(3.0, 5), Poisson(5.0), Poisson(0.5)],
                         ids=lambda d: f"{d.name}-{getattr(d, 'eta', '')}-{d.mean:.3g}")
def test_sampler_matches_mean_and_pmf(dist):
    rng = random.Random(20240607)
    n = 20000
    draws = np.array([sample_trials(dist, rng) for _ in range(n)])
    sd = math.sqrt(math.fsum((k - dist.mean) ** 2 * dist.pmf(k) for k in range(0, 20000)))
    assert abs(draws.mean() - dist.mean) < 5 * sd / math.sqrt(n)
    for k in range(0, 4):  # frequencies of the first values within 5 standard errors
        p = dist.pmf(k)
        assert abs(np.mean(draws == k) - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-12
    assert draws.min() >= (0 if isinstance(dist, Poisson) else 1)


def test_sampler_sources():
    dist = TruncatedNegativeBinomial.geometric(3)
    assert isinstance(sample_trials(dist), int)  # default: the OS's generator
    seeded = [sample_trials(dist, random.Random(1)) for _ in range(3)]
    assert seeded == [sample_trials(dist, random.Random(1)) for _ in range(3)]
    assert sample_trials(dist, np.random.default_rng(3)) >= 1
    assert 0 <= uniform_index(5) < 5 and uniform_index(5, np.random.default_rng(0)) in range(5)
    with pytest.raises(TypeError, match="rng"):
        sample_trials(dist, 42)
    with pytest.raises(ValueError, match="n"):
        uniform_index(0)
    assert Poisson(2000.0).sample(random.Random(0)) > 1500  # e^-2000 underflows; the log-space pmf does not


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize("kwargs,err", [
    (dict(eta=-1.0, gamma=0.1), ValueError), (dict(eta=-2.0, gamma=0.1), ValueError),
    (dict(eta=math.nan, gamma=0.1), ValueError), (dict(eta=math.inf, gamma=0.1), ValueError),
    (dict(eta=True, gamma=0.1), TypeError), (dict(eta="1", gamma=0.1), TypeError),
    (dict(eta=1.0, gamma=0.0), ValueError), (dict(eta=1.0, gamma=1.0), ValueError),
    (dict(eta=1.0, gamma=-0.1), ValueError), (dict(eta=1.0, gamma=math.nan), ValueError),
])
def test_distribution_validation(kwargs, err):
    with pytest.raises(err):
        TruncatedNegativeBinomial(**kwargs)


def test_validation():
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="mu"):
            Poisson(bad)
    for bad in (1.0, 0.5, -3):
        with pytest.raises(ValueError, match="mean"):
            TruncatedNegativeBinomial.geometric(bad)
        with pytest.raises(ValueError, match="mean"):
            TruncatedNegativeBinomial.with_mean(0.5, bad)
    r = gdp_rdp(1.0, ORDERS)
    with pytest.raises(ValueError, match="non-negative"):
        truncated_negative_binomial_rdp(ORDERS, -r, eta=1, gamma=0.1)
    with pytest.raises(ValueError, match="non-negative"):
        poisson_rdp(ORDERS, np.where(np.arange(len(r)) == 3, math.nan, r), mu=2)
    with pytest.raises(ValueError, match="values for"):
        truncated_negative_binomial_rdp(ORDERS, r[:-1], eta=1, gamma=0.1)
    with pytest.raises(ValueError, match="order"):
        truncated_negative_binomial_rdp((2.0, 1.0), (1.0, 1.0), eta=1, gamma=0.1)
    with pytest.raises(TypeError, match="distribution"):
        tuning_rdp(ORDERS, r, "geometric")
    with pytest.raises(ValueError, match="eta"):
        truncated_negative_binomial_rdp(ORDERS, r, eta=-1.5, gamma=0.1)


# ------------------------------------------------------------------ the event
def test_trial_curve_is_the_accountants_composition():
    events = [gdp_event(unit="node", mu=0.5, name="agg"),
              subsampled_gaussian_event(noise_multiplier=1.2, sample_rate=0.05, steps=100, unit="node"),
              laplace_event(unit="node", sensitivity=1.0, scale=10.0)]
    grid, curve = trial_curve(events)
    total = compose(events).rdp_curve()
    assert grid == tuple(total[0].tolist())
    np.testing.assert_array_equal(curve, total[1])
    grid_gdp, curve_gdp = trial_curve([gdp_event(unit="edge", mu=0.3, name="a"), gdp_event(unit="edge", mu=0.4, name="b")])
    assert grid_gdp == ORDERS
    np.testing.assert_allclose(curve_gdp, gdp_rdp(0.5, ORDERS), rtol=1e-14)


def test_tuning_event_composes_and_persists():
    dist = TruncatedNegativeBinomial.geometric(10)
    trial = [gdp_event(unit="edge", mu=1.0, name="run")]
    event = tuning_event(trial, distribution=dist, name="search")
    assert event.unit.value == "edge" and event.mechanism == "hyperparameter_tuning"
    assert event.params["expected_trials"] == pytest.approx(10) and event.params["eta"] == 1.0
    np.testing.assert_array_equal(event.rdp, tuning_rdp(ORDERS, gdp_rdp(1.0, ORDERS), dist))
    same = tuning_event((ORDERS, gdp_rdp(1.0, ORDERS)), distribution=dist, unit="edge", name="search")
    assert same.rdp == event.rdp
    acct = PrivacyAccountant()
    acct.register(event)
    eps = acct.epsilon("edge", 1e-5)
    assert eps == pytest.approx(acct.composition("edge").epsilon(1e-5))
    acct.register(gdp_event(unit="edge", mu=0.5, name="final"))
    assert acct.epsilon("edge", 1e-5) > eps
    again = PrivacyAccountant.from_state_dict(acct.state_dict())
    assert again.epsilon("edge", 1e-5) == acct.epsilon("edge", 1e-5)
    # Poisson with a GDP trial uses the exact GDP delta
    p = tuning_event(trial, distribution=Poisson(10.0))
    np.testing.assert_array_equal(p.rdp, poisson_rdp(ORDERS, gdp_rdp(1.0, ORDERS), mu=10.0, gdp_mu=1.0))


def test_tuning_event_refusals():
    dist = TruncatedNegativeBinomial.geometric(10)
    with pytest.raises(ValueError, match="one unit"):
        tuning_event([gdp_event(unit="edge", mu=1.0, name="a"), gdp_event(unit="node", mu=1.0, name="b")],
                     distribution=dist)
    with pytest.raises(ValueError, match="RDP curve"):
        tuning_event([approximate_dp_event(unit="edge", epsilon=1.0, delta=1e-6)], distribution=dist)
    with pytest.raises(ValueError, match="local"):
        tuning_event([pure_dp_event(unit="local", epsilon=1.0, num_nodes=3)], distribution=dist)
    with pytest.raises(ValueError, match="unit"):
        tuning_event([gdp_event(unit="edge", mu=1.0, name="a")], distribution=dist, unit="node")
    with pytest.raises(ValueError, match="unit"):
        tuning_event((ORDERS, gdp_rdp(1.0, ORDERS)), distribution=dist)
    with pytest.raises(ValueError, match="empty"):
        tuning_event([], distribution=dist)
    with pytest.raises(TypeError):
        tuning_event([1.0], distribution=dist)
    with pytest.raises(ValueError, match="tabulated"):  # curves on grids the trial's events do not share
        trial_curve([rdp_event(unit="edge", orders=(2.0, 4.0), rdp=(1.0, 2.0), name="x")], orders=(3.0,))


# ------------------------------------------------------------------ brute force
DPS = 50  # mpmath digits for the brute force (set locally: the suite's other mpmath users keep theirs)
CHECK_ORDERS = [1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, ORDERS[-10], math.inf]


def _mp(a):
    return mp.inf if math.isinf(a) else mp.mpf(a)


def _renyi(P, Q, a):
    if a == mp.inf:
        return max(mp.log(p / q) for p, q in zip(P, Q) if p > 0)
    return mp.log(mp.fsum(p ** a * q ** (1 - a) for p, q in zip(P, Q) if p > 0)) / (a - 1)


def _pgf(dist):
    """E[x^K] in closed form (checked against the truncated series below)."""
    if isinstance(dist, Poisson):
        mu = mp.mpf(dist.mu)
        return lambda x: mp.exp(mu * (x - 1))
    eta, g = mp.mpf(dist.eta), mp.mpf(dist.gamma)
    if dist.eta == 0:
        return lambda x: mp.log(1 - (1 - g) * x) / mp.log(g)
    return lambda x: ((1 - (1 - g) * x) ** (-eta) - 1) / (g ** (-eta) - 1)


def _selection(P, dist):
    """Output law of the best of K i.i.d. draws from P (outputs listed in increasing order), with the
    empty selection (K = 0) as an extra atom: P[best <= y] = E[F(y)^K]."""
    f = _pgf(dist)
    F = [mp.mpf(0)]
    for p in P:
        F.append(F[-1] + p)
    F[-1] = mp.mpf(1)
    return [f(mp.mpf(0))] + [f(F[i + 1]) - f(F[i]) for i in range(len(P))]


def _exact_curve(D, Dp):
    return np.array([float(max(_renyi(D, Dp, _mp(a)), _renyi(Dp, D, _mp(a)))) for a in ORDERS])


def _exact_selection_divergence(D, Dp, dist, order):
    A, B = _selection(D, dist), _selection(Dp, dist)
    return float(max(_renyi(A, B, _mp(order)), _renyi(B, A, _mp(order))))


def _rr(m, eps, true):
    e = mp.exp(eps)
    return [(e if s == true else 1) / (e + m - 1) for s in range(m)]


def _score_and_config(eps):
    """Two configurations, drawn uniformly; output (score, config) in {0..3} x {0, 1}, ordered by score,
    then by grid position (config 0 wins ties, as in select_privately). Config 0 reports its score by
    4-ary randomized response around 3 on D and around 0 on D' (eps-DP); config 1 ignores the data."""
    D, Dp = [], []
    for s in range(4):
        for c in (1, 0):  # increasing order: at equal score config 1 ranks below config 0
            if c == 0:
                D.append(_rr(4, eps, 3)[s] / 2)
                Dp.append(_rr(4, eps, 0)[s] / 2)
            else:
                D.append(mp.mpf(1) / 8)
                Dp.append(mp.mpf(1) / 8)
    return D, Dp


def _threshold(eps, p):
    """One configuration, binary score: success with probability p on D and p e^eps on D'."""
    p, e = mp.mpf(p), mp.exp(eps)
    return [1 - p, p], [1 - p * e, p * e]


MECHANISMS = {"score+config eps=1": lambda: _score_and_config(1.0),
              "score+config eps=0.2": lambda: _score_and_config(0.2),
              "threshold eps=1 p=0.01": lambda: _threshold(1.0, 0.01),
              "threshold eps=1 p=0.2": lambda: _threshold(1.0, 0.2),
              "threshold eps=0.1 p=0.05": lambda: _threshold(0.1, 0.05),
              # near the worst case found by a scan over thresholds (ratios 0.9-0.98 at order inf)
              "threshold eps=4 p=0.018": lambda: _threshold(4.0, 0.018),
              "threshold eps=0.1 p=6e-6": lambda: _threshold(0.1, 6e-6)}
CURVES = {}  # the trials' exact curves, computed once

DISTRIBUTIONS = ([TruncatedNegativeBinomial.with_mean(e, m) for e in (-0.5, 0.0, 0.5, 1.0, 2.0) for m in (2, 10)]
                 + [Poisson(mu) for mu in (0.5, 1.0, 3.0, 10.0)])


@pytest.mark.parametrize("dist", DISTRIBUTIONS, ids=lambda d: f"{d.name}-eta{getattr(d, 'eta', '')}-mean{d.mean:.3g}")
def test_brute_force_selection_never_exceeds_the_bound(dist):
    with mp.workdps(DPS):
        worst = _brute_force(dist)
    # the test is not vacuous: the worst mechanism reaches exact / bound = 0.73-0.90 (truncated negative
    # binomial) and 0.98-0.999 (Poisson) at order inf; dropping the factor (1 + eta) of Theorem 2 fails
    # here for every eta > 0, and the paper's Poisson display fails for mu = 0.5
    assert max(worst.values()) > 0.7


def _brute_force(dist):
    worst = {}
    for name, make in MECHANISMS.items():
        D, Dp = make()
        if name not in CURVES:
            CURVES[name] = _exact_curve(D, Dp)
        bound = tuning_rdp(ORDERS, CURVES[name], dist)
        A, B = _selection(D, dist), _selection(Dp, dist)
        assert mp.fsum(A) == pytest.approx(1.0, abs=1e-40) and mp.fsum(B) == pytest.approx(1.0, abs=1e-40)
        for order in CHECK_ORDERS:
            a = _mp(order)
            exact = float(max(_renyi(A, B, a), _renyi(B, A, a)))
            b = bound[ORDERS.index(order)]
            assert exact <= b * (1 + 1e-9), (name, order, exact, b)
            worst[name] = max(worst.get(name, 0.0), exact / b)
    return worst


@pytest.mark.parametrize("dist", [TruncatedNegativeBinomial.geometric(10), TruncatedNegativeBinomial.with_mean(-0.5, 3),
                                  Poisson(3.0)], ids=lambda d: d.name)
def test_pgf_matches_truncated_series(dist):
    with mp.workdps(DPS):
        f = _pgf(dist)
        for x in (mp.mpf("0.3"), mp.mpf("0.9"), mp.mpf("0.999")):
            series = mp.fsum(mp.mpf(dist.pmf(k)) * x ** k for k in range(0, 6000))
            assert float(series) == pytest.approx(float(f(x)), rel=1e-9)
