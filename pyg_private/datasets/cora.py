"""Cora (Planetoid release), loaded through PyG's :class:`~torch_geometric.datasets.Planetoid`."""
from __future__ import annotations

import os
from typing import Callable

from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid

from ._root import resolve_root

__all__ = ["cora_dataset", "load_cora"]

Transform = Callable[[Data], Data]


def cora_dataset(
    root: str | os.PathLike | None = None,
    transform: Transform | None = None,
    pre_transform: Transform | None = None,
) -> Planetoid:
    r"""Returns the Cora citation graph as a PyG
    :class:`~torch_geometric.datasets.Planetoid` dataset (public split).

    2,708 nodes, 10,556 directed edge entries (5,278 undirected edges), 1,433 binary
    bag-of-words features, 7 classes, public split 140 / 500 / 1,000.

    Args:
        root (str or os.PathLike, optional): The folder holding ``Cora/raw`` (a copy
            of ``Planetoid/``), used as is. If :obj:`None`, the raw files are copied
            from :obj:`$PYG_PRIVATE_DATA/Planetoid/Cora/raw` into the cache, or
            downloaded into the cache when :obj:`PYG_PRIVATE_DATA` is unset (see
            :func:`~pyg_private.datasets.resolve_root`). (default: :obj:`None`)
        transform (callable, optional): Applied at every access. A noisy transform
            here is a new release at every access. (default: :obj:`None`)
        pre_transform (callable, optional): Applied once before saving to
            ``processed/``. (default: :obj:`None`)

    Returns:
        torch_geometric.datasets.Planetoid: The dataset (one graph).
    """
    root = resolve_root(root, collection="Planetoid", raw_subdir="Cora/raw")
    return Planetoid(root, "Cora", transform=transform, pre_transform=pre_transform)


def load_cora(
    root: str | os.PathLike | None = None,
    transform: Transform | None = None,
    pre_transform: Transform | None = None,
) -> Data:
    r"""Returns the Cora graph as a :class:`~torch_geometric.data.Data` object, with
    :obj:`x`, :obj:`edge_index`, :obj:`y` and the public :obj:`train_mask`,
    :obj:`val_mask`, :obj:`test_mask`.

    Args:
        root (str or os.PathLike, optional): See :func:`cora_dataset`.
            (default: :obj:`None`)
        transform (callable, optional): See :func:`cora_dataset`.
            (default: :obj:`None`)
        pre_transform (callable, optional): See :func:`cora_dataset`.
            (default: :obj:`None`)

    Returns:
        torch_geometric.data.Data: The graph.
    """
    return cora_dataset(root, transform, pre_transform)[0]
