"""The protocol every row-partitioned release follows, whatever its layer:

1. **public inputs** (one gather of a few hundred bytes): every process's local error, row range,
   node count, feature width and dtype, and the layer's privacy settings; every process then runs
   the same checks on the same gathered data (partition, agreement) and raises the same error;
2. **graph**: the local rows are validated, every row is sent to the owner of its column
   (:func:`~pyg_private.distributed.partition.exchange_transpose`) to check (or make) the graph
   undirected, and the degrees are all-gathered;
3. **charge**: the group's rank 0 registers the layer's event with its accountant (the only one),
   before any process draws noise, and broadcasts the outcome; a refusal is raised everywhere;
4. **noise**: every process draws the noise of its own rows from its own stream.

Errors of steps 1-3 are raised on every process, before anything is charged (1, 2) or released (3).
"""
from __future__ import annotations

import json
import os
from numbers import Integral
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from ..accounting import PrivacyEvent, charge
from ..sampling.words import RandomSource, resolve_secure_mode
from ._comm import (GroupInfo, Layout, agree, all_gather_bytes, all_gather_rows, broadcast_bytes, encode_error,
                    raise_agreed, require_group)
from .halo import check_exchange
from .partition import check_partition, check_row_range, exchange_transpose, local_csr, read_local_rows

__all__ = ["RowPartitionedRelease"]


def check_num_nodes(num_nodes: Any) -> int:
    """The public node count of the whole graph, checked (an integer ``>= 1``)."""
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, Integral):
        raise TypeError(f"`num_nodes` must be an integer, the public number of nodes of the whole graph "
                        f"(never read off the private edges); got {num_nodes!r}")
    if num_nodes < 1:
        raise ValueError(f"the graph is empty (`num_nodes`={num_nodes}): a release needs at least one node")
    return int(num_nodes)


