r"""The in-degree cap of a node-level sum aggregation, and the sensitivity it implies.

**The map.** Given an undirected simple graph :math:`G` and a cap :math:`D`, every node
:math:`u` keeps as in-neighbours (the rows it sums) the :math:`D` neighbours :math:`w` of
:math:`G` that come first in a fixed order of the pairs :math:`(u, w)`: the order of
:math:`(\pi_k(u, w), w)`, with :math:`\pi_k` a keyed integer hash of the pair (:func:`pair_priority`).
The order is a function of the pair and the key alone, never of the graph, so for every node
:math:`u` and every set :math:`S` of its neighbours, :math:`\mathrm{top}_D(S \setminus \{v\})`
is :math:`\mathrm{top}_D(S)` when :math:`v \notin \mathrm{top}_D(S)`, and
:math:`\mathrm{top}_D(S) \setminus \{v\}` plus at most one node (the :math:`(D+1)`-th of
:math:`S`, *promoted*) otherwise. The capped graph :math:`C_k(G)` is directed: in-degree at most
:math:`D`, out-degree unbounded. It is the per-node edge sampling of GAP's and ProGAP's code
(Sajadmanesh et al., USENIX Security 2023; WSDM 2024) made deterministic given the key.

**The sensitivity** (:func:`capped_sum_aggregation_node_sensitivity`). Let :math:`G` have
maximum degree at most :math:`M` (a public, declared bound: the guarantee covers those graphs),
rows of :math:`\mathbf{H}` in the unit ball, and :math:`G'` be :math:`G` with node :math:`v`'s
edges removed and its row zero (a fixed node universe, as every node-level release here). Then
:math:`\mathbf{S} = \mathbf{A}_{C_k(G)} \mathbf{H}` changes, for every key, by

.. math::
    \|\mathbf{S} - \mathbf{S}'\|_F^2 \;\le\; \min(D, M)^2 + c\,M, \qquad
    c = 4 \text{ if } D < M, \quad c = 1 \text{ otherwise},

*Proof.* Row :math:`v` goes from a sum of at most :math:`\min(D, d_v)` unit rows to zero. A row
:math:`u \ne v` changes only if its top-:math:`D` set changes, which needs :math:`v \in N(u)`
and :math:`v \in \mathrm{top}_D(N(u))` (the order is fixed, so removing a node ranked after the
:math:`D`-th leaves the first :math:`D` alone): at most :math:`d_v \le M` rows. Such a row loses
:math:`\mathbf{h}_v` and gains the promoted row, if :math:`u` has more than :math:`D`
neighbours (only possible when :math:`D < M`): a change of norm at most 2, else at most 1. No
other row changes: row :math:`u` is a function of :math:`N(u)` and of the rows of
:math:`\mathbf{H}`, and only :math:`v`'s row differs. :math:`\square` The bound is attained
(``tests/utils/test_degree_cap.py``): :math:`v` with :math:`M` neighbours of degree
:math:`D + 1` that each rank :math:`v` first, :math:`\mathbf{h}_v = e` and every other row
:math:`-e`.

**Why a cap needs the domain bound.** Without :math:`M` no cap of this kind has a bounded
sensitivity: :math:`v` may rank first at every one of its neighbours, and each of them then
promotes a new in-neighbour when :math:`v` leaves. GAP's and ProGAP's :math:`\sqrt D` (and the
uncapped :math:`\sqrt{D(D+1)}` with :math:`D` the maximum degree) count the rows that lose
:math:`v` but neither these promotions nor rows that rank :math:`v` beyond the cap; a graph
where the promotions break :math:`\sqrt{D(D+1)}` is in the tests. What the cap buys: the
sensitivity grows like :math:`\sqrt{D^2 + 4M}` instead of :math:`M`; at :math:`M = 1000`,
:math:`D = 50`: 80.6 against 1000.5 (12.4 times less noise for the same :math:`\epsilon`).

**The key.** The bound holds for every key, so the key needs no secrecy; it is drawn once per
layer (from the layer's generator when one is given, so seeded runs repeat) and kept with it,
so that every release of the layer aggregates over the same capped graph.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from ..accounting.validation import check_positive_int

__all__ = ["pair_priority", "cap_in_degree_csr", "cap_in_degree", "in_degree_cap_mask",
           "capped_sum_aggregation_node_sensitivity", "draw_cap_key"]

_MASK32 = 0xFFFFFFFF


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer finaliser (xor-shift-multiply), computed in int64 with every value below 2**63."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    return (x >> 16) ^ x


def pair_priority(target: Tensor, source: Tensor, key: int) -> Tensor:
    r"""The keyed priority :math:`\pi_k(u, w) \in [0, 2^{32})` of the ordered pairs
    ``(target[i], source[i])`` (int64 node ids below :math:`2^{32}`): a function of the pair and
    ``key`` only. Ties are broken by the source id in :func:`in_degree_cap_mask`, so the order of the
    pairs of one target is total."""
    k0, k1 = int(key) & _MASK32, (int(key) >> 32) & _MASK32
    t = _mix32(target.to(torch.int64) ^ k0)
    return _mix32((_mix32(t ^ (source.to(torch.int64) & _MASK32)) + k1) & _MASK32)


def cap_in_degree_csr(crow: Tensor, col: Tensor, cap: int, key: int) -> tuple[Tensor, Tensor]:
    r"""Keep, in each row ``u`` of a CSR adjacency (``crow``, ``col``; row ``u`` lists the
    in-neighbours whose rows ``u`` sums), the ``cap`` columns ``w`` first in the order of
    :math:`(\pi_k(u, w), w)` (:func:`in_degree_cap_mask`'s order). Returns the capped CSR, columns
    sorted within each row. The kept set of a row depends on that row's columns and the key only."""
    cap = check_positive_int(cap, "cap")
    n = crow.numel() - 1
    counts = crow.diff()
    if n == 0 or int(counts.max()) <= cap:
        return crow, col
    row = torch.repeat_interleave(torch.arange(n, device=col.device), counts)
    kept = in_degree_cap_mask(torch.stack([col.to(torch.int64), row]), n, cap, key)  # one order for both forms
    kept_row, kept_col = row[kept], col[kept]
    canonical = torch.sort(kept_row * (1 << 32) + kept_col).indices
    new_crow = torch.zeros(n + 1, dtype=crow.dtype, device=crow.device)
    new_crow[1:] = torch.cumsum(torch.clamp(counts, max=cap), 0)
    return new_crow, kept_col[canonical].to(col.dtype)


def in_degree_cap_mask(edge_index: Tensor, num_nodes: int, cap: int, key: int) -> Tensor:
    """The entries of ``edge_index`` (``[2, E]``, ``source -> target``) the cap keeps, as a boolean
    mask: for every target, its ``cap`` entries first in the order of (priority of the pair, source,
    position). Repeated entries count once each (clean the graph first to count pairs)."""
    cap = check_positive_int(cap, "cap")
    target, source = edge_index[1].to(torch.int64), edge_index[0].to(torch.int64)
    if target.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=edge_index.device)
    by_source = torch.sort(source, stable=True).indices  # ties of the priority: the source id, then position
    order = by_source[torch.sort(target[by_source] * (1 << 32) + pair_priority(target, source, key)[by_source],
                                 stable=True).indices]
    counts = torch.bincount(target, minlength=num_nodes)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.arange(order.numel(), device=order.device) - start[target[order]]
    mask = torch.zeros(target.numel(), dtype=torch.bool, device=edge_index.device)
    mask[order[rank < cap]] = True
    return mask


