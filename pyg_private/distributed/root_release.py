"""One release per job under ``torch.distributed``: the group's rank 0 releases, every process
receives that release.

Under DDP (or Lightning's DDP strategy) every rank runs the same code. A release layer or transform
called on every rank would draw one release per rank of the same private data: the published model
would have seen several releases while one ledger (or none) recorded one. :func:`release_on_root`
runs the release on rank 0 only, where the accountant lives, so it is charged once, and broadcasts
the noisy result; the other ranks never touch the private computation. What they receive is the
release itself (post-processing), so the whole job costs one release.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from ._comm import agree, broadcast_bytes, dist, require_group

__all__ = ["release_on_root"]


def release_on_root(release: Callable[[], Tensor], like: Tensor, *, group: Any = None) -> Tensor:
    r"""Run ``release()`` on the group's rank 0 and return its result on every process.

    ``release`` is what one process would call (for example
    ``lambda: layer(data.x, data.edge_index)`` with the rank-0 accountant, or a
    :class:`~pyg_private.nn.PrecomputedPropagation`'s ``precompute``); it is called on rank 0 only,
    which charges its accountant once and draws the noise. The result is broadcast to every process
    (on ``like``'s device). An error on rank 0 (a refused budget, a validation error) is raised on
    every process alike, and nothing is sent.

    Args:
        release (callable): returns the released tensor; called on rank 0 only.
        like (Tensor): a tensor of the release's public shape and dtype, on the device the result is
            wanted on (every process passes one; its values are not read). The shapes and dtypes are
            checked against rank 0's result on every process before anything is sent.
        group (ProcessGroup, optional): the processes (default: the default group).

    Returns:
        Tensor: rank 0's release, the same values on every process (detached).
    """
    if not isinstance(like, Tensor):
        raise TypeError(f"`like` must be a tensor of the release's shape and dtype; got {type(like).__name__}")
    info = require_group(group, like.device, "release_on_root")
    out: Optional[Tensor] = None
    error: Optional[BaseException] = None
    if info.rank == 0:
        try:
            out = release()
            if not isinstance(out, Tensor):
                raise TypeError(f"release_on_root: `release()` must return a tensor; got {type(out).__name__}")
            out = out.detach()
        except Exception as exc:  # noqa: BLE001 - raised on every process by agree()
            error = exc
    agree(error, info, "release_on_root: ")
    described = broadcast_bytes(f"{tuple(out.shape)} {out.dtype}".encode() if info.rank == 0 else None, info)
    mismatch = None
    if described.decode() != f"{tuple(like.shape)} {like.dtype}":
        mismatch = ValueError(f"the release is {described.decode()} but `like` is {tuple(like.shape)} {like.dtype} "
                              "(every process must pass a `like` of the release's public shape and dtype)")
    agree(mismatch, info, "release_on_root: ")
    if info.rank == 0:
        buf = out.to(info.device).contiguous()
    else:
        buf = torch.empty(like.shape, dtype=like.dtype, device=info.device)
    dist.broadcast(buf, src=info.root, group=info.group)
    return buf.to(like.device)
