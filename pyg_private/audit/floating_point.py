r"""Floating-point distinguishers: releases that are impossible under a neighbouring input.

Mironov (2012, "On Significance of the Least Significant Bits for Differential Privacy")
showed that a Laplace mechanism implemented with floating-point noise is not
differentially private: the set of floats that ``fl(a + noise)`` can produce depends on
``a``, so some outputs are possible under one input and *impossible* under its
neighbour. Jin, McMurtry, Rubinstein and Ohrimenko (2022, "Are We There Yet? Timing and
Floating-Point Attacks on Differential Privacy Systems") found the same for Gaussian
samplers in deployed libraries. This module measures how often a mechanism's releases
give its input away in this way.

Why an impossible output breaks the guarantee
---------------------------------------------
Let :math:`M` run on neighbouring inputs :math:`A` and :math:`B`, and let :math:`S_A` be
the outputs that :math:`M(B)` can never produce. DP applied to :math:`S_A` gives
:math:`P[M(A) \in S_A] \le e^\epsilon \cdot 0 + \delta`: the mechanism is not
:math:`\epsilon`-DP for any :math:`\epsilon` as soon as :math:`P[M(A) \in S_A] > 0`, and
it can only be :math:`(\epsilon, \delta)`-DP with :math:`\delta \ge P[M(A) \in S_A]`,
whatever :math:`\epsilon`. A release in :math:`S_A` *identifies its input with
certainty*; a vector release does so as soon as one of its coordinates is impossible.

Possibility predicates
----------------------
Deciding "impossible under B" needs a model of the sampler. Each predicate below is
*exact* for its model (no tolerance, no sampling), and each model is meant to contain
every output the real sampler can produce: a predicate may call possible an output the
sampler never produces (that only weakens the attack, the audit stays valid), but must
never call impossible an output the sampler does produce. :func:`floating_point_audit`
checks the latter on every release it draws (``check_own``).

* :func:`additive_float_possible`: "noiseless value plus *any* floating-point noise",
  ``fl(a + z)`` over every finite float ``z``, optionally computed in a wider dtype and
  then rounded to the release's dtype. This is the weakest attacker for additive float
  samplers (Laplace, Gaussian, ...): what it calls impossible is impossible for every
  sampler of that form, whatever the distribution of ``z``.
* :func:`grid_possible`: grid-valued releases (multiples of a power of two), the
  floating-point-safe design of Mironov's snapping mechanism and of the discrete
  Laplace / Gaussian samplers (Canonne, Kamath and Steinke 2020): with full-support
  integer noise on the grid, every grid point is possible under both inputs.
* :func:`uniform_affine_possible`: ``fl(low + fl(width * u))`` with ``u`` on the lattice
  of ``torch.rand`` (the window samplers of the square wave and piecewise mechanisms).

Assumptions
-----------
IEEE 754 arithmetic in round-to-nearest-even with gradual underflow, as torch's
elementwise ``+``, ``-`` and ``*`` provide on the CPU and on CUDA. Flush-to-zero
(``torch.set_flush_denormal(True)``) or fused multiply-adds inside the sampler change
the set of reachable outputs; :func:`additive_float_possible` raises when it detects
arithmetic that contradicts its derivation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Callable

import torch
from torch import Tensor

from .empirical_epsilon import _check_confidence, clopper_pearson

__all__ = [
    "FloatingPointAuditResult",
    "additive_float_possible",
    "grid_possible",
    "uniform_affine_possible",
    "floating_point_audit",
    "additive_noise_audit",
]

# the signed integer type of each float's bit pattern
_INT_OF = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
           torch.bfloat16: torch.int16}
# significand digits, the implicit bit included
_DIGITS = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}


# --------------------------------------------------------------------------- validation

def _check_float_tensor(y, name: str) -> Tensor:
    if not isinstance(y, Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor; got {type(y).__name__}")
    if y.dtype not in _INT_OF:
        raise TypeError(f"`{name}` must be float64, float32, float16 or bfloat16; got {y.dtype}")
    return y


def _as_exact(value, dtype: torch.dtype, device: torch.device, name: str) -> Tensor:
    """``value`` in ``dtype``: a Python number is converted by ``torch.tensor``; a tensor
    must be exactly representable in ``dtype`` (a silent rounding would change the model)."""
    if isinstance(value, Tensor):
        if value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"`{name}` must be a real tensor; got dtype {value.dtype}")
        value = value.to(device)
        out = value.to(dtype)
        same = out.to(value.dtype) == value
        if value.is_floating_point():
            same |= torch.isnan(value)
        if not bool(same.all()):
            raise ValueError(f"`{name}` ({value.dtype}) is not exactly representable in {dtype}; convert it "
                             "to the dtype the sampler computes in, the way the sampler does, before passing it")
        return out
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"`{name}` must be a real number or a tensor; got {type(value).__name__}")
    return torch.tensor(float(value), dtype=dtype, device=device)


def _check_compute_dtype(compute_dtype, dtype: torch.dtype) -> torch.dtype:
    """``compute_dtype`` (default ``dtype``), required to hold every value of ``dtype`` and
    the midpoints between neighbouring ones."""
    if compute_dtype is None or compute_dtype == dtype:
        return dtype
    if compute_dtype not in _INT_OF:
        raise TypeError(f"`compute_dtype` must be float64, float32, float16 or bfloat16; got {compute_dtype!r}")
    wide, narrow = torch.finfo(compute_dtype), torch.finfo(dtype)
    if not (_DIGITS[compute_dtype] > _DIGITS[dtype] and wide.max >= narrow.max
            and wide.smallest_normal * wide.eps < narrow.smallest_normal * narrow.eps):
        raise ValueError(f"`compute_dtype` {compute_dtype} must be wider than the releases' dtype {dtype} "
                         "(more precision and at least its range)")
    return compute_dtype


# --------------------------------------------------------------------------- ordered keys of floats

def _to_key(x: Tensor) -> Tensor:
    """int64 keys in the order of the values: consecutive floats get consecutive keys
    (``-0.0`` gets -1 and ``+0.0`` gets 0). ``x`` must hold no NaN."""
    itype = _INT_OF[x.dtype]
    bits = x.contiguous().view(itype).to(torch.int64)
    magnitude = bits & torch.iinfo(itype).max
    return torch.where(bits < 0, ~magnitude, bits)


def _from_key(key: Tensor, dtype: torch.dtype) -> Tensor:
    """The inverse of :func:`_to_key`."""
    itype = _INT_OF[dtype]
    bits = torch.where(key < 0, (~key) + torch.iinfo(itype).min, key)
    return bits.to(itype).view(dtype)


def _first_true(low: Tensor, high: Tensor, pred: Callable[[Tensor], Tensor]) -> Tensor:
    """Elementwise, the smallest integer ``k`` in ``(low, high]`` with ``pred(k)``, for a
    predicate that is monotone in ``k`` (false, then true), false at ``low`` and true at
    ``high`` (int64 tensors of one shape; neither end is evaluated). Bisection: at most
    ``log2(high - low) + 1`` rounds."""
    while True:
        gap = high - low
        active = gap > 1
        if not bool(active.any()):
            return high
        mid = low + gap // 2
        ok = pred(mid)
        high = torch.where(active & ok, mid, high)
        low = torch.where(active & ~ok, mid, low)


def _rounding_interval(y: Tensor, compute_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The smallest and largest value ``c`` of ``compute_dtype`` with ``c.to(y.dtype) == y``,
    for torch's own conversion whatever its rounding (float64 to float16 or bfloat16 rounds
    twice, through float32), by bisection over the ordered floats between ``y``'s two
    neighbours. ``y`` holds no NaN; an infinite ``y`` gets the infinite end."""
    if compute_dtype == y.dtype:
        return y, y
    inf = torch.full_like(y, math.inf)
    yc = y.to(compute_dtype)
    below = torch.nextafter(y, -inf).to(compute_dtype)  # rounds below y (or is -inf = y)
    above = torch.nextafter(y, inf).to(compute_dtype)
    key_y = _to_key(yc)
    lo = _first_true(_to_key(below), key_y, lambda k: _from_key(k, compute_dtype).to(y.dtype) >= y)
    first_above = _first_true(key_y, _to_key(above), lambda k: _from_key(k, compute_dtype).to(y.dtype) > y)
    lo = _from_key(lo, compute_dtype)
    hi = _from_key(first_above - 1, compute_dtype)
    inf_c = inf.to(compute_dtype)
    return torch.where(y == -inf, -inf_c, lo), torch.where(y == inf, inf_c, hi)


