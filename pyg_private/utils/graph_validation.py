"""Checks that a graph has the form a sensitivity proof assumes (``DESIGN.md`` §3)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

__all__ = ["check_edge_index", "simple_undirected"]


def check_edge_index(edge_index: object, num_nodes: int | None = None, *, name: str = "edge_index") -> int:
    """Validate an ``edge_index`` ``LongTensor[2, E]`` and return the number of nodes."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"`{name}` must be a LongTensor of shape [2, E]; got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"`{name}` must have shape [2, E]; got {tuple(edge_index.shape)}")
    if edge_index.dtype not in (torch.long, torch.int):
        raise TypeError(f"`{name}` must hold integer node ids; got dtype {edge_index.dtype}")
    if edge_index.numel() and int(edge_index.min()) < 0:
        raise ValueError(f"`{name}` contains negative node ids")
    inferred = int(edge_index.max()) + 1 if edge_index.numel() else 0
    if num_nodes is None:
        num_nodes = inferred
    elif num_nodes < inferred:
        raise ValueError(f"`{name}` refers to node {inferred - 1} but `num_nodes` is {num_nodes}")
    if num_nodes <= 0:
        raise ValueError(f"the graph is empty (`num_nodes` = {num_nodes})")
    return int(num_nodes)


def simple_undirected(edge_index: Tensor, num_nodes: int | None = None, *, symmetrize: bool = False,
                      name: str = "edge_index") -> tuple[Tensor, int]:
    """Return ``(edge_index, num_nodes)`` of an undirected simple graph, sorted and coalesced.

    An undirected edge must appear exactly twice (both directions), with no self-loop and
    no duplicate. Otherwise a ``ValueError`` explains what is wrong, unless
    ``symmetrize=True``, which adds missing reverse edges and drops self-loops and
    duplicates (a change of the graph the caller asked for).
    """
    n = check_edge_index(edge_index, num_nodes, name=name)
    ei = edge_index.long()
    if symmetrize:
        ei, _ = remove_self_loops(ei)
        return to_undirected(ei, num_nodes=n), n
    if ei.numel() and bool((ei[0] == ei[1]).any()):
        raise ValueError(f"`{name}` contains self-loops; remove them (or pass symmetrize=True)")
    co = coalesce(ei, num_nodes=n)
    if co.size(1) != ei.size(1):
        raise ValueError(f"`{name}` contains {ei.size(1) - co.size(1)} duplicate edges (or pass symmetrize=True)")
    if co.numel() and not torch.equal(co, coalesce(co.flip(0), num_nodes=n)):
        raise ValueError(f"`{name}` is directed: every edge must appear in both directions (or pass symmetrize=True)")
    return co, n


def adjacency_to_edge_index(adj: object, num_nodes: int | None = None, *, name: str = "edge_index") -> tuple[Tensor, int]:
    """Accept ``edge_index``, ``torch_sparse.SparseTensor`` or a ``torch.sparse`` adjacency.

    Returns ``(edge_index, num_nodes)``. Sparse adjacencies must be square and
    unweighted (every stored value 1); the sensitivity proofs assume a 0/1 matrix.
    """
    try:
        from torch_sparse import SparseTensor
    except ImportError:  # pragma: no cover - optional backend
        SparseTensor = None  # type: ignore[assignment,misc]
    if SparseTensor is not None and isinstance(adj, SparseTensor):
        row, col, value = adj.coo()
        if adj.size(0) != adj.size(1):
            raise ValueError(f"`{name}` must be a square adjacency; got {tuple(adj.sizes())}")
        n = adj.size(0) if num_nodes is None else num_nodes
        if n != adj.size(0):
            raise ValueError(f"`num_nodes`={num_nodes} does not match the adjacency's size {adj.size(0)}")
        if value is not None and not bool((value == 1).all()):
            raise ValueError(f"`{name}` must be unweighted (all stored values 1)")
        return torch.stack([row, col]), int(n)
    if isinstance(adj, Tensor) and adj.layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc):
        if adj.dim() != 2 or adj.size(0) != adj.size(1):
            raise ValueError(f"`{name}` must be a square 2-D adjacency; got {tuple(adj.shape)}")
        coo = adj.to_sparse_coo().coalesce()
        if not bool((coo.values() == 1).all()):
            raise ValueError(f"`{name}` must be unweighted (all stored values 1)")
        n = adj.size(0) if num_nodes is None else num_nodes
        if n != adj.size(0):
            raise ValueError(f"`num_nodes`={num_nodes} does not match the adjacency's size {adj.size(0)}")
        return coo.indices(), int(n)
    return edge_index_checked(adj, num_nodes, name)


def edge_index_checked(edge_index: object, num_nodes: int | None, name: str) -> tuple[Tensor, int]:
    n = check_edge_index(edge_index, num_nodes, name=name)
    return edge_index.long(), n  # type: ignore[union-attr]
