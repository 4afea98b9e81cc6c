"""Attaching a node split to a graph."""
from __future__ import annotations

import copy

import torch
from torch import Tensor
from torch_geometric.data import Data

__all__ = ["attach_split"]


def attach_split(data: Data, split: tuple[Tensor, Tensor, Tensor]) -> Data:
    r"""Returns a shallow copy of :obj:`data` with the masks of :obj:`split` set as
    :obj:`train_mask`, :obj:`val_mask` and :obj:`test_mask` (replacing any present).
    :obj:`data` itself is not modified.

    Args:
        data (torch_geometric.data.Data): The graph.
        split ((torch.Tensor, torch.Tensor, torch.Tensor)): Boolean
            :obj:`(train_mask, val_mask, test_mask)`, each of shape
            :obj:`[data.num_nodes]`, as returned by
            :func:`~pyg_private.datasets.per_class_split` or
            :func:`~pyg_private.datasets.random_split`.

    Returns:
        torch_geometric.data.Data: The copy with the masks.
    """
    if not isinstance(split, (tuple, list)) or len(split) != 3:
        raise ValueError("`split` must be a tuple (train_mask, val_mask, test_mask); "
                         f"got {type(split).__name__}"
                         + (f" of length {len(split)}" if hasattr(split, "__len__") else ""))
    num_nodes = data.num_nodes
    for name, mask in zip(("train_mask", "val_mask", "test_mask"), split):
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool \
                or tuple(mask.shape) != (num_nodes,):
            shape = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
            dtype = mask.dtype if isinstance(mask, Tensor) else None
            raise ValueError(f"`split` {name} must be a boolean tensor of shape "
                             f"({num_nodes},); got {shape} with dtype {dtype}")
    out = copy.copy(data)
    out.train_mask, out.val_mask, out.test_mask = split
    return out