def _additive_hits(lo: Tensor, hi: Tensor, a: Tensor) -> Tensor:
    r"""Whether some finite float ``z`` has ``lo <= fl(a + z) <= hi`` (all in one dtype,
    broadcast; ``a`` holds no NaN, ``lo <= hi``; a NaN bound gives False).

    ``g(z) = fl(a + z)`` is non-decreasing in ``z``. Let :math:`d = lo - a` (exact) and
    :math:`z_0 = fl(d)`. If :math:`g(z_0) < lo` then :math:`z_0 < d`; round-to-nearest
    puts :math:`d` strictly between :math:`z_0` and the next float :math:`z_1`, so
    :math:`a + z_1 > lo` and :math:`g(z_1) \ge lo`; since every :math:`z \le z_0` has
    :math:`g(z) < lo`, :math:`g(z_1)` is the smallest reachable value :math:`\ge lo`, and
    the interval is hit iff :math:`g(z_1) \le hi`. Symmetrically, if :math:`g(z_0) > hi`
    then :math:`z_0 > d`, the previous float :math:`z_{-1} < d` has
    :math:`g(z_{-1}) \le lo`, and it is the largest reachable value :math:`\le hi`, so the
    interval is hit iff :math:`g(z_{-1}) = lo`. One step always suffices (the smallest
    ``z`` with :math:`g(z) \ge lo` itself can be :math:`2^{52}` steps away, e.g.
    :math:`a = 1, lo = 1 + 2^{-52}`, but it is never needed). When :math:`fl(d)`
    overflows, :math:`z_0` is the largest finite float of that sign and no step leaves
    the finite floats.
    """
    finfo = torch.finfo(a.dtype)
    lo, hi, a = torch.broadcast_tensors(lo, hi, a)
    d = lo - a
    z0 = d.clamp(-finfo.max, finfo.max)
    v0 = a + z0
    inside = (lo <= v0) & (v0 <= hi)
    up = v0 < lo
    down = v0 > hi
    z1 = torch.nextafter(z0, torch.where(up, math.inf, -math.inf).to(a.dtype))
    v1 = a + z1
    step_ok = torch.isfinite(z1)
    broken = step_ok & ((up & (v1 < lo)) | (down & (v1 > lo)))
    if bool(broken.any()):
        raise RuntimeError("floating-point addition here does not behave as IEEE round-to-nearest with gradual "
                           "underflow (flush-to-zero?); the additive model cannot be evaluated exactly")
    hits = inside | (step_ok & up & (v1 <= hi)) | (step_ok & down & (v1 >= lo))
    a_inf = torch.isinf(a)  # fl(inf + finite z) = inf
    return torch.where(a_inf, (lo <= a) & (a <= hi), hits)


