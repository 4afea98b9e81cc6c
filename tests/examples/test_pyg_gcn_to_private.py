"""Smoke test of examples/pyg_gcn_to_private.py in a tiny mode on Cora (skipped when the offline data is
absent): it runs, prints the accuracies and the accountant's report, and the report shows one release for the whole
training run."""
from __future__ import annotations

import re


def test_gcn_to_private(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, _ = run_example("pyg_gcn_to_private", "--epochs", "3", "--epsilons", "2", out=False)
    assert re.search(r"GCN \(PyG examples/gcn.py, not private\)\s+-\s+\d+\.\d\s+\d+\.\d", out)
    assert re.search(r"MLP \(no edges\)\s+0\s+\d+\.\d\s+\d+\.\d", out)
    spent = re.search(r"private: ContractiveGraphLayer \+ MLP \(eps=2\)\s+(\d+\.\d+)\s+\d+\.\d\s+\d+\.\d", out)
    assert spent and 1.99 <= float(spent.group(1)) <= 2.0  # the layer's one event, calibrated to eps 2
    assert "(1 event for 3 epochs of training and evaluation)" in out
    assert re.search(r"^edge\s+2\s+1e-05\s+1\s", out, flags=re.M)  # the report: unit, eps, delta, 1 event
