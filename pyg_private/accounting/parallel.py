r"""Parallel composition: releases on disjoint parts of the data cost the maximum over parts.

Parallel composition (McSherry, "Privacy Integrated Queries", SIGMOD 2009, Thm. 2; the argument
below holds for every guarantee the accountant composes: RDP, GDP, privacy loss distributions,
approximate DP): when the data set is split into disjoint parts **by a rule that does not
depend on the private data**, and every release of a group reads one part only, two
neighbouring data sets differ in one part
:math:`j` at most. Every release on another part then sees the same input under both, and adds
no privacy loss whatever it was adaptively asked. The group therefore costs what part
:math:`j`'s releases cost, composed sequentially, and :math:`j` is the worst part:

.. math::
    \epsilon_{\text{unit}}(\delta) = \max_{(j_1, \dots, j_m)}
        \epsilon\Big(\mathcal{S} \circ \mathcal{P}^{(1)}_{j_1} \circ \dots \circ
        \mathcal{P}^{(m)}_{j_m}\Big)(\delta),

with :math:`\mathcal{S}` the sequential events of the unit and :math:`\mathcal{P}^{(g)}_j` the
events of part :math:`j` of group :math:`g`. Every combination is composed with the
accountant's own rules (Rényi/GDP and PLD), so the figure is exact whenever one part
dominates and never below the truth. Parts with the same events (a loader whose batches each
get one identical release) collapse to one; a part whose events are a sub-multiset of
another's is dominated and dropped. Beyond :data:`MAX_SELECTIONS` combinations, the group with
the most distinct parts is replaced by one dominating release: its worst part when every part
is Gaussian (GDP is totally ordered in :math:`\mu`), else the pointwise maximum of the parts'
RDP curves (a valid RDP curve for the group, as every part's is below it), else (approximate-DP
parts) the parts composed sequentially. These fallbacks are upper bounds, never below the truth.

**When a partition qualifies.** Parallel composition needs every *possible* node or edge (not
only those of the graph at hand) to belong to one part at most, by a rule fixed without looking
at the private data; then a neighbouring data set changes one part only.

* Qualify: the graphs of a dataset (a ``DataLoader`` of many graphs: one epoch's batches are
  disjoint); nodes assigned by their ids (ranges, a hash), by a public attribute, or by a random
  split drawn independently of the graph (``RandomNodeLoader``, ``torch.randperm``), each part
  released on its **induced** subgraph.
* Do not qualify, even when the parts happen to be disjoint: a partition computed *from the
  private graph*. By **degree**: adding one edge ``{u, v}`` raises the degrees of ``u`` and ``v``,
  which can move both (and, through a median or quantile threshold, other nodes) into other
  parts, so the neighbouring graph's parts differ in several places and its releases differ in
  every part that changed; under edge-level DP the degree is itself private. By METIS
  (``ClusterData``): one edge more can move nodes between clusters. By a neighbour sampler
  (``NeighborLoader``): a batch holds its seeds' sampled neighbourhoods, so an edge ``{u, v}``
  between the seeds of two batches lies in both (``u -> v`` in one, ``v -> u`` in the other), and
  adding it changes both; batches also overlap outright through halo nodes and multi-hop
  neighbourhoods. These compose sequentially.
* Each release of part :math:`j` reads only part :math:`j`: its own induced subgraph, its own
  features, and public quantities (declared bounds, not the full graph's degrees).
* **Edge level.** An edge lies in the part that holds both endpoints; an edge *between* two
  parts lies in no part's subgraph. Adding or removing it changes no release of the group
  (it costs nothing there); adding or removing an edge inside part :math:`j` changes only
  part :math:`j`. A node partition of one graph is therefore fine at edge level.
* **Node level.** Removing node :math:`v` of part :math:`j` removes its features, its label and
  its edges. The edges inside part :math:`j` change part :math:`j` only; its edges to other parts
  are cut edges, in no subgraph; so again only part :math:`j` changes, *provided* nothing of
  :math:`v` (its degree in the full graph, a normalisation over the full graph, a copy of it as a
  halo node) reaches another part. A partition into subgraphs can be node-disjoint and still
  edge-adjacent: that is fine for both units as long as the releases read the induced subgraphs.
  Each part's own size changes under node neighbours: the layers' declared public bounds
  (``num_nodes``, ``max_degree``) must hold for the part.
* **Local DP** (unit ``"local"``) is already accounted per node: a node's spend counts only
  the randomisations that touched it, which *is* parallel composition over nodes. Local events
  made inside a part are charged to that per-node ledger as usual (with the node ids the
  release names), never to the group.

**What the accountant checks.** A part announced with its members (``part(i, batch)``,
``part(i, nodes=..., edges=..., graphs=...)``, see :meth:`ParallelScope.__call__`) is checked
before each first release on a unit: no part of the group already charged on that unit may hold
any of its members, else :class:`OverlappingPartsError` names the overlap (how many, with which
part) before anything is charged or drawn. Two parts are compared on the best identities both
announced: at edge level their undirected edges (``n_id[edge_index]`` pairs, or ``edges=``), else
their nodes (node-disjoint parts hold disjoint edges), else their graphs; at node level their
nodes, else their graphs (edge ids alone cannot show that node-level parts are disjoint); at graph
level their graphs only (node-disjoint parts may hold pieces of one graph). A batch
of a neighbour sampler (it carries ``input_id``, ``num_sampled_nodes`` or ``num_sampled_edges``)
is refused as a part outright. The ids live in memory while the group is open (about 12 bytes per
id and part), are dropped when it closes, and are never pickled, copied or saved: a copy or a
restored ledger checks only the parts announced to it, and a
:class:`~pyg_private.accounting.PersistentPrivacyAccountant` only those announced in its process.
A part charged without identities (``part(i)``, ``register(partition=...)`` for a part never
announced) works as before, and :class:`UncheckedPartitionWarning` says, once per group, that the
group's figure rests on the caller's word.

**What the check cannot see.** Only the members it is shown, of the graph at hand. It cannot see
*how* the parts were made: a partition by degree, by METIS, or by any rule that reads the private
graph passes it whenever its parts are disjoint, and is still not parallel composition (above).
It cannot see what a release reads: a layer given the full ``edge_index`` inside ``part(i,
nodes=...)`` reads every part. Whole graphs without ids are named by a keyed digest of their
content: two identical graphs of a dataset look like one graph twice (announce dataset indices,
``graphs=``, instead), and a ``Batch`` of *subgraphs of one graph* must carry ``n_id``, or its
parts are compared as whole graphs.

Which part is current is kept per thread / task (a :class:`contextvars.ContextVar`): a
release in a thread started inside ``part(i)`` is **not** in the part (it is charged
sequentially, the safe side) unless that thread enters ``part(i)`` itself or passes
``partition=(name, i)`` to :meth:`~pyg_private.accounting.PrivacyAccountant.register`.
"""
from __future__ import annotations

