"""Per-class node split of the Planetoid protocol (GCON: 20 per class / 500 / 1,000)."""
from __future__ import annotations

import torch
from torch import Tensor

from ._masks import Split, randperm, to_masks
from ._validate import check_count, make_generator

__all__ = ["per_class_split"]


def per_class_split(
    y: Tensor,
    num_per_class: int = 20,
    num_val: int = 500,
    num_test: int | None = 1000,
    seed: int | torch.Generator = 0,
    *,
    num_classes: int | None = None,
) -> Split:
    r"""Draws :obj:`num_per_class` random training nodes from every class, then
    :obj:`num_val` validation and :obj:`num_test` test nodes uniformly at random
    from the remaining nodes (the random split of Yang et al. 2016 and PyG's
    :obj:`Planetoid(split="random")`, as used by GCON on Cora-ML).

    The three sets are disjoint. Classes are drawn in increasing order from one
    generator, so the split is a deterministic function of :obj:`seed`.

    Args:
        y (torch.Tensor): Integer class labels of shape :obj:`[N]`, in
            :obj:`0, ..., num_classes - 1`. (Multi-label targets are not supported.)
        num_per_class (int, optional): Training nodes per class. (default: :obj:`20`)
        num_val (int, optional): Validation nodes. (default: :obj:`500`)
        num_test (int, optional): Test nodes; :obj:`None` for all nodes in neither
            the training nor the validation set. (default: :obj:`1000`)
        seed (int or torch.Generator, optional): The seed of a fresh generator, or a
            generator to draw from. (default: :obj:`0`)
        num_classes (int, optional): The number of classes; every class must hold at
            least :obj:`num_per_class` nodes. (default: :obj:`int(y.max()) + 1`)

    Returns:
        (torch.Tensor, torch.Tensor, torch.Tensor): Boolean :obj:`train_mask`,
        :obj:`val_mask`, :obj:`test_mask` of shape :obj:`[N]`, on :obj:`y`'s device.
    """
    if not isinstance(y, Tensor):
        raise TypeError(f"`y` must be a torch.Tensor; got {type(y).__name__}")
    if y.dim() != 1 or y.dtype.is_floating_point or y.dtype == torch.bool \
            or y.is_complex():
        raise ValueError("`y` must be a 1-D integer tensor of class labels (multi-label "
                         f"targets are not supported); got dtype {y.dtype}, shape "
                         f"{tuple(y.shape)}")
    if y.numel() == 0:
        raise ValueError("`y` must hold at least one label; got an empty tensor")
    labels = y.detach().cpu().long()
    if int(labels.min()) < 0:
        raise ValueError(f"`y` must hold labels >= 0; got a label {int(labels.min())}")
    num_per_class = check_count(num_per_class, "num_per_class")
    num_val = check_count(num_val, "num_val")
    if num_test is not None:
        num_test = check_count(num_test, "num_test")
    if num_classes is None:
        num_classes = int(labels.max()) + 1
    else:
        num_classes = check_count(num_classes, "num_classes", minimum=1)
        if int(labels.max()) >= num_classes:
            raise ValueError(f"`y` must hold labels < num_classes={num_classes}; got a "
                             f"label {int(labels.max())}")
    counts = torch.bincount(labels, minlength=num_classes)
    too_small = (counts < num_per_class).nonzero().view(-1)
    if too_small.numel() > 0:
        c = int(too_small[0])
        raise ValueError(f"`num_per_class` must be <= the size of every class; got "
                         f"{num_per_class}, but class {c} has {int(counts[c])} node(s)")
    num_nodes = labels.numel()
    num_rest = num_nodes - num_per_class * num_classes
    if num_val + (num_test or 0) > num_rest:
        raise ValueError(f"`num_val` + `num_test` must be <= the {num_rest} node(s) left "
                         f"after the training set; got {num_val} + {num_test or 0}")
    generator = make_generator(seed)

    train = []
    for c in range(num_classes):
        members = (labels == c).nonzero().view(-1)
        train.append(members[randperm(members.numel(), generator)[:num_per_class]])
    train_index = torch.cat(train)
    is_train = torch.zeros(num_nodes, dtype=torch.bool)
    is_train[train_index] = True
    rest = (~is_train).nonzero().view(-1)
    rest = rest[randperm(rest.numel(), generator)]
    val_index = rest[:num_val]
    test_index = rest[num_val:] if num_test is None else rest[num_val:num_val + num_test]
    return to_masks(num_nodes, train_index, val_index, test_index, device=y.device)
