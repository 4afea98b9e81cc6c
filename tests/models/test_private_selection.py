"""select_privately: random search with a random number of trials, charged once, before anything runs."""
import math
import random

import numpy as np
import pytest
import torch

from pyg_private.accounting import (
    PrivacyAccountant,
    PrivacyBudgetExceeded,
    approximate_dp_event,
    gdp_event,
    subsampled_gaussian_event,
)
from pyg_private.accounting.mechanism_events import pure_dp_event
from pyg_private.accounting.hyperparameter_tuning import Poisson, TruncatedNegativeBinomial, tuning_event
from pyg_private.mechanisms.randomness import secure_mode
from pyg_private.models.selection import PrivateSelection, TrialCostExceeded, select_on_validation, select_privately

GRID = [0.1, 0.7, 0.3, 0.5]
COST = [gdp_event(unit="edge", mu=1.0, name="train")]


class Recorder:
    """run_one that charges one 1-GDP release to its ledger, then 'draws noise' (logged)."""

    def __init__(self, accountant=None, cost=None):
        self.accountant = accountant
        self.cost = cost or (lambda config: [gdp_event(unit="edge", mu=1.0, name="train")])
        self.log = []

    def __call__(self, config, ledger):
        if self.accountant is not None:  # the search's event is on the caller's ledger before any trial
            assert len(self.accountant) == 1 and self.accountant.events[0].mechanism == "hyperparameter_tuning"
        for event in self.cost(config):
            ledger.register(event)
        self.log.append(("noise", config))
        return {"config": config, "val": config}


def test_selects_the_best_trial_and_charges_once():
    acct = PrivacyAccountant()
    rec = Recorder(acct)
    dist = TruncatedNegativeBinomial.geometric(20)
    out = select_privately(GRID, rec, lambda r: r["val"], distribution=dist, trial_cost=COST, accountant=acct,
                           generator=torch.Generator().manual_seed(3))
    assert isinstance(out, PrivateSelection)
    config, run, k = out
    assert k == len(rec.log) >= 1
    tried = [c for _, c in rec.log]
    assert config == max(tried) and run["config"] == config
    assert len(acct) == 1
    (event,) = acct.events
    assert event == tuning_event(COST, distribution=dist, name="hyperparameter_tuning", params={"candidates": 4})
    assert event.params["expected_trials"] == pytest.approx(20)
    # the same seed gives the same trials (reproducible; a known seed voids the guarantee)
    rec2 = Recorder()
    again = select_privately(GRID, rec2, lambda r: r["val"], distribution=dist, trial_cost=COST,
                             accountant=PrivacyAccountant(), generator=torch.Generator().manual_seed(3))
    assert rec2.log == rec.log and again.trials == k


def test_candidates_are_uniform_with_replacement():
    rec = Recorder()
    counts = {c: 0 for c in GRID}
    rng = random.Random(7)
    for _ in range(40):
        select_privately(GRID, rec, lambda r: r["val"], distribution=TruncatedNegativeBinomial.geometric(25),
                         trial_cost=COST, accountant=PrivacyAccountant(), generator=rng)
    for _, c in rec.log:
        counts[c] += 1
    n = len(rec.log)
    assert n > 400
    for c in GRID:  # each candidate within 5 standard errors of n / 4
        assert abs(counts[c] - n / 4) < 5 * math.sqrt(n * 0.25 * 0.75)


def test_budget_refusal_runs_nothing():
    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-5)})
    rec = Recorder()
    with pytest.raises(PrivacyBudgetExceeded):
        select_privately(GRID, rec, lambda r: r["val"], distribution=TruncatedNegativeBinomial.geometric(10),
                         trial_cost=COST, accountant=acct)
    assert rec.log == [] and len(acct) == 0


def test_costlier_candidate_is_refused_before_its_noise():
    acct = PrivacyAccountant()

    def cost(config):
        return [gdp_event(unit="edge", mu=2.0 if config == "big" else 1.0, name="train")]

    rec = Recorder(cost=cost)
    with pytest.raises(TrialCostExceeded, match="declared per-trial cost"):
        select_privately(["big"], rec, lambda r: 0.0, distribution=TruncatedNegativeBinomial.geometric(3),
                         trial_cost=COST, accountant=acct, generator=random.Random(0))
    assert rec.log == []  # refused at registration: its noise was never drawn
    assert len(acct) == 1  # the search's charge stands
    assert issubclass(TrialCostExceeded, PrivacyBudgetExceeded)


