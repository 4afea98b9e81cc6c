"""Smoke tests of examples/audit_cora.py (``--smoke``: epsilon {1, inf}, 20 canaries, 4 attack edges) on
Cora (skipped without the offline files) and, noiseless, on a graph it has never seen (no split,
isolated nodes, all-zero feature rows): every row is written, and no private component's lower bound
exceeds its claim."""
from __future__ import annotations

import csv
import math


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _check(path, epsilons):
    rows = _rows(path)
    # 2 PyG references, 3 targets x epsilons x (LinkTeller + canaries), 2 + epsilons membership rows
    assert len(rows) == 2 + 3 * epsilons * 2 + 2 + epsilons
    for r in rows:
        if r["epsilon_lower_bound"] and math.isfinite(float(r["claimed_epsilon"])):
            assert float(r["epsilon_lower_bound"]) <= float(r["claimed_epsilon"])
    return rows


def test_smoke_on_cora(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, out_dir = run_example("audit_cora", "--smoke")
    _check(out_dir / "audit_cora_smoke.csv", 2)
    assert "Cora: 2708 nodes, 5278 undirected edges (cleaned); delta = 1/|E| = 1/5278" in out
    assert "0 violation(s) of a claimed epsilon." in out


def test_smoke_on_an_unseen_graph(odd, run_example):
    # the noiseless path only (the private path, whose node-level calibration takes seconds, runs on Cora)
    out, _, out_dir = run_example("audit_cora", "--smoke", "--dataset", odd, "--epsilons", "inf")
    rows = _check(out_dir / "audit_odd_smoke.csv", 1)
    assert "declared max_degree" in out
    canary = [r for r in rows if r["attack"] == "canary edges"]
    assert len(canary) == 3 and all(float(r["auc"]) >= 0.5 for r in canary)  # no noise: the canaries show


def test_quick_on_a_messy_graph(messy, run_example):
    """``--quick``, noiseless, on a graph with self-loops, duplicate and one-directional entries and unknown
    labels: cleaned, audited on its labelled part, the 200 canaries cut to what 78 nodes hold."""
    out, _, out_dir = run_example("audit_cora", "--quick", "--dataset", messy, "--epsilons", "inf")
    assert "Messy (the subgraph of its 78 labelled nodes; 12 unlabelled left out): 78 nodes" in out
    assert "19 canaries x 2 runs" in out  # 78 // 4
    _check(out_dir / "audit_messy_quick.csv", 1)
