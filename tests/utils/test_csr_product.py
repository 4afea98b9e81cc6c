"""`CsrProduct`: the package's order of summation (each entry summed from 0 in the row's CSR order,
each term a rounded product, no fused multiply-add) is what :func:`reference_csr_product` computes
(checked against a scalar NumPy loop), the AVX2 kernels compute the same values bit for bit (float32
and float64, weighted and unit values, every column count around the register blocks, empty rows,
row blocks with global columns, ``out=``, thread counts), and torch's CSR product, whatever order it
sums in on this CPU and torch version, lies within the rounding bound of any order."""
import shutil
import sysconfig
import warnings

import pytest
import torch

import numpy as np

from pyg_private._native import native_enabled
from pyg_private.utils import csr_product as NS
from pyg_private.utils.csr_product import CsrProduct, reference_csr_product, summation_error_bound

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
    if not native_enabled():
        pytest.skip("PYG_PRIVATE_NATIVE=0: the extensions are disabled")
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


def _bits(t):
    return t.view(torch.int64 if t.dtype == torch.float64 else torch.int32)


def _same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _within_bound(adj, x, got, other):
    """|got - other| <= the rounding bound of two summation orders, entry by entry."""
    return bool(((got.double() - other.double()).abs() <= summation_error_bound(adj, x)).all())


def _scalar_loop(adj, x, unit):
    """The documented order with NumPy scalars of x's dtype: every product and every sum rounded."""
    crow, col = adj.crow_indices().tolist(), adj.col_indices().tolist()
    kind = np.float64 if x.dtype == torch.float64 else np.float32
    vals = adj.values().to(x.dtype).numpy().astype(kind)
    xs = x.numpy().astype(kind)
    out = np.zeros((adj.size(0), x.size(1)), dtype=kind)
    for i in range(adj.size(0)):
        for c in range(x.size(1)):
            acc = kind(0.0)
            for p in range(crow[i], crow[i + 1]):
                term = xs[col[p], c] if unit else kind(vals[p] * xs[col[p], c])
                acc = kind(acc + term)
            out[i, c] = acc
    return torch.from_numpy(out)


