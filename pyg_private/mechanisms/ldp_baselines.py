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

**Floating-point-safe sampling (the default, ``sampler="safe"``).** As for the square wave
(:mod:`pyg_private.mechanisms.square_wave`): every release is exactly sampled on a power-of-two
grid, so that no output is impossible under another input and the likelihood ratio bound holds
exactly.

* **LP**: the input is rounded to a multiple of :math:`g` in :math:`[-1, 1]`
  (:func:`laplace_ldp_granularity`: :math:`g = 2^{\lfloor\log_2 b\rfloor - 40}` for the scale
  :math:`b = 2d/\epsilon`, clipped to :math:`[2^{-60}, 2^{-20}]`); :math:`\pm 1` are grid points, so
  two rounded inputs still differ by at most :math:`2d` in :math:`\ell_1` and the sensitivity is
  not inflated. The noise is :math:`K = \mathrm{round}(\mathrm{Lap}(b/g))`, sampled exactly
  (:class:`~pyg_private.sampling.RoundedNoiseSampler`), and the release is
  :math:`g(\mathrm{round}(x/g) + K)`: the continuous Laplace mechanism run on the rounded input,
  rounded, i.e. post-processing of it: the same :math:`\epsilon` and RDP curve, and every
  multiple of :math:`g` has positive probability under every input. Its variance exceeds
  :math:`2b^2` by less than :math:`g^2/6` (relatively below :math:`2^{-80}`).
