"""Smoke test of examples/pyg_gcn_to_private.py in a tiny mode on Cora (skipped when the offline data is
absent): it runs, prints the accuracies and the accountant's report, and the report shows one release for the whole
training run."""
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


def test_gcn_to_private(cora, monkeypatch, capsys):
    out = _run("pyg_gcn_to_private", ["--epochs", "3", "--epsilons", "2"], monkeypatch, capsys)
    assert re.search(r"GCN \(PyG examples/gcn.py, not private\)\s+-\s+\d+\.\d\s+\d+\.\d", out)
    assert re.search(r"MLP \(no edges\)\s+0\s+\d+\.\d\s+\d+\.\d", out)
    spent = re.search(r"private: ContractiveGraphLayer \+ MLP \(eps=2\)\s+(\d+\.\d+)\s+\d+\.\d\s+\d+\.\d", out)
    assert spent and 1.99 <= float(spent.group(1)) <= 2.0  # the layer's one event, calibrated to eps 2
    assert "(1 event for 3 epochs of training and evaluation)" in out
    assert re.search(r"^edge\s+2\s+1e-05\s+1\s", out, flags=re.M)  # the report: unit, eps, delta, 1 event
