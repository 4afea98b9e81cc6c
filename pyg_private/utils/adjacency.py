"""The CSR adjacency of a validated undirected simple graph, read off its coalesced ``edge_index``."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

__all__ = ["adjacency_csr", "inverse_degree"]


def adjacency_csr(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    r"""The float64 CSR adjacency :math:`\mathbf{A}` and the degree vector of a simple graph.

    Row :math:`i` of ``adj`` holds :math:`i`'s neighbours, so ``adj @ x`` sums over
    neighbours and ``adj @ (x * inverse_degree(deg))`` is
    :math:`\mathbf{A}\mathbf{D}^{-1}\mathbf{x}`. ``edge_index`` must already be symmetric,
    coalesced (sorted by row, then column) and free of self-loops, as
    :func:`~pyg_private.utils.simple_undirected` returns it: the CSR arrays are then read
    off directly, without a sort.
    """
    n = int(num_nodes)
    row, col = edge_index
    counts = torch.bincount(row, minlength=n)
    crow = torch.zeros(n + 1, dtype=torch.long, device=edge_index.device)
    torch.cumsum(counts, 0, out=crow[1:])
    ones = torch.ones(col.numel(), dtype=torch.float64, device=edge_index.device)
    with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        adj = torch.sparse_csr_tensor(crow, col.contiguous(), ones, (n, n), check_invariants=False)
    return adj, counts.to(torch.float64)


def inverse_degree(deg: Tensor) -> Tensor:
    """:math:`1/d`, and 0 for isolated nodes (their mass is not spread, never divided by 0)."""
    return torch.where(deg > 0, 1.0 / deg.clamp_min(1.0), torch.zeros_like(deg))
