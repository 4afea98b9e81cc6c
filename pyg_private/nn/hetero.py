r"""Releases on the relations of a heterogeneous graph, and how they compose.

**The unit.** At edge level a heterogeneous graph's neighbouring datasets differ in **one edge of
one relation** (edge type): the node sets, their features and every other relation are the same.
A relation derived from another one holds the same edge again: ``T.ToUndirected()`` adds, for an
edge type ``(a, r, b)`` between two node types, the reverse type ``(b, rev_r, a)`` with every edge
:math:`(s, d)` as :math:`(d, s)`, so one edge of the data moves both relations. Relations built from
paths of others (``T.AddMetaPaths``: one edge of the source relations changes many entries) are
outside this analysis: give a release only relations that are data in their own right or
reverses of one.

**The rule.** Two relations can hold the same edge only when they join the same **unordered pair
of node types** (a relation and its reverse always do). So the relations of a heterogeneous graph
fall into parts, one per unordered node-type pair :math:`\{a, b\}` (:func:`relation_parts`), whose
edge sets are disjoint under the unit whatever the relations' names: adding or removing one edge of
part :math:`\{a, b\}` changes no relation of any other part. Within one forward of a model, every
edge-level release that reads one relation (its edges, and public or already released inputs)
reads one part, so the releases compose

* **sequentially within a part** (a relation and its reverse, two layers on the same relation, two
  relations between the same types: one edge may move all of them; for Gaussian releases this is
  exactly the joint sensitivity :math:`\sqrt{\sum_r \Delta_r^2}` of the part), and
* **in parallel across parts** (McSherry, "Privacy Integrated Queries", SIGMOD 2009, Thm. 2, with
  adaptivity: a release of another part sees the same input under both neighbours once the earlier
  releases are fixed), so one forward costs its **worst part**.

Releases at **node level** never compose in parallel across relations: a node of type :math:`a`
removed with its edges changes every relation that touches :math:`a`. They stay sequential.

:func:`compose_relations` applies the rule to a model built with ``HeteroConv`` or ``to_hetero``:
each forward of the model opens one parallel group of the accountant
(:meth:`~pyg_private.accounting.PrivacyAccountant.parallel`), every edge-level release on a
relation is charged to its pair's part (each release still registers exactly one event, before any
noise), and the group closes when the forward returns. A model left alone composes every release
sequentially: always valid, and up to :math:`\sqrt{\#\text{parts}}` times looser in :math:`\mu`
for Gaussian releases.
"""
from __future__ import annotations

import hashlib
import json
from contextvars import ContextVar
from typing import Any, Iterable, Optional, Sequence

import torch

__all__ = ["relation_part", "relation_parts", "compose_relations", "relation_of"]

EdgeType = tuple[str, str, str]

#: Per thread / task: the forward of a composed model in progress (its open groups by accountant),
#: and the part contexts the relation layers entered (a stack).
_FORWARD: ContextVar[Optional[dict[int, Any]]] = ContextVar("pyg_private_relation_forward", default=None)
_PARTS: ContextVar[tuple[Any, ...]] = ContextVar("pyg_private_relation_parts", default=())
_OUTER: ContextVar[tuple[Any, ...]] = ContextVar("pyg_private_relation_outer", default=())


def _check_edge_type(edge_type: Any) -> EdgeType:
    if (not isinstance(edge_type, tuple) or len(edge_type) != 3
            or not all(isinstance(t, str) and t for t in edge_type)):
        raise TypeError(f"an edge type is a (source type, relation, destination type) tuple of strings; got "
                        f"{edge_type!r}")
    return edge_type


def relation_part(edge_type: Sequence[str]) -> str:
    """The part of an edge type ``(src, rel, dst)``: its unordered node-type pair, as a string
    (``'["item", "user"]'``; JSON, so that no type name can make two pairs collide). A relation and its
    reverse have the same part."""
    src, _, dst = _check_edge_type(tuple(edge_type))
    return json.dumps(sorted((src, dst)))


