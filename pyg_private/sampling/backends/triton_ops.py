"""The Triton backend (CUDA): a task's first pass, alone or fused with the grid step, as one launch of
the kernels of :mod:`~pyg_private.sampling.backends.triton_kernels`, whose flagged samples are listed
in increasing order on the device and counted with one synchronisation a task. (On CUDA a whole
release runs as :mod:`~pyg_private.sampling.device_release` instead, with one synchronisation in
all; this task-by-task flow is its exact path for tasks whose slots fill up.)

The kernels' module imports ``triton``; it is imported on the first task on a device this backend
serves, never for CPU work. The tests add ``"cpu"`` to :attr:`TritonOps.devices` under Triton's
interpreter (``TRITON_INTERPRET=1``).
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Sequence

import torch
from torch import Tensor

from .interface import Backend

__all__ = ["kernels", "BACKEND"]


def kernels() -> ModuleType:
    """The Triton kernels' module (imported on first use: it imports triton)."""
    return importlib.import_module(".triton_kernels", __package__)


class TritonOps(Backend):
    """One launch a task on contiguous tensors of the devices in :attr:`devices`."""

    name = "triton"
    whole_task = True

    def __init__(self) -> None:
        #: The device types whose tasks run as Triton launches (the tests add ``"cpu"`` under the interpreter).
        self.devices = {"cuda"}

    def available(self) -> bool:
        return kernels().triton_available()

    def scratch(self, size: int, device: torch.device, grid: bool) -> list[Tensor]:
        # the flagged indices, (grid) their rounded values, and the launch's workspace
        return [torch.empty(size, dtype=torch.int64, device=device) for _ in range(2 if grid else 1)] + \
            [torch.empty(kernels().workspace_size(size), dtype=torch.int64, device=device)]

    def first_pass(self, table, tables: dict[str, Tensor], words: Sequence[Tensor], out: Tensor,
                   scratch: list[Tensor]) -> Tensor:
        index, workspace = scratch[0][:out.numel()], scratch[-1]
        count = kernels().first_pass_triton(words, None, None, out, index, 0, tables, table, workspace=workspace)
        return index[:int(count)]  # the one synchronisation

    def fuses_grid(self, table, dtype: torch.dtype, granularity: float) -> bool:
        return dtype in (torch.float32, torch.float64) and 2.0 ** -100 <= granularity <= 2.0 ** 100

    def grid_first_pass(self, table, tables: dict[str, Tensor], words: Sequence[Tensor], values: Tensor,
                        step: tuple[float, float, float], scratch: list[Tensor]) -> tuple[Tensor, Tensor]:
        n = values.numel()
        index, kept, workspace = scratch[0][:n], scratch[1][:n], scratch[2]
        count = int(kernels().grid_first_pass_triton(words, values, step, index, kept, 0, tables, table,
                                                     workspace=workspace))  # the one synchronisation
        return index[:count], kept[:count]


BACKEND = TritonOps()
