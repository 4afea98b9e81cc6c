"""The CSR adjacency of a validated undirected simple graph, read off its coalesced ``edge_index``
(or taken from a sparse input already in that form)."""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.typing import SparseTensor

from .._native import native_attribute
from .graph_validation import adjacency_to_edge_index, simple_undirected

# the one-pass canonical-form check in C (optional: built at installation where a C compiler exists), the
# module attribute ``_native_check``, loaded on first access (PEP 562; ``None`` where not built)
_NATIVE_CHECK = "utils._graph_check_native"


def __getattr__(name: str):
    if name == "_native_check":
        return native_attribute(globals(), name, _NATIVE_CHECK)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["adjacency_csr", "inverse_degree", "csr_indices", "simple_undirected_csr", "validated_csr", "bipartite_csr",
           "bipartite_csr_matrix",
           "normalized_adjacency_csr",
           "power_normalized_adjacency_csr"]


def adjacency_csr(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    r"""The float64 CSR adjacency :math:`\mathbf{A}` and the degree vector of a simple graph.

    Row :math:`i` of ``adj`` holds :math:`i`'s neighbours, so ``adj @ x`` sums over
    neighbours and ``adj @ (x * inverse_degree(deg))`` is
    :math:`\mathbf{A}\mathbf{D}^{-1}\mathbf{x}`. ``edge_index`` must already be symmetric,
    coalesced (sorted by row, then column) and free of self-loops, as
    :func:`~pyg_private.utils.simple_undirected` returns it: the CSR arrays are then read
    off directly, without a sort.
    """
    crow, col = csr_indices(edge_index, num_nodes)
    ones = torch.ones(col.numel(), dtype=torch.float64, device=edge_index.device)
    return _csr(crow, col, ones), crow.diff().to(torch.float64)


def csr_indices(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """``(crow, col)``, the CSR arrays of a coalesced ``edge_index`` (sorted by row, then column)."""
    row, col = edge_index
    crow = torch.zeros(int(num_nodes) + 1, dtype=torch.long, device=edge_index.device)
    torch.cumsum(torch.bincount(row, minlength=int(num_nodes)), 0, out=crow[1:])
    return crow, col.contiguous()


_BLOCK = 1 << 24  # stored entries per block of the checks


def _blocks(crow: Tensor, block_entries: int) -> list[tuple[int, int]]:
    """Consecutive node ranges ``[r0, r1)`` whose rows hold about ``block_entries`` entries each
    (a single row larger than that is a block of its own)."""
    n, nnz = crow.numel() - 1, int(crow[-1])
    if nnz <= block_entries:
        return [(0, n)]
    targets = torch.arange(block_entries, nnz, block_entries, dtype=crow.dtype, device=crow.device)
    cuts = torch.searchsorted(crow, targets, right=True).tolist()  # first row starting after the target
    edges = sorted({0, n, *[min(max(c - 1, 1), n) for c in cuts]})
    return list(zip(edges[:-1], edges[1:]))


def _rows(crow: Tensor, counts: Tensor, r0: int, r1: int, dtype: torch.dtype) -> Tensor:
    """The row index of every stored entry of rows ``[r0, r1)``."""
    a, b = int(crow[r0]), int(crow[r1])
    return torch.repeat_interleave(torch.arange(r0, r1, dtype=dtype, device=crow.device), counts[r0:r1],
                                   output_size=b - a)


def simple_undirected_csr(adj: object, num_nodes: int, *, block_entries: int = _BLOCK,
                          index_dtype: Optional[torch.dtype] = torch.long,
                          native: Optional[bool] = None) -> Optional[tuple[Tensor, Tensor]]:
    r"""``(crow, col)`` (``index_dtype``; ``None``: the input's own index arrays, int32 ones kept, no
    copy) of a sparse adjacency that already is an undirected simple graph in canonical form, taken
    as it is; ``None`` for any other input.

    The fast path for a ``torch.sparse_csr`` tensor or a ``torch_sparse.SparseTensor``:
    ``num_nodes`` x ``num_nodes``, every stored value 1, columns strictly increasing in every
    row (sorted, no duplicate), no self-loop, and symmetric. Those are the CSR arrays of the
    ``edge_index`` :func:`~pyg_private.utils.simple_undirected` returns for the same graph.
    ``None`` leaves the input to that general path, which symmetrises it (``symmetrize=True``)
    or says what is wrong with it.

    On the CPU, where the C extension is built (``native=None``, the default: wherever it is;
    ``False``: never; ``True``: required), the structure is checked in one pass over the entries with a cursor per row
    (:mod:`~pyg_private.utils._graph_check_native`: the transpose of rows read in order comes out
    sorted, so each entry :math:`(i, j)` must find :math:`i` at row :math:`j`'s cursor), no
    temporary but the ``num_nodes`` cursors. Otherwise the checks run as torch operations in blocks
    of about ``block_entries`` stored entries, so that no temporary is longer than a block (checking
    a 124M-entry graph at once took 5.7 GB of temporaries). Symmetry: in- and out-degrees must
    agree; then the entries whose column lies in a block of rows ``[c0, c1)`` number exactly those
    rows' entries, and, transposed and sorted, must be those rows' entries (one pass over the
    columns per block). Both give the same answer (the tests compare them)."""
    if isinstance(adj, SparseTensor):
        (crow, col, value), size = adj.csr(), tuple(adj.sizes())
    elif isinstance(adj, Tensor) and adj.layout == torch.sparse_csr:
        crow, col, value, size = adj.crow_indices(), adj.col_indices(), adj.values(), tuple(adj.shape)
    else:
        return None
    n = int(num_nodes)
    if size != (n, n) or n == 0 or (value is not None and value.dim() != 1):
        return None
    nnz = col.numel()
    if crow.numel() != n + 1 or int(crow[0]) != 0 or int(crow[-1]) != nnz:
        return None
    counts = crow.diff()
    if bool((counts < 0).any()):
        return None
    if nnz == 0:
        return _as_index(crow, index_dtype), _as_index(col, index_dtype)
    if value is not None and not all(bool((value[a:a + block_entries] == 1).all())
                                     for a in range(0, nnz, block_entries)):
        return None
    check = native_attribute(globals(), "_native_check", _NATIVE_CHECK)
    if native is None:
        native = check is not None
    if native and check is None:
        raise RuntimeError("the C graph check is not built (pyg_private.utils._graph_check_native)")
    if (native and crow.device.type == "cpu" and crow.dtype in (torch.int32, torch.int64)
            and col.dtype in (torch.int32, torch.int64)):
        crow_c, col_c = crow.contiguous(), col.contiguous()  # crow checked nondecreasing above
        if not check.simple_symmetric(crow_c.data_ptr(), col_c.data_ptr(), n, crow_c.element_size() * 8,
                                      col_c.element_size() * 8):
            return None
        return _as_index(crow, index_dtype), _as_index(col, index_dtype)
    if int(col.min()) < 0 or int(col.max()) >= n:
        return None
    # symmetric implies equal in- and out-degrees; with them, the entries of the columns
    # [c0, c1) number exactly crow[c1] - crow[c0], so row blocks are column blocks too
    if not torch.equal(torch.bincount(col, minlength=n), counts.to(torch.long)):
        return None
    blocks = _blocks(crow, block_entries)
    for r0, r1 in blocks:  # every row strictly increasing (sorted, no duplicate), no self-loop
        a, b = int(crow[r0]), int(crow[r1])
        c, row = col[a:b], _rows(crow, counts, r0, r1, col.dtype)
        if bool((row == c).any()):
            return None
        if b - a > 1 and bool(((c[1:] <= c[:-1]) & (row[1:] == row[:-1])).any()):
            return None
    for c0, c1 in blocks:  # symmetric: the entries of columns [c0, c1), transposed and sorted, are rows c0..c1
        a, b = int(crow[c0]), int(crow[c1])
        want = _rows(crow, counts, c0, c1, torch.long).sub_(c0).mul_(n).add_(col[a:b])  # sorted keys
        got = []
        for r0, r1 in blocks:
            ra, rb = int(crow[r0]), int(crow[r1])
            c = col[ra:rb]
            mask = (c >= c0) & (c < c1)
            got.append(c[mask].long().sub_(c0).mul_(n).add_(_rows(crow, counts, r0, r1, col.dtype)[mask]))
        got = torch.cat(got)
        if got.numel() != want.numel() or not torch.equal(torch.sort(got).values, want):
            return None
    return _as_index(crow, index_dtype), _as_index(col, index_dtype)


def _as_index(t: Tensor, dtype: Optional[torch.dtype]) -> Tensor:
    return t if dtype is None else t.to(dtype)



def validated_csr(adj: object, num_nodes: int, *, symmetrize: bool = False,
                  index_dtype: Optional[torch.dtype] = torch.long) -> tuple[Tensor, Tensor]:
    """``(crow, col)`` of the validated undirected simple graph on the public ``num_nodes`` (never
    the largest id of ``edge_index``: an id ``>= num_nodes`` raises): a CSR input already in that
    form as it is (:func:`simple_undirected_csr`), anything else through
    :func:`~pyg_private.utils.simple_undirected` (which symmetrises it with ``symmetrize=True`` or
    says what is wrong with it). ``index_dtype=None`` keeps a canonical CSR input's own index arrays
    (int32 ones stay int32: at 124M entries that saves a 1 GB int64 copy); the general path gives
    int64."""
    n = int(num_nodes)
    graph = simple_undirected_csr(adj, n, index_dtype=index_dtype)
    if graph is not None:
        return graph
    ei, m = adjacency_to_edge_index(adj, n)
    if m != n:
        raise ValueError(f"the graph has {m} nodes but `x` has {n} rows")
    return csr_indices(simple_undirected(ei, n, symmetrize=symmetrize)[0], n)


def normalized_adjacency_csr(crow: Tensor, col: Tensor, *, weight: float = 1.0,
                             dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    r"""The GCN normalisation :math:`w\,\hat{\mathbf{A}} = w\,\mathbf{S}(\mathbf{A} + \mathbf{I})\mathbf{S}`,
    :math:`\mathbf{S} = (\mathbf{D} + \mathbf{I})^{-1/2}`, of a simple graph's CSR arrays, split
    into the CSR matrix :math:`w\,\mathbf{S}\mathbf{A}\mathbf{S}` and the diagonal
    :math:`w\,\mathbf{S}^2` (a column ``[N, 1]``), so that
    :math:`w\,\hat{\mathbf{A}}\mathbf{x}` is ``adj @ x + diag * x``. No sort: the
    column order of the input is kept.
    """
    counts = crow.diff()
    s = (counts + 1).to(dtype).rsqrt()
    values = s.repeat_interleave(counts).mul_(s[col]).mul_(weight)
    return _csr(crow, col, values), s.square().mul_(weight).unsqueeze(-1)


def _csr(crow: Tensor, col: Tensor, values: Tensor) -> Tensor:
    n = crow.numel() - 1
    with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, (n, n), check_invariants=False)


def inverse_degree(deg: Tensor) -> Tensor:
    """:math:`1/d`, and 0 for isolated nodes (their mass is not spread, never divided by 0)."""
    return torch.where(deg > 0, 1.0 / deg.clamp_min(1.0), torch.zeros_like(deg))


def power_normalized_adjacency_csr(crow: Tensor, col: Tensor, *, r: float = 0.0, self_loops: bool = True,
                                   weight: float = 1.0,
                                   dtype: torch.dtype = torch.float64) -> tuple[Tensor, Optional[Tensor]]:
    r"""The normalisation :math:`w\,\tilde{\mathbf{A}} = w\,\mathbf{D}^{r-1}\hat{\mathbf{A}}\mathbf{D}^{-r}`
    of a simple graph's CSR arrays, with :math:`\hat{\mathbf{A}} = \mathbf{A} + \mathbf{I}`
    (``self_loops=True``) or :math:`\mathbf{A}`, and :math:`\mathbf{D}` the degree matrix of
    :math:`\hat{\mathbf{A}}`.

    Returns the CSR matrix :math:`w\,\mathbf{D}^{r-1}\mathbf{A}\mathbf{D}^{-r}` (entry
    :math:`(i, j)` is :math:`w\,d_i^{r-1} d_j^{-r}`) and the self-loop term as a diagonal
    column ``[N, 1]``, :math:`w\,\mathbf{D}^{-1}` (``None`` without self-loops), so that
    :math:`w\,\tilde{\mathbf{A}}\mathbf{x}` is ``adj @ x + diag * x``. ``r = 0`` with
    self-loops is the row-stochastic :math:`\mathbf{D}^{-1}(\mathbf{A} + \mathbf{I})`,
    ``r = 1/2`` the symmetric normalisation.

    An isolated node has degree 0 without self-loops; every power of that 0 is taken as 0.
    Its row and column of :math:`\mathbf{A}` are empty, so this only fixes what the
    documentation says, not a stored value: :math:`\tilde{\mathbf{A}}\mathbf{x}` is 0 there,
    never a division by 0. The degree powers are computed in float64 and then cast to
    ``dtype``. No sort: the column order of the input is kept.
    """
    counts = crow.diff()
    deg = counts.to(torch.float64)
    isolated = None
    if self_loops:
        deg.add_(1.0)
    elif bool((counts == 0).any()):
        isolated = counts == 0

    def power(p: float) -> Tensor:  # d**p, and 0 for a zero degree (where pow gives inf, or 1 for p = 0)
        out = deg.pow(p)
        return out if isolated is None else out.masked_fill_(isolated, 0.0)

    r = float(r)
    left = power(r - 1.0).mul_(weight).to(dtype)  # w d_i^(r-1), per row
    values = left.repeat_interleave(counts, output_size=col.numel())
    if r != 0.0:  # d_j^(-r) = 1 for r = 0 (every d_j of a stored entry is positive)
        values.mul_(power(-r).to(dtype)[col])
    diag = deg.reciprocal().mul_(weight).to(dtype).unsqueeze(-1) if self_loops else None  # w d_i^(r-1) d_i^(-r)
    return _csr(crow, col, values), diag


def bipartite_csr(adj: object, num_src: int, num_dst: int, *, name: str = "edge_index") -> tuple[Tensor, Tensor]:
    r"""``(crow, col)`` (int64) of the 0/1 matrix :math:`\mathbf{A} \in \{0, 1\}^{n_{dst} \times n_{src}}`
    of a **bipartite** (directed) relation: row :math:`d` lists the sources :math:`s` of its edges
    :math:`(s, d)`, sorted, each once, so that ``A @ x_src`` sums the source rows at every destination.

    Accepted forms, in PyG's conventions for a bipartite ``MessagePassing`` call:

    * an ``edge_index`` ``[2, E]`` (row 0 the source ids in :math:`[0, n_{src})`, row 1 the
      destination ids in :math:`[0, n_{dst})`), or an ``EdgeIndex`` whose ``sparse_size``, when
      given, must be ``(num_src, num_dst)``;
    * a ``torch_sparse.SparseTensor`` or a ``torch.sparse`` matrix as the **transposed** adjacency
      ``adj_t`` of shape ``[num_dst, num_src]`` (row = destination), every stored value 1.

    The sizes are public (the rows of ``x_src`` and ``x_dst``), never read off the edges: an id
    outside them, a sparse matrix of another shape, a stored value other than 1 or an edge listed
    twice raises ``ValueError`` (one edge counted twice would move its destination's row by twice the
    bound the sensitivity assumes). Nothing is symmetrised: a bipartite relation has a direction."""
    from torch_geometric import EdgeIndex

    ns, nd = int(num_src), int(num_dst)
    if ns <= 0 or nd <= 0:
        raise ValueError(f"a bipartite relation needs at least one source and one destination node; got "
                         f"{ns} source and {nd} destination rows")
    if isinstance(adj, SparseTensor) or (isinstance(adj, Tensor) and adj.layout in (
            torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)):
        size = tuple(adj.sizes()) if isinstance(adj, SparseTensor) else tuple(adj.shape)
        if size != (nd, ns):
            raise ValueError(f"`{name}` as a sparse matrix is the transposed adjacency adj_t of the relation, of "
                             f"shape [num_dst, num_src] = [{nd}, {ns}] (the rows of x_dst and x_src); got {list(size)}")
        if isinstance(adj, SparseTensor):
            row, col, value = adj.coo()
        else:
            coo = adj.to_sparse_coo()
            if coo.is_coalesced():
                row, col = coo.indices()
                value = coo.values()
            else:  # duplicates are summed by coalescing: count them first
                raw = coo._indices()
                keys = raw[0].long() * ns + raw[1].long()
                if torch.unique(keys).numel() != keys.numel():
                    raise ValueError(f"`{name}` lists {keys.numel() - torch.unique(keys).numel()} edges more than "
                                     "once: one edge must be one entry (coalesce it first)")
                coo = coo.coalesce()
                (row, col), value = coo.indices(), coo.values()
        if value is not None and value.numel() and not bool((value == 1).all()):
            raise ValueError(f"`{name}` must be unweighted (every stored value 1): the analysis is for a 0/1 matrix")
        dst, src = row.long(), col.long()
    else:
        if isinstance(adj, EdgeIndex):
            given = adj.sparse_size()
            if given[0] not in (None, ns) or given[1] not in (None, nd):
                raise ValueError(f"`{name}` is an EdgeIndex of sparse size {tuple(given)}; the relation has "
                                 f"(num_src, num_dst) = ({ns}, {nd}) (the rows of x_src and x_dst)")
            adj = adj.as_tensor()
        if not isinstance(adj, Tensor):
            raise TypeError(f"`{name}` must be an edge_index LongTensor [2, E], an EdgeIndex, a SparseTensor or a "
                            f"torch.sparse matrix; got {type(adj).__name__}")
        if adj.dim() != 2 or adj.size(0) != 2:
            raise ValueError(f"`{name}` must have shape [2, E]; got {tuple(adj.shape)}")
        if adj.dtype not in (torch.long, torch.int):
            raise TypeError(f"`{name}` must hold integer node ids; got dtype {adj.dtype}")
        src, dst = adj[0].long(), adj[1].long()
    if src.numel():
        if int(src.min()) < 0 or int(dst.min()) < 0:
            raise ValueError(f"`{name}` contains negative node ids")
        if int(src.max()) >= ns or int(dst.max()) >= nd:
            raise ValueError(f"`{name}` has ids outside the public node sets: sources must lie in [0, {ns}) (the rows "
                             f"of x_src) and destinations in [0, {nd}) (the rows of x_dst)")
    keys = dst * ns + src
    keys = torch.sort(keys).values
    if keys.numel() > 1 and bool((keys[1:] == keys[:-1]).any()):
        raise ValueError(f"`{name}` lists {int((keys[1:] == keys[:-1]).sum())} edges more than once: one edge must "
                         "be one entry (remove duplicates, e.g. torch_geometric.utils.coalesce)")
    crow = torch.zeros(nd + 1, dtype=torch.long, device=keys.device)
    torch.cumsum(torch.bincount(keys // ns, minlength=nd), 0, out=crow[1:])
    return crow, (keys % ns).contiguous()


def bipartite_csr_matrix(crow: Tensor, col: Tensor, num_src: int, values: Tensor) -> Tensor:
    """The ``[num_dst, num_src]`` ``torch.sparse_csr`` matrix of :func:`bipartite_csr`'s arrays."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, (crow.numel() - 1, int(num_src)), check_invariants=False)
