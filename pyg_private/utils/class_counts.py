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
"""
from __future__ import annotations

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


def neighbour_class_counts(rows: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""The noise-free :math:`\mathbf{A}\mathbf{R}`, float64 ``[N, C]``: row :math:`v` sums the rows of
    the sources :math:`u` of the entries :math:`(u, v)` of ``edge_index`` (an undirected simple graph
    lists each edge in both directions, so every neighbour counts once)."""
    r = check_class_rows(rows)
    if r.size(0) != num_nodes:
        raise ValueError(f"class rows must have one row per node ({num_nodes}); got {r.size(0)}")
    return scatter(r[edge_index[0]], edge_index[1], dim=0, dim_size=num_nodes, reduce="sum")
