r"""The extended square wave and its high-dimensional version HDS (PrivGE), as pure functions.

PrivGE (Li, Li, Liao, Jin, Wang, CIKM 2024; Sec. 3.1) perturbs each node's
feature vector :math:`x \in [-1, 1]^d` locally.

**1-D extended square wave** (Alg. 1), budget :math:`\epsilon`:

.. math::
    b = \frac{\epsilon e^\epsilon - e^\epsilon + 1}{e^\epsilon (e^\epsilon - \epsilon - 1)},
    \qquad p = \frac{e^\epsilon}{2 b e^\epsilon + 2}, \qquad q = \frac{1}{2 b e^\epsilon + 2},

and the output density (Eq. 5) on :math:`[-1-b, 1+b]` is :math:`p` on the window
:math:`[x-b, x+b]` and :math:`q` elsewhere (:math:`2bp + 2q = 1`, :math:`p/q = e^\epsilon`,
so the mechanism is :math:`\epsilon`-LDP). Moments (Eq. 7, Eq. 10):

.. math::
    \mathbb E[\tilde x] = C_1 x, \quad C_1 = \frac{b(e^\epsilon - 1)}{b e^\epsilon + 1}
        = 1 - \frac{1 - e^{-\epsilon}}{\epsilon}, \qquad
    \mathbb E[\tilde x^2] = \frac{b^3 e^\epsilon + 3b^2 + 3b + 1}{3(b e^\epsilon + 1)} + C_1 x^2.

**HDS** (Alg. 2): each node draws its own :math:`k`-subset :math:`S` of the
:math:`d` coordinates uniformly without replacement, perturbs each :math:`x_j, j \in S`
with the square wave at budget :math:`\epsilon/k` (so :math:`b, p, q` are those of
:math:`\epsilon/k`), and reports 0 (in the normalised domain) elsewhere: exactly
:math:`k` non-zeros per row, :math:`\epsilon`-LDP per node by composition (Thm 3.1).
Lemma 3.2, with the denominator corrected (the printed lemma and Eq. 8 read
:math:`C = kb(e^{\epsilon/k}-1)/(dbe^{\epsilon/k}+1)`; combining Eqs. 6 and 7 gives
:math:`d(be^{\epsilon/k}+1)`):

.. math::
    \mathbb E[\tilde x_j] = C x_j, \quad C = \frac{k}{d}\,\frac{b(e^{\epsilon/k}-1)}{b e^{\epsilon/k} + 1},
    \qquad
    \mathrm{Var}[\tilde x_j] = \frac{k(b^3 e^{\epsilon/k} + 3b^2 + 3b + 1)}{3d(b e^{\epsilon/k}+1)}
        + (C - C^2) x_j^2.

Numerics: everything is computed in float64 from :math:`\epsilon` through
``expm1`` in the forms :math:`b e^\epsilon = (\epsilon - 1 + e^{-\epsilon})/(1 - (1+\epsilon)e^{-\epsilon})`
and :math:`C_1 = 1 + \mathrm{expm1}(-\epsilon)/\epsilon`, and through Taylor series (to :math:`\epsilon^7`) for
:math:`\epsilon < 10^{-2}`; no NaN down to :math:`\epsilon = 10^{-8}` (the naive float32
formula is NaN at :math:`10^{-4}`).

This is the paper's mathematics. The authors' released ``SquareWave``
(https://github.com/Zening-Li/PrivGE, ``mechanisms.py``) rebinds ``x`` after the left branch, so
the window branch samples :math:`U[-b, b]` and the right branch :math:`U[b, 1+b]` whatever
:math:`x` is. It is not LDP for any :math:`\epsilon`: for :math:`x = +1` the outputs in
:math:`(\max(b, 1-b), 1+b]` have density 0, for :math:`x = -1` they do not, so the likelihood
ratio is unbounded. Nothing here follows that code.

A seeded ``torch.Generator`` makes draws reproducible and voids the guarantee.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import torch
from torch import Tensor

from ._noise import check_generator

__all__ = [
    "SquareWaveParams",
    "square_wave_params",
    "square_wave_b",
    "square_wave_density",
    "square_wave_moments",
    "sample_square_wave",
    "sample_k_subsets",
    "hds_coefficient",
    "hds_moments",
    "hds_perturb",
    "MAX_COORDINATE_EPSILON",
]

#: below this per-coordinate epsilon, b, b e^eps and C_1 come from their Taylor series
_SERIES_BELOW = 1e-2
#: the largest per-coordinate epsilon accepted: beyond it e^eps overflows float64, and the
#: window (width 2b, b < 1e-300) makes the mechanism the identity in floating point anyway
MAX_COORDINATE_EPSILON = 700.0


def _check_coordinate_epsilon(epsilon: float, name: str = "epsilon") -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real):
        raise TypeError(f"`{name}` must be a real number; got {type(epsilon).__name__} {epsilon!r}")
    e = float(epsilon)
    if not (0.0 < e <= MAX_COORDINATE_EPSILON):  # also rejects NaN
        raise ValueError(f"`{name}` (the per-coordinate budget) must lie in (0, {MAX_COORDINATE_EPSILON:g}]; "
                         f"got {epsilon!r}")
    return e


@dataclass(frozen=True)
class SquareWaveParams:
    r"""The constants of the extended square wave at budget ``epsilon`` (PrivGE Alg. 1, Eq. 5).

    Attributes:
        epsilon: the (per-coordinate) budget :math:`\epsilon`.
        b: half-width of the high-probability window, in :math:`(0, 1)`.
        be: :math:`b e^\epsilon` (finite even where :math:`e^\epsilon` alone is huge).
        p, q: the two density levels, :math:`p/q = e^\epsilon`.
        near_probability: :math:`2bp = b e^\epsilon/(b e^\epsilon + 1)`, the mass of the window.
        c1: :math:`C_1`, so that :math:`\mathbb E[\tilde x] = C_1 x`.
        second_moment: :math:`(b^3 e^\epsilon + 3b^2 + 3b + 1)/(3(b e^\epsilon + 1))`, the
            part of :math:`\mathbb E[\tilde x^2]` that does not depend on :math:`x`.
    """

    epsilon: float
    b: float
    be: float
    p: float
    q: float
    near_probability: float
    c1: float
    second_moment: float

    @property
    def low(self) -> float:
        """The lower end of the output domain, :math:`-1-b`."""
        return -1.0 - self.b

    @property
    def high(self) -> float:
        """The upper end of the output domain, :math:`1+b`."""
        return 1.0 + self.b


def square_wave_params(epsilon: float) -> SquareWaveParams:
    r""":math:`b, p, q, C_1` of the extended square wave at budget ``epsilon``, in float64.

    Raises ``ValueError`` unless :math:`0 < \epsilon \le 700`.
    """
    e = _check_coordinate_epsilon(epsilon)
    if e < _SERIES_BELOW:
        # sympy series of the closed forms (checked against 50-digit arithmetic in the tests)
        b = (1 - 2 * e / 3 + 2 * e**2 / 9 - 7 * e**3 / 135 + 4 * e**4 / 405 - 11 * e**5 / 6804
             + 29 * e**6 / 127575 - 17 * e**7 / 612360)
        be = 1 + e / 3 + e**2 / 18 + e**3 / 270 - e**4 / 3240 - e**5 / 13608 - e**6 / 2041200 + e**7 / 874800
        c1 = e / 2 - e**2 / 6 + e**3 / 24 - e**4 / 120 + e**5 / 720 - e**6 / 5040 + e**7 / 40320
    else:
        em = math.expm1(-e)                 # e^-eps - 1, in (-1, 0)
        t = math.exp(-e)                    # e^-eps (not 1 + em: that cancels to 0)
        be = (e + em) / (-em - e * t)       # (eps - 1 + e^-eps) / (1 - (1 + eps) e^-eps)
        b = be * t
        c1 = 1.0 + em / e
    q = 1.0 / (2.0 * be + 2.0)
    p = math.exp(e - math.log(2.0 * be + 2.0))
    near = be / (be + 1.0)
    second = (b * b * be + 3.0 * b * b + 3.0 * b + 1.0) / (3.0 * (be + 1.0))
    return SquareWaveParams(epsilon=e, b=b, be=be, p=p, q=q, near_probability=near, c1=c1, second_moment=second)


def square_wave_b(epsilon: float) -> float:
    r"""The window half-width :math:`b(\epsilon)` (PrivGE Alg. 1), float64, stable for tiny :math:`\epsilon`."""
    return square_wave_params(epsilon).b


def _as_float64(x: Tensor | float, name: str = "x") -> Tensor:
    if not isinstance(x, Tensor):  # Python numbers straight to float64 (as_tensor would round to float32)
        if isinstance(x, bool):
            raise TypeError(f"`{name}` must be real; got {x!r}")
        return torch.as_tensor(x, dtype=torch.float64)
    if not (x.is_floating_point() or x.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)):
        raise TypeError(f"`{name}` must be a real tensor; got dtype {x.dtype}")
    return x.to(torch.float64)


def _check_unit_interval(x: Tensor, name: str = "x") -> None:
    if x.numel() and not bool(((x >= -1.0) & (x <= 1.0)).all()):
        raise ValueError(f"`{name}` must lie in the normalised domain [-1, 1] (NaN not allowed)")


def square_wave_density(y: Tensor | float, x: Tensor | float, epsilon: float) -> Tensor:
    r"""The output density of the square wave at input ``x`` (Eq. 5): :math:`p` on
    :math:`[x-b, x+b]`, :math:`q` on the rest of :math:`[-1-b, 1+b]`, 0 outside."""
    prm = square_wave_params(epsilon)
    y, x = torch.broadcast_tensors(_as_float64(y, "y"), _as_float64(x))
    _check_unit_interval(x)
    inside = (y >= prm.low) & (y <= prm.high)
    near = (y - x).abs() <= prm.b
    level = torch.where(near, torch.full_like(y, prm.p), torch.full_like(y, prm.q))
    return torch.where(inside, level, torch.zeros_like(y))


def square_wave_moments(x: Tensor | float, epsilon: float) -> tuple[Tensor, Tensor]:
    r"""Mean :math:`C_1 x` and variance :math:`M + (C_1 - C_1^2)x^2` of the 1-D square wave
    (Eq. 7 and Eq. 10), with :math:`M` = ``second_moment``."""
    prm = square_wave_params(epsilon)
    x = _as_float64(x)
    return prm.c1 * x, prm.second_moment + (prm.c1 - prm.c1**2) * x * x


def sample_square_wave(x: Tensor, epsilon: float, *, generator: torch.Generator | None = None) -> Tensor:
    r"""One draw of the extended square wave per entry of ``x`` (Alg. 1), in float64.

    Draw :math:`\eta \sim U[0, 1)`. If :math:`\eta < P = b e^\epsilon/(b e^\epsilon + 1)`
    the output is :math:`x - b + 2bw`, uniform on the window; otherwise it is uniform on
    the far set :math:`[-1-b, x-b) \cup (x+b, 1+b]` of length 2: with :math:`u = 2w`,
    :math:`u - 1 - b` if :math:`u < x + 1` and :math:`u - 1 + b` otherwise. The position
    :math:`w` is :math:`\eta` rescaled within its branch (:math:`\eta/P`, or
    :math:`(\eta - P)/(1 - P)`), which is uniform on :math:`[0, 1)` and independent of the
    branch: one uniform per value instead of Alg. 1's two.

    Args:
        x (Tensor): inputs in the normalised domain :math:`[-1, 1]`, any shape.
        epsilon (float): the budget of *this* coordinate (``epsilon / k`` inside HDS).
        generator (torch.Generator, optional): on ``x``'s device; reproducible, voids the
            guarantee.
    """
    prm = square_wave_params(epsilon)
    x = _as_float64(x)
    _check_unit_interval(x)
    check_generator(generator, x.device)
    eta = torch.rand(x.shape, dtype=torch.float64, device=x.device, generator=generator)
    near = eta < prm.near_probability
    far_p = 1.0 / (prm.be + 1.0)  # 1 - P without cancellation
    w = torch.where(near, eta * (1.0 / prm.near_probability), (eta - prm.near_probability) * (1.0 / far_p))
    far = w * 2.0
    shift = (far < x + 1.0).to(torch.float64).mul_(-2.0 * prm.b).add_(prm.b)  # -b left, +b right
    far.sub_(1.0).add_(shift)
    out = torch.where(near, w.mul_(2.0 * prm.b).sub_(prm.b).add_(x), far)
    return out.clamp_(prm.low, prm.high)  # rounding only: every branch lies in [-1-b, 1+b]


def sample_k_subsets(num_rows: int, d: int, k: int, *, generator: torch.Generator | None = None,
                     device: torch.device | str | None = None, sort: bool = True) -> Tensor:
    r"""``num_rows`` independent uniform :math:`k`-subsets of :math:`\{0, \dots, d-1\}`,
    drawn without replacement (HDS step 1), as a ``[num_rows, k]`` LongTensor, sorted
    along each row unless ``sort=False`` (then in no particular order).

    Floyd's algorithm, vectorised over the rows: for :math:`j = d-k, \dots, d-1`, draw
    :math:`t \sim U\{0..j\}` and take :math:`j` if :math:`t` is already taken, else
    :math:`t`. Every :math:`k`-subset gets probability :math:`1/\binom{d}{k}`; the work is
    :math:`O(k)` per row (``[num_rows, d]`` booleans record what is taken; for
    :math:`k \le 24` a comparison with the :math:`\le 24` earlier picks is cheaper). The
    subsets are independent of the data.
    """
    if isinstance(num_rows, bool) or isinstance(d, bool) or isinstance(k, bool):
        raise TypeError("`num_rows`, `d` and `k` must be integers")
    num_rows, d, k = int(num_rows), int(d), int(k)
    if num_rows < 0:
        raise ValueError(f"`num_rows` must be >= 0; got {num_rows}")
    if not 1 <= k <= d:
        raise ValueError(f"`k` must lie in [1, d] = [1, {d}]; got {k}")
    device = torch.device(device) if device is not None else (
        generator.device if generator is not None else torch.device("cpu"))
    check_generator(generator, device)
    if k == d:
        return torch.arange(d, device=device).expand(num_rows, d).contiguous()
    sel = torch.empty((num_rows, k), dtype=torch.long, device=device)
    small = k <= 24  # comparing with the earlier picks beats the taken-table up to k ~ 24-32 (measured)
    if not small:
        taken = torch.zeros(num_rows * d, dtype=torch.bool, device=device)
        base = torch.arange(0, num_rows * d, d, device=device)
    for i, j in enumerate(range(d - k, d)):
        t = torch.randint(0, j + 1, (num_rows,), generator=generator, device=device)
        if i:
            dup = (sel[:, :i] == t.unsqueeze(1)).any(dim=1) if small else taken.index_select(0, base + t)
            t.masked_fill_(dup, j)
        if not small and i < k - 1:
            taken.index_fill_(0, base + t, True)
        sel[:, i] = t
    return sel.sort(dim=1).values if sort else sel


def hds_coefficient(epsilon: float, k: int, d: int) -> float:
    r""":math:`C = (k/d)\,C_1(\epsilon/k)`, the shrinkage of HDS's mean (Lemma 3.2, corrected)."""
    k, d = _check_k_d(k, d)
    return (k / d) * square_wave_params(epsilon / k).c1


