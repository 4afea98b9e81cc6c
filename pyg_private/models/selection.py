"""Hyperparameter selection on the validation split, shared by the recipes."""
from __future__ import annotations

import statistics
from typing import Callable, Iterable, TypeVar

__all__ = ["select_on_validation"]

C = TypeVar("C")
R = TypeVar("R")


def select_on_validation(grid: Iterable[C], evaluate: Callable[[C], list[R]],
                         score: Callable[[R], float]) -> tuple[C, list[R]]:
    """The configuration of ``grid`` whose runs (``evaluate(config)``) have the best mean
    ``score`` (a validation metric; the first of equals wins), and those runs.

    **Not charged:** the recipes spend every candidate's budget on its own accountant and
    report only the selected runs' spend, as the papers do.
    """
    best = None
    for config in grid:
        runs = evaluate(config)
        value = statistics.mean(score(r) for r in runs)
        if best is None or value > best[0]:
            best = (value, config, runs)
    if best is None:
        raise ValueError("`grid` is empty")
    return best[1], best[2]
