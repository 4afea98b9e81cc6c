"""Private releases across processes with ``torch.distributed``: each process holds a contiguous
block of nodes (its rows of the adjacency and of the features), draws the noise of its own rows from
its own stream, and the group's rank 0 charges the one accountant before any noise is drawn. GCON's
deterministic APPR propagation runs across the same blocks (:func:`distributed_appr_propagate`).

Works with the ``gloo`` backend on CPU and with ``nccl`` on GPUs (inputs on each process's GPU).
"""
from .appr import distributed_appr_propagate
from .contractive import DistributedContractiveGraphLayer
from .gap import DistributedGAPAggregation
from .noisy_ppr import DistributedNoisyPPRDiffusion
from .partition import check_partition, even_row_ranges, row_block
from .root_release import release_on_root

__all__ = [
    # layers
    "DistributedContractiveGraphLayer",
    "DistributedGAPAggregation",
    "DistributedNoisyPPRDiffusion",
    # propagations
    "distributed_appr_propagate",
    # one release per job (rank 0 releases, every process receives it)
    "release_on_root",
    # partitions
    "even_row_ranges",
    "row_block",
    "check_partition",
]
