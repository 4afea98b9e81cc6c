"""Contract tests of PrivacyAccountant: composition rules, budgets, atomicity, persistence."""
import json
import math

import numpy as np
import pytest
import torch

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import (
    DEFAULT_ORDERS,
    Unit,
    approximate_dp_event,
    gaussian_event,
    gdp_delta,
    gdp_epsilon,
    gdp_event,
    laplace_event,
    randomized_response_event,
    rdp_event,
    rdp_to_dp,
    subsampled_gaussian_event,
)
from pyg_private.mechanisms import LaplaceMechanism


def test_two_gdp_events_compose_exactly():
    acct = PrivacyAccountant()
    acct.register(gaussian_event(unit="edge", sensitivity=1.0, noise_std=1.0))
    acct.register(gdp_event(unit="edge", mu=1.0, name="chain"))
    comp = acct.composition("edge")
    assert comp.all_gdp
    assert comp.mu == pytest.approx(math.sqrt(2.0), rel=1e-15)
    eps = acct.epsilon("edge", delta=1e-5)
    # the exact GDP epsilon: delta(eps) hits 1e-5 and eps is tight
    assert gdp_delta(mu=math.sqrt(2.0), epsilon=eps) <= 1e-5
    assert gdp_delta(mu=math.sqrt(2.0), epsilon=eps * (1 - 1e-9)) > 1e-5
    assert eps == pytest.approx(6.57297006703, rel=1e-9)
    # exact GDP is tighter than converting the RDP curve alpha*mu^2/2
    rdp_eps, _ = rdp_to_dp(orders=DEFAULT_ORDERS[:-1], rdp=np.array(DEFAULT_ORDERS[:-1]) * 1.0, delta=1e-5)
    assert eps < rdp_eps


def test_laplace_order_infinity_is_the_ratio():
    for r in (0.01, 0.5, 3.0):
        event = laplace_event(unit="edge", sensitivity=2.0 * r, scale=2.0)
        assert event.orders[-1] == math.inf and event.rdp[-1] == r
        acct = PrivacyAccountant()
        acct.register(event)
        assert acct.pure_epsilon("edge") == r
        assert acct.epsilon("edge", 1e-6) <= r


def test_approximate_event_adds_epsilon_and_splits_delta():
    acct = PrivacyAccountant()
    acct.register(approximate_dp_event(unit="edge", epsilon=1.0, delta=1e-6, name="gcon"))
    acct.register(gaussian_event(unit="edge", sensitivity=1.0, noise_std=2.0))
    basic = 1.0 + gdp_epsilon(mu=0.5, delta=1e-5 - 1e-6)
    eps = acct.epsilon("edge", 1e-5)
    # the PLD of the dominating (1, 1e-6) pair with the Gaussian beats basic composition,
    # and can never beat the Gaussian alone at the delta left to it
    assert gdp_epsilon(mu=0.5, delta=1e-5 - 1e-6) < eps < basic
    assert "PLD" in acct.report(delta=1e-5)["edge"]["conversion"]
    assert acct.epsilon("edge", 1e-7) == math.inf  # cannot cover the approximate event's 1e-6


def test_mixed_gdp_and_rdp_sum_curves():
    acct = PrivacyAccountant(pld=False)  # the Rényi/GDP rules alone
    lap = laplace_event(unit="node", sensitivity=1.0, scale=4.0)
    acct.register(lap)
    acct.register(gaussian_event(unit="node", sensitivity=1.0, noise_std=3.0))
    comp = acct.composition("node")
    assert not comp.all_gdp
    orders, total = comp.rdp_curve()
    finite = np.isfinite(orders)
    np.testing.assert_allclose(total[finite], np.array(lap.rdp)[finite] + orders[finite] / 18.0, rtol=1e-12)
    assert total[~finite][0] == math.inf  # a Gaussian is not pure DP
    eps = acct.epsilon("node", 1e-5)
    by_rdp = rdp_to_dp(orders=orders, rdp=total, delta=1e-5)[0]
    by_split = 0.25 + gdp_epsilon(mu=1 / 3, delta=1e-5)  # pure Laplace summed + exact GDP
    assert eps == pytest.approx(min(by_rdp, by_split), rel=1e-12)
    tight = PrivacyAccountant()
    tight.register(lap)
    tight.register(gaussian_event(unit="node", sensitivity=1.0, noise_std=3.0))
    assert tight.epsilon("node", 1e-5) <= eps


