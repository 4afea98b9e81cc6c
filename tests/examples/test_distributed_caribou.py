"""The README's launch command of examples/distributed_caribou.py, run as written: ``torchrun
--standalone --nproc_per_node 2 ... --quick`` on Cora (skipped when the offline data is absent). Two
processes release the aggregation and train the head with DDP; the accountant (rank 0 only) shows one
event, and the accuracy line is printed once."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import torch.distributed as dist
from conftest import EXAMPLES


def torchrun() -> list[str]:
    """``torchrun`` as this environment has it: the module behind the script, run by this interpreter
    (what the venv's ``torchrun`` does). A ``torchrun`` found on PATH may belong to another Python,
    whose workers would not import this installation; the test skips, with the reason, where this
    torch has no launcher or no gloo backend."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch build has no torch.distributed with the gloo backend")
    if importlib.util.find_spec("torch.distributed.run") is None:
        pytest.skip("this torch has no torch.distributed.run (the torchrun launcher)")
    return [sys.executable, "-m", "torch.distributed.run"]


def test_torchrun_two_processes(offline, tmp_path):
    offline("Planetoid/Cora/raw")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*torchrun(), "--standalone", "--nproc_per_node", "2", str(EXAMPLES / "distributed_caribou.py"), "--quick"]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"Cora: 2708 nodes on 2 processes, CARIBOU K=2", out), out
    accuracy = re.findall(r"^accuracy: train (\d\.\d+), val (\d\.\d+), test (\d\.\d+)$", out, flags=re.M)
    assert len(accuracy) == 1 and 0.3 < float(accuracy[0][2]) <= 1.0  # printed by rank 0 only; far above chance
    assert re.search(r"^edge\s+8\s+0\.000189\s+1\s", out, flags=re.M)  # one event, delta = 1/|E| = 1/5278
    assert out.count("contractive_graph_layer, mu-GDP") == 1
