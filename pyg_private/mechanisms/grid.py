"""Releases on a power-of-two grid, under their former module name: the code now lives in
:mod:`pyg_private.sampling.grid` (the names are re-exported unchanged, the same objects)."""
from ..sampling.grid import (
    _CLAMP,
    DEFAULT_GRID_TOLERANCE,
    MAX_SCALE,
    MIN_SCALE,
    Norm,
    add_noise_on_grid_,
    check_granularity,
    choose_granularity,
    from_grid,
    grid_step_native_available,
    round_to_grid,
    rounding_inflation,
    validate_granularity,
)

__all__ = ["DEFAULT_GRID_TOLERANCE", "check_granularity", "rounding_inflation", "choose_granularity",
           "validate_granularity", "round_to_grid", "from_grid", "add_noise_on_grid_", "grid_step_native_available"]
