r"""Randomized response on the adjacency matrix (edge flipping), sampled in O(|E| + |E_out|).

Every unordered pair :math:`\{i, j\}`, :math:`i < j`, of an undirected simple graph is
one bit. Each bit is reported truthfully with probability :math:`q` and flipped
otherwise: a true edge survives with probability :math:`q`, a non-edge appears with
probability :math:`1 - q`. Instead of visiting all :math:`n(n-1)/2` pairs we draw the
number of appearing non-edges from its binomial law and then a uniform subset of the
non-edges of that size, which has exactly the same distribution.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["flip_edges"]


def _pair_ids(edge_index: Tensor, num_nodes: int) -> Tensor:
    row, col = edge_index
    keep = row < col
    return row[keep] * num_nodes + col[keep]


def flip_edges(edge_index: Tensor, num_nodes: int, q: float, *, keep_nodes: Tensor | None = None,
               generator: torch.Generator | None = None) -> Tensor:
    r"""Randomized response on every pair of nodes.

    Args:
        edge_index (Tensor): undirected simple graph, each edge in both directions.
        num_nodes (int): :math:`n`.
        q (float): probability of reporting a pair's true bit, in :math:`[1/2, 1)`.
        keep_nodes (Tensor, optional): nodes whose pairs are reported truthfully (not
            randomised): the personalized setting, where a seed already knows its own
            edges (spec ``noisy_diffusion.md`` §4.2).
        generator (torch.Generator, optional): reproducibility only.

    Returns:
        The randomised graph's ``edge_index`` (both directions, sorted, no self-loops).
    """
    device = edge_index.device
    n = int(num_nodes)
    true_ids = torch.unique(_pair_ids(edge_index, n))
    kept_node = torch.zeros(n, dtype=torch.bool, device=device)
    if keep_nodes is not None:
        kept_node[torch.as_tensor(keep_nodes, device=device).long().view(-1)] = True
    exempt = kept_node[true_ids // n] | kept_node[true_ids % n]  # true edges at a kept node: reported as they are
    keep = torch.rand(true_ids.numel(), generator=generator, device=device, dtype=torch.float64) < q
    kept = true_ids[keep | exempt]

    m = n - int(kept_node.sum())  # pairs among the other nodes are randomised
    num_non_edges = m * (m - 1) // 2 - int((~exempt).sum())
    count = torch.tensor(float(num_non_edges), dtype=torch.float64, device=device)
    num_new = int(torch.binomial(count, torch.tensor(1.0 - q, dtype=torch.float64, device=device),
                                 generator=generator).item()) if num_non_edges > 0 else 0

    chosen = torch.empty(0, dtype=torch.long, device=device)
    while chosen.numel() < num_new:
        missing = num_new - chosen.numel()
        # i*n + j uniform over [0, n^2); keep i < j off the kept nodes: uniform over the eligible pairs
        draw = torch.randint(0, n * n, (int(2 * missing * n * n / max(m * (m - 1), 1)) + 64,), generator=generator,
                             device=device)
        i, j = draw // n, draw % n
        cand = torch.unique(draw[(i < j) & ~kept_node[i] & ~kept_node[j]])
        cand = cand[~torch.isin(cand, true_ids) & ~torch.isin(cand, chosen)]
        chosen = torch.cat([chosen, cand])
    if chosen.numel() > num_new:  # a uniform subset of a uniform superset is uniform
        perm = torch.randperm(chosen.numel(), generator=generator, device=device)[:num_new]
        chosen = chosen[perm]

    ids = torch.sort(torch.cat([kept, chosen])).values
    row, col = ids // n, ids % n
    out = torch.stack([torch.cat([row, col]), torch.cat([col, row])])
    order = torch.argsort(out[0] * n + out[1])
    return out[:, order]
