"""Per-node ledger for local DP (unit ``"local"``).

A node's spend is the composition of the randomisations that touched it, and the
reported figure is the maximum over nodes. Nodes touched by the same set of events
share one :class:`Composition` ("group"), so the ledger costs one int per node plus
one composition per distinct history, whatever the number of nodes.
"""
from __future__ import annotations

import numpy as np

from .composition import Composition
from .events import PrivacyEvent
from .units import Unit

__all__ = ["LocalLedger"]


class LocalLedger:
    """Immutable-by-convention state: :meth:`add` returns a new ledger."""

    def __init__(self, group_of_node: np.ndarray | None = None, groups: tuple[Composition, ...] = ()):
        self.group_of_node = np.zeros(0, dtype=np.int64) if group_of_node is None else group_of_node
        self.groups = groups

    @property
    def num_nodes(self) -> int:
        return int(self.group_of_node.size)

    def _extended(self, num_nodes: int) -> tuple[np.ndarray, list[Composition]]:
        groups = list(self.groups)
        sig = self.group_of_node
        if num_nodes > sig.size:
            groups.append(Composition())
            sig = np.concatenate([sig, np.full(num_nodes - sig.size, len(groups) - 1, dtype=np.int64)])
        else:
            sig = sig.copy()
        return sig, groups

    def add(self, event: PrivacyEvent) -> "LocalLedger":
        """The ledger with ``event`` charged to the nodes it touched (``self`` is unchanged)."""
        if event.unit is not Unit.LOCAL:
            raise ValueError(f"the local ledger only takes unit 'local' events; got {event.unit.value!r}")
        sig, groups = self._extended(event.num_nodes)
        touched = event.node_mask()
        if touched.size < sig.size:
            touched = np.concatenate([touched, np.zeros(sig.size - touched.size, dtype=bool)])
        old_ids, inverse = np.unique(sig[touched], return_inverse=True)
        new_ids = np.arange(len(groups), len(groups) + old_ids.size)
        groups.extend(groups[g].add(event) for g in old_ids)
        sig[touched] = new_ids[inverse]
        used, compact = np.unique(sig, return_inverse=True)
        return LocalLedger(compact.astype(np.int64), tuple(groups[g] for g in used))

    def node_epsilons(self, delta: float, **kwargs) -> np.ndarray:
        """Every node's composed epsilon at ``delta`` (``kwargs`` go to :meth:`Composition.epsilon`)."""
        per_group = np.array([g.epsilon(delta, **kwargs) for g in self.groups], dtype=np.float64)
        return per_group[self.group_of_node] if self.group_of_node.size else np.zeros(0)

    def max_epsilon(self, delta: float, **kwargs) -> float:
        """The maximum over nodes of the composed epsilon (0 for an empty ledger)."""
        if not self.groups:
            return 0.0
        return max(g.epsilon(delta, **kwargs) for g in self.groups)

    def max_epsilon_after(self, event: PrivacyEvent, delta: float, **kwargs) -> float:
        """The maximum over nodes if ``event`` were added (nothing is changed)."""
        return self.add(event).max_epsilon(delta, **kwargs)

    def min_delta(self) -> float:
        """The largest over nodes of the delta their approximate-DP events need."""
        return max((g.min_delta() for g in self.groups), default=0.0)

    @property
    def num_touched(self) -> int:
        """Nodes touched by at least one event."""
        if not self.groups:
            return 0
        counts = np.array([g.num_events for g in self.groups])
        return int((counts[self.group_of_node] > 0).sum())

    @property
    def max_events_per_node(self) -> int:
        return max((g.num_events for g in self.groups), default=0)

    def __repr__(self) -> str:
        return f"LocalLedger(num_nodes={self.num_nodes}, groups={len(self.groups)})"
