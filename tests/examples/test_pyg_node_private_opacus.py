"""Smoke tests of examples/pyg_node_private_opacus.py: a tiny mode on Cora (skipped when the offline data is
absent): it runs, prints the accuracies and the accountant's report, and the report shows the aggregation and
the DP-SGD steps in one node-level ledger; and ``--quick`` on a graph as PyG may load one (self-loops,
duplicate and one-directional entries, unknown labels, no public split)."""
from __future__ import annotations

import csv
import re

from conftest import MESSY_EDGES


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_node_private_opacus(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, out_dir = run_example("pyg_node_private_opacus", "--epochs", "1", "--reference-epochs", "5",
                                  "--calibration", "renyi", "--epsilon", "4", "--aggregation-epsilon", "1")
    rows = dict(re.findall(r"^(linear on x \(no edges\), DP-SGD|ContractiveGraphLayer\(node\) \+ linear, DP-SGD)"
                           r"\s+(\d+\.\d+)", out, flags=re.M))
    assert len(rows) == 2 and all(float(eps) <= 4.0 for eps in rows.values())
    # the aggregation and one event per DP-SGD step (1 epoch of ceil(1208 / 256) = 5 steps), one ledger
    assert "(6 events: the aggregation and one per DP-SGD step)" in out
    assert re.search(r"^node\s+[\d.]+\s+1e-05\s+6\s+\(4, 1e-05\)", out, flags=re.M)
    assert "declared max_degree 168; split 1208 / 500 / 1000" in out  # Cora's largest degree, PyG's "full" split
    assert len(_rows(out_dir / "cora_node_private_opacus.csv")) == 3


def test_quick_on_a_messy_graph(messy, run_example):
    out, _, out_dir = run_example("pyg_node_private_opacus", "--quick", "--dataset", messy)
    assert f"Messy: 90 nodes (12 unlabelled, in no split), {MESSY_EDGES} undirected edges (cleaned); " \
           "node level, delta = 1e-05" in out
    assert "split 60 / 6 / 12" in out  # every labelled node but GCON's validation and test sizes trains
    rows = _rows(out_dir / "messy_node_private_opacus_quick.csv")
    assert len(rows) == 3 and all(float(r["epsilon_spent"]) <= 4.0 for r in rows[:2])
    assert rows[0]["epochs"] == "10"
