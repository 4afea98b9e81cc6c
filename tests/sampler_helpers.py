"""Shared test helpers for the exact samplers: seeded and scripted word sources, and a sampler copy
forced onto its exact (256-bit) paths."""
from __future__ import annotations

import copy

import torch

from pyg_private.mechanisms import exact_integer_noise as E
from pyg_private.mechanisms.randomness import RandomSource


def seeded_source(seed: int = 0) -> RandomSource:
    """A reproducible CPU source (voids any guarantee: tests only)."""
    return RandomSource("cpu", generator=torch.Generator().manual_seed(seed))


class ScriptedSource(RandomSource):
    """Returns the scripted words first (in order, across calls), then seeded ones; records the
    size of every call in ``calls``."""

    def __init__(self, script, seed: int = 0):
        super().__init__("cpu", generator=torch.Generator().manual_seed(seed))
        self.script = list(script)
        self.calls = []

    def words(self, n):
        n = int(n)
        self.calls.append(n)
        head, self.script = self.script[:n], self.script[n:]
        rest = super().words(n - len(head)) if n > len(head) else torch.empty(0, dtype=torch.int64)
        return torch.cat([torch.tensor(head, dtype=torch.int64), rest])


def force_exact_paths(sampler: E.RoundedNoiseSampler, *, split_bits=None, margin=None) -> E.RoundedNoiseSampler:
    """A copy of the sampler whose table takes the exact paths often: few alias split bits (ties)
    and a wide float margin (the 256-bit acceptance test)."""
    t = copy.copy(sampler._t)
    if split_bits is not None:
        t.split_bits = split_bits
    if margin is not None:
        t.margin = margin
        t.accept_scale = (1.0 - margin) * 2.0 ** t.accept_bits
        t.reject_scale = (1.0 + margin) * 2.0 ** t.accept_bits
        t._build_cheap()
    t._build_fast()
    forced = object.__new__(E.RoundedNoiseSampler)
    forced.kind, forced.scale, forced._t, forced.native = sampler.kind, sampler.scale, t, sampler.native
    return forced


def fast_path_cases(sampler: E.RoundedNoiseSampler, count: int = 40, seed: int = 0):
    """``(values, cells)``: values of every part of the table, both signs (value 0, 1 and -1, the
    first and last values of cell 0, the last table cell, random ones), with their cells."""
    import numpy as np

    t = sampler._t
    rng = np.random.default_rng(seed)
    mags = np.concatenate([[0, 1, t.w - 1, t.w, 2 * t.w - 1, (t.num_cells - 1) * t.w, t.num_cells * t.w - 1],
                           rng.integers(0, t.num_cells, count) * t.w + rng.integers(0, t.w, count)])
    values = [int(v) for v in mags] + [-int(v) for v in mags if v]
    cells = [t.cell_of(v) for v in values]
    return torch.tensor(values, dtype=torch.int64), torch.tensor(cells, dtype=torch.int64)
