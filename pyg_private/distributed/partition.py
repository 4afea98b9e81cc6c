r"""Row partitions of a graph across processes: each process holds a contiguous block of nodes
``[start, end)``, its rows of the adjacency (the edges whose first id, the row, lies in the block,
with **global** column ids) and its rows of the features.

* :func:`even_row_ranges` and :func:`row_block` cut a global graph into such blocks (for scripts and
  tests that start from one copy of the graph; real deployments load their block directly).
* :func:`check_partition` checks that the blocks of all processes cover the nodes exactly once.
* :func:`read_local_rows` and :func:`exchange_transpose` validate a block as part of an undirected
  simple graph: locally (ids, self-loops, duplicates), then across processes, where every row
  ``(u, v)`` is sent to the owner of ``v``, which must hold ``(v, u)`` (or adds it with
  ``symmetrize=True``). A graph is undirected exactly when every process receives its own rows back.
"""
from __future__ import annotations

import warnings
from numbers import Integral
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from ._comm import GroupInfo, Layout

__all__ = ["even_row_ranges", "row_block", "check_partition", "check_row_range", "read_local_rows",
           "exchange_transpose", "local_csr", "block_csr"]

#: The largest node count whose (row, column) pairs are keyed as ``row * N + col`` in int64.
MAX_NODES = 3_037_000_499

#: up to this many processes the transpose exchange groups its entries with one mask pass per
#: destination; beyond, a stable sort (a pass per destination would cost world x entries)
_MASKED_GROUPING_WORLD = 8


def even_row_ranges(num_nodes: int, world_size: int) -> list[tuple[int, int]]:
    """Contiguous blocks ``[start, end)`` of ``num_nodes`` nodes for ``world_size`` processes, the
    first ``num_nodes % world_size`` one row larger (``torch.tensor_split``'s rule)."""
    n, w = _count(num_nodes, "num_nodes", 1), _count(world_size, "world_size", 1)
    base, extra = divmod(n, w)
    bounds = [0]
    for r in range(w):
        bounds.append(bounds[-1] + base + (1 if r < extra else 0))
    return [(bounds[r], bounds[r + 1]) for r in range(w)]


def row_block(edge_index: Tensor, row_range: tuple[int, int]) -> Tensor:
    """The edges of ``edge_index`` whose row (``edge_index[0]``) lies in ``row_range``, with global
    ids: a process's share of an undirected graph (each undirected edge ``{u, v}`` appears as
    ``(u, v)`` on the owner of ``u`` and as ``(v, u)`` on the owner of ``v``)."""
    start, end = row_range
    keep = (edge_index[0] >= start) & (edge_index[0] < end)
    return edge_index[:, keep]


def check_row_range(row_range: Any, num_nodes: int, rows: int) -> tuple[int, int]:
    """``(start, end)`` of this process: integers with ``0 <= start <= end <= num_nodes`` and
    ``end - start`` equal to the local feature rows ``rows``."""
    if not isinstance(row_range, (tuple, list)) or len(row_range) != 2 or \
            not all(isinstance(v, Integral) and not isinstance(v, bool) for v in row_range):
        raise TypeError(f"`row_range` must be a pair of integers (start, end), the global ids of this process's "
                        f"first node and one past its last; got {row_range!r}")
    start, end = int(row_range[0]), int(row_range[1])
    if not 0 <= start <= end <= num_nodes:
        raise ValueError(f"`row_range`=({start}, {end}) must satisfy 0 <= start <= end <= num_nodes={num_nodes}")
    if end - start != rows:
        raise ValueError(f"`row_range`=({start}, {end}) holds {end - start} nodes but the local `x` has {rows} rows: "
                         "pass this process's rows of the features, one per node of its block")
    return start, end


def check_partition(ranges: Sequence[tuple[int, int]], num_nodes: int) -> None:
    """Raise a ``ValueError`` unless the blocks ``ranges[r]`` (one per process) cover
    ``[0, num_nodes)`` exactly once (empty blocks are allowed)."""
    spans = sorted((s, e, r) for r, (s, e) in enumerate(ranges) if e > s)
    position = 0
    for s, e, r in spans:
        if s != position:
            what = (f"nodes [{position}, {s}) belong to no process" if s > position else
                    f"nodes [{s}, {min(position, e)}) belong to more than one process (rank {r} and another)")
            raise ValueError(f"the row ranges {[tuple(x) for x in ranges]} do not cover the {num_nodes} nodes exactly "
                             f"once: {what}. Give every process a contiguous block `row_range=(start, end)` so that "
                             "the blocks tile [0, num_nodes) (e.g. pyg_private.distributed.even_row_ranges)")
        position = e
    if position != num_nodes:
        raise ValueError(f"the row ranges {[tuple(x) for x in ranges]} do not cover the {num_nodes} nodes exactly "
                         f"once: nodes [{position}, {num_nodes}) belong to no process. Give every process a contiguous "
                         "block `row_range=(start, end)` so that the blocks tile [0, num_nodes)")


