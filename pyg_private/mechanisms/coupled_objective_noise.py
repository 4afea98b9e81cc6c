r"""GCON's objective noise drawn from exact integer samplers, with a proven distance to the continuous law.

Objective perturbation needs :math:`B \in \mathbb R^{d\times c}` whose columns have density
:math:`\propto e^{-\beta\|b\|_2}` (Wei et al., "GCON", arXiv:2407.05034, Alg. 2): a radius
:math:`a = \frac1\beta\sum_{i=1}^d E_i` (:math:`E_i \sim \mathrm{Exp}(1)`, an Erlang variable) times a
direction :math:`U/\|U\|_2`, :math:`U \sim N(0, I_d)`. A floating-point sampler cannot produce that
law (it has holes), and the proof, a change of variables over the density of :math:`B`, does not
survive rounding :math:`B` to a grid. This module instead draws a finite-precision :math:`\tilde B`
**coupled** with an exact continuous :math:`B`: it takes exact samples of the *rounded* variables
(:class:`~pyg_private.sampling.RoundedNoiseSampler`),

.. math::
    |K_i| = \mathrm{round}(s E_i) \ (\text{the magnitude of a rounded Laplace of scale } s), \qquad
    V_i = \mathrm{round}(s U_i),

so that the continuous :math:`E_i, U_i` behind them exist on the same probability space, and
returns :math:`\tilde b = \tilde a\, V/\|V\|_2` with :math:`\tilde a = \sum_i |K_i|/(s\beta)`. Per
column, :math:`|\tilde a - a| \le d/(2s\beta)` and
:math:`\|V/\|V\| - U/\|U\|\|_2 \le 2\|V/s - U\|_2/\|U\|_2 \le \sqrt d/(s\,\|U\|_2)`. On the event
:math:`a \le A` and :math:`\|U\|_2 \ge \tau`, therefore,

.. math::
    \|\tilde b - b\|_2 \le 1.01\Big[\frac{d}{2s\beta} + A\Big(\min\Big(\frac{\sqrt d}{s\tau}, 2\Big)
        + (2d + 8)u\Big)\Big]
    \quad (u = 2^{-53}\text{, the float64 rounding of the sums, norm and product}),

and :math:`\|\tilde B - B\|_F \le \sqrt c` times that. :math:`A` and :math:`\tau` are public: the
:math:`1 - \delta_F/(2c)` quantile of :math:`\mathrm{Gamma}(d, \beta)` and the :math:`\delta_F/(2c)`
quantile of :math:`\|U\|_2` (a chi distribution), so the event fails with probability at most
:math:`\delta_F`. :mod:`pyg_private.accounting.approximate_minimizer` turns the bound into a
guarantee for the released head. :math:`s = 2^{45}`.

Never keep :math:`\tilde B` (or a seed that drew it) with the released model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..accounting.validation import check_positive, check_positive_int
from ..sampling import RoundedNoiseSampler
from ..sampling.words import RandomSource

__all__ = ["CoupledNoisePlan", "plan_coupled_objective_noise", "sample_coupled_objective_noise"]

#: The scale, in integer steps, of the exact rounded variables behind every radius and direction.
SCALE = 2.0 ** 45
_U = 2.0 ** -53


@dataclass(frozen=True)
class CoupledNoisePlan:
    """Public quantities of one draw: ``radius_bound`` :math:`A`, ``norm_floor`` :math:`\\tau`, the
    Frobenius ``error_bound`` on :math:`\\tilde B - B` and the ``failure_probability`` of the event."""

    dim: int
    num_classes: int
    beta: float
    radius_bound: float
    norm_floor: float
    error_bound: float
    failure_probability: float


def plan_coupled_objective_noise(dim: int, num_classes: int, beta: float,
                                 failure_probability: float) -> CoupledNoisePlan:
    """The public bounds of :func:`sample_coupled_objective_noise` (module docstring)."""
    d = check_positive_int(dim, "dim")
    c = check_positive_int(num_classes, "num_classes")
    b = check_positive(beta, "beta")
    if not 0 < failure_probability < 1:
        raise ValueError(f"`failure_probability` must lie in (0, 1); got {failure_probability!r}")
    each = failure_probability / (2 * c)
    from scipy.special import gammainccinv, gammaincinv  # SciPy is imported on first use, not with the package

    radius = float(gammainccinv(d, each)) / b  # P(Gamma(d, 1) > A beta) = each
    tau = math.sqrt(2.0 * float(gammaincinv(0.5 * d, each)))  # P(chi^2_d < tau^2) = each
    if not (math.isfinite(radius) and tau > 0):
        raise ValueError(f"no usable coupling bound for dim={d}, failure_probability={failure_probability!r}")
    turn = min(math.sqrt(d) / (SCALE * tau), 2.0)  # two unit vectors are never farther apart than 2
    column = 1.01 * (d / (2.0 * SCALE * b) + radius * (turn + (2 * d + 8) * _U))
    return CoupledNoisePlan(dim=d, num_classes=c, beta=b, radius_bound=radius, norm_floor=tau,
                            error_bound=math.sqrt(c) * column, failure_probability=float(failure_probability))


def sample_coupled_objective_noise(plan: CoupledNoisePlan, source: RandomSource) -> Tensor:
    r""":math:`\tilde B` (``[dim, num_classes]``, float64, on the CPU) from ``source``'s words; within
    ``plan.error_bound`` of a continuous draw of Alg. 2's law except with probability
    ``plan.failure_probability``."""
    d, c = plan.dim, plan.num_classes
    magnitudes = RoundedNoiseSampler("laplace", SCALE).sample(d * c, source).abs_().view(d, c)
    direction = RoundedNoiseSampler("gaussian", SCALE).sample(d * c, source).view(d, c).to(torch.float64)
    norm = direction.norm(dim=0)
    while bool((norm == 0).any()):  # V = 0: only when |U| < sqrt(d) / (2s), inside the failure event
        bad = (norm == 0).nonzero().squeeze(1)
        direction[:, bad] = RoundedNoiseSampler("gaussian", SCALE).sample(d * bad.numel(), source).view(
            d, -1).to(torch.float64)
        norm = direction.norm(dim=0)
    radius = magnitudes.to(torch.float64).sum(dim=0) / (SCALE * plan.beta)
    return direction * (radius / norm)
