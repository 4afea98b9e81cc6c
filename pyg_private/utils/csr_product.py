"""The product ``A @ x`` of a ``torch.sparse_csr`` adjacency with dense rows, called once per hop or
step of a diffusion, in one documented order of summation that the package owns.

**The contract.** Every path computes each output entry as a sequential sum in the row's CSR order::

    y[i, c] = 0;  for p in crow[i] .. crow[i+1]-1:  y[i, c] = fl(y[i, c] + fl(val[p] * x[col[p], c]))

(each term a product rounded before it is added, never a fused multiply-add; with unit values the
term is ``x[col[p], c]`` itself, which is the same number). The result is a function of the
adjacency's stored entries and of ``x`` alone: the same bits on every CPU (with or without AVX2 or
AVX-512), every torch version, every thread count and every row split, hence the same bits for a
process's row block as for those rows of the whole matrix, and on a GPU as on the CPU. Three paths
compute it:

* the C kernel (:mod:`pyg_private.utils._csr_product_native`, built at installation where a C
  compiler exists; AVX2 registers, chosen at run time), about twice as fast as torch's CSR kernel;
* on CUDA, a Triton kernel (:mod:`pyg_private.utils._csr_product_triton`, where ``triton`` is
  installed; one program per row and block of columns, compiled without fused multiply-adds);
* :func:`reference_csr_product`, torch operations (any device and dtype): rows sorted by length,
  the ``k``-th term of every row with more than ``k`` terms added in one vectorised step (as many
  steps as the longest row).

torch's own ``torch.sparse.mm`` / ``torch.addmm`` sum in orders that differ between CPUs (MKL uses
fused multiply-adds on AVX-512), torch versions and thread counts; they agree with this order
within the rounding bound of any summation order (Higham, *Accuracy and Stability of Numerical
Algorithms*, Eq. 3.5): ``|y - A x| <= gamma_m |A| |x|`` per entry, ``m`` the row's length and
``gamma_m = m u / (1 - m u)``, so two orders differ by at most ``2 gamma_m (|A| |x|)[i, c]``
(:func:`summation_error_bound`). The tests check the kernel against the reference bit for bit
and against torch within that bound.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

import torch
from torch import Tensor

from .._native import native_attribute
from ..sampling.threads import run_tasks

# the AVX2 kernels (optional: built at installation where a C compiler exists), the module attribute
# ``_native``, loaded on first access (PEP 562; ``None`` where not built)
_NATIVE = "utils._csr_product_native"


def __getattr__(name: str):
    if name == "_native":
        return native_attribute(globals(), name, _NATIVE)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _kernels():
    return native_attribute(globals(), "_native", _NATIVE)

__all__ = ["CsrProduct", "csr_product_available", "reference_csr_product", "summation_error_bound",
           "clamp_and_scale_rows", "with_int32_indices", "unit_values"]

#: rows are split over torch's threads only when each gets at least this many stored entries
_MIN_ENTRIES_PER_THREAD = 1 << 16


def csr_product_available() -> bool:
    """Whether the C kernels are installed and this CPU runs them (AVX2)."""
    kernels = _kernels()
    return kernels is not None and bool(kernels.available())


def unit_values(nnz: int, dtype: torch.dtype = torch.float64, device: Optional[torch.device] = None) -> Tensor:
    """The ``nnz`` stored ones of a 0/1 adjacency as a broadcast view of one value (8 bytes instead of
    ``8 nnz``: 1 GB at ogbn-products' 124M entries). ``CsrProduct(adj, unit_values=True)`` reads
    none of them on any path; give such a CSR to nothing else."""
    return torch.ones(1, dtype=dtype, device=device).expand(int(nnz))


class CsrProduct:
    """``A @ x`` for one adjacency ``A``, called once per hop, in the package's order of summation
    (see the module notes): the C kernel where it runs, the Triton kernel for CUDA tensors,
    :func:`reference_csr_product` elsewhere, the same values on every path.

    The adjacency's index arrays are checked once, here (int32, contiguous, ``crow`` from 0 to the
    number of entries and non-decreasing, every column a row of ``x``; int64 ones that fit are
    copied to int32 once), so that the kernel may run.

    Args:
        adj (Tensor): a ``torch.sparse_csr`` adjacency ``[R, N]`` (float32 or float64 values for
            the kernel; any floating dtype and device for the torch path).
        unit_values (bool, optional): every stored value is 1 (the caller's guarantee: the kernel
            then reads no value). (default: :obj:`False`)
        native (bool, optional): ``False`` forces the torch path (the same values); ``True``
            requires the C kernel. (default: :obj:`None`, the C kernel where it can run)
    """

    def __init__(self, adj: Tensor, *, unit_values: bool = False, native: Optional[bool] = None) -> None:
        if adj.layout != torch.sparse_csr or adj.dim() != 2:
            raise ValueError(f"CsrProduct takes a 2-D torch.sparse_csr adjacency; got {adj.layout} with "
                             f"{adj.dim()} dimensions")
        self.adj = adj
        self.unit_values = bool(unit_values)
        if native is not False and csr_product_available():
            adj = with_int32_indices(adj)  # int64 indices that fit: one int32 copy for the kernel
        self._kernel_adj = adj
        can = csr_product_available() and self._indices_ok(adj)
        if native and not can:
            raise RuntimeError("the C CSR product cannot run here (not built, no AVX2, or indices it does not take)")
        self.native = can if native is None else bool(native)
        self._ranges: Optional[tuple[int, list[tuple[int, int]]]] = None
        self._plan: Optional[_ReferencePlan] = None

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
        if x.is_cuda and adj.device == x.device and x.dtype in (torch.float32, torch.float64) and \
                (self.unit_values or adj.values().dtype == x.dtype):
            from . import _csr_product_triton as gpu  # imports triton, on the first CUDA product only
            if gpu.triton_available():
                out = gpu.csr_product_triton(adj, x, out, unit_values=self.unit_values)  # the same order
                return out if add is None else out.add_(add).mul_(scale)
        if self._plan is None:  # sorted once per adjacency, on the first call that needs it
            self._plan = _ReferencePlan(adj.crow_indices())
        out = self._plan.product(adj, x, out, unit_values=self.unit_values)
        return out if add is None else out.add_(add).mul_(scale)

    def _run(self, kadj: Tensor, values: int, x: Tensor, out: Tensor, add: Optional[Tensor], scale: float) -> None:
        """The kernel over row ranges of about equal numbers of entries, one per torch thread (the
        kernel releases the GIL; each range writes only its own output rows)."""
        crow = kadj.crow_indices()
        rows, width = out.shape
        item = out.element_size()
        bits = 64 if x.dtype == torch.float64 else 32
        ranges = self._row_ranges(crow, torch.get_num_threads())

        kernels = _kernels()

        def task(k: int) -> None:
            r0, r1 = ranges[k]
            args = (crow.data_ptr() + 4 * r0, kadj.col_indices().data_ptr(), values, x.data_ptr(),
                    out.data_ptr() + item * r0 * width, r1 - r0, width, bits)
            if add is None:
                kernels.csr_product(*args)
            else:
                kernels.csr_product(*args, add.data_ptr() + item * r0 * width, scale)

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


#: the torch path gathers the terms of several steps at once while they hold at most this many entries
_GATHER_ENTRIES = 1 << 21


class _ReferencePlan:
    """The rows of one CSR adjacency sorted by length (longest first, stable), so that the rows with
    more than ``k`` terms are a prefix: the ``k``-th term of all of them is added in one step.

    The terms of a run of steps are gathered (and multiplied) at once, as many steps as keep that
    gather under :data:`_GATHER_ENTRIES` entries: one step at a time while many rows are active, long
    runs of steps for the few long rows of a skewed graph, where each step is then one addition."""

    def __init__(self, crow: Tensor) -> None:
        crow = crow.long()
        length = crow.diff()
        self.order = torch.argsort(length, descending=True, stable=True)
        self.starts = crow[:-1][self.order]
        self.length = length[self.order]
        longest = int(length.max()) if length.numel() else 0
        # active[k]: the rows with more than k terms
        counts = torch.bincount(length, minlength=longest + 1) if length.numel() else length.new_zeros(1)
        self.active = (length.numel() - counts.cumsum(0))[:longest].tolist()

    def _runs(self, width: int) -> list[tuple[int, int]]:
        """``(k0, k1)`` runs of steps whose gathered terms fit the budget."""
        runs, k0, steps = [], 0, len(self.active)
        while k0 < steps:
            per_step = max(1, self.active[k0] * max(width, 1))
            k1 = min(steps, k0 + max(1, _GATHER_ENTRIES // per_step))
            runs.append((k0, k1))
            k0 = k1
        return runs

    def product(self, adj: Tensor, x: Tensor, out: Optional[Tensor], *, unit_values: bool) -> Tensor:
        rows, width = adj.size(0), x.size(-1)
        if x.dim() != 2 or x.size(0) != adj.size(1):
            raise ValueError(f"A @ x needs x of shape [{adj.size(1)}, C]; got {list(x.shape)}")
        if out is not None and (tuple(out.shape) != (rows, width) or out.dtype != x.dtype
                                or out.device != x.device):
            raise ValueError(f"`out` must be a {x.dtype} tensor of shape [{rows}, {width}] on {x.device}")
        col, values = adj.col_indices(), adj.values()
        if not unit_values and values.dtype != x.dtype:
            raise TypeError(f"the adjacency holds {values.dtype} values and x is {x.dtype}")
        device = x.device
        order, starts, length = self.order.to(device), self.starts.to(device), self.length.to(device)
        col = col.to(device)
        acc = torch.zeros((rows, width), dtype=x.dtype, device=device)  # in sorted row order
        for k0, k1 in self._runs(width):
            n = self.active[k0]
            steps = torch.arange(k0, k1, device=device).unsqueeze(-1)  # [s, 1]
            pos = starts[:n] + steps  # [s, n]: the k-th entry of each active row
            valid = steps < length[:n]
            pos = torch.where(valid, pos, starts[:n])  # any entry of the row: its term is replaced by +0
            terms = x.index_select(0, col.index_select(0, pos.reshape(-1))).view(k1 - k0, n, width)
            if not unit_values:
                terms.mul_(values.index_select(0, pos.reshape(-1)).view(k1 - k0, n, 1))  # rounded before the sum
            if k1 - k0 > 1:
                # a row without a k-th term adds +0, which changes no sum: a sum that starts from +0 is
                # never -0 when rounding to nearest (x + 0 = x for every other x, inf and NaN included)
                terms.masked_fill_(~valid.unsqueeze(-1), 0.0)
            rows_n = acc[:n]
            for term in terms.unbind(0):
                rows_n.add_(term)
        if out is None:
            out = torch.empty_like(acc)
        return out.index_copy_(0, order, acc)


def reference_csr_product(adj: Tensor, x: Tensor, out: Optional[Tensor] = None, *,
                          unit_values: bool = False) -> Tensor:
    """``A @ x`` in the package's order of summation (see the module notes) with torch operations,
    on any device: the values the C kernel computes, bit for bit.

    Args:
        adj (Tensor): a ``torch.sparse_csr`` adjacency ``[R, N]``.
        x (Tensor): dense ``[N, C]`` rows of the adjacency's dtype (or any floating dtype with
            ``unit_values=True``).
        out (Tensor, optional): ``[R, C]`` to write into.
        unit_values (bool, optional): every stored value is 1 (then none is read).
    """
    if adj.layout != torch.sparse_csr or adj.dim() != 2:
        raise ValueError(f"reference_csr_product takes a 2-D torch.sparse_csr adjacency; got {adj.layout}")
    return _ReferencePlan(adj.crow_indices()).product(adj, x, out, unit_values=unit_values)


def summation_error_bound(adj: Tensor, x: Tensor) -> Tensor:
    """Per entry, the largest difference between ``A @ x`` summed in two orders (or with and without
    fused multiply-adds): ``2 gamma_m (|A| |x|)[i, c]`` with ``m`` the length of row ``i`` and
    ``gamma_m = m u / (1 - m u)`` for the unit roundoff ``u`` of ``x``'s dtype (Higham, Eq. 3.5:
    each order is within ``gamma_m |A| |x|`` of the exact product). Computed in float64 and
    rounded up by one more ``gamma``; infinite where ``m u >= 1``."""
    info = torch.finfo(x.dtype)
    u = info.eps / 2
    with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        a64 = torch.sparse_csr_tensor(adj.crow_indices(), adj.col_indices(),
                                      adj.values().abs().to(torch.float64), adj.shape, check_invariants=False)
    magnitude = reference_csr_product(a64, x.abs().to(torch.float64))
    m = adj.crow_indices().diff().to(device=magnitude.device, dtype=torch.float64).unsqueeze(-1)
    mu = m * u
    gamma = torch.where(mu < 1, mu / (1 - mu), torch.full_like(mu, math.inf))
    u64 = torch.finfo(torch.float64).eps / 2
    slack = 1 + (m + 2) * u64 / (1 - (m + 2) * u64)  # the rounding of the float64 magnitude itself
    # below the normal range a rounding errs by up to half the smallest subnormal, not u times the value
    underflow = 2 * m * (info.tiny * info.eps)
    return torch.where(m > 0, 2 * gamma * magnitude * slack + underflow, torch.zeros_like(magnitude))


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
        _kernels().clamp_scale(s.data_ptr(), upper.data_ptr(), weight.data_ptr(), xc.data_ptr(), scaled.data_ptr(),
                               s.size(0), s.size(1))
        return
    torch.clamp(s, min=s.new_zeros(()), max=upper, out=xc)
    torch.mul(xc, weight, out=scaled)
