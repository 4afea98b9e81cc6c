"""Events for the standard mechanisms, with their exact privacy curves.

These are the building blocks every noisy layer and transform uses to describe a
release to the accountant. Each factory validates its arguments (``ValueError``
naming the argument) and returns a frozen :class:`PrivacyEvent`.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from .events import PrivacyEvent
from .laplace import laplace_rdp
from .orders import DEFAULT_ORDERS, check_orders
from .randomized_response import randomized_response_rdp, truth_probability
from .subsampled_gaussian import subsampled_gaussian_rdp
from .units import Unit, as_unit
from .validation import check_delta, check_epsilon, check_non_negative, check_positive

__all__ = [
    "gaussian_event",
    "laplace_event",
    "randomized_response_event",
    "subsampled_gaussian_event",
    "approximate_dp_event",
    "gdp_event",
    "rdp_event",
]


def gaussian_event(
    *,
    unit: Unit | str,
    sensitivity: float,
    noise_std: float,
    name: str = "gaussian",
    params: Mapping[str, Any] | None = None,
    nodes: Any = None,
    num_nodes: int | None = None,
) -> PrivacyEvent:
    r"""Gaussian mechanism: :math:`N(0, \sigma^2)` noise on a query of :math:`\ell_2`
    sensitivity :math:`\Delta_2` is exactly :math:`\mu = \Delta_2/\sigma`-GDP."""
    unit = as_unit(unit)
    sens = check_non_negative(sensitivity, "sensitivity")
    std = check_positive(noise_std, "noise_std")
    p = {"sensitivity": sens, "noise_std": std, **dict(params or {})}
    return PrivacyEvent(name=name, unit=unit, mechanism="gaussian", params=p, mu=sens / std,
                        nodes=nodes, num_nodes=num_nodes)


def laplace_event(
    *,
    unit: Unit | str,
    sensitivity: float,
    scale: float,
    name: str = "laplace",
    orders: Sequence[float] = DEFAULT_ORDERS,
    params: Mapping[str, Any] | None = None,
    nodes: Any = None,
    num_nodes: int | None = None,
) -> PrivacyEvent:
    r"""Laplace mechanism: scale :math:`\sigma` on a query of :math:`\ell_1` sensitivity
    :math:`\rho`. RDP curve :math:`g_\alpha(\sigma, \rho)`; at order ``inf`` it is the pure
    :math:`\epsilon = \rho/\sigma`."""
    unit = as_unit(unit)
    sens = check_non_negative(sensitivity, "sensitivity")
    b = check_positive(scale, "scale")
    grid = check_orders(orders)
    p = {"sensitivity": sens, "scale": b, **dict(params or {})}
    curve = laplace_rdp(grid, sensitivity=sens, scale=b)
    return PrivacyEvent(name=name, unit=unit, mechanism="laplace", params=p, orders=grid,
                        rdp=tuple(curve.tolist()), nodes=nodes, num_nodes=num_nodes, pld=("laplace", sens / b))


def randomized_response_event(
    *,
    unit: Unit | str,
    epsilon: float | None = None,
    flip_probability: float | None = None,
    name: str = "randomized_response",
    orders: Sequence[float] = DEFAULT_ORDERS,
    params: Mapping[str, Any] | None = None,
    nodes: Any = None,
    num_nodes: int | None = None,
) -> PrivacyEvent:
    """Binary randomized response, given its pure ``epsilon`` or its ``flip_probability``
    (replace the bit by a uniform one with that probability)."""
    unit = as_unit(unit)
    q = truth_probability(epsilon=epsilon, flip_probability=flip_probability)
    grid = check_orders(orders)
    curve = randomized_response_rdp(grid, q=q)
    p = {"truth_probability": q, **dict(params or {})}
    return PrivacyEvent(name=name, unit=unit, mechanism="randomized_response", params=p, orders=grid,
                        rdp=tuple(curve.tolist()), nodes=nodes, num_nodes=num_nodes,
                        pld=("pure", math.log(q) - math.log1p(-q), 1))


def subsampled_gaussian_event(
    *,
    noise_multiplier: float,
    sample_rate: float,
    steps: int = 1,
    unit: Unit | str = Unit.NODE,
    name: str = "dp-sgd",
    orders: Sequence[float] = DEFAULT_ORDERS,
    params: Mapping[str, Any] | None = None,
) -> PrivacyEvent:
    r"""``steps`` DP-SGD steps (Poisson sampling at ``sample_rate``, Gaussian noise of
    ``noise_multiplier`` times the clipping norm), RDP from Opacus' analysis. With
    ``sample_rate == 1`` the event is also exactly :math:`\sqrt{T}/\sigma`-GDP."""
    unit = as_unit(unit)
    if unit is Unit.LOCAL:
        raise ValueError("DP-SGD protects examples of a central dataset: use unit 'node', 'edge' or 'graph', "
                         "not 'local'")
    grid = check_orders(orders)
    curve = subsampled_gaussian_rdp(grid, noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps)
    q, sigma = float(sample_rate), float(noise_multiplier)
    p = {"noise_multiplier": sigma, "sample_rate": q, "steps": int(steps), **dict(params or {})}
    mu = math.sqrt(steps) / sigma if q == 1.0 else None
    return PrivacyEvent(name=name, unit=unit, mechanism="subsampled_gaussian", params=p, mu=mu,
                        orders=grid, rdp=tuple(curve.tolist()), pld=("poisson_gaussian", sigma, q, int(steps)))


def approximate_dp_event(
    *,
    unit: Unit | str,
    epsilon: float,
    delta: float,
    name: str = "approximate",
    mechanism: str = "approximate",
    params: Mapping[str, Any] | None = None,
    nodes: Any = None,
    num_nodes: int | None = None,
    profile: tuple[Sequence[float], Sequence[float]] | None = None,
) -> PrivacyEvent:
    r"""A release known to be ``(epsilon, delta)``-DP, and optionally :math:`(\epsilon_i, \delta_i)`-DP
    for every pair of its privacy ``profile = (deltas, epsilons)``.

    The accountant composes it with the other events through the pair that dominates every
    :math:`(\epsilon, \delta)`-DP mechanism (Kairouz, Oh and Viswanath 2015), choosing the
    profile point (the share of the total delta it gets) that minimises the total epsilon.
    """
    unit = as_unit(unit)
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=True)
    return PrivacyEvent(name=name, unit=unit, mechanism=mechanism, params=params, approx=(eps, d),
                        nodes=nodes, num_nodes=num_nodes, profile=profile)


def gdp_event(
    *,
    unit: Unit | str,
    mu: float,
    name: str,
    mechanism: str = "gdp",
    params: Mapping[str, Any] | None = None,
) -> PrivacyEvent:
    r"""A release proven :math:`\mu`-GDP by its own analysis (e.g. a convergent chain)."""
    return PrivacyEvent(name=name, unit=as_unit(unit), mechanism=mechanism, params=params,
                        mu=check_non_negative(mu, "mu"))


def rdp_event(
    *,
    unit: Unit | str,
    orders: Sequence[float],
    rdp: Sequence[float] | np.ndarray,
    name: str,
    mechanism: str = "rdp",
    params: Mapping[str, Any] | None = None,
    nodes: Any = None,
    num_nodes: int | None = None,
) -> PrivacyEvent:
    """A release with an RDP curve computed by its own analysis (e.g. PABI)."""
    unit = as_unit(unit)
    return PrivacyEvent(name=name, unit=unit, mechanism=mechanism, params=params, orders=tuple(orders),
                        rdp=tuple(np.asarray(rdp, dtype=np.float64).tolist()),
                        nodes=nodes, num_nodes=num_nodes)


def _pure_dp_rdp(orders: np.ndarray, epsilon: float) -> np.ndarray:
    r"""RDP curve of binary randomized response with likelihood ratio :math:`e^\epsilon`,
    computed from :math:`\epsilon` in log space (finite for every finite epsilon):
    :math:`\frac{1}{\alpha-1}\big[\log q + \log(e^{(\alpha-1)\epsilon} + e^{-\alpha\epsilon})\big]`,
    :math:`\log q = -\log(1 + e^{-\epsilon})`; :math:`\epsilon` at order ``inf``."""
    a = np.asarray(orders, dtype=np.float64)
    out = np.full(a.shape, float(epsilon))
    fin = np.isfinite(a)
    af = a[fin]
    if af.size:
        log_q = -np.logaddexp(0.0, -epsilon)
        val = (log_q + np.logaddexp((af - 1.0) * epsilon, -af * epsilon)) / (af - 1.0)
        out[fin] = np.clip(val, 0.0, epsilon)
    return out


def pure_dp_event(
    *,
    unit: Unit | str,
    epsilon: float,
    compositions: int = 1,
    name: str = "pure-dp",
    mechanism: str = "pure-dp",
    orders: Sequence[float] = DEFAULT_ORDERS,
    params: Mapping[str, Any] | None = None,
    nodes: Any = None,
    num_nodes: int | None = None,
) -> PrivacyEvent:
    r"""A release that is pure :math:`\epsilon`-DP, e.g. one local randomizer per node
    (unit ``"local"`` with ``nodes``/``num_nodes``).

    Its RDP curve is the one every pure :math:`\epsilon`-DP mechanism satisfies: any
    :math:`\epsilon`-DP pair of output distributions is a post-processing of binary
    randomized response with likelihood ratio :math:`e^\epsilon` (Kairouz, Oh and
    Viswanath, ICML 2015, Thm 2.4: RR's privacy region contains every
    :math:`\epsilon`-DP mechanism's), and Rényi divergences only shrink under
    post-processing, so :math:`\epsilon(\alpha) \le \epsilon_{RR}(\alpha; \epsilon)`. With
    ``compositions = k`` (the release is the composition of :math:`k` mechanisms, each
    :math:`\epsilon/k`-DP, like HDS's :math:`k` coordinates) the curve is the pointwise
    minimum of that and :math:`k\,\epsilon_{RR}(\alpha; \epsilon/k)`, both valid bounds.
    At order ``inf`` it is :math:`\epsilon`: pure composition adds the epsilons.
    """
    unit = as_unit(unit)
    eps = check_epsilon(epsilon)
    if isinstance(compositions, bool) or not isinstance(compositions, (int, np.integer)) or compositions < 1:
        raise ValueError(f"`compositions` must be a positive integer; got {compositions!r}")
    k = int(compositions)
    grid = check_orders(orders)
    a = np.asarray(grid, dtype=np.float64)
    curve = _pure_dp_rdp(a, eps)
    if k > 1:
        curve = np.minimum(curve, k * _pure_dp_rdp(a, eps / k))
        curve[np.isinf(a)] = eps
    p = {"epsilon": eps, "compositions": k, **dict(params or {})}
    return PrivacyEvent(name=name, unit=unit, mechanism=mechanism, params=p, orders=grid,
                        rdp=tuple(curve.tolist()), nodes=nodes, num_nodes=num_nodes, pld=("pure", eps / k, k))


__all__ += ["pure_dp_event", "objective_perturbation_event"]


def objective_perturbation_event(
    calibration: Any,
    *,
    unit: Unit | str = Unit.EDGE,
    name: str = "objective_perturbation",
    mechanism: str = "gcon_objective_perturbation",
    params: Mapping[str, Any] | None = None,
) -> PrivacyEvent:
    r"""One GCON fit (objective perturbation, Wei et al. 2024, Theorem 1): its calibrated
    :math:`(\epsilon, \delta)` and its whole privacy profile
    (:func:`~pyg_private.accounting.objective_perturbation.objective_perturbation_profile`), so that
    the accountant can compose it with other releases at any delta."""
    from .objective_perturbation import ObjectivePerturbationCalibration, objective_perturbation_profile

    if not isinstance(calibration, ObjectivePerturbationCalibration):
        raise TypeError(f"`calibration` must be an ObjectivePerturbationCalibration; got {type(calibration).__name__}")
    p = {"epsilon": calibration.epsilon, "delta": calibration.delta, "beta": calibration.beta,
         "regularization": calibration.total_regularization, **dict(params or {})}
    return PrivacyEvent(name=name, unit=as_unit(unit), mechanism=mechanism, params=p,
                        approx=(calibration.epsilon, calibration.delta),
                        profile=objective_perturbation_profile(calibration))
