"""Facebook100 school networks (Traud, Mucha, Porter 2012) with a profile attribute as the label;
by default the **class-year** task of GAP (Sajadmanesh et al., USENIX Security 2023) and ProGAP
(Sajadmanesh & Gatica-Perez, WSDM 2024).

Source. Each school is one MATLAB file of the Facebook100 release (Traud, Mucha, Porter, "Social
structure of Facebook networks", Physica A 2012): ``A``, the sparse symmetric friendship matrix,
and ``local_info``, an integer matrix with one row per person and the columns *student/faculty
status, gender, major, second major/minor, dorm/house, year, high school*, where ``0`` means
"missing". The offline copy is Cornell's file as distributed by the LINKX benchmark (Lim et al.,
"Large scale learning on non-homophilous graphs", NeurIPS 2021) under the name ``data.mat``;
GAP's own code downloads the same files as ``<School>.mat`` and uses UIllinois20.

How GAP builds the task (``core/datasets/facebook.py`` and ``core/datasets/loader.py`` of
github.com/sisaman/GAP; ProGAP's code, github.com/sisaman/ProGAP, builds it the same way, with
the filters as a ``pre_transform``), and what is followed here:

* **Columns.** GAP reads ``local_info[:, :-1]`` with the names ``status, gender, major, minor,
  housing, year``: the last column, *high school*, is dropped entirely (it would add thousands
  of one-hot columns: 4,338 distinct schools at Cornell). Followed: by default the features are
  the other five of those six columns, never high school (``features=`` changes that).
* **Features.** GAP replaces ``0`` by a missing value and one-hot encodes every remaining column
  (``pandas.get_dummies``), so a missing value is an all-zero block, not a category, and each
  block lists the column's values in increasing order. Followed exactly. (PyG's
  :class:`~torch_geometric.datasets.LINKXDataset` instead encodes ``0`` as a category and keeps
  year and high school among the features of its gender task.) One pandas quirk is not copied:
  ``get_dummies`` leaves a column with *no* missing value as a raw integer column; here every
  column is one-hot encoded. At Cornell every column has missing values, so nothing differs.
* **Label.** GAP label-encodes the target (classes in increasing order of the raw value) with
  ``0`` mapped to ``-1``, then keeps only the classes with at least 1,000 nodes
  (``FilterClassByCount(min_count=1000)``), renumbered ``0, ..., C - 1`` in increasing order.
  Followed: ``min_class_size=1000`` by default. At Cornell this keeps the years 2004 to 2009
  (six classes): 2004: 1,695, 2005: 2,518, 2006: 2,690,
  2007: 2,942, 2008: 2,882, 2009: 2,647 (15,374 labelled nodes); 2,498 nodes have no year and
  788 have one of 38 rarer years (1900 to 2003, and 2010 with 96 nodes).
* **Not followed: node removal.** GAP deletes the unlabelled nodes and those of the dropped
  classes (``subgraph``), then self-loops and isolated nodes. Here no node is removed: they get
  ``y = -1`` and stay in the graph, so :obj:`num_nodes` is the school's (18,660 at Cornell) and
  their edges still carry messages; every split must exclude ``y = -1``. To get GAP's graph,
  take ``data.subgraph(data.y >= 0)`` and then remove the isolated nodes.
* **Not part of the loader: the split.** GAP splits the nodes at random 75 / 10 / 15 % (PyG's
  ``RandomNodeSplit(num_val=0.1, num_test=0.15)``, drawn before the class filter).

The graph is made simple and undirected: self-loops dropped, ``A`` symmetrised, both directions
listed, coalesced; a warning gives the number of self-loops and one-directional entries when the
file has any (Cornell's has none: 790,777 friendships, 1,581,554 entries).
"""
from __future__ import annotations

import json
import os
import os.path as osp
import warnings
from typing import Callable, Sequence

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset, download_url

from ._root import resolve_root

__all__ = ["ATTRIBUTES", "GAP_MIN_CLASS_SIZE", "Facebook100", "facebook100_dataset", "load_facebook100",
           "read_facebook100"]