# --------------------------------------------------------------------------- predicates

def additive_float_possible(y: Tensor, a, *, compute_dtype: torch.dtype | None = None) -> Tensor:
    r"""Whether each release ``y`` can be ``noiseless value + floating-point noise``.

    True where some *finite* float :math:`z` of ``compute_dtype`` gives
    :math:`\mathrm{round}_{y}(\mathrm{fl}(a + z)) = y`, with :math:`\mathrm{fl}` the
    round-to-nearest addition in ``compute_dtype`` and :math:`\mathrm{round}_{y}` torch's
    conversion to ``y``'s dtype (the identity when ``compute_dtype`` is ``y``'s dtype).
    This models every sampler that adds float noise to the noiseless value :math:`a`,
    whatever the noise distribution (Mironov 2012): an output it calls impossible is
    impossible for all of them. A sampler that adds float64 noise to a float64 copy of a
    float32 query and converts the sum back to float32 is modelled by
    ``compute_dtype=torch.float64`` (and ``a`` the query widened to float64).

    The test is exact: :math:`z_0 = \mathrm{fl}(lo - a)`, where :math:`[lo, hi]` are the
    values of ``compute_dtype`` that convert to ``y`` (found by bisection over the ordered
    floats when the dtypes differ), is at most one ``torch.nextafter`` step from a
    decisive ``z`` (proof in the source). A NaN release is impossible; an infinite
    release is possible only when the finite sum can overflow to it (or ``a`` is that
    infinity). Zeros are compared by value (``-0.0 == 0.0``), which can only call more
    outputs possible.

    Args:
        y (Tensor): releases, float64, float32, float16 or bfloat16.
        a (Tensor or float): the noiseless value(s) of the candidate input, broadcastable
            against ``y``, as the sampler holds them in ``compute_dtype``: a tensor must be
            exactly representable in it (e.g. a float32 query widened to float64); a
            Python number is converted by ``torch.tensor(a, dtype=compute_dtype)``. No NaN.
        compute_dtype (torch.dtype, optional): the dtype the addition is carried out in,
            at least as wide as ``y``'s. (default: ``y``'s dtype)

    Returns:
        A bool tensor of the broadcast shape of ``y`` and ``a``.
    """
    y = _check_float_tensor(y, "y")
    c = _check_compute_dtype(compute_dtype, y.dtype)
    a = _as_exact(a, c, y.device, "a")
    if bool(torch.isnan(a).any()):
        raise ValueError("`a` contains NaN")
    shape = torch.broadcast_shapes(y.shape, a.shape)
    y = y.expand(shape)
    nan = torch.isnan(y)
    lo, hi = _rounding_interval(torch.where(nan, torch.zeros_like(y), y), c)
    return _additive_hits(lo, hi, a.expand(shape)) & ~nan


