r"""Out-of-fold predictions: a model's class scores that a second model may read as a feature.

Stacking (Wolpert, "Stacked generalization", Neural Networks 1992) trains a second model on the
first one's predictions. On the training nodes the first model's predictions are fitted, not
predicted: a classifier that reached 100% training accuracy would teach the second model to trust
it blindly. So every training node's scores come from a model trained without that node:
the training nodes are split into ``folds`` random parts, and fold :math:`f` is scored by a model
fitted on the other parts (cross-fitting). Every other node is scored by the model fitted on all
training nodes, for which it is held out already.

Nothing here reads an edge: the recipes use it on public features and labels (edge level) and
on releases, so its output is post-processing.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor, nn

__all__ = ["out_of_fold_log_probs"]


def out_of_fold_log_probs(fit: Callable[[Tensor, int], nn.Module], inputs: Tensor, full: nn.Module, train: Tensor, *,
                          folds: int = 5, seed: Optional[int] = None) -> Tensor:
    """Every node's log-probabilities (``float32`` ``[N, C]``): from ``full`` (fitted on every
    training node) on the nodes outside ``train``, and on each training node from the model
    ``fit(mask, f)`` fitted on the training nodes outside its fold ``f``.

    Args:
        fit: ``fit(train_mask, fold)`` trains the same kind of model as ``full`` on ``train_mask``.
        inputs: the nodes' inputs of ``full`` and of the fold models.
        train: the boolean mask of the training nodes (at least ``folds`` of them).
        folds: the number of parts, at least 2.
        seed: the random split of the training nodes (``None``: the global generator).
    """
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"`folds` must be an integer >= 2; got {folds!r}")
    idx = train.nonzero().view(-1)
    if idx.numel() < folds:
        raise ValueError(f"out-of-fold scores need at least {folds} training nodes (one per fold); got {idx.numel()}")
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    perm = idx[torch.randperm(idx.numel(), generator=gen).to(idx.device)]
    with torch.no_grad():
        out = full.eval()(inputs).float().log_softmax(dim=-1)
    for f in range(folds):
        held = perm[f::folds]
        mask = train.clone()
        mask[held] = False
        model = fit(mask, f)
        with torch.no_grad():
            out[held] = model.eval()(inputs[held]).float().log_softmax(dim=-1)
    return out