def _check_k_d(k: int, d: int) -> tuple[int, int]:
    if isinstance(k, bool) or isinstance(d, bool) or int(k) != k or int(d) != d:
        raise TypeError(f"`k` and `d` must be integers; got k={k!r}, d={d!r}")
    k, d = int(k), int(d)
    if not 1 <= k <= d:
        raise ValueError(f"`k` must lie in [1, d] = [1, {d}]; got {k}")
    return k, d


def hds_moments(x: Tensor | float, epsilon: float, k: int, d: int, *,
                unbiased: bool = False) -> tuple[Tensor, Tensor]:
    r"""Mean and variance of one HDS coordinate at input ``x`` (Lemma 3.2):
    :math:`Cx` and :math:`kM/d + (C - C^2)x^2`, with :math:`M` the square wave's
    ``second_moment`` at :math:`\epsilon/k`. With ``unbiased=True`` (output divided by
    :math:`C`): :math:`x` and :math:`\mathrm{Var}/C^2`."""
    k, d = _check_k_d(k, d)
    prm = square_wave_params(epsilon / k)
    c = (k / d) * prm.c1
    x = _as_float64(x)
    mean = c * x
    var = (k / d) * prm.second_moment + (c - c * c) * x * x
    if unbiased:
        return mean / c, var / (c * c)
    return mean, var


def hds_perturb(x: Tensor, epsilon: float, k: int, *, unbiased: bool = False,
                generator: torch.Generator | None = None) -> Tensor:
    r"""HDS (Alg. 2) on every row of a dense ``[n, d]`` matrix already in :math:`[-1, 1]`.

    Returns a float64 ``[n, d]`` matrix with exactly ``k`` sampled coordinates per row
    perturbed by :func:`sample_square_wave` at ``epsilon / k`` (divided by :math:`C` if
    ``unbiased``) and 0 elsewhere. No bookkeeping: :class:`~pyg_private.transforms.HDSFeaturePerturb`
    is the accounted, chunked transform.
    """
    x = _as_float64(x)
    if x.dim() != 2:
        raise ValueError(f"`x` must be a 2-D [n, d] matrix; got shape {tuple(x.shape)}")
    n, d = x.shape
    k, d = _check_k_d(k, d)
    _check_unit_interval(x)
    idx = sample_k_subsets(n, d, k, generator=generator, device=x.device)
    vals = sample_square_wave(x.gather(1, idx), epsilon / k, generator=generator)
    if unbiased:
        vals.div_(hds_coefficient(epsilon, k, d))
    return torch.zeros_like(x).scatter_(1, idx, vals)
