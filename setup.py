"""Build script: the metadata is in setup.cfg; this file only declares the optional C extensions.

``pyg_private.sampling.backends._first_pass_native`` is the fused first pass of the exact noise
sampler (about 2x faster safe noise on the CPU), ``pyg_private.sampling.backends._grid_step_native``
the fused grid step (rounding, noise and scaling in one pass, also fused with the sampler's first
pass): the sampler's native C backend (``pyg_private/sampling/backends/native_c.py``),
``pyg_private.utils._csr_product_native`` the CSR products in AVX2 registers,
``pyg_private.utils._graph_check_native`` the linear-time check that a CSR adjacency is an
undirected simple graph. All are optional: where no C compiler is available the
installation goes on without them and the same computations run as torch operations (the same
values; ``PYG_PRIVATE_NATIVE=0`` makes an installed package ignore them too).
"""
import sys

from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-add, on any architecture (GCC contracts a * b + c by default where
# the target has FMA, e.g. every aarch64 CPU): the kernels' results are specified operation by operation
flags = [] if sys.platform.startswith("win") else ["-O3", "-ffp-contract=off"]
setup(ext_modules=[Extension(f"pyg_private.{name.replace('/', '.')}", [f"pyg_private/{name}.c"],
                             extra_compile_args=flags, optional=True)
                   for name in ("sampling/backends/_first_pass_native", "sampling/backends/_grid_step_native",
                                "utils/_csr_product_native", "utils/_graph_check_native")])
