"""Two ranks started by ``torch.multiprocessing.spawn`` (gloo): an in-memory ledger passed to them, or
built on rank 1, refuses; a persistent ledger passed to them is opened by path and records both ranks'
releases, and the transforms' guard lets only one rank release the same graph (before: each rank drew
its own release of the same graph, each rank's ledger said 1 event, the launcher's 0)."""
from __future__ import annotations

import os

import pytest
import torch
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant
from pyg_private.accounting import LedgerProcessError, PersistentPrivacyAccountant, laplace_event
from pyg_private.transforms import LaplaceFeaturePerturb

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

WORLD = 2
X = torch.rand(40, 8, generator=torch.Generator().manual_seed(3))


def _rank(rank: int, store: str, out: str, in_memory: PrivacyAccountant, shared: PersistentPrivacyAccountant,
          transform: LaplaceFeaturePerturb) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    seen: dict = {}
    event = laplace_event(scale=4.0, sensitivity=1.0, unit="edge", name=f"rank-{rank}")
    try:
        in_memory.register(event)  # a copy pickled into the rank
        seen["passed"] = "registered"
    except LedgerProcessError as e:
        seen["passed"] = str(e)
    own = PrivacyAccountant()  # built here: the job's ledger only on rank 0
    try:
        own.register(event)
        seen["own"] = "registered"
    except LedgerProcessError as e:
        seen["own"] = str(e)
    shared.register(event)  # the same file on both ranks
    dist.barrier()
    seen["shared_events"] = len(shared.events_of("edge"))  # the other rank may already be releasing (unit local)
    try:  # both ranks release the same graph with copies of one transform
        seen["x"] = transform(Data(x=X, num_nodes=X.size(0))).x
    except ValueError as e:
        seen["x"] = str(e)
    dist.barrier()
    seen["local_events"] = len(shared.events_of("local"))
    torch.save(seen, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.slow  # two fresh interpreters import torch and pyg_private (several seconds)
def test_spawned_gloo_ranks_share_a_persistent_ledger_and_refuse_copies(tmp_path):
    in_memory = PrivacyAccountant()
    shared = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite", budget={"edge": 10.0, "local": 1.0})
    transform = LaplaceFeaturePerturb(1.0, feature_range=(0.0, 1.0), accountant=shared)
    torch.multiprocessing.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path), in_memory, shared, transform),
                                nprocs=WORLD, join=True)
    seen = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    for r in range(WORLD):
        assert "belongs to process" in seen[r]["passed"] and f"torch.distributed rank {r}" in seen[r]["passed"]
        assert seen[r]["shared_events"] == 2
        assert seen[r]["local_events"] == 1
    assert seen[0]["own"] == "registered"
    assert "rank 1" in seen[1]["own"] and "rank == 0" in seen[1]["own"]
    assert len(in_memory) == 0
    released = [s["x"] for s in seen if isinstance(s["x"], torch.Tensor)]
    refused = [s["x"] for s in seen if isinstance(s["x"], str)]
    assert len(released) == 1 and len(refused) == 1  # one release of the graph in the whole job
    assert "already released" in refused[0] and "shared privacy ledger" in refused[0]
    assert len(shared) == 3 and [e.unit.value for e in shared.events] == ["edge", "edge", "local"]
