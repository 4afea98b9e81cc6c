"""Cora-ML (Bojchevski & Günnemann), loaded through PyG's
:class:`~torch_geometric.datasets.CitationFull`."""
from __future__ import annotations

import os
from typing import Callable

from torch_geometric.data import Data
from torch_geometric.datasets import CitationFull

from ._root import resolve_root

__all__ = ["cora_ml_dataset", "load_cora_ml"]

Transform = Callable[[Data], Data]


def cora_ml_dataset(
    root: str | os.PathLike | None = None,
    transform: Transform | None = None,
    pre_transform: Transform | None = None,
) -> CitationFull:
    r"""Returns the Cora-ML citation graph as a PyG
    :class:`~torch_geometric.datasets.CitationFull` dataset.

    2,995 nodes, 16,316 directed edge entries (undirected), 2,879 features, 7 classes,
    no split (GCON uses :func:`~pyg_private.datasets.per_class_split`: 20 per class /
    500 / 1,000).

    PyG lowercases the name: the raw file is ``<root>/cora_ml/raw/cora_ml.npz``.

    Args:
        root (str or os.PathLike, optional): The folder holding ``cora_ml/raw`` (a
            copy of ``CitationFull/``), used as is. If :obj:`None`, the raw file is
            copied from :obj:`$PYG_PRIVATE_DATA/CitationFull/cora_ml/raw` into the
            cache, or downloaded into the cache when :obj:`PYG_PRIVATE_DATA` is unset
            (see :func:`~pyg_private.datasets.resolve_root`). (default: :obj:`None`)
        transform (callable, optional): Applied at every access. A noisy transform
            here is a new release at every access. (default: :obj:`None`)
        pre_transform (callable, optional): Applied once before saving to
            ``processed/``. (default: :obj:`None`)

    Returns:
        torch_geometric.datasets.CitationFull: The dataset (one graph).
    """
    root = resolve_root(root, collection="CitationFull", raw_subdir="cora_ml/raw")
    return CitationFull(root, "Cora_ML", transform=transform, pre_transform=pre_transform)


def load_cora_ml(
    root: str | os.PathLike | None = None,
    transform: Transform | None = None,
    pre_transform: Transform | None = None,
) -> Data:
    r"""Returns the Cora-ML graph as a :class:`~torch_geometric.data.Data` object
    with :obj:`x`, :obj:`edge_index` and :obj:`y` (no masks).

    Args:
        root (str or os.PathLike, optional): See :func:`cora_ml_dataset`.
            (default: :obj:`None`)
        transform (callable, optional): See :func:`cora_ml_dataset`.
            (default: :obj:`None`)
        pre_transform (callable, optional): See :func:`cora_ml_dataset`.
            (default: :obj:`None`)

    Returns:
        torch_geometric.data.Data: The graph.
    """
    return cora_ml_dataset(root, transform, pre_transform)[0]
