"""Shared input handling of the output-perturbation mechanisms."""
from __future__ import annotations

import torch
from torch import Tensor


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
