"""Which process is this: the identity an in-memory ledger is owned by, and how to name it.

An in-memory :class:`~pyg_private.accounting.PrivacyAccountant` belongs to one process. A copy of
it in another process (inherited by ``fork``, unpickled from ``spawn`` arguments or by a
``DataLoader`` worker) has a ledger that nobody else reads, so it must refuse to charge. The
identity of a process is its pid together with a random token drawn when this module is imported
and drawn again in every forked child (``os.register_at_fork``): a recycled pid does not make a
stale pickle look like its own.
"""
from __future__ import annotations

import os
import secrets
import sys
from typing import Optional

__all__ = ["ProcessIdentity", "process_identity", "describe_process", "distributed_rank"]

#: ``(pid, token)`` of a process
ProcessIdentity = tuple[int, str]

_token = secrets.token_hex(8)


def _new_token() -> None:
    global _token
    _token = secrets.token_hex(8)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_new_token)


def process_identity() -> ProcessIdentity:
    """This process's identity (changes in a forked child; differs in every new process)."""
    return os.getpid(), _token


def distributed_rank() -> Optional[int]:
    """This process's global rank when ``torch.distributed`` runs a group of more than one process,
    else ``None`` (``torch.distributed`` is only looked at when something imported it)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() <= 1:
            return None
        return int(dist.get_rank())
    except (RuntimeError, ValueError, AttributeError):  # pragma: no cover - a group being torn down
        return None


def describe_process() -> str:
    """``"process 123 (a DataLoader worker, worker id 1)"`` and the like, for error messages."""
    what = []
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None and hasattr(data, "get_worker_info") else None
    if info is not None:
        what.append(f"a DataLoader worker, worker id {info.id}")
    rank = distributed_rank()
    if rank is not None:
        what.append(f"torch.distributed rank {rank}")
    if not what:
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            what.append("a process started by multiprocessing")
    return f"process {os.getpid()}" + (f" ({', '.join(what)})" if what else "")
