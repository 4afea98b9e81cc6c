"""`CsrProduct`: the AVX2 kernels' ``A @ x`` equals torch's CSR product bit for bit (float32 and
float64, weighted and unit values, every column count around the register blocks, empty rows, row
blocks with global columns, ``out=``), and they are used only on inputs whose indices they take."""
import shutil
import sysconfig
import warnings

import pytest
import torch

from pyg_private.utils import csr_product as NS
from pyg_private.utils.csr_product import CsrProduct

needs_kernel = pytest.mark.skipif(not NS.csr_product_available(), reason="the C kernel is not built or no AVX2")


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
        from pyg_private.utils import _csr_product_native as native
    except ImportError:
        pytest.fail("pyg_private.utils._csr_product_native is missing: run `make install`")
    assert isinstance(native.available(), bool)


def _weighted(adj, dtype, seed=0):
    values = torch.rand(adj.values().numel(), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(adj.crow_indices(), adj.col_indices(), values.to(dtype), adj.shape)


@needs_kernel
@pytest.mark.parametrize("dtype, unit", [(torch.float64, True), (torch.float64, False), (torch.float32, False),
                                         (torch.float32, True)])
@pytest.mark.parametrize("channels", [1, 3, 4, 5, 8, 15, 16, 17, 20, 32, 33, 64, 100])
def test_bit_identical_to_torch(channels, dtype, unit):
    adj = _graph()
    if not unit:
        adj = _weighted(adj, dtype, seed=channels)
    elif dtype == torch.float32:  # the same 0/1 adjacency with float32 ones
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adj = torch.sparse_csr_tensor(adj.crow_indices(), adj.col_indices(), adj.values().float(), adj.shape)
    x = torch.randn(300, channels, dtype=torch.float64, generator=torch.Generator().manual_seed(channels))
    big = 1e300 if dtype == torch.float64 else 1e30
    x[::7] *= big  # large and small magnitudes: any change of order would show
    x[::11] /= big
    x = x.to(dtype)
    ref = torch.sparse.mm(adj, x)  # torch's addmm path (its reduce="sum" path rounds weighted terms differently)
    if unit:
        assert torch.equal(ref, torch.sparse.mm(adj, x, "sum"))
    fast = CsrProduct(adj, unit_values=unit)
    assert fast.native
    got = fast(x)
    bits = torch.int64 if dtype == torch.float64 else torch.int32
    assert torch.equal(got.view(bits), ref.view(bits))
    out = torch.full_like(ref, float("nan"))
    assert fast(x, out=out) is out and torch.equal(out.view(bits), ref.view(bits))
    slow = CsrProduct(adj, unit_values=unit, native=False)  # the torch fallback: the same values
    assert torch.equal(slow(x).view(bits), ref.view(bits))
    assert torch.equal(slow(x, out=torch.empty_like(ref)).view(bits), ref.view(bits))


@needs_kernel
def test_row_block_with_global_columns_and_empty_rows():
    block = _graph(rows=40, n=300, nnz=500, seed=3, empty=range(10, 19))  # a process's rows, global columns
    x = torch.randn(300, 24, dtype=torch.float64)
    fast = CsrProduct(block)
    assert fast.native
    assert torch.equal(fast(x), torch.sparse.mm(block, x, "sum"))
    assert torch.equal(fast(x)[10:19], torch.zeros(9, 24, dtype=torch.float64))


def test_torch_path_for_what_the_kernel_does_not_take():
    adj64 = _graph()
    adj64 = _csr(adj64.crow_indices(), adj64.col_indices(), (300, 300), idt=torch.int64)
    x = torch.randn(300, 8, dtype=torch.float64)
    fast64 = CsrProduct(adj64)  # int64 indices: an int32 copy for the kernel, where it runs
    assert fast64.native == NS.csr_product_available()
    assert torch.equal(fast64(x), torch.sparse.mm(adj64, x, "sum"))
    bad = _graph()
    col = bad.col_indices().clone()
    col[0] = 300  # a column outside x's rows: the kernel would read out of bounds
    assert not CsrProduct._indices_ok(_csr(bad.crow_indices(), col, (300, 300)))
    x32 = torch.randn(300, 8)
    adj32 = _csr(_graph().crow_indices(), _graph().col_indices(), (300, 300))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adj32f = torch.sparse_csr_tensor(adj32.crow_indices(), adj32.col_indices(), adj32.values().float(),
                                         (300, 300))
    assert torch.equal(CsrProduct(adj32f)(x32), torch.sparse.mm(adj32f, x32, "sum"))  # float32: torch
    assert torch.equal(CsrProduct(adj32, native=False)(x), torch.sparse.mm(adj32, x, "sum"))


def test_out_overlapping_x_refused():
    adj = _graph()
    x = torch.randn(300, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="share memory"):
        CsrProduct(adj)(x, out=x)


@pytest.mark.parametrize("channels", [1, 5, 16, 25, 100])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_add_and_scale_rounded_as_torch(channels, dtype):
    adj = _weighted(_graph(), dtype, seed=1)
    gen = torch.Generator().manual_seed(channels)
    x = torch.randn(300, channels, generator=gen, dtype=torch.float64).to(dtype)
    z = torch.randn(300, channels, generator=gen, dtype=torch.float64).to(dtype)
    ref = torch.sparse.mm(adj, x).add_(z).mul_(0.4)
    bits = torch.int64 if dtype == torch.float64 else torch.int32
    for native in (None, False):
        fast = CsrProduct(adj, native=native)
        assert torch.equal(fast(x, add=z, scale=0.4).view(bits), ref.view(bits))
        out = torch.empty_like(ref)
        assert torch.equal(fast(x, out=out, add=z, scale=0.4).view(bits), ref.view(bits))
    with pytest.raises(ValueError, match="share memory"):
        CsrProduct(adj)(x, out=z, add=z)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_threads_split_rows_with_the_same_result(dtype):
    adj = _weighted(_graph(rows=2000, n=2000, nnz=300_000, seed=4), dtype, seed=4)
    x = torch.randn(2000, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(4)).to(dtype)
    z = torch.randn(2000, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).to(dtype)
    ref = torch.sparse.mm(adj, x)
    threads = torch.get_num_threads()
    try:
        for t in (1, 3):
            torch.set_num_threads(t)
            fast = CsrProduct(adj)
            assert torch.equal(fast(x), ref)
            assert len(fast._row_ranges(fast._kernel_adj.crow_indices(), t)) == t
            assert torch.equal(fast(x, add=z, scale=0.3), ref.clone().add_(z).mul_(0.3))
    finally:
        torch.set_num_threads(threads)


@needs_kernel
def test_lazy_ppr_same_with_and_without_the_kernel(monkeypatch):
    from torch_geometric.utils import to_undirected

    from pyg_private.utils import lazy_ppr
    n = 500
    ei = to_undirected(torch.randint(0, n, (2, 6000), generator=torch.Generator().manual_seed(0)), num_nodes=n)
    ei = ei[:, ei[0] != ei[1]]
    seeds = torch.arange(0, n, 37)
    fast = lazy_ppr(ei, n, seed_index=seeds, alpha=0.2, num_iterations=20)
    monkeypatch.setattr(NS, "_native", None)
    assert torch.equal(fast, lazy_ppr(ei, n, seed_index=seeds, alpha=0.2, num_iterations=20))


@pytest.mark.parametrize("channels", [1, 7, 100])
def test_clamp_and_scale_rows_as_torch(channels):
    from pyg_private.utils.csr_product import clamp_and_scale_rows
    gen = torch.Generator().manual_seed(channels)
    s = torch.randn(400, channels, dtype=torch.float64, generator=gen) * torch.tensor(1e-6, dtype=torch.float64)
    upper = torch.rand(400, 1, dtype=torch.float64, generator=gen) * 1e-6
    weight = 1.0 / torch.randint(1, 50, (400, 1), generator=gen).to(torch.float64)
    xc, scaled = torch.full_like(s, float("nan")), torch.full_like(s, float("nan"))
    clamp_and_scale_rows(s, upper, weight, xc, scaled)
    ref = torch.clamp(s, min=s.new_zeros(()), max=upper)
    assert torch.equal(xc, ref) and torch.equal(scaled, torch.mul(ref, weight))


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_kernel), False])
def test_unit_values_view_is_never_stored(native):
    """A 0/1 adjacency whose ones are `unit_values` (a broadcast view of one value) gives the same
    product as stored ones, on the kernel (which reads no value) and on torch's path (which
    materialises the ones once, for itself)."""
    g = _graph(seed=5)
    crow, col = g.crow_indices(), g.col_indices()
    ones = NS.unit_values(col.numel())
    assert ones.untyped_storage().nbytes() == 8 and ones.numel() == col.numel()
    view = torch.sparse_csr_tensor(crow, col, ones, (300, 300), check_invariants=False)
    stored = torch.sparse_csr_tensor(crow, col, torch.ones(col.numel(), dtype=torch.float64), (300, 300))
    x = torch.randn(300, 17, dtype=torch.float64)
    product = CsrProduct(view, unit_values=True, native=native)
    got = product(x)
    assert torch.equal(got, CsrProduct(stored, unit_values=True, native=False)(x))
    assert torch.equal(product(x, out=torch.empty_like(got)), got)
    assert product.adj.values().untyped_storage().nbytes() == 8  # the layer's adjacency is left as it is
