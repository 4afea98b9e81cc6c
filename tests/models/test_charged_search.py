"""search_progap(tuning=...): one charged event for the whole search, registered before any trial."""
import math

import pytest
import torch

from pyg_private import PrivacyAccountant
from pyg_private.accounting import PrivacyBudgetExceeded
from pyg_private.accounting.hyperparameter_tuning import TruncatedNegativeBinomial, tuning_event
from pyg_private.models import ProGAPConfig, search_progap
from pyg_private.models.progap import _planned_events, progap_noise_multiplier

from test_recipe_inputs import _graph

GRID = [ProGAPConfig(K=1, epochs=5), ProGAPConfig(K=2, epochs=5)]


def test_the_charged_search_is_one_event_with_the_theorem_cost():
    acct = PrivacyAccountant()
    dist = TruncatedNegativeBinomial.geometric(3.0)
    config, runs = search_progap([_graph()], GRID, epsilon=1.0, delta=1e-3, seeds=[None], tuning=dist,
                                 accountant=acct)
    (event,) = acct.events  # the trials ran on scratch ledgers
    assert event.unit.value == "edge" and config in GRID + [None]
    assert len(runs) <= 1
    costs = [_planned_events(progap_noise_multiplier(epsilon=1.0, delta=1e-3, config=c), config=c, level="edge",
                             num_train=1) for c in GRID]
    expected = tuning_event(max(costs, key=lambda ev: sum(e.mu ** 2 for e in ev)), distribution=dist)
    assert acct.epsilon("edge", 1e-3) == pytest.approx(_eps(expected), rel=1e-9)
    single = PrivacyAccountant()
    for e in costs[0]:
        single.register(e)
    assert acct.epsilon("edge", 1e-3) > single.epsilon("edge", 1e-3)  # tuning costs more than one run


def _eps(event):
    a = PrivacyAccountant()
    a.register(event)
    return a.epsilon("edge", 1e-3)


def test_a_search_that_cannot_fit_runs_nothing():
    acct = PrivacyAccountant(budget={"edge": (1.5, 1e-3)})
    with pytest.raises(PrivacyBudgetExceeded):
        search_progap([_graph()], GRID, epsilon=1.0, delta=1e-3, seeds=[None],
                      tuning=TruncatedNegativeBinomial.geometric(10.0), accountant=acct)
    assert acct.events == () or len(acct.events) == 0


def test_a_charged_search_refuses_several_runs_of_one_graph():
    with pytest.raises(ValueError, match="one graph"):
        search_progap([_graph(), _graph()], GRID, epsilon=1.0, delta=1e-3, seeds=[0, 1],
                      tuning=TruncatedNegativeBinomial.geometric(3.0), accountant=PrivacyAccountant())


def test_search_caribou_charges_one_event_too():
    from pyg_private.models import CaribouConfig, search_caribou

    acct = PrivacyAccountant()
    grid = [CaribouConfig("gap", K=1, epochs=5), CaribouConfig("caribou", K=2, epochs=5)]
    config, runs = search_caribou([_graph()], grid, epsilon=1.0, delta=1e-3, seeds=[None],
                                  tuning=TruncatedNegativeBinomial.geometric(2.0), accountant=acct)
    assert len(acct.events) == 1 and config in grid + [None] and len(runs) <= 1
    with pytest.raises(ValueError, match="mlp"):
        search_caribou([_graph()], [CaribouConfig("mlp")], epsilon=1.0, delta=1e-3, seeds=[None],
                       tuning=TruncatedNegativeBinomial.geometric(2.0), accountant=acct)
