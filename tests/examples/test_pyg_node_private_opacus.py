"""Smoke test of examples/pyg_node_private_opacus.py in a tiny mode on Cora (skipped when the offline data is
absent): it runs, prints the accuracies and the accountant's report, and the report shows the aggregation and
the DP-SGD steps in one node-level ledger."""
from __future__ import annotations

import re


def test_node_private_opacus(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, _ = run_example("pyg_node_private_opacus", "--epochs", "1", "--reference-epochs", "5", "--calibration",
                                    "renyi", "--epsilon", "4", "--aggregation-epsilon", "1", out=False)
    rows = dict(re.findall(r"^(linear on x \(no edges\), DP-SGD|ContractiveGraphLayer\(node\) \+ linear, DP-SGD)"
                           r"\s+(\d+\.\d+)", out, flags=re.M))
    assert len(rows) == 2 and all(float(eps) <= 4.0 for eps in rows.values())
    # the aggregation and one event per DP-SGD step (1 epoch of ceil(1208 / 256) = 5 steps), one ledger
    assert "(6 events: the aggregation and one per DP-SGD step)" in out
    assert re.search(r"^node\s+[\d.]+\s+1e-05\s+6\s+\(4, 1e-05\)", out, flags=re.M)
