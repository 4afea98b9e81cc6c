"""Smoke test of examples/graph_classification.py: ``--smoke`` (one seed, 120 synthetic graphs, 2 full-batch epochs,
epsilon 4) writes one CSV row per method as it goes, each private row at or below its target, and a TU
dataset that is not offline exits with one line instead of downloading."""
from __future__ import annotations

import csv
import math

import pytest


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_smoke_run_writes_every_method(run_example):
    out, _, out_dir = run_example("graph_classification", "--smoke")
    rows = _rows(out_dir / "graph_classification_cycles_smoke.csv")
    assert [r["method"] for r in rows] == ["DP-SGD GIN", "DP-SGD edge-free MLP", "GIN (not private)",
                                           "edge-free MLP (not private)", "edge-level GAP release"]
    for r in rows:
        eps, spent = float(r["epsilon"]), float(r["epsilon_spent"])
        assert 0.0 <= float(r["test_accuracy"]) <= 1.0
        assert math.isinf(spent) if math.isinf(eps) else 0.99 * eps <= spent <= eps
    assert float(rows[0]["delta"]) == 1e-5 and rows[0]["unit"] == "graph" and rows[0]["steps"] == "2"
    assert rows[-1]["unit"] == "edge" and float(rows[-1]["delta"]) < 1e-3
    assert "96 / 24" in out and "DP-SGD GIN" in out


def test_a_tu_dataset_that_is_not_offline_is_not_downloaded(run_example, monkeypatch, tmp_path):
    monkeypatch.setenv("PYG_PRIVATE_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        run_example("graph_classification", "--smoke", "--dataset", "TU/MUTAG")
    assert exit_info.value.code == 2
