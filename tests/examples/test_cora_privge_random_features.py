"""Smoke tests of examples/cora_privge_random_features.py (``--smoke``) on Cora (skipped without the offline
files) and on a graph it has never seen."""
from __future__ import annotations

import csv


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_smoke_on_cora(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, out_dir = run_example("cora_privge_random_features", "--smoke")
    rows = _rows(out_dir / "cora_privge_random_features_smoke.csv")
    assert [r["features"] for r in rows] == ["sparse k=20 uniform", "real features"]
    assert all(r["runs"] == "1" and 0.0 <= float(r["test_mean"]) <= 100.0 for r in rows)
    assert "Cora: 2708 nodes, 1433 features" in out


def test_smoke_on_an_unseen_graph(odd, run_example):
    _, _, out_dir = run_example("cora_privge_random_features", "--smoke", "--dataset", odd, "--runs", "2")
    rows = _rows(out_dir / "odd_privge_random_features_smoke.csv")
    assert [r["runs"] for r in rows] == ["2", "2"] and len(rows[0]["test_runs"].split(";")) == 2


def test_smoke_on_a_messy_graph(messy, run_example):
    """Unknown labels (y = -1) are in no split; the graph is cleaned first."""
    _, _, out_dir = run_example("cora_privge_random_features", "--smoke", "--dataset", messy)
    rows = _rows(out_dir / "messy_privge_random_features_smoke.csv")
    assert [r["runs"] for r in rows] == ["1", "1"]
