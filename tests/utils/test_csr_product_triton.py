"""The Triton CSR product gives the package's order of summation bit for bit: under Triton's
interpreter on the CPU (a fresh interpreter with ``TRITON_INTERPRET=1``, read when the kernel is
defined) and, where a GPU is present, on CUDA against the CPU's reference, subnormal values, signed
zeros, empty rows and long rows included (a GPU that flushed subnormals or fused a multiply-add
would show there)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from pyg_private.utils.csr_product import CsrProduct, reference_csr_product

triton = pytest.importorskip("triton", reason="the optional triton package is not installed")

CASES = textwrap.dedent('''
    import warnings
    import torch

    warnings.simplefilter("ignore")


    def graph(rows, n, nnz, seed, long_row=0):
        gen = torch.Generator().manual_seed(seed)
        r = torch.randint(0, rows, (nnz,), generator=gen)
        c = torch.randint(0, n, (nnz,), generator=gen)
        r = torch.cat([r, torch.zeros(long_row, dtype=torch.long)])  # row 0: a long row
        c = torch.cat([c, torch.randint(0, n, (long_row,), generator=gen)])
        keep = (r < 3) | (r >= 6)  # rows 3-5 empty
        key = torch.unique(r[keep] * n + c[keep])
        r, c = key // n, key % n
        crow = torch.zeros(rows + 1, dtype=torch.long)
        crow[1:] = torch.cumsum(torch.bincount(r, minlength=rows), 0)
        return crow, c


    def features(n, width, dtype, seed):
        x = torch.randn(n, width, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).to(dtype)
        tiny = torch.finfo(dtype).tiny
        x[::5] *= tiny / 4  # subnormal rows: their products and sums stay subnormal
        x[::7] *= 1e30 if dtype == torch.float32 else 1e300
        x[1::9] = -0.0  # signed zeros: -0 terms
        return x


    def cases(device):
        for dtype in (torch.float32, torch.float64):
            for unit in (False, True):
                for width, idt in ((1, torch.int32), (5, torch.int64), (70, torch.int32), (130, torch.int64)):
                    crow, col = graph(40, 60, 400, seed=width, long_row=150)
                    vals = torch.ones(col.numel(), dtype=dtype) if unit else \\
                        torch.rand(col.numel(), dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(dtype)
                    adj = torch.sparse_csr_tensor(crow.to(idt), col.to(idt), vals, (40, 60))
                    yield f"{dtype} unit={unit} width={width}", adj, features(60, width, dtype, seed=width)
''')

INTERPRETED = CASES + textwrap.dedent('''
    from pyg_private.utils._csr_product_triton import csr_product_triton
    from pyg_private.utils.csr_product import reference_csr_product

    bad = []
    for name, adj, x in cases("cpu"):
        unit = "unit=True" in name
        got = csr_product_triton(adj, x, unit_values=unit)
        ref = reference_csr_product(adj, x, unit_values=unit)
        bits = torch.int64 if x.dtype == torch.float64 else torch.int32
        if not torch.equal(got.view(bits), ref.view(bits)):
            bad.append(name)
        out = torch.full((x.size(1), 40), float("nan"), dtype=x.dtype).t()  # a non-contiguous out
        if csr_product_triton(adj, x, out, unit_values=unit) is not out or not torch.equal(out.view(bits), ref.view(bits)):
            bad.append(name + " out=")
    print("BAD", bad)
''')


@pytest.mark.skipif(tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 9),
                    reason="Triton's interpreter before 3.9 failed on this kernel's loop bounds (loaded scalars) "
                           "with NumPy 2.5 (seen with Triton 3.6.0)")
def test_interpreted_kernel_gives_the_reference_bits():
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BAD []" in done.stdout, done.stdout[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_products_give_the_cpu_bits():
    namespace: dict = {}
    exec(CASES, namespace)
    for name, adj, x in namespace["cases"]("cuda"):
        unit = "unit=True" in name
        ref = reference_csr_product(adj, x, unit_values=unit)
        product = CsrProduct(adj.to("cuda"), unit_values=unit)
        got = product(x.to("cuda")).cpu()
        bits = torch.int64 if x.dtype == torch.float64 else torch.int32
        assert torch.equal(got.view(bits), ref.view(bits)), name
        z = torch.randn(adj.size(0), x.size(1), dtype=x.dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fused = product(x.to("cuda"), add=z.to("cuda"), scale=0.3).cpu()
        assert torch.equal(fused.view(bits), ref.add_(z).mul_(0.3).view(bits)), name
