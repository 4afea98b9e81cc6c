"""Datasets, offline data resolution and node splits for the examples and the papers' evaluation protocols.

Loaders take ``root``; with ``root=None`` the raw files are copied from the offline
folder :obj:`$PYG_PRIVATE_DATA` into the writable cache :obj:`$PYG_PRIVATE_CACHE`
(default ``~/.cache/pyg_private``), or downloaded there (see :func:`resolve_root`).
"""
from ._root import CACHE_ENV_VAR, DATA_ENV_VAR, cache_dir, data_dir, resolve_root
from .attach_split import attach_split
from .blogcatalog import BlogCatalog, blogcatalog_dataset, load_blogcatalog, read_blogcatalog
from .chain import CHAIN_PRESETS, ChainPreset, chain_dataset, load_chain
from .cycles_and_trees import cycles_vs_trees
from .cora import cora_dataset, load_cora
from .cora_ml import cora_ml_dataset, load_cora_ml
from .facebook100 import Facebook100, facebook100_dataset, load_facebook100, read_facebook100
from .per_class_split import per_class_split
from .random_split import random_count_split, random_fraction_split, random_split

__all__ = [
    # where the data lives
    "DATA_ENV_VAR",
    "CACHE_ENV_VAR",
    "data_dir",
    "cache_dir",
    "resolve_root",
    # real graphs
    "load_cora",
    "cora_dataset",
    "load_cora_ml",
    "cora_ml_dataset",
    "BlogCatalog",
    "load_blogcatalog",
    "blogcatalog_dataset",
    "read_blogcatalog",
    "Facebook100",
    "load_facebook100",
    "facebook100_dataset",
    "read_facebook100",
    # synthetic graphs
    "ChainPreset",
    "CHAIN_PRESETS",
    "chain_dataset",
    "load_chain",
    "cycles_vs_trees",
    # node splits
    "per_class_split",
    "random_count_split",
    "random_split",
    "random_fraction_split",
    "attach_split",
]
