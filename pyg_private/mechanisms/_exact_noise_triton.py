"""The Triton kernels of the exact sampler's first pass, under their former module name: the code now
lives in :mod:`pyg_private.sampling.backends.triton_kernels` (the names are re-exported unchanged,
the same objects; importing it imports ``triton`` where installed, as before)."""
from ..sampling.backends.triton_kernels import (
    BLOCK,
    first_pass_triton,
    grid_first_pass_triton,
    triton_available,
    workspace_size,
)

__all__ = ["triton_available", "first_pass_triton", "grid_first_pass_triton", "workspace_size"]
