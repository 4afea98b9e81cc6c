r"""What every node-classification recipe does to ``data`` before anything private: the graph as
PyG loads it made simple (on request) and the unlabelled nodes taken out of the masks.

**Cleaning the graph** (``clean_graph=True``). PyG's datasets often list self-loops, duplicate
entries or one direction of an edge only (Facebook Page-Page as PyG loads it has 179
self-loops). The recipes compute on an undirected simple graph and refuse any other; with
``clean_graph=True`` they first apply :func:`clean_graph`: drop self-loops, add the missing
reverse entries and merge duplicates (``remove_self_loops`` then ``to_undirected``).

*Where that is valid.* The cleaning reads the private graph, but it is a fixed, deterministic map
:math:`g` applied to every input alike, and it is 1-stable for both units: if :math:`G` and
:math:`G'` differ in one edge (one pair :math:`\{u, v\}`, with any multiplicity, direction or a
self-loop), :math:`g(G)` and :math:`g(G')` are equal or differ in one undirected edge; if they
differ in one node and its edges, :math:`g(G)` and :math:`g(G')` differ in that node and its
edges. So a release that is :math:`(\epsilon, \delta)`-DP on the simple graph :math:`g(G)` is
:math:`(\epsilon, \delta)`-DP on :math:`G` under the same unit (post-processing runs the other
way: here the map comes first, and stability is what carries the guarantee back). The unit of
the guarantee is then a *pair of nodes*: every entry between :math:`u` and :math:`v`
(both directions, duplicates) counts as one edge. A cleaning that kept only some edges (a
degree cap, sampling by other edges' presence) would not be 1-stable and is not offered here.

**Unlabelled nodes.** A label :math:`y < 0` (PyG's convention for "unknown", e.g. the Facebook100
and LINKX graphs) is no class. The recipes take such nodes out of ``train_mask``, ``val_mask``
and ``test_mask`` and say how many with a :class:`UnlabelledNodesWarning`; the nodes themselves
stay in the graph (their features and edges still take part in the propagation).
"""
from __future__ import annotations

import copy
import functools
import warnings
from typing import Callable, Optional, TypeVar

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from ..utils.graph_validation import check_edge_index

__all__ = ["clean_graph", "prepare_node_data", "trains_with_autograd", "UnlabelledNodesWarning", "MASKS"]

R = TypeVar("R")

MASKS = ("train_mask", "val_mask", "test_mask")


class UnlabelledNodesWarning(UserWarning):
    """Nodes with a negative label (unknown) were taken out of the split masks."""


def trains_with_autograd(recipe: Callable[..., R]) -> Callable[..., R]:
    """Run ``recipe`` with autograd on, also when it is called under ``torch.inference_mode()`` or
    ``torch.no_grad()`` (evaluation loops, Lightning's ``predict``): a recipe trains its models. The
    data it reads are made normal tensors by :func:`prepare_node_data` (an inference tensor cannot
    be saved for backward)."""

    @functools.wraps(recipe)
    def run(*args, **kwargs) -> R:
        with torch.inference_mode(False), torch.enable_grad():
            return recipe(*args, **kwargs)

    return run


def _normal(t: object) -> object:
    """A tensor created under ``torch.inference_mode()`` copied into a normal one (autograd may
    save it); anything else as it is."""
    return t.clone() if isinstance(t, Tensor) and t.is_inference() else t


def clean_graph(edge_index: Tensor, num_nodes: Optional[int] = None) -> Tensor:
    """The undirected simple graph of ``edge_index``: self-loops dropped, every edge listed in both
    directions once, sorted (a deterministic, 1-stable map; see the module notes)."""
    n = check_edge_index(edge_index, num_nodes)
    ei, _ = remove_self_loops(edge_index.long())
    return to_undirected(ei, num_nodes=n)


def prepare_node_data(data: Data, *, recipe: str, clean: bool = False, masks: tuple[str, ...] = MASKS,
                      level: str = "edge") -> Data:
    """A shallow copy of ``data`` ready for a recipe: the graph cleaned when ``clean`` (see
    :func:`clean_graph`), and the nodes with ``y < 0`` taken out of ``masks`` (with a
    :class:`UnlabelledNodesWarning`, which gives their number per mask at edge level, where labels
    are public, and no number at node level, where a count of unknown labels is a statistic of the
    private data). ``data`` itself is not changed.

    Raises:
        ValueError: ``data`` lacks ``x``, ``y`` or a mask, a mask is not a boolean node mask, or a
            mask selects no labelled node.
    """
    for name in ("x", "y", "edge_index") + tuple(masks):
        if getattr(data, name, None) is None:
            raise ValueError(f"{recipe}: `data.{name}` is missing")
    y = data.y
    if not isinstance(y, Tensor) or y.dim() != 1 or y.dtype in (torch.bool,) or y.is_floating_point():
        raise ValueError(f"{recipe}: `data.y` must be a 1-D tensor of integer class indices (-1: unknown)")
    out = copy.copy(data)
    for name in ("x", "edge_index") + tuple(masks):
        setattr(out, name, _normal(getattr(data, name)))
    y = out.y = _normal(y).long()  # cross-entropy wants int64 targets (PyG datasets may store int32)
    if clean:
        out.edge_index = clean_graph(data.edge_index, data.num_nodes)
    labelled = y >= 0
    dropped = {}
    for name in masks:
        mask = getattr(data, name)
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != y.shape:
            raise ValueError(f"{recipe}: `data.{name}` must be a boolean node mask of shape [{y.numel()}]")
        kept = mask & labelled
        if int(mask.sum()) != int(kept.sum()):
            dropped[name] = int(mask.sum()) - int(kept.sum())
        if not bool(kept.any()):
            raise ValueError(f"{recipe}: `data.{name}` selects no labelled node (labels < 0 mean unknown)")
        setattr(out, name, kept)
    if dropped:
        counts = "" if level == "node" else " (" + ", ".join(f"{k}: {v}" for k, v in dropped.items()) + ")"
        warnings.warn(f"{recipe}: nodes with an unknown label (y < 0) were taken out of the masks{counts}; "
                      "they stay in the graph", UnlabelledNodesWarning, stacklevel=4)  # the caller of the run_* recipe
    return out
