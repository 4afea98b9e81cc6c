r"""GCON's deterministic APPR propagation computed across processes, one block of node rows per process."""
from __future__ import annotations

import math
from numbers import Integral
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from ..accounting.validation import check_probability
from ..utils.appr import (Steps, _at_rounding_level, _check_steps, _check_tol, _norm_weight, _not_converged,
                          _stall_update, _stall_window, _ROUNDING_FLOOR)
from ..utils.csr_product import CsrProduct
from ._comm import GroupInfo, Layout, all_gather_rows, require_group
from ._release import RowPartitionedRelease
from .halo import check_exchange, plan_exchange
from .partition import block_csr

__all__ = ["distributed_appr_propagate"]

_NAME = "distributed_appr_propagate"


@torch.no_grad()
def distributed_appr_propagate(x_rows: Tensor, edge_index_rows: Any, *, row_range: tuple[int, int], num_nodes: int,
                               alpha: float, steps: Steps, r: float = 0.0, self_loops: bool = True,
                               tol: float = 1e-10, max_iter: int = 10_000, symmetrize: bool = False,
                               group: Any = None, exchange: str = "auto") -> Tensor:
    r""":func:`~pyg_private.utils.appr_propagate` (the APPR propagation of GCON, `Wei et al.,
    arXiv:2407.05034 <https://arxiv.org/abs/2407.05034>`_, Sec. II-B and IV-C2, Eq. 4, 9 and 11)
    computed across the processes of a ``torch.distributed`` group, each holding a contiguous block
    of nodes :math:`[s, e)`: with :math:`\tilde{\mathbf{A}} = \mathbf{D}^{r-1}\hat{\mathbf{A}}
    \mathbf{D}^{-r}` (:math:`\hat{\mathbf{A}} = \mathbf{A} + \mathbf{I}` with ``self_loops=True``,
    GCON's row-stochastic :math:`\mathbf{D}^{-1}(\mathbf{A} + \mathbf{I})` for ``r = 0``),
    process :math:`[s, e)` runs

    .. math::
        \mathbf{H}^{(k)}_{[s,e)} = (1-\alpha)\,\tilde{\mathbf{A}}_{[s,e),:}\,\mathbf{H}^{(k-1)}
            + \alpha\,\mathbf{X}_{[s,e)}, \qquad \mathbf{H}^{(0)} = \mathbf{X},

    and returns its rows of :math:`\mathbf{R}_m\mathbf{X} = \mathbf{H}^{(m)}`, or for a sequence
    :math:`(m_1, \dots, m_s)` of its rows of :math:`\tfrac1s[\mathbf{R}_{m_1}\mathbf{X} \,\|\,
    \cdots \,\|\, \mathbf{R}_{m_s}\mathbf{X}]` (Eq. 11), all from one pass of the recursion.

    **Exchanged per step.** The processes all-gather the previous iterate :math:`\mathbf{H}^{(k-1)}`
    (``exchange="all_gather"``: one all-gather; :math:`N \times F` values received per step and
    process), or each receives only its block's halo, the rows its columns name (``"halo"``: one
    ``all_to_all_single``, the same sums; ``"auto"``, the default, takes the halo when no process
    needs more than three quarters of the rows; see :mod:`~pyg_private.distributed.halo`). For ``r != 0`` the
    degrees are all-gathered once (the :math:`d_j^{-r}` of the columns). ``steps=inf`` adds one
    all-reduce (max) of four numbers per step (the largest change, weighted change and magnitude of
    the iterate), and at the stall checks one more exchange of :math:`|\mathbf{H}|` and all-reduce
    for the rounding bound: every process takes the same stopping decision, at the same iteration as
    one process.

    **The single-process result.** Every row is computed with the single-process operations in the
    same order (the normalised adjacency's values from the global degrees, the same sparse product
    per row), so the output equals :func:`~pyg_private.utils.appr_propagate`'s rows to float rounding,
    for every option it has (``r``, ``self_loops``, ``steps`` with ``inf``, ``tol``, ``max_iter``,
    ``symmetrize``). It is deterministic and releases nothing: no noise, nothing charged, no
    accountant (GCON's privacy comes from the objective perturbation that follows).

    **Checked on every process alike.** Row ranges that do not tile :math:`[0, N)` exactly once,
    processes that disagree on ``num_nodes``, the feature width or dtype of ``x_rows``, or the
    settings (``alpha``, ``steps``, ``r``, ``self_loops``, ``tol``, ``max_iter``, ``symmetrize``), a bad
    local input (NaN, an edge outside the block, a self-loop) or a graph directed across the
    processes raise the same ``ValueError``/``TypeError`` on every process; an uninitialised process
    group raises a ``RuntimeError``.

    Args:
        x_rows (Tensor): this process's rows of the features, :math:`(e - s, F)`; float32 and float64
            are computed and returned in their dtype, other real dtypes in float64.
        edge_index_rows: the edges whose row ``edge_index[0]`` lies in the block (global ids,
            :func:`~pyg_private.distributed.row_block` of the undirected ``edge_index``), or a sparse
            block :math:`(e - s, N)`.
        row_range ((int, int)): this process's block :math:`[s, e)`.
        num_nodes (int): :math:`N`, alike on every process.
        alpha, steps, r, self_loops, tol, max_iter, symmetrize: as for
            :func:`~pyg_private.utils.appr_propagate`.
        group (ProcessGroup, optional): the processes (default: the default group).
        exchange (str, optional): ``"auto"``, ``"all_gather"`` or ``"halo"`` (every process must pass
            the same). The halo's message sizes reveal how many edges cross the blocks to whoever
            watches the network: ``"all_gather"`` on networks you do not trust (see
            :mod:`~pyg_private.distributed.halo`). (default: ``"auto"``)

    Returns:
        Tensor: this process's rows, :math:`(e - s, F)` (or :math:`(e - s, sF)` for :math:`s` step counts).
    """
    device = x_rows.device if isinstance(x_rows, Tensor) else torch.device("cpu")
    info = require_group(group, device, _NAME)
    settings = _APPRSettings(alpha=alpha, steps=steps, r=r, self_loops=self_loops, tol=tol, max_iter=max_iter,
                             symmetrize=symmetrize)
    run = _APPRRun(settings, group=group)
    error, n, block, step_list, single = None, None, None, None, True
    try:  # this process's own checks; agreed on below
        settings.alpha = check_probability(alpha, "alpha", low_open=True)
        settings.r = check_probability(r, "r")
        step_list, single = _check_steps(steps)
        settings.steps = [float(m) if math.isinf(m) else m for m in step_list]
        settings.tol = _check_tol(tol)
        if isinstance(max_iter, bool) or not isinstance(max_iter, Integral) or max_iter < 1:
            raise ValueError(f"`max_iter` must be an integer >= 1; got {max_iter!r}")
        settings.max_iter = int(max_iter)
        settings.self_loops, settings.symmetrize = bool(self_loops), bool(symmetrize)
        settings.exchange = check_exchange(exchange)
        if isinstance(x_rows, Tensor) and x_rows.is_complex():
            raise TypeError("`x` must be real; got a complex tensor")
        n, block = run._common_checks(info, x_rows, row_range, num_nodes)
        if not bool(torch.isfinite(x_rows).all()):
            raise ValueError("`x` contains NaN or infinite values")
    except (ValueError, TypeError) as exc:
        error = exc
    layout = run._public_inputs(info, error, block, n, x_rows)
    crow, col = run._graph(info, layout, edge_index_rows, block, n)
    degree = all_gather_rows(crow.diff().unsqueeze(-1), layout, info).squeeze(-1) if settings.r != 0.0 else None

    dtype = x_rows.dtype if x_rows.dtype in (torch.float32, torch.float64) else torch.float64
    x = x_rows.detach().to(dtype)
    finite = sorted({m for m in step_list if not math.isinf(m)})
    wanted_inf = any(math.isinf(m) for m in step_list)
    last = finite[-1] if finite else 0
    results: dict = {0: x} if 0 in finite else {}
    if settings.alpha == 1.0 or x.size(1) == 0 or (last == 0 and not wanted_inf):
        results = {m: x for m in step_list}
    else:
        results.update(_recursion_rows(info, layout, n, x, crow, col, degree, alpha=settings.alpha, r=settings.r,
                                       self_loops=settings.self_loops, stops=set(finite), last=last,
                                       until_converged=wanted_inf, tol=settings.tol, max_iter=settings.max_iter,
                                       exchange=settings.exchange))
    if single:
        out = results[step_list[0]]
        return out.clone() if out is x else out
    return torch.cat([results[m] for m in step_list], dim=1).div_(len(step_list))


