"""The product ``A @ x`` of a 0/1 adjacency ``A`` (a ``torch.sparse_csr`` tensor whose stored values are
all 1) with float64 rows: the sum of every node's neighbours' rows.

On a CPU with AVX2 an optional C kernel (:mod:`pyg_private.utils._neighbour_sum_native`, built at
installation where a C compiler exists) computes it about twice as fast as torch's CSR kernel, with
the same additions in the same order (each entry summed from 0 in the row's CSR order), hence the
same float64 result bit for bit: it builds each output row in registers, so its only memory traffic
is the neighbours' rows. Elsewhere, or for other dtypes and layouts, torch computes it.
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor

try:  # the AVX2 kernel (optional: built at installation where a C compiler exists)
    from . import _neighbour_sum_native as _native
except ImportError:  # pragma: no cover - depends on the installation
    _native = None

__all__ = ["NeighbourSum", "neighbour_sum_available"]


def neighbour_sum_available() -> bool:
    """Whether the C kernel is installed and this CPU runs it (AVX2)."""
    return _native is not None and bool(_native.available())


class NeighbourSum:
    """``A @ x`` for one adjacency, called once per step of a diffusion.

    The adjacency's index arrays are checked once, here (int32, contiguous, ``crow`` from 0 to the
    number of entries and non-decreasing, every column a row of ``x``; int64 ones that fit are
    copied to int32 once), so that the kernel may be used; the caller guarantees that every stored
    value is 1 (the kernel does not read them).

    Args:
        adj (Tensor): a ``torch.sparse_csr`` adjacency of 0/1 values, ``[R, N]``.
        native (bool, optional): ``False`` forces torch's kernel (the same values); ``True``
            requires the C kernel. (default: :obj:`None`, the C kernel where it can run)
    """

    def __init__(self, adj: Tensor, native: Optional[bool] = None) -> None:
        self.adj = adj
        if native is not False and neighbour_sum_available():
            adj = _with_int32_indices(adj)  # int64 indices that fit: one int32 copy for the kernel
        self._kernel_adj = adj
        can = neighbour_sum_available() and self._indices_ok(adj)
        if native and not can:
            raise RuntimeError("the C neighbour sum cannot run here (not built, no AVX2, or indices it does not take)")
        self.native = can if native is None else bool(native)

    @staticmethod
    def _indices_ok(adj: Tensor) -> bool:
        if adj.layout != torch.sparse_csr or adj.device.type != "cpu" or adj.dim() != 2:
            return False
        crow, col = adj.crow_indices(), adj.col_indices()
        if crow.dtype != torch.int32 or col.dtype != torch.int32 or not (crow.is_contiguous() and col.is_contiguous()):
            return False
        if crow.numel() != adj.size(0) + 1 or int(crow[0]) != 0 or int(crow[-1]) != col.numel():
            return False
        if crow.numel() > 1 and not bool((crow.diff() >= 0).all()):
            return False
        return col.numel() == 0 or (int(col.min()) >= 0 and int(col.max()) < adj.size(1))

    def __call__(self, x: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """``A @ x`` (into ``out`` when given: ``[R, C]``, never overlapping ``x``)."""
        adj = self.adj
        shape = (adj.size(0), x.size(-1))
        if out is not None and out.numel() and x.numel() and \
                out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
            raise ValueError("`out` must not share memory with `x`")
        if self.native:
            adj = self._kernel_adj
        if (self.native and x.dim() == 2 and x.size(0) == adj.size(1) and x.dtype == torch.float64
                and x.device.type == "cpu" and x.is_contiguous()
                and (out is None or (tuple(out.shape) == shape and out.dtype == torch.float64
                                     and out.device.type == "cpu" and out.is_contiguous()))):
            if out is None:
                out = torch.empty(shape, dtype=torch.float64)
            _native.neighbour_sum(adj.crow_indices().data_ptr(), adj.col_indices().data_ptr(), x.data_ptr(),
                                  out.data_ptr(), shape[0], shape[1])
            return out
        if out is None:
            return torch.sparse.mm(adj, x, "sum") if adj.device.type == "cpu" else torch.sparse.mm(adj, x)
        return torch.addmm(out, adj, x, beta=0.0, out=out)


def _with_int32_indices(adj: Tensor) -> Tensor:
    """``adj`` with int32 index arrays where they are int64 and fit (a CPU CSR tensor only)."""
    if adj.layout != torch.sparse_csr or adj.device.type != "cpu" or adj.crow_indices().dtype != torch.int64:
        return adj
    if max(adj.shape) >= 2 ** 31 or adj.col_indices().numel() >= 2 ** 31:
        return adj
    with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(adj.crow_indices().int(), adj.col_indices().int(), adj.values(), adj.shape,
                                       check_invariants=False)
