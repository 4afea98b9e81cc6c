"""GCON's extra ridge Lambda' (Wei et al., arXiv:2407.05034, Theorem 1, Eqs. 17-24, Lemmas 7-9).

The default ``lambda_prime="tight"`` evaluates c_theta (Eq. 23) at the ridge Lambda + Lambda' that
the objective uses and takes the smallest Lambda' whose Lemma 7 bound meets (1 - omega) eps; Eq. 17
as printed (``"paper"``) evaluates c_theta at Lambda alone. Checked here, independently of the
implementation (50-digit mpmath, exact rationals):

* every inequality of the proof at the returned parameters (Lemma 9's tail bound with the ridge
  used, Lemma 7 at Lambda + Lambda', Lemmas 7 + 8 <= eps, Eq. 22), on a random sweep;
* minimality: a slightly smaller ridge fails Lemma 7 with the c_theta Lemma 9 allows there, and
  the tight values are never worse than Eq. 17's (less ridge, smaller c_theta, larger beta);
* the calibration spends its epsilon: the mechanism's exact privacy loss (the profile) at delta
  equals the target, where Eq. 17 spends ~1e-6 of it (the Cora-ML overshoot);
* the accountant registers exactly the calibrated (eps, delta).
"""
import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from pyg_private import PrivacyAccountant
from pyg_private.accounting import appr_sensitivity, calibrate_objective_perturbation, loss_constants
from pyg_private.accounting.mechanism_events import objective_perturbation_event
from pyg_private.accounting.objective_perturbation import LAMBDA_PRIME_RULES, objective_perturbation_profile

mp.mp.dps = 50
INF = math.inf


def _calibrate(rule="tight", **kw):
    return calibrate_objective_perturbation(**kw, lambda_prime=rule)


def _cora(eps=0.984375, reg=0.01, n1=140, d=7, alpha=0.6):
    """Cora-ML: c = 7, |E| = 16316, soft-margin, m = 2 (alpha = 0.6: Psi = 1.12)."""
    return dict(epsilon=eps, delta=1 / 16316, dim=d, num_classes=7, num_rows=n1,
                sensitivity=appr_sensitivity(alpha, 2), loss_constants=loss_constants("soft_margin", 7),
                regularization=reg)


# ---- independent 50-digit arithmetic -------------------------------------------------------
def _mp_theta(cal, ridge, share):
    """Eq. 23 with noise share ``share`` (the paper's: omega eps) and ridge ``ridge``; inf at/below the bound."""
    c, c1, c2, Psi, c_sf, n1 = (mp.mpf(v) for v in (cal.c, cal.c1, cal.c2, cal.Psi, cal.c_sf, cal.n1))
    den = n1 * share * ridge - c * c2 * Psi * c_sf
    return mp.inf if den <= 0 else (n1 * share * c1 + c * c1 * Psi * c_sf) / den


def _mp_jacobian(cal, c_theta, ridge):
    """Lemma 7: c d ln(1 + (2 c2 + c3 c_theta) Psi / (d n1 ridge))."""
    c, d, n1, c2, c3, Psi = (mp.mpf(v) for v in (cal.c, cal.d, cal.n1, cal.c2, cal.c3, cal.Psi))
    return c * d * mp.log(1 + (2 * c2 + c3 * c_theta) * Psi / (d * n1 * ridge))


def _mp_noise(cal, c_theta):
    """Lemma 8: c (c1 + c2 c_theta) Psi beta."""
    return mp.mpf(cal.c) * (mp.mpf(cal.c1) + mp.mpf(cal.c2) * c_theta) * mp.mpf(cal.Psi) * mp.mpf(cal.beta)


def _lemma9_holds_exactly(cal):
    """beta n1 ((Lambda + Lambda') c_theta - c1) >= c_sf in exact rationals of the returned floats."""
    ridge = Fraction(cal.Lambda) + Fraction(cal.Lambda_prime)
    lhs = Fraction(cal.beta) * cal.n1 * (ridge * Fraction(cal.c_theta) - Fraction(cal.c1))
    return lhs >= Fraction(cal.c_sf)


