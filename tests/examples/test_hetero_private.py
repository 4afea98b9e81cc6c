"""Smoke tests of examples/hetero_private.py on a graph it has never seen (``Messy``: self-loops,
duplicate and one-directional entries, unknown labels): it builds the user-item-tag graph, runs the
three baselines and the private HeteroConv model, whose one forward is charged by node-type pairs
(four releases, two parts, one parallel group) and calibrated to the target epsilon; CSV rows are
written as they finish, and ``--quick`` writes to its own file."""
from __future__ import annotations

import csv
import re


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_hetero_private_runs_and_spends_its_target(messy, run_example):
    out, _, out_dir = run_example("hetero_private", "--dataset", messy, "--epochs", "3", "--epsilons", "2",
                                  "--seeds", "0", "--basket", "3")
    assert "Messy as users-items-tags: 90 items, 90 users, 12 tags" in out
    assert "parts [2, 2] releases: the model is sqrt(2)/sigma-GDP" in out
    assert re.search(r"relations-0: 2 disjoint parts, 4 releases", out)
    rows = _rows(out_dir / "messy_hetero_private.csv")
    assert [r["model"] for r in rows] == ["to_hetero GraphSAGE (not private)", "MLP on item features (no edges)",
                                         "private pipeline, no noise", "private HeteroConv + GAP, eps=2"]
    spent = float(rows[-1]["epsilon_spent"])
    assert 1.99 <= spent <= 2.0 and float(rows[-1]["delta"]) == 1 / int(rows[-1]["edges"])


def test_quick_writes_its_own_file(messy, run_example):
    _, _, out_dir = run_example("hetero_private", "--dataset", messy, "--quick", "--epochs", "2", "--epsilons", "1")
    rows = _rows(out_dir / "messy_hetero_private_quick.csv")
    assert len(rows) == 4 and rows[-1]["basket"] == "5" and not (out_dir / "messy_hetero_private.csv").exists()