class _APPRSettings(torch.nn.Module):
    """The propagation's settings, which every process must pass alike."""

    def __init__(self, **settings: Any) -> None:
        super().__init__()
        for key, value in settings.items():
            setattr(self, key, value)


class _APPRRun(RowPartitionedRelease):
    """The protocol's checks (steps 1 and 2) for a deterministic propagation: nothing is charged."""

    _settings_what = "the settings of the propagation"
    _settings_hint = ("pass the same `alpha`, `steps`, `r`, `self_loops`, `tol`, `max_iter`, `symmetrize` and "
                      "`exchange` everywhere")

    def _settings(self) -> dict[str, Any]:
        s = self.layer
        return {"function": "appr_propagate", "alpha": s.alpha, "steps": s.steps, "r": s.r,
                "self_loops": s.self_loops, "tol": s.tol, "max_iter": s.max_iter, "symmetrize": s.symmetrize,
                "exchange": getattr(s, "exchange", None)}


def _block_normalized(crow: Tensor, col: Tensor, degree: Optional[Tensor], n: int, *, r: float, self_loops: bool,
                      weight: float, dtype: torch.dtype) -> tuple[Tensor, Optional[Tensor]]:
    """This process's rows of :func:`~pyg_private.utils.adjacency.power_normalized_adjacency_csr`
    (``(adj, diag)``, the same float operations), the column degrees from the gathered ``degree``."""
    counts = crow.diff()

    def power(deg_counts: Tensor, p: float) -> Tensor:  # d**p, and 0 for a zero degree (without self-loops)
        deg = deg_counts.to(torch.float64)
        if self_loops:
            return deg.add_(1.0).pow(p)
        out = deg.pow(p)
        isolated = deg_counts == 0
        return out.masked_fill_(isolated, 0.0) if bool(isolated.any()) else out

    r = float(r)
    left = power(counts, r - 1.0).mul_(weight).to(dtype)
    values = left.repeat_interleave(counts, output_size=col.numel())
    if r != 0.0:
        values.mul_(power(degree, -r).to(dtype)[col])
    diag = None
    if self_loops:
        diag = counts.to(torch.float64).add_(1.0).reciprocal().mul_(weight).to(dtype).unsqueeze(-1)
    return block_csr(crow, col, values, n), diag


