r"""Edge-private PPR by noisy graph diffusion (Wei, Chien and Li, NeurIPS 2024) released across
processes, one block of node rows per process."""
from __future__ import annotations

import hashlib
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.typing import Adj

from ..mechanisms._noise import TwoLaplaceStream
from ..sampling import RoundedNoiseSampler
from ..sampling.words import RandomSource, resolve_secure_mode
from ..nn._call_checks import reject_edge_weight, reject_grad_input
from ..nn.noisy_ppr_diffusion import NoisyPPRDiffusion, PPRGrid
from ..utils.adjacency import inverse_degree
from ..utils.csr_product import CsrProduct, clamp_and_scale_rows, unit_values, with_int32_indices
from ..utils.lazy_ppr import check_seed_index
from ._comm import GroupInfo, Layout, all_gather_rows, require_group
from ._release import RowPartitionedRelease, check_num_nodes
from .halo import HaloExchange, plan_exchange
from .partition import block_csr, check_row_range

__all__ = ["DistributedNoisyPPRDiffusion"]


class DistributedNoisyPPRDiffusion(RowPartitionedRelease):
    r"""A configured :class:`~pyg_private.nn.NoisyPPRDiffusion` (the noisy lazy-PPR diffusion of
    `Wei, Chien and Li, "Differentially Private Graph Diffusion with Applications in Personalized
    PageRanks", NeurIPS 2024 <https://arxiv.org/abs/2407.00077>`_, Eq. 4 with the lazy walk of
    Eq. 11) run across the processes of a ``torch.distributed`` group, each holding a contiguous
    block of nodes :math:`[s, e)`. The columns (seeds or signals) are the same public set on every
    process. With ``sampler="safe"`` (the layer's default), grid :math:`g` and
    :math:`\mathbf{y}^{(0)} = \mathbf{s}`, process :math:`[s, e)` computes for
    :math:`k = 1, \dots, K`

    .. math::
        \mathbf{y}^{(k)}_{[s,e)} = g\Big(\mathrm{round}\Big(\tfrac{\beta}{2g}\big(f(\mathbf{y}^{(k-1)})_{[s,e)}
            + \mathbf{A}_{[s,e),:}\,\mathbf{D}^{-1} f(\mathbf{y}^{(k-1)})\big)
            + \tfrac{1-\beta}{g}\,\mathbf{s}_{[s,e)}\Big) + \mathbf{K}^{(k)}_{[s,e)}\Big),

    with :math:`\beta = 1 - \alpha`, the clip :math:`f(\mathbf{x})_i = \min(\max(x_i, 0), \eta d_i)`
    (the seed's own entry not clipped from above with ``personalized=True``) and
    :math:`\mathbf{K}^{(k)}` the sum of two :math:`\mathrm{Lap}(0, \sigma')` variables rounded to
    the grid, sampled exactly from integers, i.i.d. over entries and steps: the single-process
    layer's step (``sampler="float"``: the continuous :math:`\boldsymbol\xi_1 + \boldsymbol\xi_2` of
    Eq. 4, no rounding). Only :math:`\mathbf{y}^{(K)}` leaves, as each process's rows.

    **Exchanged per step.** The clip of row :math:`i` needs only :math:`d_i`, which the row's owner
    holds, so each process forms its rows of :math:`\mathbf{D}^{-1} f(\mathbf{y}^{(k-1)})` and the
    processes exchange them: all of them (``exchange="all_gather"``, one all-gather; :math:`N \times C`
    float64 values received per step and process, :math:`C` the number of columns) or only each
    block's halo, the rows its columns name (``"halo"``, one ``all_to_all_single``; ``"auto"``, the
    default, decides as :class:`~pyg_private.distributed.DistributedContractiveGraphLayer` does).
    The sums are the same either way. No degree is exchanged.

    **Output projection.** ``"simplex"`` and ``"l1_ball"`` project every column of
    :math:`\mathbf{y}^{(K)}` (post-processing), which needs the whole column: the threshold
    :math:`\theta` of the Euclidean projection onto the simplex, :math:`(v_i - \theta)_+` summing to 1,
    is found by Michelot's algorithm (Michelot 1986): :math:`\theta \leftarrow (\sum_{i \in S} v_i -
    1)/|S|`, :math:`S \leftarrow \{i \in S : v_i > \theta\}`, from :math:`S` all nodes until no
    column's :math:`S` shrinks, each round one all-reduce of :math:`2C` values (sums and counts).
    The final :math:`S` is the sort-based (Duchi et al. 2008) active set of the single-process
    projection, so :math:`\theta` equals its value up to the summation order; ``"l1_ball"`` first
    all-reduces the :math:`C` column norms to leave the columns inside the ball unchanged.

    **The same release as one process.** Without noise (``noise_scale=0``) the output equals the
    single-process output to float rounding (the same float64 operations in the same order, row by
    row). With noise, the grid and the Laplace scale :math:`\sigma'` are planned by the layer's own
    :meth:`~pyg_private.nn.NoisyPPRDiffusion.plan_grid` from the public :math:`N` and the largest
    public signal (all-gathered; 1 for seeds), so ``granularity`` and the per-entry noise law equal
    the single-process layer's. Each process draws the noise of its own rows only, from its own
    stream (a ChaCha20 stream keyed from the OS, with or without ``secure_mode``; with a seeded
    ``generator`` the ``rank``-th of ``world`` streams spawned from it, reproducible and **voiding the
    guarantee**; ``sampler="float"``: a per-process generator seeded from the OS or derived from the
    layer's ``generator``). The processes form one curator: the exchanged iterates never leave the
    group.

    **One accountant, one charge.** The layer's event (``layer.event(C, grid)``; in personalized mode
    with the largest number of columns any one seed receives) is registered once, by the accountant
    of the group's rank 0 (the other processes' layers must have none), **before any process draws
    noise**; a refusal (:class:`~pyg_private.PrivacyBudgetExceeded`) is raised on every process and
    nothing is released anywhere. The accountant's state after the release is the single-process
    layer's.

    **Checked before any charge, on every process alike.** Row ranges that do not tile
    :math:`[0, N)` exactly once, processes that disagree on ``num_nodes``, on the mode (signals or
    seeds), the number of columns, the ``seed_index`` (compared by SHA-256), the dtype of the signals
    or the layer's privacy settings, a bad local input (negative or non-finite signals, seeds outside
    :math:`[0, N)`, an edge outside the block, a self-loop), a graph directed across the processes
    and a refused grid plan raise the same ``ValueError``/``TypeError`` on every process; an
    uninitialised process group raises a ``RuntimeError``. The release is **not cached** (the layer's
    ``cached`` is not used): every call is a new, charged release. The layer's ``column_block``
    diffuses that many columns at a time (same release, one charge).

    Args:
        layer (NoisyPPRDiffusion): the configured layer, built alike on every process (the accountant
            only on rank 0).
        group (ProcessGroup, optional): the processes of the release (default: the default group).
        exchange (str, optional): ``"auto"``, ``"all_gather"`` or ``"halo"`` (every process must pass
            the same). The halo's message sizes reveal how many edges cross the blocks to whoever
            watches the network: ``"all_gather"`` on networks you do not trust (see
            :mod:`~pyg_private.distributed.halo`). (default: ``"auto"``)

    Shapes:
        - **input:** signals ``x`` :math:`(e - s, C)` (this process's rows; or :math:`(e - s)`), or
          ``seed_index`` :math:`(C,)` (global ids, the same on every process); ``edge_index`` of the
          block's rows (global ids, :func:`~pyg_private.distributed.row_block`) or a sparse block
          :math:`(e - s, N)`; ``row_range=(s, e)`` and ``num_nodes=N`` keyword arguments
        - **output:** :math:`(e - s, C)`, this process's rows of :math:`\mathbf{y}^{(K)}`
    """

    _layer_type = NoisyPPRDiffusion

    def __init__(self, layer: NoisyPPRDiffusion, *, group: Any = None, exchange: str = "auto") -> None:
        super().__init__(layer, group=group, exchange=exchange)

    def _settings(self) -> dict[str, Any]:
        layer: NoisyPPRDiffusion = self.layer
        try:
            secure = resolve_secure_mode(layer.secure_mode, layer.generator)
        except (ValueError, TypeError):  # already refused by the layer's constructor; keep it visible
            secure = repr(layer.secure_mode)
        return {"layer": type(layer).__name__, **layer._release_settings(), "orders": list(layer.orders),
                "symmetrize": bool(layer.symmetrize), "name": layer.name, "secure_mode": secure,
                "seeded": layer.generator is not None, "exchange": self.exchange}

    @torch.compiler.disable
    def forward(self, x: Optional[Tensor] = None, edge_index: Optional[Adj] = None,
                seed_index: Optional[Tensor] = None, *, row_range: tuple[int, int], num_nodes: int) -> Tensor:
        """Diffuse the public seeds or signals on the private graph across the group; return this
        process's rows of :math:`\\mathbf{y}^{(K)}`, ``[e - s, C]`` (detached; the signals' dtype, the
        default dtype for seeds)."""
        name = type(self).__name__
        device = x.device if isinstance(x, Tensor) else (
            edge_index.device if isinstance(edge_index, Tensor) else torch.device("cpu"))
        info = require_group(self.group, device, name)
        error, n, block, s0, seeds, max_signal = None, None, None, None, None, None
        mode, digest = None, None
        try:  # this process's own checks; agreed on below
            reject_edge_weight("NoisyPPRDiffusion", "seed_index", seed_index, "integer seed node ids")
            reject_grad_input(name, x, self.training)
            n = check_num_nodes(num_nodes)
            if (x is None) == (seed_index is None):
                raise ValueError("give exactly one of `x` (this process's rows of the signals) or `seed_index` "
                                 "(the global seeds, alike on every process)")
            if x is not None:
                mode = "signals"
                s0, max_signal = self._local_signals(x)
                block = check_row_range(row_range, n, s0.size(0))
            else:
                mode = "seeds"
                block = check_row_range(row_range, n, _declared_rows(row_range))
                seeds = check_seed_index(seed_index, n, device=device)
                digest = hashlib.sha256(seeds.cpu().numpy().tobytes()).hexdigest()
            self._check_accountant_placement(info)
        except (ValueError, TypeError) as exc:
            error = exc
        columns = None if error is not None else (s0.size(1) if seeds is None else seeds.numel())
        agreed = {"mode": (mode, "whether the signals `x` or the seeds `seed_index` are given"),
                  "columns": (columns, "the number of columns (signals or seeds)"),
                  "seeds": (digest, "the public `seed_index` (SHA-256 of the ids)")}
        matrix = None  # the signals as [e - s, C]: their width and dtype are compared
        if mode == "signals" and error is None:
            matrix = x.unsqueeze(-1) if x.dim() == 1 else x
        layout, gathered = self._gather_public(info, error, block, n, matrix, agreed=agreed,
                                               local={"max_signal": max_signal})
        crow, col = self._graph(info, layout, edge_index, block, n)

        if seeds is not None:
            max_signal = 1.0
        else:  # the largest public signal of the whole matrix, as the single-process layer plans with
            values = [g["local"]["max_signal"] for g in gathered if g["local"]["max_signal"] is not None]
            max_signal = max(values) if values else 0.0
        grid = self._plan_and_charge_ppr(info, n, columns, max_signal, seeds)
        if seeds is not None:
            out_dtype = torch.get_default_dtype()
        else:
            out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        with torch.no_grad():
            out = self._release(info, layout, block, n, crow, col, s0, seeds, columns, grid)
        return out.to(out_dtype)

    def _local_signals(self, x: Any) -> tuple[Tensor, Optional[float]]:
        """This process's rows of the signals (float64 ``[e - s, C]``), checked, and their largest entry."""
        if self.layer.personalized:
            raise ValueError("personalized mode needs one-hot seeds: pass `seed_index`, not `x` (Theorem 4 assumes "
                             "the seed vector is supported on the seed only)")
        if not isinstance(x, Tensor) or x.layout != torch.strided:
            raise TypeError("`x` must be a dense Tensor of non-negative signals (this process's rows)")
        s = x.detach().to(torch.float64)
        if s.dim() == 1:
            s = s.unsqueeze(-1)
        if s.dim() != 2:
            raise ValueError(f"`x` must have shape [end - start, C] (this process's rows); got {tuple(x.shape)}")
        if s.size(1) == 0:
            raise ValueError("`x` has no columns: there is nothing to diffuse")
        if not bool(torch.isfinite(s).all()) or bool((s < 0).any()):
            raise ValueError("`x` must be finite and non-negative (PPR signals)")
        return s, (float(s.max()) if s.numel() else None)

    def _plan_and_charge_ppr(self, info: GroupInfo, n: int, columns: int, max_signal: float,
                             seeds: Optional[Tensor]) -> Optional[PPRGrid]:
        """The layer's grid plan on the public sizes (a refusal raised on every process), then the one
        charge on rank 0 before any process draws noise; returns the grid (``None``: float or no noise)."""
        layer: NoisyPPRDiffusion = self.layer

        def plan() -> Optional[PPRGrid]:
            return layer.plan_grid(n, max_signal) if layer.noise_scale > 0 and layer.sampler == "safe" else None

        def event(grid: Optional[PPRGrid]):
            if layer.noise_scale == 0:
                return None
            charged = columns
            if seeds is not None and layer.personalized:  # per recipient: the most columns one seed receives
                charged = int(torch.bincount(seeds).max())
            return layer.event(charged, grid=grid)

        grid = self._agreed_plan_and_charge(info, plan, event)
        self.granularity = layer.granularity = None if grid is None else grid.granularity
        return grid

    def _release(self, info: GroupInfo, layout: Layout, block: tuple[int, int], n: int, crow: Tensor, col: Tensor,
                 s0: Optional[Tensor], seeds: Optional[Tensor], columns: int, grid: Optional[PPRGrid]) -> Tensor:
        layer: NoisyPPRDiffusion = self.layer
        device = col.device
        rows = block[1] - block[0]
        source, generator = self._streams(info, device, layer.noise_scale, grid)  # after the charge
        sampler = None if grid is None else RoundedNoiseSampler("two_laplace", grid.noise_scale / grid.granularity)
        width = layer.column_block or columns
        halo = plan_exchange(self.exchange, col, layout, info, block, n)  # once for every column block
        result = torch.empty(rows, columns, dtype=torch.float64, device=device)
        for start in range(0, columns, width):
            cols = slice(start, min(start + width, columns))
            if seeds is not None:
                block_seeds = seeds[cols]
                local = torch.zeros(rows, block_seeds.numel(), dtype=torch.float64, device=device)
                mine = (block_seeds >= block[0]) & (block_seeds < block[1])
                local[block_seeds[mine] - block[0], torch.arange(block_seeds.numel(), device=device)[mine]] = 1.0
            else:
                local, block_seeds = s0[:, cols].to(device), None
            out = self._diffuse(info, layout, block, n, crow, col, local, block_seeds, grid, source, sampler,
                                generator, halo)
            result[:, cols] = self._project(info, out)
        return result

    @torch.no_grad()
    def _diffuse(self, info: GroupInfo, layout: Layout, block: tuple[int, int], n: int, crow: Tensor, col: Tensor,
                 s0: Tensor, seeds: Optional[Tensor], grid: Optional[PPRGrid], source: Optional[RandomSource],
                 sampler: Optional[RoundedNoiseSampler], generator: Optional[torch.Generator],
                 halo: Optional[HaloExchange] = None) -> Tensor:
        """The single-process layer's ``_diffuse`` on this process's rows (the same float64 operations
        in the same order), with the previous iterate's scaled rows all-gathered before each product
        (or, with ``halo``, only the rows this block references)."""
        layer: NoisyPPRDiffusion = self.layer
        beta = 1.0 - layer.alpha
        on_cpu = s0.device.type == "cpu"
        if halo is None:
            adj = block_csr(crow, col, unit_values(col.numel(), device=col.device), n)  # ones never stored
        else:  # the columns renumbered to rows of the received halo: the same sums
            adj = block_csr(crow, halo.col, unit_values(col.numel(), device=col.device), halo.size)
        if on_cpu:
            adj = with_int32_indices(adj)
        neighbours = CsrProduct(adj, unit_values=True)  # the C kernel where it runs, the same sums otherwise
        deg = crow.diff().to(torch.float64)
        deg_inv = inverse_degree(deg).unsqueeze(-1)
        upper = (layer.eta * deg).unsqueeze(-1)
        exempt = layer.personalized and seeds is not None
        scale = 1.0 if grid is None else 1.0 / grid.granularity
        factor = 0.5 * beta * scale
        if seeds is not None:  # this process's (seed row, column) pairs
            mine = (seeds >= block[0]) & (seeds < block[1])
            seed_rows = seeds[mine] - block[0]
            seed_cols = torch.arange(seeds.numel(), device=seeds.device)[mine]
            restart, seed_restart = None, (1.0 - beta) * scale
        else:
            restart = ((1.0 - beta) * s0).mul_(scale)
        noise = TwoLaplaceStream(s0.shape, layer.noise_scale, device=s0.device, generator=generator) \
            if layer.noise_scale > 0 and grid is None else None
        received = halo.size if halo is not None else info.world * layout.width
        buffer = torch.empty((received, s0.size(1)), dtype=torch.float64, device=info.device)
        s = s0.clone()
        xc = torch.empty_like(s)
        scaled = torch.empty_like(s)
        for _ in range(layer.num_iterations):
            if exempt:
                seed_vals = s[seed_rows, seed_cols].clamp_(min=0.0)
            clamp_and_scale_rows(s, upper, deg_inv, xc, scaled)  # f(s) and D^-1 f(s) on this process's rows
            if exempt:
                xc[seed_rows, seed_cols] = seed_vals
                scaled[seed_rows, seed_cols] = seed_vals * deg_inv[seed_rows, 0]  # the product torch.mul forms
            # D^-1 f(s): every row, or the rows this block references
            full = all_gather_rows(scaled, layout, info, buffer) if halo is None else halo(scaled, out=buffer)
            s = neighbours(full, add=xc, scale=factor)  # (beta/2)(I + A D^-1) f(s), this process's rows
            del full
            if restart is None:
                s[seed_rows, seed_cols] += seed_restart
            else:
                s.add_(restart)
            if grid is not None:  # s <- g (round(s / g) + K), K exact integer noise of this process's rows
                sampler.add_to_grid_(s, grid.granularity, source, on_scale=True)  # float64 (exact below 2^53 g)
            elif noise is not None:
                s.add_(noise.sample())
        return s

    def _project(self, info: GroupInfo, out: Tensor) -> Tensor:
        """The layer's output projection, column by column over all processes' rows (see the class notes)."""
        projection = self.layer.output_projection
        if projection == "simplex":
            return _project_simplex_rows(out, 1.0, info)
        if projection == "l1_ball":
            norms = out.abs().sum(dim=0)
            _all_reduce_sum(norms, info)
            inside = (norms <= 1.0).unsqueeze(0)
            return torch.where(inside, out, torch.sign(out) * _project_simplex_rows(out.abs(), 1.0, info))
        return out

    def __repr__(self) -> str:
        extra = self.extra_repr()
        return f"{type(self).__name__}({self.layer!r}{', ' + extra if extra else ''})"