def _check_power_of_two(granularity) -> float:
    if isinstance(granularity, bool) or not isinstance(granularity, Real):
        raise TypeError(f"`granularity` must be a real number; got {type(granularity).__name__}")
    g = float(granularity)
    if not (math.isfinite(g) and g > 0 and math.frexp(g)[0] == 0.5):
        raise ValueError(f"`granularity` must be a positive power of two (2**k, k an integer); got {granularity!r}")
    return g


def grid_possible(y: Tensor, granularity: float) -> Tensor:
    r"""Whether each release ``y`` lies on the grid :math:`g\mathbb{Z}`.

    A sampler that releases :math:`g \cdot (\mathrm{round}(a/g) + K)` with integer noise
    :math:`K` of full support on :math:`\mathbb{Z}` (the discrete Laplace or Gaussian of
    Canonne, Kamath and Steinke 2020; Mironov's snapping) can output every grid point
    under every input, so no release is impossible under a neighbour and the
    floating-point distinguisher finds nothing; off-grid outputs are impossible for it.
    Exact: ``torch.fmod`` by a power of two is exact.

    Args:
        y (Tensor): releases, float64, float32, float16 or bfloat16.
        granularity (float): the grid step :math:`g`, a positive power of two (it may lie
            outside ``y``'s range: below its smallest subnormal every finite value is on
            the grid, above its largest value only zero is).

    Returns:
        A bool tensor of ``y``'s shape: finite and a multiple of ``granularity``.
    """
    y = _check_float_tensor(y, "y")
    g = _check_power_of_two(granularity)
    finfo = torch.finfo(y.dtype)
    finite = torch.isfinite(y)
    if g > finfo.max:
        return y == 0
    if g <= finfo.smallest_normal * finfo.eps:  # every float of the dtype is a multiple of its smallest subnormal
        return finite
    rem = torch.fmod(torch.where(finite, y, torch.zeros_like(y)), g)
    return finite & (rem == 0)