import hashlib
import itertools
import math
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Hashable, Iterator, Mapping, Sequence

import numpy as np

from .composition import Composition
from .events import PrivacyEvent
from .units import Unit

if TYPE_CHECKING:
    from .accountant import PrivacyAccountant

__all__ = ["ParallelGroup", "ParallelScope", "MAX_SELECTIONS", "unit_candidates", "check_part_key",
           "check_group_name", "PartMembers", "part_members", "GroupMembership", "OverlappingPartsError",
           "UncheckedPartitionWarning", "SAMPLER_ATTRIBUTES"]

#: Combinations of worst parts composed exactly; beyond, groups are bounded by one dominating release.
MAX_SELECTIONS = 64
#: Distinct parts of one group checked pairwise for domination (quadratic); beyond, only duplicates merge.
_MAX_PRUNE = 256

PartKey = Any  # int or str (JSON-serialisable, so the ledger can be saved)

#: The parts entered in the current thread / task: ((accountant, group name, part key, members), ...).
_ACTIVE: ContextVar[tuple[tuple[Any, str, PartKey, "PartMembers | None"], ...]] = ContextVar(
    "pyg_private_parallel_part", default=())


def check_group_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"a parallel group's `name` must be a non-empty string; got {name!r}")
    return name


def check_part_key(part: Any) -> PartKey:
    """Parts are named by an ``int`` or a ``str`` (they are saved in the ledger's state_dict)."""
    if isinstance(part, bool) or not isinstance(part, (int, str, np.integer)):
        raise TypeError(f"a part must be named by an int or a str (e.g. the batch index); got {part!r}")
    return int(part) if isinstance(part, np.integer) else part


def _cost_key(event: PrivacyEvent) -> Hashable:
    """What composition reads from an event: equal keys compose identically."""
    return (event.mu, event.orders, event.rdp, event.approx, event.profile, event.pld)


