r"""Halo exchange: each process receives only the rows of the previous hop that its block of the
adjacency references, instead of the whole matrix.

A process holding rows :math:`[s, e)` of :math:`\mathbf{A}` needs, for :math:`\mathbf{A}_{[s,e),:}\mathbf{H}`,
only the rows of :math:`\mathbf{H}` whose ids appear among its columns (its *halo*, its own rows
included). The plan is made once per release from the block's column ids: the sorted distinct
columns, grouped by the rank that owns them, are requested from their owners (two
``all_to_all_single`` calls); every hop is then one ``all_to_all_single`` in which each process
sends each other process the rows it asked for. The block's columns are renumbered to positions in
the received buffer, so the product sums the same values in the same order as the product over the
all-gathered matrix: the result is the same, bit for bit.

On a graph whose blocks are communities (a METIS partition, a spatial or temporal order) the halo
is a small part of :math:`N` and each process receives and holds that much instead of
:math:`N \times F` values per hop; on a random graph nearly every row is referenced and the
all-gather (one collective, no index work) is the better choice. :func:`plan_exchange` decides
from the halo sizes (one all-reduce), alike on every process; the distinct columns come from a
mask over the nodes, without a sort of the entries.

**What the network sees.** The halo's plan and per-hop messages are sized by the private graph:
how many rows process ``a`` requests from process ``b`` is the number of distinct nodes of ``b``'s
block adjacent to ``a``'s block, so an observer of the traffic (gloo sends it unencrypted) learns
how many edges cross each pair of blocks, and how that changes between two neighbouring graphs. The
noise protects the released values, not these message sizes. The all-gather sends the same
``N x F`` values whatever the edges are: on a network you do not trust (or without encryption
between the machines), pass ``exchange="all_gather"``; ``"auto"`` reveals the same counts through
its decision as well.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ._comm import GroupInfo, Layout

__all__ = ["HaloExchange", "plan_exchange", "needed_rows", "check_exchange", "EXCHANGES"]

#: the accepted ``exchange=`` settings of the row-partitioned wrappers
EXCHANGES = ("auto", "all_gather", "halo")
#: ``exchange="auto"`` takes the halo when no process needs more than this fraction of the rows (its own
#: included: with two processes a block alone is half of them)
_HALO_FRACTION = 0.75


class HaloExchange:
    """The halo plan of one process's CSR block (a collective: every process of the group builds its
    own plan in the same call).

    Args:
        col (Tensor): the block's column ids (global, ``[0, N)``), in CSR order.
        layout (Layout): every rank's rows.
        info (GroupInfo): the process group.
        row_range (tuple): this process's rows ``[s, e)``.
        needed (Tensor, optional): the sorted distinct ids of ``col`` (:func:`needed_rows`), when
            the caller has them.

    Attributes:
        col (Tensor): the block's columns renumbered to rows of :meth:`__call__`'s output (the dtype
            of ``col``).
        size (int): the number of rows this process receives per exchange (its halo, own rows
            included).
    """

    def __init__(self, col: Tensor, layout: Layout, info: GroupInfo, row_range: tuple[int, int],
                 needed: Optional[Tensor] = None) -> None:
        import torch.distributed as dist

        self.info = info
        if needed is None:
            needed = needed_rows(col, layout.num_rows)
        owner = layout.owner(needed)
        order = torch.sort(owner, stable=True).indices  # grouped by owner rank, sorted ids within a group
        requests = needed.index_select(0, order)
        self.recv_counts = torch.bincount(owner, minlength=info.world)  # rows this process receives from each rank
        send_counts = torch.empty_like(self.recv_counts, device=info.device)
        dist.all_to_all_single(send_counts, self.recv_counts.to(info.device), group=info.group)
        self.send_counts = send_counts.cpu()
        incoming = torch.empty(int(self.send_counts.sum()), dtype=torch.long, device=info.device)
        dist.all_to_all_single(incoming, requests.to(info.device), output_split_sizes=self.send_counts.tolist(),
                               input_split_sizes=self.recv_counts.tolist(), group=info.group)
        self.send_rows = incoming.to(col.device) - row_range[0]  # this process's rows each other process asked for
        # global id -> row of the received buffer, for the ids this block names (a dense map: no sort of the entries)
        position = torch.empty(layout.num_rows, dtype=col.dtype, device=col.device)
        position[requests] = torch.arange(requests.numel(), dtype=col.dtype, device=col.device)
        self.col = position[col]
        self.size = int(needed.numel())

    def __call__(self, local: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """The halo rows of the matrix whose rows ``[s, e)`` are this process's ``local``: row ``i``
        of the result is the row ``self.col`` numbers ``i`` (into ``out``, ``[size, ...]`` on the
        communication device, when given)."""
        import torch.distributed as dist

        info = self.info
        send = local.to(info.device).index_select(0, self.send_rows.to(info.device))
        shape = (self.size, *local.shape[1:])
        if out is None or tuple(out.shape) != shape or out.dtype != local.dtype:
            out = torch.empty(shape, dtype=local.dtype, device=info.device)
        dist.all_to_all_single(out, send, output_split_sizes=self.recv_counts.tolist(),
                               input_split_sizes=self.send_counts.tolist(), group=info.group)
        return out.to(local.device)


def needed_rows(col: Tensor, num_nodes: int) -> Tensor:
    """The sorted distinct ids among ``col`` (``[0, num_nodes)``): one pass over the entries and one
    over the nodes (a mask), no sort."""
    mask = torch.zeros(int(num_nodes), dtype=torch.bool, device=col.device)
    mask[col] = True
    return mask.nonzero().squeeze(1)


def plan_exchange(exchange: str, col: Tensor, layout: Layout, info: GroupInfo, row_range: tuple[int, int],
                  num_nodes: int) -> Optional[HaloExchange]:
    """The halo plan a release uses, or ``None`` for the all-gather: ``exchange="all_gather"`` plans
    nothing; ``"halo"`` always plans; ``"auto"`` first all-reduces the largest halo size (one
    collective, the same answer on every process) and plans only when no process needs more than
    three quarters of the rows."""
    if exchange == "all_gather":
        return None
    needed = needed_rows(col, num_nodes)
    if exchange == "auto":
        import torch.distributed as dist

        largest = torch.tensor([needed.numel()], dtype=torch.long, device=info.device)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=info.group)
        if int(largest) > _HALO_FRACTION * num_nodes:
            return None
    return HaloExchange(col, layout, info, row_range, needed)


def check_exchange(exchange: object) -> str:
    if exchange not in EXCHANGES:
        raise ValueError(f"`exchange` must be one of {', '.join(map(repr, EXCHANGES))}; got {exchange!r}")
    return str(exchange)
