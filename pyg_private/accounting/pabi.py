r"""Edge-level RDP of noisy graph diffusion (Wei, Chien and Li, NeurIPS 2024).

Privacy amplification by iteration with :math:`W_\infty` tracking and two Laplace draws
per step ("Differentially Private Graph Diffusion with Applications in Personalized
PageRanks", arXiv:2407.00077, Sec. 3.2-3.4 and App. B). With the single-step distortion
:math:`\rho = \max(4\gamma^{(1)}_{\max}, 2\gamma_{\max})\,\eta` (Lemma B.1) and
:math:`w_\tau = \rho(1 - \gamma^\tau)/(1 - \gamma)` (Lemma 3), Theorem 1 (Eq. 5) gives

.. math::
    \epsilon(\alpha) = \min_{\tau \in \{0, \dots, K-1\}}
        (K - \tau)\, g_\alpha(\sigma, \rho) + g_\alpha(\sigma, \gamma^{K-\tau} w_\tau),

and, in the personalized setting, a corrected Theorem 4. As printed (Eq. 10), Theorem 4
has :math:`g_\alpha(\sigma, \rho\,\mathbb 1[\tau \ne 0])` as its first term, so at
:math:`\tau = 0` both terms are :math:`g_\alpha(\sigma, 0) = 0` and the formula taken
literally gives :math:`\epsilon = 0`. Its proof, redone with per-step distortions
:math:`\rho_1 = 0` (for an edge not incident to the seed the first step has no distortion,
App. C) and :math:`\rho_k = \rho` for :math:`k \ge 2`, gives

.. math::
    \epsilon(\alpha) = \min\Big\{(K - 1)\, g_\alpha(\sigma, \rho),\;
        \min_{\tau \ge 1} (K - \tau)\, g_\alpha(\sigma, \rho)
        + g_\alpha\big(\sigma, \gamma^{K-\tau}\rho\,(1 - \gamma^{\tau-1})/(1 - \gamma)\big)\Big\}.

The printed formula with :math:`\tau` restricted to :math:`1, \dots, K-1` is a valid but
slightly looser bound.

The exact minimum over :math:`\tau` is taken (not the loose closed form of Eq. 6). For
the lazy PPR :math:`\phi(x) = \beta W x + (1-\beta) s`, :math:`W = (I + AD^{-1})/2`:
:math:`\gamma = \beta`, :math:`\gamma^{(1)} = \beta/2`, :math:`\rho = 2\beta\eta`.
Everything depends on :math:`\eta/\sigma` only, so the calibrated :math:`\sigma` is
proportional to :math:`\eta` and does not depend on the graph.
"""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

from .calibration import calibrate_noise
from .conversion import rdp_to_dp
from .laplace import laplace_rdp_ratio
from .orders import DEFAULT_ORDERS, check_orders
from .validation import check_delta, check_epsilon, check_positive, check_positive_int, check_restart_probability

__all__ = [
    "diffusion_distortion",
    "noisy_diffusion_rdp",
    "lazy_ppr_rdp",
    "lazy_ppr_epsilon",
    "lazy_ppr_noise_scale",
]


def diffusion_distortion(*, eta: float, gamma_max: float, gamma1_max: float) -> float:
    r"""Lemma B.1: :math:`\rho_{\text{diff}} = \max(4\gamma^{(1)}_{\max}, 2\gamma_{\max})\,\eta`."""
    return max(4.0 * gamma1_max, 2.0 * gamma_max) * check_positive(eta, "eta")