def _mp_root(cal):
    """The smallest ridge L >= Lambda with Lemma 7 at c_theta(L) (Eq. 23 at L) <= (1 - omega) eps, by
    50-digit bisection on the bracket [Lambda, Eq. 17's Lambda + Lambda']."""
    share = mp.mpf(cal.omega) * mp.mpf(cal.epsilon)
    budget = (1 - mp.mpf(cal.omega)) * mp.mpf(cal.epsilon)

    def ok(L):
        return _mp_jacobian(cal, _mp_theta(cal, L, share), L) <= budget

    lo = mp.mpf(cal.Lambda)
    if ok(lo):
        return lo
    c_theta = _mp_theta(cal, lo, share)
    hi = mp.mpf(cal.c) * (2 * mp.mpf(cal.c2) + mp.mpf(cal.c3) * c_theta) * mp.mpf(cal.Psi) / (mp.mpf(cal.n1) * budget)
    assert ok(hi)  # Eq. 17's closed form is a valid upper bracket
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _random_inputs(rng, n):
    for _ in range(n):
        c = int(rng.integers(2, 11))
        loss = rng.choice(["soft_margin", "pseudo_huber"])
        consts = loss_constants(loss, c, None if loss == "soft_margin" else float(rng.choice([0.1, 0.2, 0.5, 2.0])))
        steps = [int(m) if m < 12 else INF for m in rng.integers(0, 13, size=int(rng.integers(1, 4)))]
        psi = appr_sensitivity(float(rng.choice([0.05, 0.2, 0.4, 0.6, 0.8])), steps)
        if psi == 0:
            continue
        yield dict(epsilon=float(rng.choice([0.1, 0.5, 1, 2, 4, 8])), delta=float(10.0 ** rng.uniform(-8, -2)),
                   dim=int(rng.integers(1, 200)), num_classes=c, num_rows=int(rng.integers(5, 20000)),
                   sensitivity=psi, loss_constants=consts, regularization=float(rng.choice([0, 0.01, 0.2, 1, 2])),
                   omega=float(rng.choice([0.5, 0.9, 0.99])))


# ---- tests ------------------------------------------------------------------------------------
def test_every_inequality_of_the_proof_and_minimality():
    rng = np.random.default_rng(7)
    n_extra = 0
    for kw in _random_inputs(rng, 150):
        cal, paper = _calibrate(**kw), _calibrate("paper", **kw)
        assert cal.lambda_prime_rule == "tight" and paper.lambda_prime_rule == "paper"
        eps, w = mp.mpf(cal.epsilon), mp.mpf(cal.omega)
        ridge = mp.mpf(cal.Lambda) + mp.mpf(cal.Lambda_prime)
        # Eq. 22 unchanged: the same raised Lambda as the paper's rule
        assert cal.Lambda == paper.Lambda and cal.Lambda >= kw["regularization"]
        assert cal.Lambda >= cal.Lambda_bound + cal.xi * (1 - 1e-12)
        # Lemma 9 at the ridge actually used, exactly for the returned floats
        assert _lemma9_holds_exactly(cal), kw
        # Lemma 7 at Lambda + Lambda' within the Jacobian share, and below Eq. 24's bound at Lambda
        # (up to the rule's 2^-40 eps rounding slack when Lambda' = 0)
        jac = _mp_jacobian(cal, mp.mpf(cal.c_theta), ridge)
        assert jac <= (1 - w) * eps, kw
        assert jac <= mp.mpf(cal.eps_Lambda) * (1 + mp.mpf(1e-10))
        n_extra += cal.Lambda_prime > 0
        # Lemmas 7 + 8: at most eps
        assert jac + _mp_noise(cal, mp.mpf(cal.c_theta)) <= eps, kw
        # the smallest valid ridge: the 50-digit root, to the margin the rule keeps for rounding
        root = _mp_root(cal)
        assert ridge >= root * (1 - mp.mpf(1e-15))
        assert ridge <= root * (1 + mp.mpf(1e-9)), (kw, ridge, root)
        if cal.Lambda_prime > 0 and root * (1 - mp.mpf(1e-6)) > mp.mpf(cal.Lambda):
            smaller = root * (1 - mp.mpf(1e-6))  # fails Lemma 7 with the smallest c_theta Lemma 9 allows there
            assert _mp_jacobian(cal, _mp_theta(cal, smaller, w * eps), smaller) > (1 - w) * eps
        # never worse than Eq. 17: less ridge, smaller c_theta, more noise rate (less noise)
        assert cal.Lambda_prime <= paper.Lambda_prime * (1 + 1e-9) + 1e-300
        assert (cal.Lambda_prime == 0) == (paper.Lambda_prime == 0)
        assert cal.c_theta <= paper.c_theta * (1 + 1e-9)
        assert cal.beta >= paper.beta * (1 - 1e-9)
    assert n_extra > 10  # both branches are exercised


