"""Exact integer noise from uniform random words: the sampler the safe mechanisms release with.

* :mod:`~pyg_private.sampling.sampler`: :class:`RoundedNoiseSampler` (rounded Laplace, rounded
  Gaussian, rounded sum of two Laplace), its tasks and chunks, and the finishing of flagged draws;
* :mod:`~pyg_private.sampling.tables`: the exact alias tables (pure math, 256-bit ``mpmath``);
* :mod:`~pyg_private.sampling.bernoulli`: exact Bernoulli trials against 256-bit probabilities;
* :mod:`~pyg_private.sampling.grid`: releases on a power-of-two grid (rounding, granularity, the
  grid step);
* :mod:`~pyg_private.sampling.backends`: the sampler's first pass, one interface, three backends
  (C on the CPU, Triton on CUDA, torch anywhere), the same results from the same words; and the
  steps of the device release as Triton kernels and torch operations, the same bits;
* :mod:`~pyg_private.sampling.device_release`: a whole release on a GPU with one host
  synchronisation (fixed-capacity slots for the flagged samples, bounded finishing rounds on the
  device, an exact host path for the rest);
* :mod:`~pyg_private.sampling.words`: where the words come from (:class:`RandomSource`, ChaCha20
  on the CPU and on the device, ``secure_mode``);
* :mod:`~pyg_private.sampling.workspace` and :mod:`~pyg_private.sampling.threads`: the scratch
  pool, and the tasks on torch's threads.
"""
from .bernoulli import exact_bernoulli
from .grid import (
    DEFAULT_GRID_TOLERANCE,
    add_noise_on_grid_,
    check_granularity,
    choose_granularity,
    from_grid,
    round_to_grid,
    rounding_inflation,
    validate_granularity,
)
from .sampler import RoundedNoiseSampler, rounded_gaussian, rounded_laplace, rounded_two_laplace
from .tables import MAX_SCALE, MIN_SCALE
from .words import (
    WORD_BITS,
    RandomSource,
    get_secure_mode,
    resolve_secure_mode,
    secure_mode,
    secure_stream_available,
    set_secure_mode,
)

__all__ = [
    "RoundedNoiseSampler", "rounded_laplace", "rounded_gaussian", "rounded_two_laplace", "exact_bernoulli",
    "MIN_SCALE", "MAX_SCALE",
    "RandomSource", "WORD_BITS", "set_secure_mode", "get_secure_mode", "secure_mode", "resolve_secure_mode",
    "secure_stream_available",
    "DEFAULT_GRID_TOLERANCE", "check_granularity", "rounding_inflation", "choose_granularity", "validate_granularity",
    "round_to_grid", "from_grid", "add_noise_on_grid_",
]