def uniform_affine_possible(y: Tensor, low, width, *, bits: int | None = None) -> Tensor:
    r"""Whether each release ``y`` can be ``fl(low + fl(width * u))`` with ``u`` on the
    uniform lattice :math:`2^{-\mathrm{bits}}\{0, 1, \dots, 2^{\mathrm{bits}} - 1\}`.

    That lattice is what ``torch.rand`` draws on the CPU: checked empirically (every
    draw times :math:`2^{\mathrm{bits}}` is an integer, half of them odd) for float64
    (53 bits) and float32 (24 bits), the same for ``Tensor.uniform_(0, 1)``. Other
    devices or generators may differ; pass their ``bits``. ``torch.rand`` in float16 or
    bfloat16 is *not* of this form (its small draws are finer than any such lattice).

    Exact: the output is monotone in the lattice index :math:`k` (non-decreasing for
    ``width >= 0``, non-increasing otherwise), so bisection over
    :math:`k \in [0, 2^{\mathrm{bits}})` finds the first :math:`k` whose output reaches
    ``y`` in at most ``bits + 1`` rounds, and ``y`` is possible iff that output equals it.
    The products and the sum are evaluated as two separate torch operations, as the
    sampler is assumed to do (a fused multiply-add rounds once and reaches other values).

    Args:
        y (Tensor): releases, float64, float32, float16 or bfloat16.
        low (Tensor or float): the window's start, finite, broadcastable against ``y``
            (a tensor must be exactly representable in ``y``'s dtype).
        width (Tensor or float): the window's width, finite (same rules).
        bits (int, optional): the lattice's resolution, at most the significand digits of
            ``y``'s dtype. (default: those digits, 53 for float64 and 24 for float32)

    Returns:
        A bool tensor of the broadcast shape of ``y``, ``low`` and ``width``.
    """
    y = _check_float_tensor(y, "y")
    digits = _DIGITS[y.dtype]
    if bits is None:
        bits = digits
    if isinstance(bits, bool) or not isinstance(bits, Integral) or not 1 <= bits <= digits:
        raise ValueError(f"`bits` must be an integer in [1, {digits}] for {y.dtype}; got {bits!r}")
    bits = int(bits)
    low = _as_exact(low, y.dtype, y.device, "low")
    width = _as_exact(width, y.dtype, y.device, "width")
    if not (bool(torch.isfinite(low).all()) and bool(torch.isfinite(width).all())):
        raise ValueError("`low` and `width` must be finite")
    shape = torch.broadcast_shapes(y.shape, low.shape, width.shape)
    y, low, width = (t.expand(shape) for t in (y, low, width))
    nan = torch.isnan(y)
    y = torch.where(nan, torch.zeros_like(y), y)
    descending = width < 0
    step = 2.0 ** -bits

    def output(k: Tensor) -> Tensor:
        return low + width * (k.to(y.dtype) * step)

    def reached(k: Tensor) -> Tensor:
        v = output(k)
        return torch.where(descending, v <= y, v >= y)

    last = torch.full(shape, 2 ** bits - 1, dtype=torch.int64, device=y.device)
    k = _first_true(torch.full_like(last, -1), last, reached)  # -1: "not reached" by convention
    return reached(last) & (output(k) == y) & ~nan


# --------------------------------------------------------------------------- the audit

@dataclass(frozen=True)
class FloatingPointAuditResult:
    r"""The outcome of a floating-point distinguisher audit.

    Attributes:
        num_releases (int): releases drawn under *each* input.
        identified_a (int): releases drawn under input A with a coordinate impossible
            under B (they identify A with certainty).
        identified_b (int): the same for releases drawn under B.
        rate (float): the pooled fraction ``(identified_a + identified_b) / (2 num_releases)``.
        upper (float): one-sided Clopper-Pearson upper bound on the pooled rate at
            ``confidence`` (from ``2 num_releases`` draws; with no identification it is
            :math:`1 - (1 - c)^{1/(2n)}`).
        delta_lower (float): a lower bound, holding with probability ``confidence``, on
            the :math:`\delta` of any :math:`(\epsilon, \delta)` guarantee the mechanism
            could have, for every :math:`\epsilon`: the larger of the two sides'
            Clopper-Pearson lower bounds on their identification rates, each at level
            :math:`1 - (1 - c)/2` (Bonferroni). 0 when nothing was identified.
        coordinate_rate (float): the fraction of all drawn coordinates, both inputs
            together, that were impossible under the other input.
        coordinates (int): coordinates per release.
        confidence (float): the confidence level of ``upper`` and ``delta_lower``.
    """

    num_releases: int
    identified_a: int
    identified_b: int
    rate: float
    upper: float
    delta_lower: float
    coordinate_rate: float
    coordinates: int
    confidence: float

    @property
    def identified(self) -> int:
        """Releases that identified their input, both inputs together."""
        return self.identified_a + self.identified_b

    @property
    def rate_a(self) -> float:
        """The fraction of input A's releases that identified it."""
        return self.identified_a / self.num_releases

    @property
    def rate_b(self) -> float:
        """The fraction of input B's releases that identified it."""
        return self.identified_b / self.num_releases

    def __str__(self) -> str:
        return (f"floating-point audit: {self.identified:,} of {2 * self.num_releases:,} releases "
                f"({self.rate:.3%}; A {self.rate_a:.3%}, B {self.rate_b:.3%}) identified their input with "
                f"certainty, rate <= {self.upper:.3g} and delta >= {self.delta_lower:.3g} at "
                f"{self.confidence:.0%}; {self.coordinate_rate:.3%} of coordinates impossible")


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"`{name}` must be an integer; got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"`{name}` must be >= 1; got {value}")
    return int(value)


