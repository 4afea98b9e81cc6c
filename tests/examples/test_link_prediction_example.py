"""Smoke tests of examples/link_prediction.py: ``--quick`` on a graph as PyG may load one (self-loops,
duplicate and one-directional entries, unknown labels), every anchor in the CSV as it finishes, the
delta rule, randomized response skipped with its reason above ``--rr-limit``."""
from __future__ import annotations

import csv

from conftest import MESSY_EDGES


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_quick_on_a_messy_graph(messy, run_example):
    out, _, out_dir = run_example("link_prediction", "--quick", "--dataset", messy, "--epsilons", "1")
    assert f"{MESSY_EDGES} undirected edges (cleaned); delta = 1/|E| = {1 / MESSY_EDGES:.3g}" in out
    rows = _rows(out_dir / "link_prediction_messy_quick.csv")
    methods = [(r["method"], r["epsilon"]) for r in rows]
    for expected in [("selected", "1.0"), ("private decoder", "1.0"), ("release cosine", "1.0"),
                     ("encoder-free decoder", "1.0"), ("selected", "inf"), ("feature cosine", "0"),
                     ("randomized response", "1.0"), ("GCN (not private)", "inf")]:
        assert methods.count(expected) == 1, expected
    selected = next(r for r in rows if r["method"] == "selected" and r["epsilon"] == "1.0")
    assert float(selected["delta"]) == 1 / MESSY_EDGES and 0.99 <= float(selected["epsilon_spent"]) <= 1.0
    assert selected["candidate"] in ("private decoder", "release cosine", "encoder-free decoder", "feature cosine")
    assert all(0.0 <= float(r["auc"]) <= 1.0 for r in rows if r["auc"])
    assert "summary: test ROC-AUC" in out and "best edge-free predictor" in out


def test_randomized_response_skipped_above_the_limit(messy, run_example):
    out, _, out_dir = run_example("link_prediction", "--quick", "--dataset", messy, "--epsilons", "1",
                                  "--rr-limit", "10", "--no-gcn")
    rr = [r for r in _rows(out_dir / "link_prediction_messy_quick.csv") if r["method"] == "randomized response"]
    assert len(rr) == 1 and rr[0]["auc"] == "" and "expected flipped-in pairs > --rr-limit" in rr[0]["note"]
    assert "GCN" not in out