def _mixed_x(n, channels, dtype, seed):
    x = torch.randn(n, channels, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    big = 1e300 if dtype == torch.float64 else 1e30
    x[::7] *= big  # large and small magnitudes: any change of order would show
    x[::11] /= big
    return x.to(dtype)


def _unit_or_weighted(adj, dtype, unit, seed):
    if not unit:
        return _weighted(adj, dtype, seed=seed)
    with warnings.catch_warnings():  # the same 0/1 adjacency with ones of this dtype
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(adj.crow_indices(), adj.col_indices(), adj.values().to(dtype), adj.shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("unit", [False, True])
def test_reference_is_the_documented_order(dtype, unit):
    adj = _unit_or_weighted(_graph(rows=40, n=60, nnz=400, seed=7, empty=range(3, 6)), dtype, unit, seed=7)
    x = _mixed_x(60, 5, dtype, seed=8)
    expected = _scalar_loop(adj, x, unit)
    assert _same_bits(reference_csr_product(adj, x, unit_values=unit), expected)
    assert _same_bits(CsrProduct(adj, unit_values=unit)(x), expected)  # the kernel where it runs
    assert _same_bits(CsrProduct(adj, unit_values=unit, native=False)(x), expected)


@pytest.mark.parametrize("dtype, unit", [(torch.float64, True), (torch.float64, False), (torch.float32, False),
                                         (torch.float32, True)])
@pytest.mark.parametrize("channels", [1, 3, 4, 5, 8, 15, 16, 17, 20, 32, 33, 64, 100])
def test_kernel_and_torch_path_give_the_reference_bits(channels, dtype, unit):
    adj = _unit_or_weighted(_graph(), dtype, unit, seed=channels)
    x = _mixed_x(300, channels, dtype, seed=channels)
    ref = reference_csr_product(adj, x)
    if unit:  # the unit path reads no value: the same sums
        assert _same_bits(reference_csr_product(adj, x, unit_values=True), ref)
    fast = CsrProduct(adj, unit_values=unit)
    assert fast.native == NS.csr_product_available()
    got = fast(x)
    assert _same_bits(got, ref)
    out = torch.full_like(ref, float("nan"))
    assert fast(x, out=out) is out and _same_bits(out, ref)
    slow = CsrProduct(adj, unit_values=unit, native=False)  # the torch path: the same values
    assert _same_bits(slow(x), ref)
    assert _same_bits(slow(x, out=torch.empty_like(ref)), ref)
    # torch's own CSR product sums in its own order (MKL's fused multiply-adds on AVX-512, other
    # orders in other versions): within the rounding bound of any order, not necessarily equal
    assert _within_bound(adj, x, got, torch.sparse.mm(adj, x))


def _reversed_rows(adj):
    """The same matrix with each row's entries stored in the opposite order: another order of summation."""
    crow, col, val = adj.crow_indices().long(), adj.col_indices().long(), adj.values()
    row = torch.repeat_interleave(torch.arange(adj.size(0)), crow.diff())
    flipped = torch.argsort(row * adj.size(1) + (adj.size(1) - 1 - col), stable=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(crow, col[flipped], val[flipped], adj.shape, check_invariants=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bound_holds_for_other_orders_and_catches_a_wrong_product(dtype):
    """The comparison with torch is one that any correct order passes and a wrong product fails:
    torch under other thread counts, and a deliberately different order (each row summed backwards),
    all lie within the bound although the backwards sums differ from ours bit-wise; a product that
    drops one term does not."""
    adj = _weighted(_graph(rows=2000, n=2000, nnz=60_000, seed=9), dtype, seed=9)
    x = torch.randn(2000, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(9)).to(dtype)
    got = CsrProduct(adj)(x)
    backwards = reference_csr_product(_reversed_rows(adj), x)
    assert not _same_bits(backwards, got)  # another order: other bits ...
    assert _within_bound(adj, x, got, backwards)  # ... within the bound
    threads = torch.get_num_threads()
    try:
        for t in (1, 2, 4):
            torch.set_num_threads(t)
            assert _within_bound(adj, x, got, torch.sparse.mm(adj, x))
            assert _same_bits(CsrProduct(adj)(x), got)
    finally:
        torch.set_num_threads(threads)
    crow, col, val = adj.crow_indices(), adj.col_indices(), adj.values().clone()
    val[int(crow[5])] = 0  # one term of row 5 dropped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrong = reference_csr_product(torch.sparse_csr_tensor(crow, col, val, adj.shape), x)
    assert not _within_bound(adj, x, got, wrong)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_block_with_global_columns_and_empty_rows(dtype):
    whole = _weighted(_graph(rows=300, n=300, nnz=4000, seed=3, empty=range(10, 19)), dtype, seed=3)
    crow, col, val = whole.crow_indices(), whole.col_indices(), whole.values()
    a, b = 5, 45  # a process's rows, global columns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        block = torch.sparse_csr_tensor(crow[a:b + 1] - crow[a], col[int(crow[a]):int(crow[b])],
                                        val[int(crow[a]):int(crow[b])], (b - a, 300))
    x = torch.randn(300, 24, dtype=torch.float64).to(dtype)
    for native in (None, False):
        got = CsrProduct(block, native=native)(x)
        assert _same_bits(got, CsrProduct(whole, native=native)(x)[a:b])  # the same bits as the whole
        assert torch.equal(got[10 - a:19 - a], torch.zeros(9, 24, dtype=dtype))


def test_torch_path_for_what_the_kernel_does_not_take():
    adj64 = _graph()
    adj64 = _csr(adj64.crow_indices(), adj64.col_indices(), (300, 300), idt=torch.int64)
    x = torch.randn(300, 8, dtype=torch.float64)
    fast64 = CsrProduct(adj64)  # int64 indices: an int32 copy for the kernel, where it runs
    assert fast64.native == NS.csr_product_available()
    assert _same_bits(fast64(x), reference_csr_product(adj64, x))
    bad = _graph()
    col = bad.col_indices().clone()
    col[0] = 300  # a column outside x's rows: the kernel would read out of bounds
    assert not CsrProduct._indices_ok(_csr(bad.crow_indices(), col, (300, 300)))
    adj32 = _csr(_graph().crow_indices(), _graph().col_indices(), (300, 300))
    x16 = torch.randn(300, 8).to(torch.bfloat16)  # a dtype the kernel does not take: the torch path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adj16 = torch.sparse_csr_tensor(adj32.crow_indices(), adj32.col_indices(),
                                        adj32.values().to(torch.bfloat16), (300, 300))
    assert _same_bits(CsrProduct(adj16)(x16).view(torch.int16), reference_csr_product(adj16, x16).view(torch.int16))
    assert _same_bits(CsrProduct(adj32, native=False)(x), CsrProduct(adj32)(x))
    with pytest.raises(ValueError, match="sparse_csr"):
        CsrProduct(adj32.to_sparse_coo())
    with pytest.raises(TypeError, match="values"):
        CsrProduct(adj32, native=False)(x.float())


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
    ref = reference_csr_product(adj, x).add_(z).mul_(0.4)
    for native in (None, False):
        fast = CsrProduct(adj, native=native)
        assert _same_bits(fast(x, add=z, scale=0.4), ref)
        out = torch.empty_like(ref)
        assert _same_bits(fast(x, out=out, add=z, scale=0.4), ref)
    with pytest.raises(ValueError, match="share memory"):
        CsrProduct(adj)(x, out=z, add=z)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_threads_split_rows_with_the_same_result(dtype):
    adj = _weighted(_graph(rows=2000, n=2000, nnz=300_000, seed=4), dtype, seed=4)
    x = torch.randn(2000, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(4)).to(dtype)
    z = torch.randn(2000, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).to(dtype)
    ref = reference_csr_product(adj, x)
    threads = torch.get_num_threads()
    try:
        for t in (1, 3):
            torch.set_num_threads(t)
            fast = CsrProduct(adj)
            assert _same_bits(fast(x), ref)
            assert len(fast._row_ranges(fast._kernel_adj.crow_indices(), t)) == t
            assert _same_bits(fast(x, add=z, scale=0.3), ref.clone().add_(z).mul_(0.3))
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
    product as stored ones, on the kernel and on the torch path (neither reads a value)."""
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
