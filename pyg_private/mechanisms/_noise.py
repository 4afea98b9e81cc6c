"""Noise samplers shared by the mechanisms: float64, on the input's device, optional generator.

A seeded ``torch.Generator`` makes experiments reproducible and **voids the privacy
guarantee** (whoever knows the seed can subtract the noise). Floating-point attacks on
Laplace/Gaussian samplers (Mironov 2012) are not mitigated yet (a ``secure`` mode is
planned, ``DESIGN.md`` §4).
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["laplace_noise", "two_laplace_noise", "gaussian_noise", "check_generator"]


def check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    if generator is not None and generator.device.type != torch.device(device).type:
        raise ValueError(
            f"`generator` lives on {generator.device} but the noise is drawn on {device}; "
            "create the generator on the input's device"
        )


def laplace_noise(shape: torch.Size | tuple[int, ...], scale: float, *, device: torch.device,
                  generator: torch.Generator | None = None) -> Tensor:
    """i.i.d. Laplace(0, ``scale``) in float64, as the difference of two Exp(1) draws."""
    check_generator(generator, device)
    e = torch.empty((2, *shape), dtype=torch.float64, device=device).exponential_(1.0, generator=generator)
    return (e[0] - e[1]) * scale


def gaussian_noise(shape: torch.Size | tuple[int, ...], std: float, *, device: torch.device,
                   generator: torch.Generator | None = None) -> Tensor:
    """i.i.d. N(0, ``std``^2) in float64."""
    check_generator(generator, device)
    return torch.randn(shape, dtype=torch.float64, device=device, generator=generator) * std


def two_laplace_noise(shape: torch.Size | tuple[int, ...], scale: float, *, device: torch.device,
                      generator: torch.Generator | None = None) -> Tensor:
    """The sum of two independent Laplace(0, ``scale``) vectors, in float64.

    Sampled exactly as ``scale * log(u3 u4 / (u1 u2))`` with four uniforms on (0, 1]:
    each Laplace is a difference of two Exp(1) draws, ``Exp = -log u``, so the sum is
    ``(E1 + E3) - (E2 + E4)``. Four uniforms and one logarithm per entry.
    """
    check_generator(generator, device)
    u = torch.rand((4, *shape), dtype=torch.float64, device=device, generator=generator)
    u = 1.0 - u  # (0, 1]: log never sees 0
    return torch.log((u[2] * u[3]) / (u[0] * u[1])).mul_(scale)