def test_never_looser_than_basic_composition_of_pure_and_gdp_parts():
    # pure events plus a Gaussian: the split bound (sum of pure eps + exact GDP) is valid
    acct = PrivacyAccountant(pld=False)
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=4.0))
    acct.register(randomized_response_event(unit="edge", epsilon=1.0))
    acct.register(gaussian_event(unit="edge", sensitivity=1.0, noise_std=8.0))
    basic = 0.25 + 1.0 + gdp_epsilon(mu=1 / 8, delta=1e-6)
    assert acct.epsilon("edge", 1e-6) <= basic * (1 + 1e-12)
    assert "pure events summed" in acct.report(delta=1e-6)["edge"]["conversion"]
    # many small Laplace releases: RDP composition wins over summing pure epsilons
    acct = PrivacyAccountant(pld=False)
    for _ in range(50):
        acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=50.0))
    assert acct.pure_epsilon("edge") == pytest.approx(1.0)
    assert acct.epsilon("edge", 1e-6) < 0.7 * acct.pure_epsilon("edge")


def test_units_never_add_up():
    acct = PrivacyAccountant()
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=1.0))
    assert acct.epsilon("node", 1e-5) == 0.0
    assert acct.pure_epsilon("edge") == 1.0


def test_budget_refuses_before_noise_and_leaves_ledger_unchanged():
    acct = PrivacyAccountant(budget={"edge": 1.5})  # pure budget
    gen = torch.Generator().manual_seed(0)
    mech = LaplaceMechanism(1.0, epsilon=1.0, accountant=acct, generator=gen)
    mech(torch.zeros(4))
    before_state = json.dumps(acct.state_dict())
    before_rng = gen.get_state().clone()
    with pytest.raises(PrivacyBudgetExceeded, match="refused"):
        mech(torch.zeros(4))
    assert json.dumps(acct.state_dict()) == before_state
    assert torch.equal(gen.get_state(), before_rng), "noise was drawn for a refused release"
    assert len(acct) == 1 and acct.pure_epsilon("edge") == 1.0
    # a cheaper release still fits
    LaplaceMechanism(1.0, epsilon=0.5, accountant=acct)(torch.zeros(1))
    assert acct.pure_epsilon("edge") == pytest.approx(1.5)


def test_budget_with_delta_uses_composition():
    acct = PrivacyAccountant(budget={"edge": (2.0, 1e-5)})
    ev = gaussian_event(unit="edge", sensitivity=1.0, noise_std=4.0)
    n = 0
    while True:
        try:
            acct.register(ev)
            n += 1
        except PrivacyBudgetExceeded:
            break
    # n GDP releases fit exactly when sqrt(n)/4 is within budget
    assert gdp_epsilon(mu=math.sqrt(n) / 4, delta=1e-5) <= 2.0 < gdp_epsilon(mu=math.sqrt(n + 1) / 4, delta=1e-5)
    assert acct.epsilon("edge") <= 2.0
    # approximate deltas that no longer fit the budget's delta are refused too
    with pytest.raises(PrivacyBudgetExceeded):
        acct.register(approximate_dp_event(unit="edge", epsilon=1e-3, delta=2e-5))


def test_rejected_event_leaves_state_exact():
    acct = PrivacyAccountant()
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=2.0))
    state = json.dumps(acct.state_dict())
    bad = rdp_event(unit="edge", orders=(2.55, 3.55), rdp=(0.1, 0.2), name="off-grid")
    with pytest.raises(ValueError, match="share none"):
        acct.register(bad)
    with pytest.raises(TypeError):
        acct.register({"name": "not an event"})
    assert json.dumps(acct.state_dict()) == state


