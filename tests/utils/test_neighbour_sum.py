"""`NeighbourSum`: the AVX2 kernel's ``A @ x`` equals torch's CSR product bit for bit (every column
count around its 16- and 4-wide blocks, empty rows, row blocks with global columns, ``out=``), and
it is used only on inputs whose indices it can take."""
import shutil
import sysconfig
import warnings

import pytest
import torch

from pyg_private.utils import neighbour_sum as NS
from pyg_private.utils.neighbour_sum import NeighbourSum

needs_kernel = pytest.mark.skipif(not NS.neighbour_sum_available(), reason="the C kernel is not built or no AVX2")


def _csr(crow, col, shape, idt=torch.int32):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(crow.to(idt), col.to(idt), torch.ones(col.numel(), dtype=torch.float64),
                                       shape, check_invariants=False)


def _graph(rows=300, n=300, nnz=4000, seed=0, empty=range(0)):
    gen = torch.Generator().manual_seed(seed)
    r = torch.randint(0, rows, (nnz,), generator=gen)
    c = torch.randint(0, n, (nnz,), generator=gen)
    keep = (r < empty.start) | (r >= empty.stop) if len(empty) else torch.ones_like(r, dtype=torch.bool)
    key = torch.unique(r[keep] * n + c[keep])  # sorted, distinct
    r, c = key // n, key % n
    crow = torch.zeros(rows + 1, dtype=torch.long)
    crow[1:] = torch.cumsum(torch.bincount(r, minlength=rows), 0)
    return _csr(crow, c, (rows, n))


def test_built_wherever_a_compiler_and_avx2_are():
    if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None:
        pytest.skip("no C compiler")
    try:
        from pyg_private.utils import _neighbour_sum_native as native
    except ImportError:
        pytest.fail("pyg_private.utils._neighbour_sum_native is missing: run `make install`")
    assert isinstance(native.available(), bool)


@needs_kernel
@pytest.mark.parametrize("channels", [1, 3, 4, 5, 15, 16, 17, 20, 33, 100])
def test_bit_identical_to_torch(channels):
    adj = _graph()
    x = torch.randn(300, channels, dtype=torch.float64, generator=torch.Generator().manual_seed(channels))
    x[::7] *= 1e300  # large and small magnitudes: any change of order would show
    x[::11] *= 1e-300
    ref = torch.sparse.mm(adj, x, "sum")
    fast = NeighbourSum(adj)
    assert fast.native
    got = fast(x)
    assert torch.equal(got.view(torch.int64), ref.view(torch.int64))
    out = torch.full_like(ref, float("nan"))
    assert fast(x, out=out) is out and torch.equal(out, ref)


@needs_kernel
def test_row_block_with_global_columns_and_empty_rows():
    block = _graph(rows=40, n=300, nnz=500, seed=3, empty=range(10, 19))  # a process's rows, global columns
    x = torch.randn(300, 24, dtype=torch.float64)
    fast = NeighbourSum(block)
    assert fast.native
    assert torch.equal(fast(x), torch.sparse.mm(block, x, "sum"))
    assert torch.equal(fast(x)[10:19], torch.zeros(9, 24, dtype=torch.float64))


def test_torch_path_for_what_the_kernel_does_not_take():
    adj64 = _graph()
    adj64 = _csr(adj64.crow_indices(), adj64.col_indices(), (300, 300), idt=torch.int64)
    x = torch.randn(300, 8, dtype=torch.float64)
    fast64 = NeighbourSum(adj64)  # int64 indices: an int32 copy for the kernel, where it runs
    assert fast64.native == NS.neighbour_sum_available()
    assert torch.equal(fast64(x), torch.sparse.mm(adj64, x, "sum"))
    bad = _graph()
    col = bad.col_indices().clone()
    col[0] = 300  # a column outside x's rows: the kernel would read out of bounds
    assert not NeighbourSum._indices_ok(_csr(bad.crow_indices(), col, (300, 300)))
    x32 = torch.randn(300, 8)
    adj32 = _csr(_graph().crow_indices(), _graph().col_indices(), (300, 300))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adj32f = torch.sparse_csr_tensor(adj32.crow_indices(), adj32.col_indices(), adj32.values().float(),
                                         (300, 300))
    assert torch.equal(NeighbourSum(adj32f)(x32), torch.sparse.mm(adj32f, x32, "sum"))  # float32: torch
    assert torch.equal(NeighbourSum(adj32, native=False)(x), torch.sparse.mm(adj32, x, "sum"))


def test_out_overlapping_x_refused():
    adj = _graph()
    x = torch.randn(300, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="share memory"):
        NeighbourSum(adj)(x, out=x)
