r"""Privacy of an *approximate* minimiser of a perturbed objective, released through Gaussian noise.

Objective perturbation (Chaudhuri, Monteleoni and Sarwate 2011; GCON, Wei et al. 2024, Theorem 1) is
proven for the **exact** minimiser :math:`\Theta^*(D, B)` of the perturbed objective, with noise
:math:`B` drawn from a **continuous** density. A computer has neither: it samples :math:`B` in finite
precision and stops the solver at a small gradient. Releasing the computed :math:`\hat\Theta` as it
is leaves the guarantee unproven and exposes the floating-point holes of the noise (Mironov 2012).

The construction here follows the approximate-minima perturbation of Iyengar et al., "Towards
Practical Differentially Private Convex Optimization" (IEEE S&P 2019, Alg. 1 and Theorem 1): if
:math:`\|\hat\Theta - \Theta^*(D, B)\|_F \le r` for every draw of :math:`B` (outside an event of
probability :math:`\delta_F`, e.g. the coupling of a finite-precision sample with the continuous one
failing), the release :math:`\hat\Theta + Z` with Gaussian :math:`Z` of standard deviation
:math:`r/\mu_G` is, on the **same** dataset, :math:`(\epsilon_c, \delta_G + \delta_F)`-close to
:math:`\Theta^*(D, B) + Z` in both directions, where :math:`\mu_G`-GDP is
:math:`(\epsilon_c, \delta_G)`-DP (for a fixed :math:`B` the two are Gaussians whose means differ
by at most :math:`r`; mixing over :math:`B` keeps the closeness). The latter is a post-processing
of the exact objective-perturbation mechanism, :math:`(\epsilon_o, \delta_o)`-DP. Chaining the three
steps, :math:`M(D) \approx M^*(D) \approx M^*(D') \approx M(D')`, gives

.. math::
    \epsilon = \epsilon_o + 2\epsilon_c, \qquad
    \delta = \delta_c + e^{\epsilon_c}\delta_o + e^{\epsilon_o + \epsilon_c}\delta_c,
    \qquad \delta_c = \delta_G + \delta_F.

:func:`split_budget` divides a target :math:`(\epsilon, \delta)` so that the closeness steps take a
small share (:math:`\epsilon_c = \epsilon/128`), and :func:`chained_profile` maps the exact
mechanism's privacy profile through the chain. A release on a grid (rounded Gaussian noise added to
the rounded :math:`\hat\Theta`) is covered by the same argument with :math:`r` raised by the
rounding, :math:`\sqrt{dc}\,g` (see :mod:`pyg_private.sampling.grid`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .validation import check_delta, check_epsilon

__all__ = ["MinimizerBudget", "split_budget", "chained_guarantee", "chained_profile", "CLOSENESS_SHARE",
           "COUPLING_SHARE"]

#: The share of epsilon given to each of the two closeness steps, and (times e^-epsilon) of delta.
CLOSENESS_SHARE = 2.0 ** -7
#: The share of the closeness delta left to the coupling's failure. It is the floor of the released
#: head's privacy profile; a smaller one loosens the direction's bound like a d-th root of its inverse
#: (for d = 2, 2^-30 made the closeness noise 4% of the objective noise; 2^-10 makes it 1e-5 of it).
COUPLING_SHARE = 2.0 ** -10


@dataclass(frozen=True)
class MinimizerBudget:
    r"""A target :math:`(\epsilon, \delta)` divided between the exact mechanism and the closeness.

    ``epsilon_exact``, ``delta_exact``: what the exact objective perturbation is calibrated to.
    ``epsilon_close``: :math:`\epsilon_c` of each closeness step. ``delta_gaussian`` and
    ``delta_coupling``: the two halves of :math:`\delta_c` (the Gaussian's own delta and the
    probability that the finite-precision noise is farther than its bound from the continuous one).
    """

    epsilon: float
    delta: float
    epsilon_exact: float
    delta_exact: float
    epsilon_close: float
    delta_gaussian: float
    delta_coupling: float

    @property
    def delta_close(self) -> float:
        return self.delta_gaussian + self.delta_coupling


def chained_guarantee(epsilon_exact: float, delta_exact: float, epsilon_close: float,
                      delta_close: float) -> tuple[float, float]:
    r"""The :math:`(\epsilon, \delta)` of the released approximate minimiser (module docstring)."""
    eps = epsilon_exact + 2.0 * epsilon_close
    delta = delta_close + math.exp(epsilon_close) * delta_exact + math.exp(epsilon_exact + epsilon_close) * delta_close
    return eps, delta


def split_budget(epsilon: float, delta: float, share: float = CLOSENESS_SHARE) -> MinimizerBudget:
    r"""Divide a target :math:`(\epsilon, \delta)`, :math:`\delta > 0`: :math:`\epsilon_c = s\epsilon`,
    :math:`\delta_c = s\,e^{-\epsilon}\delta` (all but :data:`COUPLING_SHARE` of it to the Gaussian),
    :math:`\epsilon_o = \epsilon - 2\epsilon_c` and the largest :math:`\delta_o` for which
    :func:`chained_guarantee` returns at most the target (checked on the floats returned)."""
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    if not 0 < share < 0.5:
        raise ValueError(f"`share` must lie in (0, 0.5); got {share!r}")
    eps_c = share * eps
    delta_c = share * math.exp(-eps) * dlt
    if not delta_c > 0:
        raise ValueError(f"`epsilon`={eps!r} is too large for the safe fit's budget split: its closeness share of "
                         f"delta, {share!r} * exp(-epsilon) * delta, underflows to 0 (epsilon above about 700, where "
                         "the guarantee protects nothing). Use a smaller epsilon")
    eps_o = eps - 2.0 * eps_c
    # delta_c (1 + e^(eps_o + eps_c)) written without overflow: delta_c e^(eps_o + eps_c) = s delta e^(eps_o + eps_c - eps)
    delta_o = (dlt - delta_c - share * dlt * math.exp(eps_o + eps_c - eps)) * math.exp(-eps_c)
    while True:  # rounding: never above the target
        e, d = chained_guarantee(eps_o, delta_o, eps_c, delta_c)
        if e <= eps and d <= dlt:
            break
        eps_o, delta_o = math.nextafter(eps_o, 0.0), delta_o * (1.0 - 2.0 ** -40)
    coupling = delta_c * COUPLING_SHARE
    return MinimizerBudget(epsilon=eps, delta=dlt, epsilon_exact=eps_o, delta_exact=delta_o, epsilon_close=eps_c,
                           delta_gaussian=delta_c - coupling, delta_coupling=coupling)


def chained_profile(profile: tuple[Sequence[float], Sequence[float]], *, mu_gaussian: float, epsilon_close: float,
                    delta_coupling: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    r"""The released head's privacy profile ``(deltas, epsilons)``, deltas increasing.

    Every point :math:`(\delta_o, \epsilon_o)` of the exact mechanism's ``profile`` is combined
    with closeness steps at :math:`\epsilon_c' = k\,\epsilon_c`, :math:`k \in \{1, 2, 4, \dots, 64\}`:
    the Gaussian noise is :math:`\mu_G`-GDP, hence :math:`(\epsilon_c', \delta_G(\epsilon_c'))`-close
    for each (:func:`~pyg_private.accounting.gdp.gdp_delta`), plus the fixed ``delta_coupling``.
    The lower envelope of all pairs from :func:`chained_guarantee` is returned, so the accountant
    can compose the release at deltas far below the one it was calibrated at."""
    from .gdp import gdp_delta

    deltas, epsilons = profile
    points = []
    for k in (1, 2, 4, 8, 16, 32, 64):
        eps_c = k * epsilon_close
        delta_c = gdp_delta(mu=mu_gaussian, epsilon=eps_c) + delta_coupling
        for d, e in zip(deltas, epsilons):
            if math.isfinite(e):
                total_e, total_d = chained_guarantee(e, d, eps_c, delta_c)
                if total_d < 1.0:
                    points.append((total_d, total_e))
    points.sort()
    out_d: list[float] = []
    out_e: list[float] = []
    best = math.inf
    for d, e in points:  # the lower envelope: epsilon non-increasing, deltas strictly increasing
        if e >= best:
            continue
        best = e
        if out_d and d <= out_d[-1]:
            out_e[-1] = e
        else:
            out_d.append(d)
            out_e.append(e)
    return tuple(out_d), tuple(out_e)
