"""Smoke test of examples/caribou_oracle_bound.py (skipped without the offline Cora files).

It runs in-process through the examples' shared fixtures (offline data, one processed copy of
Cora per session), like the other example tests: a subprocess paid for a fresh interpreter
importing torch and PyG and for processing Cora again (about 3 of its 5 seconds)."""
import csv


def test_oracle_bound_smoke(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, out_dir = run_example("caribou_oracle_bound", "--smoke", "--epsilons", "1")
    lines = [line for line in out.splitlines() if line.startswith("10/rest/20")]
    assert len(lines) == 3  # real X0, oracle X^K alone, oracle X^K + X0
    assert all(0.0 <= float(line.split()[-1]) <= 100.0 for line in lines)
    with open(out_dir / "cora_oracle_bound_smoke.csv", newline="") as f:  # one row per model, as measured
        rows = list(csv.DictReader(f))
    assert [r["model"] for r in rows] == ["real X0 alone", "oracle X^K alone", "oracle X^K + real X0"]
    assert all(r["dataset"] == "Cora" and float(r["delta"]) == 1 / 5278 for r in rows)
    assert [r["K"] for r in rows] == ["", "2", "2"]


def test_oracle_bound_on_an_unseen_graph(messy, run_example):
    """Unknown labels (``y = -1``): zero oracle rows, no split; the graph is cleaned first."""
    out, _, out_dir = run_example("caribou_oracle_bound", "--smoke", "--epsilons", "1", "--dataset", messy)
    assert "Messy, ContractiveGraphLayer(K in (2,), C_L=0.9, min_degree=0)" in out
    assert (out_dir / "messy_oracle_bound_smoke.csv").is_file()
