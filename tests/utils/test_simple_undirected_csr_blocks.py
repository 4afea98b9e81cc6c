"""The blocked canonical-CSR check (``simple_undirected_csr``) against the whole-array version it
replaced (kept verbatim below as the reference): the same answer on random graphs and on
corrupted ones (one-way edges, directed 3-cycles with equal in- and out-degrees, self-loops,
weights, duplicate or unsorted columns), for blocks of 1, 2, 3, 7 and 50 entries and one block,
with int32 and int64 indices."""
from __future__ import annotations

import random
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.typing import SparseTensor
from torch_geometric.utils import to_undirected

from pyg_private.utils.adjacency import simple_undirected_csr


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


def _csr(crow, col, n, value=None, dtype=torch.int64):
    value = torch.ones(col.numel()) if value is None else value
    return torch.sparse_csr_tensor(crow.to(dtype), col.to(dtype), value, (n, n))


def _graph(n: int, m: int, seed: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    pairs = torch.randint(n, (2, m), generator=g)
    ei = to_undirected(pairs[:, pairs[0] != pairs[1]], num_nodes=n)
    crow = torch.zeros(n + 1, dtype=torch.long)
    crow[1:] = torch.cumsum(torch.bincount(ei[0], minlength=n), 0)
    return crow, ei[1].contiguous()


def _agree(adj, n, block) -> bool:
    a, b = reference(adj, n), simple_undirected_csr(adj, n, block_entries=block)
    assert (a is None) == (b is None)
    if a is not None:
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and b[0].dtype == b[1].dtype == torch.long
    return a is not None


def test_blocked_check_agrees_with_the_whole_array_check():
    rng = random.Random(0)
    seen = {True: 0, False: 0}
    for trial in range(120):
        n = rng.randint(2, 30)
        crow, col = _graph(n, rng.randint(0, 2 * n), trial)
        block = rng.choice([1, 2, 3, 7, 50, 1 << 24])
        for dtype in (torch.int32, torch.int64):
            seen[_agree(_csr(crow, col, n, dtype=dtype), n, block)] += 1
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
            seen[_agree(e.to_sparse_csr(), n, block)] += 1
        k = rng.randrange(1, col.numel())
        dup = col.clone()
        dup[k] = dup[k - 1]
        seen[_agree(_csr(crow, dup, n), n, block)] += 1
        swapped = col.clone()
        swapped[[0, 1]] = swapped[[1, 0]]
        seen[_agree(_csr(crow, swapped, n), n, block)] += 1
    assert seen[True] > 150 and seen[False] > 300  # both answers exercised
