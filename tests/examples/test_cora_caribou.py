"""Smoke tests of examples/cora_caribou.py: ``--smoke`` on Cora (skipped without the offline files) and
on a graph the example has never seen (isolated nodes, all-zero feature rows); an interrupted run keeps
the rows it finished."""
from __future__ import annotations

import csv

import pytest
from conftest import MESSY_EDGES, plotted


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _check(out, out_dir, stem, dataset):
    rows = _rows(out_dir / f"{stem}_caribou_smoke.csv")
    assert [r["method"] for r in rows] == ["CARIBOU", "GAP", "MLP", "ProGAP"]
    assert all(r["dataset"] == dataset and r["epsilon"] == "1.0" and r["min_degree"] == "0" for r in rows)
    spent = [float(r["epsilon_spent"]) for r in rows]
    assert 0.99 <= spent[0] <= 1.0 and 0.99 <= spent[1] <= 1.0 and spent[2] == 0.0 and 0.99 <= spent[3] <= 1.0  # the MLP reads no edge
    assert all(0.0 <= float(r["test_mean"]) <= 100.0 for r in rows)
    assert plotted(out, out_dir / f"{stem}_caribou_smoke.png")


def test_smoke_on_cora(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, err, out_dir = run_example("cora_caribou", "--smoke")
    assert "Cora: 2708 nodes" in out and "\r" not in out  # progress bars stay on stderr
    assert "delta = 1/|E| = 1/5278" in out  # the examples' one rule, in the header
    assert all(float(r["delta"]) == 1 / 5278 for r in _rows(out_dir / "cora_caribou_smoke.csv"))
    assert "Cora eps x method" in err and "3/3" in err  # the outermost bar, kept in a log
    _check(out, out_dir, "cora", "Cora")


def test_smoke_on_an_unseen_graph(odd, run_example):
    out, _, out_dir = run_example("cora_caribou", "--smoke", "--dataset", odd)
    assert "Odd: 90 nodes" in out and "declared {'min_degree': 0}" in out
    _check(out, out_dir, "odd", "Odd")


def test_interrupted_run_keeps_finished_rows(odd, run_example, monkeypatch, tmp_path):
    import caribou_common

    calls = []
    search = caribou_common.search_caribou

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as if the user stopped the run during the second search
        return search(*args, **kwargs)

    monkeypatch.setattr(caribou_common, "search_caribou", failing)
    with pytest.raises(KeyboardInterrupt):
        run_example("cora_caribou", "--smoke", "--dataset", odd)
    rows = _rows(tmp_path / "out" / "odd_caribou_smoke.csv")
    assert [r["method"] for r in rows] == ["CARIBOU"]


def test_gap_protocol_split(odd, run_example):
    """``--split gap``: GAP's loader, 70% / 10% / 20%, written to its own CSV."""
    out, _, out_dir = run_example("cora_caribou", "--smoke", "--dataset", odd, "--split", "gap", "--methods",
                                  "mlp", "progap")
    assert "split gap" in out
    rows = _rows(out_dir / "odd_caribou_gap70_smoke.csv")
    assert [r["method"] for r in rows] == ["MLP", "ProGAP"]
    assert rows[1]["candidates"] and all(c in "01" for c in rows[1]["candidates"].split())


def test_quick_on_a_messy_graph(messy, run_example):
    """``--quick`` (one epsilon, one run) on a graph as PyG may load one: self-loops, duplicate and
    one-directional entries (cleaned: delta = 1/|E| of the simple graph), unknown labels (in no split)."""
    out, _, out_dir = run_example("cora_caribou", "--quick", "--dataset", messy, "--epsilons", "1", "--runs", "1",
                                  "--methods", "caribou", "mlp", "progap")
    assert f"Messy: 90 nodes (12 unlabelled, in no split), {MESSY_EDGES} undirected edges (cleaned)" in out
    assert f"delta = 1/|E| = 1/{MESSY_EDGES}" in out and "split random 7 / 56 / 15" in out  # 78 labelled nodes
    rows = _rows(out_dir / "messy_caribou_quick.csv")
    assert [r["method"] for r in rows] == ["CARIBOU", "MLP", "ProGAP"]
    assert all(float(r["delta"]) == 1 / MESSY_EDGES for r in rows)
    assert 0.99 <= float(rows[0]["epsilon_spent"]) <= 1.0 and float(rows[1]["epsilon_spent"]) == 0.0
