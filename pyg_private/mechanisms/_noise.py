"""Floating-point noise samplers: float64, on the input's device, optional generator.

These are the ``sampler="float"`` paths of the mechanisms and layers, kept for benchmarks,
audits and comparisons. They are **open to floating-point attacks** (Mironov 2012; Jin et al.
2022): a float sum ``value + noise`` can be impossible under a neighbouring input. The default
``sampler="safe"`` releases on a power-of-two grid with exactly sampled integer noise instead
(:mod:`pyg_private.sampling.grid`, :mod:`pyg_private.sampling.sampler`, whose
``"two_laplace"`` kind is the safe counterpart of :class:`TwoLaplaceStream`), with a
``secure_mode`` drawing from the operating system's CSPRNG.

A seeded ``torch.Generator`` makes experiments reproducible and **voids the privacy
guarantee** (whoever knows the seed can subtract the noise).

**Never torch's global generator.** Without a ``generator`` every draw comes from a private
generator seeded from :func:`os.urandom` (:func:`float_generator`), fresh for each draw: after the
usual ``torch.manual_seed(0)`` of a training script, anyone who knows the seed could otherwise
recompute the noise and recover the query exactly.
"""
from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor

__all__ = ["laplace_noise", "two_laplace_noise", "gaussian_noise", "check_generator", "float_generator",
           "TwoLaplaceStream"]


def check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    if generator is not None and generator.device.type != torch.device(device).type:
        raise ValueError(
            f"`generator` lives on {generator.device} but the noise is drawn on {device}; "
            "create the generator on the input's device"
        )


def float_generator(generator: torch.Generator | None, device: torch.device | str) -> torch.Generator:
    """``generator`` when one is given (reproducible; voids the guarantee), else a new private
    generator on ``device`` seeded with 63 bits from :func:`os.urandom`: the float samplers never
    draw from torch's global generator, which scripts seed with a known value."""
    device = torch.device(device)
    check_generator(generator, device)
    if generator is not None:
        return generator
    return torch.Generator(device).manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)


def laplace_noise(shape: torch.Size | tuple[int, ...], scale: float, *, device: torch.device,
                  generator: torch.Generator | None = None) -> Tensor:
    """i.i.d. Laplace(0, ``scale``) in float64, as the difference of two Exp(1) draws."""
    generator = float_generator(generator, device)
    e = torch.empty((2, *shape), dtype=torch.float64, device=device).exponential_(1.0, generator=generator)
    return (e[0] - e[1]) * scale


def gaussian_noise(shape: torch.Size | tuple[int, ...], std: float, *, device: torch.device,
                   generator: torch.Generator | None = None) -> Tensor:
    """i.i.d. N(0, ``std``^2) in float64."""
    generator = float_generator(generator, device)
    return torch.randn(shape, dtype=torch.float64, device=device, generator=generator) * std


def two_laplace_noise(shape: torch.Size | tuple[int, ...], scale: float, *, device: torch.device,
                      generator: torch.Generator | None = None) -> Tensor:
    """The sum of two independent Laplace(0, ``scale``) vectors, in float64.

    Sampled exactly as ``scale * log(u3 u4 / (u1 u2))`` with four uniforms on (0, 1]:
    each Laplace is a difference of two Exp(1) draws, ``Exp = -log u``, so the sum is
    ``(E1 + E3) - (E2 + E4)``. Four uniforms and one logarithm per entry.
    """
    generator = float_generator(generator, device)
    u = torch.rand((4, *shape), dtype=torch.float64, device=device, generator=generator)
    u = 1.0 - u  # (0, 1]: log never sees 0
    return torch.log((u[2] * u[3]) / (u[0] * u[1])).mul_(scale)


class TwoLaplaceStream:
    """Repeated draws of ``Lap(0, scale) + Lap(0, scale)`` of one shape into reused buffers.

    For iterative mechanisms that need a fresh noise matrix at every step
    (:class:`~pyg_private.nn.NoisyPPRDiffusion` draws two Laplace vectors per entry per
    step). Each Laplace is ``-sign(w) * log|w|`` with ``w`` uniform on ``[-1, 1)``: one
    uniform and one logarithm per Laplace value, half of :func:`two_laplace_noise`'s
    four uniforms. On the CPU the uniforms come from NumPy's PCG64 generator written in
    place (about 4x faster than ``torch.rand`` here), seeded from ``generator`` when one
    is given (reproducible) and from operating-system entropy otherwise; on other
    devices ``torch.Tensor.uniform_`` is used, on ``generator`` or a private generator
    seeded from the OS (:func:`float_generator`).

    :meth:`sample` returns the **same** output tensor at every call, overwritten: the
    caller must consume it (e.g. ``s.add_(stream.sample())``) before the next call.
    """

    _TINY = 2.0 ** -1022  # |w| == 0 has probability 2^-53; clamp so log stays finite

    def __init__(self, shape: torch.Size | tuple[int, ...], scale: float, *, device: torch.device,
                 generator: torch.Generator | None = None) -> None:
        device = torch.device(device)
        check_generator(generator, device)
        self.scale = float(scale)
        self.shape = tuple(shape)
        self._device = device
        self._generator = generator
        if device.type == "cpu":
            seed = None if generator is None else int(torch.randint(0, 2**62, (1,), generator=generator))
            self._rng = np.random.Generator(np.random.PCG64(seed))
            self._u_np = np.empty((2, *self.shape), dtype=np.float64)
            self._w = torch.from_numpy(self._u_np)
        else:
            self._rng = None
            self._generator = float_generator(generator, device)  # never torch's global generator
            self._w = torch.empty((2, *self.shape), dtype=torch.float64, device=device)
        self._mag = torch.empty_like(self._w)
        self._out = torch.empty(self.shape, dtype=torch.float64, device=device)

    def sample(self) -> Tensor:
        w, mag = self._w, self._mag
        if self._rng is not None:
            self._rng.random(out=self._u_np)  # [0, 1), in place
        else:
            w.uniform_(0.0, 1.0, generator=self._generator)
        w.mul_(2.0).sub_(1.0)  # uniform on [-1, 1): |w| uniform on (0, 1], sign independent
        torch.abs(w, out=mag)
        mag.clamp_(min=self._TINY).log_().neg_()  # Exp(1) magnitudes
        torch.copysign(mag, w, out=mag)  # two independent Laplace(0, 1)
        torch.sum(mag, dim=0, out=self._out)
        return self._out.mul_(self.scale)
