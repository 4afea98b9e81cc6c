"""The CSR product ``A @ x`` as a Triton kernel, for CUDA tensors, in the package's order of summation.

One program per (row, block of columns) walks the row's entries in CSR order and adds each term,
a product rounded before it is added, to a register accumulator that starts from 0; the kernel is
compiled with ``enable_fp_fusion=False``, so no multiply-add is fused. That is exactly the order of
:func:`~pyg_private.utils.csr_product.reference_csr_product` and of the C kernel on the CPU: the
same bits on the GPU as on any CPU. The terms are loaded eight at a time and then added in order,
so that a long row's loads overlap. Under ``TRITON_INTERPRET=1`` the kernel runs on CPU tensors
(the tests use that).

Optional: without the ``triton`` package, :func:`triton_available` is ``False`` and the callers use
the torch path (the same values, one launch per term of the longest row).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the installation
    triton = None

__all__ = ["triton_available", "csr_product_triton"]

_DTYPES = (torch.float32, torch.float64)
#: terms loaded together by one program (a row's loads then overlap: long rows are latency-bound)
_UNROLL = 8


def triton_available() -> bool:
    """Whether the ``triton`` package is installed (a CUDA device is still needed to run the kernel,
    except under ``TRITON_INTERPRET=1``)."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _csr_rows(crow, col, val, x, y, width, x_stride, y_stride, UNIT: tl.constexpr, BLOCK: tl.constexpr,
                  UNROLL: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = cols < width
        p0 = tl.load(crow + row).to(tl.int64)
        p1 = tl.load(crow + row + 1).to(tl.int64)
        acc = tl.zeros([BLOCK], dtype=y.dtype.element_ty)
        zero = tl.zeros([BLOCK], dtype=tl.int64)
        for p in range(p0, p1, UNROLL):
            # UNROLL terms a round, unrolled: their loads depend on no sum, so they overlap; a position
            # past the row's end adds +0, which changes no sum (a sum started from +0 is never -0
            # when rounding to nearest)
            for i in tl.static_range(UNROLL):
                here = (zero + (p + i)) < p1  # as a vector: the interpreter's masks are vectors
                q = tl.minimum(p + i, p1 - 1)
                j = tl.load(col + q).to(tl.int64)
                term = tl.load(x + j * x_stride + cols, mask=inside & here, other=0.0)
                if not UNIT:
                    term = tl.where(here, term * tl.load(val + q), 0.0)  # rounded before the sum
                acc = acc + term
        tl.store(y + row.to(tl.int64) * y_stride + cols, acc, mask=inside)


def csr_product_triton(adj: Tensor, x: Tensor, out: Optional[Tensor] = None, *, unit_values: bool = False) -> Tensor:
    """``A @ x`` for a ``torch.sparse_csr`` adjacency and dense rows ``x`` (float32 or float64, the
    adjacency's dtype unless ``unit_values``) on one CUDA device (or CPU tensors under
    ``TRITON_INTERPRET=1``), into ``out`` when given."""
    if triton is None:
        raise RuntimeError("the triton package is not installed")
    if x.dtype not in _DTYPES or x.dim() != 2 or x.size(0) != adj.size(1):
        raise ValueError(f"x must be float32 or float64 of shape [{adj.size(1)}, C]; got {x.dtype} {list(x.shape)}")
    values = adj.values()
    if not unit_values and values.dtype != x.dtype:
        raise TypeError(f"the adjacency holds {values.dtype} values and x is {x.dtype}")
    rows, width = adj.size(0), x.size(1)
    if out is None:
        out = torch.empty((rows, width), dtype=x.dtype, device=x.device)
    if rows == 0 or width == 0:
        return out
    x = x.contiguous()
    target = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
    crow, col = adj.crow_indices().contiguous(), adj.col_indices().contiguous()
    if unit_values:
        values = x  # never read
    else:
        values = values.contiguous()
    block = min(128, triton.next_power_of_2(width))
    grid = (rows, triton.cdiv(width, block))
    _csr_rows[grid](crow, col, values, x, target, width, x.stride(0), target.stride(0),
                    UNIT=bool(unit_values), BLOCK=block, UNROLL=_UNROLL, num_warps=1 if block <= 64 else 2,
                    enable_fp_fusion=False)
    if target is not out:
        out.copy_(target)
    return out
