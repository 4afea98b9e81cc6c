"""Smoke tests of examples/blogcatalog_ppr.py (``--smoke``: 5 seeds, one epsilon and eta) on BlogCatalog
(skipped without the offline files) and, with Edge-Flipping, on a small graph with isolated nodes."""
from __future__ import annotations

import csv

from conftest import plotted


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_smoke_on_blogcatalog(offline, run_example):
    offline("BlogCatalog/raw")
    out, _, out_dir = run_example("blogcatalog_ppr", "--smoke")
    rows = _rows(out_dir / "blogcatalog_ppr_smoke.csv")
    assert [r["method"] for r in rows] == ["NoisyPPRDiffusion", "DP-PushFlowCap"]
    assert all(0.99 <= float(r["spent_epsilon"]) <= 1.0 and r["seeds"] == "5" for r in rows)
    assert all(0.0 <= float(r["ndcg"]) <= 1.0 for r in rows)
    assert "BlogCatalog: 10312 nodes, 333983 edges" in out and plotted(out, out_dir / "blogcatalog_ppr_smoke.png")


def test_smoke_on_an_unseen_graph_with_edge_flipping(odd, run_example):
    _, _, out_dir = run_example("blogcatalog_ppr", "--smoke", "--dataset", odd, "--methods", "noisy", "flip",
                                "--top-k", "10", "--seeds", "20")
    rows = _rows(out_dir / "odd_ppr_smoke.csv")
    assert [r["method"] for r in rows] == ["NoisyPPRDiffusion", "Edge-Flipping"]
    assert all(0.0 <= float(r["ndcg"]) <= 1.0 and float(r["spent_epsilon"]) <= 1.0 for r in rows)
