"""The unit "graph" (one whole graph of a graph dataset added or removed) everywhere the accountant
handles units: events, budgets, reports, state_dict and the persistent ledger, parallel groups (checked
on graph identities only), calibration, the Opacus bridge; and it never adds up with another unit."""
import json
import os
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import (OpacusAccountant, PersistentPrivacyAccountant, Unit, as_unit,
                                    dp_sgd_noise_multiplier, gaussian_event, gdp_epsilon, laplace_event,
                                    subsampled_gaussian_event)
from pyg_private.accounting.parallel import OverlappingPartsError, UncheckedPartitionWarning

DELTA = 1e-5
SGD = subsampled_gaussian_event(noise_multiplier=1.2, sample_rate=0.05, steps=40, unit="graph", name="graph_dp_sgd")


def test_the_unit_exists_and_parses():
    assert as_unit("graph") is Unit.GRAPH and str(Unit.GRAPH) == "graph"
    assert [u.value for u in Unit] == ["edge", "node", "local", "graph"]
    with pytest.raises(ValueError, match="'graph'"):
        as_unit("graphs")
    with pytest.raises(ValueError, match="'graph'"):
        subsampled_gaussian_event(noise_multiplier=1.0, sample_rate=0.1, unit="local")


def test_graph_costs_never_add_to_other_units_and_are_reported():
    acct = PrivacyAccountant(budget={"graph": (3.0, DELTA)})
    acct.register(gaussian_event(unit="node", sensitivity=1.0, noise_std=1.0))
    node = acct.epsilon("node", DELTA)
    acct.register(SGD)
    alone = PrivacyAccountant()
    alone.register(SGD)
    assert acct.epsilon("graph", DELTA) == alone.epsilon("graph", DELTA) > 0
    assert acct.epsilon("node", DELTA) == node
    report = acct.report()
    assert list(report) == ["node", "graph"]
    row = report["graph"]
    assert row["num_events"] == 1 and row["budget"] == (3.0, DELTA) and row["delta"] == DELTA
    assert "graph" in str(report) and "graph_dp_sgd" in str(report)
    assert acct.get_epsilon(DELTA, unit="graph") == acct.epsilon("graph", DELTA)


def test_a_graph_budget_is_enforced_before_the_release():
    acct = PrivacyAccountant(budget={"graph": (1.0, DELTA)})
    with pytest.raises(PrivacyBudgetExceeded):
        acct.register(SGD)
    assert len(acct) == 0
    acct.register(gaussian_event(unit="edge", sensitivity=1.0, noise_std=0.5))  # another unit: no graph budget


def test_state_dict_and_persistent_ledger_keep_graph_events(tmp_path):
    acct = PrivacyAccountant(budget={"graph": (8.0, DELTA), "edge": 5.0})
    acct.register(SGD)
    acct.register(laplace_event(unit="edge", sensitivity=1.0, scale=2.0))
    state = json.loads(json.dumps(acct.state_dict()))
    again = PrivacyAccountant.from_state_dict(state)
    assert again.events == acct.events and again.budget == acct.budget
    assert again.epsilon("graph", DELTA) == acct.epsilon("graph", DELTA)
    path = os.path.join(tmp_path, "ledger.sqlite")
    shared = PersistentPrivacyAccountant(path, budget={"graph": (8.0, DELTA)})
    shared.register(SGD)
    reopened = PersistentPrivacyAccountant(path)
    assert reopened.events_of("graph") == (SGD,) and reopened.budget[Unit.GRAPH] == (8.0, DELTA)
    assert reopened.epsilon("graph", DELTA) == pytest.approx(acct.epsilon("graph", DELTA), rel=1e-12)


def _graphs(k=6):
    gen = torch.Generator().manual_seed(0)
    ring = torch.tensor([[0, 1, 2, 3, 1, 2, 3, 0], [1, 2, 3, 0, 0, 1, 2, 3]])
    return [Data(x=torch.rand(4, 3, generator=gen), edge_index=ring) for _ in range(k)]


def test_parallel_parts_of_whole_graphs_at_graph_level():
    graphs = _graphs()
    event = gaussian_event(unit="graph", sensitivity=1.0, noise_std=2.0)
    acct = PrivacyAccountant()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncheckedPartitionWarning)
        with acct.parallel("epoch") as part:
            for i, batch in enumerate(DataLoader(graphs, batch_size=2)):  # disjoint batches of whole graphs
                with part(i, batch):
                    acct.register(event)
            with part(3, graphs=[graphs[4]]), pytest.raises(OverlappingPartsError, match="graph level"):
                acct.register(event)
    assert len(acct) == 3
    assert acct.epsilon("graph", DELTA) == pytest.approx(gdp_epsilon(mu=0.5, delta=DELTA), rel=1e-9)
    # dataset indices
    acct = PrivacyAccountant()
    with acct.parallel("g") as part:
        with part(0, graphs=[0, 1]):
            acct.register(event)
        with part(1, graphs=[1, 2]), pytest.raises(OverlappingPartsError, match="holds 1 graphs"):
            acct.register(event)


def test_node_ids_cannot_show_that_graph_level_parts_are_disjoint():
    event = gaussian_event(unit="graph", sensitivity=1.0, noise_std=2.0)
    acct = PrivacyAccountant()
    with pytest.warns(UncheckedPartitionWarning, match="graph-level parts are disjoint"):
        with acct.parallel("g") as part:
            with part(0, nodes=[0, 1, 2]):
                acct.register(event)
            with part(1, nodes=[3, 4]):
                acct.register(event)


def test_dp_sgd_calibration_and_the_opacus_bridge_accept_the_graph_unit():
    acct = PrivacyAccountant()
    sigma = dp_sgd_noise_multiplier(acct, target_epsilon=2.0, target_delta=DELTA, sample_rate=0.1, steps=30,
                                    unit="graph")
    bridge = OpacusAccountant(acct, unit="graph", name="pooled_head")
    for _ in range(30):
        bridge.step(noise_multiplier=sigma, sample_rate=0.1)
    assert 2.0 * (1 - 2e-3) <= acct.epsilon("graph", DELTA) <= 2.0
    assert {e.unit for e in acct.events} == {Unit.GRAPH}
