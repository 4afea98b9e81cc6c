"""The anchors that edge-level private link prediction is measured against: PyG's non-private GCN
link predictor and randomized response with a debiased aggregation, both on a split made by
:class:`~pyg_private.transforms.PrivateLinkSplit`.

* :func:`gcn_anchor`, **not private**: PyG's ``examples/link_pred.py`` model (two ``GCNConv``
  layers, 128 and 64 channels, dot product, BCE against fresh uniform negatives every epoch; Adam
  0.01, 200 epochs, the epoch of best validation AUC), trained on every training edge (message and
  supervision edges, as messages and as positive labels, as ``RandomLinkSplit`` would give it).
* :func:`rr_anchor`, **edge-level epsilon-DP**: :class:`~pyg_private.transforms.EdgeRandomizedResponse`
  (Warner 1965; Mülle et al. 2015) applied to the message graph, then post-processing only: the
  aggregation :math:`\\mathbf{\\tilde A}\\mathbf X` over the randomised graph is debiased with the
  public flip rate :math:`p = 1 - q` (:math:`\\mathbb E[\\tilde A] = (1 - 2p) A + p(J - I)`, so
  :math:`\\widehat{A\\mathbf X} = (\\tilde A\\mathbf X - p(\\mathbf 1\\mathbf 1^\\top\\mathbf X - \\mathbf X))
  / (1 - 2p)` is unbiased for :math:`A\\mathbf X`), and a pair is scored by the cosine of
  :math:`[\\mathbf x_u \\,\\|\\, \\widehat{A\\mathbf X}_u]` and :math:`[\\mathbf x_v \\,\\|\\, \\widehat{A\\mathbf X}_v]`
  (each block row-normalised). It is skipped, with the count in the message, where the expected
  number of flipped-in pairs :math:`p\\,n(n-1)/2` exceeds a limit (the dense output would not fit).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from pyg_private import PrivacyAccountant
from pyg_private.metrics import hits_at_k, mean_reciprocal_rank, roc_auc
from pyg_private.transforms import EdgeRandomizedResponse
from pyg_private.utils import sample_pairs

__all__ = ["gcn_anchor", "rr_anchor", "rr_expected_edges", "link_metrics"]


def link_metrics(scores: Tensor, labels: Tensor) -> dict:
    """Test ROC-AUC, Hits@50 and MRR (OGB's definitions) of ``scores`` against 0/1 ``labels``."""
    pos = labels.bool()
    return {"auc": roc_auc(scores, labels), "hits@50": hits_at_k(scores[pos], scores[~pos], 50),
            "mrr": mean_reciprocal_rank(scores[pos], scores[~pos])}


class _GCN(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(channels, 128), GCNConv(128, 64)

    def encode(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    @staticmethod
    def decode(z: Tensor, pairs: Tensor) -> Tensor:
        return (z[pairs[0]] * z[pairs[1]]).sum(-1)


def gcn_anchor(train: Data, val: Data, test: Data, seed: int = 0, epochs: int = 200) -> dict:
    """Test metrics (:func:`link_metrics`) of the non-private GCN at its best validation epoch."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = _GCN(train.num_features)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    message = train.edge_index
    pos = torch.cat([message[:, message[0] < message[1]], train.edge_label_index], dim=1)
    edge_index = torch.cat([pos, pos.flip(0)], dim=1)
    best_val, best = -1.0, {}
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        z = model.encode(train.x, edge_index)
        neg = sample_pairs(train.num_nodes, pos.size(1), generator=gen)
        scores = torch.cat([model.decode(z, pos), model.decode(z, neg)])
        labels = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))])
        F.binary_cross_entropy_with_logits(scores, labels).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            z = model.encode(train.x, edge_index)
            score = roc_auc(model.decode(z, val.edge_label_index), val.edge_label)
            if score > best_val:
                best_val, best = score, link_metrics(model.decode(z, test.edge_label_index), test.edge_label)
    return best


def rr_expected_edges(num_nodes: int, epsilon: float) -> float:
    """The expected number of non-edges randomized response turns into edges: :math:`p\\,n(n-1)/2`,
    :math:`p = 1/(1 + e^\\varepsilon)` (public)."""
    return num_nodes * (num_nodes - 1) / 2 / (1.0 + math.exp(epsilon))


def _unit_rows(h: Tensor) -> Tensor:
    return h / h.norm(dim=1, keepdim=True).clamp_min(1e-12)


def rr_anchor(train: Data, test: Data, epsilon: float, *, features: Optional[Tensor] = None, seed: int = 0,
              limit: float = 1e7, chunk: int = 1 << 20) -> Optional[dict]:
    """Test metrics of randomized response on the message graph with the debiased aggregation
    (module notes); ``None`` where :func:`rr_expected_edges` exceeds ``limit``. Its own accountant:
    the message edges at ``epsilon`` (pure DP). ``features``: the public features to aggregate
    (default ``train.x``; the recipe's principal components keep the memory small). ``seed`` fixes
    the flips (an experiment: a known seed voids the guarantee)."""
    n = train.num_nodes
    if rr_expected_edges(n, epsilon) > limit:
        return None
    rr = EdgeRandomizedResponse(epsilon, accountant=PrivacyAccountant(), generator=torch.Generator().manual_seed(seed),
                                max_edges=int(limit))
    noisy = rr(Data(edge_index=train.edge_index, num_nodes=n)).edge_index
    p = 1.0 / (1.0 + math.exp(epsilon))
    x = _unit_rows((train.x if features is None else features).float())
    agg = torch.zeros_like(x)
    for start in range(0, noisy.size(1), chunk):  # the gathered rows of a few million edges, in pieces
        part = noisy[:, start:start + chunk]
        agg.index_add_(0, part[1], x[part[0]])
    agg = (agg - p * (x.sum(0, keepdim=True) - x)) / (1.0 - 2.0 * p)
    h = torch.cat([x, _unit_rows(agg)], dim=1)
    pairs = test.edge_label_index
    scores = F.cosine_similarity(h[pairs[0]], h[pairs[1]], dim=1)
    return link_metrics(scores, test.edge_label)
