"""The collectives a row-partitioned release needs, and the rule that keeps the processes in step:
every process reaches the same collectives in the same order, so an error found on one process is
first agreed on (:func:`agree`) and then raised on **every** process, never on one alone (which would
leave the others waiting in a collective).

Everything here works on any backend whose tensors live on ``comm_device``: ``gloo`` (CPU tensors),
``nccl`` (CUDA tensors) or a mixed ``"cpu:gloo,cuda:nccl"`` group; the payloads are tensors, never
pickled objects.
"""
from __future__ import annotations

import json
from typing import Any, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from ..accounting.errors import PrivacyBudgetExceeded

__all__ = ["GroupInfo", "require_group", "all_gather_bytes", "broadcast_bytes", "agree", "raise_agreed",
           "Layout", "all_gather_rows"]

try:
    import torch.distributed as dist
except ImportError:  # pragma: no cover - builds without torch.distributed
    dist = None  # type: ignore[assignment]

def _gather_into(output: Tensor, tensor: Tensor, group: Any) -> None:
    """``all_gather_single`` where PyTorch has it, else its older name ``all_gather_into_tensor``."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(output, tensor, group=group)


#: Exception types that cross process boundaries by name (anything else arrives as ``RuntimeError``);
#: also ``ReleaseInsideDPSGDError``, resolved by :func:`_error_type` (its module imports Opacus).
_TYPES: dict[str, type[Exception]] = {"ValueError": ValueError, "TypeError": TypeError,
                                      "PrivacyBudgetExceeded": PrivacyBudgetExceeded}


def _error_type(name: str) -> type[Exception]:
    if name == "ReleaseInsideDPSGDError":  # a subclass of Opacus' UnsupportedModuleError: Opacus imported here
        from ..accounting.opacus_checks import ReleaseInsideDPSGDError

        return ReleaseInsideDPSGDError
    return _TYPES.get(name, RuntimeError)


class GroupInfo(NamedTuple):
    """The process group of a release: ``rank`` and ``world`` inside ``group``, the global rank of
    the group's rank 0 (where the accountant lives) and the device the collectives use."""
    group: Any
    rank: int
    world: int
    root: int
    device: torch.device


def require_group(group: Any, device: torch.device, owner: str) -> GroupInfo:
    """The :class:`GroupInfo` of ``group`` (the default group for ``None``); raises a ``RuntimeError``
    naming the fix when ``torch.distributed`` is unavailable or not initialised, before any
    collective (so it is raised alike on every process in that state)."""
    if dist is None or not dist.is_available():
        raise RuntimeError(f"{owner} needs torch.distributed, which this build of PyTorch does not include; use the "
                           "single-process layer instead")
    if not dist.is_initialized():
        raise RuntimeError(f"{owner}: the default process group is not initialised. Call "
                           "torch.distributed.init_process_group(backend='gloo' or 'nccl', ...) on every process "
                           "first (torchrun sets the rendezvous environment), or use the single-process layer")
    rank = dist.get_rank(group)
    if rank < 0:
        raise RuntimeError(f"{owner}: this process is not a member of `group`; call the layer on the group's "
                           "processes only")
    world = dist.get_world_size(group)
    root = 0 if group is None else dist.get_global_rank(group, 0)
    return GroupInfo(group, rank, world, root, _comm_device(group, device, owner))


def _comm_device(group: Any, device: torch.device, owner: str) -> torch.device:
    """CPU tensors for ``gloo``/``mpi`` groups, the inputs' device otherwise (``nccl`` needs CUDA)."""
    backend = str(dist.get_backend(group)).lower()
    if device.type == "cpu":
        if backend == "nccl":
            raise ValueError(f"{owner}: the process group uses the nccl backend, which communicates CUDA tensors "
                             "only, but the inputs are on the CPU: move `x` to this process's GPU or use gloo")
        return device
    if backend in ("gloo", "mpi"):
        return torch.device("cpu")
    return device


