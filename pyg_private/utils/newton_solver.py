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

__all__ = ["SeparableSolution", "solve_separable_ridge", "gradient_norm_bound"]


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
    dev = z.device  # everything on the data's device (a CUDA fit never copies the rows to the CPU)
    lin = torch.zeros(d, c, dtype=torch.float64, device=dev) if linear_term is None else \
        linear_term.to(dev, torch.float64)
    theta = torch.zeros(d, c, dtype=torch.float64, device=dev) if theta0 is None else \
        theta0.to(dev, torch.float64).clone()
    eye = torch.eye(d, dtype=torch.float64, device=dev)
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
        t = torch.ones(c, dtype=torch.float64, device=dev)
        for _ in range(60):
            trial = theta + t * step
            ok = _objective(z, y, trial, loss, regularization, lin) <= f0 + 1e-4 * t * slope + 1e-15 * f0.abs()
            # near the minimiser the decrease (about grad^2 / lambda) falls below the objective's rounding
            # (about n u |f|) and Armijo would halve t to nothing: there a step that lowers the gradient
            # norm is taken (measured: a Cora fit with lambda = 0.01 stalled at 1.6e-9 without this)
            trial_grad = z.T @ loss.first(z @ trial, y) / n + regularization * trial + lin / n
            ok = ok | (trial_grad.norm(dim=0) < norms)
            if bool(ok.all()):
                break
            t = torch.where(ok, t, 0.5 * t)
        theta = theta + t * step
    return SeparableSolution(theta=theta, grad_norm=grad_norm, iterations=it, converged=grad_norm <= tol)


_UNIT = 2.0 ** -53


def gradient_norm_bound(z: Tensor, y: Tensor, theta: Tensor, loss: SeparableLoss, *, regularization: float,
                        linear_term: Tensor, second_bound: float) -> float:
    r"""An upper bound on the **exact** Frobenius norm of :math:`\nabla f(\Theta)` (the objective of
    :func:`solve_separable_ridge`), the float64 inputs taken as exact, from its float64 evaluation.

    Standard rounding-error analysis (Higham, "Accuracy and Stability of Numerical Algorithms",
    Sec. 3.1; :math:`\gamma_k = ku/(1 - ku)`, :math:`u = 2^{-53}`): the margins
    :math:`Z\Theta` are off by at most :math:`E_1 = \gamma_d |Z||\Theta|`; the loss derivative by at
    most ``second_bound`` :math:`\cdot E_1 + 64u(|\ell'| + 1/c)` (its Lipschitz constant
    :math:`c_2` times the margin error, plus the evaluation of the sigmoid or the square root); the
    product :math:`Z^\top\ell'` by :math:`\gamma_n |Z|^\top|\ell'|` more; the three terms of the sum
    by :math:`3u` of their magnitudes. The bound on the error matrix is doubled (its own
    evaluation rounds) and added to the computed norm, itself raised by :math:`(dc + 2)u`."""
    z, y, theta, lin = (t.to(z.device, torch.float64) for t in (z, y, theta, linear_term))
    n, d = z.shape
    c = theta.size(1)

    def gamma(k: int) -> float:
        return k * _UNIT / (1.0 - k * _UNIT)

    margins = z @ theta
    first = loss.first(margins, y)
    data_term = z.T @ first / n
    grad = data_term + regularization * theta + lin / n
    az = z.abs()
    margin_error = gamma(d + 1) * (az @ theta.abs())
    first_error = second_bound * margin_error + 64 * _UNIT * (first.abs() + 1.0 / loss.c)
    product_error = (gamma(n + 1) * (az.T @ first.abs()) + az.T @ first_error) / n
    sum_error = 3 * _UNIT * (data_term.abs() + regularization * theta.abs() + lin.abs() / n)
    error = 2.0 * (product_error + sum_error)
    return float(grad.norm()) * (1.0 + (d * c + 2) * _UNIT) + float(error.norm()) * (1.0 + 2.0 ** -20)