def test_the_case_without_extra_ridge_is_eq_17_as_printed():
    # Cora-ML, d = 16, m = 2, alpha = 0.8 (Psi = 0.48), Lambda = 0.2: the spec's worked rows with Lambda' = 0
    for n1, eps in ((140, 1.0), (2995, 1.0), (140, 4.0)):
        kw = dict(epsilon=eps, delta=1 / 16316, dim=16, num_classes=7, num_rows=n1, sensitivity=0.48,
                  loss_constants=loss_constants("soft_margin", 7), regularization=0.2)
        tight, paper = _calibrate(**kw), _calibrate("paper", **kw)
        assert tight.Lambda_prime == paper.Lambda_prime == 0.0
        for name in ("Lambda", "c_theta", "eps_Lambda", "beta"):
            assert getattr(tight, name) == pytest.approx(getattr(paper, name), rel=1e-11), name
        assert tight.beta <= paper.beta  # the rounding slack is on the safe side


def test_pubmed_worked_row_needs_far_less_ridge():
    # the spec's PubMed row n1 = 60, eps = 0.5 (Eq. 17: Lambda' = 0.70727, beta = 0.06495, c_theta = 53.7327)
    kw = dict(epsilon=0.5, delta=1 / 88648, dim=16, num_classes=3, num_rows=60, sensitivity=0.48,
              loss_constants=loss_constants("soft_margin", 3), regularization=0.2)
    paper, tight = _calibrate("paper", **kw), _calibrate(**kw)
    assert paper.Lambda_prime == pytest.approx(0.70727, abs=5e-6) and paper.beta == pytest.approx(0.06495, abs=5e-6)
    root = float(_mp_root(tight))
    assert tight.Lambda + tight.Lambda_prime == pytest.approx(root, rel=1e-9)
    assert 0 < tight.Lambda_prime < 0.5 * paper.Lambda_prime
    assert tight.c_theta < paper.c_theta and tight.beta > paper.beta


def test_cora_overshoot_is_gone_and_the_budget_is_spent():
    """The reported overshoot: Lambda = 0.01 is raised by Eq. 22 to its bound, c_theta(Lambda) ~ 6.6e6,
    Eq. 17 adds Lambda' ~ 5e4 and the fit spends ~1e-6 of its epsilon."""
    kw = _cora()
    paper, tight = _calibrate("paper", **kw), _calibrate(**kw)
    assert paper.lambda_raised and paper.Lambda_prime > 1e4 and paper.c_theta > 1e6
    (_, (spent_paper,)) = objective_perturbation_profile(paper, [paper.delta])
    assert spent_paper < 1e-5 * kw["epsilon"]
    assert tight.Lambda_prime < 0.1 and tight.c_theta < 10 and tight.beta > 1e5 * paper.beta
    (_, (spent,)) = objective_perturbation_profile(tight, [tight.delta])
    assert kw["epsilon"] * (1 - 1e-9) <= spent <= kw["epsilon"]


@pytest.mark.parametrize("reg", [0.0, 0.01, 0.2, 2.0])
@pytest.mark.parametrize("n1", [140, 2995])
def test_profile_at_delta_never_exceeds_the_target(reg, n1):
    for eps in (0.5, 1.0, 4.0):
        cal = _calibrate(**_cora(eps=eps, reg=reg, n1=n1, d=16))
        (_, (spent,)) = objective_perturbation_profile(cal, [cal.delta])
        assert spent <= eps
        if cal.Lambda_prime > 0:  # the Jacobian share is exactly used: no budget is left idle
            assert spent >= eps * (1 - 1e-9)


def test_the_accountant_registers_the_calibrated_pair():
    cal = _calibrate(**_cora(eps=1.0))
    assert cal.Lambda_prime > 0
    acct = PrivacyAccountant(budget={"edge": (1.0, 1 / 16316)})
    event = objective_perturbation_event(cal)
    assert event.approx == (1.0, 1 / 16316)
    assert event.params["regularization"] == cal.Lambda + cal.Lambda_prime
    acct.register(event)
    assert len(acct.events) == 1
    spent = acct.epsilon("edge", 1 / 16316)
    assert 1.0 * (1 - 1e-9) <= spent <= 1.0


def test_the_ridge_does_not_depend_on_xi():
    # with the raised Lambda, the tight total ridge is the root of Lemma 7's equation, whatever xi is
    ridges = {xi: (lambda cal: cal.Lambda + cal.Lambda_prime)(_calibrate(**_cora(), xi=xi)) for xi in (1e-9, 1e-4)}
    assert ridges[1e-9] == pytest.approx(ridges[1e-4], rel=1e-12)
    paper = {xi: _calibrate("paper", **_cora(), xi=xi).Lambda_prime for xi in (1e-9, 1e-4)}
    assert paper[1e-9] > 100 * paper[1e-4]  # Eq. 17 as printed depends on it wildly


def test_bad_rule_raises():
    assert LAMBDA_PRIME_RULES == ("tight", "paper")
    for bad in ("closed_form", None, "", "Tight"):
        with pytest.raises(ValueError, match="lambda_prime"):
            _calibrate(bad, **_cora())
