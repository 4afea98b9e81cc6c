"""What every node-classification example does to a graph before anything private: the graph
cleaned, one delta rule, and splits drawn over the **labelled** nodes only.

**The cleaned graph.** Graphs as PyG loads them may list self-loops, duplicate entries or one
direction of an edge only (Facebook Page-Page has 179 self-loops). :func:`clean` applies the
recipes' own map, :func:`pyg_private.models.recipe_inputs.clean_graph` (drop self-loops, add the
missing reverse entries, merge duplicates): a fixed, deterministic map that is 1-stable at edge
and node level (see :mod:`pyg_private.models.recipe_inputs`), so a guarantee on the cleaned graph
is the same guarantee on the graph as loaded, with a pair of nodes as the unit of an edge. The
examples clean once, up front, so that ``|E|`` (hence delta), the non-private baselines and the
private recipes all see the same simple graph; they still pass ``clean_graph=True`` to the
recipes, which makes each recipe's input the documented one whatever it is handed (on a
cleaned graph the map changes nothing).

**One delta rule** (edge level): ``delta = 1/|E|``, with ``|E|`` the number of undirected edges of
the cleaned graph (:func:`edge_delta`; Cora: 1/5278). Every edge-level example uses it and prints
it in its header (:func:`header`).

**Labelled nodes only.** ``y < 0`` marks an unknown label (Facebook100 ``Cornell`` and
``Cornell-year``). The random splits below are drawn over the nodes with ``y >= 0`` and mapped
back to node masks; an unlabelled node is in no split (it stays in the graph: its features and
edges take part in the propagation). Where every node is labelled the masks are exactly those of
the plain helpers of :mod:`pyg_private.datasets` with the same seed.
"""
from __future__ import annotations

import argparse
import copy
from typing import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data

from example_data import load_or_exit, spec
from pyg_private.datasets import per_class_split, random_split
from pyg_private.models.recipe_inputs import clean_graph

__all__ = ["DELTA_RULE", "clean", "load_clean", "num_edges", "edge_delta", "delta_text", "labelled",
           "random_labelled_split", "per_class_labelled_split", "class_sizes", "header"]

#: The rule, as the examples' docstrings and headers state it.
DELTA_RULE = "delta = 1/|E| (|E|: undirected edges of the cleaned graph)"


def clean(data: Data) -> Data:
    """A shallow copy of ``data`` whose ``edge_index`` is the cleaned simple graph (the recipes'
    deterministic, 1-stable map; see the module notes). ``data`` itself is not changed."""
    out = copy.copy(data)
    out.edge_index = clean_graph(data.edge_index, data.num_nodes)
    return out


def load_clean(parser: argparse.ArgumentParser, name: str, *, seed: int = 0) -> Data:
    """:func:`example_data.load_or_exit` (a node-classification graph, or a one-line error), cleaned."""
    return clean(load_or_exit(parser, name, seed=seed))


def num_edges(data: Data) -> int:
    """The undirected edges of a **cleaned** graph (each listed once per direction)."""
    return int(data.edge_index.size(1)) // 2


def edge_delta(data: Data) -> float:
    """The examples' delta at edge level: ``1/|E|`` of the cleaned graph ``data`` (1 without edges)."""
    return 1.0 / max(num_edges(data), 1)


def delta_text(data: Data) -> str:
    """``"delta = 1/|E| = 1/5278 = 0.000189"``, for the headers."""
    return f"delta = 1/|E| = 1/{num_edges(data)} = {edge_delta(data):.3g}"


def labelled(y: Tensor) -> Tensor:
    """The nodes with a known label (``y >= 0``)."""
    return y >= 0


def _scatter(index: Tensor, num_nodes: int, masks: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    out = []
    for mask in masks:
        full = torch.zeros(num_nodes, dtype=torch.bool, device=mask.device)
        full[index[mask.to(index.device)]] = True
        out.append(full)
    return tuple(out)


def random_labelled_split(y: Tensor, train: float, val: float | None, test: float,
                          seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`pyg_private.datasets.random_split` over the labelled nodes (fractions of their
    number; ``val=None``: every other labelled node), as node masks of shape ``[len(y)]``."""
    index = labelled(y).nonzero().view(-1)
    if index.numel() == 0:
        raise ValueError("the graph has no labelled node (every y < 0): no split can be drawn")
    return _scatter(index, y.numel(), random_split(index.numel(), train, val, test, seed))


def class_sizes(y: Tensor) -> list[int]:
    """The sizes of the classes present among the labelled nodes (public labels)."""
    return [c for c in torch.bincount(y[labelled(y)]).tolist() if c > 0]


def per_class_labelled_split(y: Tensor, num_per_class: int, num_val: int, num_test: int | None,
                             seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`pyg_private.datasets.per_class_split` over the labelled nodes, as node masks."""
    index = labelled(y).nonzero().view(-1)
    if index.numel() == 0:
        raise ValueError("the graph has no labelled node (every y < 0): no split can be drawn")
    return _scatter(index, y.numel(), per_class_split(y[index], num_per_class, num_val, num_test, seed))


def header(data: Data, name: str) -> str:
    """One line: the cleaned graph's nodes, undirected edges, labelled nodes and the delta rule."""
    known = int(labelled(data.y).sum()) if data.y is not None and data.y.dim() == 1 else data.num_nodes
    unlabelled = f" ({data.num_nodes - known} unlabelled, in no split)" if known < data.num_nodes else ""
    return (f"{spec(name).label}: {data.num_nodes} nodes{unlabelled}, {num_edges(data)} undirected edges "
            f"(cleaned); {delta_text(data)}")
