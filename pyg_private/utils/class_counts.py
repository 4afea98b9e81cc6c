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
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter

__all__ = ["neighbour_class_counts", "check_class_rows", "CLASS_COUNTS_EDGE_L1_SENSITIVITY"]

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
                           sources: Optional[Tensor] = None) -> Tensor:
    r"""The noise-free :math:`\mathbf{A}\mathbf{R}`, float64 ``[N, C]``: row :math:`v` sums the rows of
    the nodes :math:`u` of the entries :math:`(u, v)` of ``edge_index`` (an undirected simple graph
    lists each edge in both directions, so every neighbour counts once). With ``sources`` (a boolean
    ``[N]`` mask), a source's row counts twice and the sources' own rows are zero (see the module)."""
    r = check_class_rows(rows)
    if r.size(0) != num_nodes:
        raise ValueError(f"class rows must have one row per node ({num_nodes}); got {r.size(0)}")
    if sources is not None:
        if not isinstance(sources, Tensor) or sources.dtype != torch.bool or sources.shape != (num_nodes,):
            raise ValueError(f"`sources` must be a boolean mask of {num_nodes} nodes")
        sources = sources.to(r.device)
        r = torch.where(sources[:, None], 2.0 * r, r)
    counts = scatter(r[edge_index[0]], edge_index[1], dim=0, dim_size=num_nodes, reduce="sum")
    if sources is not None:
        counts[sources] = 0.0
    return counts