def cap_in_degree(edge_index: Tensor, num_nodes: int, cap: int, key: int) -> Tensor:
    """:func:`cap_in_degree_csr` on an ``edge_index`` (``[2, E]``, message ``source -> target``, row 1
    the target, PyG's ``flow="source_to_target"``): the kept entries, sorted by target then source."""
    if edge_index.numel() == 0:
        return edge_index
    target, source = edge_index[1].to(torch.int64), edge_index[0].to(torch.int64)
    order = torch.sort(target * (1 << 32) + source).indices
    counts = torch.bincount(target, minlength=num_nodes)
    crow = torch.zeros(num_nodes + 1, dtype=torch.int64, device=edge_index.device)
    crow[1:] = torch.cumsum(counts, 0)
    crow, col = cap_in_degree_csr(crow, source[order], cap, key)
    target = torch.repeat_interleave(torch.arange(num_nodes, device=col.device), crow.diff())
    return torch.stack([col, target]).to(edge_index.dtype)


def capped_sum_aggregation_node_sensitivity(max_degree: int, degree_cap: Optional[int]) -> float:
    r"""Node-level :math:`\ell_2` sensitivity of the sum aggregation over the in-degree-capped graph
    (module notes): :math:`\sqrt{\min(D, M)^2 + cM}`, :math:`c = 4` if :math:`D < M` else 1, with
    :math:`M` = ``max_degree`` (the declared bound of the input graph) and :math:`D` =
    ``degree_cap``. ``degree_cap=None`` (no cap) is :math:`\sqrt{M(M+1)}`."""
    m = check_positive_int(max_degree, "max_degree")
    d = m if degree_cap is None else check_positive_int(degree_cap, "degree_cap")
    return math.sqrt(min(d, m) ** 2 + (4.0 if d < m else 1.0) * m)


def draw_cap_key(generator: Optional[torch.Generator] = None) -> int:
    """A 64-bit key for :func:`pair_priority`: from ``generator`` when given (seeded runs repeat), else
    from the operating system's randomness."""
    if generator is None:
        import secrets
        return secrets.randbits(64)
    words = torch.randint(0, 1 << 32, (2,), generator=generator, device=generator.device, dtype=torch.int64)
    return int(words[0]) | (int(words[1]) << 32)
