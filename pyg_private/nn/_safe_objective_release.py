r"""The floating-point-safe release of GCON's head (:class:`~pyg_private.nn.PerturbedAPPRConv` with
``sampler="safe"``): an approximate minimiser whose distance to the exact one is *certified*,
released on a grid with exact rounded Gaussian noise that covers that distance.

The ideal mechanism is GCON's (Wei et al. 2024, Theorem 1) in exact arithmetic: the exact
propagation :math:`Z`, noise :math:`B` from the continuous density, the exact minimiser
:math:`\Theta^*`. What runs differs from it in three ways, each bounded by a public quantity:

* :math:`\tilde Z`, the float64 propagation: every row within :math:`\eta` (l2) of :math:`Z`
  (:func:`propagation_error_bound`);
* :math:`\tilde B`, drawn from exact integer samplers, within :math:`e_B` (Frobenius) of a
  continuous :math:`B` outside an event of probability :math:`\delta_F`
  (:mod:`pyg_private.mechanisms.coupled_objective_noise`);
* :math:`\hat\Theta`, the solver's output, whose exact gradient on :math:`(\tilde Z, \tilde B)` is
  bounded from its float64 evaluation (:func:`~pyg_private.utils.newton_solver.gradient_norm_bound`).

The objective is :math:`\mu`-strongly convex (:math:`\mu = \Lambda + \Lambda'`), so
:math:`\|\hat\Theta - \Theta^*\|_F \le \|\nabla f_{Z, B}(\hat\Theta)\|_F/\mu`, and

.. math::
    \|\nabla f_{Z,B}(\hat\Theta)\|_F \le \underbrace{\|\nabla f_{\tilde Z,\tilde B}(\hat\Theta)\|_F}_{\text{certified}}
      + \frac{e_B}{n_1} + \eta\big(c_1\sqrt c + (1 + \eta)c_2\|\hat\Theta\|_F\big)

(the loss derivative is bounded by :math:`c_1` and :math:`c_2`-Lipschitz; :math:`\|\tilde z_i\| \le 1 + \eta`).
The release requires this to be at most the public :math:`\gamma` (:func:`plan_safe_fit`: the
solver's share is ``10 * tol`` plus :math:`(n_1 + d + 64)2^{-44}` times the size of the gradient's
terms, the level float64 can certify), so
:math:`r = \gamma/\mu` bounds the distance, and
:mod:`pyg_private.accounting.approximate_minimizer` gives the guarantee of
:math:`g(\mathrm{round}(\hat\Theta/g) + K)`, :math:`K` exact rounded Gaussian noise of standard
deviation :math:`(r + \sqrt{dc}\,g)/(g\mu_G)`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from ..accounting.approximate_minimizer import MinimizerBudget
from ..accounting.gdp import gdp_mu
from ..mechanisms.coupled_objective_noise import CoupledNoisePlan, plan_coupled_objective_noise
from ..sampling import RoundedNoiseSampler
from ..sampling.grid import choose_granularity, from_grid, round_to_grid, validate_granularity

__all__ = ["SafeFitPlan", "plan_safe_fit", "propagation_error_bound", "certified_distance_ok", "release_on_grid"]

_UNIT = 2.0 ** -53


@dataclass(frozen=True)
class SafeFitPlan:
    """Public quantities of one safe fit (all fixed before the charge)."""

    budget: MinimizerBudget
    noise: CoupledNoisePlan
    propagation_error: float  # eta: l2 bound per row of the float64 propagation's error
    solver_target: float  # the part of gamma left to the solver's certified gradient norm
    gradient_target: float  # gamma
    theta_bound: float  # T: a Frobenius bound of the head on the coupling event
    radius: float  # r = gamma / mu
    granularity: float
    release_std: float  # sigma_Z, in the head's units
    mu_gaussian: float  # the closeness noise is mu-GDP for a shift of the radius (with its rounding)


def propagation_error_bound(num_nodes: int, alpha: float, steps: tuple, dim: int,
                            residual: Optional[float] = None) -> float:
    r"""An l2 bound per row on the float64 propagation's distance to the exact :math:`Z`.

    One step :math:`(1-\alpha)\tilde A H + \alpha X` with entries in :math:`[-1, 1]` and a
    row-stochastic :math:`\tilde A` of at most :math:`N` entries per row rounds each entry by at
    most :math:`(N + 5)u`; the steps contract, so :math:`m` steps stay within :math:`m(N + 5)u`.
    For ``steps=inf`` the caller passes the float ``residual``
    :math:`\|H - (1-\alpha)\tilde AH - \alpha X\|_\infty` of the returned iterate, and the fixed point
    is within :math:`(\text{residual} + 2(N + 5)u)/\alpha`. Blocks of :math:`Z` share a row through
    a :math:`1/s` factor: the row bound is :math:`\sqrt{d_1}` times the largest entry bound plus
    :math:`2u` (that division), raised 1%."""
    per_step = (int(num_nodes) + 5) * _UNIT
    worst = 0.0
    for m in steps:
        if math.isinf(m):
            if residual is None:
                raise ValueError("steps=inf needs the residual of the returned iterate")
            worst = max(worst, (residual + 2.0 * per_step) / alpha)
        else:
            worst = max(worst, int(m) * per_step)
    return 1.01 * math.sqrt(max(int(dim), 1)) * (worst + 2.0 * _UNIT)  # + the division by s


def plan_safe_fit(*, budget: MinimizerBudget, beta: float, regularization: float, dim: int, num_classes: int,
                  num_rows: int, constants: tuple[float, float, float], propagation_error: float, tol: float,
                  grid_tolerance: float, granularity: Optional[float] = None) -> SafeFitPlan:
    r"""Fix every public quantity of a safe fit (module docstring); raises ``ValueError`` before any
    charge when the grid or the exact samplers cannot hold the release."""
    c1, c2, _ = constants
    mu = float(regularization)
    n1, c, d = int(num_rows), int(num_classes), int(dim)
    noise = plan_coupled_objective_noise(d, c, beta, budget.delta_coupling)
    eta = float(propagation_error)
    # the gradient's terms are at most `scale` (Frobenius) at the exact minimiser; float64 cannot
    # certify a gradient much below (n1 + d) u times that, so the solver gets 10 tol plus that floor
    scale = math.sqrt(c) * (c1 * (1.0 + eta) + (noise.radius_bound + noise.error_bound) / n1)
    solver = 10.0 * float(tol) + (n1 + d + 64) * 2.0 ** -44 * scale
    theta_bound = (scale + solver) / mu
    gamma = solver + noise.error_bound / n1 + eta * (c1 * math.sqrt(c) + (1.0 + eta) * c2 * theta_bound)
    radius = gamma / mu
    mu_g = gdp_mu(epsilon=budget.epsilon_close, delta=budget.delta_gaussian)
    coords = d * c
    if granularity is None:
        g = choose_granularity(scale=radius / mu_g, sensitivity=radius, dim=coords, norm="l2",
                               tolerance=grid_tolerance)
    else:
        g = validate_granularity(granularity, scale=radius / mu_g, sensitivity=radius, dim=coords, norm="l2")
    std = (radius + math.sqrt(coords) * g) / mu_g
    RoundedNoiseSampler("gaussian", std / g)  # the exact sampler's range, checked before any charge
    return SafeFitPlan(budget=budget, noise=noise, propagation_error=eta, solver_target=solver, gradient_target=gamma,
                       theta_bound=theta_bound, radius=radius, granularity=g, release_std=std, mu_gaussian=mu_g)


def certified_distance_ok(plan: SafeFitPlan, certified_gradient: float, theta: Tensor, second_bound: float) -> bool:
    """Whether the solver's head meets the plan: its certified gradient plus the propagation term
    of the module docstring's bound stays within the public target (the coupling term is public)."""
    eta = plan.propagation_error
    slope = eta * (1.0 + eta) * second_bound
    return certified_gradient + slope * float(theta.norm()) <= plan.solver_target + slope * plan.theta_bound


def release_on_grid(theta: Tensor, plan: SafeFitPlan, source) -> Tensor:
    """``g * (round(theta / g) + K)`` in float64, ``K`` exact rounded Gaussian noise."""
    g = plan.granularity
    steps = round_to_grid(theta, g)
    flat = steps.view(-1)
    flat.add_(RoundedNoiseSampler("gaussian", plan.release_std / g).sample(flat.numel(), source))
    return from_grid(steps, g, torch.float64)
