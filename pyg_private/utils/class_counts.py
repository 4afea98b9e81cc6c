r"""The neighbour class-count query and its edge-level sensitivity (pure functions, no noise).

For class rows :math:`\mathbf{R} \in [0, 1]^{N \times C}` with :math:`\lVert \mathbf{r}_u\rVert_1 \le 1`
(one-hot labels or predictions, class probabilities, zero rows), the query is the sum of the
neighbours' rows, :math:`\mathbf{A}\mathbf{R}`: row :math:`v` counts :math:`v`'s neighbours per class,
the "cluster degree vector" of LPGNet (Kolluri et al., "LPGNet: Link Private Graph Networks for Node
Classification", CCS 2022, Sec. 4).

**Edge-level sensitivity.** Adding or removing the undirected edge :math:`\{u, v\}` adds
:math:`\mathbf{r}_v` to row :math:`u` and :math:`\mathbf{r}_u` to row :math:`v` and changes nothing else
when :math:`\mathbf{R}` does not depend on the edges, so the change has :math:`\ell_1` norm
:math:`\lVert \mathbf{r}_u\rVert_1 + \lVert \mathbf{r}_v\rVert_1 \le 2` (attained by two one-hot rows) and
:math:`\ell_2` norm at most :math:`\sqrt 2`. The rows must be computed without the graph (public
features and labels at edge level), or from earlier releases only (adaptive composition).

**Sources.** Each edge's budget can go to the end that reads it. For a public boolean mask
:math:`S` of *source* nodes (chosen without the graph), the query counts a source neighbour twice
and releases nothing for the sources: row :math:`v \notin S` is
:math:`\sum_{u \sim v} w_u \mathbf{r}_u` with :math:`w_u = 2` for :math:`u \in S` and 1 otherwise, and
row :math:`v \in S` is zero. The edge :math:`\{u, v\}` then moves rows :math:`u` and :math:`v` by
:math:`\mathbf{r}_v` and :math:`\mathbf{r}_u` when neither is a source, row :math:`v` alone by
:math:`2\mathbf{r}_u` when only :math:`u` is, and nothing when both are: the :math:`\ell_1` sensitivity
is 2 again. A source's label reaches its neighbours with half the relative noise, at the price of
no counts of its own.

**Claims.** More generally, each node :math:`v` can hold a public *claim* :math:`c_v \ge 0` (computed
without the graph), and the edge :math:`\{u, v\}` splits its budget of 2 between its ends in proportion
to their claims: row :math:`v` is :math:`\sum_{u \sim v} \alpha_{vu} \mathbf{r}_u` with
:math:`\alpha_{vu} = 2 c_v / (c_u + c_v)` (0 when both claims are 0). The edge then moves row
:math:`u` by :math:`\alpha_{uv}\mathbf{r}_v` and row :math:`v` by :math:`\alpha_{vu}\mathbf{r}_u`, of
:math:`\ell_1` norm at most :math:`\alpha_{uv} + \alpha_{vu} = 2`: the sensitivity is 2 for any
claims. Equal claims give the plain query; claims of 0 on the sources and 1 elsewhere give the
sources' query above. A node with no claim gets a zero row.

**Pair contrasts.** A node can also receive fewer numbers than :math:`C`. For a public ranking
:math:`\pi_v` of the classes at every node (computed without the graph), the ranked pair contrasts of
row :math:`v` of the counts :math:`\mathbf{c}_v` are
:math:`t_{vj} = c_{v,\pi_v(2j+1)} - c_{v,\pi_v(2j+2)}` for :math:`j < \lfloor C/2 \rfloor` (the
1st minus the 2nd class, the 3rd minus the 4th, ...) and, for odd :math:`C`, the count of the last
class. Each class enters exactly one contrast with coefficient :math:`\pm 1`, so the map
:math:`\mathbf{c}_v \mapsto \mathbf{t}_v` does not increase the :math:`\ell_1` norm of a change:
whatever moves the counts by at most 2 in :math:`\ell_1` moves the contrasts by at most 2. Laplace
noise on the :math:`\lceil C/2 \rceil` contrasts then costs what it costs on the :math:`C` counts,
and the difference of a node's two most likely classes, which decides between them, carries the
noise of one Laplace draw instead of two.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter

__all__ = ["neighbour_class_counts", "ranked_pair_contrasts", "check_class_rows",
           "CLASS_COUNTS_EDGE_L1_SENSITIVITY"]

#: :math:`\ell_1` sensitivity of :math:`\mathbf{A}\mathbf{R}` to one undirected edge (rows of :math:`\ell_1`
#: norm at most 1)
CLASS_COUNTS_EDGE_L1_SENSITIVITY = 2.0


def check_class_rows(rows: Tensor) -> Tensor:
    """``rows`` as float64 after checking the premise of the bound: a finite ``[N, C]`` matrix with
    entries in ``[0, 1]`` and every row's sum at most 1 (up to ``1e-9`` for rounded probabilities,
    which are then scaled onto the simplex)."""
    if not isinstance(rows, Tensor) or rows.dim() != 2 or not rows.is_floating_point():
        raise ValueError("class rows must be a floating-point [N, C] matrix")
    r = rows.detach().to(torch.float64)
    if not torch.isfinite(r).all() or bool((r < 0).any()):
        raise ValueError("class rows must be finite and non-negative")
    total = r.sum(dim=-1, keepdim=True)
    if bool((total > 1.0 + 1e-9).any()):
        raise ValueError("every class row must sum to at most 1 (the l1 sensitivity 2 assumes it)")
    return torch.where(total > 1.0, r / total, r)


def neighbour_class_counts(rows: Tensor, edge_index: Tensor, num_nodes: int, *,
                           sources: Optional[Tensor] = None, claims: Optional[Tensor] = None) -> Tensor:
    r"""The noise-free :math:`\mathbf{A}\mathbf{R}`, float64 ``[N, C]``: row :math:`v` sums the rows of
    the nodes :math:`u` of the entries :math:`(u, v)` of ``edge_index`` (an undirected simple graph
    lists each edge in both directions, so every neighbour counts once). With ``sources`` (a boolean
    ``[N]`` mask), a source's row counts twice and the sources' own rows are zero; with ``claims`` (a
    finite non-negative ``[N]`` vector), each edge is split between its ends in proportion to their
    claims (see the module; the sources' claims are then taken as 0)."""
    r = check_class_rows(rows)
    if r.size(0) != num_nodes:
        raise ValueError(f"class rows must have one row per node ({num_nodes}); got {r.size(0)}")
    if sources is not None:
        if not isinstance(sources, Tensor) or sources.dtype != torch.bool or sources.shape != (num_nodes,):
            raise ValueError(f"`sources` must be a boolean mask of {num_nodes} nodes")
        sources = sources.to(r.device)
    if claims is not None:
        if not isinstance(claims, Tensor) or not claims.is_floating_point() or claims.shape != (num_nodes,):
            raise ValueError(f"`claims` must be a floating-point vector of {num_nodes} nodes")
        c = claims.detach().to(device=r.device, dtype=torch.float64)
        if not torch.isfinite(c).all() or bool((c < 0).any()):
            raise ValueError("`claims` must be finite and non-negative")
        if sources is not None:
            c = torch.where(sources, torch.zeros_like(c), c)
        src, dst = edge_index[0], edge_index[1]
        total = c[src] + c[dst]
        share = torch.where(total > 0, 2.0 * c[dst] / torch.where(total > 0, total, torch.ones_like(total)),
                            torch.zeros_like(total))
        return scatter(share[:, None] * r[src], dst, dim=0, dim_size=num_nodes, reduce="sum")
    if sources is not None:
        r = torch.where(sources[:, None], 2.0 * r, r)
    counts = scatter(r[edge_index[0]], edge_index[1], dim=0, dim_size=num_nodes, reduce="sum")
    if sources is not None:
        counts[sources] = 0.0
    return counts


def ranked_pair_contrasts(counts: Tensor, order: Tensor) -> Tensor:
    r"""The ranked pair contrasts of every row of ``counts`` (float64 ``[N, ceil(C / 2)]``): column
    :math:`j < \lfloor C/2 \rfloor` is the count of the class ranked :math:`2j + 1` minus that of the class
    ranked :math:`2j + 2` in ``order`` (a permutation of the ``C`` classes per row, most likely first),
    and for odd ``C`` the last column is the count of the class ranked last. Every class enters one
    column with coefficient :math:`\pm 1`, so a change of :math:`\ell_1` norm :math:`s` in the counts
    changes the contrasts by at most :math:`s` (see the module). ``order`` must be public."""
    if not isinstance(counts, Tensor) or counts.dim() != 2 or not counts.is_floating_point():
        raise ValueError("`counts` must be a floating-point [N, C] matrix")
    n, num_classes = counts.shape
    if not isinstance(order, Tensor) or order.dtype != torch.long or order.shape != (n, num_classes):
        raise ValueError(f"`order` must be an integer [N, C] = [{n}, {num_classes}] tensor of class ranks")
    order = order.to(counts.device)
    expected = torch.arange(num_classes, device=counts.device).expand(n, num_classes)
    if not torch.equal(order.sort(dim=-1).values, expected):
        raise ValueError("every row of `order` must be a permutation of the classes 0..C-1")
    ranked = counts.detach().to(torch.float64).gather(1, order)
    pairs = num_classes // 2
    contrasts = ranked[:, 0:2 * pairs:2] - ranked[:, 1:2 * pairs:2]
    return torch.cat([contrasts, ranked[:, 2 * pairs:]], dim=-1)
