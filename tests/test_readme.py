"""Every ```python block of README.md runs (issue: README snippets that failed as written).

A block may use names that the README's prose introduces (a graph ``edge_index``, features ``x``,
an accountant ``acct``, ...): :data:`PRELUDE` defines them on a small synthetic graph, and a few
blocks get the context their section describes (Cora for the dataset example, a one-process gloo
group for the distributed one, a loader of disjoint graphs for the mini-batch loop). Each block runs
in a fresh copy of that namespace."""
from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)

PRELUDE = """
import torch
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected
from pyg_private.accounting import PrivacyAccountant
torch.manual_seed(0)
n = N = 1200
edge_index = to_undirected(erdos_renyi_graph(n, 0.01))
x = torch.randn(n, 16)
y = torch.randint(0, 7, (n,))
data = Data(x=x, edge_index=edge_index, y=y, num_nodes=n)
r_ = torch.rand(n)
data.train_mask, data.val_mask, data.test_mask = r_ < 0.4, (r_ >= 0.4) & (r_ < 0.7), r_ >= 0.7
train_mask = data.train_mask
num_edges = edge_index.size(1) // 2
acct = PrivacyAccountant()
seeds = torch.arange(5)
x0 = torch.nn.functional.normalize(torch.randn(n, 7), dim=-1)   # GCON's encoded rows (7 wide)
delta = 1e-5
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 7))  # a head on rows
optimizer = torch.optim.Adam(model.parameters())
from torch.utils.data import DataLoader as _TorchLoader, TensorDataset
loader = _TorchLoader(TensorDataset(x, y), batch_size=64)
from pyg_private.nn import GAPAggregation
exact_layer = GAPAggregation(1, noise_multiplier=0.0)
private_layer = GAPAggregation(1, noise_multiplier=2.0)
"""

MINIBATCH = """
from torch_geometric.loader import DataLoader as _GraphLoader
from pyg_private.nn import ContractiveGraphLayer
graphs = [Data(x=torch.nn.functional.normalize(torch.rand(6, 3), dim=1),
               edge_index=to_undirected(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]))) for _ in range(8)]
loader = _GraphLoader(graphs, batch_size=2)
epochs = 2
layer = ContractiveGraphLayer(K=2, contraction=0.9, min_degree=0, noise_multiplier=1.0, accountant=acct, cached=False)
"""


PROSE_NAMES = {"n", "N", "edge_index", "x", "y", "data", "train_mask", "num_edges", "acct", "seeds", "x0", "delta",
               "model", "optimizer", "loader", "exact_layer", "private_layer", "epochs", "layer"}


def _data_root() -> Path | None:
    env = os.environ.get("PYG_PRIVATE_DATA")
    for candidate in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if (candidate / "Planetoid" / "Cora").is_dir():
            return candidate
    return None


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    block = BLOCKS[index]
    monkeypatch.chdir(tmp_path)
    scratch: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(PRELUDE, scratch)
        if "for epoch in range(epochs)" in block:
            exec(MINIBATCH, scratch)
        # only the prose's names reach the block: its imports (torch included) must be its own
        namespace = {k: v for k, v in scratch.items() if k in PROSE_NAMES}
        if "Planetoid(" in block:
            data = _data_root()
            if data is None:
                pytest.skip("needs the offline Cora files")
            shutil.copytree(data / "Planetoid" / "Cora", tmp_path / "Cora")
            namespace["root"] = str(tmp_path)
        distributed = "torch.distributed" in block
        if distributed:
            import torch.distributed as dist
            store = dist.FileStore(str(tmp_path / "store"), 1)
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            exec(compile(block, f"README.md block {index}", "exec"), namespace)
        finally:
            if distributed:
                dist.destroy_process_group()
