"""Shared machinery of the output-perturbation mechanisms: validation, charging, safe noise."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Optional

import torch
from torch import Tensor

from ..accounting import PrivacyAccountant, PrivacyEvent, Unit, as_unit, charge
from ..accounting.validation import check_non_negative
from ._noise import check_generator
from ..sampling import RoundedNoiseSampler
from ..sampling.grid import (
    DEFAULT_GRID_TOLERANCE,
    check_granularity,
    choose_granularity,
    from_grid,
    rounding_inflation,
    round_to_grid,
    validate_granularity,
)
from ..sampling.words import RandomSource, resolve_secure_mode
from .sampler_options import Sampler, check_grid_tolerance, check_sampler, check_sampler_options

__all__ = ["OutputPerturbation", "as_query", "check_sampler", "Sampler"]



def as_query(value: Tensor | float) -> tuple[Tensor, torch.dtype]:
    """The query answer as a finite float64 tensor, and the dtype to return it in."""
    if not isinstance(value, Tensor):
        value = torch.as_tensor(value)
    out_dtype = value.dtype if value.is_floating_point() else torch.get_default_dtype()
    if value.is_sparse or value.layout != torch.strided:
        raise TypeError("the query answer must be a dense tensor (noise is added to every entry)")
    if value.is_floating_point() and not torch.isfinite(value).all():
        raise ValueError("the query answer contains NaN or infinite entries")
    return value.to(torch.float64), out_dtype


class OutputPerturbation(ABC):
    """A central query answer plus noise: validate, plan the grid, charge one event, then draw."""

    #: ``"l1"`` (Laplace) or ``"l2"`` (Gaussian): the norm of the sensitivity.
    norm: str
    #: ``"laplace"`` or ``"gaussian"``: the exact integer noise of the safe sampler.
    noise_kind: str

    def __init__(self, sensitivity: float, *, unit: str | Unit, accountant: PrivacyAccountant | None, name: str,
                 generator: torch.Generator | None, sampler: Sampler = "safe", secure_mode: Optional[bool] = None,
                 granularity: Optional[float] = None, grid_tolerance: float = DEFAULT_GRID_TOLERANCE) -> None:
        self.sensitivity = check_non_negative(sensitivity, "sensitivity")
        if self.sensitivity == 0:
            raise ValueError("`sensitivity` must be > 0 (a query with zero sensitivity needs no noise)")
        self.unit = as_unit(unit)
        if self.unit is Unit.LOCAL:
            raise ValueError(f"{type(self).__name__} releases a central query; local-DP randomisers are transforms")
        self.accountant = accountant
        self.name = name
        self.generator = generator
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, generator,
                                                               granularity=granularity)
        self._granularity = None if granularity is None else check_granularity(granularity)
        self.grid_tolerance = check_grid_tolerance(grid_tolerance)
        #: The grid of the most recent release (``None`` before the first, and for the float sampler).
        self.granularity: Optional[float] = self._granularity

    # -- what a subclass defines ----------------------------------------------------------------
    @abstractmethod
    def _noise_scale(self, sensitivity: float) -> float:
        """The noise scale (Laplace ``b`` / Gaussian ``sigma``) for a query of this sensitivity."""

    @abstractmethod
    def _event(self, sensitivity: float, scale: float, params: dict) -> PrivacyEvent:
        """The event of one release with this (possibly grid-inflated) sensitivity and scale."""

    @abstractmethod
    def _float_noise(self, shape: torch.Size, device: torch.device) -> Tensor:
        """Float64 noise of the given shape from the floating-point sampler."""

    # -- the release ----------------------------------------------------------------------------
    def plan(self, dim: int) -> tuple[Optional[float], float, float]:
        """``(granularity, sensitivity, scale)`` of a release of ``dim`` coordinates: the grid (``None``
        for the float sampler), the sensitivity of the rounded query (inflated by the rounding) and
        the noise scale calibrated for it. Public quantities only; raises before anything is charged."""
        if self.sampler == "float":
            return None, self.sensitivity, self._noise_scale(self.sensitivity)
        base = self._noise_scale(self.sensitivity)
        if self._granularity is None:
            g = choose_granularity(scale=base, sensitivity=self.sensitivity, dim=dim, norm=self.norm,
                                   tolerance=self.grid_tolerance)
        else:
            g = validate_granularity(self._granularity, scale=base, sensitivity=self.sensitivity, dim=dim,
                                     norm=self.norm)
        sens = self.sensitivity + rounding_inflation(g, max(dim, 1), self.norm)
        scale = self._noise_scale(sens)
        if self._granularity is not None:
            validate_granularity(g, scale=scale, sensitivity=sens, dim=dim, norm=self.norm)
        return g, sens, scale

    def event(self, dim: int = 1) -> PrivacyEvent:
        """The event one call on a query of ``dim`` coordinates registers."""
        g, sens, scale = self.plan(dim)
        params = {} if g is None else {"granularity": g, "query_sensitivity": self.sensitivity, "dim": int(dim)}
        params["sampler"] = self.sampler
        return self._event(sens, scale, params)

    def __call__(self, value: Tensor | float) -> Tensor:
        """Charge one release (before any noise is drawn), then return ``value`` plus noise.

        Everything that can fail (validation, the grid, the random source, the rounded query, the
        noise buffer and the sampler's workspace) happens before the charge; after it only the noise
        is drawn into buffers that exist already."""
        query, out_dtype = as_query(value)
        dim = query.numel()
        g, sens, scale = self.plan(dim)
        secure = resolve_secure_mode(self.secure_mode, self.generator) if g is not None else False
        params = {} if g is None else {"granularity": g, "query_sensitivity": self.sensitivity, "dim": int(dim)}
        params["sampler"] = self.sampler
        event = self._event(sens, scale, params)
        if g is None:
            check_generator(self.generator, query.device)
            charge(self.accountant, event, self)
            return (query + self._float_noise(query.shape, query.device)).to(out_dtype)
        sampler = RoundedNoiseSampler(self.noise_kind, scale / g)  # may raise: not charged
        source = RandomSource(query.device, generator=self.generator, secure=secure)
        steps = round_to_grid(query, g).reshape(-1)
        noise = torch.empty(dim, dtype=torch.int64, device=query.device)
        sampler.reserve(dim, query.device)
        charge(self.accountant, event, self)
        self.granularity = g
        sampler.sample(dim, source, out=noise)
        return from_grid(steps.add_(noise), g, out_dtype).reshape(query.shape)
