"""The canonical-CSR check (``simple_undirected_csr``), in both its forms (torch operations in
blocks, and the one-pass C check with a cursor per row), against the whole-array version they
replaced (kept verbatim below as the reference): the same answer on random graphs and on
corrupted ones (one-way edges, directed 3-cycles with equal in- and out-degrees, self-loops,
weights, duplicate or unsorted columns, out-of-range columns), for blocks of 1, 2, 3, 7 and 50
entries and one block, with int32 and int64 indices (also mixed)."""
from __future__ import annotations

import random
import shutil
import sysconfig
from typing import Optional

import pytest
import torch
from torch import Tensor
from torch_geometric.typing import SparseTensor
from torch_geometric.utils import to_undirected

from pyg_private._native import native_enabled
from pyg_private.utils import adjacency
from pyg_private.utils.adjacency import simple_undirected_csr

native_built = adjacency._native_check is not None
FORMS = [False, pytest.param(True, marks=pytest.mark.skipif(not native_built, reason="the C check is not built"))]


def test_built_wherever_a_compiler_is():
    """`make install` builds the extension where a C compiler exists; a silent fallback would cost a
    sort of the entries at every uncached release."""
    if not native_enabled():
        pytest.skip("PYG_PRIVATE_NATIVE=0: the extensions are disabled")
    cc = sysconfig.get_config_var("CC")
    if shutil.which(cc.split()[0] if cc else "cc") is None:
        pytest.skip("no C compiler: the torch check runs")
    assert native_built, "pyg_private.utils._graph_check_native is missing: run `make install`"


def reference(adj: object, num_nodes: int) -> Optional[tuple[Tensor, Tensor]]:
    """The previous, whole-array implementation."""
    if isinstance(adj, SparseTensor):
        (crow, col, value), size = adj.csr(), tuple(adj.sizes())
    elif isinstance(adj, Tensor) and adj.layout == torch.sparse_csr:
        crow, col, value, size = adj.crow_indices(), adj.col_indices(), adj.values(), tuple(adj.shape)
    else:
        return None
    n = int(num_nodes)
    if size != (n, n) or n == 0 or (value is not None and (value.dim() != 1 or not bool((value == 1).all()))):
        return None
    crow, col = crow.long(), col.long()
    counts = crow.diff()
    if crow.numel() != n + 1 or int(crow[0]) != 0 or int(crow[-1]) != col.numel() or bool((counts < 0).any()):
        return None
    if col.numel() == 0:
        return crow, col
    if int(col.min()) < 0 or int(col.max()) >= n:
        return None
    row = torch.repeat_interleave(torch.arange(n, device=col.device), counts)
    if not bool((torch.diff(row * n + col) > 0).all()) or bool((row == col).any()):
        return None
    if not torch.equal(torch.bincount(col, minlength=n), counts):
        return None
    index = torch.int32 if n <= torch.iinfo(torch.int32).max else torch.long
    r, c = row.to(index), col.to(index)
    order = torch.sort(c, stable=True).indices
    return (crow, col) if torch.equal(r.index_select(0, order), c) else None


def _csr(crow, col, n, value=None, dtype=torch.int64, col_dtype=None):
    value = torch.ones(col.numel()) if value is None else value
    return torch.sparse_csr_tensor(crow.to(dtype), col.to(col_dtype or dtype), value, (n, n),
                                   check_invariants=False)


