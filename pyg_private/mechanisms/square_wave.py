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

**Floating-point-safe sampling (the default, ``sampler="safe"``).** A float sampler of a
continuous window law does not realise it: its outputs live on a data-dependent set of floats,
and a release that is impossible under another input identifies the input with certainty
(Mironov, CCS 2012; Jin et al., S&P 2022). The safe samplers draw an exactly sampled law on a
power-of-two grid instead, a :class:`TwoLevelGrid`: with step :math:`g = 2^{-L}` (by default
:math:`L = \min(50, \max(22, \lceil\log_2(1/b)\rceil + 20))`, so that the window spans at least
:math:`2^{20}` steps when float64 allows), the input is rounded to the nearest multiple
:math:`ig` in :math:`[-1, 1]` (:math:`\pm 1` are grid points; under local DP any two inputs are
neighbours, so this pre-processing costs nothing), and the output is one of the
:math:`T = F + W` points :math:`y_j = (j - (T-1)/2)\,g`, :math:`j = 0, \dots, T-1`, with
:math:`F = 2/g` and :math:`W = 2B`, :math:`B = \max(1, \mathrm{round}(b/g))` (odd multiples of
:math:`g/2`: never 0, so an HDS row keeps exactly :math:`k` non-zeros). The :math:`W` points of
the window centred at :math:`ig` have probability :math:`p_g` each, the :math:`F` others
:math:`q_g` each:

.. math::
    p_g = \frac{E}{WE + F}, \qquad q_g = \frac{1}{WE + F}, \qquad E = e^{\epsilon}.

Every input has the same :math:`W` window points and :math:`F` far points on the same support,
so the probabilities of any output under any two inputs differ by a factor :math:`1` or
:math:`E^{\pm 1}`: **exactly** :math:`\epsilon`-LDP, with no impossible output. A draw is an
exact Bernoulli(:math:`WE/(WE+F)`) trial ("window or not",
:func:`~pyg_private.mechanisms.exact_discrete.bernoulli`, the probability in 256-bit arithmetic)
and an exactly uniform window or far point (rejection from uniform 63-bit words); the :math:`k`
coordinates of HDS are an exactly uniform :math:`k`-subset (Floyd's algorithm on exactly
uniform integers). :math:`E` is taken as :math:`e^{\epsilon}(1 - 2^{-200})`, and inside HDS
:math:`\epsilon = \min(\mathrm{fl}(\epsilon_{\rm node}/k), \epsilon_{\rm node}/k)`, so that
neither the 256-bit arithmetic nor the float rounding of :math:`\epsilon/k` can put the realised
ratio above the charged one: it is strictly below :math:`e^{\epsilon}`, and the :math:`k`
coordinates compose to at most :math:`e^{\epsilon_{\rm node}}`. The trial's success is the
rarer branch, sampled with its *relative* 256-bit precision (:class:`ExactTrial`: a probability
:math:`2^{-m} r` is :math:`m` fair bits all 0 and a Bernoulli(:math:`r`)), so the realised
probabilities of both branches are within a relative :math:`2^{-219}` of the stated ones even when
one of them is :math:`e^{-700}`; the :math:`2^{-200}` margin absorbs this. (A trial fails with an
error instead of deciding with probability below :math:`2^{-250}`, independently of the data.)

The moments of the grid law at a grid input :math:`x = ig` follow from the sums of the uniform
laws on the window and on the far points (the support is symmetric about 0): with
:math:`P = WE/(WE+F)`,

.. math::
    \mathbb E[\tilde y] = \kappa x, \quad \kappa = P - (1-P)\frac{W}{F} = \frac{W(E-1)}{WE + F},
    \qquad \mathbb E[\tilde y^2] = A g^2 + \kappa x^2, \quad
    A = P\,\frac{W^2-1}{12} + (1-P)\,\frac{T(T^2-1) - W(W^2-1)}{12F},

