"""Approximate-DP events as privacy profiles: GCON fits compose with everything else at any delta."""
import math
import pickle

import numpy as np
import pytest

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import (
    PrivacyEvent,
    appr_sensitivity,
    approximate_dp_event,
    calibrate_objective_perturbation,
    gdp_epsilon,
    gdp_event,
    loss_constants,
)
from pyg_private.accounting.mechanism_events import objective_perturbation_event
from pyg_private.accounting.objective_perturbation import objective_perturbation_profile


def _gcon(epsilon=1.0, delta=1e-4, regularization=1.0):
    return calibrate_objective_perturbation(
        epsilon=epsilon, delta=delta, dim=16, num_classes=7, num_rows=140,
        sensitivity=appr_sensitivity(0.2, [2, 10]), loss_constants=loss_constants("soft_margin", 7),
        regularization=regularization)


@pytest.mark.parametrize("epsilon,reg", [(1.0, 1.0), (4.0, 0.2), (0.5, 2.0), (8.0, 0.01)])
def test_profile_holds_the_calibrated_point_and_decreases(epsilon, reg):
    cal = _gcon(epsilon, 1e-4, reg)
    deltas, eps = objective_perturbation_profile(cal)
    assert list(deltas) == sorted(deltas) and cal.delta in deltas
    assert np.all(np.diff(eps) <= 0)
    assert eps[deltas.index(cal.delta)] <= epsilon * (1 + 1e-12)
    assert all(math.isfinite(e) for e in eps)  # finite down to delta = 1e-30
    assert eps[0] > eps[-1]  # smaller deltas cost more


def test_profile_matches_the_theorem_recomputed_at_each_delta():
    # the profile at delta' equals Lemmas 7-8 evaluated by hand with c_sf(delta') for the fixed mechanism
    from scipy.special import gammainccinv

    cal = _gcon(2.0, 1e-4, 0.5)
    deltas, eps = objective_perturbation_profile(cal, deltas=[1e-8, 1e-6, 1e-4, 1e-2])
    lam = cal.Lambda + cal.Lambda_prime
    for d, e in zip(deltas, eps):
        c_theta = (cal.c1 + gammainccinv(cal.d, d / cal.c) / (cal.beta * cal.n1)) / lam
        jac = cal.c * cal.d * math.log1p((2 * cal.c2 + cal.c3 * c_theta) * cal.Psi / (cal.d * cal.n1 * lam))
        noise = cal.c * (cal.c1 + cal.c2 * c_theta) * cal.Psi * cal.beta
        assert e == pytest.approx(jac + noise, rel=1e-12)


def test_report_answers_at_its_default_delta_after_a_gcon_fit():
    acct = PrivacyAccountant()
    acct.register(objective_perturbation_event(_gcon(1.0, 1e-4)))
    report = acct.report()  # default delta 1e-5, below the fit's 1e-4
    row = report["edge"]
    assert row["delta"] == 1e-5 and "requested_delta" not in row
    assert 1.0 < row["epsilon"] < 1.1
    assert acct.epsilon("edge", 1e-4) <= 1.0 + 1e-12
    str(report)


def test_shared_budget_holds_a_gcon_fit_and_a_gaussian_release():
    # the review's case: budget (8, 1e-4), a GCON fit at delta 1e-4, then a contractive release of eps ~0.1
    acct = PrivacyAccountant(budget={"edge": (8.0, 1e-4)})
    acct.register(objective_perturbation_event(_gcon(7.0, 1e-4)))
    mu = 0.03
    acct.register(gdp_event(unit="edge", mu=mu, name="contractive"))
    eps = acct.epsilon("edge")
    assert math.isfinite(eps) and eps <= 8.0
    assert eps > 7.0 * 0.9
    # a plain (eps, delta) record of the same fit would have used all the delta: refused then
    plain = PrivacyAccountant(budget={"edge": (8.0, 1e-4)})
    plain.register(approximate_dp_event(unit="edge", epsilon=7.0, delta=1e-4))
    with pytest.raises(PrivacyBudgetExceeded):
        plain.register(gdp_event(unit="edge", mu=mu, name="contractive"))


