"""PyTorch Lightning's DDP strategy (two CPU ranks, gloo, started by spawn): the module is pickled into
each rank. Before: each rank drew its own release of the same graph, each rank's ledger said 1 event
and the launcher's 0. Now an in-memory accountant refuses in the ranks, and with a persistent ledger
one rank releases and the other is refused (one release per job), both charged to one file."""
from __future__ import annotations

import importlib.util

import pytest
import torch
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant
from pyg_private.accounting import PersistentPrivacyAccountant
from pyg_private.transforms import LaplaceFeaturePerturb

if importlib.util.find_spec("lightning") is not None:
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy
elif importlib.util.find_spec("pytorch_lightning") is not None:
    import pytorch_lightning as pl
    from pytorch_lightning.strategies import DDPStrategy
else:
    pytest.skip("pytorch-lightning is not installed (neither `lightning` nor `pytorch_lightning`)",
                allow_module_level=True)

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

X = torch.rand(40, 8, generator=torch.Generator().manual_seed(5))


class ReleasingModule(pl.LightningModule):
    """Releases the graph's features in ``setup`` (on every rank), then trains a linear layer on them."""

    def __init__(self, transform: LaplaceFeaturePerturb) -> None:
        super().__init__()
        self.transform = transform
        self.linear = torch.nn.Linear(X.size(1), 1)

    def setup(self, stage: str) -> None:
        self.features = self.transform(Data(x=X, num_nodes=X.size(0))).x

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(X.size(0))), batch_size=20)

    def training_step(self, batch, batch_idx):
        return self.linear(self.features[batch[0]]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(transform: LaplaceFeaturePerturb) -> None:
    strategy = DDPStrategy(start_method="spawn", process_group_backend="gloo")  # the module is pickled into the ranks
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(ReleasingModule(transform))


def test_lightning_ddp_with_an_in_memory_accountant_refuses():
    acct = PrivacyAccountant(budget={"local": 1.0})
    with pytest.raises(Exception, match="LedgerProcessError|belongs to process"):
        fit(LaplaceFeaturePerturb(1.0, feature_range=(0.0, 1.0), accountant=acct))
    assert len(acct) == 0


def test_lightning_ddp_with_a_persistent_ledger_releases_once_per_job(tmp_path):
    acct = PersistentPrivacyAccountant(tmp_path / "ledger.sqlite", budget={"local": 1.0})
    with pytest.raises(Exception, match="already released"):  # the second rank's release is refused
        fit(LaplaceFeaturePerturb(1.0, feature_range=(0.0, 1.0), accountant=acct))
    assert len(acct.events_of("local")) == 1  # one release of the graph in the whole job, charged once
