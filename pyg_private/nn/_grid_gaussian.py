r"""Floating-point-safe Gaussian noise for the multi-hop layers: every perturbed hop is released on a
power-of-two grid with exactly sampled rounded Gaussian noise (see :mod:`pyg_private.sampling.grid`).

One hop's noisy value is :math:`g\,(\mathrm{round}(H/g) + K)`, :math:`K = \mathrm{round}(N(0,
\sigma^2/g^2))`: the Gaussian mechanism run on the rounded hop :math:`\mathrm{round}(H/g)` and
rounded again (post-processing). Whatever the layer does next with it (a row projection, a
normalisation, a cast to float32) is a deterministic function of those integers. Rounding moves
each of the :math:`d` coordinates by at most :math:`g/2`, so a hop's sensitivity grows by at most
:math:`\sqrt d\,g`; the caller charges the inflated value (see :func:`plan_grid`).
"""
from __future__ import annotations

from typing import Callable, Optional

from torch import Tensor

from ..sampling import RoundedNoiseSampler
from ..sampling.grid import DEFAULT_GRID_TOLERANCE, choose_granularity
from ..sampling.threads import run_staged, workers
from ..sampling.words import RandomSource

__all__ = ["plan_grid", "add_grid_gaussian_", "reserve_grid_gaussian"]

_BLOCK_ELEMENTS = 1 << 19


def plan_grid(*, std_per_sensitivity: float, sensitivity: float, dim: int, value_bound: float,
              inflation_factor: float = 1.0, tolerance: float = DEFAULT_GRID_TOLERANCE) -> tuple[float, float]:
    r"""``(granularity, inflated_sensitivity)`` for a hop of ``dim`` coordinates whose noise std is
    ``std_per_sensitivity`` times its sensitivity. The rounding adds
    ``inflation_factor * sqrt(dim) * g`` to the sensitivity (a layer whose next hop sees the rounded
    values passes :math:`1 + C` for a :math:`C`-Lipschitz hop), at most ``tolerance * sensitivity``.
    ``value_bound`` is a public bound on the noiseless entries: the grid must hold it within
    :math:`2^{60}` steps, which fails only for a noise std below ``value_bound`` :math:`\cdot 2^{-40}`
    (``ValueError``: such noise protects nothing; use ``noise_multiplier=0`` for the reference)."""
    dim_eff = max(int(dim), 1) * inflation_factor ** 2  # sqrt(dim_eff) = factor * sqrt(dim)
    g = choose_granularity(scale=std_per_sensitivity * sensitivity, sensitivity=sensitivity, dim=dim_eff,
                           norm="l2", tolerance=tolerance)
    if value_bound / g > 2.0 ** 60:
        raise ValueError(f"the noise std {std_per_sensitivity * sensitivity:g} is below 2^-40 times the largest "
                         f"possible value {value_bound:g}: too small for a grid release (it would need more than "
                         "2^60 grid steps); use noise_multiplier=0 for the noise-free reference")
    inflated = sensitivity + inflation_factor * (max(int(dim), 1) ** 0.5) * g
    RoundedNoiseSampler("gaussian", std_per_sensitivity * inflated / g)  # the range check, before any charge
    return g, inflated


def add_grid_gaussian_(out: Tensor, std: float, granularity: float, source: RandomSource,
                       post: Optional[Callable[[Tensor], Tensor]] = None) -> Tensor:
    """Replace every row block of the 2-D floating ``out`` by ``post(g * (round(out / g) +
    K))`` in place, ``K`` exact rounded Gaussian noise of std ``std / g``. The row blocks of about 2^19
    entries each have their own stream (:meth:`RandomSource.spawn`: reproducible under a seed);
    their fused C passes run on ``torch.get_num_threads()`` threads while this thread finishes the
    flagged draws of the blocks already passed and runs ``post`` on them
    (:func:`~pyg_private.sampling.threads.run_staged`); ``g * (...)`` is computed in ``out``'s
    dtype (the cast of the integer rounds to that precision, the product by the power of two ``g``
    is exact; :meth:`RoundedNoiseSampler.add_to_grid_`, one pass with the sampling where the C
    extensions are built, no full-size temporary) and ``post`` (which may work in place) runs on
    it: all of it a function of the integers, i.e. post-processing.

    On a device served by the device release (:mod:`~pyg_private.sampling.device_release`: CUDA) the
    whole of ``out`` is one release from ``source`` (one host synchronisation), and ``post`` then
    runs on the same row blocks."""
    if not out.is_contiguous():
        return out.copy_(add_grid_gaussian_(out.contiguous(), std, granularity, source, post))
    sampler = RoundedNoiseSampler("gaussian", std / granularity)
    rows = max(1, _BLOCK_ELEMENTS // max(out.size(-1), 1))
    starts = list(range(0, out.size(0), rows))
    if sampler._device_grid(out.device, out.dtype, True, granularity):
        sampler.add_to_grid_(out, granularity, source)
        for start in starts if post is not None else ():
            part = out[start:start + rows]
            value = post(part)
            if value is not part:
                part.copy_(value)
        return out
    sources = source.spawn(len(starts)) if len(starts) > 1 else [source]

    def noise(i: int) -> Callable[[], None]:  # on the worker threads: the fused C pass, the GIL released
        return sampler.add_to_grid_staged_(out[starts[i]:starts[i] + rows], granularity, sources[i])

    def finish(i: int, rest: Callable[[], None]) -> None:  # in this thread: the flagged draws (Python), then post
        rest()  # now the same values as add_noise_on_grid_(part, sampler.sample(...))
        part = out[starts[i]:starts[i] + rows]
        if post is not None:
            value = post(part)
            if value is not part:
                part.copy_(value)

    run_staged(noise, finish, len(starts), out.device)
    return out


def reserve_grid_gaussian(out: Tensor, std: float, granularity: float) -> None:
    """Make, **before** the release is charged, the sampler workspace that :func:`add_grid_gaussian_`
    ``(out, std, granularity, ...)`` will borrow for a 2-D ``out`` of this shape, dtype and device
    (its row blocks, on as many threads as it will use): an allocation failure then raises while
    nothing is charged (see :mod:`pyg_private.sampling.workspace`)."""
    sampler = RoundedNoiseSampler("gaussian", std / granularity)
    if sampler._device_grid(out.device, out.dtype, True, granularity):  # one release of the whole tensor
        sampler.reserve(out.numel(), out.device, dtype=out.dtype, granularity=granularity)
        return
    width = max(out.size(-1), 1)
    rows = max(1, _BLOCK_ELEMENTS // width)
    blocks = -(-out.size(0) // rows) if out.size(0) else 0
    if not blocks:
        return
    concurrent = max(1, workers(blocks, out.device))
    for count in {min(rows, out.size(0)), out.size(0) - (blocks - 1) * rows}:
        sampler.reserve(count * out.size(-1), out.device, dtype=out.dtype, granularity=granularity,
                        concurrent=concurrent)
