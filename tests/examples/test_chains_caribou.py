"""Smoke tests of examples/chains_caribou.py: ``--smoke`` on Chain-S (generated, no files needed), with the
oracle ceiling, and on a non-chain graph with isolated nodes and all-zero feature rows."""
from __future__ import annotations

import csv

from conftest import MESSY_EDGES, plotted


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_smoke_on_chain_s(run_example):
    out, _, out_dir = run_example("chains_caribou", "--smoke")
    rows = _rows(out_dir / "chains_caribou_smoke.csv")
    assert [(r["dataset"], r["method"]) for r in rows] == [("Chain-S", "CARIBOU"), ("Chain-S", "GAP"),
                                                          ("Chain-S", "MLP")]
    assert 0.99 <= float(rows[0]["epsilon_spent"]) <= 1.0
    assert 0.0 <= float(rows[0]["oracle_ceiling"]) <= 100.0 and "oracle ceiling" in out
    assert float(rows[0]["paper_mean"]) == 78.1  # the paper's Table 9, Chain-S at epsilon 1
    assert all(float(r["delta"]) == 1 / 42 for r in rows) and "delta = 1/|E| = 1/42" in out  # Chain-S: 42 edges
    assert plotted(out, out_dir / "chains_caribou_smoke.png")


def test_smoke_on_an_unseen_graph(odd, run_example):
    out, _, out_dir = run_example("chains_caribou", "--smoke", "--datasets", odd, "--degree-floor", "2")
    rows = _rows(out_dir / "odd_caribou_smoke.csv")
    assert [r["method"] for r in rows] == ["CARIBOU", "GAP", "MLP"]
    assert rows[0]["min_degree"] == "2" and rows[0]["degree_floor"] == "True"  # enforced by the floor
    assert "oracle_ceiling" not in rows[0] and rows[0]["paper_mean"] == "nan"  # chains only / not in the paper


def test_quick_on_a_messy_graph(messy, run_example):
    """``--quick`` (one epsilon, one run) on a graph with self-loops, duplicate and one-directional entries
    and unknown labels: cleaned first (delta = 1/|E| of the simple graph), the split over the labelled nodes."""
    out, _, out_dir = run_example("chains_caribou", "--quick", "--datasets", messy, "--epsilons", "1", "--runs", "1",
                                  "--no-ceiling")
    assert f"Messy: 90 nodes (12 unlabelled, in no split), {MESSY_EDGES} undirected edges (cleaned)" in out
    rows = _rows(out_dir / "messy_caribou_quick.csv")
    assert [r["method"] for r in rows] == ["CARIBOU", "GAP", "MLP"]
    assert all(float(r["delta"]) == 1 / MESSY_EDGES for r in rows)