def _all_reduce_max(values: list[float], info: GroupInfo) -> list[float]:
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=info.group)
    return t.tolist()


def _recursion_rows(info: GroupInfo, layout: Layout, n: int, x: Tensor, crow: Tensor, col: Tensor,
                    degree: Optional[Tensor], *, alpha: float, r: float, self_loops: bool, stops: set, last: int,
                    until_converged: bool, tol: float, max_iter: int, exchange: str = "all_gather") -> dict:
    """``appr_propagate``'s recursion on this process's rows, the iterate all-gathered before each
    product and the stopping rule's maxima all-reduced (every process stops at the same step)."""
    adj, diag = _block_normalized(crow, col, degree, n, r=r, self_loops=self_loops, weight=1.0 - alpha,
                                  dtype=x.dtype)
    halo = plan_exchange(exchange, col, layout, info, layout.ranges[info.rank], n)
    if halo is not None:  # the same values, the columns renumbered to rows of the received halo
        adj = block_csr(crow, halo.col, adj.values(), halo.size)
    restart = x * alpha
    product = CsrProduct(adj)  # the package's order of summation (the C kernel where it runs), then + restart
    buffers = (torch.empty_like(x), torch.empty_like(x))
    received = halo.size if halo is not None else info.world * layout.width
    gathered = torch.empty((received, x.size(1)), dtype=x.dtype, device=info.device)

    def rows_of(local: Tensor, out: Optional[Tensor] = None) -> Tensor:  # every row, or the block's halo
        return all_gather_rows(local, layout, info, out) if halo is None else halo(local, out=out)

    floor = _ROUNDING_FLOOR * torch.finfo(x.dtype).eps
    window = _stall_window(alpha)
    weight = _norm_weight(crow, r, self_loops, x.dtype) if until_converged else None
    empty = x.size(0) == 0
    best, since = math.inf, 0
    found: dict = {}
    h = x
    k = 0
    while True:
        k += 1
        out = buffers[k % 2]
        full = rows_of(h, gathered)
        product(full, out=out).add_(restart)
        del full
        if diag is not None:
            out.addcmul_(h, diag)
        if k in stops:
            found[k] = out if k == last and not until_converged else out.clone()
        if until_converged and k >= last:
            diff = h.sub(out) if h is x else h.sub_(out)
            row_change = diff.abs_().amax(dim=1)
            if empty:
                local = [0.0, -math.inf, -math.inf, 0.0]
            else:
                change = float(row_change.max())
                low, high = torch.aminmax(out)
                wchange = change if weight is None else float(row_change.mul_(weight).max())
                local = [change, -float(low), float(high), wchange]
            change, neg_low, high, wchange = _all_reduce_max(local, info)
            converged = change <= max(tol, floor * max(neg_low, high))
            if not converged:
                best, since = _stall_update(best, since, wchange)
                if since >= window and (since - window) % window == 0:  # stalled: at the rounding level?
                    noise = _rounding_noise_rows(info, rows_of, out, restart, adj, diag, crow, weight)
                    converged = _at_rounding_level(wchange, noise, alpha)
            if converged:
                found[math.inf] = out if k not in stops else found[k]
                return found
            if k >= max_iter:
                raise _not_converged(max_iter, change, tol, alpha)
        elif k >= last:
            return found
        h = out


