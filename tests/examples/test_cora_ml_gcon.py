"""Smoke test of examples/cora_ml_gcon.py (``--smoke``) on Cora-ML (skipped without the offline files)."""
from __future__ import annotations

import csv


def test_smoke_on_cora_ml(offline, run_example):
    offline("CitationFull/cora_ml/raw")
    out, _, out_dir = run_example("cora_ml_gcon", "--smoke")
    assert "Cora-ML: 2995 nodes, 8158 undirected edges (cleaned); delta = 1/|E| = 1/8158" in out
    with open(out_dir / "cora_ml_gcon_smoke.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == ["GCN (non-private)", "MLP", "GCON", "GAP"]
    assert 0.0 < float(rows[2]["epsilon_spent"]) <= 1.0