def test_report_answers_when_a_plain_event_needs_more_delta():
    acct = PrivacyAccountant()
    acct.register(approximate_dp_event(unit="edge", epsilon=1.0, delta=1e-3))
    acct.register(gdp_event(unit="edge", mu=0.5, name="g"))
    row = acct.report(delta=1e-5)["edge"]
    assert row["requested_delta"] == 1e-5 and row["min_delta"] == 1e-3
    assert row["delta"] == pytest.approx(1e-3 + 1e-5)
    assert math.isfinite(row["epsilon"])
    assert acct.epsilon("edge", 1e-5) == math.inf
    assert "requested" not in str(acct.report(delta=1e-2))


def test_two_approximate_events_compose_better_than_basic():
    acct = PrivacyAccountant()
    for _ in range(2):
        acct.register(approximate_dp_event(unit="edge", epsilon=0.5, delta=1e-6))
    eps = acct.epsilon("edge", 1e-5)
    assert eps <= 1.0 + 1e-12  # basic composition: 1.0 at delta 2e-6


def test_profile_events_round_trip_state_dict_and_pickle():
    acct = PrivacyAccountant()
    ev = objective_perturbation_event(_gcon())
    acct.register(ev)
    back = PrivacyAccountant.from_state_dict(acct.state_dict())
    assert back.events[0] == ev and back.events[0].profile == ev.profile
    assert back.epsilon("edge", 1e-6) == acct.epsilon("edge", 1e-6)
    assert pickle.loads(pickle.dumps(ev)) == ev


def test_bad_profiles_are_refused():
    with pytest.raises(ValueError, match="increase"):
        approximate_dp_event(unit="edge", epsilon=1.0, delta=1e-5, profile=((1e-6, 1e-5), (1.0, 2.0)))
    with pytest.raises(ValueError, match="increasing"):
        approximate_dp_event(unit="edge", epsilon=1.0, delta=1e-5, profile=((1e-5, 1e-6), (2.0, 1.0)))
    with pytest.raises(ValueError, match="approx"):
        PrivacyEvent(name="x", unit="edge", mechanism="m", mu=1.0, profile=((1e-5,), (1.0,)))
    with pytest.raises(ValueError, match="pld"):
        PrivacyEvent(name="x", unit="edge", mechanism="m", mu=1.0, pld=("gaussian", 0.5))


def test_gcon_calibrated_to_a_shared_budget_leaves_room_for_the_planned_release():
    from pyg_private.accounting import largest_affordable_epsilon

    acct = PrivacyAccountant(budget={"edge": (8.0, 1e-4)})
    later = gdp_event(unit="edge", mu=0.5, name="contractive")
    eps = largest_affordable_epsilon(acct, lambda e: objective_perturbation_event(_gcon(e, 1e-4)), reserve=[later])
    assert len(acct) == 0  # nothing recorded by the search
    assert 5.0 < eps < 8.0
    acct.register(objective_perturbation_event(_gcon(eps, 1e-4)))
    acct.register(later)  # still fits
    assert acct.epsilon("edge") <= 8.0 * (1 + 1e-9)
    with pytest.raises(PrivacyBudgetExceeded):  # and the search was tight: 1% more would not have fit
        fresh = PrivacyAccountant(budget={"edge": (8.0, 1e-4)})
        fresh.register(objective_perturbation_event(_gcon(eps * 1.01, 1e-4)))
        fresh.register(later)
    with pytest.raises(ValueError, match="no budget"):
        largest_affordable_epsilon(PrivacyAccountant(), lambda e: objective_perturbation_event(_gcon(e)))


def test_many_fits_in_one_ledger_compose_quickly_and_tightly():
    acct = PrivacyAccountant()
    event = objective_perturbation_event(_gcon(0.5, 1e-6, 2.0))  # Eq. 22 leaves this Lambda alone
    for _ in range(200):  # identical fits are grouped: 201 loss values, not 2^200 combinations
        acct.register(event)
    eps = acct.epsilon("edge", 1e-4)
    assert math.isfinite(eps)
    basic = PrivacyAccountant(pld=False)
    for ev in acct.events:
        basic.register(ev)
    assert 0.5 < eps < basic.epsilon("edge", 1e-4)  # the PLD of 200 pairs beats basic composition
