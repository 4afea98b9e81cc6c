"""Smoke test of examples/caribou_oracle_bound.py (skipped without the offline Cora files)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = os.environ.get("PYG_PRIVATE_DATA", str(ROOT.parent / "shared" / "data"))


@pytest.mark.skipif(not (Path(DATA) / "Planetoid" / "Cora").exists(), reason="needs the offline Cora files")
def test_oracle_bound_smoke(tmp_path):
    env = dict(os.environ, PYG_PRIVATE_DATA=DATA, PYG_PRIVATE_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "caribou_oracle_bound.py"), "--smoke",
                          "--epsilons", "1"], capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("10/rest/20")]
    assert len(lines) == 3  # real X0, oracle X^K alone, oracle X^K + X0
    assert all(0.0 <= float(line.split()[-1]) <= 100.0 for line in lines)
