"""Turning index tensors into the boolean masks a split returns."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["Split", "randperm", "to_masks"]

#: A node split: boolean :obj:`(train_mask, val_mask, test_mask)`, each of shape :obj:`[N]`.
Split = tuple[Tensor, Tensor, Tensor]


def randperm(n: int, generator: torch.Generator) -> Tensor:
    """A random permutation of :obj:`0, ..., n - 1` on the CPU, drawn from ``generator``."""
    return torch.randperm(n, generator=generator, device=generator.device).cpu()


def to_masks(
    num_nodes: int,
    train: Tensor,
    val: Tensor,
    test: Tensor,
    device: torch.device | str | None = None,
) -> Split:
    """Boolean masks of length ``num_nodes`` from three disjoint index tensors."""
    masks = []
    for index in (train, val, test):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[index] = True
        masks.append(mask.to(device) if device is not None else mask)
    return masks[0], masks[1], masks[2]