def _graph(n: int, m: int, seed: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    pairs = torch.randint(n, (2, m), generator=g)
    ei = to_undirected(pairs[:, pairs[0] != pairs[1]], num_nodes=n)
    crow = torch.zeros(n + 1, dtype=torch.long)
    crow[1:] = torch.cumsum(torch.bincount(ei[0], minlength=n), 0)
    return crow, ei[1].contiguous()


def _agree(adj, n, block, native) -> bool:
    a, b = reference(adj, n), simple_undirected_csr(adj, n, block_entries=block, native=native)
    assert (a is None) == (b is None)
    if a is not None:
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and b[0].dtype == b[1].dtype == torch.long
    return a is not None


@pytest.mark.parametrize("native", FORMS)
def test_check_agrees_with_the_whole_array_check(native):
    rng = random.Random(0)
    seen = {True: 0, False: 0}
    for trial in range(120):
        n = rng.randint(2, 30)
        crow, col = _graph(n, rng.randint(0, 2 * n), trial)
        block = rng.choice([1, 2, 3, 7, 50, 1 << 24])
        for dtype in (torch.int32, torch.int64):
            seen[_agree(_csr(crow, col, n, dtype=dtype), n, block, native)] += 1
        if col.numel() < 3:
            continue
        dense = _csr(crow, col, n).to_dense()
        i, j = rng.randrange(n), rng.randrange(n)
        a, b, c = rng.sample(range(n), 3)
        for kind in range(4):
            e = dense.clone()
            if kind == 0:
                e[i, j] = 1 - e[i, j]  # one direction only, or a self-loop
            elif kind == 1:
                e[i, j] = 2.0 if e[i, j] else e[i, j]  # a weight
            elif kind == 2:
                e[i, i] = 1  # a self-loop
            else:  # a directed 3-cycle: in- and out-degrees still agree, not symmetric
                e[a, b] = e[b, a] = e[b, c] = e[c, b] = e[c, a] = e[a, c] = 0
                e[a, b] = e[b, c] = e[c, a] = 1
            seen[_agree(e.to_sparse_csr(), n, block, native)] += 1
        k = rng.randrange(1, col.numel())
        dup = col.clone()
        dup[k] = dup[k - 1]
        seen[_agree(_csr(crow, dup, n), n, block, native)] += 1
        swapped = col.clone()
        swapped[[0, 1]] = swapped[[1, 0]]
        seen[_agree(_csr(crow, swapped, n), n, block, native)] += 1
    assert seen[True] > 150 and seen[False] > 300  # both answers exercised


@pytest.mark.parametrize("native", FORMS)
def test_every_small_pattern(native):
    """Exhaustively, every 0/1 pattern on 3 nodes and, per pattern, its CSR arrays with mixed index
    widths: accepted exactly when the dense matrix is symmetric with a zero diagonal."""
    n = 3
    accepted = 0
    for code in range(1 << (n * n)):
        dense = torch.tensor([(code >> k) & 1 for k in range(n * n)], dtype=torch.float32).view(n, n)
        want = bool(torch.equal(dense, dense.t())) and not bool(dense.diagonal().any())
        crow = torch.zeros(n + 1, dtype=torch.long)
        crow[1:] = torch.cumsum((dense > 0).sum(1), 0)
        col = dense.nonzero()[:, 1]
        for dtypes in ((torch.int32, torch.int64), (torch.int64, torch.int32), (torch.int32, torch.int32)):
            got = simple_undirected_csr(_csr(crow, col, n, dtype=dtypes[0], col_dtype=dtypes[1]), n, native=native)
            assert (got is not None) == want, (code, dtypes)
        accepted += want
    assert accepted == 8  # the 2^3 simple graphs on 3 nodes


@pytest.mark.parametrize("native", FORMS)
@pytest.mark.parametrize("bad", [-1, 4, 1 << 40])
def test_out_of_range_columns_are_refused(native, bad):
    crow = torch.tensor([0, 1, 2, 2, 2])
    col = torch.tensor([1, 0])
    assert simple_undirected_csr(_csr(crow, col, 4), 4, native=native) is not None
    col[1] = bad
    assert simple_undirected_csr(_csr(crow, col, 4), 4, native=native) is None


def test_forcing_the_missing_extension_raises(monkeypatch):
    monkeypatch.setattr(adjacency, "_native_check", None)
    crow, col = _graph(6, 8, 0)
    with pytest.raises(RuntimeError, match="not built"):
        simple_undirected_csr(_csr(crow, col, 6), 6, native=True)
    assert simple_undirected_csr(_csr(crow, col, 6), 6) is not None  # the default falls back
