"""Shared machinery of the output-perturbation mechanisms: validation, charging, noise."""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from ..accounting import PrivacyAccountant, PrivacyEvent, Unit, as_unit, charge
from ..accounting.validation import check_non_negative

__all__ = ["OutputPerturbation", "as_query"]


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
    """A central query answer plus noise: validate, charge one event, then draw the noise."""

    def __init__(self, sensitivity: float, *, unit: str | Unit, accountant: PrivacyAccountant | None, name: str,
                 generator: torch.Generator | None) -> None:
        self.sensitivity = check_non_negative(sensitivity, "sensitivity")
        if self.sensitivity == 0:
            raise ValueError("`sensitivity` must be > 0 (a query with zero sensitivity needs no noise)")
        self.unit = as_unit(unit)
        if self.unit is Unit.LOCAL:
            raise ValueError(f"{type(self).__name__} releases a central query; local-DP randomisers are transforms")
        self.accountant = accountant
        self.name = name
        self.generator = generator

    @abstractmethod
    def event(self) -> PrivacyEvent:
        """The event one call registers."""

    @abstractmethod
    def _noise(self, shape: torch.Size, device: torch.device) -> Tensor:
        """Float64 noise of the given shape."""

    def __call__(self, value: Tensor | float) -> Tensor:
        """Charge one release (before any noise is drawn), then return ``value`` plus noise."""
        query, out_dtype = as_query(value)
        charge(self.accountant, self.event(), self)
        return (query + self._noise(query.shape, query.device)).to(out_dtype)
