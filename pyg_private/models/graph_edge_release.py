r"""Graph classification under **edge-level** DP: one GAP release over the disjoint union of the graphs.

When only the edges are private (unit ``"edge"``: one undirected edge of one graph added or removed;
the node features and the graph labels are public), a graph dataset is one large graph, the disjoint
union of its graphs, and one private aggregation over it serves every graph:

1. :class:`~pyg_private.nn.GAPAggregation` (Sajadmanesh et al., "GAP: Differentially Private Graph
   Neural Networks with Aggregation Perturbation", USENIX Security 2023) releases
   :math:`[\mathbf X^{(0)} \| \dots \| \mathbf X^{(K)}]` on the union, with
   :math:`\mathbf X^{(k)} = \mathrm{normalize}(\mathbf A \mathbf X^{(k-1)} + \mathbf Z^{(k)})`: **one**
   release, :math:`\mu = \sqrt K/\sigma`-GDP on unit ``"edge"`` (:math:`\Delta = \sqrt 2`: an edge lies
   in one graph and changes two rows), calibrated to ``(epsilon, delta)``. The union has no edge
   between graphs, so a graph's rows read its own edges only; the privacy analysis needs no more.
2. Each graph's rows are pooled (mean and sum, concatenated and standardised with the training
   graphs' statistics of the release) and an MLP head is trained on the training graphs' pooled
   features and labels **without noise**: a function of the release and of public data
   (post-processing, no further cost).

The whole dataset (training and test graphs) is released at once, as a transductive node-level
release would be: every graph's edges are private. ``epsilon=math.inf`` runs the same pipeline
without noise (the non-private reference of this architecture; nothing charged).

**What the release hides.** GAP renormalises every row: a node's degree enters a hop only through
the direction of its neighbours' sum, and the Gaussian noise blurs it. Structure that other
edge-level statistics would expose (a graph's edge count has sensitivity 1 per graph) is not
targeted by this architecture.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import MLP, global_add_pool, global_mean_pool

from ..accounting import PrivacyAccountant
from ..accounting.validation import check_positive, check_positive_int
from ..nn import GAPAggregation
from .graph_dp_sgd import _check_graphs

__all__ = ["EdgeLevelGraphConfig", "EdgeLevelGraphResult", "EdgeLevelGraphModel",
           "run_edge_level_graph_classification"]


@dataclass(frozen=True)
class EdgeLevelGraphConfig:
    """Settings of :func:`run_edge_level_graph_classification` (all public).

    Args:
        K (int): GAP's hops. (default: :obj:`2`)
        hidden (int): the head's hidden width. (default: :obj:`32`)
        epochs (int): full-batch Adam epochs of the head. (default: :obj:`300`)
        lr (float): learning rate. (default: :obj:`0.01`)
        weight_decay (float): Adam's weight decay. (default: :obj:`1e-4`)
    """

    K: int = 2
    hidden: int = 32
    epochs: int = 300
    lr: float = 0.01
    weight_decay: float = 1e-4

    def __post_init__(self) -> None:
        check_positive_int(self.K, "K")
        check_positive_int(self.hidden, "hidden")
        check_positive_int(self.epochs, "epochs")
        check_positive(self.lr, "lr")


class EdgeLevelGraphModel(nn.Module):
    """The head of the edge-level recipe on pooled released features: standardisation (fixed,
    computed from the training graphs' release) and an MLP. Holds no graph and no release."""

    def __init__(self, in_channels: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.register_buffer("shift", torch.zeros(in_channels))
        self.register_buffer("scale", torch.ones(in_channels))
        self.mlp = MLP([in_channels, hidden, num_classes], norm=None, act="relu")

    def forward(self, pooled: Tensor) -> Tensor:
        return self.mlp((pooled - self.shift) / self.scale)


@dataclass
class EdgeLevelGraphResult:
    """Test accuracy, the head, the ledger and the release's public settings (not the release)."""

    test_accuracy: float
    head: EdgeLevelGraphModel
    accountant: PrivacyAccountant
    epsilon: float  #: unit ``"edge"`` after the release at ``delta`` (``inf``: the non-private reference)
    delta: float
    noise_multiplier: float
    num_edges: int  #: undirected edges of the union (what the example's delta rule reads)
    seconds: float


def _pool(release: Tensor, batch: Tensor) -> Tensor:
    return torch.cat([global_mean_pool(release, batch), global_add_pool(release, batch)], dim=1)


def run_edge_level_graph_classification(train_graphs: Sequence[Data], test_graphs: Sequence[Data],
                                        config: EdgeLevelGraphConfig = EdgeLevelGraphConfig(), *, epsilon: float,
                                        delta: Optional[float], num_classes: int,
                                        accountant: Optional[PrivacyAccountant] = None,
                                        seed: Optional[int] = None) -> EdgeLevelGraphResult:
    """One GAP release over the union of ``train_graphs`` and ``test_graphs`` (unit ``"edge"``),
    then a pooled MLP head trained without noise on the training graphs (see the module notes).
    ``seed`` seeds the noise and the head (reproducible, **voids the guarantee**)."""
    start = time.perf_counter()
    _check_graphs(list(train_graphs) + list(test_graphs))
    num_classes = check_positive_int(num_classes, "num_classes")
    acct = accountant if accountant is not None else PrivacyAccountant()
    union = Batch.from_data_list(list(train_graphs) + list(test_graphs))
    private = not math.isinf(float(epsilon))
    generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
    if private:
        layer = GAPAggregation(config.K, epsilon=epsilon, delta=delta, accountant=acct, generator=generator)
    else:
        layer = GAPAggregation(config.K, noise_multiplier=0.0)
    with torch.no_grad():
        release = layer(union.x, union.edge_index)  # one release, charged before its noise
    pooled = _pool(release, union.batch).float()
    n_train = len(train_graphs)
    y = union.y.view(-1)
    if seed is not None:
        torch.manual_seed(int(seed))
    head = EdgeLevelGraphModel(pooled.size(1), config.hidden, num_classes)
    head.shift.copy_(pooled[:n_train].mean(0))
    head.scale.copy_(pooled[:n_train].std(0).clamp_min(1e-6) if n_train > 1 else torch.ones(pooled.size(1)))
    opt = torch.optim.Adam(head.mlp.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    head.train()
    for _ in range(config.epochs):  # post-processing: the release and the public labels
        opt.zero_grad()
        F.cross_entropy(head(pooled[:n_train]), y[:n_train]).backward()
        opt.step()
    head.eval()
    with torch.no_grad():
        acc = float((head(pooled[n_train:]).argmax(-1) == y[n_train:]).float().mean()) if len(test_graphs) else math.nan
    num_edges = int(union.edge_index.size(1)) // 2
    eps = acct.epsilon("edge", float(delta)) if private else math.inf
    return EdgeLevelGraphResult(test_accuracy=acc, head=head, accountant=acct, epsilon=eps,
                                delta=float(delta) if delta is not None else 0.0,
                                noise_multiplier=float(layer.noise_multiplier), num_edges=num_edges,
                                seconds=time.perf_counter() - start)
