"""Euclidean projections used as post-processing of released vectors."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["project_simplex", "project_l1_ball"]


def project_simplex(v: Tensor, radius: float = 1.0) -> Tensor:
    r"""Project every **column** of ``v`` onto :math:`\{x \ge 0, \sum_i x_i = r\}`
    (Duchi et al. 2008, sort-based, vectorised over columns)."""
    n = v.size(0)
    u, _ = torch.sort(v, dim=0, descending=True)
    css = u.cumsum(dim=0) - radius
    k = torch.arange(1, n + 1, dtype=v.dtype, device=v.device).unsqueeze(-1)
    cond = u - css / k > 0
    rho = cond.to(torch.long).cumsum(dim=0).argmax(dim=0, keepdim=True)  # last index where cond holds
    theta = css.gather(0, rho) / (rho + 1).to(v.dtype)
    return (v - theta).clamp_min(0)


def project_l1_ball(v: Tensor, radius: float = 1.0) -> Tensor:
    r"""Project every column of ``v`` onto the :math:`\ell_1` ball of radius ``radius``."""
    inside = v.abs().sum(dim=0, keepdim=True) <= radius
    projected = torch.sign(v) * project_simplex(v.abs(), radius)
    return torch.where(inside, v, projected)
