"""The exact integer noise sampler, under its former name: the code now lives in
:mod:`pyg_private.sampling` (:mod:`~pyg_private.sampling.sampler`, the alias tables in
:mod:`~pyg_private.sampling.tables`, the first pass's backends in
:mod:`~pyg_private.sampling.backends`, :func:`exact_bernoulli` in
:mod:`~pyg_private.sampling.bernoulli`).

The names are re-exported unchanged (the same objects). The module-level settings the code reads
at run time (``_TASK``, ``_CHUNK``: :mod:`pyg_private.sampling.sampler`; ``_GRID_SIMD`` and the C
modules: :mod:`pyg_private.sampling.backends.native_c`; the Triton devices:
``pyg_private.sampling.backends.triton_ops.BACKEND.devices``) are not: a copy here would not change
what the sampler does, so set them where they are read.
"""
from ..sampling.backends.native_c import available as native_available
from ..sampling.backends.native_c import native_first_pass as _native_first_pass
from ..sampling.backends.torch_ops import first_pass
from ..sampling.bernoulli import exact_bernoulli
from ..sampling.sampler import (
    MAX_SCALE,
    MIN_SCALE,
    RoundedNoiseSampler,
    rounded_gaussian,
    rounded_laplace,
    rounded_two_laplace,
)
from ..sampling.tables import AliasTable as _Table
from ..sampling.tables import Kind
from ..sampling.tables import alias_table as _table
from ..sampling.tables import mp_context as _mp
from ..sampling.tables import vose_alias as _vose
from ..sampling.words import WORD_BITS, RandomSource

__all__ = ["RoundedNoiseSampler", "rounded_laplace", "rounded_gaussian", "rounded_two_laplace", "exact_bernoulli",
           "MIN_SCALE", "MAX_SCALE"]