Transform = Callable[[Data], Data]

#: The columns of ``local_info``, in order (``0`` = missing in every column).
ATTRIBUTES = ("status", "gender", "major", "minor", "dorm", "year", "high_school")
_ALIASES = {"housing": "dorm", "house": "dorm", "second_major": "minor", "highschool": "high_school",
            "high school": "high_school", "class_year": "year"}
#: GAP's columns: all but high school (``local_info[:, :-1]``).
_GAP_COLUMNS = ATTRIBUTES[:-1]
#: GAP's ``FilterClassByCount(min_count=1000)``.
GAP_MIN_CLASS_SIZE = 1000

_LINKX_URL = "https://github.com/CUAI/Non-Homophily-Large-Scale/raw/master/data/facebook100"
_GAP_URL = "https://github.com/sisaman/pyg-datasets/raw/main/datasets/facebook100"
#: The school files of the LINKX benchmark (PyG's LINKXDataset downloads these).
_LINKX_FILES = {"penn94": "Penn94.mat", "reed98": "Reed98.mat", "amherst41": "Amherst41.mat",
                "cornell5": "Cornell5.mat", "johnshopkins55": "Johns%20Hopkins55.mat"}
#: The schools GAP's code can download (its ``available_datasets``), by lower-case name.
_GAP_SCHOOLS = {s.lower(): s for s in (
    "Villanova62", "UCLA26", "Tennessee95", "NYU9", "Carnegie49", "GWU54", "USF51", "Vanderbilt48",
    "USC35", "Rutgers89", "UConn91", "MIT8", "USFCA72", "UChicago30", "UIllinois20", "UC61", "Cal65",
    "Yale4", "Northeastern19", "Dartmouth6", "Vermont70", "Northwestern25", "William77", "Harvard1",
    "Princeton12", "UC64", "Middlebury45", "Haverford76", "Bingham82", "UNC28", "Berkeley13",
    "Rochester38", "Swarthmore42", "Virginia63", "WashU32", "Columbia2", "NotreDame57", "Bucknell39",
    "UVA16", "Maine59", "MU78", "Simmons81", "MSU24", "Colgate88", "Temple83", "Cornell5", "Indiana69",
    "Oklahoma97", "Michigan23", "BU10", "Brown11", "Auburn71", "FSU53", "UGA50", "UCF52", "Howard90",
    "UCSD34", "Vassar85", "Tufts18", "UPenn7", "Baylor93", "UMass92", "Bowdoin47", "Maryland58",
    "Penn94", "Wesleyan43", "UC33", "Rice31", "UCSC68", "Smith60", "Caltech36", "Hamilton46",
    "Oberlin44", "American75", "Mich67", "Mississippi66", "Williams40", "UCSB37", "Amherst41", "Duke14",
    "Pepperdine86", "Wake73", "Lehigh96", "Reed98", "Tulane29", "Texas84", "Wellesley22", "JMU79",
    "Santa74", "Wisconsin87", "Stanford3", "Texas80", "UF21", "JohnsHopkins55", "Syracuse56", "BC17",
    "Georgetown15", "Trinity100", "Brandeis99", "Emory27")}


def _attribute(name: str, what: str) -> str:
    key = str(name).strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in ATTRIBUTES:
        raise ValueError(f"`{what}` must be one of {', '.join(ATTRIBUTES)} (or housing for dorm); "
                         f"got {name!r}")
    return key