i.e. the continuous formulas with :math:`C_1 \to \kappa` and the second moment
:math:`\to A g^2` (as :math:`g \to 0` with :math:`Wg \to 2b` and :math:`Fg = 2`, :math:`\kappa \to
C_1` and :math:`A g^2 \to (b^3 e^\epsilon + 3b^2 + 3b + 1)/(3(be^\epsilon + 1))`). The moment
functions of this module compute them for the sampler they are given (``"safe"`` by default),
at the rounded input. ``sampler="float"`` keeps the floating-point sampler of the continuous law
(for benchmarks and as an audit's positive control; open to the attacks above).

A seeded ``torch.Generator`` makes draws reproducible and voids the guarantee; ``secure_mode``
draws every random bit from the operating system's CSPRNG
(:mod:`pyg_private.sampling.words.sources`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING, Any, Literal, Optional

import torch
from torch import Tensor

from ._noise import check_generator, float_generator
from .sampler_options import check_sampler_options
from .exact_discrete import bernoulli
from ..sampling.bernoulli import exact_bernoulli
from ..sampling.grid import check_granularity
from ..sampling.tables import mp_context
from ..sampling.words import WORD_BITS, RandomSource, resolve_secure_mode

if TYPE_CHECKING:  # the 256-bit numbers of the annotations; mpmath is imported where they are computed
    import mpmath

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
    "TwoLevelGrid",
    "square_wave_grid",
    "rescaled_granularity",
    "rescale_on_grid",
    "rare_trial",
    "ExactTrial",
]

Sampler = Literal["safe", "float"]

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


# ----------------------------------------------------------------------------- the safe grid laws
#: the realised likelihood ratio is e^eps (1 - 2^-200): below e^eps whatever the 256-bit rounding
_RATIO_SHRINK_BITS = 200
#: default window: at least 2^20 steps on each side of the input (when float64 allows)
_WINDOW_STEPS_LOG2 = 20
#: the coarsest default step of the square wave (2^-22: its outputs are exact in float32)
_SW_COARSEST_LOG2 = -22
#: T <= 2^52 output points: every index and every output value is exact in float64
_MAX_POINTS = 1 << 52
_LEMIRE_BITS = 32


def _per_coordinate_ratio(epsilon: float, k: int = 1) -> "mpmath.mpf":
    r""":math:`e^{\epsilon'}(1 - 2^{-200})` in 256-bit arithmetic, with
    :math:`\epsilon' = \min(\mathrm{fl}(\epsilon/k), \epsilon/k)` (the float ``epsilon`` taken
    exactly): strictly below both the ratio the events record per coordinate and the
    :math:`k`-th root of :math:`e^\epsilon`."""
    ctx = mp_context()
    per = ctx.mpf(float(epsilon)) / int(k)
    per = min(per, ctx.mpf(float(epsilon) / int(k)))
    return ctx.exp(per) * (1 - ctx.mpf(2) ** -_RATIO_SHRINK_BITS)


def _uniform_below(word: Tensor, high: int) -> tuple[Tensor, Optional[Tensor]]:
    """A value uniform on ``[0, high)`` from each uniform 63-bit word, and the mask of the words
    to reject (``None``: none). Accepted values are exactly uniform: the top bits for a power of
    two, Lemire's multiply-and-compare on the top 32 bits below 2^31 ("Fast random integer
    generation in an interval", TOMACS 2019), else a remainder below the largest multiple."""
    if high & (high - 1) == 0:
        return word >> (WORD_BITS - (high.bit_length() - 1)), None
    if high < 1 << (_LEMIRE_BITS - 1):
        prod = (word >> (WORD_BITS - _LEMIRE_BITS)) * high  # < 2^32 * 2^31: no overflow
        low = prod & ((1 << _LEMIRE_BITS) - 1)
        return prod >> _LEMIRE_BITS, low < ((1 << _LEMIRE_BITS) % high)
    limit = ((1 << WORD_BITS) // high) * high
    return torch.remainder(word, high), word >= limit


#: below this, a trial is split into 2^-m (m fair bits) times a probability in [1/2, 1)
_SMALL_PROBABILITY = 2.0 ** -32


class ExactTrial:
    r"""Exact Bernoulli(``p``) trials that keep ``p``'s *relative* precision (256 bits) however
    small ``p`` is, with everything but the words computed once.

    :func:`~pyg_private.mechanisms.exact_discrete.bernoulli` compares at most 252 bits after the
    binary point, so on its own it realises :math:`p < 2^{-252}` as 0 (and loses relative
    precision long before). For :math:`p \ge 2^{-32}` a trial is that comparison (a word below
    :math:`\lfloor p\,2^{63}\rfloor`, further words only on a tie, probability :math:`2^{-63}`);
    below, :math:`p = 2^{-m} r` with :math:`r \in [1/2, 1)` is realised as :math:`m` fair bits all 0
    (checked on the first word for every trial, on further words for the about
    :math:`n 2^{-\min(m, 63)}` candidates) and an exact Bernoulli(:math:`r`).
    """

    def __init__(self, p: Any) -> None:
        ctx = mp_context()
        self.p = ctx.mpf(p)
        if not (0 <= self.p <= 1):
            raise ValueError(f"a probability must lie in [0, 1]; got {self.p!r}")
        self.small = 0 < self.p < _SMALL_PROBABILITY
        if self.small:
            mantissa, exponent = ctx.frexp(self.p)
            self.mantissa, self.zeros = mantissa, -int(exponent)
        else:
            self.threshold = min(int(ctx.floor(self.p * (1 << WORD_BITS))), 1 << WORD_BITS)

    def sample(self, n: int, source: RandomSource) -> Tensor:
        """``n`` independent trials (``bool`` on ``source.device``)."""
        if not self.small:
            if self.threshold >= 1 << WORD_BITS:  # p == 1
                return torch.ones(n, dtype=torch.bool, device=source.device)
            word = source.words(n)
            out = word < self.threshold
            tie = (word == self.threshold).nonzero().squeeze(1)
            for i in tie.tolist():  # probability 2^-63 each: compare further bits of p
                out[i] = exact_bernoulli(self.p, self.threshold, WORD_BITS, source)
            return out
        first = min(self.zeros, WORD_BITS)
        candidates = ((source.words(n) >> (WORD_BITS - first)) == 0).nonzero().squeeze(1)
        out = torch.zeros(n, dtype=torch.bool, device=source.device)
        for i in candidates.tolist():
            rest, zeros = self.zeros - first, True
            while rest > 0 and zeros:
                bits = min(rest, WORD_BITS)
                zeros = int(source.words(1)[0]) >> (WORD_BITS - bits) == 0
                rest -= bits
            if zeros:
                out[i] = bool(bernoulli(self.mantissa, (1,), source)[0])
        return out


def rare_trial(p: Any, n: int, source: RandomSource) -> Tensor:
    """``n`` exact Bernoulli(``p``) trials (``bool``), keeping ``p``'s relative precision
    (:class:`ExactTrial`)."""
    return ExactTrial(p).sample(int(n), source)


def _source(device: torch.device, generator: Optional[torch.Generator], secure_mode: Optional[bool]) -> RandomSource:
    check_generator(generator, device)
    return RandomSource(device, generator=generator, secure=resolve_secure_mode(secure_mode, generator))


def _check_safe_args(sampler: str, secure_mode: Optional[bool], granularity: Optional[float]) -> str:
    return check_sampler_options(sampler, secure_mode, None, granularity=granularity)[0]


@dataclass(frozen=True, eq=False)
class TwoLevelGrid:
    r"""An exactly sampled two-level window law on a power-of-two grid: the safe form of the
    extended square wave (:func:`square_wave_grid`) and of the piecewise mechanism
    (:func:`~pyg_private.mechanisms.ldp_baselines.piecewise_grid`).

    The outputs are the ``total`` :math:`= T` points :math:`y_j = (j - (T-1)/2)\,g`,
    :math:`j = 0..T-1` (``step`` :math:`= g`, a power of two). For an input :math:`x` the window
    is the ``window`` :math:`= W` consecutive points starting at index :math:`a(x) \in [0, F]`,
    :math:`F = T - W`; each window point has probability :math:`p_g = E/(WE + F)`, each other
    point :math:`q_g = 1/(WE+F)`, with :math:`E` = ``ratio`` :math:`< e^\epsilon`. Since
    :math:`W`, :math:`F` and the support do not depend on :math:`x`, two inputs' probabilities of
    any output differ by a factor 1 or :math:`E^{\pm 1}`: :math:`\epsilon`-LDP exactly, whatever
    the window placement :math:`a(x)` (a deterministic function of the input; only the moments
    depend on it). The placement is :math:`a(x) = \mathrm{clamp}(\mathrm{round}(x\,\gamma + F/2),
    0, F)` with :math:`\gamma` = ``center_scale`` (:math:`1/g` for the square wave: the window is
    centred at the rounded input; :math:`1/(\kappa g)` for PM: unbiased up to the rounding).

    With :math:`P = WE/(WE+F)` and the window centre :math:`c = a - F/2` (in steps),
    :math:`\mathbb E[y] = \kappa c g` and :math:`\mathbb E[y^2] = (A + \kappa c^2) g^2`,
    :math:`\kappa = W(E-1)/(WE+F)`,
    :math:`A = P(W^2-1)/12 + (1-P)(T(T^2-1) - W(W^2-1))/(12F)` (module docstring).

    Attributes:
        kind: ``"square-wave"`` or ``"piecewise"``.
        epsilon: the per-coordinate budget (float) the ratio is below.
        step: :math:`g`.
        total, window: :math:`T`, :math:`W`.
        center_scale: :math:`\gamma`.
        ratio: :math:`E` (256-bit ``mpmath`` number).
    """

    kind: str
    epsilon: float
    step: float
    total: int
    window: int
    center_scale: float
    ratio: Any
    #: ``(epsilon, k, granularity)`` it was built from: pickling rebuilds it from them
    built_from: tuple = ()

    def __reduce__(self):
        return _rebuild_grid, (self.kind, *self.built_from)

    # -- derived constants ---------------------------------------------------------------------
    @property
    def far(self) -> int:
        """:math:`F = T - W`, the points outside the window."""
        return self.total - self.window

    @property
    def granularity(self) -> float:
        """The power of two every output is a multiple of: :math:`g/2` when :math:`T` is even
        (the outputs are then odd multiples of it, never 0), :math:`g` otherwise."""
        return self.step / 2 if self.total % 2 == 0 else self.step

    @property
    def high(self) -> float:
        """The largest output, :math:`(T-1)g/2` (the smallest is its negative)."""
        return (self.total - 1) * (self.step / 2)

    @property
    def low(self) -> float:
        return -self.high

    @functools.cached_property
    def near_probability(self) -> Any:
        """:math:`P = WE/(WE+F)`, the window's mass (256-bit)."""
        e = self.ratio
        return self.window * e / (self.window * e + self.far)

    @functools.cached_property
    def far_probability(self) -> Any:
        """:math:`1 - P = F/(WE+F)`, computed as such (256-bit relative precision even when tiny)."""
        return self.far / (self.window * self.ratio + self.far)

    @functools.cached_property
    def kappa(self) -> float:
        r""":math:`\kappa = W(E-1)/(WE+F)`: :math:`\mathbb E[y] = \kappa\,c\,g`."""
        e = self.ratio
        return float(self.window * (e - 1) / (self.window * e + self.far))

    @functools.cached_property
    def second_moment(self) -> float:
        r""":math:`A g^2`: :math:`\mathbb E[y^2] = A g^2 + \kappa (cg)^2`."""
        ctx = mp_context()
        p, r = ctx.mpf(self.near_probability), ctx.mpf(self.far_probability)
        w, t, f = self.window, self.total, self.far
        a = p * ctx.mpf(w * w - 1) / 12 + r * ctx.mpf(t * (t * t - 1) - w * (w * w - 1)) / (12 * f)
        return float(a * ctx.mpf(self.step) ** 2)

    def levels(self) -> tuple[Any, Any]:
        """The two exact probabilities ``(p_g, q_g)`` (256-bit), ``p_g / q_g = ratio``."""
        ctx = mp_context()
        return ctx.mpf(self.near_probability) / self.window, ctx.mpf(self.far_probability) / self.far

    # -- the law -------------------------------------------------------------------------------
    def start(self, x: Tensor) -> Tensor:
        """The window's first index :math:`a(x)` (``int64``) for float64 inputs ``x``."""
        return x.mul(self.center_scale).add_(self.far / 2).round_().clamp_(0, self.far).to(torch.int64)

    def center(self, x: Tensor) -> Tensor:
        """The window centre :math:`c\\,g = (a(x) - F/2)\\,g` in output units (float64)."""
        return (self.start(x).to(torch.float64) - self.far / 2) * self.step

    def mean(self, x: Tensor | float) -> Tensor:
        """:math:`\\mathbb E[y] = \\kappa c g` at the inputs ``x``."""
        return self.kappa * self.center(_as_float64(x))

    def variance(self, x: Tensor | float) -> Tensor:
        """:math:`\\mathrm{Var}[y] = A g^2 + (\\kappa - \\kappa^2)(cg)^2` at the inputs ``x``."""
        c = self.center(_as_float64(x))
        return self.second_moment + (self.kappa - self.kappa ** 2) * c * c

    def values(self) -> Tensor:
        """All ``total`` outputs, ascending (float64; for small grids)."""
        return self.to_values(torch.arange(self.total, dtype=torch.int64))

    def exact_pmf(self, x: float) -> list:
        """The exact probabilities (256-bit) of the outputs :meth:`values` at input ``x`` (for
        small grids)."""
        a = int(self.start(torch.tensor([float(x)], dtype=torch.float64))[0])
        p, q = self.levels()
        return [p if a <= j < a + self.window else q for j in range(self.total)]

    def to_values(self, index: Tensor) -> Tensor:
        """Output values of the indices ``j`` (float64, exact)."""
        return (index * 2 - (self.total - 1)).to(torch.float64).mul_(self.step / 2)

    @functools.cached_property
    def _trial(self) -> tuple[ExactTrial, bool]:
        """The exact trial of the rarer branch (its probability keeps its relative precision), and
        whether that branch is the window."""
        near, far = self.near_probability, self.far_probability
        return (ExactTrial(near), True) if near <= far else (ExactTrial(far), False)

    def sample_index(self, start: Tensor, source: RandomSource) -> Tensor:
        """One output index per window start (``int64``, flattened), exactly from the law."""
        start = start.reshape(-1)
        n = start.numel()
        trial, rare_is_near = self._trial
        near = trial.sample(n, source)
        if not rare_is_near:
            near.logical_not_()
        m = near.to(torch.int64)  # selections by arithmetic: torch.where on int64 is several times slower
        word = source.words(n)
        pos_near, bad_near = _uniform_below(word, self.window)
        pos_far, bad_far = _uniform_below(word, self.far)
        pos = pos_near.sub_(pos_far).mul_(m).add_(pos_far)
        if bad_near is not None or bad_far is not None:
            bad_near = bad_near & near if bad_near is not None else None
            bad_far = bad_far & ~near if bad_far is not None else None
            bad = bad_near if bad_far is None else (bad_far if bad_near is None else bad_near | bad_far)
            bad = bad.nonzero().squeeze(1)
            while bad.numel():  # rejection (about 2^-9 of the words at most): a fresh word, same branch
                w = source.words(bad.numel())
                nb = near[bad]
                pn, rn = _uniform_below(w, self.window)
                pf, rf = _uniform_below(w, self.far)
                pos[bad] = torch.where(nb, pn, pf)
                rn = rn if rn is not None else torch.zeros_like(nb)
                rf = rf if rf is not None else torch.zeros_like(nb)
                bad = bad[torch.where(nb, rn, rf)]
        # window: a + pos; far: the pos-th point outside [a, a + W), i.e. pos, or pos + W from a on
        far_shift = (pos >= start).to(torch.int64).mul_(self.window)
        return pos.add_(start.sub(far_shift).mul_(m).add_(far_shift))

    def sample(self, x: Tensor, source: RandomSource) -> Tensor:
        """One exact draw per entry of the float64 inputs ``x`` (same shape, float64)."""
        return self.to_values(self.sample_index(self.start(x), source)).reshape(x.shape)

    def __repr__(self) -> str:
        return (f"TwoLevelGrid(kind={self.kind!r}, epsilon={self.epsilon:g}, step=2**{int(math.log2(self.step))}, "
                f"total={self.total}, window={self.window})")


def _rebuild_grid(kind: str, epsilon: float, k: int, granularity: Optional[float]) -> TwoLevelGrid:
    if kind == "square-wave":
        return square_wave_grid(epsilon, k, granularity=granularity)
    from .ldp_baselines import piecewise_grid

    return piecewise_grid(epsilon, k, granularity=granularity)


def _check_grid_size(total: int, step: float) -> None:
    if total > _MAX_POINTS:
        raise ValueError(f"`granularity` {step / 2!r} is too fine for this budget: the grid would have {total} points "
                         "(at most 2^52, so that every output is exact in float64); use a coarser power of two")


@functools.lru_cache(maxsize=256)
def _square_wave_grid(epsilon: float, k: int, granularity: Optional[float]) -> TwoLevelGrid:
    eps = _check_coordinate_epsilon(epsilon / k, "epsilon / k" if k > 1 else "epsilon")
    b = square_wave_params(eps).b
    if granularity is None:
        need = math.ceil(-math.log2(b)) + _WINDOW_STEPS_LOG2
        step = 2.0 ** -min(50, max(-_SW_COARSEST_LOG2, need))
    else:
        step = 2.0 * check_granularity(granularity)
        if step > 1.0:
            raise ValueError(f"`granularity` must be at most 1/2 for the square wave (the inputs -1, 0, 1 are grid "
                             f"points); got {granularity!r}")
    far = int(round(2.0 / step))
    half = max(1, int(round(b / step)))
    total = far + 2 * half
    _check_grid_size(total, step)
    ratio = _per_coordinate_ratio(epsilon, k)
    return TwoLevelGrid(kind="square-wave", epsilon=eps, step=step, total=total, window=2 * half,
                        center_scale=1.0 / step, ratio=ratio, built_from=(epsilon, k, granularity))


def square_wave_grid(epsilon: float, k: int = 1, *, granularity: Optional[float] = None) -> TwoLevelGrid:
    r"""The safe (grid) extended square wave at the per-coordinate budget ``epsilon / k``
    (module docstring): window :math:`W = 2B` points, :math:`B = \max(1, \mathrm{round}(b/g))`,
    far :math:`F = 2/g` points, the input rounded to a multiple of :math:`g` in :math:`[-1, 1]`.

    Args:
        epsilon (float): the budget; per coordinate it is ``epsilon / k`` (computed so that the
            :math:`k` coordinates compose to at most ``epsilon`` exactly).
        k (int): the number of coordinates it is shared by (HDS's :math:`k`; 1 for the 1-D law).
        granularity (float, optional): the outputs' granularity, a power of two at most 1/2 (the
            step is twice it); by default :math:`2^{-L-1}` with the step :math:`2^{-L}` of the
            module docstring.
    """
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"`k` must be a positive integer; got {k!r}")
    return _square_wave_grid(float(epsilon), int(k), None if granularity is None else float(granularity))


def rescaled_granularity(granularity: float, factor: float) -> float:
    """The granularity of grid values (multiples of ``granularity``) multiplied by ``factor``
    (:func:`rescale_on_grid`): ``granularity * |factor|`` when ``factor`` is a power of two, else
    the power of two :math:`2^{-20}` below ``granularity * |factor|`` (rounded down)."""
    f = abs(float(factor))
    if not (math.isfinite(f) and f > 0):
        raise ValueError(f"the rescaling factor must be finite and non-zero; got {factor!r}")
    if math.frexp(f)[0] == 0.5:
        return granularity * f
    return 2.0 ** (math.frexp(granularity * f)[1] - 1 - 20)


def rescale_on_grid(values: Tensor, factor: float, granularity: float) -> tuple[Tensor, float]:
    r"""``values`` (multiples of ``granularity``) times ``factor``, as exact multiples of
    :func:`rescaled_granularity`: exactly ``values * factor`` for a power of two, else the product
    rounded to the nearest multiple of a grid :math:`2^{20}` times finer than the rescaled
    values' spacing (distinct values stay distinct; the rounding moves a value by at most
    :math:`2^{-21}` of a step). A deterministic function of the grid values, i.e.
    post-processing. In place on ``values`` (float64); returns it and the granularity."""
    g_out = rescaled_granularity(granularity, factor)
    if math.frexp(abs(float(factor)))[0] == 0.5:
        return values.mul_(float(factor)), g_out
    return values.mul_(float(factor) / g_out).round_().mul_(g_out), g_out


def square_wave_moments(x: Tensor | float, epsilon: float, *, sampler: Sampler = "safe",
                        granularity: Optional[float] = None) -> tuple[Tensor, Tensor]:
    r"""Mean and variance of the 1-D square wave at input ``x``: for ``sampler="float"`` the
    continuous law's :math:`C_1 x` and :math:`M + (C_1 - C_1^2)x^2` (Eq. 7 and Eq. 10, :math:`M` =
    ``second_moment``); for ``"safe"`` (default) the grid law's, :math:`\kappa x_g` and
    :math:`Ag^2 + (\kappa - \kappa^2)x_g^2` at the rounded input :math:`x_g` (module docstring)."""
    sampler = _check_safe_args(sampler, None, granularity)
    if sampler == "safe":
        grid = square_wave_grid(epsilon, granularity=granularity)
        x = _as_float64(x)
        return grid.mean(x), grid.variance(x)
    prm = square_wave_params(epsilon)
    x = _as_float64(x)
    return prm.c1 * x, prm.second_moment + (prm.c1 - prm.c1**2) * x * x


def sample_square_wave(x: Tensor, epsilon: float, *, generator: torch.Generator | None = None,
                       sampler: Sampler = "safe", secure_mode: Optional[bool] = None,
                       granularity: Optional[float] = None) -> Tensor:
    r"""One draw of the extended square wave per entry of ``x`` (Alg. 1), in float64.

    ``sampler="safe"`` (default): the grid law of :func:`square_wave_grid`, sampled exactly
    (module docstring); every output is an odd multiple of its ``granularity``, in
    :math:`[-1-b_g, 1+b_g]` with :math:`b_g = (B - 1/2)g \le b + g/2`.

    ``sampler="float"``: the floating-point sampler of the continuous law. Draw
    :math:`\eta \sim U[0, 1)`. If :math:`\eta < P = b e^\epsilon/(b e^\epsilon + 1)`
    the output is :math:`x - b + 2bw`, uniform on the window; otherwise it is uniform on
    the far set :math:`[-1-b, x-b) \cup (x+b, 1+b]` of length 2: with :math:`u = 2w`,
    :math:`u - 1 - b` if :math:`u < x + 1` and :math:`u - 1 + b` otherwise. The position
    :math:`w` is :math:`\eta` rescaled within its branch (:math:`\eta/P`, or
    :math:`(\eta - P)/(1 - P)`), which is uniform on :math:`[0, 1)` and independent of the
    branch: one uniform per value instead of Alg. 1's two. Open to floating-point attacks.

    Args:
        x (Tensor): inputs in the normalised domain :math:`[-1, 1]`, any shape.
        epsilon (float): the budget of *this* coordinate (``epsilon / k`` inside HDS).
        generator (torch.Generator, optional): on ``x``'s device; reproducible, voids the
            guarantee.
        sampler (str): ``"safe"`` (default) or ``"float"``.
        secure_mode (bool, optional): every random bit from a CSPRNG keyed from the OS (safe sampler only;
            ``None``: the process-wide default).
        granularity (float, optional): the safe grid's granularity (:func:`square_wave_grid`).
    """
    sampler = _check_safe_args(sampler, secure_mode, granularity)
    if sampler == "safe":
        grid = square_wave_grid(epsilon, granularity=granularity)
        x = _as_float64(x)
        _check_unit_interval(x)
        return grid.sample(x, _source(x.device, generator, secure_mode))
    prm = square_wave_params(epsilon)
    x = _as_float64(x)
    _check_unit_interval(x)
    generator = float_generator(generator, x.device)  # never torch's global generator
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
                     device: torch.device | str | None = None, sort: bool = True, sampler: Sampler = "safe",
                     secure_mode: Optional[bool] = None, source: Optional[RandomSource] = None) -> Tensor:
    r"""``num_rows`` independent uniform :math:`k`-subsets of :math:`\{0, \dots, d-1\}`,
    drawn without replacement (HDS step 1), as a ``[num_rows, k]`` LongTensor, sorted
    along each row unless ``sort=False`` (then in no particular order).

    Floyd's algorithm, vectorised over the rows: for :math:`j = d-k, \dots, d-1`, draw
    :math:`t \sim U\{0..j\}` and take :math:`j` if :math:`t` is already taken, else
    :math:`t`. Every :math:`k`-subset gets probability :math:`1/\binom{d}{k}`; the work is
    :math:`O(k)` per row (``[num_rows, d]`` booleans record what is taken; for
    :math:`k \le 24` a comparison with the :math:`\le 24` earlier picks is cheaper). The
    subsets are independent of the data.

    ``sampler="safe"`` (default) draws every :math:`t` exactly uniformly from 63-bit words (from
    ``source`` when given, else from a new :class:`~pyg_private.sampling.RandomSource`
    with ``generator`` / ``secure_mode``), so every subset has probability exactly
    :math:`1/\binom{d}{k}`; ``"float"`` uses ``torch.randint`` (whose modulo reduction of 32- or
    64-bit draws is uniform only approximately).
    """
    if isinstance(num_rows, bool) or isinstance(d, bool) or isinstance(k, bool):
        raise TypeError("`num_rows`, `d` and `k` must be integers")
    num_rows, d, k = int(num_rows), int(d), int(k)
    if num_rows < 0:
        raise ValueError(f"`num_rows` must be >= 0; got {num_rows}")
    if not 1 <= k <= d:
        raise ValueError(f"`k` must lie in [1, d] = [1, {d}]; got {k}")
    sampler = _check_safe_args(sampler, secure_mode, None)
    if source is not None:
        if sampler == "float":
            raise ValueError("a `source` of random words is for the safe sampler")
        device = source.device
    else:
        device = torch.device(device) if device is not None else (
            generator.device if generator is not None else torch.device("cpu"))
        check_generator(generator, device)
    if k == d:
        return torch.arange(d, device=device).expand(num_rows, d).contiguous()
    if sampler == "safe" and source is None:
        source = _source(device, generator, secure_mode)
    elif sampler == "float":
        generator = float_generator(generator, device)  # never torch's global generator
    sel = torch.empty((num_rows, k), dtype=torch.long, device=device)
    small = k <= 24  # comparing with the earlier picks beats the taken-table up to k ~ 24-32 (measured)
    if not small:
        taken = torch.zeros(num_rows * d, dtype=torch.bool, device=device)
        base = torch.arange(0, num_rows * d, d, device=device)
    words = source.words(num_rows * k).view(k, num_rows) if source is not None else None
    for i, j in enumerate(range(d - k, d)):
        if source is not None:
            t, bad = _uniform_below(words[i], j + 1)
            if bad is not None:  # rejection: fresh words (exactly uniform on [0, j])
                redo = bad.nonzero().squeeze(1)
                while redo.numel():
                    value, again = _uniform_below(source.words(redo.numel()), j + 1)
                    t[redo] = value
                    redo = redo[again]
        else:
            t = torch.randint(0, j + 1, (num_rows,), generator=generator, device=device)
        if i:
            dup = (sel[:, :i] == t.unsqueeze(1)).any(dim=1) if small else taken.index_select(0, base + t)
            t.masked_fill_(dup, j)
        if not small and i < k - 1:
            taken.index_fill_(0, base + t, True)
        sel[:, i] = t
    return sel.sort(dim=1).values if sort else sel