class _Part:
    """One unit's events in one part: their composition and the multiset of their costs."""

    __slots__ = ("composition", "costs")

    def __init__(self, composition: Composition | None = None, costs: Mapping[Hashable, int] | None = None) -> None:
        self.composition = composition if composition is not None else Composition()
        self.costs: dict[Hashable, int] = dict(costs or {})

    def add(self, event: PrivacyEvent) -> "_Part":
        costs = dict(self.costs)
        key = _cost_key(event)
        costs[key] = costs.get(key, 0) + 1
        return _Part(self.composition.add(event), costs)

    def signature(self) -> frozenset:
        return frozenset(self.costs.items())

    def within(self, other: "_Part") -> bool:
        """This part's events are a sub-multiset of ``other``'s (so ``other`` dominates it)."""
        return all(other.costs.get(k, 0) >= n for k, n in self.costs.items())


class ParallelGroup:
    """Immutable state of one parallel group: per part, per unit, the composed events.

    Args:
        name (str): the group's name (unique in its accountant).
        closed (bool): no more releases can join the group.
        parts: ``{part: {unit: _Part}}`` (internal).
    """

    __slots__ = ("name", "closed", "parts", "num_events", "_maximal")

    def __init__(self, name: str, closed: bool = False, parts: Mapping[PartKey, Mapping[Unit, _Part]] | None = None,
                 num_events: int = 0) -> None:
        self.name = name
        self.closed = closed
        self.parts: dict[PartKey, dict[Unit, _Part]] = {k: dict(v) for k, v in (parts or {}).items()}
        self.num_events = num_events
        self._maximal: dict[Unit, tuple[Composition, ...]] = {}

    def add(self, part: PartKey, event: PrivacyEvent) -> "ParallelGroup":
        """The group with ``event`` charged to ``part`` (``self`` is unchanged)."""
        parts = dict(self.parts)
        units = dict(parts.get(part, {}))
        units[event.unit] = units.get(event.unit, _Part()).add(event)
        parts[part] = units
        return ParallelGroup(self.name, self.closed, parts, self.num_events + 1)

    def close(self) -> "ParallelGroup":
        return ParallelGroup(self.name, True, self.parts, self.num_events)

    def units(self) -> set[Unit]:
        return {u for units in self.parts.values() for u in units}

    def part_compositions(self, unit: Unit) -> dict[PartKey, Composition]:
        return {k: v[unit].composition for k, v in self.parts.items() if unit in v}

    def num_events_of(self, unit: Unit) -> int:
        return sum(v[unit].composition.num_events for v in self.parts.values() if unit in v)

    def maximal(self, unit: Unit) -> tuple[Composition, ...]:
        """The compositions of the parts that no other part dominates (duplicates merged)."""
        if unit not in self._maximal:
            distinct: dict[frozenset, _Part] = {}
            for units in self.parts.values():
                if unit in units:
                    distinct.setdefault(units[unit].signature(), units[unit])
            cands = list(distinct.values())
            if 1 < len(cands) <= _MAX_PRUNE:
                # a part whose events all appear in a larger part is dominated (strictly smaller multiset)
                cands = [p for p in cands if not any(q is not p and p.within(q) for q in cands)]
            self._maximal[unit] = tuple(p.composition for p in cands)
        return self._maximal[unit]

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"ParallelGroup({self.name!r}, parts={len(self.parts)}, events={self.num_events}, {state})"


def _dominating(parts: Sequence[Composition], unit: Unit, name: str) -> Composition:
    """One composition whose privacy loss bounds every part's (see the module docstring)."""
    if all(p.curve is None and not p.profiles for p in parts):  # all Gaussian: the largest mu dominates
        return max(parts, key=lambda p: p.mu_squared)
    if not any(p.profiles for p in parts):
        grid = None
        for p in parts:
            if p.curve is not None:
                grid = set(p.curve[0]) if grid is None else grid & set(p.curve[0])
        orders = np.asarray(sorted(grid or ()), dtype=np.float64)
        if orders.size:
            worst = np.zeros_like(orders)
            for p in parts:
                if p.curve is None:
                    with np.errstate(invalid="ignore"):
                        values = np.where(np.isinf(orders), math.inf if p.mu_squared > 0 else 0.0,
                                          orders * p.mu_squared / 2.0)
                else:
                    a, v = p.rdp_curve()
                    values = v[np.isin(a, orders)]
                worst = np.maximum(worst, values)
            event = PrivacyEvent(name=f"parallel group {name!r} (worst part's RDP curve)", unit=unit,
                                 mechanism="parallel_max", orders=tuple(orders.tolist()), rdp=tuple(worst.tolist()))
            return Composition().add(event)
    out = Composition()  # approximate-DP parts: sequential composition, a valid (loose) bound
    for p in parts:
        out = out.merge(p)
    return out