def test_state_dict_round_trip_is_lossless():
    acct = PrivacyAccountant(budget={"edge": (8.0, 1e-5), "local": 5.0})
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=2.0, params={"note": "count"}))
    acct.register(randomized_response_event(unit="edge", epsilon=1.0))
    acct.register(gaussian_event(unit="node", sensitivity=1.0, noise_std=1.5))
    acct.register(subsampled_gaussian_event(noise_multiplier=1.1, sample_rate=0.01, steps=10))
    acct.register(approximate_dp_event(unit="edge", epsilon=0.5, delta=1e-7))
    acct.register(laplace_event(unit="local", sensitivity=2.0, scale=1.0, nodes=[0, 3, 5], num_nodes=8))
    acct.register(subsampled_gaussian_event(noise_multiplier=1.5, sample_rate=0.05, steps=20, unit="graph"))
    state = json.loads(json.dumps(acct.state_dict()))  # survives JSON
    again = PrivacyAccountant.from_state_dict(state)
    assert again.events == acct.events
    assert again.budget == acct.budget
    for unit in ("edge", "node", "local", "graph"):
        assert again.epsilon(unit, 1e-5) == acct.epsilon(unit, 1e-5)
    np.testing.assert_array_equal(again.node_epsilons(), acct.node_epsilons())
    other = PrivacyAccountant()
    other.load_state_dict(state)
    assert other.events == acct.events
    with pytest.raises(ValueError):
        PrivacyAccountant.from_state_dict({"format": "something else"})


def test_local_ledger_is_per_node():
    acct = PrivacyAccountant()
    acct.register(laplace_event(unit="local", sensitivity=2.0, scale=1.0, nodes=[0, 1, 2], num_nodes=6))
    acct.register(laplace_event(unit="local", sensitivity=1.0, scale=1.0, nodes=np.array([2, 3]), num_nodes=6))
    mask = np.zeros(6, dtype=bool)
    mask[[2, 5]] = True
    acct.register(randomized_response_event(unit="local", epsilon=0.5, nodes=mask, num_nodes=6))
    np.testing.assert_allclose(acct.node_epsilons(), [2.0, 2.0, 3.5, 1.0, 0.0, 0.5], rtol=1e-12)
    assert acct.pure_epsilon("local") == pytest.approx(3.5)
    report = acct.report(delta=1e-6)
    assert report["local"]["nodes_touched"] == 5 and report["local"]["num_nodes"] == 6
    # a per-node budget refuses only when some node would pass it
    acct.set_budget("local", 3.6)
    acct.register(laplace_event(unit="local", sensitivity=1.0, scale=1.0, nodes=[4], num_nodes=6))
    with pytest.raises(PrivacyBudgetExceeded):
        acct.register(laplace_event(unit="local", sensitivity=1.0, scale=1.0, nodes=[2], num_nodes=6))
    assert acct.pure_epsilon("local") == pytest.approx(3.5)


