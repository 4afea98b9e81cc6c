"""Rule P of the composition: privacy loss distributions through dp-accounting.

On ledgers where every event has a PLD the reported epsilon must be dp-accounting's own figure
(within 0.1%), never below its optimistic (lower) estimate, and never above the Rényi rules.
"""
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.common import DifferentialPrivacyParameters

from pyg_private import PrivacyAccountant
from pyg_private.accounting import (
    DEFAULT_ORDERS,
    approximate_dp_event,
    gaussian_event,
    gdp_epsilon,
    gdp_event,
    laplace_event,
    randomized_response_event,
    rdp_event,
    subsampled_gaussian_event,
)
from pyg_private.accounting.mechanism_events import pure_dp_event
from pyg_private.accounting.pabi import lazy_ppr_rdp


def _pld_accountant(events):
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    for ev, count in events:
        acc.compose(ev, count)
    return acc


def _ledger(events, pld=True):
    acct = PrivacyAccountant(pld=pld)
    for ev, count in events:
        for _ in range(count):
            acct.register(ev)
    return acct


def test_laplace_ledger_is_the_pld_figure():
    # the review's example: 100 Laplace releases of scale 20 at delta 1e-5 (RDP: 2.105, PLD 1.948)
    ours = _ledger([(laplace_event(unit="edge", sensitivity=1.0, scale=20.0), 100)])
    ref = _pld_accountant([(dp_accounting.LaplaceDpEvent(20.0), 100)]).get_epsilon(1e-5)
    rdp = _ledger([(laplace_event(unit="edge", sensitivity=1.0, scale=20.0), 100)], pld=False)
    assert rdp.epsilon("edge", 1e-5) == pytest.approx(2.105, abs=1e-3)
    assert ours.epsilon("edge", 1e-5) == pytest.approx(ref, rel=1e-3)
    assert ref == pytest.approx(1.948, abs=2e-3)
    assert "PLD" in ours.report(delta=1e-5)["edge"]["conversion"]


def test_mixed_laplace_gaussian_ledger_is_the_pld_figure():
    events = [(laplace_event(unit="edge", sensitivity=1.0, scale=10.0), 20),
              (gaussian_event(unit="edge", sensitivity=1.0, noise_std=8.0), 10)]
    ours = _ledger(events).epsilon("edge", 1e-6)
    ref = _pld_accountant([(dp_accounting.LaplaceDpEvent(10.0), 20),
                           (dp_accounting.GaussianDpEvent(8.0), 10)]).get_epsilon(1e-6)
    assert ours == pytest.approx(ref, rel=1e-3)
    assert ours < _ledger(events, pld=False).epsilon("edge", 1e-6)


@pytest.mark.parametrize("nm,q,steps", [(1.0, 0.01, 1000), (0.8, 0.05, 200)])
def test_dp_sgd_ledger_is_the_pld_figure(nm, q, steps):
    ev = subsampled_gaussian_event(noise_multiplier=nm, sample_rate=q, steps=steps)
    ours = _ledger([(ev, 1)]).epsilon("node", 1e-5)
    sampled = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(nm))
    ref = _pld_accountant([(sampled, steps)]).get_epsilon(1e-5)
    assert ours == pytest.approx(ref, rel=1e-3)
    assert ours < _ledger([(ev, 1)], pld=False).epsilon("node", 1e-5)


def test_randomized_response_and_pure_releases_use_the_exact_pair():
    events = [(randomized_response_event(unit="edge", epsilon=0.5), 30)]
    ours = _ledger(events).epsilon("edge", 1e-6)
    # binary RR with ratio e^0.5 has the same pair as every pure 0.5-DP release
    pair = pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(0.5, 0.0))
    ref = pair.self_compose(30).get_epsilon_for_delta(1e-6)
    assert ours == pytest.approx(ref, rel=1e-3)
    # k compositions of eps/k (HDS's k coordinates) is tighter than one pure-eps pair
    acct = PrivacyAccountant()
    acct.register(pure_dp_event(unit="edge", epsilon=4.0, compositions=20))
    single = pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(4.0, 0.0))
    assert acct.epsilon("edge", 1e-6) < 0.97 * single.get_epsilon_for_delta(1e-6)


def test_never_below_the_optimistic_pld_estimate():
    events = [(laplace_event(unit="edge", sensitivity=1.0, scale=5.0), 40),
              (gaussian_event(unit="edge", sensitivity=1.0, noise_std=4.0), 5)]
    ours = _ledger(events).epsilon("edge", 1e-5)
    opt = pld_lib.from_laplace_mechanism(5.0, pessimistic_estimate=False, use_connect_dots=False).self_compose(40)
    opt = opt.compose(pld_lib.from_gaussian_mechanism(4.0, pessimistic_estimate=False, use_connect_dots=False)
                      .self_compose(5))
    assert ours >= opt.get_epsilon_for_delta(1e-5)


def test_gdp_ledgers_stay_exact():
    acct = _ledger([(gdp_event(unit="edge", mu=0.3, name="chain"), 7)])
    exact = gdp_epsilon(mu=0.3 * math.sqrt(7), delta=1e-5)
    assert acct.epsilon("edge", 1e-5) == pytest.approx(exact, rel=1e-12)