def unit_candidates(seq: Composition, groups: Sequence[ParallelGroup],
                    unit: Unit) -> tuple[tuple[Composition, ...], bool]:
    """The compositions whose maximum is the unit's cost, and whether the figure is exact
    (``False`` when a group had to be bounded by a dominating release)."""
    base = seq
    multi: list[tuple[str, tuple[Composition, ...]]] = []
    for group in groups:
        parts = group.maximal(unit)
        if len(parts) == 1:
            base = base.merge(parts[0])
        elif parts:
            multi.append((group.name, parts))
    exact = True
    while math.prod(len(p) for _, p in multi) > MAX_SELECTIONS:
        multi.sort(key=lambda item: len(item[1]))
        name, parts = multi.pop()
        base = base.merge(_dominating(parts, unit, name))
        exact = False
    candidates = [base]
    for choice in itertools.product(*(p for _, p in multi)):
        if choice:
            comp = base
            for part in choice:
                comp = comp.merge(part)
            candidates.append(comp)
    if len(candidates) > 1:
        candidates = candidates[1:]  # the base alone is dominated by every selection
    return tuple(candidates), exact


# --------------------------------------------------------------------------- membership check
class OverlappingPartsError(ValueError):
    """A part of a parallel group holds nodes, edges or graphs that an earlier part of the group
    holds too. Raised before anything is charged (and before any noise is drawn)."""


class UncheckedPartitionWarning(UserWarning):
    """A part of a parallel group was charged without identities that name its members, so the
    accountant could not check that it is disjoint from the group's other parts."""


#: Attributes that only PyG's neighbour samplers put on a batch (``NeighborLoader``,
#: ``LinkNeighborLoader``, ``HGTLoader``): such a batch was chosen by following the private edges.
SAMPLER_ATTRIBUTES = ("input_id", "num_sampled_nodes", "num_sampled_edges")

#: Which announced identities decide, for a pair of parts, that they are disjoint, by unit, best first:
#: at edge level the undirected edges themselves, else nodes (node-disjoint parts hold disjoint edges),
#: else whole graphs; at node level nodes, else whole graphs (edges alone cannot tell: a node's edges may
#: lie in several parts); at graph level whole graphs only (node-disjoint parts may still split one graph).
_KINDS = {Unit.EDGE: ("edges", "edge ids", "nodes", "graphs", "graph contents"),
          Unit.NODE: ("nodes", "graphs", "graph contents"),
          Unit.GRAPH: ("graphs", "graph contents")}
_NOUN = {"edges": "edges", "edge ids": "edge ids", "nodes": "nodes", "graphs": "graphs (dataset indices)",
         "graph contents": "graphs identical to graphs"}
_PAIR_BITS = 31  # an undirected edge {u, v} is the key min(u, v) * 2**31 + max(u, v)
_TOKENS = itertools.count(1)


class PartMembers:
    """What identifies the members of one part, as announced with ``part(i, ...)``: per kind
    (``"nodes"``, ``"edges"``, ``"edge ids"``, ``"graphs"``, ``"graph contents"``) the sorted unique
    ids as an ``int64`` array. Kept in memory only, never saved (the ids of a batch can reveal edges)."""

    __slots__ = ("ids", "token")

    def __init__(self, ids: Mapping[str, np.ndarray]) -> None:
        self.ids = {k: v for k, v in ids.items() if v is not None}
        self.token = next(_TOKENS)  # one announcement: checked and recorded once, however many releases

    def __repr__(self) -> str:
        return "PartMembers(" + ", ".join(f"{k}={v.size}" for k, v in self.ids.items()) + ")"