def _declared_rows(row_range: Any) -> int:
    """``end - start`` of a well-formed ``row_range`` (anything else is refused by ``check_row_range``)."""
    try:
        return int(row_range[1]) - int(row_range[0])
    except (TypeError, ValueError, IndexError):
        return -1


def _all_reduce_sum(t: Tensor, info: GroupInfo) -> None:
    """Sum ``t`` over the group, in place (through the communication device)."""
    import torch.distributed as dist

    buf = t.to(info.device)
    dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=info.group)
    if buf is not t:
        t.copy_(buf)


def _project_simplex_rows(v: Tensor, radius: float, info: GroupInfo) -> Tensor:
    r"""Every column of the row-partitioned matrix whose rows here are ``v`` projected onto
    :math:`\{x \ge 0, \sum_i x_i = r\}`: Michelot's algorithm with one all-reduce per round (see
    :class:`DistributedNoisyPPRDiffusion`). The active sets only shrink (also in floating point),
    so it stops after at most :math:`N + 1` rounds, in practice a few."""
    sums = torch.stack([v.sum(dim=0), torch.full((v.size(1),), float(v.size(0)), dtype=v.dtype,
                                                 device=v.device)])
    _all_reduce_sum(sums, info)
    theta = (sums[0] - radius) / sums[1]
    count = sums[1]
    active = torch.ones_like(v, dtype=torch.bool)
    for _ in range(int(count.max().item()) + 1):
        active &= v > theta
        sums = torch.stack([torch.where(active, v, 0.0).sum(dim=0), active.sum(dim=0).to(v.dtype)])
        _all_reduce_sum(sums, info)
        theta = (sums[0] - radius) / sums[1]
        if torch.equal(sums[1], count):
            break
        count = sums[1]
    return (v - theta).clamp_min(0)