def test_rdp_only_events_join_the_pld_as_one_pair():
    # PABI events have no PLD: they enter as one (eps_rdp(delta_r), delta_r) pair, delta_r searched
    from pyg_private.accounting import DEFAULT_ORDERS
    curve = lazy_ppr_rdp(DEFAULT_ORDERS, noise_scale=2.0, num_iterations=20, eta=0.5, alpha=0.2)
    pabi = rdp_event(unit="edge", orders=DEFAULT_ORDERS, rdp=curve, name="pabi")
    events = [(pabi, 1), (laplace_event(unit="edge", sensitivity=1.0, scale=20.0), 100)]
    tight = _ledger(events).epsilon("edge", 1e-5)
    rdp = _ledger(events, pld=False).epsilon("edge", 1e-5)
    lap_only = _ledger(events[1:]).epsilon("edge", 1e-5)
    assert lap_only < tight <= rdp * (1 + 1e-12)


@pytest.mark.parametrize("share", [0.5, 0.3, 0.1])
def test_laplace_shift_spread_over_coordinates_is_dominated_by_one_coordinate(share):
    # the PLD of an l1-sensitivity Laplace release uses the 1-D pair: check it dominates a split shift
    one = pld_lib.from_laplace_mechanism(1.0, sensitivity=1.0)
    two = pld_lib.from_laplace_mechanism(1.0, sensitivity=share, pessimistic_estimate=False,
                                         use_connect_dots=False).compose(
        pld_lib.from_laplace_mechanism(1.0, sensitivity=1.0 - share, pessimistic_estimate=False,
                                       use_connect_dots=False))
    eps = np.linspace(0.0, 1.0, 21)
    assert np.all(np.asarray(two.get_delta_for_epsilon(eps)) <= np.asarray(one.get_delta_for_epsilon(eps)) + 1e-12)


def test_local_ledger_uses_pld_per_node():
    acct = PrivacyAccountant()
    for _ in range(10):
        acct.register(pure_dp_event(unit="local", epsilon=0.5, num_nodes=4, nodes=np.array([0, 1])))
    assert acct.pure_epsilon("local") == pytest.approx(5.0)
    rdp = PrivacyAccountant(pld=False)
    for ev in acct.events:
        rdp.register(ev)
    assert acct.epsilon("local", 1e-6) <= rdp.epsilon("local", 1e-6) * (1 + 1e-12)
    assert acct.node_epsilons(1e-6)[2] == 0.0


@pytest.mark.parametrize("make", [
    lambda: gdp_event(unit="edge", mu=1e4, name="almost no noise"),
    lambda: subsampled_gaussian_event(noise_multiplier=1e-4, sample_rate=0.5, steps=3),
    lambda: laplace_event(unit="edge", sensitivity=1e3, scale=1.0),
])
def test_pairs_too_wide_to_discretise_fall_back_to_the_renyi_rules(make):
    # a PLD of these would need hundreds of GiB: they are answered by the Rényi/GDP rules
    acct = PrivacyAccountant()
    acct.register(make())
    acct.register(gaussian_event(unit="edge" if make().unit.value == "edge" else "node", sensitivity=1.0,
                                 noise_std=1.0))
    unit = acct.events[0].unit
    rdp = PrivacyAccountant.from_state_dict({**acct.state_dict(), "pld": False})
    assert acct.epsilon(unit, 1e-5) == rdp.epsilon(unit, 1e-5)


def test_many_wide_gaussians_skip_the_pld():
    acct = _ledger([(gdp_event(unit="edge", mu=15.0, name="g"), 200)])
    assert acct.epsilon("edge", 1e-5) == pytest.approx(gdp_epsilon(mu=15.0 * math.sqrt(200), delta=1e-5), rel=1e-9)


_POOL = [
    lambda: gdp_event(unit="edge", mu=0.4, name="chain"),
    lambda: gdp_event(unit="edge", mu=60.0, name="too wide for a PLD"),
    lambda: laplace_event(unit="edge", sensitivity=1.0, scale=3.0),
    lambda: randomized_response_event(unit="edge", epsilon=1.5),
    lambda: gaussian_event(unit="edge", sensitivity=1.0, noise_std=2.0),
    lambda: rdp_event(unit="edge", orders=DEFAULT_ORDERS, name="pabi",
                      rdp=lazy_ppr_rdp(DEFAULT_ORDERS, noise_scale=2.0, num_iterations=20, eta=0.5, alpha=0.2)),
    lambda: approximate_dp_event(unit="edge", epsilon=0.7, delta=1e-7),
]


@pytest.mark.parametrize("picks", [(0, 1), (1, 2, 6), (3, 5), (2, 4, 5, 6), (0, 1, 2, 3, 4, 5, 6), (6, 6, 0)])
def test_no_event_is_ever_left_out(picks):
    # adding releases never lowers the reported epsilon below any single one of them
    acct = PrivacyAccountant()
    for i in picks:
        acct.register(_POOL[i]())
    total = acct.epsilon("edge", 1e-5)
    for i in set(picks):
        alone = PrivacyAccountant()
        alone.register(_POOL[i]())
        assert total >= 0.99 * alone.epsilon("edge", 1e-5)
