"""Smoke tests of examples/progap_cora.py: ``--quick`` (one epsilon, one run) on a graph as PyG may load
one (self-loops, duplicate and one-directional entries, unknown labels) and on one without a public split
with ``--split per-class`` and ``--delta``; rows go to the CSV as they finish."""
from __future__ import annotations

import csv

from conftest import MESSY_EDGES


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_quick_on_a_messy_graph(messy, run_example):
    out, _, out_dir = run_example("progap_cora", "--quick", "--dataset", messy, "--epsilons", "1", "--runs", "1")
    assert f"Messy: 90 nodes (12 unlabelled, in no split), {MESSY_EDGES} undirected edges (cleaned); " \
           f"delta = 1/|E| = 1/{MESSY_EDGES}" in out
    assert "random split 7 / 56 / 15" in out  # 10% / rest / 20% of the 78 labelled nodes
    rows = _rows(out_dir / "progap_messy_random_quick.csv")
    assert [r["method"] for r in rows] == ["ProGAP", "LPGNet", "GAP"]
    assert all(float(r["delta"]) == 1 / MESSY_EDGES and 0.99 <= float(r["epsilon_spent"]) <= 1.0 for r in rows)
    assert [r["configs_searched"] for r in rows] == ["3", "1", "1"]  # the quick grids


def test_per_class_split_and_delta_flag(odd, run_example):
    out, _, out_dir = run_example("progap_cora", "--quick", "--dataset", odd, "--epsilons", "2", "--runs", "1",
                                  "--split", "per-class", "--delta", "1e-4", "--no-gap")
    assert "(--delta 0.0001 used instead)" in out and "per-class split 60 / 10 / 20" in out
    rows = _rows(out_dir / "progap_odd_per-class_quick.csv")
    assert [r["method"] for r in rows] == ["ProGAP", "LPGNet"] and all(float(r["delta"]) == 1e-4 for r in rows)
