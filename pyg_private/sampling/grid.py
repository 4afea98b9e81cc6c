r"""Releases on a power-of-two grid: the floating-point-safe form of additive noise.

A safe release of a query :math:`f` with additive noise is

.. math::
    y = g\,\big(\mathrm{round}(f / g) + K\big), \qquad K = \mathrm{round}(X),\;
    X \sim \mathrm{Lap}(0, b/g) \text{ or } N(0, \sigma^2/g^2),

with :math:`g` a power of two (the ``granularity``) and :math:`K` sampled exactly
(:mod:`pyg_private.sampling.sampler`). Every value is an integer multiple of
:math:`g`, and every multiple is a possible output under every input (the integer noise has full
support), so no output is impossible under a neighbouring input: the floating-point attacks of
Mironov (CCS 2012) and Jin et al. (S&P 2022) find nothing to exploit. :math:`y/g` is the continuous
mechanism run on the rounded query :math:`\mathrm{round}(f/g)` and rounded again, i.e. a
post-processing of it, so it keeps that mechanism's guarantee **for the rounded query**. Rounding
each of :math:`d` coordinates to the nearest multiple moves it by at most :math:`g/2`, so the
rounded query's sensitivity is at most

.. math::
    \Delta_1 + d\,g \quad (\ell_1), \qquad \Delta_2 + \sqrt d\,g \quad (\ell_2),

(two neighbouring values may round in opposite directions). The mechanisms calibrate and charge
with this **inflated sensitivity**; :func:`choose_granularity` picks the grid so that the inflation
is at most ``tolerance`` times :math:`\Delta` (default :math:`2^{-16}`, i.e. about 0.0015% more
noise), from public quantities only (the sensitivity, the noise scale, the number of coordinates),
never from the data.

The exact integers :math:`\mathrm{round}(f/g) + K` are formed in ``int64``; :math:`|f/g|` is
clamped to :math:`2^{61}` first (a 1-Lipschitz map: it costs no privacy, and it only binds for
values beyond :math:`2^{61} g`). The float64 result :math:`g\cdot(\ldots)` and any cast to the
query's dtype are deterministic functions of those integers, hence post-processing, and stay
multiples of :math:`g`.
"""
from __future__ import annotations

import math
from typing import Literal, Optional

import torch
from torch import Tensor

from .backends import native_c
from .tables import MAX_SCALE, MIN_SCALE

__all__ = [
    "DEFAULT_GRID_TOLERANCE",
    "check_granularity",
    "rounding_inflation",
    "choose_granularity",
    "validate_granularity",
    "round_to_grid",
    "from_grid",
    "add_noise_on_grid_",
    "grid_step_native_available",
]

Norm = Literal["l1", "l2"]

#: Default bound on the sensitivity inflation from rounding, relative to the sensitivity.
DEFAULT_GRID_TOLERANCE = 2.0 ** -16
#: The clamp of the rounded query, :math:`2^{61}` grid steps (a float32 number, as the Triton kernels need).
_CLAMP = 2.0 ** 61


def check_granularity(granularity: object) -> float:
    """``granularity`` as a float if it is a positive, finite power of two; ``ValueError`` otherwise."""
    if isinstance(granularity, bool) or not isinstance(granularity, (int, float)):
        raise TypeError(f"`granularity` must be a power of two (a float such as 2**-30); got {granularity!r}")
    g = float(granularity)
    if not (math.isfinite(g) and g > 0) or math.frexp(g)[0] != 0.5:
        raise ValueError(f"`granularity` must be a positive power of two (e.g. 2**-30); got {granularity!r}")
    return g


def rounding_inflation(granularity: float, dim: int, norm: Norm) -> float:
    """Largest change of the query's sensitivity caused by rounding ``dim`` coordinates to the grid."""
    if norm == "l1":
        return dim * granularity
    if norm == "l2":
        return math.sqrt(dim) * granularity
    raise ValueError(f"`norm` must be 'l1' or 'l2'; got {norm!r}")


def choose_granularity(*, scale: float, sensitivity: float, dim: int, norm: Norm,
                       tolerance: float = DEFAULT_GRID_TOLERANCE) -> float:
    r"""The coarsest power-of-two grid whose rounding inflates the sensitivity by at most
    ``tolerance * sensitivity`` and on which the noise ``scale`` (Laplace :math:`b` or Gaussian
    :math:`\sigma`, in the query's units) spans :math:`[2^{20}, 2^{46}]` steps, as the exact
    samplers need. Public inputs only. ``ValueError`` when no grid satisfies both (a noise scale
    below the sensitivity tolerance times :math:`2^{20}/d`, far outside any useful regime)."""
    if not (tolerance > 0 and math.isfinite(tolerance)):
        raise ValueError(f"`tolerance` must be positive; got {tolerance!r}")
    dim = max(int(dim), 1)
    per_step = rounding_inflation(1.0, dim, norm)
    limit = min(tolerance * sensitivity / per_step, scale / MIN_SCALE)
    g = 2.0 ** math.floor(math.log2(limit))
    if scale / g > MAX_SCALE:
        raise ValueError(
            f"no power-of-two grid keeps the rounding within {tolerance:g} of the sensitivity for {dim} "
            f"coordinates and a noise scale of {scale:g}: the noise would span more than 2^46 grid steps; "
            "raise `grid_tolerance` or pass `granularity`")
    return g