def read_local_rows(adj: Any, row_range: tuple[int, int], num_nodes: int, *, symmetrize: bool = False,
                    name: str = "edge_index") -> Tensor:
    """The sorted, duplicate-free int64 keys ``row * N + col`` of this process's rows.

    ``adj`` is either an ``edge_index`` ``[2, E]`` whose rows ``adj[0]`` lie in ``row_range`` (global
    ids), or a ``torch.sparse`` / ``torch_sparse.SparseTensor`` adjacency of shape
    ``[end - start, num_nodes]`` (local rows, global columns, every stored value 1). Self-loops and
    duplicates raise a ``ValueError`` (or are dropped with ``symmetrize=True``).
    """
    start, end = row_range
    n = int(num_nodes)
    if n > MAX_NODES:
        raise ValueError(f"`num_nodes`={n} is above {MAX_NODES}, the largest node count the distributed graph check "
                         "keys in 64 bits")
    row, col = _rows_and_columns(adj, start, end, n, name)
    if symmetrize:
        keep = row != col
        row, col = row[keep], col[keep]
    elif row.numel() and bool((row == col).any()):
        raise ValueError(f"`{name}` contains self-loops; the layer adds its own where its formula has them: remove "
                         f"them with torch_geometric.utils.remove_self_loops (or pass symmetrize=True)")
    keys = torch.mul(row, n).add_(col)  # row may be a view of the caller's edge_index: never in place
    del row, col
    if keys.numel() > 1 and bool((keys[1:] > keys[:-1]).all()):
        return keys  # already sorted and duplicate-free (a canonical CSR block): no sort, no copy
    keys = torch.sort(keys).values
    if keys.numel() > 1:
        distinct = torch.cat([keys.new_ones(1, dtype=torch.bool), keys[1:] != keys[:-1]])
        if not bool(distinct.all()):
            if not symmetrize:
                raise ValueError(f"`{name}` contains {int((~distinct).sum())} duplicate edges (or pass "
                                 "symmetrize=True)")
            keys = keys[distinct]
    return keys


def _rows_and_columns(adj: Any, start: int, end: int, n: int, name: str) -> tuple[Tensor, Tensor]:
    """Global ``(row, col)`` of every stored entry of this process's rows, validated."""
    try:
        from torch_sparse import SparseTensor
    except ImportError:  # pragma: no cover - optional backend
        SparseTensor = None  # type: ignore[assignment,misc]
    local = end - start
    if SparseTensor is not None and isinstance(adj, SparseTensor):
        row, col, value = adj.coo()
        return _sparse_entries(row, col, value, tuple(adj.sizes()), start, local, n, name)
    if isinstance(adj, Tensor) and adj.layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc):
        if adj.dim() != 2:
            raise ValueError(f"`{name}` must be a 2-D sparse adjacency block [end - start, num_nodes]")
        if adj.layout == torch.sparse_csr:  # its own arrays, without a coalesced int64 COO copy
            _check_block_size(tuple(adj.shape), local, n, name)
            crow, col, value = adj.crow_indices(), adj.col_indices(), adj.values()
            _check_unweighted(value, name)
            _check_columns(col, n, name)
            row = torch.repeat_interleave(torch.arange(start, end, device=crow.device), crow.diff().long(),
                                          output_size=col.numel())
            return row, col.long()  # duplicates (uncoalesced entries) are caught by the caller's key check
        coo = adj.to_sparse_coo().coalesce()
        row, col = coo.indices()
        return _sparse_entries(row, col, coo.values(), tuple(adj.shape), start, local, n, name)
    if not isinstance(adj, Tensor):
        raise TypeError(f"`{name}` must be an edge_index LongTensor [2, E] of this process's rows, or a sparse "
                        f"adjacency block [end - start, num_nodes]; got {type(adj).__name__}")
    if adj.dim() != 2 or adj.size(0) != 2:
        raise ValueError(f"`{name}` must have shape [2, E]; got {tuple(adj.shape)}")
    if adj.dtype not in (torch.long, torch.int):
        raise TypeError(f"`{name}` must hold integer node ids; got dtype {adj.dtype}")
    ei = adj.as_tensor() if hasattr(adj, "as_tensor") else adj
    row, col = ei.long()
    if row.numel() and (int(row.min()) < start or int(row.max()) >= end):
        raise ValueError(f"`{name}` holds rows outside this process's `row_range`=({start}, {end}): each process "
                         "passes the edges whose first id (the row) lies in its block, with global ids "
                         "(pyg_private.distributed.row_block)")
    _check_columns(col, n, name)
    return row, col


