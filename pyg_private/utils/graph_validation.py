"""Checks that a graph has the form a sensitivity proof assumes, on a public node set.

Under edge-level differential privacy the edges are private and the node set is public:
two neighbouring graphs have the same nodes and differ in one edge. A release whose
shape followed the largest node id of ``edge_index`` would therefore tell a graph with an
isolated last node from the same graph plus one edge at that node with certainty. The
private components take the node count from public input only
(:func:`public_num_nodes`, :func:`declared_num_nodes`) and validate every edge against it.
"""
from __future__ import annotations

from numbers import Integral
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

__all__ = ["check_edge_index", "simple_undirected", "adjacency_to_edge_index", "public_num_nodes", "declared_type_num_nodes",
           "declared_num_nodes"]


def _check_count(value: Any, name: str) -> int:
    if isinstance(value, Tensor) and value.numel() == 1 and not value.is_floating_point() \
            and value.dtype != torch.bool:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (Integral, np.integer)):
        raise TypeError(f"`{name}` must be an integer (the public number of nodes); got {value!r}")
    if int(value) <= 0:
        raise ValueError(f"the graph is empty (`{name}` = {int(value)}): a release needs at least one node")
    return int(value)


def _sparse_size(adj: Any) -> Optional[int]:
    """The declared number of rows of a sparse adjacency, or of an ``EdgeIndex`` whose sparse
    size was given (public); ``None`` for a plain ``edge_index``."""
    from torch_geometric import EdgeIndex

    if isinstance(adj, EdgeIndex):
        size = adj.sparse_size(0) if adj.sparse_size(0) is not None else adj.sparse_size(1)
        return None if size is None else int(size)
    try:
        from torch_sparse import SparseTensor
    except ImportError:  # pragma: no cover - optional backend
        SparseTensor = None  # type: ignore[assignment,misc]
    if SparseTensor is not None and isinstance(adj, SparseTensor):
        return int(adj.size(0))
    if isinstance(adj, Tensor) and adj.layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc) \
            and adj.dim() >= 1:
        return int(adj.size(0))
    return None


def public_num_nodes(num_nodes: Any = None, *, x: Any = None, adj: Any = None,
                     missing: str = "pass `num_nodes=` (or the node features `x`)") -> int:
    """The number of nodes of a release, from public input only.

    The count is taken from ``x`` (its rows), from ``num_nodes``, or from the declared size
    of a sparse adjacency ``adj`` (``torch.sparse``, ``torch_sparse.SparseTensor``, or an
    ``EdgeIndex`` built with ``sparse_size``): all public, the same for every neighbouring
    graph. It is **never** inferred from the
    largest id of an ``edge_index``: the edges are private, and a node count read off them
    changes the output's shape when an edge at the last node is added or removed (a
    perfect distinguisher of neighbouring graphs).

    Args:
        num_nodes (int, optional): the declared number of nodes.
        x (Tensor, optional): node-level input, one row per node.
        adj (optional): the graph; only a sparse adjacency's declared size is read.
        missing (str): how the error names the fix when no count is given.

    Raises:
        ValueError: no public count is given (the message says to ``missing``), the
            counts given disagree, or the count is 0. ``TypeError`` for a non-integer
            ``num_nodes`` or an ``x`` that is not a tensor with one row per node.
    """
    rows = None
    if x is not None:
        if not isinstance(x, Tensor) or x.dim() == 0:
            raise TypeError("`x` must be a tensor with one row per node; got "
                            f"{type(x).__name__ if not isinstance(x, Tensor) else 'a 0-d tensor'}")
        rows = int(x.size(0))
    if num_nodes is not None:
        n = _check_count(num_nodes, "num_nodes")
        if rows is not None and rows != n:
            raise ValueError(f"`num_nodes` is {n} but `x` has {rows} rows; give one public node count")
        return n
    if rows is not None:
        if rows == 0:
            raise ValueError("the graph is empty (`x` has no rows): a release needs at least one node")
        return rows
    size = _sparse_size(adj)
    if size is not None:
        return _check_count(size, "the adjacency's size")
    raise ValueError(
        "the number of nodes is public input and is never inferred from the private edges (the largest id in "
        f"`edge_index` changes when an edge at the last node is added or removed): {missing}"
    )