def _draw(sample: Callable[[int], Tensor], m: int, side: str) -> Tensor:
    y = sample(m)
    if not isinstance(y, Tensor):
        raise TypeError(f"`sample_{side}` must return a tensor; got {type(y).__name__}")
    if y.dim() == 0 or y.shape[0] != m:
        raise ValueError(f"`sample_{side}({m})` returned shape {tuple(y.shape)}; its first dimension must be {m}")
    if y[0].numel() == 0:
        raise ValueError(f"`sample_{side}` returned empty releases (shape {tuple(y.shape)})")
    return y


def _impossible(possible: Callable[[Tensor], Tensor], y: Tensor, name: str) -> Tensor:
    ok = possible(y)
    if not isinstance(ok, Tensor) or ok.dtype != torch.bool or ok.shape != y.shape:
        got = f"{ok.dtype}, shape {tuple(ok.shape)}" if isinstance(ok, Tensor) else type(ok).__name__
        raise ValueError(f"`{name}` must return a bool tensor of the releases' shape {tuple(y.shape)}; got {got}")
    return ~ok


def floating_point_audit(sample_a: Callable[[int], Tensor], sample_b: Callable[[int], Tensor],
                         possible_under_a: Callable[[Tensor], Tensor], possible_under_b: Callable[[Tensor], Tensor],
                         *, num_releases: int, batch_size: int = 65536, confidence: float = 0.95,
                         check_own: bool = True, progress: bool = False) -> FloatingPointAuditResult:
    r"""How often a mechanism's releases identify their input with certainty.

    Draws ``num_releases`` releases of the mechanism on each of two neighbouring inputs
    A and B (in batches) and counts those that are impossible under the other input: a
    release is impossible when any of its coordinates is. Any such release is an output
    set of positive probability under one input and zero under the other, which no
    :math:`\epsilon`-DP mechanism has and which forces :math:`\delta` up to its
    probability (Mironov 2012; Jin et al. 2022). See the module docstring.

    The pooled count is a sum of independent Bernoulli draws with two success
    probabilities; its Clopper-Pearson bound is stated for their average (such a sum is
    more concentrated than the binomial of the same mean, Hoeffding 1956; with no
    identification the bound follows from the AM-GM inequality).

    Args:
        sample_a (callable): ``sample_a(n)`` returns ``n`` fresh releases of the mechanism
            on input A, a tensor whose first dimension is ``n`` (a release may be a
            vector or any shape).
        sample_b (callable): the same on input B.
        possible_under_a (callable): maps a batch of releases to a bool tensor of the same
            shape, True where the coordinate can be produced on input A (e.g. a
            ``functools.partial`` of :func:`additive_float_possible`).
        possible_under_b (callable): the same for input B.
        num_releases (int): releases drawn per input.
        batch_size (int): releases per call of a sampler. (default: 65536)
        confidence (float): in ``(0, 1)``. (default: 0.95)
        check_own (bool): also evaluate each release under its *own* input and raise if
            one is impossible there: the predicates would then not model the sampler
            (wrong dtype, ``compute_dtype`` or grid) and the counts would mean nothing.
            Doubles the predicate cost. (default: ``True``)
        progress (bool): show a tqdm progress bar. (default: ``False``)

    Returns:
        :class:`FloatingPointAuditResult`.
    """
    c = _check_confidence(confidence)
    n = _check_positive_int(num_releases, "num_releases")
    batch = _check_positive_int(batch_size, "batch_size")
    sides = (("a", sample_a, possible_under_a, possible_under_b),
             ("b", sample_b, possible_under_b, possible_under_a))
    identified = {}
    impossible_coords = total_coords = 0
    coordinates = None
    from tqdm.auto import tqdm
    with tqdm(total=2 * n, disable=not progress, unit="release", desc="floating-point audit") as bar:
        for side, sample, own, other in sides:
            other_name = "possible_under_" + ("b" if side == "a" else "a")
            count, remaining = 0, n
            while remaining:
                m = min(batch, remaining)
                y = _draw(sample, m, side)
                if coordinates is None:
                    coordinates, release_shape = y[0].numel(), y.shape[1:]
                elif y.shape[1:] != release_shape:
                    raise ValueError(f"`sample_{side}` returned releases of shape {tuple(y.shape[1:])}; the first "
                                     f"batch had {tuple(release_shape)}")
                imp = _impossible(other, y, other_name)
                count += int(imp.reshape(m, -1).any(dim=1).sum())
                impossible_coords += int(imp.sum())
                total_coords += imp.numel()
                if check_own:
                    bad = int(_impossible(own, y, "possible_under_" + side).reshape(m, -1).any(dim=1).sum())
                    if bad:
                        raise RuntimeError(
                            f"{bad} of {m} releases drawn on input {side.upper()} are impossible under "
                            f"`possible_under_{side}`: the predicate does not model the sampler (check the "
                            "dtype, `compute_dtype` or granularity); the audit would be meaningless")
                remaining -= m
                bar.update(m)
            identified[side] = count
    k = identified["a"] + identified["b"]
    per_side = 1.0 - (1.0 - c) / 2.0
    delta_lower = max(clopper_pearson(identified[s], n, per_side, "lower") for s in ("a", "b"))
    return FloatingPointAuditResult(
        num_releases=n, identified_a=identified["a"], identified_b=identified["b"], rate=k / (2 * n),
        upper=clopper_pearson(k, 2 * n, c, "upper"), delta_lower=float(delta_lower),
        coordinate_rate=impossible_coords / total_coords, coordinates=int(coordinates), confidence=c)