def _rounding_noise_rows(info: GroupInfo, rows_of: Callable[[Tensor], Tensor], h: Tensor, restart: Tensor,
                         adj: Tensor, diag: Optional[Tensor], crow: Tensor, weight: Optional[Tensor]) -> float:
    """``appr``'s bound on the weighted rounding error of one step, over all processes' rows
    (``|H|`` exchanged by ``rows_of`` for the product, the per-row maxima all-reduced)."""
    h_abs = h.abs()
    terms = CsrProduct(adj)(rows_of(h_abs), add=restart.abs())  # the single process's order
    if diag is not None:
        terms.addcmul_(h_abs, diag)
    u = torch.finfo(h.dtype).eps / 2
    mu = crow.diff().to(torch.float64).add_(2.0).mul_(u)
    gamma = torch.where(mu < 1, mu / (1 - mu), torch.full_like(mu, math.inf)).unsqueeze(-1)
    if weight is not None:
        gamma = gamma * weight.to(torch.float64).unsqueeze(-1)
    per_row = torch.linalg.vector_norm(terms, math.inf, dim=1, keepdim=True).to(torch.float64)
    local = float(torch.where(per_row > 0, per_row * gamma, 0.0).max()) if per_row.numel() else 0.0
    return _all_reduce_max([local], info)[0]
