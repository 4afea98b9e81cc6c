r"""Graph classification under graph-level DP: a :class:`GraphClassifier` trained by per-graph DP-SGD.

:func:`run_graph_classification` builds a :class:`~pyg_private.models.GraphClassifier` (GIN, GCN or
the edge-free node MLP, a per-graph pooling and a head) from the public schema (the feature width of
the graphs and the declared number of classes), trains it on ``train_graphs`` with
:class:`~pyg_private.models.GraphDPSGD` at ``(epsilon, delta)`` on unit ``"graph"`` (one whole graph
added or removed; one subsampled-Gaussian event for the run, charged before any noise) and reports
its accuracy on ``test_graphs``. ``epsilon=math.inf`` trains the same model without clipping or
noise (the non-private reference; nothing charged).

Hyperparameters are fixed in the configuration: choosing them by the accuracy on private data would
be a further release (see :func:`~pyg_private.models.select_privately`). The test accuracy reads
the test graphs; it is a measurement, not part of the released model.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn
from torch_geometric.data import Batch, Data

from ..accounting import PrivacyAccountant
from ..accounting.validation import check_positive_int
from .graph_classifier import GraphClassifier
from .graph_dp_sgd import GraphDPSGD, GraphDPSGDConfig, _check_graphs

__all__ = ["GraphClassificationConfig", "GraphClassificationResult", "run_graph_classification", "graph_accuracy"]


@dataclass(frozen=True)
class GraphClassificationConfig:
    """The model and the DP-SGD run of :func:`run_graph_classification` (all public).

    Args:
        conv (str): ``"gin"``, ``"gcn"`` or ``"none"`` (edge-free). (default: ``"gin"``)
        hidden (int): hidden width. (default: :obj:`32`)
        layers (int): message-passing layers. (default: :obj:`2`)
        pool (str): ``"add"`` or ``"mean"``. (default: ``"add"``)
        epochs, batch_size, max_grad_norm, lr, chunk_size: :class:`~pyg_private.models.GraphDPSGDConfig`'s.
            (defaults: 20, 32, 1.0, 0.005, 8)
    """

    conv: str = "gin"
    hidden: int = 32
    layers: int = 2
    pool: str = "add"
    epochs: int = 20
    batch_size: int = 32
    max_grad_norm: float = 1.0
    lr: float = 0.005
    chunk_size: int = 8

    def dp_sgd(self) -> GraphDPSGDConfig:
        return GraphDPSGDConfig(epochs=self.epochs, batch_size=self.batch_size, max_grad_norm=self.max_grad_norm,
                                lr=self.lr, chunk_size=self.chunk_size)


@dataclass
class GraphClassificationResult:
    """Test accuracy, the trained model, the ledger and the run's public settings."""

    test_accuracy: float
    model: nn.Module
    accountant: PrivacyAccountant
    epsilon: float  #: unit ``"graph"`` after the run at ``delta`` (``inf``: the non-private reference)
    delta: float
    noise_multiplier: float
    sample_rate: float
    steps: int
    seconds: float


@torch.no_grad()
def graph_accuracy(model: nn.Module, graphs: Sequence[Data], *, batch_size: int = 256) -> float:
    """The fraction of ``graphs`` whose label ``model`` predicts (evaluation mode)."""
    model.eval()
    hits = 0
    for start in range(0, len(graphs), batch_size):
        b = Batch.from_data_list(list(graphs[start:start + batch_size]))
        hits += int((model(b.x, b.edge_index, b.batch).argmax(-1) == b.y.view(-1)).sum())
    return hits / max(len(graphs), 1)


def run_graph_classification(train_graphs: Sequence[Data], test_graphs: Sequence[Data],
                             config: GraphClassificationConfig = GraphClassificationConfig(), *, epsilon: float,
                             delta: Optional[float], num_graphs: int, num_classes: int,
                             accountant: Optional[PrivacyAccountant] = None,
                             seed: Optional[int] = None) -> GraphClassificationResult:
    """Train and evaluate a graph classifier with per-graph DP-SGD (see the module notes).

    ``num_graphs`` is the **declared** number of training graphs and ``num_classes`` the declared
    number of classes (public: never read off the private graphs). ``seed`` seeds the model's
    initialisation, the sampling and the noise (reproducible, **voids the guarantee**). Everything is
    checked before anything is charged.
    """
    start = time.perf_counter()
    width = _check_graphs(train_graphs)
    num_classes = check_positive_int(num_classes, "num_classes")
    if seed is not None:
        torch.manual_seed(int(seed))
    model = GraphClassifier(width, config.hidden, num_classes, conv=config.conv, layers=config.layers,
                            pool=config.pool)
    private = not math.isinf(float(epsilon))
    trainer = GraphDPSGD(model, num_graphs=num_graphs, config=config.dp_sgd(), epsilon=epsilon,
                         delta=delta if private else None, accountant=accountant)
    generator = torch.Generator().manual_seed(int(seed) + 1) if seed is not None else None
    run = trainer.fit(train_graphs, generator=generator)
    return GraphClassificationResult(test_accuracy=graph_accuracy(model, test_graphs), model=model,
                                     accountant=run.accountant, epsilon=run.epsilon,
                                     delta=float(delta) if delta is not None else run.delta,
                                     noise_multiplier=run.noise_multiplier, sample_rate=run.sample_rate,
                                     steps=run.steps, seconds=time.perf_counter() - start)
