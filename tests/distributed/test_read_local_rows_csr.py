"""`read_local_rows` on a CSR row block reads its own arrays (no coalesced COO copy) and gives the
keys of the edge_index path; unsorted, duplicate, weighted and out-of-range blocks are handled as
before (sorted, refused or dropped)."""
import warnings

import pytest
import torch
from torch_geometric.utils import to_undirected

from pyg_private.distributed import row_block
from pyg_private.distributed.partition import read_local_rows


def _csr(crow, col, values, shape):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(torch.tensor(crow), torch.tensor(col), torch.tensor(values), shape)


@pytest.mark.parametrize("idt", [torch.int32, torch.int64])
def test_csr_block_equals_edge_index(idt):
    n = 300
    ei = to_undirected(torch.randint(0, n, (2, 2000), generator=torch.Generator().manual_seed(0)), num_nodes=n)
    ei = ei[:, ei[0] != ei[1]]
    start, end = 120, 230
    block = row_block(ei, (start, end))
    want = read_local_rows(block, (start, end), n)
    local = block.clone()
    local[0] -= start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csr = torch.sparse_coo_tensor(local, torch.ones(local.size(1)), (end - start, n)).coalesce().to_sparse_csr()
        csr = torch.sparse_csr_tensor(csr.crow_indices().to(idt), csr.col_indices().to(idt), csr.values(), csr.shape)
    assert torch.equal(read_local_rows(csr, (start, end), n), want)


def test_unsorted_columns_are_sorted():
    adj = _csr([0, 2, 3], [5, 1, 0], [1.0, 1.0, 1.0], (2, 6))
    keys = read_local_rows(adj, (3, 5), 6)
    assert keys.tolist() == [3 * 6 + 1, 3 * 6 + 5, 4 * 6 + 0]


def test_duplicates_refused_or_dropped():
    adj = _csr([0, 2, 3], [1, 1, 0], [1.0, 1.0, 1.0], (2, 6))
    with pytest.raises(ValueError, match="duplicate"):
        read_local_rows(adj, (3, 5), 6)
    assert read_local_rows(adj, (3, 5), 6, symmetrize=True).tolist() == [3 * 6 + 1, 4 * 6 + 0]


@pytest.mark.parametrize("crow, col, values, shape, match", [
    ([0, 1, 2], [1, 0], [2.0, 1.0], (2, 6), "unweighted"),
    ([0, 1, 2], [1, 7], [1.0, 1.0], (2, 6), "outside"),
    ([0, 1, 2], [1, 0], [1.0, 1.0], (2, 8), "block of rows"),
    ([0, 1, 2, 2], [1, 0], [1.0, 1.0], (3, 6), "block of rows"),
    ([0, 1, 2], [3, 0], [1.0, 1.0], (2, 6), "self-loops"),
])
def test_bad_blocks_refused(crow, col, values, shape, match):
    with pytest.raises(ValueError, match=match):
        read_local_rows(_csr(crow, col, values, shape), (3, 5), 6)


@pytest.mark.parametrize("world", [1, 3, 8, 9, 20])
def test_grouping_by_destination_is_a_stable_sort(world):
    from pyg_private.distributed.partition import _group_by_destination
    gen = torch.Generator().manual_seed(world)
    keys = torch.randint(0, 10**9, (5000,), generator=gen)
    dest = torch.randint(0, world, (5000,), generator=gen)
    counts = torch.bincount(dest, minlength=world)
    want = keys.index_select(0, torch.sort(dest, stable=True).indices)
    assert torch.equal(_group_by_destination(keys, dest, counts), want)
