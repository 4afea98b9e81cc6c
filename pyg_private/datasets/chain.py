"""Synthetic chain graphs (IGNN generator, Gu et al. 2020) and CARIBOU's presets (Table 6)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from .random_split import random_count_split
from ._validate import check_count, make_generator

__all__ = ["ChainPreset", "CHAIN_PRESETS", "chain_dataset", "load_chain"]


@dataclass(frozen=True)
class ChainPreset:
    r"""The settings of one named chain dataset.

    Args:
        num_classes (int): The number of classes :math:`c`.
        num_chains_per_class (int): The number of chains per class :math:`n`.
        chain_length (int): The number of nodes per chain :math:`l`.
        num_train (int): The number of training nodes.
        num_test (int): The number of test nodes (validation: the rest).
    """

    num_classes: int
    num_chains_per_class: int
    chain_length: int
    num_train: int
    num_test: int

    @property
    def num_nodes(self) -> int:
        """The number of nodes :math:`c \\cdot n \\cdot l`."""
        return self.num_classes * self.num_chains_per_class * self.chain_length


#: CARIBOU's chain datasets (Table 6): feature dim 5, 2 classes, validation = the rest.
CHAIN_PRESETS: dict[str, ChainPreset] = {
    "Chain-S": ChainPreset(2, 3, 8, num_train=8, num_test=32),     # 48 nodes
    "Chain-M": ChainPreset(2, 3, 10, num_train=10, num_test=40),   # 60 nodes
    "Chain-L": ChainPreset(2, 3, 15, num_train=15, num_test=60),   # 90 nodes
    "Chain-X": ChainPreset(2, 5, 15, num_train=25, num_test=100),  # 150 nodes
}


def chain_dataset(
    num_classes: int,
    num_chains_per_class: int,
    chain_length: int,
    *,
    feature_dim: int = 5,
    noise: float = 1e-4,
    num_train: int,
    num_val: int | None = None,
    num_test: int,
    seed: int | torch.Generator = 0,
) -> Data:
    r"""Generates the chain node-classification dataset of IGNN
    (`Gu et al., "Implicit Graph Neural Networks", NeurIPS 2020
    <https://arxiv.org/abs/2009.06211>`_): :math:`c` classes :math:`\times`
    :math:`n` chains per class :math:`\times` :math:`l` nodes per chain, each
    chain an undirected path graph, the chains disconnected from each other.

    Node :math:`i` lies in chain :math:`k = \lfloor i / l \rfloor` at position
    :math:`i \bmod l`, and chain :math:`k` has class :math:`\lfloor k / n \rfloor`;
    every node of a chain carries the chain's class. Features are drawn i.i.d. from
    :math:`\mathcal{U}(-\text{noise}, \text{noise})`, and, as in IGNN, the one-hot
    class is **added** to the noise of the first :obj:`num_classes` dimensions of
    the **first node** of each chain (position 0), the only informative node: a
    node at position :math:`p` needs :math:`p` hops to see it, and an MLP is at
    chance. Every node has degree 1 or 2 (:math:`D_{\min} = 1`).

    A random permutation of the nodes is split into :obj:`num_train` training,
    :obj:`num_val` validation and :obj:`num_test` test nodes (see
    :func:`~pyg_private.datasets.random_count_split`). The features are drawn first
    and the split next from one generator seeded with :obj:`seed`.

    Args:
        num_classes (int): The number of classes :math:`c \geq 1`.
        num_chains_per_class (int): The number of chains per class :math:`n \geq 1`.
        chain_length (int): The nodes per chain :math:`l \geq 2`.
        feature_dim (int, optional): The feature dimension, at least
            :obj:`num_classes`. (default: :obj:`5`)
        noise (float, optional): The half-width of the uniform feature noise,
            :math:`\geq 0`. (default: :obj:`1e-4`)
        num_train (int): The number of training nodes.
        num_val (int, optional): The number of validation nodes; :obj:`None` for the
            rest. (default: :obj:`None`)
        num_test (int): The number of test nodes.
        seed (int or torch.Generator, optional): The seed of a fresh generator, or a
            generator to draw from. (default: :obj:`0`)

    Returns:
        torch_geometric.data.Data: :obj:`x` (:obj:`[N, feature_dim]`, float32),
        undirected coalesced :obj:`edge_index` (:obj:`[2, 2 c n (l - 1)]`), :obj:`y`
        (:obj:`[N]`, long), and boolean :obj:`train_mask`, :obj:`val_mask`,
        :obj:`test_mask`, with :math:`N = c n l`.
    """
    num_classes = check_count(num_classes, "num_classes", minimum=1)
    num_chains_per_class = check_count(num_chains_per_class, "num_chains_per_class",
                                       minimum=1)
    chain_length = check_count(chain_length, "chain_length", minimum=2)
    feature_dim = check_count(feature_dim, "feature_dim", minimum=1)
    if feature_dim < num_classes:
        raise ValueError(f"`feature_dim` must be >= num_classes={num_classes} (the first "
                         f"node carries the one-hot class); got {feature_dim}")
    if isinstance(noise, bool) or not isinstance(noise, Real) \
            or not math.isfinite(float(noise)) or noise < 0:
        raise ValueError(f"`noise` must be a finite real number >= 0; got {noise!r}")
    num_chains = num_classes * num_chains_per_class
    num_nodes = num_chains * chain_length
    # Validate the split sizes before drawing anything.
    check_count(num_train, "num_train")
    check_count(num_test, "num_test")
    taken = num_train + num_test + (0 if num_val is None else check_count(num_val, "num_val"))
    if taken > num_nodes:
        raise ValueError(f"`num_train` + `num_val` + `num_test` must be <= the {num_nodes} "
                         f"nodes; got {num_train} + {num_val or 0} + {num_test}")
    generator = make_generator(seed)

    starts = torch.arange(num_chains) * chain_length
    src = (starts.view(-1, 1) + torch.arange(chain_length - 1).view(1, -1)).view(-1)
    edge_index = to_undirected(torch.stack([src, src + 1]), num_nodes=num_nodes)

    x = torch.rand(num_nodes, feature_dim, generator=generator, device=generator.device)
    x = (x.cpu() * 2.0 - 1.0) * float(noise)
    chain_class = torch.arange(num_chains) // num_chains_per_class
    x[starts, chain_class] += 1.0
    y = torch.arange(num_nodes) // (num_chains_per_class * chain_length)

    train_mask, val_mask, test_mask = random_count_split(
        num_nodes, num_train=num_train, num_val=num_val, num_test=num_test,
        seed=generator)
    return Data(x=x, edge_index=edge_index, y=y, train_mask=train_mask,
                val_mask=val_mask, test_mask=test_mask)


def load_chain(name: str, seed: int | torch.Generator = 0, *, noise: float = 1e-4) -> Data:
    r"""Returns one of CARIBOU's chain datasets (Table 6), generated by
    :func:`chain_dataset` with feature dimension 5 and 2 classes:

    .. list-table::
        :header-rows: 1

        * - Name
          - Nodes
          - Chains
          - Train
          - Val
          - Test
        * - :obj:`"Chain-S"`
          - 48 (8 per chain)
          - 6
          - 8
          - 8
          - 32
        * - :obj:`"Chain-M"`
          - 60 (10 per chain)
          - 6
          - 10
          - 10
          - 40
        * - :obj:`"Chain-L"`
          - 90 (15 per chain)
          - 6
          - 15
          - 15
          - 60
        * - :obj:`"Chain-X"`
          - 150 (15 per chain)
          - 10
          - 25
          - 25
          - 100

    Args:
        name (str): :obj:`"Chain-S"`, :obj:`"Chain-M"`, :obj:`"Chain-L"` or
            :obj:`"Chain-X"` (case-insensitive).
        seed (int or torch.Generator, optional): The seed of the features and the
            split. (default: :obj:`0`)
        noise (float, optional): The half-width of the uniform feature noise.
            (default: :obj:`1e-4`)

    Returns:
        torch_geometric.data.Data: See :func:`chain_dataset`.
    """
    presets = {key.lower(): value for key, value in CHAIN_PRESETS.items()}
    preset = presets.get(name.lower()) if isinstance(name, str) else None
    if preset is None:
        raise ValueError(f"`name` must be one of {sorted(CHAIN_PRESETS)}; got {name!r}")
    return chain_dataset(
        preset.num_classes, preset.num_chains_per_class, preset.chain_length,
        feature_dim=5, noise=noise, num_train=preset.num_train, num_val=None,
        num_test=preset.num_test, seed=seed)