def test_a_trial_of_several_events_is_composed_by_the_accountants_rule():
    cost = [gdp_event(unit="node", mu=0.5, name="aggregation"),
            subsampled_gaussian_event(noise_multiplier=1.5, sample_rate=0.1, steps=20, unit="node")]
    acct = PrivacyAccountant()
    calls = []

    def run_one(config, ledger):
        ledger.register(cost[0])
        for _ in range(config):  # a cheaper candidate (fewer steps) is dominated: accepted
            ledger.register(subsampled_gaussian_event(noise_multiplier=1.5, sample_rate=0.1, steps=1, unit="node"))
        calls.append(config)
        return config

    out = select_privately([10, 20], run_one, float, distribution=Poisson(5.0), trial_cost=cost, accountant=acct,
                           generator=np.random.default_rng(2))
    assert out.trials == len(calls) and (out.config == max(calls) if calls else out.config is None)
    assert acct.events[0].unit.value == "node"
    with pytest.raises(TrialCostExceeded):  # 21 steps exceed the declared 20 at some order
        select_privately([21], run_one, float, distribution=TruncatedNegativeBinomial.geometric(2), trial_cost=cost,
                         accountant=PrivacyAccountant(), generator=random.Random(0))


@pytest.mark.parametrize("event,match", [(gdp_event(unit="node", mu=0.1, name="other"), "unit"),
                                         (approximate_dp_event(unit="edge", epsilon=0.1, delta=1e-9), "RDP curve")])
def test_trial_ledger_refuses_other_units_and_curveless_events(event, match):
    def run_one(config, ledger):
        ledger.register(event)
        raise AssertionError("released after a refused registration")

    with pytest.raises(TrialCostExceeded, match=match):
        select_privately(GRID, run_one, float, distribution=TruncatedNegativeBinomial.geometric(2), trial_cost=COST,
                         accountant=PrivacyAccountant(), generator=random.Random(0))


def test_check_is_refused_like_register():
    def run_one(config, ledger):
        with pytest.raises(TrialCostExceeded):
            ledger.check(gdp_event(unit="edge", mu=1.5, name="too much"))
        ledger.register(COST[0])
        return config

    select_privately(GRID, run_one, float, distribution=TruncatedNegativeBinomial.geometric(2), trial_cost=COST,
                     accountant=PrivacyAccountant(), generator=random.Random(0))


def test_trial_that_charges_nothing_is_an_error():
    with pytest.raises(RuntimeError, match="charged nothing"):
        select_privately(GRID, lambda c, ledger: c, float, distribution=TruncatedNegativeBinomial.geometric(2),
                         trial_cost=COST, accountant=PrivacyAccountant(), generator=random.Random(0))


def test_ties_go_to_the_earlier_grid_position_and_nan_is_worst():
    rec = Recorder()
    out = select_privately(GRID, rec, lambda r: 1.0, distribution=TruncatedNegativeBinomial.geometric(30),
                           trial_cost=COST, accountant=PrivacyAccountant(), generator=random.Random(5))
    tried = {c for _, c in rec.log}
    assert out.config == min(tried, key=GRID.index)
    rec = Recorder()
    out = select_privately(GRID, rec, lambda r: math.nan if r["val"] == 0.7 else r["val"],
                           distribution=TruncatedNegativeBinomial.geometric(30), trial_cost=COST,
                           accountant=PrivacyAccountant(), generator=random.Random(5))
    assert out.config == max(c for _, c in rec.log if c != 0.7)


def test_poisson_may_select_nothing():
    acct = PrivacyAccountant()
    rec = Recorder()
    rng = random.Random(0)
    outs = [select_privately(GRID, rec, lambda r: r["val"], distribution=Poisson(0.05), trial_cost=COST,
                             accountant=acct, generator=rng) for _ in range(5)]
    assert any(o == (None, None, 0) for o in outs)
    assert len(acct) == 5  # charged whether or not a trial ran


def test_arguments_are_checked_before_anything():
    acct = PrivacyAccountant()
    rec = Recorder()
    geo = TruncatedNegativeBinomial.geometric(3)
    with pytest.raises(ValueError, match="empty"):
        select_privately([], rec, float, distribution=geo, trial_cost=COST, accountant=acct)
    with pytest.raises(TypeError, match="distribution"):
        select_privately(GRID, rec, float, distribution=3, trial_cost=COST, accountant=acct)
    with pytest.raises(TypeError, match="accountant"):
        select_privately(GRID, rec, float, distribution=geo, trial_cost=COST, accountant=None)
    with pytest.raises(TypeError, match="generator"):
        select_privately(GRID, rec, float, distribution=geo, trial_cost=COST, accountant=acct, generator=3)
    with pytest.raises(ValueError, match="local"):
        select_privately(GRID, rec, float, distribution=geo, accountant=acct,
                         trial_cost=[pure_dp_event(unit="local", epsilon=1.0, num_nodes=3)])
    with secure_mode():
        with pytest.raises(ValueError, match="secure_mode"):
            select_privately(GRID, rec, float, distribution=geo, trial_cost=COST, accountant=acct,
                             generator=torch.Generator().manual_seed(0))
    assert rec.log == [] and len(acct) == 0


def test_default_generator_is_the_os():
    out = select_privately(GRID, Recorder(), lambda r: r["val"], distribution=TruncatedNegativeBinomial.geometric(2),
                           trial_cost=COST, accountant=PrivacyAccountant())
    assert out.trials >= 1 and out.config in GRID


def test_select_on_validation_unchanged():
    config, runs = select_on_validation([1, 3, 2], lambda c: [c, c + 1], lambda r: r)
    assert config == 3 and runs == [3, 4]