def _columns(label: str, features: Sequence[str] | None) -> tuple[str, ...]:
    """The feature columns: GAP's (all but high school and the label) by default."""
    if features is None:
        return tuple(c for c in _GAP_COLUMNS if c != label)
    if isinstance(features, str):
        raise TypeError("`features` must be a sequence of column names, not a string")
    columns = tuple(_attribute(c, "features") for c in features)
    if label in columns:
        raise ValueError(f"`features` must not contain the label column {label!r}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"`features` lists a column twice: {list(features)}")
    return columns


def _download_url(name: str) -> str | None:
    """The URL of school ``name``'s file (LINKX's copy if it has one, else GAP's), or ``None``."""
    key = name.lower()
    if key in _LINKX_FILES:
        return f"{_LINKX_URL}/{_LINKX_FILES[key]}"
    if key in _GAP_SCHOOLS:
        return f"{_GAP_URL}/{_GAP_SCHOOLS[key]}.mat"
    return None


def _one_hot(column: np.ndarray) -> np.ndarray:
    """One-hot of ``column`` with the non-zero values in increasing order; ``0`` (missing) is an
    all-zero row."""
    values = np.unique(column[column != 0])
    out = np.zeros((len(column), len(values)), dtype=np.float32)
    known = column != 0
    out[np.nonzero(known)[0], np.searchsorted(values, column[known])] = 1.0
    return out


def read_facebook100(
    path: str | os.PathLike,
    *,
    label: str = "year",
    features: Sequence[str] | None = None,
    min_class_size: int = GAP_MIN_CLASS_SIZE,
) -> tuple[Data, list[int]]:
    r"""Reads one Facebook100 ``.mat`` file into a :class:`~torch_geometric.data.Data`.

    Args:
        path (str or os.PathLike): The ``.mat`` file (keys ``A`` and ``local_info``).
        label (str, optional): The ``local_info`` column to predict, one of :data:`ATTRIBUTES`
            (``"housing"`` is accepted for ``"dorm"``). (default: :obj:`"year"`)
        features (sequence of str, optional): The columns to one-hot encode, in this order. If
            :obj:`None`, GAP's: every column but the label and high school.
            (default: :obj:`None`)
        min_class_size (int, optional): Label values held by fewer nodes become unknown
            (:obj:`y = -1`), as GAP's ``FilterClassByCount(min_count=1000)``; ``1`` keeps every
            value. (default: :obj:`1000`)

    Returns:
        (torch_geometric.data.Data, list[int]): The graph (:obj:`x` float32 one-hot
        :obj:`[N, F]`, :obj:`edge_index` simple and undirected, :obj:`y` long with :obj:`-1` for
        missing and dropped values, :obj:`num_nodes`) and the raw value of each class
        (e.g. the years), in increasing order.
    """
    from scipy.io import loadmat

    label = _attribute(label, "label")
    columns = _columns(label, features)
    if int(min_class_size) < 1:
        raise ValueError(f"`min_class_size` must be at least 1; got {min_class_size}")

    mat = loadmat(os.fspath(path))
    if "A" not in mat or "local_info" not in mat:
        raise ValueError(f"{os.fspath(path)!r} is not a Facebook100 file: it needs the keys "
                         f"'A' and 'local_info'; found {sorted(k for k in mat if not k.startswith('__'))}")
    info = np.asarray(mat["local_info"]).astype(np.int64)
    num_nodes = info.shape[0]
    if info.ndim != 2 or info.shape[1] != len(ATTRIBUTES):
        raise ValueError(f"`local_info` must have {len(ATTRIBUTES)} columns ({', '.join(ATTRIBUTES)}); "
                         f"got shape {tuple(info.shape)}")
    adj = mat["A"]
    if adj.shape != (num_nodes, num_nodes):
        raise ValueError(f"`A` must be {num_nodes} x {num_nodes} (one row per row of `local_info`); "
                         f"got {adj.shape}")

    # Edges: the non-zero pattern of A, simple and undirected.
    adj = adj.tocoo()
    row, col = adj.row.astype(np.int64), adj.col.astype(np.int64)
    keep = (row != col) & (adj.data != 0)
    num_loops = int(((row == col) & (adj.data != 0)).sum())
    row, col = row[keep], col[keep]
    pairs = np.unique(np.concatenate([row * num_nodes + col, col * num_nodes + row]))
    num_one_way = len(pairs) - len(np.unique(row * num_nodes + col))
    if num_loops or num_one_way:
        warnings.warn(f"Facebook100: {os.fspath(path)!r}: dropped {num_loops} self-loop(s) and "
                      f"added {num_one_way} reverse edge(s) missing from `A`", stacklevel=2)
    edge_index = torch.from_numpy(np.stack([pairs // num_nodes, pairs % num_nodes]))

    # Features: one block per column, missing = all-zero block.
    blocks = [_one_hot(info[:, ATTRIBUTES.index(c)]) for c in columns]
    x = torch.from_numpy(np.concatenate(blocks, axis=1) if blocks
                         else np.zeros((num_nodes, 0), dtype=np.float32))

    # Label: the values held by at least min_class_size nodes, in increasing order.
    raw = info[:, ATTRIBUTES.index(label)]
    values, counts = np.unique(raw[raw != 0], return_counts=True)
    classes = values[counts >= int(min_class_size)]
    y = np.full(num_nodes, -1, dtype=np.int64)
    kept = np.isin(raw, classes)
    y[kept] = np.searchsorted(classes, raw[kept])

    data = Data(x=x, edge_index=edge_index, y=torch.from_numpy(y), num_nodes=num_nodes)
    return data, [int(v) for v in classes]


class Facebook100(InMemoryDataset):
    r"""One school of Facebook100 (Traud, Mucha, Porter, "Social structure of Facebook
    networks", 2012) with one profile attribute as the node label: by default the class year,
    with GAP's features and class filter (see :mod:`pyg_private.datasets.facebook100`).

    Cornell (``"cornell5"``, as distributed by LINKX, Lim et al. 2021): 18,660 nodes, 790,777
    friendships (1,581,554 entries in :obj:`edge_index`), 349 one-hot features (status 6,
    gender 2, major 104, minor 104, dorm 133), 6 year classes (2004 to 2009, 15,374 labelled
    nodes; the other 3,286 have :obj:`y = -1`).

    Args:
        root (str): The folder holding ``raw/data.mat``; the processed files go into
            ``processed/facebook100/`` next to it (apart from what PyG's
            :class:`~torch_geometric.datasets.LINKXDataset` writes into ``processed/``).
        name (str, optional): The school, used to download ``raw/data.mat`` when it is absent
            (LINKX's copy for its five schools, GAP's for the others) and in :meth:`__repr__`.
            (default: :obj:`"cornell5"`)
        label (str, optional): See :func:`read_facebook100`. (default: :obj:`"year"`)
        features (sequence of str, optional): See :func:`read_facebook100`.
            (default: :obj:`None`)
        min_class_size (int, optional): See :func:`read_facebook100`. (default: :obj:`1000`)
        transform (callable, optional): Applied at every access. A noisy transform here is a
            new release at every access. (default: :obj:`None`)
        pre_transform (callable, optional): Applied once before saving. (default: :obj:`None`)
        force_reload (bool, optional): Whether to re-process the dataset.
            (default: :obj:`False`)

    Attributes:
        classes (list[int]): The raw value of each class (for the year label, the years).
    """

    def __init__(
        self,
        root: str,
        name: str = "cornell5",
        label: str = "year",
        features: Sequence[str] | None = None,
        min_class_size: int = GAP_MIN_CLASS_SIZE,
        transform: Transform | None = None,
        pre_transform: Transform | None = None,
        force_reload: bool = False,
    ) -> None:
        self.name = str(name).lower()
        self.label = _attribute(label, "label")
        self.columns = _columns(self.label, features)
        if int(min_class_size) < 1:
            raise ValueError(f"`min_class_size` must be at least 1; got {min_class_size}")
        self.min_class_size = int(min_class_size)
        super().__init__(root, transform, pre_transform, force_reload=force_reload)
        self.load(self.processed_paths[0])
        with open(self.processed_paths[1]) as f:
            self.classes: list[int] = json.load(f)

    @property
    def raw_file_names(self) -> str:
        return "data.mat"

    @property
    def processed_dir(self) -> str:
        return osp.join(self.root, "processed", "facebook100")

    @property
    def processed_file_names(self) -> list[str]:
        stem = f"{self.label}-{'+'.join(self.columns) or 'none'}-min{self.min_class_size}"
        return [f"{stem}.pt", f"{stem}.classes.json"]

    def download(self) -> None:
        url = _download_url(self.name)
        if url is None:
            raise FileNotFoundError(
                f"Facebook100 raw file not found: {osp.join(self.raw_dir, 'data.mat')!r}, and "
                f"{self.name!r} is not a school this loader can download. Put the school's "
                "Facebook100 .mat file (keys A and local_info) there as data.mat, or pass one of "
                f"{', '.join(sorted(_GAP_SCHOOLS))}")
        download_url(url, self.raw_dir, filename="data.mat")

    def process(self) -> None:
        data, classes = read_facebook100(self.raw_paths[0], label=self.label, features=self.columns,
                                         min_class_size=self.min_class_size)
        if self.pre_transform is not None:
            data = self.pre_transform(data)
        self.save([data], self.processed_paths[0])
        with open(self.processed_paths[1], "w") as f:
            json.dump(classes, f)

    def __repr__(self) -> str:
        return f"Facebook100({self.name}, label={self.label})"


def facebook100_dataset(
    name: str = "cornell5",
    *,
    root: str | os.PathLike | None = None,
    label: str = "year",
    features: Sequence[str] | None = None,
    min_class_size: int = GAP_MIN_CLASS_SIZE,
    transform: Transform | None = None,
    pre_transform: Transform | None = None,
) -> Facebook100:
    r"""Returns the :class:`Facebook100` dataset of school ``name``, resolving :obj:`root`.

    Args:
        name (str, optional): The school, in LINKX's lower-case spelling.
            (default: :obj:`"cornell5"`)
        root (str or os.PathLike, optional): The folder holding ``raw/data.mat``, used as is.
            If :obj:`None`, the file is copied from
            :obj:`$PYG_PRIVATE_DATA/LINKX/<name>/raw/data.mat` into the cache folder
            ``LINKX/<name>`` (the layout of PyG's
            :class:`~torch_geometric.datasets.LINKXDataset`), or downloaded there when
            :obj:`PYG_PRIVATE_DATA` is unset (see :func:`~pyg_private.datasets.resolve_root`).
            (default: :obj:`None`)
        label, features, min_class_size: See :func:`read_facebook100`.
        transform (callable, optional): See :class:`Facebook100`. (default: :obj:`None`)
        pre_transform (callable, optional): See :class:`Facebook100`. (default: :obj:`None`)

    Returns:
        Facebook100: The dataset (one graph).
    """
    name = str(name).lower()
    root = resolve_root(root, collection=f"LINKX/{name}", raw_subdir="raw")
    return Facebook100(root, name, label=label, features=features, min_class_size=min_class_size,
                       transform=transform, pre_transform=pre_transform)


def load_facebook100(
    name: str = "cornell5",
    *,
    root: str | os.PathLike | None = None,
    label: str = "year",
    features: Sequence[str] | None = None,
    min_class_size: int = GAP_MIN_CLASS_SIZE,
    transform: Transform | None = None,
    pre_transform: Transform | None = None,
) -> Data:
    r"""Returns Facebook100 school ``name`` as a :class:`~torch_geometric.data.Data` with
    one-hot :obj:`x`, simple undirected :obj:`edge_index` and :obj:`y` (:obj:`-1`: unknown or a
    class below :obj:`min_class_size`; exclude these nodes from every split). By default GAP's
    class-year task.

    Args:
        name (str, optional): See :func:`facebook100_dataset`. (default: :obj:`"cornell5"`)
        root (str or os.PathLike, optional): See :func:`facebook100_dataset`.
            (default: :obj:`None`)
        label, features, min_class_size: See :func:`read_facebook100`.
        transform (callable, optional): See :class:`Facebook100`. (default: :obj:`None`)
        pre_transform (callable, optional): See :class:`Facebook100`. (default: :obj:`None`)

    Returns:
        torch_geometric.data.Data: The graph.
    """
    return facebook100_dataset(name, root=root, label=label, features=features,
                               min_class_size=min_class_size, transform=transform,
                               pre_transform=pre_transform)[0]