def noisy_diffusion_rdp(
    orders: Sequence[float],
    *,
    noise_scale: float,
    num_iterations: int,
    eta: float,
    gamma_max: float,
    gamma1_max: float,
    personalized: bool = False,
    method: Literal["pabi", "composition"] = "pabi",
) -> np.ndarray:
    r"""RDP curve of one column of a K-step noisy diffusion (Theorem 1 / corrected Theorem 4).

    Args:
        orders: Rényi orders (``inf`` allowed).
        noise_scale: the Laplace scale :math:`\sigma` of each of the two draws per step.
        num_iterations: :math:`K`.
        eta: the clipping threshold :math:`\eta` (entry i clipped to :math:`\eta d_i`).
        gamma_max: the Lipschitz constant :math:`\gamma_{\max} < 1`.
        gamma1_max: the largest diffusion coefficient :math:`\gamma^{(1)}_{\max}`.
        personalized: the corrected Theorem 4 (edges not incident to the seed).
        method: ``"pabi"`` (the theorem) or ``"composition"`` (:math:`K g_\alpha(\sigma, \rho)`,
            the linear baseline the paper compares with).
    """
    sigma = check_positive(noise_scale, "noise_scale")
    K = check_positive_int(num_iterations, "num_iterations")
    gamma = check_positive(gamma_max, "gamma_max")
    if not gamma < 1.0:
        raise ValueError(f"`gamma_max` must be < 1 for amplification by iteration; got {gamma_max!r}")
    rho = diffusion_distortion(eta=eta, gamma_max=gamma, gamma1_max=gamma1_max)
    a = np.asarray(check_orders(orders), dtype=np.float64)
    g_rho = laplace_rdp_ratio(a, rho / sigma)  # [A]
    if method == "composition":
        return (K - 1 if personalized else K) * g_rho
    if method != "pabi":
        raise ValueError(f"`method` must be 'pabi' or 'composition'; got {method!r}")
    tau = np.arange(K, dtype=np.float64)
    if personalized:
        # rho_1 = 0 and rho_k = rho for k >= 2: w_tau = rho (1 - gamma^(tau-1)) / (1 - gamma) for tau >= 1
        w = rho * (1.0 - gamma ** np.maximum(tau - 1.0, 0.0)) / (1.0 - gamma)
        absorbed = np.where(tau == 0, K - 1.0, K - tau)
    else:
        w = rho * (1.0 - gamma ** tau) / (1.0 - gamma)
        absorbed = K - tau
    shift = gamma ** (K - tau) * w  # [K]
    with np.errstate(over="ignore"):  # shift / sigma may overflow to inf for absurdly small sigma: no bound
        ratio = shift[None, :] / sigma
    total = absorbed[None, :] * g_rho[:, None] + laplace_rdp_ratio(a[:, None], ratio)
    return total.min(axis=1)


def lazy_ppr_rdp(
    orders: Sequence[float] = DEFAULT_ORDERS,
    *,
    noise_scale: float,
    num_iterations: int,
    eta: float,
    alpha: float,
    personalized: bool = False,
    num_columns: int = 1,
    method: Literal["pabi", "composition"] = "pabi",
) -> np.ndarray:
    r"""RDP of ``num_columns`` independent lazy-PPR diffusions released to one party.

    ``alpha`` is the restart probability (:math:`\beta = 1 - \alpha`). Columns compose
    additively (each column is clipped on its own, so this is tighter than treating the
    matrix as one :math:`\ell_1` vector).
    """
    beta = 1.0 - check_restart_probability(alpha)
    C = check_positive_int(num_columns, "num_columns")
    return C * noisy_diffusion_rdp(orders, noise_scale=noise_scale, num_iterations=num_iterations, eta=eta,
                                   gamma_max=beta, gamma1_max=beta / 2.0, personalized=personalized, method=method)


def lazy_ppr_epsilon(
    *,
    noise_scale: float,
    delta: float,
    num_iterations: int,
    eta: float,
    alpha: float,
    personalized: bool = False,
    num_columns: int = 1,
    orders: Sequence[float] = DEFAULT_ORDERS,
    method: Literal["pabi", "composition"] = "pabi",
    conversion: Literal["balle", "standard"] = "balle",
) -> float:
    """Epsilon at ``delta`` of a lazy-PPR release (minimised over the orders, infinity included)."""
    curve = lazy_ppr_rdp(orders, noise_scale=noise_scale, num_iterations=num_iterations, eta=eta, alpha=alpha,
                         personalized=personalized, num_columns=num_columns, method=method)
    return rdp_to_dp(orders=orders, rdp=curve, delta=check_delta(delta), conversion=conversion)[0]


def lazy_ppr_noise_scale(
    *,
    epsilon: float,
    delta: float,
    num_iterations: int,
    eta: float,
    alpha: float,
    personalized: bool = False,
    num_columns: int = 1,
    orders: Sequence[float] = DEFAULT_ORDERS,
    method: Literal["pabi", "composition"] = "pabi",
    conversion: Literal["balle", "standard"] = "balle",
) -> float:
    """Smallest Laplace scale whose release meets ``(epsilon, delta)``: the inverse of
    :func:`lazy_ppr_epsilon` by monotone root finding, on the safe side."""
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    eta = check_positive(eta, "eta")

    def eps_of(sigma: float) -> float:
        return lazy_ppr_epsilon(noise_scale=sigma, delta=d, num_iterations=num_iterations, eta=eta, alpha=alpha,
                                personalized=personalized, num_columns=num_columns, orders=orders, method=method,
                                conversion=conversion)

    return calibrate_noise(eps_of, eps, min_scale=eta * 1e-12, max_scale=eta * 1e12)