def test_report_is_a_table_and_a_dict():
    acct = PrivacyAccountant(budget={"edge": (4.0, 1e-6)})
    for _ in range(3):
        acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=10.0, name="count"))
    report = acct.report()
    text = str(report)
    assert text.splitlines()[0].split()[:4] == ["unit", "epsilon", "delta", "events"]
    assert "count x3" in text and "(4, 1e-06)" in text
    row = report["edge"]
    assert row["num_events"] == 3 and row["delta"] == 1e-6 and row["budget"] == (4.0, 1e-6)
    assert row["epsilon"] == acct.epsilon("edge")
    json.dumps(report.to_dict())
    assert str(PrivacyAccountant().report()) == "PrivacyAccountant: nothing spent"


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: PrivacyAccountant(budget={"edge": (0.0, 1e-5)}), "epsilon"),
        (lambda: PrivacyAccountant(budget={"edge": (1.0, 1.0)}), "delta"),
        (lambda: PrivacyAccountant(budget={"edges": 1.0}), "budget key"),
        (lambda: PrivacyAccountant().epsilon("vertex", 1e-5), "unit"),
        (lambda: PrivacyAccountant().epsilon("edge", 0.0), "delta"),
        (lambda: PrivacyAccountant().epsilon("edge", 1.5), "delta"),
        (lambda: PrivacyAccountant().epsilon("edge"), "delta"),
        (lambda: gaussian_event(unit="edge", sensitivity=1.0, noise_std=-1.0), "noise_std"),
        (lambda: laplace_event(unit="edge", sensitivity=1.0, scale=0.0), "scale"),
        (lambda: laplace_event(unit="edge", sensitivity=1.0, scale=1.0, orders=(0.5, 2.0)), "orders"),
        (lambda: rdp_event(unit="edge", orders=(1.0, 2.0), rdp=(0.0, 0.1), name="x"), "orders"),
        (lambda: approximate_dp_event(unit="edge", epsilon=-1.0, delta=1e-5), "epsilon"),
        (lambda: approximate_dp_event(unit="edge", epsilon=1.0, delta=1.0), "delta"),
        (lambda: subsampled_gaussian_event(noise_multiplier=-0.5, sample_rate=0.1), "noise_multiplier"),
        (lambda: subsampled_gaussian_event(noise_multiplier=1.0, sample_rate=0.0), "sample_rate"),
        (lambda: randomized_response_event(unit="edge", epsilon=0.0), "epsilon"),
        (lambda: laplace_event(unit="galaxy", sensitivity=1.0, scale=1.0), "unit"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_unit_enum_and_strings_agree():
    acct = PrivacyAccountant(budget={Unit.EDGE: 1.0})
    assert acct.budget == {"edge": (1.0, 0.0)}
    acct.register(laplace_event(unit=Unit.EDGE, sensitivity=1.0, scale=2.0))
    assert acct.epsilon(Unit.EDGE, 1e-5) == acct.epsilon("edge", 1e-5)


def test_pure_budget_is_reported_as_pure_dp():
    acct = PrivacyAccountant(budget={"edge": 1.0})
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=2.0))
    assert acct.epsilon("edge") == 0.5  # the budget's delta is 0
    row = acct.report()["edge"]
    assert row["delta"] == 0.0 and row["epsilon"] == 0.5 and row["budget"] == (1.0, 0.0)


def test_get_epsilon_speaks_opacus():
    acct = PrivacyAccountant()
    acct.register(gaussian_event(unit="node", sensitivity=1.0, noise_std=2.0))
    assert acct.get_epsilon(1e-5) == acct.epsilon("node", 1e-5)
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=2.0))
    with pytest.raises(ValueError, match="unit="):
        acct.get_epsilon(1e-5)
    assert acct.get_epsilon(1e-5, unit="edge") == acct.epsilon("edge", 1e-5)


def test_get_epsilon_takes_opacus_argument_order():
    acct = PrivacyAccountant(budget={"edge": (4.0, 1e-6)})
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=2.0))
    acct.register(gaussian_event(unit="node", sensitivity=1.0, noise_std=2.0))
    assert acct.get_epsilon(1e-6, unit="edge") == acct.epsilon("edge", 1e-6)
    assert acct.get_epsilon(delta=1e-5, unit="node") == acct.epsilon("node", 1e-5)
    with pytest.raises(TypeError, match=r"get_epsilon\(1e-5, unit='edge'\)"):
        acct.get_epsilon("edge", 1e-5)  # epsilon's (unit, delta) order, given to get_epsilon
    with pytest.raises(TypeError):
        acct.get_epsilon(1e-5, "edge")  # unit is keyword-only: no silent swap
    with pytest.raises(ValueError, match="delta"):
        acct.get_epsilon(0.0, unit="edge")
