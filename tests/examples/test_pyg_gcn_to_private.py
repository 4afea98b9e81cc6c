"""Smoke tests of examples/pyg_gcn_to_private.py: a tiny mode on Cora (skipped when the offline data is
absent): it runs, prints the accuracies and the accountant's report, and the report shows one release for the
whole training run at delta = 1/|E|; and ``--quick`` on a graph as PyG may load one (self-loops, duplicate
and one-directional entries, unknown labels, no public split)."""
from __future__ import annotations

import csv
import re

from conftest import MESSY_EDGES


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_gcn_to_private(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, out_dir = run_example("pyg_gcn_to_private", "--epochs", "3", "--epsilons", "2")
    assert re.search(r"GCN \(PyG examples/gcn.py, not private\)\s+-\s+\d+\.\d\s+\d+\.\d", out)
    assert re.search(r"MLP \(no edges\)\s+0\s+\d+\.\d\s+\d+\.\d", out)
    spent = re.search(r"private: ContractiveGraphLayer \+ MLP \(eps=2\)\s+(\d+\.\d+)\s+\d+\.\d\s+\d+\.\d", out)
    assert spent and 1.99 <= float(spent.group(1)) <= 2.0  # the layer's one event, calibrated to eps 2
    assert "(1 event for 3 epochs of training and evaluation)" in out
    assert "delta = 1/|E| = 1/5278" in out and "split 140 / 500 / 1000" in out  # Cora's public split
    assert re.search(r"^edge\s+2\s+0\.000189\s+1\s", out, flags=re.M)  # the report: unit, eps, delta, 1 event
    rows = _rows(out_dir / "cora_gcn_to_private.csv")
    assert [r["epsilon"] for r in rows] == ["inf", "0.0", "2.0"] and float(rows[2]["delta"]) == 1 / 5278


def test_quick_on_a_messy_graph(messy, run_example):
    out, _, out_dir = run_example("pyg_gcn_to_private", "--quick", "--dataset", messy, "--epsilons", "1")
    assert f"Messy: 90 nodes (12 unlabelled, in no split), {MESSY_EDGES} undirected edges (cleaned); " \
           f"delta = 1/|E| = 1/{MESSY_EDGES}" in out
    assert "split 60 / 6 / 12" in out  # GCON's rule over the 78 labelled nodes
    rows = _rows(out_dir / "messy_gcn_to_private_quick.csv")
    assert [r["model"] for r in rows][:2] == ["GCN (PyG examples/gcn.py, not private)", "MLP (no edges)"]
    assert 0.99 <= float(rows[2]["epsilon_spent"]) <= 1.0 and rows[2]["epochs"] == "100"
