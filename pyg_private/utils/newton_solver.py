r"""Damped Newton solver for a ridge-regularised, per-class separable convex objective.

.. math::
    f(\Theta) = \frac{1}{n}\sum_{i=1}^{n}\sum_{j=1}^{c} \ell(z_i^\top\theta_j; y_{ij})
        + \frac{\lambda}{2}\lVert\Theta\rVert_F^2 + \frac{1}{n}\langle B, \Theta\rangle

The objective separates into ``c`` independent ``d``-dimensional strongly convex
problems (``lambda > 0``), solved together: Newton steps with the exact Hessian
:math:`\frac1n Z^\top \mathrm{diag}(\ell'') Z + \lambda I` and an Armijo backtracking line
search per class, in float64, until every class's gradient norm is at most ``tol``.
This is GCON's objective (Eq. 13) with ``lambda = Lambda + Lambda'``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .separable_loss import SeparableLoss

__all__ = ["SeparableSolution", "solve_separable_ridge"]


@dataclass
class SeparableSolution:
    """The minimiser and how well it was reached."""

    theta: Tensor  # [d, c], float64
    grad_norm: float  # the largest per-class gradient norm at ``theta``
    iterations: int
    converged: bool


def _objective(z: Tensor, y: Tensor, theta: Tensor, loss: SeparableLoss, lam: float, lin: Tensor) -> Tensor:
    """Per-class objective values ``[c]``."""
    n = z.size(0)
    return loss.value(z @ theta, y).sum(0) / n + 0.5 * lam * (theta * theta).sum(0) + (lin * theta).sum(0) / n


def solve_separable_ridge(z: Tensor, y: Tensor, loss: SeparableLoss, *, regularization: float,
                          linear_term: Optional[Tensor] = None, tol: float = 1e-10, max_iter: int = 100,
                          theta0: Optional[Tensor] = None) -> SeparableSolution:
    """Minimise :math:`f` above. ``z`` is ``[n, d]``, ``y`` the 0/1 targets ``[n, c]``,
    ``linear_term`` the matrix :math:`B` ``[d, c]`` (zero when ``None``)."""
    if not regularization > 0:
        raise ValueError(f"`regularization` must be > 0 (strong convexity); got {regularization!r}")
    z, y = z.to(torch.float64), y.to(torch.float64)
    n, d = z.shape
    c = y.size(1)
    lin = torch.zeros(d, c, dtype=torch.float64) if linear_term is None else linear_term.to(torch.float64)
    theta = torch.zeros(d, c, dtype=torch.float64) if theta0 is None else theta0.to(torch.float64).clone()
    eye = torch.eye(d, dtype=torch.float64)
    grad_norm = float("inf")
    for it in range(max_iter + 1):
        margins = z @ theta
        grad = z.T @ loss.first(margins, y) / n + regularization * theta + lin / n  # [d, c]
        norms = grad.norm(dim=0)
        grad_norm = float(norms.max())
        if grad_norm <= tol or it == max_iter:
            break
        weights = loss.second(margins, y)  # [n, c]
        hess = torch.einsum("ni,nc,nj->cij", z, weights, z) / n + regularization * eye  # [c, d, d]
        step = -torch.linalg.solve(hess, grad.T.unsqueeze(-1)).squeeze(-1).T  # [d, c]
        # Armijo backtracking, per class
        f0 = _objective(z, y, theta, loss, regularization, lin)
        slope = (grad * step).sum(0)  # < 0
        t = torch.ones(c, dtype=torch.float64)
        for _ in range(60):
            trial = theta + t * step
            ok = _objective(z, y, trial, loss, regularization, lin) <= f0 + 1e-4 * t * slope + 1e-15 * f0.abs()
            if bool(ok.all()):
                break
            t = torch.where(ok, t, 0.5 * t)
        theta = theta + t * step
    return SeparableSolution(theta=theta, grad_norm=grad_norm, iterations=it, converged=grad_norm <= tol)
