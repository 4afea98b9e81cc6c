r"""Noise-free lazy personalized PageRank: the ground truth the private versions are judged by.

Lazy PPR (Wei, Chien and Li 2024, Eq. 11) with restart probability :math:`\alpha`
(:math:`\beta = 1 - \alpha`) and the mass-preserving lazy walk
:math:`\mathbf{W} = \tfrac12(\mathbf{I} + \mathbf{A}\mathbf{D}^{-1})`, iterated :math:`K` times
from the seed vector itself:

.. math::
    \mathbf{s}^{(0)} = \mathbf{s}, \qquad
    \mathbf{s}^{(k)} = \beta\,\mathbf{W}\mathbf{s}^{(k-1)} + (1 - \beta)\,\mathbf{s}.

The paper's evaluation uses 100 such power iterations from :math:`\mathbf{e}_{\text{seed}}`.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ..accounting.validation import check_restart_probability
from .adjacency import adjacency_csr, inverse_degree
from .csr_product import CsrProduct
from .graph_validation import adjacency_to_edge_index, simple_undirected

__all__ = ["seed_matrix", "lazy_ppr"]


def check_seed_index(seed_index: Any, num_nodes: int, *, device: torch.device | str = "cpu") -> Tensor:
    """The validated ``seed_index`` (long ``[C]``, every id in ``[0, num_nodes)``)."""
    seeds = torch.as_tensor(seed_index, device=device)
    if seeds.numel() == 0:
        raise ValueError("`seed_index` is empty")
    if seeds.is_floating_point() or seeds.dtype == torch.bool:
        raise TypeError(f"`seed_index` must hold integer node ids; got dtype {seeds.dtype}")
    seeds = seeds.long().view(-1)
    if int(seeds.min()) < 0 or int(seeds.max()) >= num_nodes:
        raise ValueError(f"`seed_index` must lie in [0, {num_nodes}); got range "
                         f"[{int(seeds.min())}, {int(seeds.max())}]")
    return seeds


def seed_matrix(seed_index: Any, num_nodes: int, *, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """One-hot seed columns ``[N, C]`` (float64) and the validated ``seed_index`` (long ``[C]``)."""
    seeds = check_seed_index(seed_index, num_nodes, device=device)
    s = torch.zeros(num_nodes, seeds.numel(), dtype=torch.float64, device=device)
    s[seeds, torch.arange(seeds.numel(), device=device)] = 1.0
    return s, seeds


@torch.no_grad()
def lazy_ppr(edge_index: Any, num_nodes: Optional[int] = None, *, seed_index: Any = None,
             x: Optional[Tensor] = None, alpha: float = 0.2, num_iterations: int = 100,
             symmetrize: bool = False) -> Tensor:
    r"""Exact (noise-free) lazy PPR of Eq. 11 after ``num_iterations`` power iterations.

    Args:
        edge_index: ``edge_index``, ``SparseTensor`` or ``torch.sparse`` adjacency of an
            undirected, unweighted simple graph.
        num_nodes (int, optional): number of nodes.
        seed_index: seeds ``[C]``, one one-hot column each; or give ``x``.
        x (Tensor, optional): signal columns ``[N, C]``.
        alpha (float): restart probability in :math:`(0, 1)`. (default: :obj:`0.2`)
        num_iterations (int): :math:`K`. (default: :obj:`100`)
        symmetrize (bool): symmetrise a directed input instead of raising.

    Returns:
        float64 Tensor ``[N, C]``. All columns are computed together, one sparse-dense
        product per iteration.
    """
    alpha = check_restart_probability(alpha)
    if int(num_iterations) != num_iterations or num_iterations < 0:
        raise ValueError(f"`num_iterations` must be a non-negative integer; got {num_iterations!r}")
    if isinstance(x, Tensor) and num_nodes is None and x.dim() >= 1 and x.size(0) > 0:
        num_nodes = x.size(0)  # the signals' rows count isolated nodes too
        if isinstance(edge_index, Tensor) and edge_index.layout == torch.strided and edge_index.numel():
            num_nodes = max(num_nodes, int(edge_index.max()) + 1)
    ei, n = adjacency_to_edge_index(edge_index, num_nodes)
    ei, n = simple_undirected(ei, n, symmetrize=symmetrize)
    if (x is None) == (seed_index is None):
        raise ValueError("give exactly one of `x` or `seed_index`")
    if seed_index is not None:
        s0, _ = seed_matrix(seed_index, n, device=ei.device)
    else:
        s0 = x.to(device=ei.device, dtype=torch.float64)
        s0 = s0.unsqueeze(-1) if s0.dim() == 1 else s0
        if s0.dim() != 2 or s0.size(0) != n:
            raise ValueError(f"`x` must have shape [{n}, C]; got {tuple(x.shape)}")
    adj, deg = adjacency_csr(ei, n)
    deg_inv = inverse_degree(deg).unsqueeze(-1)
    beta = 1.0 - float(alpha)
    restart = (1.0 - beta) * s0
    s = s0.clone()
    scaled = torch.empty_like(s)
    product = CsrProduct(adj, unit_values=True)  # the C kernel where it runs, the same values otherwise
    for _ in range(int(num_iterations)):
        torch.mul(s, deg_inv, out=scaled)
        s = product(scaled, add=s, scale=0.5 * beta).add_(restart)  # (A scaled + s) beta/2 + restart
    return s
