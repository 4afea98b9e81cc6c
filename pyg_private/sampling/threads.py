"""Independent tasks on torch's threads: the sampler's tasks (each with its own random stream), and
any other work split the same way (the CSR products of :mod:`pyg_private.utils.csr_product`)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import torch

__all__ = ["run_tasks", "run_staged", "workers"]

T = TypeVar("T")


def workers(count: int, device: torch.device) -> int:
    """Threads for ``count`` tasks: ``torch.get_num_threads()`` at most on the CPU, one elsewhere."""
    return min(torch.get_num_threads(), count) if torch.device(device).type == "cpu" else 1


def run_tasks(task: Callable[[int], None], count: int, device: torch.device) -> None:
    """Run ``task(0), ..., task(count - 1)`` on ``torch.get_num_threads()`` threads on the CPU (in
    order, in this thread, elsewhere). The tasks must be independent; give each its own
    :meth:`RandomSource.spawn` child so that the results do not depend on the thread count."""
    n = workers(count, device)
    if n > 1:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(task, range(count)))  # list(): re-raise a task's exception here
    else:
        for i in range(count):
            task(i)


def run_staged(first: Callable[[int], T], second: Callable[[int, T], None], count: int,
               device: torch.device) -> None:
    """``second(i, first(i))`` for ``i = 0, ..., count - 1``: the ``first`` stages on
    ``torch.get_num_threads()`` worker threads, each ``second`` in the calling thread, in order, as
    soon as its ``first`` is done (in order, in this thread, with one thread or elsewhere). For work
    whose first stage releases the GIL (C loops) and whose second holds it (Python): the two
    overlap instead of contending for the GIL. The tasks must be independent, as for
    :func:`run_tasks`."""
    n = workers(count, device)
    if n <= 1:
        for i in range(count):
            second(i, first(i))
        return
    with ThreadPoolExecutor(n) as pool:
        for i, result in enumerate(pool.map(first, range(count))):
            second(i, result)