def hds_coefficient(epsilon: float, k: int, d: int, *, sampler: Sampler = "safe",
                    granularity: Optional[float] = None) -> float:
    r""":math:`C = (k/d)\,C_1(\epsilon/k)`, the shrinkage of HDS's mean (Lemma 3.2, corrected);
    for the safe sampler (default) :math:`C = (k/d)\,\kappa` of the grid law."""
    k, d = _check_k_d(k, d)
    sampler = _check_safe_args(sampler, None, granularity)
    if sampler == "safe":
        return (k / d) * square_wave_grid(epsilon, k, granularity=granularity).kappa
    return (k / d) * square_wave_params(epsilon / k).c1


def _check_k_d(k: int, d: int) -> tuple[int, int]:
    if isinstance(k, bool) or isinstance(d, bool) or int(k) != k or int(d) != d:
        raise TypeError(f"`k` and `d` must be integers; got k={k!r}, d={d!r}")
    k, d = int(k), int(d)
    if not 1 <= k <= d:
        raise ValueError(f"`k` must lie in [1, d] = [1, {d}]; got {k}")
    return k, d


def hds_moments(x: Tensor | float, epsilon: float, k: int, d: int, *, unbiased: bool = False,
                sampler: Sampler = "safe", granularity: Optional[float] = None) -> tuple[Tensor, Tensor]:
    r"""Mean and variance of one HDS coordinate at input ``x`` (Lemma 3.2):
    :math:`Cx` and :math:`kM/d + (C - C^2)x^2`, with :math:`M` the square wave's
    ``second_moment`` at :math:`\epsilon/k`. With ``unbiased=True`` (output divided by
    :math:`C`): :math:`x` and :math:`\mathrm{Var}/C^2`. For the safe sampler (default) the
    grid law's: :math:`C = (k/d)\kappa`, :math:`M = Ag^2` and :math:`x` rounded to the grid
    (module docstring); the unbiased output's final rounding (:func:`rescale_on_grid`, at most
    :math:`2^{-21}` of a step) is not included."""
    k, d = _check_k_d(k, d)
    sampler = _check_safe_args(sampler, None, granularity)
    x = _as_float64(x)
    if sampler == "safe":
        grid = square_wave_grid(epsilon, k, granularity=granularity)
        c1, second = grid.kappa, grid.second_moment
        x = grid.center(x)
    else:
        prm = square_wave_params(epsilon / k)
        c1, second = prm.c1, prm.second_moment
    c = (k / d) * c1
    mean = c * x
    var = (k / d) * second + (c - c * c) * x * x
    if unbiased:
        return mean / c, var / (c * c)
    return mean, var


