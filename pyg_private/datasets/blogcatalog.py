"""BlogCatalog (ASU social-computing release, 10,312 bloggers, 39 interest groups)."""
from __future__ import annotations

import os
import os.path as osp
import warnings
from typing import Callable

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.utils import to_undirected

from ._root import resolve_root

__all__ = ["BlogCatalog", "blogcatalog_dataset", "load_blogcatalog", "read_blogcatalog"]

Transform = Callable[[Data], Data]

_RAW_FILES = ["edges.csv", "group-edges.csv", "nodes.csv", "groups.csv"]


def _read_ints(path: str, columns: int) -> np.ndarray:
    """Reads a comma-separated file of integers into an array of shape ``[rows, columns]``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # numpy warns on an empty file
        table = np.loadtxt(path, delimiter=",", dtype=np.int64, ndmin=2)
    if table.size == 0:
        table = table.reshape(0, columns)
    if table.shape[1] != columns:
        raise ValueError(f"{path!r} must have {columns} comma-separated column(s) of "
                         f"integers; found {table.shape[1]}")
    return table


def _ids_to_index(ids: np.ndarray, known: np.ndarray, what: str, path: str) -> np.ndarray:
    """Maps the raw ids ``ids`` to positions in the sorted array ``known``."""
    if len(known) == 0:
        bad = np.ones(ids.shape, dtype=bool)
        pos = np.zeros(ids.shape, dtype=np.int64)
    else:
        pos = np.searchsorted(known, ids)
        bad = (pos >= len(known)) | (known[np.minimum(pos, len(known) - 1)] != ids)
    if bad.any():
        raise ValueError(f"{path!r} refers to {int(bad.sum())} {what} id(s) not listed "
                         f"in the {what} file, e.g. {int(ids[bad][0])}")
    return pos


def read_blogcatalog(raw_dir: str) -> Data:
    r"""Reads the raw BlogCatalog files into a :class:`~torch_geometric.data.Data`.

    Node and group ids (1-indexed in the release) are mapped to :obj:`0, ..., N - 1`
    and :obj:`0, ..., G - 1` in increasing id order. The graph is made undirected
    (both directions in :obj:`edge_index`) and coalesced. Self-loops and duplicate
    edges (in either orientation) are **dropped with a warning** giving their
    number; the ASU release has none. Ids that are not listed in ``nodes.csv`` or
    ``groups.csv`` raise a :class:`ValueError`.

    Args:
        raw_dir (str): The folder holding ``edges.csv``, ``group-edges.csv``,
            ``nodes.csv`` and ``groups.csv``.

    Returns:
        torch_geometric.data.Data: :obj:`edge_index` (:obj:`[2, E]`), :obj:`y` (a
        multi-hot :obj:`float` tensor of shape :obj:`[N, G]`), :obj:`num_nodes`, and
        no features.
    """
    paths = {name: osp.join(raw_dir, name) for name in _RAW_FILES}
    node_ids = _read_ints(paths["nodes.csv"], 1)[:, 0]
    group_ids = _read_ints(paths["groups.csv"], 1)[:, 0]
    for ids, name in ((node_ids, "nodes.csv"), (group_ids, "groups.csv")):
        if len(np.unique(ids)) != len(ids):
            raise ValueError(f"{paths[name]!r} lists {len(ids) - len(np.unique(ids))} "
                             "duplicate id(s)")
    node_ids, group_ids = np.sort(node_ids), np.sort(group_ids)
    num_nodes, num_groups = len(node_ids), len(group_ids)

    edges = _read_ints(paths["edges.csv"], 2)
    edges = _ids_to_index(edges, node_ids, "node", paths["edges.csv"])
    self_loop = edges[:, 0] == edges[:, 1]
    edges = np.sort(edges[~self_loop], axis=1)
    unique = np.unique(edges, axis=0)
    num_duplicates = len(edges) - len(unique)
    if self_loop.any() or num_duplicates:
        warnings.warn(f"BlogCatalog: dropped {int(self_loop.sum())} self-loop(s) and "
                      f"{num_duplicates} duplicate edge(s) from {paths['edges.csv']!r}",
                      stacklevel=2)
    edge_index = to_undirected(torch.from_numpy(unique.T.copy()), num_nodes=num_nodes)

    memberships = _read_ints(paths["group-edges.csv"], 2)
    rows = _ids_to_index(memberships[:, 0], node_ids, "node", paths["group-edges.csv"])
    cols = _ids_to_index(memberships[:, 1], group_ids, "group", paths["group-edges.csv"])
    y = torch.zeros(num_nodes, num_groups, dtype=torch.float)
    y[torch.from_numpy(rows), torch.from_numpy(cols)] = 1.0

    return Data(edge_index=edge_index, y=y, num_nodes=num_nodes)


class BlogCatalog(InMemoryDataset):
    r"""The BlogCatalog social network of the ASU social-computing repository
    (Tang & Liu, "Relational learning via latent social dimensions", KDD 2009):
    bloggers as nodes, friendships as undirected edges, and the bloggers' interest
    groups as multi-label targets.

    10,312 nodes, 333,983 undirected edges (667,966 entries in :obj:`edge_index`),
    39 groups, no node features (:obj:`x` is :obj:`None`; attach e.g. one-hot or
    structural features with a transform if a model needs them).

    This is **not** PyG's :class:`~torch_geometric.datasets.AttributedGraphDataset`
    :obj:`"BlogCatalog"`, a different graph with 5,196 nodes.

    The release has no stable public URL, so :meth:`download` raises: put the raw
    files ``edges.csv``, ``group-edges.csv``, ``nodes.csv`` and ``groups.csv``
    (comma-separated, 1-indexed ids, one undirected edge or one ``node,group``
    membership per line) into ``<root>/raw``.

    Args:
        root (str): The folder holding ``raw/``; ``processed/`` is written next to it.
        transform (callable, optional): Applied at every access. A noisy transform
            here is a new release at every access. (default: :obj:`None`)
        pre_transform (callable, optional): Applied once before saving to
            ``processed/``. (default: :obj:`None`)
        pre_filter (callable, optional): A filter applied before saving.
            (default: :obj:`None`)
        force_reload (bool, optional): Whether to re-process the dataset.
            (default: :obj:`False`)

    **STATS:**

    .. list-table::
        :header-rows: 1

        * - #nodes
          - #edges
          - #features
          - #tasks
        * - 10,312
          - 667,966
          - 0
          - 39
    """

    def __init__(
        self,
        root: str,
        transform: Transform | None = None,
        pre_transform: Transform | None = None,
        pre_filter: Callable[[Data], bool] | None = None,
        force_reload: bool = False,
    ) -> None:
        super().__init__(root, transform, pre_transform, pre_filter,
                         force_reload=force_reload)
        self.load(self.processed_paths[0])

    @property
    def raw_file_names(self) -> list[str]:
        return list(_RAW_FILES)

    @property
    def processed_file_names(self) -> str:
        return "data.pt"

    def download(self) -> None:
        missing = [name for name in _RAW_FILES
                   if not osp.isfile(osp.join(self.raw_dir, name))]
        raise FileNotFoundError(
            f"BlogCatalog raw file(s) {missing} not found in {self.raw_dir!r}, and this "
            "dataset cannot be downloaded automatically (no stable public URL). Put "
            "the ASU social-computing release (Tang & Liu 2009; 10,312 nodes, "
            f"333,983 edges, 39 groups) files {_RAW_FILES} into {self.raw_dir!r}, or "
            "set PYG_PRIVATE_DATA to a folder holding BlogCatalog/raw and pass "
            "root=None. PyG's AttributedGraphDataset('BlogCatalog') is a different "
            "graph (5,196 nodes) and is not a substitute.")

    def process(self) -> None:
        data = read_blogcatalog(self.raw_dir)
        if self.pre_filter is not None and not self.pre_filter(data):
            raise ValueError("`pre_filter` rejected the only graph of BlogCatalog")
        if self.pre_transform is not None:
            data = self.pre_transform(data)
        self.save([data], self.processed_paths[0])

    def __repr__(self) -> str:
        return "BlogCatalog()"


def blogcatalog_dataset(
    root: str | os.PathLike | None = None,
    transform: Transform | None = None,
    pre_transform: Transform | None = None,
) -> BlogCatalog:
    r"""Returns the :class:`BlogCatalog` dataset, resolving :obj:`root`.

    Args:
        root (str or os.PathLike, optional): The folder holding ``raw/``, used as
            is. If :obj:`None`, the raw files are copied from
            :obj:`$PYG_PRIVATE_DATA/BlogCatalog/raw` into the cache (see
            :func:`~pyg_private.datasets.resolve_root`); without
            :obj:`PYG_PRIVATE_DATA` the cache must already hold them.
            (default: :obj:`None`)
        transform (callable, optional): See :class:`BlogCatalog`.
            (default: :obj:`None`)
        pre_transform (callable, optional): See :class:`BlogCatalog`.
            (default: :obj:`None`)

    Returns:
        BlogCatalog: The dataset (one graph).
    """
    root = resolve_root(root, collection="BlogCatalog", raw_subdir="raw")
    return BlogCatalog(root, transform=transform, pre_transform=pre_transform)


def load_blogcatalog(
    root: str | os.PathLike | None = None,
    transform: Transform | None = None,
    pre_transform: Transform | None = None,
) -> Data:
    r"""Returns the BlogCatalog graph as a :class:`~torch_geometric.data.Data` with
    :obj:`edge_index`, multi-hot :obj:`y` (:obj:`[10312, 39]`) and no features.

    Args:
        root (str or os.PathLike, optional): See :func:`blogcatalog_dataset`.
            (default: :obj:`None`)
        transform (callable, optional): See :class:`BlogCatalog`.
            (default: :obj:`None`)
        pre_transform (callable, optional): See :class:`BlogCatalog`.
            (default: :obj:`None`)

    Returns:
        torch_geometric.data.Data: The graph.
    """
    return blogcatalog_dataset(root, transform, pre_transform)[0]
