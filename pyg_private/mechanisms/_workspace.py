"""The samplers' scratch pool, under its former module name: the code now lives in
:mod:`pyg_private.sampling.workspace` (:func:`borrow` and :func:`reserve` are re-exported unchanged;
the pool itself, ``_free``, is the new module's)."""
from ..sampling.workspace import borrow, reserve

__all__ = ["borrow", "reserve"]