def hds_perturb(x: Tensor, epsilon: float, k: int, *, unbiased: bool = False,
                generator: torch.Generator | None = None, sampler: Sampler = "safe",
                secure_mode: Optional[bool] = None, granularity: Optional[float] = None) -> Tensor:
    r"""HDS (Alg. 2) on every row of a dense ``[n, d]`` matrix already in :math:`[-1, 1]`.

    Returns a float64 ``[n, d]`` matrix with exactly ``k`` sampled coordinates per row
    perturbed by :func:`sample_square_wave` at ``epsilon / k`` (divided by :math:`C` if
    ``unbiased``) and 0 elsewhere. The safe sampler (default) draws the subsets and the grid law
    exactly (module docstring); ``unbiased`` values are then rounded onto the grid of
    :func:`rescaled_granularity`. No bookkeeping: :class:`~pyg_private.transforms.HDSFeaturePerturb`
    is the accounted, chunked transform.
    """
    sampler = _check_safe_args(sampler, secure_mode, granularity)
    x = _as_float64(x)
    if x.dim() != 2:
        raise ValueError(f"`x` must be a 2-D [n, d] matrix; got shape {tuple(x.shape)}")
    n, d = x.shape
    k, d = _check_k_d(k, d)
    _check_unit_interval(x)
    if sampler == "float":
        idx = sample_k_subsets(n, d, k, generator=generator, device=x.device, sampler="float")
        vals = sample_square_wave(x.gather(1, idx), epsilon / k, generator=generator, sampler="float")
        if unbiased:
            vals.div_(hds_coefficient(epsilon, k, d, sampler="float"))
        return torch.zeros_like(x).scatter_(1, idx, vals)
    grid = square_wave_grid(epsilon, k, granularity=granularity)
    source = _source(x.device, generator, secure_mode)
    idx = sample_k_subsets(n, d, k, source=source)
    vals = grid.sample(x.gather(1, idx), source)
    if unbiased:
        vals, _ = rescale_on_grid(vals, 1.0 / ((k / d) * grid.kappa), grid.granularity)
    return torch.zeros_like(x).scatter_(1, idx, vals)