def _sparse_entries(row: Tensor, col: Tensor, value: Optional[Tensor], size: tuple, start: int, local: int, n: int,
                    name: str) -> tuple[Tensor, Tensor]:
    _check_block_size(size, local, n, name)
    _check_unweighted(value, name)
    _check_columns(col, n, name)
    return row.long() + start, col.long()


def _check_block_size(size: tuple, local: int, n: int, name: str) -> None:
    if size != (local, n):
        raise ValueError(f"a sparse `{name}` must be this process's block of rows, of shape [end - start, num_nodes] "
                         f"= {[local, n]} (local rows, global columns); got {list(size)}")


def _check_unweighted(value: Optional[Tensor], name: str) -> None:
    if value is not None and not bool((value == 1).all()):
        raise ValueError(f"`{name}` must be unweighted (all stored values 1)")


def _check_columns(col: Tensor, n: int, name: str) -> None:
    if col.numel() and (int(col.min()) < 0 or int(col.max()) >= n):
        raise ValueError(f"`{name}` has node ids outside [0, num_nodes) with `num_nodes`={n}: every id must be a "
                         "node of the public node set (global ids)")


def exchange_transpose(keys: Tensor, layout: Layout, num_nodes: int, info: GroupInfo) -> Tensor:
    """Send every local entry ``(u, v)`` (key ``u * N + v``) to the owner of ``v`` as ``(v, u)``; return
    the sorted keys this process received (the transposes of the entries in its rows' columns).
    Two ``all_to_all_single`` calls; no process holds more than its own rows' worth, and the entries
    are grouped by destination without a sort up to :data:`_MASKED_GROUPING_WORLD` processes (about
    40 bytes an entry at the peak), by one stable sort beyond."""
    import torch.distributed as dist

    n = int(num_nodes)
    col = keys % n
    dest = layout.owner(col)
    send_keys = col.mul_(n).add_(keys // n)  # (v, u)
    counts = torch.bincount(dest, minlength=info.world)
    send = _group_by_destination(send_keys, dest, counts)
    del send_keys, dest, col
    received_counts = torch.empty_like(counts, device=info.device)
    dist.all_to_all_single(received_counts, counts.to(info.device), group=info.group)
    received = torch.empty(int(received_counts.sum()), dtype=torch.long, device=info.device)
    dist.all_to_all_single(received, send.to(info.device), output_split_sizes=received_counts.tolist(),
                           input_split_sizes=counts.tolist(), group=info.group)
    return torch.sort(received.to(keys.device)).values


def _group_by_destination(keys: Tensor, dest: Tensor, counts: Tensor) -> Tensor:
    """``keys`` grouped by destination rank (``counts[r]`` of them go to rank ``r``), each group in its
    original order: a mask pass per destination for few processes (no sort, less memory), one stable
    sort for many."""
    if counts.numel() > _MASKED_GROUPING_WORLD:
        return keys.index_select(0, torch.sort(dest, stable=True).indices)
    send = torch.empty_like(keys)
    offset = 0
    for r, c in enumerate(counts.tolist()):
        if c:
            torch.masked_select(keys, dest == r, out=send[offset:offset + c])
        offset += c
    return send


def local_csr(keys: Tensor, row_range: tuple[int, int], num_nodes: int) -> tuple[Tensor, Tensor]:
    """``(crow, col)`` of this process's rows (``end - start`` rows, global columns) from sorted keys;
    int32 where the node count and the entries fit (half the index memory, and the form the CSR
    product kernel takes without a copy), int64 otherwise."""
    start, end = row_range
    n = int(num_nodes)
    row = keys // n - start
    small = n < 2 ** 31 and keys.numel() < 2 ** 31
    crow = torch.zeros(end - start + 1, dtype=torch.int32 if small else torch.long, device=keys.device)
    torch.cumsum(torch.bincount(row, minlength=end - start), 0, out=crow[1:])
    del row
    col = keys % n
    return crow, (col.to(torch.int32) if small else col)


def block_csr(crow: Tensor, col: Tensor, values: Tensor, num_nodes: int) -> Tensor:
    """A ``torch.sparse_csr`` block of ``crow.numel() - 1`` rows and ``num_nodes`` columns."""
    with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, (crow.numel() - 1, int(num_nodes)), check_invariants=False)


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"`{name}` must be an integer; got {value!r}")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}; got {value!r}")
    return int(value)
