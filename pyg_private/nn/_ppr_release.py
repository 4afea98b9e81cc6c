"""What the private PPR modules share: noise arguments, graph input, caching and charging."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from ..accounting import PrivacyAccountant, PrivacyEvent, charge
from ..accounting.validation import check_delta, check_epsilon, check_positive
from ..utils import adjacency_to_edge_index, simple_undirected
from ..utils.lazy_ppr import seed_matrix

__all__ = ["resolve_noise", "SeededRelease"]


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


def _max_node(edge_index: Any) -> int:
    """1 + the largest node id of an ``edge_index`` (0 when it has none or is not an edge_index)."""
    if isinstance(edge_index, Tensor) and edge_index.layout == torch.strided and edge_index.dim() == 2 \
            and edge_index.numel() and not edge_index.is_floating_point():
        return int(edge_index.max()) + 1
    return 0


class SeededRelease:
    """Mixin: read the graph, reuse a cached release, charge one event per new release.

    The host sets ``accountant``, ``cached``, ``symmetrize``, ``personalized`` and
    ``_cache = None``, and implements ``event(num_columns)``.
    """

    accountant: Optional[PrivacyAccountant]
    cached: bool
    symmetrize: bool
    personalized: bool
    _cache: Optional[tuple[Tensor, Tensor, Tensor]]

    def reset_parameters(self) -> None:
        """Clear the cached release (the modules have no learnable parameters)."""
        parent = getattr(super(), "reset_parameters", None)
        if parent is not None:
            parent()
        self._cache = None

    def event(self, num_columns: int) -> PrivacyEvent:  # pragma: no cover - implemented by hosts
        raise NotImplementedError

    def _read_graph(self, edge_index: Any, num_nodes: Optional[int], x: Any = None) -> tuple[Tensor, int]:
        if edge_index is None:
            raise ValueError("`edge_index` (or a sparse adjacency) is required")
        if isinstance(x, Tensor) and num_nodes is None and x.dim() >= 1 and x.size(0) > 0:
            num_nodes = max(x.size(0), _max_node(edge_index))  # the signals' rows count isolated nodes too
        ei, n = adjacency_to_edge_index(edge_index, num_nodes)
        return simple_undirected(ei, n, symmetrize=self.symmetrize)

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

    def _from_cache(self, edge_index: Tensor, signals: Tensor) -> Optional[Tensor]:
        if not self.cached or self._cache is None:
            return None
        c_ei, c_s0, c_out = self._cache
        if (c_ei.shape == edge_index.shape and torch.equal(c_ei, edge_index) and c_s0.shape == signals.shape
                and torch.equal(c_s0, signals)):
            return c_out.clone()  # the caller may modify what it gets
        return None

    def _charge(self, seeds: Optional[Tensor], num_columns: int) -> None:
        """Charge the release before any noise is drawn: ``num_columns`` to one party, or
        per recipient (the most columns any one seed receives) in personalized mode."""
        if seeds is not None and self.personalized:
            num_columns = int(torch.bincount(seeds).max())
        charge(self.accountant, self.event(num_columns), self)

    def _remember(self, edge_index: Tensor, signals: Tensor, out: Tensor) -> None:
        if self.cached:
            self._cache = (edge_index, signals, out.clone())
