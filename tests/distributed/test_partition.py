"""Row partitions and the checks that need no second process."""
from __future__ import annotations

import pytest
import torch

from pyg_private.distributed import (DistributedContractiveGraphLayer, DistributedGAPAggregation, check_partition,
                                    even_row_ranges, row_block)
from pyg_private.nn import ContractiveGraphLayer, GAPAggregation


def test_even_row_ranges_tile_the_nodes():
    assert even_row_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert even_row_ranges(2, 3) == [(0, 1), (1, 2), (2, 2)]
    check_partition(even_row_ranges(10, 3), 10)
    with pytest.raises(ValueError, match="`world_size` must be >= 1"):
        even_row_ranges(10, 0)


@pytest.mark.parametrize("ranges,message", [
    ([(0, 5), (4, 10)], r"nodes \[4, 5\) belong to more than one process"),
    ([(0, 4), (5, 10)], r"nodes \[4, 5\) belong to no process"),
    ([(0, 4), (4, 9)], r"nodes \[9, 10\) belong to no process"),
    ([(0, 10), (0, 10)], "more than one process"),
])
def test_check_partition_names_the_uncovered_or_doubled_nodes(ranges, message):
    with pytest.raises(ValueError, match=message):
        check_partition(ranges, 10)


def test_check_partition_accepts_any_rank_order_and_empty_blocks():
    check_partition([(6, 10), (0, 6), (10, 10)], 10)


def test_row_block_keeps_the_rows_of_the_block_with_global_ids():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    assert row_block(ei, (1, 3)).tolist() == [[1, 1, 2, 2], [0, 2, 1, 3]]


def test_uninitialised_process_group_raises_before_anything():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # pragma: no cover - a test runner with a group
        pytest.skip("a process group is initialised in this process")
    layer = DistributedContractiveGraphLayer(ContractiveGraphLayer(2, 0.9, min_degree=0, noise_multiplier=0.0))
    ei = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(RuntimeError, match="process group is not initialised"):
        layer(torch.zeros(2, 3), ei, row_range=(0, 2), num_nodes=2)


def test_wrappers_take_their_own_layer_type_and_show_it():
    gap = GAPAggregation(2, noise_multiplier=1.0)
    with pytest.raises(TypeError, match="wraps a configured ContractiveGraphLayer; got GAPAggregation"):
        DistributedContractiveGraphLayer(gap)
    assert repr(DistributedGAPAggregation(gap)) == (
        "DistributedGAPAggregation(GAPAggregation(K=2, noise_multiplier=1, unit='edge', sampler='safe', "
        "cached=True), exchange='auto')")


def test_layout_finds_owners_and_gather_order_with_empty_blocks_and_any_rank_order():
    from pyg_private.distributed._comm import Layout

    layout = Layout([(150, 300), (150, 150), (0, 150)])
    assert layout.owner(torch.tensor([0, 149, 150, 299])).tolist() == [2, 2, 0, 0]
    index = layout.index(torch.device("cpu"))  # rank 2's padded block (rows 300..449) first, then rank 0's
    assert index.tolist() == list(range(300, 450)) + list(range(0, 150))
    assert Layout([(0, 300), (0, 0)]).owner(torch.tensor([0, 299])).tolist() == [0, 0]
