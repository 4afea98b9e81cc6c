"""Smoke tests of examples/cora_privge.py (``--smoke``: HDS, one configuration per task, 1 run) on Cora
(skipped without the offline files) and on a graph it has never seen (isolated nodes, all-zero rows)."""
from __future__ import annotations

import csv

from conftest import plotted


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_smoke_on_cora(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, out_dir = run_example("cora_privge", "--smoke")
    rows = _rows(out_dir / "cora_privge_smoke.csv")
    assert [(r["task"], r["mechanism"], r["epsilon"]) for r in rows] == [("node", "HDS", "1.0"), ("link", "HDS", "1.0")]
    assert all(float(r["epsilon_spent_per_node"]) == 1.0 for r in rows)  # every node charged exactly epsilon
    assert rows[1]["paper_mean"] == "82.4"  # the paper's Table 2 is printed for Cora
    assert "HDS (paper)" in out and plotted(out, out_dir / "cora_privge_smoke.png")


def test_smoke_on_an_unseen_graph(odd, run_example):
    out, _, out_dir = run_example("cora_privge", "--smoke", "--dataset", odd, "--mechanisms", "hds", "laplace",
                                  "none")
    rows = _rows(out_dir / "odd_privge_smoke.csv")
    assert [(r["task"], r["mechanism"]) for r in rows] == [
        ("node", "HDS"), ("node", "LP"), ("node", "non-private"), ("link", "HDS"), ("link", "LP"),
        ("link", "non-private")]
    assert "paper" not in out and all(r["paper_mean"] == "" for r in rows if r["task"] == "link")
    assert "clamped into [0, 1]" in out


def test_quick_on_a_messy_graph(messy, run_example):
    """``--quick`` (HDS and the non-private run, one run) on a graph with self-loops, duplicate and
    one-directional entries and unknown labels: cleaned first, the node split over the labelled nodes."""
    out, _, out_dir = run_example("cora_privge", "--quick", "--dataset", messy, "--mechanisms", "hds", "none",
                                  "--runs", "1")
    assert "Messy: 90 nodes (12 unlabelled, in no split), 336 undirected edges (cleaned)" in out
    assert "pure epsilon-LDP, no delta" in out
    rows = _rows(out_dir / "messy_privge_quick.csv")
    assert [(r["task"], r["mechanism"]) for r in rows] == [("node", "HDS"), ("node", "non-private"),
                                                          ("link", "HDS"), ("link", "non-private")]
