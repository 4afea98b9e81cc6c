"""What the private PPR modules share: noise arguments, graph input, caching and charging."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from ..accounting import PrivacyAccountant, PrivacyEvent, charge
from ..accounting.validation import check_delta, check_epsilon, check_positive
from ..utils import adjacency_to_edge_index, simple_undirected
from ..utils.adjacency import validated_csr
from ..utils.graph_validation import public_num_nodes
from ..utils.lazy_ppr import seed_matrix
from ._release_cache import CachedRelease, PersistentRelease

__all__ = ["resolve_noise", "SeededRelease", "inflated_scale"]


def inflated_scale(scale: float, factor: Fraction) -> float:
    """The smallest float64 that is at least ``scale * factor`` in exact (rational) arithmetic.

    The grid releases multiply a noise scale by the exact factor by which rounding inflates the
    shift (or sensitivity) the accounting charges, so that the ratio shift / scale, on which the
    charged curve alone depends, does not grow: rounding the product up keeps that true exactly."""
    target = Fraction(scale) * factor
    out = float(target)
    while Fraction(out) < target:
        out = math.nextafter(out, math.inf)
    return out


def resolve_noise(noise_scale: Optional[float], epsilon: Optional[float], delta: Optional[float],
                  calibrate: Callable[[float, float], float], *, scale_name: str = "noise_scale",
                  allow_pure: bool = False, allow_zero: bool = False,
                  accountant: Any = None) -> tuple[float, Optional[float], Optional[float]]:
    """``(scale, epsilon, delta)`` from exactly one of a scale or an ``(epsilon, delta)`` target.

    ``calibrate(epsilon, delta)`` returns the scale; ``delta`` may be omitted (pure
    target, ``delta = 0``) only when ``allow_pure``. A scale of 0 (no noise: a
    non-private reference) is accepted only when ``allow_zero``, and never together with an
    ``accountant``: there is no privacy to record.
    """
    if (noise_scale is None) == (epsilon is None):
        raise ValueError(f"give exactly one of `{scale_name}` or `epsilon` (with `delta`)")
    if noise_scale is not None:
        if delta is not None:
            raise ValueError("`delta` is only used with `epsilon`")
        if allow_zero and noise_scale == 0:
            if accountant is not None:
                raise ValueError(f"{scale_name}=0 is the non-private reference: it releases the exact result and "
                                 "has no privacy to record, so it takes no accountant")
            return 0.0, None, None
        return check_positive(noise_scale, scale_name), None, None
    if delta is None:
        if not allow_pure:
            raise ValueError("`delta` is required with `epsilon` (e.g. 1 / number of edges)")
        delta = 0.0
    eps, d = check_epsilon(epsilon), check_delta(delta, allow_zero=allow_pure)
    return calibrate(eps, d), eps, d


class SeededRelease(PersistentRelease):
    """Mixin: read the graph, reuse a cached release, charge one event per new release.

    The host sets ``accountant``, ``cached``, ``symmetrize``, ``personalized``, ``generator`` and
    ``_cache = None``, and implements ``event(num_columns)`` and ``_release_settings()``. The
    cache keys on the public seeds or signals (fingerprinted into a saved state) and on the private
    graph (in memory only); see :class:`~pyg_private.nn._release_cache.PersistentRelease`.
    """

    accountant: Optional[PrivacyAccountant]
    cached: bool
    symmetrize: bool
    personalized: bool
    _cache: Optional[CachedRelease]

    def reset_parameters(self) -> None:
        """Nothing to re-initialise (the modules have no learnable parameters); the cached release is
        paid data and is kept. ``forget_release()`` drops it."""
        parent = getattr(super(), "reset_parameters", None)
        if parent is not None:
            parent()

    def event(self, num_columns: int) -> PrivacyEvent:  # pragma: no cover - implemented by hosts
        raise NotImplementedError

    def _release_is_public(self) -> bool:
        # personalized: each column is private to its seed's owner (the guarantee is per recipient),
        # so a state or a pickle, which hands every column to whoever holds the file, never holds it
        return not self.personalized

    def _public_num_nodes(self, edge_index: Any, num_nodes: Optional[int], x: Any) -> int:
        """The **public** node count: ``x``'s rows, ``num_nodes`` or a sparse adjacency's declared
        size, never the largest id of the private ``edge_index`` (see
        :func:`~pyg_private.utils.graph_validation.public_num_nodes`)."""
        if edge_index is None:
            raise ValueError("`edge_index` (or a sparse adjacency) is required")
        hint = "pass `num_nodes=` (or the signals `x`)" if getattr(self, "accepts_signals", False) \
            else "pass `num_nodes=`"
        return public_num_nodes(num_nodes, x=x, adj=edge_index, missing=hint)

    def _read_graph(self, edge_index: Any, num_nodes: Optional[int], x: Any = None) -> tuple[Tensor, int]:
        """The validated graph's ``edge_index`` on the public node count (:meth:`_public_num_nodes`).
        Raises before anything is charged."""
        ei, n = adjacency_to_edge_index(edge_index, self._public_num_nodes(edge_index, num_nodes, x))
        return simple_undirected(ei, n, symmetrize=self.symmetrize)

    def _read_csr(self, edge_index: Any, num_nodes: Optional[int], x: Any = None) -> tuple[tuple[Tensor, Tensor], int]:
        """``((crow, col), num_nodes)`` of the validated graph on the public node count, with the
        errors of :meth:`_read_graph`; a CSR adjacency already simple and undirected is taken as it is,
        int32 index arrays included (:func:`~pyg_private.utils.adjacency.validated_csr`; no int64
        copy). Raises before anything is charged."""
        n = self._public_num_nodes(edge_index, num_nodes, x)
        return validated_csr(edge_index, n, symmetrize=self.symmetrize, index_dtype=None), n

    def _seeds_only(self, x: Any, edge_index: Any, seed_index: Any,
                    num_nodes: Optional[int]) -> tuple[Tensor, int, Tensor, Tensor]:
        """``(edge_index, num_nodes, one-hot seeds [N, C], seed_index)`` for modules whose
        bound holds for one-hot seeds only."""
        if x is not None:
            raise ValueError(f"{type(self).__name__} diffuses one-hot seeds only: pass `seed_index`, not `x`")
        if seed_index is None:
            raise ValueError("`seed_index` is required")
        ei, n = self._read_graph(edge_index, num_nodes)
        s0, seeds = seed_matrix(seed_index, n, device=ei.device)
        return ei, n, s0, seeds

    @staticmethod
    def _release_key(edge_index: Tensor, signals: Tensor) -> tuple[tuple, tuple, tuple]:
        """``(public, private, meta)`` of the cache: the public seeds or signals, the private graph."""
        private = tuple(edge_index) if isinstance(edge_index, tuple) else (edge_index,)  # edge_index or (crow, col)
        return (signals,), private, (signals.size(0), signals.size(1), str(signals.dtype))

    def _from_cache(self, edge_index: Tensor, signals: Tensor) -> Optional[Tensor]:
        """The cached release for this graph and these signals (a copy the caller may modify), or ``None``."""
        return self._cached_release(*self._release_key(edge_index, signals), device=signals.device, dtype=None)

    def _charge(self, seeds: Optional[Tensor], num_columns: int, **event_kwargs: Any) -> PrivacyEvent:
        """Charge the release before any noise is drawn: ``num_columns`` to one party, or
        per recipient (the most columns any one seed receives) in personalized mode
        (``event_kwargs``, e.g. the release's grid, go to ``event``); returns the event."""
        if seeds is not None and self.personalized:
            num_columns = int(torch.bincount(seeds).max())
        return charge(self.accountant, self.event(num_columns, **event_kwargs), self)

    def _remember(self, edge_index: Tensor, signals: Tensor, out: Tensor, event: Optional[PrivacyEvent]) -> None:
        """Keep the release ``out`` (charged as ``event``, ``None`` without noise) when ``cached``."""
        self._keep_release(out, *self._release_key(edge_index, signals), event=event,
                           granularity=getattr(self, "granularity", None))
