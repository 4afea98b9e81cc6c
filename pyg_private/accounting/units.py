"""The neighbouring relations ("units") that privacy costs are recorded against."""
from __future__ import annotations

from enum import Enum

__all__ = ["Unit", "as_unit"]


class Unit(str, Enum):
    r"""Who is protected by a privacy guarantee.

    * ``EDGE``: graphs with the same nodes that differ in one undirected edge.
    * ``NODE``: graphs that differ in one node with all its edges, features and label.
    * ``LOCAL``: one node's feature vector replaced, randomised by the node itself
      (local DP); accounted per node.
    * ``GRAPH``: datasets of graphs that differ in one whole graph (its nodes, edges, features
      and label) **added or removed**: the add/remove relation of ``NODE`` and ``EDGE``, and the
      one under which DP-SGD with Poisson sampling is analysed (Mironov, Talwar and Zhang 2019),
      one graph being one example (graph-level DP-SGD,
      :class:`~pyg_private.models.GraphDPSGD`).

    Costs recorded against different units never add up with each other.
    """

    EDGE = "edge"
    NODE = "node"
    LOCAL = "local"
    GRAPH = "graph"

    def __str__(self) -> str:  # "edge" rather than "Unit.EDGE" in messages and reports
        return self.value


def as_unit(unit: "Unit | str", *, argument: str = "unit") -> Unit:
    """Return ``unit`` as a :class:`Unit`, raising a ``ValueError`` naming the argument."""
    if isinstance(unit, Unit):
        return unit
    try:
        return Unit(unit)
    except ValueError:
        allowed = ", ".join(repr(u.value) for u in Unit)
        raise ValueError(f"`{argument}` must be one of {allowed}; got {unit!r}") from None
