"""The optional C extensions, loaded in one place.

Each extension is built at installation where a C compiler exists; every computation it speeds up
also runs as torch operations with the same values (the modules that use one say how). Setting the
environment variable ``PYG_PRIVATE_NATIVE=0`` (or ``off``/``false``/``no``) before the package is
imported makes it ignore the extensions and take those torch paths: the configuration a machine
without a compiler runs, and one the test suite runs too.

An extension is loaded on its first use, not when the package is imported (:func:`native_attribute`):
the modules that use one expose it as a module attribute resolved on first access (PEP 562), so
importing ``pyg_private`` loads no shared library. The switch is read at that first use.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any, MutableMapping, Optional

__all__ = ["NATIVE_ENV_VAR", "native_enabled", "load_native", "native_attribute"]

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


def native_attribute(namespace: MutableMapping[str, Any], attr: str, name: str) -> Optional[ModuleType]:
    """``namespace[attr]``, set to :func:`load_native` of ``name`` on the first call.

    ``namespace`` is the ``globals()`` of the module that uses the extension: once loaded (or found
    missing: ``None``) it is an ordinary module attribute, which later calls, readers of the
    attribute and a test's ``monkeypatch.setattr`` all see. The module's ``__getattr__`` calls this
    for the name, and its functions call it instead of reading the global.
    """
    try:
        return namespace[attr]
    except KeyError:
        return namespace.setdefault(attr, load_native(name))
