r"""Lazy PPR of every seed on a released graph whose seed row is restored to the truth.

Personalized Edge-Flipping (the baseline of Wei, Chien and Li, NeurIPS 2024, arXiv:2407.00077,
Sec. 4 "Baselines") runs the noise-free lazy PPR of seed :math:`v` on the randomised graph
:math:`\tilde{\mathbf{A}}` with :math:`v`'s own row and column put back to the truth (the seed
knows its own edges):
:math:`\mathbf{A}_v = \tilde{\mathbf{A}} + \mathbf{E}_v`, where :math:`\mathbf{E}_v` is
non-zero only in row and column :math:`v`. Building one graph per seed would cost
:math:`C` copies of a dense-ish graph. Instead all seeds share :math:`\tilde{\mathbf{A}}`
and each step is

.. math::
    \mathbf{A}_v \mathbf{D}_v^{-1}\mathbf{s}
        = \tilde{\mathbf{A}}\,(\mathbf{D}_v^{-1}\mathbf{s})
          + \mathbf{E}_v\,(\mathbf{D}_v^{-1}\mathbf{s}),

one batched sparse-dense product with :math:`\tilde{\mathbf{A}}` for all columns plus a
correction over the few pairs where :math:`v`'s true and released rows differ;
:math:`\mathbf{D}_v` differs from :math:`\tilde{\mathbf{D}}` on those pairs' endpoints only.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .adjacency import adjacency_csr, inverse_degree
from .lazy_ppr import seed_matrix

__all__ = ["lazy_ppr_restoring_seed_edges"]


@torch.no_grad()
def lazy_ppr_restoring_seed_edges(released_edge_index: Tensor, edge_index: Tensor, num_nodes: int, seed_index: Any,
                                  *, alpha: float, num_iterations: int) -> Tensor:
    """Lazy PPR ``[N, C]`` (float64) of each seed on the released graph with its own edges restored.

    Both edge indices must be undirected, coalesced and without self-loops (as
    :func:`~pyg_private.utils.simple_undirected` and
    :func:`~pyg_private.mechanisms.flip_edges` return them). Column ``c`` equals
    :func:`~pyg_private.utils.lazy_ppr` of ``seed_index[c]`` on the released graph
    whose pairs at ``seed_index[c]`` carry their true bits.
    """
    n = int(num_nodes)
    s0, seeds = seed_matrix(seed_index, n, device=edge_index.device)
    num_cols = seeds.numel()
    adj, deg_released = adjacency_csr(released_edge_index, n)
    r_ptr, r_col = adj.crow_indices(), adj.col_indices()
    truth, true_deg = adjacency_csr(edge_index, n)
    t_ptr, t_col = truth.crow_indices(), truth.col_indices()

    rows, cols, signs = [], [], []
    for c, v in enumerate(seeds.tolist()):
        released = r_col[r_ptr[v]:r_ptr[v + 1]]
        true = t_col[t_ptr[v]:t_ptr[v + 1]]
        added = true[~torch.isin(true, released)]  # true edges the release dropped: +1
        removed = released[~torch.isin(released, true)]  # released non-edges: -1
        rows += [added, removed]
        cols.append(torch.full((added.numel() + removed.numel(),), c, dtype=torch.long, device=seeds.device))
        signs += [torch.ones(added.numel(), dtype=torch.float64, device=seeds.device),
                  -torch.ones(removed.numel(), dtype=torch.float64, device=seeds.device)]
    row = torch.cat(rows)
    col = torch.cat(cols)
    sign = torch.cat(signs)
    seed_of = seeds[col]  # the seed of each correction's column

    deg = deg_released.unsqueeze(-1).expand(n, num_cols).clone()
    deg.index_put_((row, col), sign, accumulate=True)  # a neighbour's degree moves by one
    arange = torch.arange(num_cols, device=seeds.device)
    deg[seeds, arange] = true_deg[seeds]
    deg_inv = inverse_degree(deg)

    beta = 1.0 - float(alpha)
    s = s0.clone()
    scaled = torch.empty_like(s)
    for _ in range(int(num_iterations)):
        torch.mul(s, deg_inv, out=scaled)
        z = adj @ scaled
        z.index_put_((row, col), sign * scaled[seed_of, col], accumulate=True)  # (E_v y)_u = e_u y_v
        z.index_put_((seed_of, col), sign * scaled[row, col], accumulate=True)  # (E_v y)_v = sum_u e_u y_u
        s = z.add_(s).mul_(0.5 * beta)
        s[seeds, arange] += 1.0 - beta
    return s
