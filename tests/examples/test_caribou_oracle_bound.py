"""Smoke test of examples/caribou_oracle_bound.py (skipped without the offline Cora files).

It runs in-process through the examples' shared fixtures (offline data, one processed copy of
Cora per session), like the other example tests: a subprocess paid for a fresh interpreter
importing torch and PyG and for processing Cora again (about 3 of its 5 seconds)."""


def test_oracle_bound_smoke(offline, run_example):
    offline("Planetoid/Cora/raw")
    out, _, _ = run_example("caribou_oracle_bound", "--smoke", "--epsilons", "1", out=False)
    lines = [line for line in out.splitlines() if line.startswith("10/rest/20")]
    assert len(lines) == 3  # real X0, oracle X^K alone, oracle X^K + X0
    assert all(0.0 <= float(line.split()[-1]) <= 100.0 for line in lines)
