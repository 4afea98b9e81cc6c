r"""Capped push-flow personalized PageRank (the deterministic core of DP-PushFlowCap).

Synchronous push on the lazy walk :math:`\mathbf{W} = \tfrac12(\mathbf{I} + \mathbf{A}\mathbf{D}^{-1})`
with restart probability :math:`\alpha`, after Epasto et al. (NeurIPS 2022) and the
google-research ``private_personalized_pagerank`` code. Residual :math:`\mathbf{r} =
\mathbf{e}_s`, estimate :math:`\mathbf{p} = 0`, pushed flow :math:`\mathbf{h} = 0`; at
each of :math:`T` iterations every node pushes at once

.. math::
    \mathbf{f} = \min(\mathbf{r}, \mathbf{c} - \mathbf{h}), \quad
    \mathbf{h} \mathrel{+}= \mathbf{f}, \quad
    \mathbf{p} \mathrel{+}= \alpha\,\mathbf{f}, \quad
    \mathbf{r} \mathrel{+}= -\mathbf{f} + (1 - \alpha)\,\mathbf{W}\mathbf{f},

with the cap :math:`c_v = \eta\, d_v` on the total flow node :math:`v` may push (the
seed uncapped in personalized use). Without caps this converges to lazy PPR.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .adjacency import adjacency_csr, inverse_degree
from .lazy_ppr import seed_matrix

__all__ = ["push_flow_cap_ppr"]


@torch.no_grad()
def push_flow_cap_ppr(edge_index: Tensor, num_nodes: int, seed_index: Any, *, alpha: float, num_iterations: int,
                      eta: float, personalized: bool) -> Tensor:
    """Capped push-flow PPR estimates ``p`` ``[N, C]`` (float64), one column per seed.

    ``edge_index`` must describe an undirected simple graph (see
    :func:`~pyg_private.utils.simple_undirected`). A node of degree 0 has cap 0 and
    never pushes, unless it is the personalized seed: then it keeps
    :math:`\\alpha + (1-\\alpha)/2` of what it pushes and the share it would send to
    neighbours is lost, as in the reference code.
    """
    n = int(num_nodes)
    residual, seeds = seed_matrix(seed_index, n, device=edge_index.device)
    adj, deg = adjacency_csr(edge_index, n)
    deg_inv = inverse_degree(deg).unsqueeze(-1)
    room = (eta * deg).unsqueeze(-1).expand_as(residual).clone()  # flow each node may still push
    if personalized:
        room[seeds, torch.arange(seeds.numel(), device=seeds.device)] = math.inf
    estimate = torch.zeros_like(residual)
    flow = torch.empty_like(residual)
    for _ in range(int(num_iterations)):
        torch.minimum(residual, room, out=flow)
        room.sub_(flow)
        estimate.add_(flow, alpha=alpha)
        spread = adj @ (flow * deg_inv)  # A D^-1 f
        residual.sub_(flow).add_(flow.add_(spread), alpha=0.5 * (1.0 - alpha))
    return estimate