def declared_num_nodes(data: Any) -> Optional[int]:
    """A ``Data`` object's node count when it is **declared**, else ``None``.

    PyG's ``data.num_nodes`` falls back, with a warning, to ``edge_index.max() + 1`` when
    the data hold neither a ``num_nodes`` attribute nor a node-level tensor; that fallback
    reads the private edges and is exactly what this function refuses. Declared means: an
    explicit ``num_nodes``, or the rows of a node-level tensor (``x``, ``pos``, ``batch``,
    or any tensor whose name contains ``node``), or the declared size of an ``EdgeIndex``,
    ``adj`` or ``adj_t``, in PyG's order.
    """
    from torch_geometric import EdgeIndex
    from torch_geometric.data.storage import N_KEYS

    store = getattr(data, "_store", None)
    if store is None:
        return None
    if "num_nodes" in store and store["num_nodes"] is not None:
        return int(store["num_nodes"])
    items = list(store.items())
    for pick in (lambda k: k in N_KEYS, lambda k: "node" in k):
        for key, value in items:
            if isinstance(value, (Tensor, np.ndarray)) and pick(key):
                return int(value.shape[data.__cat_dim__(key, value, store)])
    size = _sparse_size(store.get("edge_index")) if isinstance(store.get("edge_index"), EdgeIndex) else None
    if size is not None:
        return size
    for key, dim in (("adj", 0), ("adj_t", 1)):
        value = store.get(key)
        if isinstance(value, Tensor) or _sparse_size(value) is not None:
            return int(value.size(dim))
    return None


def check_edge_index(edge_index: object, num_nodes: int | None = None, *, name: str = "edge_index") -> int:
    """Validate an ``edge_index`` ``LongTensor[2, E]`` against ``num_nodes``; return ``num_nodes``.

    Every id must lie in ``[0, num_nodes)``: a malformed input, refused the same way for a
    graph and any neighbour of it on the same public node set. With ``num_nodes=None`` the
    count is inferred as the largest id + 1; that reads the edges and is for non-private
    references only (every private component resolves the public count first, with
    :func:`public_num_nodes`).
    """
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
    else:
        num_nodes = _check_count(num_nodes, "num_nodes")
        if num_nodes < inferred:
            raise ValueError(f"`{name}` has node ids outside [0, num_nodes) with `num_nodes` = {num_nodes}: every id "
                             "must be a node of the public node set; pass the right `num_nodes` (or `x`)")
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
    ei = _plain(edge_index).long()
    if symmetrize:
        ei, _ = remove_self_loops(ei)
        return to_undirected(ei, num_nodes=n), n
    if ei.numel() and bool((ei[0] == ei[1]).any()):
        raise ValueError(f"`{name}` contains self-loops (e.g. from add_self_loops or a GCN preprocessing); the layer "
                         "adds its own where its formula has them: remove them with "
                         f"torch_geometric.utils.remove_self_loops({name}) (or pass symmetrize=True, which drops "
                         "them and adds missing reverse edges)")
    co = coalesce(ei, num_nodes=n)
    if co.size(1) != ei.size(1):
        raise ValueError(f"`{name}` contains {ei.size(1) - co.size(1)} duplicate edges (or pass symmetrize=True)")
    if co.numel() and not torch.equal(co, coalesce(co.flip(0), num_nodes=n)):
        raise ValueError(f"`{name}` is directed: every edge must appear in both directions (or pass symmetrize=True "
                         "to use its undirected version). A NeighborLoader batch is directed and sampled from the "
                         "private graph, so a release on it is not covered by the per-edge analysis (which edges are "
                         "sampled depends on the other edges): release once on the whole graph (cached) and "
                         "mini-batch only the trainable head on the released features "
                         "(pyg_private.nn.PrecomputedPropagation)")
    return co, n


def adjacency_to_edge_index(adj: object, num_nodes: int | None = None, *, name: str = "edge_index") -> tuple[Tensor, int]:
    """Accept ``edge_index``, ``torch_sparse.SparseTensor`` or a ``torch.sparse`` adjacency.

    Returns ``(edge_index, num_nodes)``. Sparse adjacencies must be square and
    unweighted (every stored value 1); the sensitivity proofs assume a 0/1 matrix. For an
    ``edge_index``, ``num_nodes=None`` infers the count from the largest id, which reads
    the edges: that is for non-private references only, and the private components pass
    the public count (:func:`public_num_nodes`).
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
    return _plain(edge_index).long(), n  # type: ignore[arg-type]


def _plain(edge_index: Tensor) -> Tensor:
    """A PyG ``EdgeIndex`` as a plain tensor (the validation sorts and coalesces it)."""
    from torch_geometric import EdgeIndex

    return edge_index.as_tensor() if isinstance(edge_index, EdgeIndex) else edge_index


def declared_type_num_nodes(store: Any) -> Optional[int]:
    """The node count of one node type of a ``HeteroData`` (its ``NodeStorage``) when it is
    **declared**: an explicit ``num_nodes``, else the rows of a node-level tensor (``x``, ``pos``,
    ``batch`` or any tensor whose name contains ``node``); ``None`` otherwise. PyG's own
    ``data[node_type].num_nodes`` falls back to the largest id in the edge types that touch the
    type, which reads the private edges (see :func:`declared_num_nodes`)."""
    from torch_geometric.data.storage import N_KEYS

    items = dict(store.items()) if callable(getattr(store, "items", None)) else {}
    if items.get("num_nodes") is not None:
        return _check_count(items["num_nodes"], "num_nodes")
    for pick in (lambda k: k in N_KEYS, lambda k: "node" in k):
        for key, value in items.items():
            if isinstance(value, (Tensor, np.ndarray)) and value.ndim >= 1 and pick(key):
                return int(value.shape[0])
    return None
