"""Smoke tests of examples/cora_gcon.py (``--smoke``: one configuration of GCON and GAP, 1 run) on Cora
(skipped without the offline files) and on a graph it has never seen (isolated nodes, all-zero
feature rows; the split rule scales to its 90 nodes)."""
from __future__ import annotations

import csv
import math

from conftest import MESSY_EDGES, plotted


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _check(out, out_dir, stem):
    rows = _rows(out_dir / f"{stem}_gcon_smoke.csv")
    assert [r["method"] for r in rows] == ["GCN (non-private)", "MLP", "GCON", "GAP"]
    assert math.isinf(float(rows[0]["epsilon"])) and rows[2]["epsilon"] == rows[3]["epsilon"] == "1.0"
    assert 0.0 < float(rows[2]["epsilon_spent"]) <= 1.0 and 0.99 <= float(rows[3]["epsilon_spent"]) <= 1.0
    assert all(0.0 <= float(r["test_mean"]) <= 100.0 for r in rows)
    assert plotted(out, out_dir / f"{stem}_gcon_smoke.png")


def test_smoke_on_cora(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, out_dir = run_example("cora_gcon", "--smoke")
    assert "split 140 / 500 / 1000" in out and "\r" not in out
    assert "Cora: 2708 nodes, 5278 undirected edges (cleaned); delta = 1/|E| = 1/5278" in out
    _check(out, out_dir, "cora")


def test_smoke_on_an_unseen_graph(odd, run_example):
    out, _, out_dir = run_example("cora_gcon", "--smoke", "--dataset", odd)
    assert "split 60 / 10 / 20" in out  # 20 per class, then rest // 3 and the rest, capped at 1000
    _check(out, out_dir, "odd")


def test_quick_on_a_messy_graph(messy, run_example):
    """``--quick`` (one epsilon, one run) on a graph with self-loops, duplicate and one-directional entries
    and unknown labels: cleaned first (delta = 1/|E| of the simple graph), the split over the labelled nodes."""
    out, _, out_dir = run_example("cora_gcon", "--quick", "--dataset", messy, "--epsilons", "1", "--runs", "1")
    assert f"Messy: 90 nodes (12 unlabelled, in no split), {MESSY_EDGES} undirected edges (cleaned); " \
           f"delta = 1/|E| = 1/{MESSY_EDGES}" in out
    assert "split 60 / 6 / 12" in out  # 78 labelled nodes: 20 per class, then 18 // 3 and the rest
    rows = _rows(out_dir / "messy_gcon_quick.csv")
    assert [r["method"] for r in rows] == ["GCN (non-private)", "MLP", "GCON", "GAP"]
    assert 0.0 < float(rows[2]["epsilon_spent"]) <= 1.0 and 0.99 <= float(rows[3]["epsilon_spent"]) <= 1.0
