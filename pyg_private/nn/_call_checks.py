"""Errors for the calls a PyG user writes first (``GCNConv``-style constructors, ``edge_weight``,
inputs that require grad): each names the public argument, says what the layer is and what to write."""
from __future__ import annotations

from numbers import Integral
from typing import Any

import torch
from torch import Tensor

__all__ = ["reject_channel_counts", "reject_edge_weight", "reject_grad_input", "reject_sampled_batch", "reject_bipartite",
           "SAMPLING_METADATA"]

#: The attributes PyG's samplers attach to a batch drawn from a larger graph: ``NeighborLoader`` /
#: ``LinkNeighborLoader`` / ``HGTLoader`` (``n_id``, ``e_id``, ``input_id``, ``batch_size``,
#: ``num_sampled_nodes``, ``num_sampled_edges``, ``seed_time``, ``_orig_edge_index``),
#: ``ShaDowKHopSampler`` (``root_n_id``) and the GraphSAINT samplers (``node_norm``, ``edge_norm``).
#: None of them is set by a ``DataLoader`` over a graph dataset (disjoint graphs: ``batch``, ``ptr``).
SAMPLING_METADATA = ("n_id", "e_id", "input_id", "batch_size", "num_sampled_nodes", "num_sampled_edges",
                     "seed_time", "_orig_edge_index", "root_n_id", "node_norm", "edge_norm")

_PROPAGATION = ("{name} is a parameter-free private propagation (like PyG's APPNP): it has no input or output "
                "channels and no weights; put your own layers (e.g. torch.nn.Linear) before or after it. ")


def _is_count(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool) and value >= 1


def reject_channel_counts(name: str, first: Any, second: Any, example: str, *, parameters: str) -> None:
    """Raise a ``TypeError`` when the first two positional arguments look like ``GCNConv``'s
    ``(in_channels, out_channels)``: ``second`` (and ``first``) a positive integer where the layer
    expects ``parameters``."""
    if _is_count(first) and _is_count(second) and (first > 1 or second > 1):
        raise TypeError(_PROPAGATION.format(name=name) + f"Its positional arguments are {parameters}, so "
                        f"{name}({first}, {second}) does not mean (in_channels, out_channels). Write for example "
                        f"{example}.")


def reject_edge_weight(name: str, argument: str, value: Any, meaning: str) -> None:
    """Raise a ``ValueError`` when a ``GCNConv``-style ``layer(x, edge_index, edge_weight)`` call put an
    edge-weight vector (a floating-point 1-D tensor) into ``argument``."""
    if isinstance(value, Tensor) and value.dim() == 1 and value.is_floating_point():
        raise ValueError(f"{name} takes no edge weights: its privacy analysis is for an unweighted graph (one "
                         f"edge changes one 0/1 entry). The third positional argument is `{argument}` ({meaning}); "
                         "call layer(x, edge_index), with the graph's edges only.")


def reject_grad_input(name: str, x: Any, training: bool) -> None:
    """Raise a ``ValueError`` when a release is asked for in training mode on an input that requires
    grad: the release is detached (gradients through the private graph would be a new release each
    step) and every call is charged, so training through the layer silently cuts the gradient and
    spends budget every epoch."""
    if training and torch.is_grad_enabled() and isinstance(x, Tensor) and x.requires_grad:
        raise ValueError(
            f"{name} got an input that requires grad in training mode. Its output is a private release: it is "
            "detached (no gradient reaches the layers before it) and every forward with new inputs is a new "
            "charged release, so training through it spends budget every epoch. Precompute instead: run it once "
            "on fixed features with cached=True (under torch.no_grad(), or on x.detach()) and train your layers "
            "on its output; pass x.detach() to release deliberately, or call layer.eval().")


def reject_sampled_batch(name: str, data: Any) -> None:
    """Raise a ``ValueError`` when ``data`` (a ``Data`` or ``HeteroData``) carries the metadata of a
    sampled subgraph (:data:`SAMPLING_METADATA`), whatever the component's options (``symmetrize``
    included), before anything is charged.

    A release on a neighbour-sampled batch is not covered by a per-edge (or per-node) analysis:
    which nodes and edges the sampler kept depends on the other edges of the private graph, so one
    edge changes more than the release's own input. The layers themselves take tensors
    (``layer(batch.x, batch.edge_index)``), which carry no trace of the sampler, so they can only
    refuse a sampled batch while it is directed; the components that receive the ``Data`` object
    refuse it here."""
    stores = getattr(data, "stores", None)
    stores = [data] if stores is None else list(stores)
    found = []
    for store in stores:
        keys = store.keys() if callable(getattr(store, "keys", None)) else ()
        found += [key for key in SAMPLING_METADATA if key in keys and key not in found]
    if found:
        raise ValueError(
            f"{name} got a sampled subgraph: the data carry {', '.join(repr(k) for k in found)}, which PyG's "
            "samplers (NeighborLoader, LinkNeighborLoader, HGTLoader, ShaDowKHopSampler, GraphSAINT) attach to a batch. "
            "A release on a sampled batch is not covered by the per-edge analysis: which nodes and edges are sampled depends on "
            "the other edges of the private graph, and symmetrize=True does not change that. Release once on the whole "
            "graph (cached) and mini-batch only the trainable head on the released features "
            "(pyg_private.nn.PrecomputedPropagation); batches of disjoint graphs fixed without reading the edges "
            "(a DataLoader over a graph dataset) compose in parallel (PrivacyAccountant.parallel).")


def _rectangular(adj: Any) -> bool:
    """Whether a graph argument declares a bipartite (non-square) shape: an ``EdgeIndex`` of two
    different sparse sizes, or a sparse matrix that is not square (public sizes only)."""
    from torch_geometric import EdgeIndex
    from torch_geometric.typing import SparseTensor

    if isinstance(adj, EdgeIndex):
        a, b = adj.sparse_size()
        return a is not None and b is not None and a != b
    if isinstance(adj, SparseTensor):
        return adj.size(0) != adj.size(1)
    if isinstance(adj, Tensor) and adj.layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc):
        return adj.dim() == 2 and adj.size(0) != adj.size(1)
    return False


#: Why the multi-hop diffusions stay on one node set (their docstrings say the same).
MULTI_HOP_REASON = (
    "its guarantee is for K hops of one square (normalised) adjacency iterated on one node set, and a bipartite "
    "relation maps source rows to destination rows, so a second hop is not defined and the bound does not apply")


def reject_bipartite(name: str, x: Any, adj: Any = None, *, reason: str = MULTI_HOP_REASON) -> None:
    """Raise a ``ValueError`` (before anything is charged) when a layer that runs on one square graph
    gets a bipartite relation: ``x = (x_src, x_dst)`` as ``HeteroConv`` and ``to_hetero`` pass it for an
    edge type between two node types, or a non-square ``EdgeIndex`` / sparse adjacency."""
    if isinstance(x, (tuple, list)) or _rectangular(adj):
        raise ValueError(
            f"{name} does not take a bipartite relation (x = (x_src, x_dst) or a non-square adjacency): {reason}. "
            "Use GAPAggregation or ProGAPAggregation (one hop per relation) on bipartite edge types, and this layer "
            "on relations between nodes of one type (src == dst), which HeteroConv and to_hetero pass as a single "
            "x; nothing was charged")
