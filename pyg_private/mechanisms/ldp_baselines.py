r"""The local-DP baselines of PrivGE (Li et al., CIKM 2024, Sec. 3.1, Eqs. 3-4), as pure samplers
and moments.

All three act on a feature vector :math:`x \in [-1, 1]^d` in the normalised domain and
are :math:`\epsilon`-LDP per node; the stateful, accounted transforms are in
:mod:`pyg_private.transforms.ldp_feature_baselines`.

**LP (Laplace):** :math:`\tilde x_j = x_j + \mathrm{Lap}(2d/\epsilon)` on all :math:`d`
coordinates. Replacing :math:`x` moves it by at most :math:`\lVert x - x'\rVert_1 \le 2d`,
so the scale :math:`2d/\epsilon` gives :math:`\epsilon`-LDP. Unbiased, variance
:math:`8d^2/\epsilon^2`.

**PM (Piecewise mechanism, Wang et al., ICDE 2019)**, 1-D at :math:`\epsilon'`: with
:math:`s = (e^{\epsilon'/2}+1)/(e^{\epsilon'/2}-1)`,
:math:`\ell(x) = \frac{s+1}{2}x - \frac{s-1}{2}` and :math:`r(x) = \ell(x) + s - 1`, the
output density on :math:`[-s, s]` is

.. math::
    p = \frac{e^{\epsilon'} - e^{\epsilon'/2}}{2e^{\epsilon'/2} + 2} \text{ on } [\ell(x), r(x)],
    \qquad p / e^{\epsilon'} \text{ elsewhere,}

so the window has mass :math:`e^{\epsilon'/2}/(e^{\epsilon'/2}+1)` and the mechanism is
unbiased with variance :math:`x^2/(e^{\epsilon'/2}-1) + (e^{\epsilon'/2}+3)/(3(e^{\epsilon'/2}-1)^2)`.

**MB (Multi-bit, Sajadmanesh & Gatica-Perez, CCS 2021 / LPGNN)**, 1-D at :math:`\epsilon'`:
report :math:`+1` with probability

.. math::
    \frac{1}{e^{\epsilon'}+1} + \frac{x+1}{2}\cdot\frac{e^{\epsilon'}-1}{e^{\epsilon'}+1}
    = \frac{1 + x\tanh(\epsilon'/2)}{2},

and :math:`-1` otherwise (binary randomized response, likelihood ratio :math:`e^{\epsilon'}`).

**High-dimensional versions (PM, MB):** as in HDS, each node samples :math:`k` of the
:math:`d` coordinates without replacement, perturbs them at :math:`\epsilon' = \epsilon/k`
and reports 0 elsewhere; the sampled values are rescaled to be unbiased, PM by
:math:`d/k` and MB by :math:`d(e^{\epsilon'}+1)/(k(e^{\epsilon'}-1)) = d/(k\tanh(\epsilon'/2))`.
Per coordinate, :math:`\mathrm{Var} = (d/k)\,\mathbb E[\hat x^2] - x^2`, where :math:`\hat x` is the
unbiased 1-D output at :math:`\epsilon'` (for MB the :math:`\pm 1` report divided by
:math:`\tanh(\epsilon'/2)`):

.. math::
    \mathrm{Var}_{PM} = \frac{d(e^{\epsilon/2k}+3)}{3k(e^{\epsilon/2k}-1)^2}
        + \Big[\frac{d e^{\epsilon/2k}}{k(e^{\epsilon/2k}-1)} - 1\Big]x^2,
    \qquad
    \mathrm{Var}_{MB} = \frac{d}{k}\Big(\frac{e^{\epsilon/k}+1}{e^{\epsilon/k}-1}\Big)^2 - x^2.

The reference code picks :math:`k = \max(1, \min(d, \lfloor\epsilon/2.5\rfloor))` for PM and
:math:`\lfloor\epsilon/2.18\rfloor` for MB (:func:`piecewise_default_k`,
:func:`multibit_default_k`).

A seeded ``torch.Generator`` makes draws reproducible and voids the guarantee.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..accounting.validation import check_epsilon
from ._noise import check_generator, laplace_noise
from .square_wave import _as_float64, _check_coordinate_epsilon, _check_k_d, _check_unit_interval

__all__ = [
    "laplace_ldp_scale",
    "laplace_ldp_variance",
    "sample_laplace_ldp",
    "PiecewiseParams",
    "piecewise_params",
    "sample_piecewise",
    "piecewise_moments",
    "piecewise_default_k",
    "multibit_probability",
    "multibit_scale",
    "sample_multibit",
    "multibit_moments",
    "multibit_default_k",
]


# --------------------------------------------------------------------------- Laplace
def laplace_ldp_scale(epsilon: float, d: int) -> float:
    r"""The Laplace scale :math:`2d/\epsilon` of LP on :math:`[-1, 1]^d`."""
    eps = check_epsilon(epsilon)
    _, d = _check_k_d(1, d)
    return 2.0 * d / eps


def laplace_ldp_variance(epsilon: float, d: int) -> float:
    r"""Per-coordinate variance of LP, :math:`2(2d/\epsilon)^2 = 8d^2/\epsilon^2`."""
    return 2.0 * laplace_ldp_scale(epsilon, d) ** 2


def sample_laplace_ldp(x: Tensor, epsilon: float, *, generator: torch.Generator | None = None) -> Tensor:
    r"""LP on every row of ``x`` (``[n, d]`` in :math:`[-1, 1]`): :math:`x + \mathrm{Lap}(2d/\epsilon)`, float64."""
    x = _as_float64(x)
    if x.dim() != 2:
        raise ValueError(f"`x` must be a 2-D [n, d] matrix; got shape {tuple(x.shape)}")
    _check_unit_interval(x)
    scale = laplace_ldp_scale(epsilon, x.size(1))
    return laplace_noise(x.shape, scale, device=x.device, generator=generator).add_(x)


# ------------------------------------------------------------------------- Piecewise
@dataclass(frozen=True)
class PiecewiseParams:
    r"""Constants of the 1-D piecewise mechanism at budget ``epsilon``.

    Attributes:
        epsilon: :math:`\epsilon'`.
        s: the output bound, outputs lie in :math:`[-s, s]`.
        em: :math:`e^{\epsilon'/2} - 1`.
        near_probability: :math:`e^{\epsilon'/2}/(e^{\epsilon'/2}+1)`, the window's mass.
        p: the window's density; elsewhere it is :math:`p e^{-\epsilon'}`.
    """

    epsilon: float
    s: float
    em: float
    near_probability: float
    p: float

    @property
    def q(self) -> float:
        """The density outside the window, :math:`p e^{-\\epsilon'}`."""
        return self.p * math.exp(-self.epsilon)


def piecewise_params(epsilon: float) -> PiecewiseParams:
    r"""PM constants in float64: :math:`s = 1 + 2/(e^{\epsilon/2}-1)`, via ``expm1``."""
    e = _check_coordinate_epsilon(epsilon)
    em = math.expm1(e / 2.0)
    s = 1.0 + 2.0 / em
    near = 1.0 / (1.0 + math.exp(-e / 2.0))
    # window width s - 1 = 2/em carries mass `near`
    return PiecewiseParams(epsilon=e, s=s, em=em, near_probability=near, p=near * em / 2.0)


def sample_piecewise(x: Tensor, epsilon: float, *, generator: torch.Generator | None = None) -> Tensor:
    r"""One 1-D PM draw per entry of ``x`` (in :math:`[-1, 1]`), float64, unbiased.

    Window :math:`[\ell, r] = [x + (x-1)/m,\; x + (x+1)/m]` with :math:`m = e^{\epsilon/2}-1`
    (PrivGE Eq. 3's :math:`\ell(x), r(x)` rewritten); with :math:`\eta \sim U[0,1)`: if
    :math:`\eta < P =` ``near_probability`` the output is :math:`\ell + (r - \ell)w`, otherwise
    it is uniform on :math:`[-s, \ell) \cup (r, s]` (length :math:`s + 1`): with
    :math:`u = (s+1)w`, :math:`-s + u` if :math:`u < \ell + s`, else :math:`r + u - (\ell + s)`.
    The position :math:`w` is :math:`\eta` rescaled within its branch (:math:`\eta/P` or
    :math:`(\eta - P)/(1 - P)`), uniform and independent of the branch.
    """
    prm = piecewise_params(epsilon)
    x = _as_float64(x)
    _check_unit_interval(x)
    check_generator(generator, x.device)
    eta = torch.rand(x.shape, dtype=torch.float64, device=x.device, generator=generator)
    near = eta < prm.near_probability
    far_p = 1.0 / (1.0 + math.exp(prm.epsilon / 2.0))  # 1 - near_probability without cancellation
    w = torch.where(near, eta * (1.0 / prm.near_probability), (eta - prm.near_probability) * (1.0 / far_p))
    inv = 1.0 / prm.em
    lo = x + (x - 1.0) * inv
    hi = x + (x + 1.0) * inv
    far = w * (prm.s + 1.0)
    left_len = lo + prm.s
    far = torch.where(far < left_len, far - prm.s, far - left_len + hi)
    return torch.where(near, lo + (hi - lo) * w, far).clamp_(-prm.s, prm.s)


def piecewise_moments(x: Tensor | float, epsilon: float, k: int = 1, d: int = 1) -> tuple[Tensor, Tensor]:
    r"""Mean (:math:`x`) and variance of high-dimensional PM per coordinate (module docstring);
    ``k = d = 1`` is the 1-D mechanism at ``epsilon``."""
    k, d = _check_k_d(k, d)
    prm = piecewise_params(epsilon / k)
    x = _as_float64(x)
    em = prm.em
    var = d * (em + 4.0) / (3.0 * k * em * em) + (d * (em + 1.0) / (k * em) - 1.0) * x * x
    return x.clone(), var


def piecewise_default_k(epsilon: float, d: int) -> int:
    r""":math:`\max(1, \min(d, \lfloor\epsilon/2.5\rfloor))` (Wang et al.'s choice, as in the reference code)."""
    eps = check_epsilon(epsilon)
    _, d = _check_k_d(1, d)
    return max(1, min(d, int(math.floor(eps / 2.5))))


# ------------------------------------------------------------------------- Multi-bit
def multibit_probability(x: Tensor | float, epsilon: float) -> Tensor:
    r""":math:`\Pr[+1] = (1 + x\tanh(\epsilon/2))/2` of the 1-D multi-bit response."""
    e = _check_coordinate_epsilon(epsilon)
    x = _as_float64(x)
    _check_unit_interval(x)
    return (1.0 + x * math.tanh(e / 2.0)) / 2.0


def multibit_scale(epsilon: float, k: int, d: int) -> float:
    r"""The unbiasing factor :math:`d(e^{\epsilon/k}+1)/(k(e^{\epsilon/k}-1)) = d/(k\tanh(\epsilon/2k))`."""
    k, d = _check_k_d(k, d)
    e = _check_coordinate_epsilon(epsilon / k, "epsilon / k")
    return d / (k * math.tanh(e / 2.0))


def sample_multibit(x: Tensor, epsilon: float, *, generator: torch.Generator | None = None) -> Tensor:
    r"""One 1-D multi-bit draw per entry of ``x``: :math:`\pm 1` in float64 (not rescaled)."""
    prob = multibit_probability(x, epsilon)
    check_generator(generator, prob.device)
    u = torch.rand(prob.shape, dtype=torch.float64, device=prob.device, generator=generator)
    return (u < prob).to(torch.float64).mul_(2.0).sub_(1.0)


def multibit_moments(x: Tensor | float, epsilon: float, k: int = 1, d: int = 1) -> tuple[Tensor, Tensor]:
    r"""Mean (:math:`x`) and variance :math:`(d/k)\coth^2(\epsilon/2k) - x^2` of
    high-dimensional MB per coordinate (module docstring)."""
    c = multibit_scale(epsilon, k, d)
    x = _as_float64(x)
    k, d = _check_k_d(k, d)
    return x.clone(), (k / d) * c * c - x * x


def multibit_default_k(epsilon: float, d: int) -> int:
    r""":math:`\max(1, \min(d, \lfloor\epsilon/2.18\rfloor))` (as in the reference code)."""
    eps = check_epsilon(epsilon)
    _, d = _check_k_d(1, d)
    return max(1, min(d, int(math.floor(eps / 2.18))))