def _as_ids(value: Any, argument: str) -> np.ndarray:
    """A 1-D array of non-negative int64 ids from a tensor, array or sequence (a boolean mask: its
    ``True`` positions)."""
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        if arr.ndim != 1:
            raise ValueError(f"`{argument}` as a boolean mask must be 1-D; got shape {arr.shape}")
        arr = np.flatnonzero(arr)
    if arr.size == 0:
        arr = arr.astype(np.int64).reshape(-1)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"`{argument}` must hold integer ids (or be a boolean mask); got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"`{argument}` must be a 1-D list of ids; got shape {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise ValueError(f"`{argument}` holds negative ids (smallest {int(arr.min())}); ids name members, from 0")
    return np.unique(arr)


def _edge_keys(pairs: Any, argument: str) -> np.ndarray:
    """Keys of undirected edges from a ``[2, E]`` array of endpoint ids (both directions: one key)."""
    import torch

    if isinstance(pairs, torch.Tensor):
        pairs = pairs.detach().cpu().numpy()
    arr = np.asarray(pairs)
    if arr.ndim != 2 or arr.shape[0] != 2 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"`{argument}` must be a [2, E] integer array of global endpoint ids (an edge_index "
                         f"in the full graph's numbering); got shape {arr.shape} and dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= 2 ** _PAIR_BITS):
        raise ValueError(f"`{argument}` holds node ids outside [0, 2**{_PAIR_BITS}); got "
                         f"[{int(arr.min())}, {int(arr.max())}]")
    lo, hi = np.minimum(arr[0], arr[1]), np.maximum(arr[0], arr[1])
    return np.unique(lo * (2 ** _PAIR_BITS) + hi)


def _graph_digest(data: Any, key: bytes) -> int:
    """A keyed digest of one graph's content (every attribute), as an int64."""
    import torch

    h = hashlib.blake2b(key=key, digest_size=8)
    for name, value in sorted(data.to_dict().items()):
        h.update(name.encode() + b"\0")
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(value).encode())
    return int(np.frombuffer(h.digest(), dtype="<i8")[0])


def _graph_keys(graphs: Any, key: bytes) -> np.ndarray:
    from torch_geometric.data import Batch, Data

    if isinstance(graphs, Batch):
        items = [graphs.get_example(i) for i in range(graphs.num_graphs)]
    elif isinstance(graphs, Data):
        items = [graphs]
    else:
        items = list(graphs)
        if not all(isinstance(g, Data) for g in items):
            raise TypeError("`graphs` must be dataset indices, a Batch, a Data or a list of Data")
    return np.unique(np.asarray([_graph_digest(g, key) for g in items], dtype=np.int64))


def _is_graph_objects(graphs: Any) -> bool:
    from torch_geometric.data import Data

    return isinstance(graphs, Data) or (isinstance(graphs, (list, tuple)) and bool(graphs)
                                        and all(isinstance(g, Data) for g in graphs))


def part_members(data: Any = None, *, nodes: Any = None, edges: Any = None, graphs: Any = None,
                 key: bytes | None = None, where: str = "this part") -> PartMembers | None:
    """The identities a part is announced with (``None`` when none are given); see
    :meth:`ParallelScope.__call__`. ``key`` keys the digests of whole graphs."""
    if data is None and nodes is None and edges is None and graphs is None:
        return None
    ids: dict[str, np.ndarray] = {}
    if data is not None:
        from torch_geometric.data import Batch, Data, HeteroData

        if isinstance(data, HeteroData):
            raise TypeError(f"{where}: a HeteroData batch cannot be checked (its ids are per node type); announce "
                            "the part with nodes= (global ids of one homogeneous numbering) or without identities")
        if not isinstance(data, Data):
            raise TypeError(f"{where}: the part's data must be a torch_geometric Data or Batch; got "
                            f"{type(data).__name__} (explicit ids go to nodes=, edges=, graphs=)")
        sampled = [a for a in SAMPLER_ATTRIBUTES if a in data]
        if sampled:
            raise ValueError(
                f"{where} is a neighbour-sampled batch (it carries {', '.join(sampled)}): its nodes and edges were "
                "chosen by following the private edges, so one edge or node added or removed changes several "
                "batches whether or not they overlap now, and it cannot be a part of a parallel group. Release once "
                "on the whole graph (and mini-batch only what is computed from the release), or partition the nodes "
                "by a rule that does not read the graph (node-id ranges, a public attribute, a random split, e.g. "
                "RandomNodeLoader on a graph with data.n_id = torch.arange(data.num_nodes)) and release on each "
                "part's induced subgraph. Nothing was charged")
        if "n_id" in data:
            n_id = data.n_id
            ids["nodes"] = _as_ids(n_id, "data.n_id")
            if getattr(data, "edge_index", None) is not None:
                import torch

                ei = data.edge_index
                if not isinstance(ei, torch.Tensor):
                    raise TypeError(f"{where}: data.edge_index must be an edge_index tensor to name the part's "
                                    f"edges; got {type(ei).__name__} (announce nodes= instead)")
                ids["edges"] = _edge_keys(n_id.to(ei.device)[ei] if ei.numel() else ei, "n_id[data.edge_index]")
        elif isinstance(data, Batch):
            graphs = data if graphs is None else graphs
        else:
            raise TypeError(
                f"{where}: this Data carries no global ids (n_id), so its node and edge numbers are local and name "
                "nothing across parts. For a subgraph of one graph, set data.n_id to its nodes' global ids (e.g. "
                "data.n_id = torch.arange(data.num_nodes) on the full graph before data.subgraph(...) or "
                "RandomNodeLoader), or pass nodes=...; for a whole graph of a graph dataset, pass graphs=data")
    if nodes is not None:
        extra = _as_ids(nodes, "nodes")
        ids["nodes"] = np.union1d(ids["nodes"], extra) if "nodes" in ids else extra
    if edges is not None:
        import torch

        shape = tuple(edges.shape) if isinstance(edges, (torch.Tensor, np.ndarray)) else np.shape(edges)
        if len(shape) == 2:
            extra = _edge_keys(edges, "edges")
            ids["edges"] = np.union1d(ids["edges"], extra) if "edges" in ids else extra
        else:
            ids["edge ids"] = _as_ids(edges, "edges")
    if graphs is not None:
        if isinstance(graphs, Mapping):
            raise TypeError("`graphs` must be dataset indices, a Batch, a Data or a list of Data")
        from torch_geometric.data import Batch

        if isinstance(graphs, Batch) or _is_graph_objects(graphs):
            if key is None:
                raise ValueError("a key is needed to fingerprint whole graphs")
            ids["graph contents"] = _graph_keys(graphs, key)
        else:
            ids["graphs"] = _as_ids(graphs, "graphs")
    return PartMembers(ids)


