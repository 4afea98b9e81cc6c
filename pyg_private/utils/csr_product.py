"""The product ``A @ x`` of a ``torch.sparse_csr`` adjacency with dense rows, called once per hop or
step of a diffusion.

On a CPU with AVX2 an optional C kernel (:mod:`pyg_private.utils._csr_product_native`, built at
installation where a C compiler exists) computes it about twice as fast as torch's CSR kernel, with
the same arithmetic in the same order (each entry summed from 0 in the row's CSR order, each term a
rounded product, no fused multiply-add), hence the same float32 or float64 result bit for bit as
``torch.sparse.mm(A, x)`` and ``torch.addmm`` (torch's ``reduce="sum"`` path rounds weighted terms
differently; with unit values all three agree): it
builds each output row in registers, so its only memory traffic is the neighbours' rows. For an
adjacency whose stored values are all 1 (``unit_values=True``, float64) it skips the products.
Elsewhere, or for other dtypes and layouts, torch computes it.
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor

from ..mechanisms.randomness import run_tasks

try:  # the AVX2 kernels (optional: built at installation where a C compiler exists)
    from . import _csr_product_native as _native
except ImportError:  # pragma: no cover - depends on the installation
    _native = None

__all__ = ["CsrProduct", "csr_product_available", "clamp_and_scale_rows", "with_int32_indices", "unit_values"]

#: rows are split over torch's threads only when each gets at least this many stored entries
_MIN_ENTRIES_PER_THREAD = 1 << 16


def csr_product_available() -> bool:
    """Whether the C kernels are installed and this CPU runs them (AVX2)."""
    return _native is not None and bool(_native.available())


def unit_values(nnz: int, dtype: torch.dtype = torch.float64, device: Optional[torch.device] = None) -> Tensor:
    """The ``nnz`` stored ones of a 0/1 adjacency as a broadcast view of one value (8 bytes instead of
    ``8 nnz``: 1 GB at ogbn-products' 124M entries). ``CsrProduct(adj, unit_values=True)`` never
    reads them, and its torch fallback materialises them; give such a CSR to nothing else."""
    return torch.ones(1, dtype=dtype, device=device).expand(int(nnz))


class CsrProduct:
    """``A @ x`` for one adjacency ``A``, called once per hop.

    The adjacency's index arrays are checked once, here (int32, contiguous, ``crow`` from 0 to the
    number of entries and non-decreasing, every column a row of ``x``; int64 ones that fit are
    copied to int32 once), so that the kernel may run.

    Args:
        adj (Tensor): a ``torch.sparse_csr`` adjacency ``[R, N]`` (float32 or float64 values).
        unit_values (bool, optional): every stored value is 1 (the caller's guarantee: the kernel
            then reads no value). (default: :obj:`False`)
        native (bool, optional): ``False`` forces torch's kernel (the same values); ``True``
            requires the C kernel. (default: :obj:`None`, the C kernel where it can run)
    """

    def __init__(self, adj: Tensor, *, unit_values: bool = False, native: Optional[bool] = None) -> None:
        self.adj = adj
        self.unit_values = bool(unit_values)
        self._materialised: Optional[Tensor] = None
        if native is not False and csr_product_available():
            adj = with_int32_indices(adj)  # int64 indices that fit: one int32 copy for the kernel
        self._kernel_adj = adj
        can = csr_product_available() and self._indices_ok(adj)
        if native and not can:
            raise RuntimeError("the C CSR product cannot run here (not built, no AVX2, or indices it does not take)")
        self.native = can if native is None else bool(native)
        self._ranges: Optional[tuple[int, list[tuple[int, int]]]] = None

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

    def __call__(self, x: Tensor, out: Optional[Tensor] = None, *, add: Optional[Tensor] = None,
                 scale: float = 1.0) -> Tensor:
        """``A @ x`` (into ``out`` when given: ``[R, C]``, never sharing memory with ``x`` or ``add``);
        with ``add`` (``[R, C]``), ``(A @ x + add) * scale``, rounded as ``y.add_(add).mul_(scale)``
        rounds it (in the kernel's pass for float64)."""
        adj = self.adj
        shape = (adj.size(0), x.size(-1))
        for other in (x, add):
            if out is not None and other is not None and out.numel() and other.numel() and \
                    out.untyped_storage().data_ptr() == other.untyped_storage().data_ptr():
                raise ValueError("`out` must not share memory with `x` or `add`")
        if self.native and self._fits(x, out, shape) and (add is None or self._fits_add(add, x, shape)):
            kadj = self._kernel_adj
            values = kadj.values()
            if out is None:
                out = torch.empty(shape, dtype=x.dtype)
            unit = self.unit_values and x.dtype == torch.float64
            fused = add is not None and x.dtype == torch.float64
            self._run(kadj, 0 if unit else values.data_ptr(), x, out, add if fused else None, float(scale))
            return out if add is None or fused else out.add_(add).mul_(scale)
        adj = self._torch_adj()
        if out is None:  # torch's kernels; with weights, the one the kernel matches (addmm's, not the reduce path)
            out = torch.sparse.mm(adj, x, "sum") if self.unit_values and adj.device.type == "cpu" \
                else torch.sparse.mm(adj, x)
        else:
            torch.addmm(out, adj, x, beta=0.0, out=out)
        return out if add is None else out.add_(add).mul_(scale)

    def _torch_adj(self) -> Tensor:
        """The adjacency for torch's kernels: values broadcast from one (:func:`unit_values`) made
        contiguous once, on the first call that needs them."""
        adj = self.adj
        if adj.layout != torch.sparse_csr or adj.values().is_contiguous():
            return adj
        if self._materialised is None:
            with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
                self._materialised = torch.sparse_csr_tensor(adj.crow_indices(), adj.col_indices(),
                                                             adj.values().contiguous(), adj.shape,
                                                             check_invariants=False)
        return self._materialised

    def _run(self, kadj: Tensor, values: int, x: Tensor, out: Tensor, add: Optional[Tensor], scale: float) -> None:
        """The kernel over row ranges of about equal numbers of entries, one per torch thread (the
        kernel releases the GIL; each range writes only its own output rows)."""
        crow = kadj.crow_indices()
        rows, width = out.shape
        item = out.element_size()
        bits = 64 if x.dtype == torch.float64 else 32
        ranges = self._row_ranges(crow, torch.get_num_threads())

        def task(k: int) -> None:
            r0, r1 = ranges[k]
            args = (crow.data_ptr() + 4 * r0, kadj.col_indices().data_ptr(), values, x.data_ptr(),
                    out.data_ptr() + item * r0 * width, r1 - r0, width, bits)
            if add is None:
                _native.csr_product(*args)
            else:
                _native.csr_product(*args, add.data_ptr() + item * r0 * width, scale)

        run_tasks(task, len(ranges), out.device)

    def _row_ranges(self, crow: Tensor, threads: int) -> list[tuple[int, int]]:
        rows, nnz = crow.numel() - 1, int(crow[-1])
        parts = max(1, min(threads, nnz // _MIN_ENTRIES_PER_THREAD, rows))
        if self._ranges is None or self._ranges[0] != parts:
            targets = torch.arange(1, parts, dtype=torch.int64) * nnz // parts
            cuts = [0, *torch.searchsorted(crow.long(), targets).tolist(), rows]
            self._ranges = (parts, [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a] or [(0, rows)])
        return self._ranges[1]

    @staticmethod
    def _fits_add(add: Tensor, x: Tensor, shape: tuple[int, int]) -> bool:
        return (tuple(add.shape) == shape and add.dtype == x.dtype and add.device.type == "cpu"
                and add.is_contiguous())

    def _fits(self, x: Tensor, out: Optional[Tensor], shape: tuple[int, int]) -> bool:
        values = self._kernel_adj.values()
        unread = self.unit_values and x.dtype == torch.float64  # the unit kernel reads no value
        return (x.dim() == 2 and x.size(0) == self._kernel_adj.size(1) and x.device.type == "cpu"
                and x.dtype in (torch.float32, torch.float64) and values.dtype == x.dtype
                and (unread or values.is_contiguous()) and x.is_contiguous()
                and (out is None or (tuple(out.shape) == shape and out.dtype == x.dtype
                                     and out.device.type == "cpu" and out.is_contiguous())))


def with_int32_indices(adj: Tensor) -> Tensor:
    """``adj`` with int32 index arrays where they are int64 and fit (a CPU CSR tensor only; anything
    else as it is): the same product from half the index bytes, for the C kernel and for torch's."""
    if adj.layout != torch.sparse_csr or adj.device.type != "cpu" or adj.crow_indices().dtype != torch.int64:
        return adj
    if max(adj.shape) >= 2 ** 31 or adj.col_indices().numel() >= 2 ** 31:
        return adj
    with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(adj.crow_indices().int(), adj.col_indices().int(), adj.values(), adj.shape,
                                       check_invariants=False)


def clamp_and_scale_rows(s: Tensor, upper: Tensor, weight: Tensor, xc: Tensor, scaled: Tensor) -> None:
    """``xc = clamp(s, 0, upper)`` and ``scaled = xc * weight`` (``upper`` and ``weight`` of shape
    ``[N, 1]``, one bound and one weight per row), in one pass of the C kernel for contiguous float64
    CPU tensors, by ``torch.clamp`` and ``torch.mul`` otherwise: the same values either way (one
    clamp and one rounded product per entry)."""
    if (csr_product_available() and s.dim() == 2 and s.device.type == "cpu"
            and all(t.dtype == torch.float64 and t.device.type == "cpu" and t.is_contiguous()
                    for t in (s, upper, weight, xc, scaled))
            and tuple(upper.shape) == tuple(weight.shape) == (s.size(0), 1)
            and tuple(xc.shape) == tuple(scaled.shape) == tuple(s.shape)
            and len({t.untyped_storage().data_ptr() for t in (s, xc, scaled)}) == 3):
        _native.clamp_scale(s.data_ptr(), upper.data_ptr(), weight.data_ptr(), xc.data_ptr(), scaled.data_ptr(),
                            s.size(0), s.size(1))
        return
    torch.clamp(s, min=s.new_zeros(()), max=upper, out=xc)
    torch.mul(xc, weight, out=scaled)
