"""One group of two processes started by the test session (gloo, file store in a temporary directory)
runs every scenario of :mod:`distributed_scenarios` once; the tests read what each rank saved.

The processes are forked where the platform forks safely (Linux: the children inherit the imported
library instead of importing it again, which would take most of the time) and spawned elsewhere."""
from __future__ import annotations

import os
import sys
import time

import pytest
import torch

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

import distributed_scenarios as scenarios  # noqa: E402  (tests/distributed is on sys.path)

TIMEOUT_S = 120.0
START_METHOD = "fork" if sys.platform.startswith("linux") else "spawn"


@pytest.fixture(scope="session")
def ranks(tmp_path_factory) -> list[dict]:
    """What rank 0 and rank 1 saw in every scenario."""
    import torch.multiprocessing as mp

    root = tmp_path_factory.mktemp("distributed")
    context = mp.start_processes(scenarios.worker, args=(scenarios.WORLD, str(root / "store"), str(root)),
                                 nprocs=scenarios.WORLD, join=False, start_method=START_METHOD)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"the distributed scenarios did not finish within {TIMEOUT_S:g} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
    out = []
    for rank in range(scenarios.WORLD):
        path = os.path.join(root, f"rank{rank}.pt")
        assert os.path.exists(path), f"rank {rank} saved no results"
        out.append(torch.load(path, weights_only=False))
    return out

