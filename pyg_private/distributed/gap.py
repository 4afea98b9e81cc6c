r"""GAP's aggregation perturbation released across processes, one block of rows per process."""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.typing import Adj

from ..nn._call_checks import reject_grad_input
from ..nn._grid_gaussian import add_grid_gaussian_
from ..nn.gap_aggregation import GAPAggregation
from ..utils.csr_product import CsrProduct, unit_values
from ._comm import GroupInfo, Layout, all_gather_rows
from ._release import RowPartitionedRelease
from .halo import plan_exchange
from .partition import block_csr

__all__ = ["DistributedGAPAggregation"]


class DistributedGAPAggregation(RowPartitionedRelease):
    r"""A configured :class:`~pyg_private.nn.GAPAggregation` (the aggregation perturbation of GAP,
    `Sajadmanesh et al., USENIX Security 2023 <https://arxiv.org/abs/2203.00949>`_) run across the
    processes of a ``torch.distributed`` group, each holding a contiguous block of nodes
    :math:`[s, e)`:

    .. math::
        \mathbf{X}^{(k)}_{[s,e)} = \mathrm{normalize}\big(\mathbf{A}_{[s,e),:}\mathbf{X}^{(k-1)}
            + \mathbf{Z}^{(k)}_{[s,e)}\big), \qquad k = 1, \dots, K,

    returning this process's rows of :math:`[\mathbf{X}^{(0)} \,\|\, \cdots \,\|\, \mathbf{X}^{(K)}]`.
    Before each hop the processes exchange the previous one: all of it (``exchange="all_gather"``,
    :math:`N \times F` values received per hop and process) or only each block's halo, the rows its
    columns name (``"halo"``; ``"auto"``, the default, decides as
    :class:`~pyg_private.distributed.DistributedContractiveGraphLayer` does). Either way the sums
    are the same, bit for bit.

    The release is the single-process one: the same sum aggregation, the same grid (planned from the
    public :math:`N` and :math:`F`, so ``granularity`` equals the single-process layer's) and the same
    noise std :math:`\sigma\Delta'`; each process draws the noise of its own rows from its own stream
    (a ChaCha20 stream keyed from the OS, with or without ``secure_mode``; with a seeded ``generator`` the
    ``rank``-th of ``world`` spawned streams, reproducible and **voiding the guarantee**). The
    :math:`\mu = \sqrt{K}/\sigma` GDP event is registered once, by the accountant of the group's rank 0,
    before any process draws noise; a refusal is raised on every process and nothing is released.
    Inputs are checked on every process alike before the charge (see
    :class:`~pyg_private.distributed.DistributedContractiveGraphLayer` for the checks and the
    exchange). Not cached: every call is a new, charged release.

    Args:
        layer (GAPAggregation): the configured layer, built alike on every process (the accountant only
            on rank 0).
        group (ProcessGroup, optional): the processes of the release (default: the default group).
        exchange (str, optional): ``"auto"``, ``"all_gather"`` or ``"halo"`` (every process must pass
            the same). The halo's message sizes reveal how many edges cross the blocks to whoever
            watches the network: ``"all_gather"`` on networks you do not trust (see
            :mod:`~pyg_private.distributed.halo`). (default: ``"auto"``)

    Shapes:
        - **input:** ``x`` :math:`(e - s, F)`, ``edge_index`` of the block's rows (global ids) or a sparse
          block :math:`(e - s, N)`; ``row_range=(s, e)``, ``num_nodes=N``
        - **output:** :math:`(e - s, (K + 1) F)`
    """

    _layer_type = GAPAggregation

    def __init__(self, layer: GAPAggregation, *, group: Any = None, exchange: str = "auto") -> None:
        super().__init__(layer, group=group, exchange=exchange)

    @torch.compiler.disable
    def forward(self, x: Tensor, edge_index: Adj, *, row_range: tuple[int, int], num_nodes: int) -> Tensor:
        """Return this process's rows of all hops concatenated, ``[e - s, (K + 1) F]`` (detached, input dtype)."""
        info = self._group(x)
        error, n, block = None, None, None
        try:
            n, block = self._common_checks(info, x, row_range, num_nodes)
            reject_grad_input(type(self).__name__, x, self.training)
            if not bool(torch.isfinite(x).all()):
                raise ValueError("`x` contains NaN or infinite values")
        except (ValueError, TypeError) as exc:
            error = exc
        layout = self._public_inputs(info, error, block, n, x)
        crow, col = self._graph(info, layout, edge_index, block, n)

        grid = self._plan_and_charge(info, n, x.size(1))
        out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        with torch.no_grad():
            return self._hops(info, layout, n, crow, col, x.detach().to(torch.float64), grid, out_dtype)

    def _hops(self, info: GroupInfo, layout: Layout, n: int, crow: Tensor, col: Tensor, x: Tensor,
              grid: Optional[tuple[float, float]], out_dtype: torch.dtype = torch.float64) -> Tensor:
        """This process's rows of every hop, each cast to ``out_dtype`` as it is written into one
        ``[e - s, (K + 1) F]`` output; one gather buffer and one product buffer reused by every hop."""
        layer: GAPAggregation = self.layer
        halo = plan_exchange(self.exchange, col, layout, info, layout.ranges[info.rank], n)
        if halo is None:
            adj = block_csr(crow, col, unit_values(col.numel(), device=x.device), n)  # ones never stored
        else:  # the columns renumbered to rows of the received halo: the same sums
            adj = block_csr(crow, halo.col, unit_values(col.numel(), device=x.device), halo.size)
        std = layer.noise_multiplier * layer.sensitivity
        source, generator = self._streams(info, x.device, std, grid)
        f = x.size(1)
        out = torch.empty(x.size(0), (layer.K + 1) * f, dtype=out_dtype, device=x.device)
        prev = F.normalize(x, dim=-1)
        del x
        out[:, :f] = prev
        rows = halo.size if halo is not None else info.world * layout.width
        buffer = torch.empty((rows, f), dtype=torch.float64, device=info.device)
        product = torch.empty_like(prev)
        neighbours = CsrProduct(adj, unit_values=True)  # the C kernel where it runs, the same sums otherwise
        for k in range(1, layer.K + 1):
            # every row of the previous hop, or only those this block references
            full = all_gather_rows(prev, layout, info, buffer) if halo is None else halo(prev, out=buffer)
            del prev
            h = neighbours(full, out=product)  # A prev, this process's rows
            del full
            if grid is not None:  # safe: the rounded sum plus exact rounded Gaussian noise
                h = add_grid_gaussian_(h, layer.noise_multiplier * grid[1], grid[0], source)
            elif generator is not None:
                h = h + std * torch.randn(h.shape, dtype=h.dtype, device=h.device, generator=generator)
            prev = F.normalize(h, dim=-1)
            out[:, k * f:(k + 1) * f] = prev
        return out

    def __repr__(self) -> str:
        extra = self.extra_repr()
        return f"{type(self).__name__}({self.layer!r}{', ' + extra if extra else ''})"
