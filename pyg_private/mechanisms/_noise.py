"""Noise samplers shared by the mechanisms: float64, on the input's device, optional generator.

A seeded ``torch.Generator`` makes experiments reproducible and **voids the privacy
guarantee** (whoever knows the seed can subtract the noise). Floating-point attacks on
Laplace/Gaussian samplers (Mironov 2012) are not mitigated yet (a ``secure`` mode is
planned, ``DESIGN.md`` §4).
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["laplace_noise", "gaussian_noise", "check_generator"]


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