def all_gather_bytes(data: bytes, info: GroupInfo) -> list[bytes]:
    """``data`` of every process of the group, in rank order (two collectives)."""
    size = torch.tensor([len(data)], dtype=torch.int64, device=info.device)
    sizes = torch.empty(info.world, dtype=torch.int64, device=info.device)
    _gather_into(sizes, size, info.group)
    sizes_list = sizes.tolist()
    width = max(max(sizes_list), 1)
    buf = torch.zeros(width, dtype=torch.uint8)
    if data:
        buf[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    out = torch.empty(info.world * width, dtype=torch.uint8, device=info.device)
    _gather_into(out, buf.to(info.device), info.group)
    raw = out.cpu().numpy().tobytes()
    return [raw[r * width:r * width + sizes_list[r]] for r in range(info.world)]


def broadcast_bytes(data: Optional[bytes], info: GroupInfo) -> bytes:
    """``data`` of the group's rank 0 on every process (two collectives; other ranks pass ``None``)."""
    size = torch.tensor([len(data) if info.rank == 0 else 0], dtype=torch.int64, device=info.device)
    dist.broadcast(size, src=info.root, group=info.group)
    n = int(size.item())
    buf = torch.zeros(max(n, 1), dtype=torch.uint8)
    if info.rank == 0 and n:
        buf[:n] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    buf = buf.to(info.device)
    dist.broadcast(buf, src=info.root, group=info.group)
    return buf.cpu().numpy().tobytes()[:n]


def encode_error(error: Optional[BaseException]) -> Optional[list[str]]:
    """``[type name, message]`` of an exception, JSON-ready (``None`` for none)."""
    return None if error is None else [type(error).__name__, str(error)]


def raise_agreed(errors: Sequence[Optional[list[str]]], info: GroupInfo, local: Optional[BaseException] = None,
                 what: str = "") -> None:
    """Raise, on every process alike, the errors the processes reported (``errors[r]`` from rank
    ``r``, as :func:`encode_error` writes them); nothing when there are none. The type is the
    first failing rank's (``ValueError``, ``TypeError``, ...; ``RuntimeError`` for others)."""
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if not failed:
        return
    kind = _error_type(failed[0][1][0])
    if len(failed) == info.world and len({msg for _, (_, msg) in failed}) == 1:
        lines = f"on every process: {failed[0][1][1]}"
    else:
        lines = "; ".join(f"rank {r} of {info.world}: {msg}" for r, (_, msg) in failed)
    raise kind(f"{what}{lines}") from local


def agree(error: Optional[BaseException], info: GroupInfo, what: str = "") -> None:
    """Make a locally found error everyone's: one ``all_reduce`` when no process failed, then (only
    on failure) the messages are gathered and :func:`raise_agreed` raises on every process."""
    flag = torch.tensor([0 if error is None else 1], dtype=torch.int64, device=info.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=info.group)
    if int(flag.item()) == 0:
        return
    gathered = all_gather_bytes(json.dumps(encode_error(error)).encode(), info)
    raise_agreed([json.loads(g) for g in gathered], info, error, what)


class Layout:
    """Where every rank's block of rows lies in the global node order.

    Args:
        ranges (list of (int, int)): ``ranges[r]`` the rows ``[start, end)`` of rank ``r``; they
            tile ``[0, num_nodes)`` (checked by :func:`~pyg_private.distributed.partition.check_partition`).
    """

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self.ranges = [(int(s), int(e)) for s, e in ranges]
        self.sizes = [e - s for s, e in self.ranges]
        self.width = max(max(self.sizes), 1)  # the padded block every rank sends
        self.order = sorted(range(len(self.ranges)), key=lambda r: self.ranges[r])  # empty blocks first on ties
        self.starts = torch.tensor([self.ranges[r][0] for r in self.order], dtype=torch.long)
        #: rank order is node order and the blocks are equally large: the gathered buffer is the result
        self.trivial = self.order == list(range(len(self.ranges))) and all(s == self.width for s in self.sizes)
        #: rank order is node order and only the last block may be short: the gather buffer's first
        #: ``num_rows`` rows are the result (a view, no copy)
        self.prefix = self.order == list(range(len(self.ranges))) and all(s == self.width for s in self.sizes[:-1])
        self.num_rows = sum(self.sizes)
        self._index: dict[torch.device, Tensor] = {}

    def index(self, device: torch.device) -> Tensor:
        """Rows of the padded gather buffer, in global node order."""
        if device not in self._index:
            parts = [torch.arange(r * self.width, r * self.width + self.sizes[r]) for r in self.order]
            self._index[device] = torch.cat(parts).to(device)
        return self._index[device]

    def owner(self, nodes: Tensor) -> Tensor:
        """The rank that holds each of ``nodes`` (global ids)."""
        slot = torch.searchsorted(self.starts.to(nodes.device), nodes, right=True) - 1
        return torch.tensor(self.order, dtype=torch.long, device=nodes.device)[slot]


def all_gather_rows(local: Tensor, layout: Layout, info: GroupInfo, buffer: Optional[Tensor] = None) -> Tensor:
    """The global matrix whose block ``layout.ranges[r]`` is rank ``r``'s ``local`` (on ``local``'s
    device): one padded all-gather. ``buffer`` (``[world * width, ...]`` on the
    communication device) is reused when given; the result may be a view of it (blocks in rank
    order), valid until the buffer's next use."""
    width = layout.width
    send = local.to(info.device)
    if send.size(0) < width:
        send = torch.cat([send, send.new_zeros((width - send.size(0), *send.shape[1:]))])
    shape = (info.world * width, *local.shape[1:])
    if buffer is None or tuple(buffer.shape) != shape or buffer.dtype != local.dtype:
        buffer = torch.empty(shape, dtype=local.dtype, device=info.device)
    _gather_into(buffer, send.contiguous(), info.group)
    if layout.trivial:
        out = buffer
    elif layout.prefix:
        out = buffer[:layout.num_rows]
    else:
        out = buffer.index_select(0, layout.index(buffer.device))
    return out.to(local.device)