def relation_parts(edge_types: Iterable[Sequence[str]]) -> dict[str, list[EdgeType]]:
    """The edge types grouped by :func:`relation_part`, in first-seen order (``data.metadata()[1]``
    or ``data.edge_types``): the parts whose releases compose in parallel at edge level."""
    parts: dict[str, list[EdgeType]] = {}
    for et in edge_types:
        parts.setdefault(relation_part(et), []).append(tuple(et))  # type: ignore[arg-type]
    return parts


def _part_id(part: str) -> int:
    """A non-negative int64 naming a part in the accountant's membership check (``graphs=``)."""
    return int.from_bytes(hashlib.blake2b(part.encode(), digest_size=7).digest(), "little")


def _is_release(module: torch.nn.Module) -> bool:
    from ._release_cache import PersistentRelease
    from .perturbed_appr_conv import PerturbedAPPRConv

    return isinstance(module, (PersistentRelease, PerturbedAPPRConv))


def relation_of(module: torch.nn.Module) -> Optional[EdgeType]:
    """The edge type :func:`compose_relations` assigned to a release layer (``None``: none)."""
    hook = next((h for h in module._forward_pre_hooks.values() if isinstance(h, _EnterPart)), None)
    return None if hook is None else hook.edge_type


class _EnterPart:
    """Forward pre-hook of a release layer on one relation: inside a composed forward, enter the
    part of the relation's node-type pair (edge-level releases only). Picklable; holds only public
    names."""

    def __init__(self, edge_type: EdgeType) -> None:
        self.edge_type = edge_type
        self.part = relation_part(edge_type)

    def __call__(self, module: torch.nn.Module, args: Any) -> None:
        groups = _FORWARD.get()
        acct = getattr(module, "accountant", None)
        ctx = None
        if groups is not None and acct is not None and _unit_of(module) == "edge":
            from ..accounting.parallel import active_part

            scope = groups.get(id(acct))
            if scope is None and active_part(acct) is None:  # inside a caller's own part: stay there
                scope = groups[id(acct)] = _open_group(acct)
            if scope is not None:
                ctx = scope(self.part, graphs=[_part_id(self.part)])  # disjoint by construction (checked)
                ctx.__enter__()
        _PARTS.set(_PARTS.get() + (ctx,))