def additive_noise_audit(noiseless_a: Tensor, noiseless_b: Tensor, release: Callable[[Tensor], Tensor], *,
                         num_releases: int, granularity: float | None = None,
                         compute_dtype: torch.dtype | None = None, batch_size: int = 65536,
                         confidence: float = 0.95, check_own: bool = True,
                         progress: bool = False) -> FloatingPointAuditResult:
    r""":func:`floating_point_audit` of an additive-noise release on two noiseless values.

    The releases are ``release(noiseless.expand(n, *noiseless.shape))``: ``release`` maps
    a batch of ``n`` copies of the noiseless value to ``n`` independent noisy releases,
    e.g. ``lambda v: v + laplace_noise(v.shape, 1.0, device=v.device)`` or a mechanism
    object such as :class:`~pyg_private.mechanisms.LaplaceMechanism` (give it no
    accountant: the audit's draws are not releases). A mechanism called on the batch sees
    *one* query of ``n`` times the coordinates: that is the same as ``n`` releases for
    i.i.d. float noise, but a mechanism whose grid or calibration depends on the query's
    size must be given a fixed grid (and this function the same ``granularity``). Each
    input is judged by
    :func:`additive_float_possible` on the other's noiseless value, or, with
    ``granularity``, by :func:`grid_possible` (a grid-valued sampler: then nothing can be
    identified, and ``check_own`` verifies that every release is on the grid).

    Args:
        noiseless_a (Tensor): the noiseless value on input A (the query answer), one
            release's shape.
        noiseless_b (Tensor): the same on input B (a neighbour), same shape.
        release (callable): batch of noiseless copies ``[n, *shape]`` -> releases
            ``[n, *shape]``.
        num_releases (int): releases drawn per input.
        granularity (float, optional): the grid step of a grid-valued sampler.
        compute_dtype (torch.dtype, optional): the dtype the sampler adds in, when wider
            than the releases' (``torch.float64`` for the library's mechanisms on float32
            queries). The noiseless values must be exactly representable in it.
        batch_size, confidence, check_own, progress: see :func:`floating_point_audit`.

    Returns:
        :class:`FloatingPointAuditResult`.
    """
    for t, name in ((noiseless_a, "noiseless_a"), (noiseless_b, "noiseless_b")):
        if not isinstance(t, Tensor):
            raise TypeError(f"`{name}` must be a torch.Tensor; got {type(t).__name__}")
    if noiseless_a.shape != noiseless_b.shape:
        raise ValueError(f"`noiseless_a` and `noiseless_b` must have one shape; got {tuple(noiseless_a.shape)} "
                         f"and {tuple(noiseless_b.shape)}")
    if granularity is not None:
        g = _check_power_of_two(granularity)
        if compute_dtype is not None:
            raise ValueError("`compute_dtype` is not used with `granularity`")

    def sampler(value: Tensor) -> Callable[[int], Tensor]:
        return lambda n: release(value.unsqueeze(0).expand(n, *value.shape).contiguous())

    def predicate(value: Tensor) -> Callable[[Tensor], Tensor]:
        if granularity is not None:
            return lambda y: grid_possible(y, g)
        return lambda y: additive_float_possible(y, value, compute_dtype=compute_dtype)

    return floating_point_audit(sampler(noiseless_a), sampler(noiseless_b), predicate(noiseless_a),
                                predicate(noiseless_b), num_releases=num_releases, batch_size=batch_size,
                                confidence=confidence, check_own=check_own, progress=progress)