def validate_granularity(granularity: object, *, scale: float, sensitivity: float, dim: int, norm: Norm) -> float:
    """Check a granularity given by the user: a power of two, no coarser than the sensitivity
    allows (rounding may not change the query by more than its sensitivity) and within the exact
    samplers' range. Returns it as a float."""
    g = check_granularity(granularity)
    inflation = rounding_inflation(g, max(int(dim), 1), norm)
    if inflation > sensitivity:
        raise ValueError(
            f"`granularity` {g!r} is too coarse: rounding {dim} coordinates to it can change the query by "
            f"{inflation:g} ({norm}), more than its sensitivity {sensitivity:g}; use a finer power of two "
            "(or leave `granularity=None` to choose one)")
    steps = scale / g
    if not (MIN_SCALE <= steps <= MAX_SCALE):
        raise ValueError(
            f"`granularity` {g!r} puts the noise scale {scale:g} at {steps:g} grid steps; the exact samplers "
            "need between 2^20 and 2^46 (a finer grid if below, a coarser one if above)")
    return g


def round_to_grid(value: Tensor, granularity: float, *, out: Optional[Tensor] = None,
                  scratch: Optional[Tensor] = None) -> Tensor:
    """``round(value / granularity)`` as ``int64`` (half to even), clamped to :math:`\\pm 2^{61}`
    (into ``out`` when given; ``scratch``: a buffer of ``value``'s dtype and shape for the scaled
    values).

    A float32 or float64 ``value`` is scaled in its own dtype: multiplying by the power of two
    ``1 / granularity`` is exact (a value that would overflow is clamped either way, one that
    would become subnormal rounds to 0 either way), and so is rounding, so the result equals the
    float64 computation, with half the memory traffic for float32."""
    if value.dtype in (torch.float32, torch.float64) and 2.0 ** -100 <= granularity <= 2.0 ** 100:
        scaled = torch.mul(value, 1.0 / granularity, out=scratch)
    else:
        scaled = value.to(torch.float64) / granularity
    scaled.round_().clamp_(-_CLAMP, _CLAMP)
    if out is None:
        return scaled.to(torch.int64)
    return out.copy_(scaled)  # integers: the conversion is exact


def from_grid(steps: Tensor, granularity: float, dtype: torch.dtype = torch.float64) -> Tensor:
    """The grid values ``steps * granularity`` (post-processing of the integers) in ``dtype``."""
    return (steps.to(torch.float64) * granularity).to(dtype)


def grid_step_native_available() -> bool:
    """Whether the fused C grid step (``_grid_step_native``, :mod:`~pyg_private.sampling.backends.native_c`)
    is installed; without it :func:`add_noise_on_grid_` runs the same computation as torch operations."""
    return native_c.grid_step_available()


def add_noise_on_grid_(values: Tensor, noise: Tensor, granularity: float, *, on_scale: bool = False,
                       steps: Optional[Tensor] = None, scratch: Optional[Tensor] = None,
                       native: Optional[bool] = None) -> Tensor:
    r"""The grid release in place: ``values <- g * (round(values / g) + noise)``, ``noise`` the exact
    ``int64`` noise in grid steps (one per value), the rounding as :func:`round_to_grid`'s (half to
    even, clamped to :math:`\pm 2^{61}`), the integer sum converted to ``values``' dtype and multiplied
    by the power of two ``g``: a function of the integers, i.e. post-processing. ``on_scale=True``:
    ``values`` are already divided by ``g`` (``g * (round(values) + noise)``).

    On the CPU, for contiguous float32/float64 values, one C loop computes it
    (:func:`~pyg_private.sampling.backends.native_c.grid_step`, when built; ``native=False`` forces the
    torch operations, the same values bit for bit). Otherwise torch operations, with the optional
    ``int64`` buffer ``steps`` and the ``values``-dtype buffer ``scratch`` of ``values``' shape."""
    g = check_granularity(granularity)
    built = native_c.grid_step_available()
    use_native = built if native is None else bool(native)
    if use_native and not built:
        raise RuntimeError("the C grid step is not built (pyg_private.sampling.backends._grid_step_native)")
    if (use_native and values.device.type == "cpu" and noise.device.type == "cpu"
            and values.dtype in (torch.float32, torch.float64) and noise.dtype == torch.int64
            and values.is_contiguous() and noise.is_contiguous() and noise.numel() == values.numel()
            and 2.0 ** -100 <= g <= 2.0 ** 100):
        native_c.grid_step(values, noise, 1.0 if on_scale else 1.0 / g, g, _CLAMP)
        return values
    if on_scale:
        rounded = values.clamp_(-_CLAMP, _CLAMP).round_()
        ints = rounded.to(torch.int64) if steps is None else steps.view(values.shape).copy_(rounded)
    else:
        ints = round_to_grid(values, g, out=None if steps is None else steps.view(values.shape),
                             scratch=None if scratch is None else scratch.view(values.shape))
    ints.add_(noise.view(values.shape))  # noise in the values' logical (row-major) order
    return torch.mul(ints, torch.tensor(g, dtype=values.dtype, device=values.device), out=values)
