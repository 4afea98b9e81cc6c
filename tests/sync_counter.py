"""Counting host synchronisations on any device (the CPU included): every operation that, on a GPU,
makes the host wait for the device's result (imported by name: pytest puts this directory on
``sys.path``).

A torch dispatch mode sees every aten operation, and counts the ones whose CUDA implementation reads
the device from the host: a scalar read (``.item()``, ``int()``, ``bool()``, ``float()``, ``if t:``),
``nonzero``, boolean-mask indexing and assignment, ``masked_select``, ``unique``, ``equal``,
``repeat_interleave`` without ``output_size``, and copies from a device to the CPU.
``Tensor.tolist`` and ``Tensor.cpu``, which on a CPU tensor read its memory without an aten
operation, are counted by wrapping them (``Tensor.numpy`` is not: it refuses a device tensor, so it
only ever reads host tables). Launches of Triton kernels (which on the CPU run
under the interpreter and copy their arguments) are not counted: on a GPU a launch does not wait.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
_READS = {aten._local_scalar_dense, aten.nonzero, aten.masked_select, aten._unique2, aten.unique_dim,
          aten.unique_consecutive, aten.equal}
_MASKED = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_}


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in (indices or ()))


class HostSyncs(TorchDispatchMode):
    """``with HostSyncs() as syncs: ...``; ``syncs.count`` and ``syncs.ops`` (what was counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.ops: list[str] = []
        self.paused = 0

    def _add(self, name: str) -> None:
        if not self.paused:
            self.count += 1
            self.ops.append(name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in _READS or (packet in _MASKED and _bool_index(args)) or \
                (packet is aten.repeat_interleave and kwargs.get("output_size") is None and
                 isinstance(args[0], torch.Tensor) and len(args) < 3) or \
                (packet in (aten._to_copy, aten.copy_) and self._to_host(func, args, kwargs)):
            self._add(str(func))
        return func(*args, **kwargs)

    @staticmethod
    def _to_host(func, args, kwargs) -> bool:
        """A copy from a non-CPU device to the CPU."""
        if func.overloadpacket is aten._to_copy:
            device = kwargs.get("device")
            return device is not None and torch.device(device).type == "cpu" and args[0].device.type != "cpu"
        dst, src = args[0], args[1]
        return dst.device.type == "cpu" and isinstance(src, torch.Tensor) and src.device.type != "cpu"


@contextlib.contextmanager
def count_host_syncs() -> Iterator[HostSyncs]:
    """Count host synchronisations in the block (see the module's docstring)."""
    counter = HostSyncs()
    patched = []

    def wrap(name):
        real = getattr(torch.Tensor, name)

        def method(self, *args, **kwargs):
            counter._add(f"Tensor.{name}")
            with pause(counter):
                return real(self, *args, **kwargs)
        patched.append((name, real))
        setattr(torch.Tensor, name, method)

    for name in ("tolist", "cpu", "item"):
        wrap(name)
    try:
        with pause_triton_launches(counter), counter:
            yield counter
    finally:
        for name, real in patched:
            setattr(torch.Tensor, name, real)


@contextlib.contextmanager
def pause(counter: HostSyncs) -> Iterator[None]:
    counter.paused += 1
    try:
        yield
    finally:
        counter.paused -= 1


@contextlib.contextmanager
def pause_triton_launches(counter: HostSyncs) -> Iterator[None]:
    """Launches of Triton kernels (interpreted on the CPU) are not counted."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - depends on the installation
        yield
        return
    real = interpreter.GridExecutor.__call__

    def call(self, *args, **kwargs):
        with pause(counter):
            return real(self, *args, **kwargs)
    interpreter.GridExecutor.__call__ = call
    try:
        yield
    finally:
        interpreter.GridExecutor.__call__ = real
