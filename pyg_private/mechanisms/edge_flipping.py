r"""Randomized response on the adjacency matrix (edge flipping), sampled in O(|E| + flips).

Every unordered pair :math:`\{i, j\}`, :math:`i < j`, of an undirected simple graph is
one bit. Each bit is reported truthfully with probability :math:`q` and flipped
otherwise: a true edge survives with probability :math:`q`, a non-edge appears with
probability :math:`1 - q`. Instead of visiting all :math:`n(n-1)/2` pairs we walk the
pairs in row-major order and jump from one flipped pair to the next by geometric gaps
(the gaps of a Bernoulli(:math:`1-q`) process are i.i.d. Geometric(:math:`1-q`)), which
has exactly the same distribution; the released edge set is the symmetric difference
of the true edges and the flipped pairs, found by binary search.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..utils.graph_validation import check_edge_index

__all__ = ["flip_edges"]


def _pair_ids(edge_index: Tensor, num_nodes: int) -> Tensor:
    row, col = edge_index
    keep = row < col
    return row[keep] * num_nodes + col[keep]


def _bernoulli_positions(total: int, prob: float, *, generator: torch.Generator | None,
                         device: torch.device) -> Tensor:
    """Sorted positions in ``[0, total)`` where an i.i.d. Bernoulli(``prob``) sequence is 1."""
    chunks = []
    last = -1
    if prob <= 0.0 or total <= 0:
        return torch.empty(0, dtype=torch.long, device=device)
    log_stay = math.log1p(-prob) if prob < 1.0 else -math.inf
    while last < total - 1:
        expected = (total - 1 - last) * prob
        m = int(expected + 6.0 * math.sqrt(expected) + 16)
        u = 1.0 - torch.rand(m, dtype=torch.float64, generator=generator, device=device)  # (0, 1]
        # P(floor(log u / log(1-p)) >= k) = (1-p)^k: a Geometric gap on {1, 2, ...}
        gaps = torch.floor(torch.log(u) / log_stay).long() + 1
        pos = torch.cumsum(gaps, 0) + last
        if int(pos[-1]) >= total:
            chunks.append(pos[pos < total])
            break
        chunks.append(pos)
        last = int(pos[-1])
    return torch.cat(chunks)


def _in_sorted(values: Tensor, sorted_set: Tensor) -> Tensor:
    """Membership of ``values`` in the sorted 1-D ``sorted_set``, by binary search."""
    if sorted_set.numel() == 0:
        return torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    idx = torch.searchsorted(sorted_set, values).clamp_(max=sorted_set.numel() - 1)
    return sorted_set[idx] == values


def flip_edges(edge_index: Tensor, num_nodes: int, q: float, *, keep_nodes: Tensor | None = None,
               generator: torch.Generator | None = None) -> Tensor:
    r"""Randomized response on every pair of nodes.

    Args:
        edge_index (Tensor): undirected simple graph, each edge in both directions, ids
            in :math:`[0, n)`.
        num_nodes (int): :math:`n`, the public number of nodes (every pair of them is
            randomised). Required: a count inferred from the largest id of the private
            ``edge_index`` would randomise different pairs for a graph with an isolated
            last node and for the same graph plus an edge at that node.
        q (float): probability of reporting a pair's true bit, in :math:`[1/2, 1)`.
        keep_nodes (Tensor, optional): nodes whose pairs are reported truthfully (not
            randomised): the personalized setting, where a seed already knows its own
            edges (the personalized Edge-Flipping baseline of Wei, Chien and Li, NeurIPS 2024,
            arXiv:2407.00077, Sec. 4 "Baselines", which excludes the seed's edges from flipping).
        generator (torch.Generator, optional): reproducibility only.

    Returns:
        The randomised graph's ``edge_index`` (both directions, sorted, no self-loops).
    """
    if num_nodes is None:
        raise ValueError("`num_nodes` is required: the number of nodes is public input and is never inferred from "
                         "the private edges")
    n = check_edge_index(edge_index, num_nodes)  # every id in [0, n), before any bit is drawn
    device = edge_index.device
    edge_index = edge_index.long()
    true_ids = torch.unique(_pair_ids(edge_index, n))  # i * n + j, i < j, sorted
    kept_node = torch.zeros(n, dtype=torch.bool, device=device)
    if keep_nodes is not None:
        keep = torch.as_tensor(keep_nodes, device=device).long().view(-1)
        if keep.numel() and (int(keep.min()) < 0 or int(keep.max()) >= n):
            raise ValueError(f"`keep_nodes` must lie in [0, {n}); got range [{int(keep.min())}, {int(keep.max())}]")
        kept_node[keep] = True

    # flipped pairs, row-major over the upper triangle: row i holds pairs (i, i+1..n-1)
    row_len = torch.arange(n - 1, -1, -1, dtype=torch.long, device=device)
    offsets = torch.zeros(n + 1, dtype=torch.long, device=device)
    torch.cumsum(row_len, 0, out=offsets[1:])
    pos = _bernoulli_positions(n * (n - 1) // 2, 1.0 - q, generator=generator, device=device)
    i = torch.searchsorted(offsets, pos, right=True) - 1
    j = pos - offsets[i] + i + 1
    del pos
    free = ~(kept_node[i] | kept_node[j])  # pairs at a kept node are reported as they are
    flipped = (i * n + j)[free]
    del i, j, free

    surviving = true_ids[~_in_sorted(true_ids, flipped)]
    appearing = flipped[~_in_sorted(flipped, true_ids)]
    del flipped
    return _symmetric_edge_index(_merge_sorted(surviving, appearing), n)


def _merge_sorted(a: Tensor, b: Tensor) -> Tensor:
    """The sorted union of two sorted, disjoint 1-D tensors (no global sort)."""
    out = torch.empty(a.numel() + b.numel(), dtype=a.dtype, device=a.device)
    out[torch.arange(a.numel(), device=a.device) + torch.searchsorted(b, a)] = a
    out[torch.arange(b.numel(), device=b.device) + torch.searchsorted(a, b)] = b
    return out


def _symmetric_edge_index(upper_ids: Tensor, n: int) -> Tensor:
    """Both directions of the sorted upper-triangle pairs ``i * n + j``, coalesced.

    Row ``r`` of the result lists its smaller neighbours (the pairs ``(i, r)``, sorted by
    ``i``) and then its larger ones (the pairs ``(r, j)``, already sorted): one sort of
    the pairs by column instead of a sort of both directions.
    """
    device = upper_ids.device
    up_row, up_col = upper_ids // n, upper_ids % n
    by_col = torch.argsort(up_col * n + up_row)  # the transpose, in (col, row) order
    low_row, low_col = up_col[by_col], up_row[by_col]
    del by_col
    n_low = torch.bincount(low_row, minlength=n)
    n_up = torch.bincount(up_row, minlength=n)
    ptr = torch.zeros(n + 1, dtype=torch.long, device=device)
    torch.cumsum(n_low + n_up, 0, out=ptr[1:])
    low_start = torch.zeros(n + 1, dtype=torch.long, device=device)
    torch.cumsum(n_low, 0, out=low_start[1:])
    up_start = torch.zeros(n + 1, dtype=torch.long, device=device)
    torch.cumsum(n_up, 0, out=up_start[1:])
    out = torch.empty(2, 2 * upper_ids.numel(), dtype=torch.long, device=device)
    rank = torch.arange(low_row.numel(), device=device) - low_start[low_row]
    where = ptr[low_row] + rank
    out[0, where], out[1, where] = low_row, low_col
    rank = torch.arange(up_row.numel(), device=device) - up_start[up_row]
    where = ptr[up_row] + n_low[up_row] + rank
    out[0, where], out[1, where] = up_row, up_col
    return out