class RowPartitionedRelease(torch.nn.Module):
    """Base of the distributed wrappers: holds the configured single-process ``layer`` and runs the
    protocol above; subclasses add their checks and hops."""

    _layer_type: type = torch.nn.Module
    #: How a disagreement on :meth:`_settings` is named and what the error advises.
    _settings_what = "the privacy settings of the layer"
    _settings_hint = ("build the same layer on every process (the noise of each process's rows is calibrated from "
                      "them)")

    def __init__(self, layer: torch.nn.Module, *, group: Any = None, exchange: Optional[str] = None) -> None:
        super().__init__()
        if not isinstance(layer, self._layer_type):
            raise TypeError(f"{type(self).__name__} wraps a configured {self._layer_type.__name__}; got "
                            f"{type(layer).__name__}")
        self.layer = layer
        self.group = group
        #: How each hop receives the previous one (``"auto"``, ``"all_gather"``, ``"halo"``; see
        #: :mod:`~pyg_private.distributed.halo`), ``None`` for a wrapper without the choice.
        self.exchange = None if exchange is None else check_exchange(exchange)
        #: The grid of the last release's hops (``None`` before it, without noise, or with the float sampler).
        self.granularity: Optional[float] = None

    # ------------------------------------------------------------------ settings
    def _settings(self) -> dict[str, Any]:
        """What every process must agree on: the layer's type, privacy settings and noise source."""
        layer = self.layer
        try:
            secure = resolve_secure_mode(layer.secure_mode, layer.generator)
        except (ValueError, TypeError):  # already refused by the layer's constructor; keep it visible
            secure = repr(layer.secure_mode)
        return {"layer": type(layer).__name__, **layer._release_settings(), "sensitivity": layer.sensitivity,
                "name": layer.name, "secure_mode": secure, "seeded": layer.generator is not None,
                "exchange": self.exchange}  # every process must plan its exchange alike

    # ------------------------------------------------------------------ step 1
    def _group(self, x: Any) -> GroupInfo:
        device = x.device if isinstance(x, Tensor) else torch.device("cpu")
        return require_group(self.group, device, type(self).__name__)

    def _common_checks(self, info: GroupInfo, x: Any, row_range: Any, num_nodes: Any) -> tuple[int, tuple[int, int]]:
        """Checks of this process's call that every layer shares; ``(num_nodes, (start, end))``."""
        if not isinstance(x, Tensor) or x.dim() != 2:
            raise ValueError("`x` must be this process's rows of the node features, of shape [end - start, F]")
        n = check_num_nodes(num_nodes)
        start, end = check_row_range(row_range, n, x.size(0))
        self._check_accountant_placement(info)
        return n, (start, end)

    def _check_accountant_placement(self, info: GroupInfo) -> None:
        """Raise unless the layer's accountant (if any) is on the group's rank 0."""
        if info.rank != 0 and getattr(self.layer, "accountant", None) is not None:
            raise ValueError("the layer carries an accountant on a process other than the group's rank 0: the "
                             "release is charged once, on rank 0, and an accountant elsewhere would record nothing "
                             "and misstate the spend. Build the layer with `accountant=acct if rank == 0 else None`")

    def _public_inputs(self, info: GroupInfo, error: Optional[BaseException], row_range: Optional[tuple[int, int]],
                       num_nodes: Optional[int], x: Any) -> Layout:
        """Gather the public inputs and settings of every process and check them alike everywhere."""
        return self._gather_public(info, error, row_range, num_nodes, x)[0]

    def _gather_public(self, info: GroupInfo, error: Optional[BaseException], row_range: Optional[tuple[int, int]],
                       num_nodes: Optional[int], x: Any, *, agreed: Optional[dict[str, tuple[Any, str]]] = None,
                       local: Optional[dict[str, Any]] = None) -> tuple[Layout, list[dict[str, Any]]]:
        """:meth:`_public_inputs` with more public values: ``agreed`` maps a key to ``(value, what)``,
        a JSON-ready value every process must pass alike (checked after the node count, before the
        features; ``what`` names it in the error); ``local`` holds this process's own public values,
        returned gathered as ``gathered[r]["local"]``. ``x`` may be ``None`` (no feature width or
        dtype to compare)."""
        ok = error is None
        has_x = ok and isinstance(x, Tensor)
        payload = {"error": encode_error(error), "range": list(row_range) if ok else None,
                   "num_nodes": num_nodes if ok else None, "features": int(x.size(1)) if has_x else None,
                   "dtype": str(x.dtype) if has_x else None, "settings": self._settings(),
                   "agreed": {k: v for k, (v, _) in (agreed or {}).items()} if ok else None,
                   "local": local if ok else None}
        gathered = [json.loads(b) for b in all_gather_bytes(json.dumps(payload, default=repr).encode(), info)]
        raise_agreed([g["error"] for g in gathered], info, error)
        checks = [("num_nodes", "the node count `num_nodes`")]
        checks += [(key, what) for key, (_, what) in (agreed or {}).items()]
        checks += [("features", "the feature width of `x`"), ("dtype", "the dtype of `x`")]
        for key, what in checks:
            values = [g[key] if key in ("num_nodes", "features", "dtype") else g["agreed"].get(key)
                      for g in gathered]
            if len(set(map(str, values))) > 1:
                kind = "sizes" if key in ("num_nodes", "features", "dtype") else "inputs"
                raise ValueError(f"the processes disagree on {what}: {values} (rank 0, 1, ...); every process must "
                                 f"pass the same public {kind}")
        reference = gathered[0]["settings"]
        for r, g in enumerate(gathered[1:], start=1):
            if g["settings"] != reference:
                keys = sorted(k for k in set(reference) | set(g["settings"])
                              if reference.get(k) != g["settings"].get(k))
                diff = ", ".join(f"{k}: {reference.get(k)!r} on rank 0, {g['settings'].get(k)!r} on rank {r}"
                                 for k in keys)
                raise ValueError(f"the processes disagree on {self._settings_what} ({diff}); {self._settings_hint}")
        check_partition([tuple(g["range"]) for g in gathered], gathered[0]["num_nodes"])
        return Layout([tuple(g["range"]) for g in gathered]), gathered

    # ------------------------------------------------------------------ step 2
    def _graph(self, info: GroupInfo, layout: Layout, adj: Any, row_range: tuple[int, int],
               num_nodes: int) -> tuple[Tensor, Tensor]:
        """``(crow, col)`` of this process's rows of the validated undirected simple graph."""
        symmetrize = bool(getattr(self.layer, "symmetrize", False))
        error, keys = None, None
        try:
            keys = read_local_rows(adj, row_range, num_nodes, symmetrize=symmetrize)
        except (ValueError, TypeError) as exc:
            error = exc
        agree(error, info, "bad graph block: ")
        received = exchange_transpose(keys, layout, num_nodes, info)
        if symmetrize:
            keys = torch.unique(torch.cat([keys, received]))  # sorted
        elif not torch.equal(keys, received):
            error = ValueError(
                "`edge_index` is directed across the processes: an edge (u, v) in the rows of one process has no "
                "(v, u) in the rows of the process holding v. Each process must pass every edge of its nodes, in both "
                "directions of the whole graph (pyg_private.distributed.row_block of the undirected edge_index), or "
                "pass symmetrize=True to use the undirected version")
        agree(error, info)
        return local_csr(keys, row_range, num_nodes)

    # ------------------------------------------------------------------ step 3
    def _charge(self, info: GroupInfo, event: PrivacyEvent) -> Optional[PrivacyEvent]:
        """Register ``event`` once, on the group's rank 0, and raise its refusal on every process."""
        payload, local = None, None
        if info.rank == 0:
            try:
                event = charge(self.layer.accountant, event, self.layer)
            except Exception as exc:  # noqa: BLE001 - every refusal must reach the other processes
                local = exc
            payload = json.dumps(encode_error(local)).encode()
        outcome = json.loads(broadcast_bytes(payload, info))
        if outcome is not None:
            if local is not None:
                raise local
            raise_agreed([outcome] + [None] * (info.world - 1), info,
                         what="the accountant on rank 0 refused the release, nothing was released on any process: ")
        return event

    def _plan_and_charge(self, info: GroupInfo, num_nodes: int, channels: int) -> Optional[tuple[float, float]]:
        """The layer's own grid plan (public sizes; a refusal raised on every process), then the one
        charge on rank 0 (:meth:`_charge`), before any process draws noise; returns the grid."""
        layer = self.layer
        grid = self._agreed_plan_and_charge(info, lambda: layer.plan_grid(num_nodes, channels),
                                            lambda g: layer.event(g) if layer.noise_multiplier > 0 else None)
        self.granularity = layer.granularity = None if grid is None else grid[0]
        return grid

    def _agreed_plan_and_charge(self, info: GroupInfo, plan: Callable[[], Any],
                                event: Callable[[Any], Optional[PrivacyEvent]]) -> Any:
        """``plan()`` on every process (public sizes; a refusal raised on every process), then the event
        ``event(grid)`` (``None``: nothing to charge) registered once, on rank 0, before any process
        draws noise (:meth:`_charge`); returns the plan."""
        grid, error = None, None
        try:
            grid = plan()
        except (ValueError, TypeError) as exc:
            error = exc
        agree(error, info)
        planned = event(grid)
        if planned is not None:
            self._charge(info, planned)
        return grid

    # ------------------------------------------------------------------ step 4
    def _streams(self, info: GroupInfo, device: torch.device, std: float,
                 grid: Optional[tuple[float, float]]) -> tuple[Optional[RandomSource], Optional[torch.Generator]]:
        """This process's noise stream, created only after the charge: a :class:`RandomSource` for the
        safe sampler (``grid`` given), a generator for the float one, nothing without noise."""
        if std <= 0:
            return None, None
        if grid is not None:
            return self._source(info, device), None
        return None, self._float_generator(info, device)

    def _source(self, info: GroupInfo, device: torch.device) -> RandomSource:
        """This process's noise stream: its own ChaCha20 stream keyed from the OS (with or without
        ``secure_mode``; see :mod:`pyg_private.sampling.words.sources`); a seeded ``generator`` gives the ``rank``-th of ``world`` children spawned from
        it (reproducible, and distinct across processes even when every process seeds alike)."""
        layer = self.layer
        if layer.generator is not None:
            return RandomSource(device, generator=layer.generator).spawn(info.world)[info.rank]
        return RandomSource(device, secure=resolve_secure_mode(layer.secure_mode, layer.generator))

    def _float_generator(self, info: GroupInfo, device: torch.device) -> torch.Generator:
        """This process's generator for ``sampler="float"``: derived from the layer's ``generator`` as in
        :meth:`_source`, else seeded from the OS (never the global RNG, which scripts seed alike everywhere)."""
        gen = torch.Generator(device)
        if self.layer.generator is not None:
            seed = int(self._source(info, device).words(1).item())
        else:
            seed = int.from_bytes(os.urandom(8), "little") >> 1
        return gen.manual_seed(seed)

    def _gather(self, info: GroupInfo, layout: Layout, local: Tensor) -> Tensor:
        return all_gather_rows(local, layout, info)

    def extra_repr(self) -> str:
        parts = [] if self.group is None else [f"group={self.group!r}"]
        if self.exchange is not None:
            parts.append(f"exchange={self.exchange!r}")
        return ", ".join(parts)
