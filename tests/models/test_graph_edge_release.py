"""The edge-level graph-classification recipe: one GAP release over the union of the graphs (one event on
unit "edge", nothing on "graph"), a head trained without noise; the non-private reference charges nothing;
GraphClassifier's settings and repr."""
import math

import pytest
import torch

from pyg_private import PrivacyAccountant
from pyg_private.accounting import gdp_epsilon
from pyg_private.datasets import cycles_vs_trees
from pyg_private.models import (EdgeLevelGraphConfig, GraphClassifier, run_edge_level_graph_classification)

GRAPHS = cycles_vs_trees(60, min_nodes=5, max_nodes=10, seed=4)
CFG = EdgeLevelGraphConfig(K=2, hidden=8, epochs=30)


def test_one_edge_level_release_for_all_graphs():
    acct = PrivacyAccountant()
    res = run_edge_level_graph_classification(GRAPHS[:48], GRAPHS[48:], CFG, epsilon=4.0, delta=1e-4, num_classes=2,
                                              accountant=acct, seed=0)
    (event,) = acct.events
    assert event.unit.value == "edge" and event.mechanism == "gap_aggregation" and event.params["K"] == 2
    assert res.epsilon == pytest.approx(4.0, rel=1e-9) == gdp_epsilon(mu=event.mu, delta=1e-4)
    assert res.num_edges == sum(g.edge_index.size(1) for g in GRAPHS) // 2
    assert 0.0 <= res.test_accuracy <= 1.0 and not acct.events_of("graph")


def test_the_non_private_reference_charges_nothing_and_bad_targets_are_refused():
    acct = PrivacyAccountant()
    res = run_edge_level_graph_classification(GRAPHS[:48], GRAPHS[48:], CFG, epsilon=math.inf, delta=None,
                                              num_classes=2, accountant=acct, seed=0)
    assert len(acct.events) == 0 and math.isinf(res.epsilon) and res.noise_multiplier == 0.0
    with pytest.raises(ValueError, match="epsilon"):
        run_edge_level_graph_classification(GRAPHS[:48], GRAPHS[48:], CFG, epsilon=-1.0, delta=1e-4, num_classes=2,
                                            accountant=acct)
    assert len(acct.events) == 0


def test_graph_classifier_settings_and_repr():
    model = GraphClassifier(8, 16, 3, conv="gcn", layers=3, pool="mean")
    assert repr(model) == "GraphClassifier(conv='gcn', layers=3, pool='mean', hidden=16, classes=3)"
    with pytest.raises(ValueError, match="conv"):
        GraphClassifier(8, 16, 3, conv="gat")
    with pytest.raises(ValueError, match="pool"):
        GraphClassifier(8, 16, 3, pool="max")
