r"""The plain edge-free MLP that every edge-level recipe keeps as a candidate.

Under edge-level DP the node features and labels are public: a model that reads no edge is free,
and the best of them is the baseline any private graph model must beat. Every recipe of
:mod:`pyg_private.models` therefore trains, besides its private model, this **plain PyG MLP** on the
raw features (two layers, ReLU and BatchNorm as :class:`torch_geometric.nn.MLP` builds them, width
64, dropout 0.5, full-batch Adam at ``1e-2`` with weight decay ``5e-4``, 200 epochs, the epoch of
best validation accuracy restored), and predicts with whichever of its candidates has the best
validation accuracy. With the defaults a recipe is then never more than the selection's noise below
the MLP it contains: on the seven offline graphs the recipes' own edge-free encoders (narrower, with
SELU and 100 epochs) scored up to 2.2 points below this MLP.

The choice among the candidates reads the validation labels, public at edge level; at node level
the recipes train no such candidate (the features and labels are private there).
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
from torch import Tensor, nn
from torch_geometric.nn import MLP

from .node_training import fit_full_batch

__all__ = ["fit_edge_free_mlp", "EDGE_FREE_MLP"]

#: The candidate's settings (PyG's ``examples/`` MLP on Planetoid-style splits).
EDGE_FREE_MLP = {"hidden": 64, "dropout": 0.5, "lr": 1e-2, "weight_decay": 5e-4, "epochs": 200}


def fit_edge_free_mlp(x: Tensor, y: Tensor, train_mask: Tensor, val_mask: Tensor, num_classes: int, *,
                      seed: Optional[int] = None, hidden: int = EDGE_FREE_MLP["hidden"],
                      dropout: float = EDGE_FREE_MLP["dropout"], lr: float = EDGE_FREE_MLP["lr"],
                      weight_decay: float = EDGE_FREE_MLP["weight_decay"],
                      epochs: int = EDGE_FREE_MLP["epochs"]) -> nn.Module:
    """Train the plain MLP on the training nodes' raw features (not private: edge level only, where
    ``x`` and ``y`` are public) and return it in evaluation mode, at its best validation epoch.

    ``seed`` initialises the weights and the dropout from ``torch.manual_seed(seed)`` inside a forked
    random state (the caller's global generator is left as it was), so the model is the same as
    ``torch.manual_seed(seed); MLP([F, hidden, C], dropout=dropout)`` trained by
    :func:`~pyg_private.models.node_training.fit_full_batch`; ``None`` draws from the global
    generator.
    """
    x = x.float()
    devices = [x.device] if x.device.type == "cuda" else []
    forked = torch.random.fork_rng(devices=devices) if seed is not None else contextlib.nullcontext()
    with forked:
        if seed is not None:
            torch.manual_seed(seed)
        model = MLP([x.size(1), hidden, num_classes], dropout=dropout).to(x.device)
        return fit_full_batch(model, x, y, train_mask, epochs=epochs, lr=lr, weight_decay=weight_decay,
                              val_mask=val_mask)
