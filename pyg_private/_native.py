"""The optional C extensions, loaded in one place.

Each extension is built at installation where a C compiler exists; every computation it speeds up
also runs as torch operations with the same values (the modules that use one say how). Setting the
environment variable ``PYG_PRIVATE_NATIVE=0`` (or ``off``/``false``/``no``) before the package is
imported makes it ignore the extensions and take those torch paths: the configuration a machine
without a compiler runs, and one the test suite runs too.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Optional

__all__ = ["NATIVE_ENV_VAR", "native_enabled", "load_native"]

#: The environment variable that disables every C extension when it is ``0``, ``off``, ``false`` or ``no``.
NATIVE_ENV_VAR = "PYG_PRIVATE_NATIVE"


def native_enabled() -> bool:
    """Whether the C extensions may be used (:data:`NATIVE_ENV_VAR` does not disable them)."""
    return os.environ.get(NATIVE_ENV_VAR, "1").strip().lower() not in ("0", "off", "false", "no")


def load_native(name: str) -> Optional[ModuleType]:
    """The extension module ``pyg_private.<name>``, or ``None`` when it is not built or the
    extensions are disabled."""
    if not native_enabled():
        return None
    try:
        return importlib.import_module(f"pyg_private.{name}")
    except ImportError:  # pragma: no cover - depends on the installation
        return None
