"""Smoke test of examples/pyg_node_private_opacus.py in a tiny mode on Cora (skipped when the offline data is
absent): it runs, prints the accuracies and the accountant's report, and the report shows the aggregation and
the DP-SGD steps in one node-level ledger."""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _shared_data() -> Path | None:
    env = os.environ.get("PYG_PRIVATE_DATA", "")
    if env:
        return Path(env) if Path(env).is_dir() else None
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return None


@pytest.fixture
def cora(tmp_path, monkeypatch):
    data = _shared_data()
    if data is None or not (data / "Planetoid" / "Cora" / "raw").is_dir():
        pytest.skip("the offline Cora files are absent (set PYG_PRIVATE_DATA)")
    monkeypatch.setenv("PYG_PRIVATE_DATA", str(data))
    monkeypatch.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))  # PyG's processed files go here


def _run(name: str, argv: list[str], monkeypatch, capsys) -> str:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", [name, *argv])
    module.main()
    return capsys.readouterr().out


def test_node_private_opacus(cora, monkeypatch, capsys):
    out = _run("pyg_node_private_opacus", ["--epochs", "1", "--reference-epochs", "5", "--calibration", "renyi",
                                          "--epsilon", "4", "--aggregation-epsilon", "1"],
               monkeypatch, capsys)
    rows = dict(re.findall(r"^(linear on x \(no edges\), DP-SGD|ContractiveGraphLayer\(node\) \+ linear, DP-SGD)"
                           r"\s+(\d+\.\d+)", out, flags=re.M))
    assert len(rows) == 2 and all(float(eps) <= 4.0 for eps in rows.values())
    # the aggregation and one event per DP-SGD step (1 epoch of ceil(1208 / 256) = 5 steps), one ledger
    assert "(6 events: the aggregation and one per DP-SGD step)" in out
    assert re.search(r"^node\s+[\d.]+\s+1e-05\s+6\s+\(4, 1e-05\)", out, flags=re.M)