class _LeavePart:
    """Forward hook (``always_call``) paired with :class:`_EnterPart`."""

    def __call__(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        stack = _PARTS.get()
        if not stack:
            return
        *rest, ctx = stack
        _PARTS.set(tuple(rest))
        if ctx is not None:
            ctx.__exit__(None, None, None)


class _OpenForward:
    """Forward pre-hook of the composed model: one forward, one parallel group per accountant
    (opened when its first relation release asks for it). Holds nothing."""

    def __call__(self, module: torch.nn.Module, args: Any) -> None:
        current = _FORWARD.get()
        _OUTER.set(_OUTER.get() + (current,))
        # an inner composed model inside an outer one's forward joins the outer forward's groups
        _FORWARD.set({} if current is None else current)


class _CloseForward:
    """Forward hook (``always_call``) paired with :class:`_OpenForward`: the groups close."""

    def __call__(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        outer = _OUTER.get()
        if not outer:
            return
        previous = outer[-1]
        _OUTER.set(outer[:-1])
        groups = _FORWARD.get()
        _FORWARD.set(previous)
        if previous is None and groups:
            for scope in groups.values():
                scope.__exit__(None, None, None)


def _unit_of(module: torch.nn.Module) -> str:
    unit = getattr(module, "_release_unit", "edge")
    return unit.value if hasattr(unit, "value") else str(unit)


def _open_group(acct: Any) -> Any:
    """Enter a new parallel group ``relations-<k>`` of ``acct``, ``k`` the first free index."""
    taken = set(acct.parallel_groups)
    k = 0
    for _ in range(100_000):
        while f"relations-{k}" in taken:
            k += 1
        scope = acct.parallel(f"relations-{k}")
        try:
            scope.__enter__()
        except ValueError as error:  # taken meanwhile (another thread): the next name
            if "cannot be reopened" not in str(error):
                raise
            taken.add(f"relations-{k}")
            continue
        return scope
    raise RuntimeError("no free parallel group name")  # pragma: no cover


def _edge_type_of_key(key: Any, names: dict[str, EdgeType]) -> Optional[EdgeType]:
    if isinstance(key, tuple) and len(key) == 3:
        return key  # type: ignore[return-value]
    if not isinstance(key, str):
        return None
    if key in names:
        return names[key]
    return None


def _key_names(metadata: Any) -> dict[str, EdgeType]:
    from torch_geometric.nn.to_hetero_transformer import key2str

    if metadata is None:
        return {}
    edge_types = metadata[1] if isinstance(metadata, tuple) and len(metadata) == 2 and isinstance(
        metadata[1], (list, tuple)) and metadata[1] and isinstance(metadata[1][0], tuple) else metadata
    return {key2str(_check_edge_type(tuple(et))): tuple(et) for et in edge_types}


def compose_relations(model: torch.nn.Module, metadata: Any = None) -> torch.nn.Module:
    r"""Charge the releases of one forward of a heterogeneous ``model`` by relation parts: the
    edge-level releases on relations of one unordered node-type pair compose sequentially, the
    parts in parallel (see the module notes for the analysis). Returns ``model`` (changed in place).

    The release layers are found where PyG puts them: the entries of every ``HeteroConv``'s
    ``convs`` (keyed by edge type), and the per-edge-type copies ``to_hetero`` makes (a
    ``ModuleDict`` keyed by ``'src__rel__dst'``: pass ``metadata`` = ``data.metadata()`` so that the
    keys are matched to edge types exactly). Each gets a forward pre-hook and a forward hook that
    enter and leave its part; ``model`` gets a pair that opens one parallel group per accountant
    for the forward (``relations-<k>``) and closes it when the forward returns or raises. A
    forward that releases nothing (every layer cached) leaves no group. The hooks hold only
    public names: they survive ``copy.deepcopy``, ``pickle`` and ``torch.save(model)``.

    Inside a part the caller entered itself (``with acct.parallel(...) as part: with part(i):``, a
    dataset of heterogeneous graphs), the releases are charged to that part, sequentially.

    Args:
        model (torch.nn.Module): the model (``to_hetero(...)``'s output, or one holding ``HeteroConv``).
        metadata (tuple, optional): ``data.metadata()`` (or the list of edge types); needed to read
            ``to_hetero``'s keys.

    Raises:
        ValueError: a release layer object is shared by relations of two different parts (use one
            instance per relation, e.g. ``copy.deepcopy``), or ``model`` was composed already.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}")
    if any(isinstance(h, _OpenForward) for h in model._forward_pre_hooks.values()):
        raise ValueError("compose_relations: this model is composed already")
    from torch_geometric.nn import HeteroConv

    names = _key_names(metadata)
    found: dict[int, tuple[torch.nn.Module, EdgeType]] = {}

    def assign(sub: torch.nn.Module, edge_type: EdgeType) -> None:
        for layer in sub.modules():
            if not _is_release(layer):
                continue
            seen = found.get(id(layer))
            if seen is not None and relation_part(seen[1]) != relation_part(edge_type):
                raise ValueError(
                    f"compose_relations: one {type(layer).__name__} object serves the relations {seen[1]} and "
                    f"{edge_type}, of two node-type pairs; its release for one would be charged to the other's part. "
                    "Give every relation its own layer (copy.deepcopy(layer) per edge type)")
            found.setdefault(id(layer), (layer, edge_type))

    for module in model.modules():
        if isinstance(module, HeteroConv):
            for key, conv in module.convs.items():
                et = _edge_type_of_key(key, names)
                if et is not None:
                    assign(conv, et)
        elif isinstance(module, torch.nn.ModuleDict):
            for key, sub in module.items():
                et = _edge_type_of_key(key, names)
                if et is None and metadata is None and isinstance(key, str) and key.count("__") == 2:
                    et = tuple(key.split("__"))  # to_hetero's key of an edge type, without metadata
                if et is not None:
                    assign(sub, et)
    for layer, edge_type in found.values():
        if any(isinstance(h, _EnterPart) for h in layer._forward_pre_hooks.values()):
            continue
        layer.register_forward_pre_hook(_EnterPart(edge_type))
        layer.register_forward_hook(_LeavePart(), always_call=True)
    model.register_forward_pre_hook(_OpenForward())
    model.register_forward_hook(_CloseForward(), always_call=True)
    return model