class _IdIndex:
    """Sorted ``(id, part)`` pairs of one unit and one kind of identity: which parts hold an id.
    An id may be held by several parts where the parts were found disjoint by a better kind (two
    node-sharing parts with disjoint edges, at edge level). Memory: 12 bytes per pair."""

    __slots__ = ("keys", "owners")

    def __init__(self) -> None:
        self.keys = np.empty(0, dtype=np.int64)
        self.owners = np.empty(0, dtype=np.int32)

    def _hits(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For every stored pair whose id is in ``ids``: the position of that id in ``ids`` and the owner."""
        left = np.searchsorted(self.keys, ids, side="left")
        right = np.searchsorted(self.keys, ids, side="right")
        n = right - left
        total = int(n.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        which = np.repeat(np.arange(ids.size), n)
        pos = np.repeat(left, n) + (np.arange(total) - np.repeat(np.cumsum(n) - n, n))
        return which, self.owners[pos]

    def overlaps(self, ids: np.ndarray, own: int) -> dict[int, int]:
        """``{part: number of ids of ``ids`` it holds}`` over the parts other than ``own``."""
        _, owners = self._hits(ids)
        owners = owners[owners != own]
        found, counts = np.unique(owners, return_counts=True)
        return dict(zip(found.tolist(), counts.tolist()))

    def add(self, ids: np.ndarray, owner: int) -> None:
        which, owners = self._hits(ids)
        held = np.zeros(ids.size, dtype=bool)
        held[which[owners == owner]] = True
        new = ids[~held]
        if new.size:
            at = np.searchsorted(self.keys, new, side="right")
            self.keys = np.insert(self.keys, at, new)
            self.owners = np.insert(self.owners, at, np.int32(owner))


class GroupMembership:
    """The members announced to one open parallel group, per unit: which parts hold which ids.

    In memory only (never pickled nor saved: the ids of a batch can reveal its edges), dropped when
    the group closes. :meth:`check` runs before a release is charged to a part, :meth:`record`
    when it is charged.
    """

    def __init__(self) -> None:
        self._index_of: dict[PartKey, int] = {}
        self._keys: list[PartKey] = []
        self._ids: dict[tuple[Unit, str], _IdIndex] = {}
        self._kinds: dict[Unit, dict[int, set[str]]] = {}  # parts charged on a unit -> kinds they announced
        self._blind: dict[Unit, set[int]] = {}  # parts with a release on the unit made without identities
        self._recorded: set[tuple[int, Unit]] = set()
        self.warned = False

    def _index(self, part: PartKey) -> int:
        if part not in self._index_of:
            self._index_of[part] = len(self._keys)
            self._keys.append(part)
        return self._index_of[part]

    def check(self, group: str, part: PartKey, unit: Unit, members: PartMembers | None) -> tuple[Any, str | None]:
        """Raise :class:`OverlappingPartsError` when ``members`` overlap a part already charged on
        ``unit``; else return what :meth:`record` will record (``None``: nothing new) and a note when
        the part could not be checked against every other part."""
        if unit not in _KINDS:
            return None, None
        order = _KINDS[unit]
        p = self._index_of.get(part, -1)
        charged = self._kinds.get(unit, {})
        if members is not None and (members.token, unit) in self._recorded:
            return None, None  # this announcement was checked and recorded already
        mine = [k for k in order if members is not None and k in members.ids]
        where = f"part {part!r} of parallel group {group!r}"
        if not mine:
            if members is None and p in charged:
                return None, None  # another release of a part announced before (e.g. partition=(name, i))
            if members is None:
                note = (f"{where} was announced without identities, so the accountant could not check that it is "
                        "disjoint from the group's other parts: the group's figure (the maximum over its parts) "
                        "rests on your word.")
            else:
                note = (f"{where} was announced with {', '.join(members.ids)} only, which cannot show that "
                        f"{unit.value}-level parts are disjoint (a node's edges, or a graph's nodes, can lie in "
                        "several parts): the check could not run.")
            return (part, unit, members, ()), note + _ANNOUNCE
        overlaps = {k: self._ids[(unit, k)].overlaps(members.ids[k], p) if (unit, k) in self._ids else {}
                    for k in mine}
        bad: list[tuple[int, str, int]] = []
        unchecked: list[int] = []
        blind = self._blind.get(unit, set())
        for q, kinds in charged.items():
            if q == p:
                continue
            common = next((k for k in mine if k in kinds), None)
            if common is None or q in blind:
                unchecked.append(q)
            if common is not None and overlaps[common].get(q, 0):
                bad.append((q, common, overlaps[common][q]))
        if bad:
            q, kind, count = max(bad, key=lambda b: b[2])
            others = f" (and overlaps {len(bad) - 1} other part(s))" if len(bad) > 1 else ""
            fix = (" If the dataset holds duplicate graphs, announce dataset indices instead: "
                   "part(i, graphs=indices)." if kind == "graph contents" else "")
            raise OverlappingPartsError(
                f"{where} holds {count} {_NOUN[kind]} of part {self._keys[q]!r}{others}: releases on overlapping "
                f"parts do not compose in parallel (at {unit.value} level, a neighbouring dataset changes both), so "
                "this release was refused before anything was charged or drawn. Overlapping batches (a "
                "NeighborLoader's sampled neighbourhoods and halo nodes, one batch twice) compose sequentially: "
                "release outside the parallel group, or partition the data by a rule that does not read it "
                "(node-id ranges, a public attribute, a random split of the nodes; the graphs of a dataset) and "
                f"release on each part's own subgraph.{fix}")
        note = None
        if unchecked or p in blind:
            names = ", ".join(repr(self._keys[q]) for q in unchecked[:5]) + (", ..." if len(unchecked) > 5 else "")
            note = (f"{where} could not be checked against part(s) {names or repr(part)} of the group, announced "
                    "without identities or with identities of another kind: the group's figure assumes they are "
                    "disjoint." + _ANNOUNCE)
        return (part, unit, members, tuple(mine)), note

    def record(self, plan: Any) -> None:
        """Record a checked announcement (the release was charged)."""
        part, unit, members, kinds = plan
        p = self._index(part)
        self._kinds.setdefault(unit, {}).setdefault(p, set()).update(kinds)
        if not kinds:
            self._blind.setdefault(unit, set()).add(p)
            return
        for k in kinds:
            self._ids.setdefault((unit, k), _IdIndex()).add(members.ids[k], p)
        self._recorded.add((members.token, unit))


_ANNOUNCE = (" Announce each part's members: `with part(i, batch):` for a batch that carries its global node ids "
             "(n_id), `part(i, nodes=...)` / `part(i, edges=...)` with global ids, or `part(i, batch)` / "
             "`part(i, graphs=...)` for the graphs of a graph dataset.")


class _PartContext:
    """``with part(i):`` -- releases inside are charged to part ``i`` of the group."""

    def __init__(self, scope: "ParallelScope", part: PartKey, members: PartMembers | None = None) -> None:
        self._scope, self._part, self._members = scope, part, members
        self._token = None

    def __enter__(self) -> PartKey:
        acct, name = self._scope.accountant, self._scope.name
        active = _ACTIVE.get()
        for owner, group, part, _ in active:
            if owner is acct:
                raise ValueError(
                    f"part {self._part!r} of parallel group {name!r} entered inside part {part!r} of group {group!r}: "
                    "a release belongs to one part. Leave the current part first (nested partitions are not supported)"
                )
        acct._check_group_open(name)
        self._token = _ACTIVE.set(active + ((acct, name, self._part, self._members),))
        return self._part

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self._token)


class ParallelScope:
    """The handle of ``with accountant.parallel(name) as part:``; ``part(i)`` enters part ``i``.

    Returned by :meth:`PrivacyAccountant.parallel`; see :mod:`pyg_private.accounting.parallel`
    for when a partition qualifies.
    """

    def __init__(self, accountant: "PrivacyAccountant", name: str | None) -> None:
        self.accountant = accountant
        #: The group's name (chosen when the block is entered if none was given).
        self.name = name
        self._entered = False

    def __call__(self, part: PartKey, data: Any = None, *, nodes: Any = None, edges: Any = None,
                 graphs: Any = None) -> _PartContext:
        """A context in which every release is charged to part ``part`` (an ``int`` or ``str``),
        announced with what identifies its members, so that the accountant can check, before
        anything is charged, that no other part of the group holds them.

        Args:
            part (int or str): the part's name (e.g. the batch index).
            data (Data or Batch, optional): the part's data. A ``Data`` with ``n_id`` (the global
                ids of its nodes, as ``data.subgraph`` keeps them when the full graph carries
                ``n_id = torch.arange(num_nodes)``) names its nodes, and its edges as the pairs
                ``n_id[edge_index]`` (undirected: both directions are one edge; ``e_id`` is not
                needed). A ``Batch`` of a graph dataset (from ``DataLoader``) without ``n_id`` names
                its graphs by their content. A neighbour-sampled batch (``input_id``,
                ``num_sampled_nodes``) is refused: it is never a fixed part.
            nodes (Tensor, optional): global ids of the part's nodes (or a boolean mask over all nodes).
            edges (Tensor, optional): the part's edges as a ``[2, E]`` tensor of global endpoint ids,
                or 1-D ids of **undirected** edges (one id per edge, whatever its direction).
            graphs (optional): the part's whole graphs of a graph dataset: dataset indices, or a
                ``Batch`` / ``Data`` / list of ``Data`` (named by a keyed digest of their content,
                kept in memory only).

        Without identities the part works as before, but its disjointness is your claim alone
        (:class:`UncheckedPartitionWarning`, once per group).
        """
        if not self._entered:
            raise ValueError("enter the group first: `with accountant.parallel(name) as part: with part(i): ...`")
        key = check_part_key(part)
        where = f"part {key!r} of parallel group {self.name!r}"
        secret = self.accountant._membership_secret() if (data is not None or graphs is not None) else None
        members = part_members(data, nodes=nodes, edges=edges, graphs=graphs, key=secret, where=where)
        return _PartContext(self, key, members)

    def __enter__(self) -> "ParallelScope":
        if self._entered:
            raise ValueError(f"parallel group {self.name!r} was entered already; open a new group per partition")
        for owner, group, part, _ in _ACTIVE.get():
            if owner is self.accountant:
                raise ValueError(f"parallel group {self.name!r} opened inside part {part!r} of group {group!r}: nested "
                                 "parallel groups are not supported; use one partition into the finest disjoint parts")
        self.name = self.accountant._open_group(self.name)
        self._entered = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.accountant._close_group(self.name)

    def parts(self) -> Iterator[PartKey]:
        """The parts charged so far."""
        return iter(self.accountant._group_parts(self.name) if self.name is not None else [])

    def __repr__(self) -> str:
        return f"ParallelScope({self.name!r})"


def active_part(accountant: Any) -> tuple[str, PartKey] | None:
    """The innermost part of ``accountant`` entered in this thread / task, or ``None``."""
    for owner, group, part, _ in reversed(_ACTIVE.get()):
        if owner is accountant:
            return group, part
    return None


def active_members(accountant: Any, target: tuple[str, PartKey]) -> PartMembers | None:
    """The members announced for part ``target`` when this thread / task is inside it, else ``None``."""
    for owner, group, part, members in reversed(_ACTIVE.get()):
        if owner is accountant and (group, part) == tuple(target):
            return members
    return None
