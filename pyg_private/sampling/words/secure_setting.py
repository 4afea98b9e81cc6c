"""The ``secure_mode`` setting: per component, or the process-wide default (off, as in Opacus).

What ``secure_mode`` changes is described in :mod:`pyg_private.sampling.words.sources`: never a
seedable generator, on any device; a component given ``secure_mode=None`` follows the process-wide
default set here (:func:`set_secure_mode`, or the context manager :func:`secure_mode`).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional

import torch

__all__ = ["set_secure_mode", "get_secure_mode", "secure_mode", "resolve_secure_mode"]

_lock = threading.Lock()
_secure_default = False


def set_secure_mode(enabled: bool) -> None:
    """Set the process-wide default of ``secure_mode`` for components that are given ``None``."""
    global _secure_default
    if not isinstance(enabled, bool):
        raise TypeError(f"`enabled` must be True or False; got {enabled!r}")
    with _lock:
        _secure_default = enabled


def get_secure_mode() -> bool:
    """The process-wide default of ``secure_mode``."""
    return _secure_default


@contextlib.contextmanager
def secure_mode(enabled: bool = True) -> Iterator[None]:
    """Context manager: ``with secure_mode(): ...`` runs with the process-wide default set."""
    previous = get_secure_mode()
    set_secure_mode(enabled)
    try:
        yield
    finally:
        set_secure_mode(previous)


def resolve_secure_mode(secure: Optional[bool], generator: Optional[torch.Generator]) -> bool:
    """A component's effective ``secure_mode``: its own setting, else the process default; a seeded
    ``generator`` cannot be combined with it (``ValueError``)."""
    if secure is not None and not isinstance(secure, bool):
        raise TypeError(f"`secure_mode` must be True, False or None; got {secure!r}")
    effective = get_secure_mode() if secure is None else secure
    if effective and generator is not None:
        raise ValueError("`secure_mode` draws every random bit from the operating system; a seeded `generator` "
                         "would make the noise predictable: pass one or the other (secure_mode=False with a "
                         "generator is for reproducible experiments and voids the guarantee)")
    return effective
