"""Uniformly random node splits, by counts or by fractions (CARIBOU, PrivGE)."""
from __future__ import annotations

import math

import torch

from ._masks import Split, randperm, to_masks
from ._validate import check_count, check_fraction, make_generator

__all__ = ["random_count_split", "random_split", "random_fraction_split"]


def random_count_split(
    num_nodes: int,
    *,
    num_train: int,
    num_val: int | None = None,
    num_test: int,
    seed: int | torch.Generator = 0,
) -> Split:
    r"""Splits :obj:`num_nodes` nodes uniformly at random into disjoint train,
    validation and test sets of the given sizes.

    A random permutation of the nodes is drawn; its first :obj:`num_train` entries
    are the training set, the next :obj:`num_val` the validation set and the next
    :obj:`num_test` the test set (with :obj:`num_val=None`, the test set follows the
    training set and the validation set is everything left).

    Args:
        num_nodes (int): The number of nodes :math:`N \geq 1`.
        num_train (int): The number of training nodes.
        num_val (int, optional): The number of validation nodes; :obj:`None` for all
            nodes in neither the training nor the test set. (default: :obj:`None`)
        num_test (int): The number of test nodes.
        seed (int or torch.Generator, optional): The seed of a fresh generator (the
            split is a deterministic function of it), or a generator to draw from.
            (default: :obj:`0`)

    Returns:
        (torch.Tensor, torch.Tensor, torch.Tensor): Boolean :obj:`train_mask`,
        :obj:`val_mask`, :obj:`test_mask` of shape :obj:`[num_nodes]`.
    """
    num_nodes = check_count(num_nodes, "num_nodes", minimum=1)
    num_train = check_count(num_train, "num_train")
    num_test = check_count(num_test, "num_test")
    if num_val is None:
        if num_train + num_test > num_nodes:
            raise ValueError(f"`num_train` + `num_test` must be <= num_nodes={num_nodes}; "
                             f"got {num_train} + {num_test}")
    else:
        num_val = check_count(num_val, "num_val")
        if num_train + num_val + num_test > num_nodes:
            raise ValueError("`num_train` + `num_val` + `num_test` must be <= "
                             f"num_nodes={num_nodes}; got {num_train} + {num_val} + {num_test}")
    generator = make_generator(seed)

    perm = randperm(num_nodes, generator)
    train, rest = perm[:num_train], perm[num_train:]
    if num_val is None:  # the test set follows the training set; the rest is validation
        test, val = rest[:num_test], rest[num_test:]
    else:
        val, test = rest[:num_val], rest[num_val:num_val + num_test]
    return to_masks(num_nodes, train, val, test)


def _count(fraction: float, num_nodes: int) -> int:
    # Round away floating-point noise (0.29 * 100 = 28.999999999999996) before the floor.
    return math.floor(round(fraction * num_nodes, 6))


def random_split(
    num_nodes: int,
    train: float,
    val: float | None,
    test: float,
    seed: int | torch.Generator = 0,
) -> Split:
    r"""Splits the nodes uniformly at random by fractions, e.g. PrivGE's
    :obj:`random_split(N, 0.5, 0.25, 0.25, seed)`.

    The set sizes are :math:`\lfloor f N \rfloor` for each given fraction :math:`f`
    (so at most a few nodes may be left in no set when the fractions sum to 1). With
    :obj:`val=None`, the validation set is every node in neither the training nor the
    test set. The split is drawn as in :func:`random_count_split`.

    Args:
        num_nodes (int): The number of nodes :math:`N \geq 1`.
        train (float): The training fraction, in :math:`[0, 1]`.
        val (float, optional): The validation fraction, in :math:`[0, 1]`, or
            :obj:`None` for the rest.
        test (float): The test fraction, in :math:`[0, 1]`.
        seed (int or torch.Generator, optional): The seed of a fresh generator, or a
            generator to draw from. (default: :obj:`0`)

    Returns:
        (torch.Tensor, torch.Tensor, torch.Tensor): Boolean :obj:`train_mask`,
        :obj:`val_mask`, :obj:`test_mask` of shape :obj:`[num_nodes]`.
    """
    num_nodes = check_count(num_nodes, "num_nodes", minimum=1)
    train = check_fraction(train, "train")
    test = check_fraction(test, "test")
    val = None if val is None else check_fraction(val, "val")
    total = train + test + (val or 0.0)
    if total > 1.0 + 1e-9:
        names = "`train` + `test`" if val is None else "`train` + `val` + `test`"
        raise ValueError(f"{names} must be <= 1; got {total!r}")
    return random_count_split(
        num_nodes,
        num_train=_count(train, num_nodes),
        num_val=None if val is None else _count(val, num_nodes),
        num_test=_count(test, num_nodes),
        seed=seed,
    )


def random_fraction_split(
    num_nodes: int,
    train: float = 0.1,
    val: float | None = None,
    test: float = 0.2,
    seed: int | torch.Generator = 0,
) -> Split:
    r"""CARIBOU's random split: 10% training and 20% test nodes, the rest validation
    (:func:`random_split` with these defaults).

    Args:
        num_nodes (int): The number of nodes :math:`N \geq 1`.
        train (float, optional): The training fraction. (default: :obj:`0.1`)
        val (float, optional): The validation fraction, or :obj:`None` for the rest.
            (default: :obj:`None`)
        test (float, optional): The test fraction. (default: :obj:`0.2`)
        seed (int or torch.Generator, optional): The seed of a fresh generator, or a
            generator to draw from. (default: :obj:`0`)

    Returns:
        (torch.Tensor, torch.Tensor, torch.Tensor): Boolean :obj:`train_mask`,
        :obj:`val_mask`, :obj:`test_mask` of shape :obj:`[num_nodes]`.
    """
    return random_split(num_nodes, train, val, test, seed)
