r"""Deterministic approximate personalized PageRank (APPR / PPR) propagation.

The propagation core that GCON's ``PerturbedAPPRConv`` (Wei et al., arXiv:2407.05034: the
propagation of Sec. II-B and IV-C2 and the private inference of Sec. IV-C6, Eq. 16) and PrivGE's
PPR embedding (Li et al., CIKM 2024, Sec. 3.2, Eq. 12) share. With
:math:`\hat{\mathbf{A}} = \mathbf{A} + \mathbf{I}` (``self_loops=True``) or :math:`\mathbf{A}`,
:math:`\mathbf{D}` the degree matrix of :math:`\hat{\mathbf{A}}` and

.. math::
    \tilde{\mathbf{A}} = \mathbf{D}^{r-1}\hat{\mathbf{A}}\mathbf{D}^{-r},

the APPNP recursion :math:`\mathbf{H}_0 = \mathbf{X}`,
:math:`\mathbf{H}_k = (1-\alpha)\tilde{\mathbf{A}}\mathbf{H}_{k-1} + \alpha\mathbf{X}`, run
:math:`m` times, gives :math:`\mathbf{R}_m\mathbf{X}` (GCON Eq. 4 and 9):

.. math::
    \mathbf{R}_0 = \mathbf{I}, \qquad
    \mathbf{R}_m = \alpha\sum_{i=0}^{m-1}(1-\alpha)^i\tilde{\mathbf{A}}^i + (1-\alpha)^m\tilde{\mathbf{A}}^m,
    \qquad
    \mathbf{R}_\infty = \alpha\big(\mathbf{I} - (1-\alpha)\tilde{\mathbf{A}}\big)^{-1}.

GCON uses ``r = 0`` with self-loops, the row-stochastic :math:`\mathbf{D}^{-1}(\mathbf{A} + \mathbf{I})`
(not PyG's symmetric ``gcn_norm``); PrivGE uses ``r`` in [0, 1] without self-loops. For every
``r``, :math:`\tilde{\mathbf{A}} = \mathbf{D}^{r}(\mathbf{D}^{-1}\hat{\mathbf{A}})\mathbf{D}^{-r}` is
similar to a row-stochastic matrix, so its spectral radius is at most 1 and the series
converges for every :math:`\alpha \in (0, 1]`.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from ..accounting.validation import check_probability
from .adjacency import csr_indices, power_normalized_adjacency_csr, simple_undirected_csr
from .csr_product import CsrProduct
from .graph_validation import adjacency_to_edge_index, simple_undirected

__all__ = ["appr_propagate"]

Steps = Union[int, float, Sequence[Union[int, float]]]

#: the stopping tolerance of ``steps=inf`` is raised to this many units of roundoff of the
#: iterate's largest entry: below that, the iterates of that dtype change by rounding alone
_ROUNDING_FLOOR = 8

#: the stall rule of ``steps=inf``: progress is a weighted change below this fraction of the
#: last recorded one, and the iteration is stalled after ``ceil(2 / alpha) + 5`` iterations
#: without progress; it then stops if the change is within ``_NOISE_MARGIN / alpha`` times the
#: rounding error bound of one step (see ``appr_propagate``'s ``tol`` and ``_stall_update``)
_PROGRESS = 0.5
_NOISE_MARGIN = 4.0
#: rows per block of the restart term's addition (a block-sized temporary, never N x F)
_RESTART_ROWS = 1 << 14


@torch.no_grad()
def appr_propagate(x: Tensor, edge_index_or_adj: Any, *, alpha: float, steps: Steps, r: float = 0.0,
                   self_loops: bool = True, num_nodes: Optional[int] = None, tol: float = 1e-10,
                   max_iter: int = 10_000, symmetrize: bool = False) -> Tensor:
    r"""Return :math:`\mathbf{R}_m\mathbf{X}` (see the module docstring), or for a sequence of
    step counts :math:`(m_1, \dots, m_s)` the concatenation (GCON Eq. 11)

    .. math::
        \mathbf{Z} = \tfrac1s\big[\mathbf{R}_{m_1}\mathbf{X} \,\|\, \cdots \,\|\, \mathbf{R}_{m_s}\mathbf{X}\big]
        \in \mathbb{R}^{N \times sF},

    whose blocks follow the order given, all computed in one pass of the recursion (the
    iterate is stored at every requested step count; ``inf`` is reached last).

    Args:
        x (Tensor): node features ``[N, F]``, finite. float32 and float64 are computed and
            returned in their dtype; any other real dtype in float64.
        edge_index_or_adj: the graph, an undirected unweighted simple graph (no self-loop,
            no duplicate edge, both directions stored): ``edge_index`` ``[2, E]``, a
            ``torch.sparse`` adjacency (CSR already in canonical form, i.e. sorted columns
            and all values 1, is taken as it is) or a ``torch_sparse.SparseTensor``.
        alpha (float): restart probability in :math:`(0, 1]`; ``alpha = 1`` returns ``x``.
        steps: :math:`m`, an integer :math:`\ge 0` or ``math.inf``; or a non-empty sequence
            of them.
        r (float): convolution coefficient in :math:`[0, 1]` of
            :math:`\mathbf{D}^{r-1}\hat{\mathbf{A}}\mathbf{D}^{-r}`. (default: :obj:`0`)
        self_loops (bool): :math:`\hat{\mathbf{A}} = \mathbf{A} + \mathbf{I}` (GCON) or
            :math:`\mathbf{A}` (PrivGE). Without self-loops an isolated node has degree 0;
            every power of that 0 is taken as 0, so :math:`\tilde{\mathbf{A}}\mathbf{X}` is 0
            there and the node's output is :math:`\alpha\mathbf{x}` for :math:`m \ge 1`
            (:math:`\mathbf{x}` for :math:`m = 0`). (default: :obj:`True`)
        num_nodes (int, optional): must equal ``x.size(0)`` when given.
        tol (float): ``steps=inf`` stops at the first iterate whose largest absolute change
            :math:`\|\mathbf{H}_k - \mathbf{H}_{k-1}\|_\infty` is at most ``tol``, raised
            where needed to ``8 * eps(dtype) * max|H_k|`` (about ``1e-6 * max|H_k|`` in
            float32): near the fixed point the iterates keep changing by rounding alone, so a
            smaller ``tol`` (such as the default in float32) could never be met. ``tol=0``
            iterates to that floor. The error left is at most
            :math:`\frac{1-\alpha}{\alpha}` times the last change in the max norm for
            ``r = 0`` (row-stochastic :math:`\tilde{\mathbf{A}}`).
            On large graphs with high-degree nodes the rounding error of one step (a sum of
            up to ``degree + 2`` terms per row) can exceed that floor, and the iterates then
            cycle or wander at the rounding level without meeting it. So ``steps=inf`` also
            stops, returning the current iterate, when both of these hold: (i) the change in
            the weighted norm :math:`c_k = \|\mathbf{D}^{-r}(\mathbf{H}_k -
            \mathbf{H}_{k-1})\|_\infty`, in which :math:`\tilde{\mathbf{A}}` is
            non-expansive (a zero degree weighted 1), has not fallen below half of its last
            recorded value for ``ceil(2 / alpha) + 5`` iterations (the last recorded value
            being the first change, or the last one that fell below half of the one recorded
            before it); (ii) :math:`c_k \le \frac{4}{\alpha} \|\mathbf{D}^{-r}\mathbf{N}\|_\infty`,
            where :math:`N_{ij} = \gamma_{m_i+2}\,(\alpha|X_{ij}| + ((1-\alpha)|\tilde{\mathbf{A}}|\,|\mathbf{H}_k|)_{ij})`,
            :math:`m_i` the number of stored neighbours of node ``i`` and
            :math:`\gamma_m = \frac{m u}{1 - m u}` (:math:`u` = ``eps(dtype) / 2``; infinite for
            :math:`m u \ge 1`), bounds the rounding error of one step in any summation order.
            The change obeys :math:`c_{k+1} \le (1-\alpha) c_k + 2\|\mathbf{D}^{-r}\mathbf{N}\|_\infty`,
            so (ii) always holds after finitely many iterations and stops only an iteration at
            its rounding level; while the change still shrinks at the exact rate
            (:math:`(1-\alpha)^{\lceil 2/\alpha\rceil + 5} < 1/2`), (i) does not hold, so a
            reachable ``tol`` is met as before. (default: :obj:`1e-10`)
        max_iter (int): ``steps=inf`` raises a ``RuntimeError`` if it has stopped by neither
            rule after this many iterations. (default: :obj:`10000`)
        symmetrize (bool): symmetrise a directed graph (and drop self-loops and duplicate
            edges) instead of raising. (default: :obj:`False`)

    The result is computed without autograd (detached from ``x``). Each step is one
    sparse-dense product with :math:`(1-\alpha)` and the degree powers folded
    into the CSR values, plus the self-loop diagonal and the restart term added in place.
    """
    alpha = check_probability(alpha, "alpha", low_open=True)
    r = check_probability(r, "r")
    step_list, single = _check_steps(steps)
    tol = _check_tol(tol)
    if isinstance(max_iter, bool) or not isinstance(max_iter, Integral) or max_iter < 1:
        raise ValueError(f"`max_iter` must be an integer >= 1; got {max_iter!r}")
    if not isinstance(x, Tensor) or x.dim() != 2:
        raise ValueError(f"`x` must be a node feature matrix of shape [N, F]; got "
                         f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
    if x.is_complex():
        raise TypeError("`x` must be real; got a complex tensor")
    n = x.size(0)
    if num_nodes is not None and int(num_nodes) != n:
        raise ValueError(f"`num_nodes` is {num_nodes} but `x` has {n} rows")
    if n == 0:
        raise ValueError("the graph is empty (`x` has no rows)")
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float64
    x = x.detach().to(dtype)
    if x.numel() and not bool(torch.isfinite(torch.stack(torch.aminmax(x))).all()):
        raise ValueError("`x` contains NaN or infinite values")

    crow, col = _graph_csr(edge_index_or_adj, n, symmetrize)
    crow, col = crow.to(x.device), col.to(x.device)

    finite = sorted({m for m in step_list if not math.isinf(m)})
    wanted_inf = any(math.isinf(m) for m in step_list)
    last = finite[-1] if finite else 0
    results: dict[float, Tensor] = {0: x} if 0 in finite else {}
    if alpha == 1.0 or x.size(1) == 0 or (last == 0 and not wanted_inf):  # R_m = I for alpha = 1; nothing to run
        results = {m: x for m in step_list}
    else:
        results.update(_recursion(x, crow, col, alpha=alpha, r=r, self_loops=self_loops, stops=set(finite),
                                  last=last, until_converged=wanted_inf, tol=tol, max_iter=int(max_iter)))
    if single:
        out = results[step_list[0]]
        return out.clone() if out is x else out
    return torch.cat([results[m] for m in step_list], dim=1).div_(len(step_list))


def _restarted_product(product: CsrProduct, adj: Tensor, h: Tensor, x: Tensor, alpha: float, out: Tensor) -> None:
    """``out <- adj @ h + alpha x``: the product in the package's order of summation
    (:mod:`~pyg_private.utils.csr_product`), then ``alpha x`` rounded and added in row blocks (a
    block-sized temporary), the roundings of ``torch.addmm(x, adj, h, beta=alpha)`` after its product.
    The C kernel and the torch path give the same values (``tests/utils/test_appr.py``)."""
    product(h, out=out)
    scratch = torch.empty((min(_RESTART_ROWS, x.size(0)), x.size(1)), dtype=x.dtype, device=x.device)
    for a in range(0, x.size(0), _RESTART_ROWS):
        b = min(a + _RESTART_ROWS, x.size(0))
        out[a:b].add_(torch.mul(x[a:b], alpha, out=scratch[:b - a]))


def _recursion(x: Tensor, crow: Tensor, col: Tensor, *, alpha: float, r: float, self_loops: bool,
               stops: set, last: int, until_converged: bool, tol: float, max_iter: int) -> dict:
    """Run H_k = (1 - alpha) Ã H_{k-1} + alpha X; return {k: H_k} for k in ``stops`` (and inf)."""
    adj, diag = power_normalized_adjacency_csr(crow, col, r=r, self_loops=self_loops, weight=1.0 - alpha,
                                               dtype=x.dtype)
    product = CsrProduct(adj)  # A~ h: the C kernel where it runs, the torch path otherwise (the same values)
    buffers = (torch.empty_like(x), torch.empty_like(x))
    floor = _ROUNDING_FLOOR * torch.finfo(x.dtype).eps
    window = _stall_window(alpha)
    weight = _norm_weight(crow, r, self_loops, x.dtype) if until_converged else None
    best, since = math.inf, 0  # the last recorded weighted change, and the iterations since
    found: dict = {}
    h = x
    k = 0
    while True:
        k += 1
        out = buffers[k % 2]  # never h, which lies in the other buffer (or is x)
        _restarted_product(product, adj, h, x, alpha, out)  # alpha x + (1 - alpha) A~ h, no N x F restart buffer
        if diag is not None:
            out.addcmul_(h, diag)
        if k in stops:  # a copy, unless it is the last iterate computed
            found[k] = out if k == last and not until_converged else out.clone()
        if until_converged and k >= last:
            diff = h.sub(out) if h is x else h.sub_(out)  # h is not needed any more (a stored one is a copy)
            row_change = diff.abs_().amax(dim=1)  # one pass for both norms (faster than vector_norm)
            change = float(row_change.max())
            low, high = torch.aminmax(out)
            converged = change <= max(tol, floor * max(-float(low), float(high)))
            if not converged:
                wchange = change if weight is None else float(row_change.mul_(weight).max())
                best, since = _stall_update(best, since, wchange)
                if since >= window and (since - window) % window == 0:  # stalled: at the rounding level?
                    noise = _rounding_noise(out, x * alpha, adj, diag, crow, weight)
                    converged = _at_rounding_level(wchange, noise, alpha)
            if converged:
                found[math.inf] = out if k not in stops else found[k]
                return found
            if k >= max_iter:
                raise _not_converged(max_iter, change, tol, alpha)
        elif k >= last:
            return found
        h = out


def _not_converged(max_iter: int, change: float, tol: float, alpha: float) -> RuntimeError:
    """The error of a ``steps=inf`` propagation that ran out of iterations."""
    return RuntimeError(
        f"appr_propagate(steps=inf) did not converge in max_iter={max_iter} iterations: the largest "
        f"change of the last one is {change:.3g} > tol={tol:g} (alpha={alpha:g}; the change shrinks "
        f"by about 1 - alpha per iteration). Raise `max_iter` or `tol`, or use a finite `steps`.")


def _stall_window(alpha: float) -> int:
    """Iterations without progress after which ``steps=inf`` counts as stalled: ceil(2 / alpha) + 5.

    The weighted change shrinks by at least 1 - alpha per exact iteration, so over this window by
    (1 - alpha)^window < exp(-2) < _PROGRESS: an iteration that is not at its rounding level makes
    progress at least once in every window."""
    return math.ceil(2.0 / alpha) + 5


def _stall_update(best: float, since: int, change: float) -> tuple[float, int]:
    """One step of the stall tracker: ``(best, since)`` after a weighted change ``change``.

    ``best`` is the last recorded change (``inf`` before the first), ``since`` the iterations
    since it was recorded. A change below ``_PROGRESS * best`` is progress and is recorded."""
    if change < _PROGRESS * best:
        return change, 0
    return best, since + 1


def _at_rounding_level(change: float, noise: float, alpha: float) -> bool:
    """Whether a weighted change is within reach of rounding: ``change <= 4 / alpha * noise``.

    With ``noise`` a bound on the weighted rounding error of one step, the weighted change obeys
    ``c_{k+1} <= (1 - alpha) c_k + 2 noise``: its limit superior is at most ``2 noise / alpha``,
    which the margin 4 covers twice (``noise`` is taken at the current iterate)."""
    return change <= _NOISE_MARGIN / alpha * noise


def _norm_weight(crow: Tensor, r: float, self_loops: bool, dtype: torch.dtype) -> Optional[Tensor]:
    """``D^-r`` as a vector ``[N]`` (a zero degree weighted 1), or ``None`` for ``r = 0``: Ã is
    non-expansive in the norm ``max |D^-r v|`` (``D^-r Ã v`` averages ``D^-r v`` over a row)."""
    if r == 0.0:
        return None
    deg = crow.diff().to(torch.float64)
    if self_loops:
        deg.add_(1.0)
    return torch.where(deg > 0, deg.pow(-r), torch.ones_like(deg)).to(dtype)


def _rounding_noise(h: Tensor, restart: Tensor, adj: Tensor, diag: Optional[Tensor], crow: Tensor,
                    weight: Optional[Tensor]) -> float:
    """A bound on the weighted rounding error ``max |D^-r E|`` of one step from ``h``.

    Row ``i`` of a step, ``restart_i + sum_j adj_ij h_j (+ diag_i h_i)``, sums ``m_i + 2`` terms
    (``m_i`` stored neighbours); in any order its error is at most ``gamma_{m_i+2}`` times the sum
    of the absolute terms, ``gamma_m = m u / (1 - m u)`` with the unit roundoff ``u = eps / 2``
    (Higham, Accuracy and Stability of Numerical Algorithms, §4.2; infinite for ``m u >= 1``).
    The stored values of ``adj`` and ``diag`` are non-negative."""
    h_abs = h.abs()
    terms = CsrProduct(adj)(h_abs, add=restart.abs())  # the order of the distributed bound's rows too
    if diag is not None:
        terms.addcmul_(h_abs, diag)
    u = torch.finfo(h.dtype).eps / 2
    mu = crow.diff().to(torch.float64).add_(2.0).mul_(u)
    gamma = torch.where(mu < 1, mu / (1 - mu), torch.full_like(mu, math.inf)).unsqueeze(-1)
    if weight is not None:
        gamma = gamma * weight.to(torch.float64).unsqueeze(-1)
    per_row = torch.linalg.vector_norm(terms, math.inf, dim=1, keepdim=True).to(torch.float64)
    return float(torch.where(per_row > 0, per_row * gamma, 0.0).max())  # 0 * inf is no error


def _graph_csr(adj: Any, n: int, symmetrize: bool) -> tuple[Tensor, Tensor]:
    """``(crow, col)`` of the validated undirected simple graph on ``n`` nodes."""
    graph = simple_undirected_csr(adj, n, index_dtype=None)  # a canonical sparse input as it is (its own indices)
    if graph is not None:
        return graph
    ei, m = adjacency_to_edge_index(adj, n, name="edge_index")
    if m != n:
        raise ValueError(f"the graph has {m} nodes but `x` has {n} rows")
    ei, _ = simple_undirected(ei, n, symmetrize=symmetrize, name="edge_index")
    return csr_indices(ei, n)


def _check_steps(steps: Any) -> tuple[list, bool]:
    """``([m_1, ..., m_s], single)``: every m an int >= 0 or ``math.inf``."""
    single = isinstance(steps, (Real, str, bytes)) or (isinstance(steps, Tensor) and steps.dim() == 0)
    if single:
        items = [steps]
    else:
        try:
            items = list(steps.tolist() if isinstance(steps, Tensor) else steps)
        except TypeError:
            raise TypeError(f"`steps` must be a non-negative integer, math.inf, or a sequence of them; got "
                            f"{type(steps).__name__}") from None
    if not items:
        raise ValueError("`steps` must be a non-negative integer, math.inf, or a non-empty sequence of them")
    out = []
    for m in items:
        if isinstance(m, Tensor) and m.dim() == 0:
            m = m.item()
        if isinstance(m, bool) or not isinstance(m, Real) or math.isnan(float(m)):
            raise TypeError(f"`steps` must hold non-negative integers or math.inf; got {m!r}")
        if float(m) < 0:
            raise ValueError(f"`steps` must be non-negative; got {m!r}")
        if math.isinf(float(m)):
            out.append(math.inf)
        elif isinstance(m, Integral) or float(m).is_integer():
            out.append(int(m))
        else:
            raise ValueError(f"`steps` must be integers (or math.inf); got {m!r}")
    return out, single


def _check_tol(tol: Any) -> float:
    if isinstance(tol, bool) or not isinstance(tol, Real) or not math.isfinite(float(tol)) or float(tol) < 0:
        raise ValueError(f"`tol` must be a finite number >= 0; got {tol!r}")
    return float(tol)
