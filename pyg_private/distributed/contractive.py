r"""CARIBOU's contractive graph layer released across processes, one block of rows per process."""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.typing import Adj

from ..nn._call_checks import reject_grad_input
from ..nn._grid_gaussian import add_grid_gaussian_
from ..nn.contractive_graph_layer import ContractiveGraphLayer, _all_finite, _clip_rows
from ..utils.csr_product import CsrProduct
from ..utils.degree_bounds import check_declared_bounds, present_nodes
from ._comm import GroupInfo, Layout, agree
from ._release import RowPartitionedRelease
from .halo import plan_exchange
from .partition import block_csr

__all__ = ["DistributedContractiveGraphLayer"]


class DistributedContractiveGraphLayer(RowPartitionedRelease):
    r"""A configured :class:`~pyg_private.nn.ContractiveGraphLayer` (perturbed contractive message
    passing of CARIBOU, `Zheng et al. 2025 <https://arxiv.org/abs/2506.22727>`_, Eq. 4 and
    Algorithm 1) run across the processes of a ``torch.distributed`` group, each holding a
    contiguous block of nodes :math:`[s, e)`:

    .. math::
        \mathbf{X}^{(k+1)}_{[s,e)} = \Pi\Big(C_L\big(\alpha_1 \hat{\mathbf{A}}_{[s,e),:} \mathbf{X}^{(k)}
            + (1 - \alpha_1)\,\mathrm{Mean}(\mathbf{X}^{(k)})\big) + \beta\,\mathbf{X}^{(0)}_{[s,e)}
            + \mathbf{Z}^{(k)}_{[s,e)}\Big).

    Every process computes its rows of each hop from its rows of the normalised adjacency and the
    rows of the previous hop they reference. ``exchange="all_gather"``: the processes all-gather
    the **whole** previous hop (each receives :math:`N \times F` values per hop; the mean is taken
    over the gathered rows). ``exchange="halo"``: each process receives only its block's *halo*,
    the rows its columns name (:mod:`~pyg_private.distributed.halo`: one ``all_to_all_single`` per
    hop, the product over them bit-identical to the product over the gathered matrix), and the mean
    is all-reduced (float64 sums). ``"auto"`` (the default) takes the halo when no process needs
    more than three quarters of the rows: on a well-partitioned graph (communities, a METIS
    partition) the halo is a small part of :math:`N`; on a random graph it is nearly all of it.
    Only :math:`\mathbf{X}^{(K)}` leaves the layer, as each process's rows.

    **The same release as one process.** The hop, its projection, the grid and the noise std are the
    wrapped layer's: the grid is planned from the public :math:`N`, :math:`F` and bounds (so
    ``granularity`` equals the single-process layer's), and with ``noise_multiplier=0`` the output
    equals the single-process output to float rounding. Each process draws the noise of its own rows
    only, from its own stream (a ChaCha20 stream keyed from the OS, with or without ``secure_mode``;
    see :mod:`pyg_private.sampling.words.sources`); the noise is then i.i.d. over all :math:`N \times F` entries, as in one process, and the
    released :math:`\mathbf{X}^{(K)}` has the single-process distribution. The processes form one
    curator: the values they exchange (degrees, intermediate hops) never leave the group, and the
    guarantee (:math:`\mu = \sqrt{\rho_K}/\sigma`, Theorem 6 / Cor. 10) covers the released rows only.
    With a seeded ``generator`` on the layer, process ``r`` draws from the ``r``-th of ``world``
    streams spawned from it (reproducible, distinct per process even when every process seeds
    alike); a known seed **voids the guarantee**. ``sampler="float"`` (benchmarks only) draws from a
    per-process generator, seeded from the OS or derived from the layer's ``generator`` in the same way.

    **One accountant, one charge.** The wrapped layer of the group's rank 0 holds the accountant; the
    other processes' layers must have none (``accountant=acct if rank == 0 else None``). After the
    inputs are checked, rank 0 registers the layer's event (the one the single-process layer registers
    for the same public sizes) **before any process draws noise** and broadcasts the outcome: a
    refusal (:class:`~pyg_private.PrivacyBudgetExceeded`) is raised on every process and nothing is
    released anywhere.

    **Checked before any charge, on every process alike.** The processes first gather their public
    inputs: a bad local input (``x`` with NaN, a row outside the block, a self-loop, ...) on any
    process, row ranges that do not tile :math:`[0, N)` exactly once, different ``num_nodes``, feature
    widths, dtypes or privacy settings raise the same ``ValueError``/``TypeError`` on every process.
    Then the graph: each process sends every edge :math:`(u, v)` of its rows to the owner of
    :math:`v`, which must hold :math:`(v, u)` (``symmetrize=True`` adds it instead), and the degrees
    are all-gathered to check the declared bounds exactly as the single-process layer does. An
    uninitialised process group raises a ``RuntimeError``. The release is not cached: every call is a
    new, charged release (keep its output; CARIBOU computes the aggregation once). One graph per
    call: ``batch`` is not supported.

    Args:
        layer (ContractiveGraphLayer): the configured layer, built alike on every process.
        group (ProcessGroup, optional): the processes of the release (default: the default group).
        exchange (str, optional): how each hop receives the previous one: ``"auto"``,
            ``"all_gather"`` or ``"halo"`` (see above; every process must pass the same). The halo's
            message sizes reveal how many edges cross the blocks to whoever watches the network:
            ``"all_gather"`` on networks you do not trust (see :mod:`~pyg_private.distributed.halo`).
            (default: ``"auto"``)

    Shapes:
        - **input:** ``x`` :math:`(e - s, F)` (this process's rows), ``edge_index`` :math:`(2, |\mathcal{E}_{[s,e)}|)`
          (the edges whose row ``edge_index[0]`` lies in the block, global ids; see
          :func:`~pyg_private.distributed.row_block`) or a sparse block :math:`(e - s, N)`, optional
          ``x0`` :math:`(e - s, F)`; ``row_range=(s, e)`` and ``num_nodes=N`` keyword arguments
        - **output:** :math:`(e - s, F)`, this process's rows of :math:`\mathbf{X}^{(K)}`
    """

    _layer_type = ContractiveGraphLayer

    def __init__(self, layer: ContractiveGraphLayer, *, group: Any = None, exchange: str = "auto") -> None:
        super().__init__(layer, group=group, exchange=exchange)

    @torch.compiler.disable
    def forward(self, x: Tensor, edge_index: Adj, x0: Optional[Tensor] = None, *, row_range: tuple[int, int],
                num_nodes: int) -> Tensor:
        """Run the K perturbed hops across the group; return this process's rows of
        :math:`\\mathbf{X}^{(K)}` (detached, input dtype)."""
        info = self._group(x)
        error, n, block = None, None, None
        try:  # this process's own checks; agreed on below
            n, block = self._common_checks(info, x, row_range, num_nodes)
            reject_grad_input(type(self).__name__, x, self.training)
            reject_grad_input(type(self).__name__, x0, self.training)
            if not _all_finite(x):
                raise ValueError("`x` contains NaN or infinite values")
            if x0 is not None:
                if not isinstance(x0, Tensor) or x0.shape != x.shape:
                    raise ValueError(f"`x0` must have the shape of the local `x`, {tuple(x.shape)}")
                if not _all_finite(x0):
                    raise ValueError("`x0` contains NaN or infinite values")
        except (ValueError, TypeError) as exc:
            error = exc
        layout = self._public_inputs(info, error, block, n, x)
        x0 = x if x0 is None else x0
        crow, col = self._graph(info, layout, edge_index, block, n)
        degree = self._check_bounds(info, layout, crow, x, x0)

        grid = self._plan_and_charge(info, n, x.size(1))
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float64
        out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        with torch.no_grad():
            h0 = x.detach().to(dtype)
            start = h0 if x0 is x else x0.detach().to(dtype)
            out = self._hops(info, layout, block, n, crow, col, degree, h0, start, grid)
        return out.to(out_dtype)

    def _check_bounds(self, info: GroupInfo, layout: Layout, crow: Tensor, x: Tensor, x0: Tensor) -> Tensor:
        """The single-process layer's check of the declared bounds, on the gathered degrees (returned)."""
        layer: ContractiveGraphLayer = self.layer
        degree = crow.diff()
        present = present_nodes(degree, x, None if x0 is x else x0) if layer.level == "node" else torch.ones_like(
            degree, dtype=torch.bool)
        gathered = self._gather(info, layout, torch.stack([degree, present.long()], dim=1))
        error = None
        try:
            check_declared_bounds(gathered[:, 0], level=layer.level, min_degree=layer.min_degree,
                                  degree_floor=layer.degree_floor, max_degree=layer.max_degree,
                                  num_nodes=layer.num_nodes,
                                  present=gathered[:, 1].bool() if layer.level == "node" else None)
        except (ValueError, TypeError) as exc:
            error = exc
        agree(error, info)
        return gathered[:, 0]

    def _block_adjacency(self, block: tuple[int, int], n: int, crow: Tensor, col: Tensor, degree: Tensor,
                         dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        r"""This process's rows of :math:`C_L\alpha_1\hat{\mathbf{A}}` as ``(adj, self_loop)``, the
        single-process layer's ``_normalized_adjacency`` restricted to the block (global degrees)."""
        layer: ContractiveGraphLayer = self.layer
        weight = layer.contraction * layer.alpha1
        if layer.degree_floor and layer.min_degree > 0:
            degree = degree.clamp_min(layer.min_degree)
        s = (degree + 1).to(dtype).rsqrt()
        s_block = s[block[0]:block[1]]
        values = s_block.repeat_interleave(crow.diff()).mul_(s[col]).mul_(weight)
        return block_csr(crow, col, values, n), s_block.square().mul_(weight).unsqueeze(-1)

    def _hops(self, info: GroupInfo, layout: Layout, block: tuple[int, int], n: int, crow: Tensor, col: Tensor,
              degree: Tensor, x: Tensor, x0: Tensor, grid: Optional[tuple[float, float]]) -> Tensor:
        layer: ContractiveGraphLayer = self.layer
        adj, self_loop = self._block_adjacency(block, n, crow, col, degree, x.dtype)
        halo = plan_exchange(self.exchange, col, layout, info, block, n)
        if halo is not None:  # the same values, the columns renumbered to rows of the received halo
            adj = block_csr(crow, halo.col, adj.values(), halo.size)
        h = _clip_rows(x)  # the chain starts inside the ball
        residual = layer.beta * (h if x0 is x else _clip_rows(x0)) if layer.beta > 0 else None
        std = layer.noise_std
        source, generator = self._streams(info, x.device, std, grid)
        project = (lambda v: _clip_rows(v, out=v, slack_dtype=x.dtype))  # noqa: E731
        product = CsrProduct(adj)  # the C kernel where it runs, the same values otherwise (the single process's)
        received = None
        for _ in range(layer.K):
            if halo is None:
                full = received = self._gather(info, layout, h)
                mean = full.mean(dim=0, keepdim=True) if layer.alpha1 < 1.0 else None
            else:  # the rows of h this block references (none needed without the neighbour term)
                received = halo(h, out=received) if layer.alpha1 > 0 else None
                mean = _global_mean(h, info, n) if layer.alpha1 < 1.0 else None
            if layer.alpha1 > 0:
                out = product(received).addcmul_(h, self_loop)
            else:
                out = torch.zeros_like(h)
            if mean is not None:
                out.add_(mean.expand_as(out), alpha=layer.contraction * (1.0 - layer.alpha1))
            if residual is not None:
                out.add_(residual)
            if halo is None:
                del full
                received = None
            if grid is not None:  # safe: on the grid, exact noise, projected in float64 row blocks
                h = add_grid_gaussian_(out, layer.noise_multiplier * grid[1], grid[0], source, post=project)
                continue
            if generator is not None:
                out.add_(torch.randn(out.shape, dtype=out.dtype, device=out.device, generator=generator), alpha=std)
            h = _clip_rows(out, out=out)
        return h

    def __repr__(self) -> str:
        extra = self.extra_repr()
        return f"{type(self).__name__}({self.layer!r}{', ' + extra if extra else ''})"


def _global_mean(local: Tensor, info: GroupInfo, num_nodes: int) -> Tensor:
    """The mean of every process's rows (``[1, F]``, ``local``'s dtype): the rows summed in float64,
    the sums all-reduced, divided by ``num_nodes`` (equal to the mean of the gathered rows up to
    rounding)."""
    import torch.distributed as dist

    total = local.sum(dim=0, keepdim=True, dtype=torch.float64).to(info.device)
    dist.all_reduce(total, group=info.group)
    return total.div_(num_nodes).to(device=local.device, dtype=local.dtype)