* **PM**: a :class:`~pyg_private.mechanisms.square_wave.TwoLevelGrid` (:func:`piecewise_grid`):
  step :math:`g = 2^{\lfloor\log_2(s-1)\rfloor - 22}` (at least :math:`2^{\lceil\log_2 s\rceil - 50}`),
  :math:`W = 2\max(1, \mathrm{round}((s-1)/2g))` window points, :math:`F` far points with :math:`F`
  the smallest even integer such that :math:`\kappa F g \ge 2` (then the window of every
  :math:`x \in [-1, 1]` fits in the support without clamping; :math:`T = W + F` is even, so 0 is
  never an output and the window centres are whole steps, 0 among them), window and far
  probabilities :math:`E/(WE+F)` and :math:`1/(WE+F)` with
  :math:`E = e^{\epsilon'}(1 - 2^{-200})`, and the window placed at
  :math:`a(x) = \mathrm{round}(x/(\kappa g) + F/2)`: the mean is :math:`\kappa c g`,
  :math:`x` up to the rounding of the window position (:math:`|\text{bias}| \le \kappa g/2`).
  Every input has the same support and the same :math:`W` and :math:`F`: the ratio of any output's
  probabilities under two inputs is :math:`1` or :math:`E^{\pm 1}`, exactly
  :math:`\epsilon'`-LDP. Moments: :math:`\mathbb E[y] = \kappa cg`,
  :math:`\mathbb E[y^2] = (A + \kappa c^2) g^2` (the square wave's formulas).
* **MB**: the input is rounded to a multiple of :math:`2^{-60}`, so :math:`\lambda = (x+1)/2` is a
  61-bit dyadic; :math:`\Pr[+1] = (1 + x\tanh(\epsilon'/2))/2` is affine in :math:`x`, so it is
  realised exactly as a mixture: with probability :math:`\lambda` (an integer comparison of 61
  random bits) an exact Bernoulli(:math:`E/(E+1)`), otherwise an exact Bernoulli(:math:`1/(E+1)`)
  (one exact trial of the rare :math:`1/(E+1)` flips the mixture's bit),
  which gives :math:`\lambda E/(E+1) + (1-\lambda)/(E+1) = (1 + x(E-1)/(E+1))/2`. Both
  :math:`\Pr[+1 \mid x]` and :math:`\Pr[-1 \mid x]` lie in :math:`[1/(E+1), E/(E+1)]`, so the ratio
  under any two inputs is at most :math:`E < e^{\epsilon'}`. The moments are the formulas above
  at the rounded input (the same float64 numbers for :math:`|x| \ge 2^{-7}`).

Inside the high-dimensional versions the per-coordinate budget is
:math:`\min(\mathrm{fl}(\epsilon/k), \epsilon/k)`, so the :math:`k` coordinates compose to at most
:math:`e^\epsilon`. The rescaling by :math:`d/k` (PM) or :math:`d/(k\tanh(\epsilon'/2))` (MB) is
post-processing; the transforms round the rescaled values onto a power-of-two grid
(:func:`~pyg_private.mechanisms.square_wave.rescale_on_grid`). ``sampler="float"`` keeps the
floating-point samplers (for benchmarks and audits; open to floating-point attacks).

A seeded ``torch.Generator`` makes draws reproducible and voids the guarantee; ``secure_mode``
draws every random bit from the operating system's CSPRNG.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from ..accounting.validation import check_epsilon
from ._noise import check_generator, float_generator, laplace_noise
from ..sampling import MAX_SCALE, MIN_SCALE, RoundedNoiseSampler
from ..sampling.grid import check_granularity, from_grid, round_to_grid
from ..sampling.tables import mp_context
from ..sampling.words import WORD_BITS, RandomSource
from .square_wave import (
    Sampler,
    TwoLevelGrid,
    _as_float64,
    _check_coordinate_epsilon,
    _check_grid_size,
    _check_k_d,
    _check_safe_args,
    _check_unit_interval,
    _per_coordinate_ratio,
    _source,
    rare_trial,
)

__all__ = [
    "laplace_ldp_scale",
    "laplace_ldp_variance",
    "laplace_ldp_granularity",
    "sample_laplace_ldp",
    "PiecewiseParams",
    "piecewise_params",
    "piecewise_grid",
    "sample_piecewise",
    "piecewise_moments",
    "piecewise_default_k",
    "multibit_probability",
    "multibit_exact_probabilities",
    "multibit_scale",
    "sample_multibit",
    "multibit_moments",
    "multibit_default_k",
    "MULTIBIT_INPUT_GRANULARITY",
]


# --------------------------------------------------------------------------- Laplace
def laplace_ldp_scale(epsilon: float, d: int) -> float:
    r"""The Laplace scale :math:`2d/\epsilon` of LP on :math:`[-1, 1]^d`."""
    eps = check_epsilon(epsilon)
    _, d = _check_k_d(1, d)
    return 2.0 * d / eps


def laplace_ldp_variance(epsilon: float, d: int) -> float:
    r"""Per-coordinate variance of LP, :math:`2(2d/\epsilon)^2 = 8d^2/\epsilon^2` (the safe
    sampler's rounded noise adds less than :math:`g^2/6`, relatively below :math:`2^{-80}`)."""
    return 2.0 * laplace_ldp_scale(epsilon, d) ** 2


def _check_laplace_grid(scale: float, g: float) -> float:
    if g > 1.0:
        raise ValueError(f"`granularity` must be at most 1 (the domain's ends -1 and 1 are grid points); got {g!r}")
    steps = scale / g
    if not (MIN_SCALE <= steps <= MAX_SCALE):
        raise ValueError(f"`granularity` {g!r} puts the Laplace scale {scale:g} at {steps:g} grid steps; the exact "
                         "sampler needs between 2^20 and 2^46 (a finer grid if below, a coarser one if above)")
    return g


def laplace_ldp_granularity(epsilon: float, d: int, granularity: Optional[float] = None) -> float:
    r"""The grid of the safe LP release: :math:`2^{\lfloor\log_2 b\rfloor - 40}` for the scale
    :math:`b = 2d/\epsilon`, clipped to :math:`[2^{-60}, 2^{-20}]` (or ``granularity``, checked);
    ``ValueError`` when the scale does not span :math:`[2^{20}, 2^{46}]` steps of it."""
    scale = laplace_ldp_scale(epsilon, d)
    if granularity is None:
        g = 2.0 ** min(-20, max(-60, math.frexp(scale)[1] - 1 - 40))
    else:
        g = check_granularity(granularity)
    return _check_laplace_grid(scale, g)


def _laplace_ldp_grid(z: Tensor, scale: float, g: float, source: RandomSource) -> Tensor:
    """``g (round(z / g) + round(Lap(scale / g)))``, float64, exactly sampled."""
    steps = round_to_grid(z, g)
    noise = RoundedNoiseSampler("laplace", scale / g).sample(steps.numel(), source)
    return from_grid(steps.view(-1).add_(noise), g).view(z.shape)


def sample_laplace_ldp(x: Tensor, epsilon: float, *, generator: torch.Generator | None = None,
                       sampler: Sampler = "safe", secure_mode: Optional[bool] = None,
                       granularity: Optional[float] = None) -> Tensor:
    r"""LP on every row of ``x`` (``[n, d]`` in :math:`[-1, 1]`): :math:`x + \mathrm{Lap}(2d/\epsilon)`,
    float64. Safe (default): :math:`g(\mathrm{round}(x/g) + K)` with exact rounded-Laplace
    :math:`K` on the grid of :func:`laplace_ldp_granularity`; ``"float"``: float Laplace noise."""
    sampler = _check_safe_args(sampler, secure_mode, granularity)
    x = _as_float64(x)
    if x.dim() != 2:
        raise ValueError(f"`x` must be a 2-D [n, d] matrix; got shape {tuple(x.shape)}")
    _check_unit_interval(x)
    scale = laplace_ldp_scale(epsilon, x.size(1))
    if sampler == "safe":
        g = laplace_ldp_granularity(epsilon, x.size(1), granularity)
        return _laplace_ldp_grid(x, scale, g, _source(x.device, generator, secure_mode))
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


@functools.lru_cache(maxsize=256)
def _piecewise_grid(epsilon: float, k: int, granularity: Optional[float]) -> TwoLevelGrid:
    eps = _check_coordinate_epsilon(epsilon / k, "epsilon / k" if k > 1 else "epsilon")
    prm = piecewise_params(eps)
    width = 2.0 / prm.em  # s - 1 without cancellation
    if granularity is None:
        step = 2.0 ** (math.frexp(width)[1] - 1 - 22)
        step = max(step, 2.0 ** (math.frexp(prm.s)[1] - 50))
    else:
        step = 2.0 * check_granularity(granularity)
    ctx = mp_context()
    ratio = _per_coordinate_ratio(epsilon, k)
    window = 2 * max(1, int(round(width / (2 * step))))  # even: the window centres are integers, 0 among them
    denom = window * (ratio - 1) * ctx.mpf(step) - 2
    if denom > 0:  # the smallest F with kappa F g >= 2: every window fits without clamping
        far = int(ctx.ceil(2 * window * ratio / denom))
    else:  # (a grid too coarse for the window) the continuous proportions, windows clamped
        far = max(1, int(round((prm.s + 1.0) / step)))
    far += far % 2  # F, hence T, even: the outputs are odd multiples of g/2 (never 0), x = 0 is unbiased
    total = window + far
    _check_grid_size(total, step)
    kappa = float(window * (ratio - 1) / (window * ratio + far))
    return TwoLevelGrid(kind="piecewise", epsilon=eps, step=step, total=total, window=window,
                        center_scale=1.0 / (kappa * step), ratio=ratio, built_from=(epsilon, k, granularity))


def piecewise_grid(epsilon: float, k: int = 1, *, granularity: Optional[float] = None) -> TwoLevelGrid:
    r"""The safe (grid) piecewise mechanism at the per-coordinate budget ``epsilon / k`` (module
    docstring). ``granularity`` (a power of two): the outputs' granularity (half the step);
    chosen from :math:`s` by default."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"`k` must be a positive integer; got {k!r}")
    return _piecewise_grid(float(epsilon), int(k), None if granularity is None else float(granularity))


def sample_piecewise(x: Tensor, epsilon: float, *, generator: torch.Generator | None = None,
                     sampler: Sampler = "safe", secure_mode: Optional[bool] = None,
                     granularity: Optional[float] = None) -> Tensor:
    r"""One 1-D PM draw per entry of ``x`` (in :math:`[-1, 1]`), float64, unbiased.

    ``sampler="safe"`` (default): the grid law of :func:`piecewise_grid`, exactly sampled
    (unbiased up to the window position's rounding, module docstring).

    ``sampler="float"``: window :math:`[\ell, r] = [x + (x-1)/m,\; x + (x+1)/m]` with
    :math:`m = e^{\epsilon/2}-1` (PrivGE Eq. 3's :math:`\ell(x), r(x)` rewritten); with
    :math:`\eta \sim U[0,1)`: if :math:`\eta < P =` ``near_probability`` the output is
    :math:`\ell + (r - \ell)w`, otherwise it is uniform on :math:`[-s, \ell) \cup (r, s]` (length
    :math:`s + 1`): with :math:`u = (s+1)w`, :math:`-s + u` if :math:`u < \ell + s`, else
    :math:`r + u - (\ell + s)`. The position :math:`w` is :math:`\eta` rescaled within its branch
    (:math:`\eta/P` or :math:`(\eta - P)/(1 - P)`), uniform and independent of the branch.
    """
    sampler = _check_safe_args(sampler, secure_mode, granularity)
    if sampler == "safe":
        grid = piecewise_grid(epsilon, granularity=granularity)
        x = _as_float64(x)
        _check_unit_interval(x)
        return grid.sample(x, _source(x.device, generator, secure_mode))
    prm = piecewise_params(epsilon)
    x = _as_float64(x)
    _check_unit_interval(x)
    generator = float_generator(generator, x.device)  # never torch's global generator
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


def piecewise_moments(x: Tensor | float, epsilon: float, k: int = 1, d: int = 1, *, sampler: Sampler = "safe",
                      granularity: Optional[float] = None) -> tuple[Tensor, Tensor]:
    r"""Mean and variance of high-dimensional PM per coordinate (module docstring); ``k = d = 1``
    is the 1-D mechanism at ``epsilon``. ``"float"``: the continuous law's, mean :math:`x`;
    ``"safe"`` (default): the grid law's, mean :math:`\kappa c g` (:math:`x` up to the window
    position's rounding) and variance :math:`(d/k)(A + \kappa c^2)g^2 - (\kappa c g)^2`."""
    k, d = _check_k_d(k, d)
    sampler = _check_safe_args(sampler, None, granularity)
    x = _as_float64(x)
    if sampler == "safe":
        grid = piecewise_grid(epsilon, k, granularity=granularity)
        c = grid.center(x)
        mean = grid.kappa * c
        return mean, (d / k) * (grid.second_moment + grid.kappa * c * c) - mean * mean
    prm = piecewise_params(epsilon / k)
    em = prm.em
    var = d * (em + 4.0) / (3.0 * k * em * em) + (d * (em + 1.0) / (k * em) - 1.0) * x * x
    return x.clone(), var


def piecewise_default_k(epsilon: float, d: int) -> int:
    r""":math:`\max(1, \min(d, \lfloor\epsilon/2.5\rfloor))` (Wang et al.'s choice, as in the reference code)."""
    eps = check_epsilon(epsilon)
    _, d = _check_k_d(1, d)
    return max(1, min(d, int(math.floor(eps / 2.5))))


# ------------------------------------------------------------------------- Multi-bit
#: the safe multi-bit sampler rounds its input to a multiple of this (so (x + 1) / 2 has 61 bits)
MULTIBIT_INPUT_GRANULARITY = 2.0 ** -60
_MB_HALF = 1 << 60


def multibit_probability(x: Tensor | float, epsilon: float) -> Tensor:
    r""":math:`\Pr[+1] = (1 + x\tanh(\epsilon/2))/2` of the 1-D multi-bit response."""
    e = _check_coordinate_epsilon(epsilon)
    x = _as_float64(x)
    _check_unit_interval(x)
    return (1.0 + x * math.tanh(e / 2.0)) / 2.0


def multibit_exact_probabilities(x: float, epsilon: float, k: int = 1) -> tuple:
    r"""The safe sampler's exact :math:`(\Pr[+1], \Pr[-1])` (256-bit ``mpmath``, each with its
    own relative precision) at input ``x`` and per-coordinate budget ``epsilon / k``:
    :math:`(\lambda E + 1 - \lambda)/(E+1)` and :math:`(\lambda + (1-\lambda)E)/(E+1)`,
    :math:`\lambda = (x_g + 1)/2`, :math:`x_g` = ``x`` rounded to a multiple of :math:`2^{-60}`."""
    _check_coordinate_epsilon(epsilon / k, "epsilon / k" if k > 1 else "epsilon")
    ctx = mp_context()
    ratio = _per_coordinate_ratio(epsilon, k)
    i = int(round_to_grid(torch.tensor([float(x)], dtype=torch.float64), MULTIBIT_INPUT_GRANULARITY)[0])
    lam, rest = ctx.mpf(i + _MB_HALF) / (2 * _MB_HALF), ctx.mpf(_MB_HALF - i) / (2 * _MB_HALF)
    return (lam * ratio + rest) / (ratio + 1), (lam + rest * ratio) / (ratio + 1)


def multibit_scale(epsilon: float, k: int, d: int) -> float:
    r"""The unbiasing factor :math:`d(e^{\epsilon/k}+1)/(k(e^{\epsilon/k}-1)) = d/(k\tanh(\epsilon/2k))`."""
    k, d = _check_k_d(k, d)
    e = _check_coordinate_epsilon(epsilon / k, "epsilon / k")
    return d / (k * math.tanh(e / 2.0))


def _multibit_grid(z: Tensor, epsilon: float, k: int, source: RandomSource) -> Tensor:
    """The safe multi-bit draws (+1 / -1, float64) of the inputs ``z`` at budget ``epsilon / k``."""
    ratio = _per_coordinate_ratio(epsilon, k)
    i = round_to_grid(z, MULTIBIT_INPUT_GRANULARITY).view(-1)
    n = i.numel()
    mix = (source.words(n) >> (WORD_BITS - 61)) < i.add_(_MB_HALF)  # Bernoulli((x + 1) / 2), exactly
    # with the mixture: +1 w.p. E/(E+1); without: w.p. 1/(E+1). One trial of the rare 1/(E+1)
    # flips the mixture's bit: +1 iff mix XOR flip
    flip = rare_trial(1 / (ratio + 1), n, source)
    return (mix ^ flip).to(torch.float64).mul_(2.0).sub_(1.0).view(z.shape)


def sample_multibit(x: Tensor, epsilon: float, *, generator: torch.Generator | None = None,
                    sampler: Sampler = "safe", secure_mode: Optional[bool] = None) -> Tensor:
    r"""One 1-D multi-bit draw per entry of ``x``: :math:`\pm 1` in float64 (not rescaled).
    Safe (default): the exact mixture of the module docstring; ``"float"``: ``torch.rand < p``."""
    sampler = _check_safe_args(sampler, secure_mode, None)
    if sampler == "safe":
        _check_coordinate_epsilon(epsilon)
        x = _as_float64(x)
        _check_unit_interval(x)
        return _multibit_grid(x, epsilon, 1, _source(x.device, generator, secure_mode))
    prob = multibit_probability(x, epsilon)
    generator = float_generator(generator, prob.device)  # never torch's global generator
    u = torch.rand(prob.shape, dtype=torch.float64, device=prob.device, generator=generator)
    return (u < prob).to(torch.float64).mul_(2.0).sub_(1.0)


def multibit_moments(x: Tensor | float, epsilon: float, k: int = 1, d: int = 1) -> tuple[Tensor, Tensor]:
    r"""Mean (:math:`x`) and variance :math:`(d/k)\coth^2(\epsilon/2k) - x^2` of
    high-dimensional MB per coordinate (module docstring; the same for both samplers, the safe
    one at the input rounded to :math:`2^{-60}`)."""
    c = multibit_scale(epsilon, k, d)
    x = _as_float64(x)
    k, d = _check_k_d(k, d)
    return x.clone(), (k / d) * c * c - x * x


def multibit_default_k(epsilon: float, d: int) -> int:
    r""":math:`\max(1, \min(d, \lfloor\epsilon/2.18\rfloor))` (as in the reference code)."""
    eps = check_epsilon(epsilon)
    _, d = _check_k_d(1, d)
    return max(1, min(d, int(math.floor(eps / 2.18))))
