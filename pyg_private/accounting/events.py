r"""Privacy events: the immutable record of what one release cost.

A :class:`PrivacyEvent` names the release, the unit it is charged to, the mechanism
and its parameters, and at least one *representation* of its privacy loss:

* ``mu``: the release is :math:`\mu`-GDP (Gaussian mechanisms, convergent chains);
  it implies the RDP curve :math:`\alpha\mu^2/2` at every order.
* ``orders`` / ``rdp``: an RDP curve tabulated on a grid of orders that may end with
  ``math.inf`` (the pure-DP value). ``inf`` as a *value* means "no bound at this order".
* ``approx``: an :math:`(\epsilon, \delta)` pair for mechanisms without a curve
  (objective perturbation), optionally with its whole *privacy profile* ``profile =
  (deltas, epsilons)``: the release is :math:`(\epsilon_i, \delta_i)`-DP for every tabulated
  pair (epsilons non-increasing in delta). Between grid points the profile is read at the
  next smaller delta, which is safe because epsilon only falls as delta grows.
* ``pld``: the *dominating pair* the release's privacy loss distribution is computed from,
  as a small tuple (see :mod:`pyg_private.accounting.pld`): ``("gaussian", mu)``,
  ``("laplace", sensitivity / scale)``, ``("pure", epsilon_each, k)`` (k compositions of a pure
  :math:`\epsilon`-DP release) or ``("poisson_gaussian", noise_multiplier, sample_rate, steps)``.
  The factories in :mod:`pyg_private.accounting.mechanism_events` set it; a ``mu``-GDP event has
  the Gaussian pair by definition.

When an event has several, the RDP/GDP rules use the first available of ``mu``, the RDP
curve, ``approx``; the PLD rule uses ``pld`` (see :mod:`pyg_private.accounting.composition`).

Local-DP events (unit ``"local"``) also say which nodes were randomised: ``nodes``
(sorted, unique ids; ``None`` = all of them) out of ``num_nodes``.

Records are validated when built: a bad field raises ``ValueError``/``TypeError`` and
no record exists. They are frozen, and their arrays are read-only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from .orders import check_orders
from .units import Unit, as_unit
from .validation import check_delta, check_non_negative, check_positive_int

__all__ = ["PrivacyEvent"]

_SCALARS = (str, int, float, bool, type(None))


def _freeze_params(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if params is None:
        return MappingProxyType({})
    if not isinstance(params, Mapping):
        raise TypeError(f"`params` must be a mapping; got {type(params).__name__}")
    frozen: dict[str, Any] = {}
    for key, value in params.items():
        if not isinstance(key, str):
            raise TypeError(f"`params` keys must be strings; got {key!r}")
        if isinstance(value, (list, tuple)):
            if not all(isinstance(v, _SCALARS) for v in value):
                raise TypeError(f"`params[{key!r}]` must hold only str/int/float/bool/None")
            value = tuple(value)
        elif isinstance(value, np.generic):
            value = value.item()
        elif not isinstance(value, _SCALARS):
            raise TypeError(
                f"`params[{key!r}]` must be a str, int, float, bool, None or a tuple of them "
                f"(so the ledger can be saved); got {type(value).__name__}"
            )
        frozen[key] = value
    return MappingProxyType(frozen)


@dataclass(frozen=True, eq=False)
class PrivacyEvent:
    """One release's privacy cost. See the module docstring for the fields' meaning."""

    name: str
    unit: Unit
    mechanism: str
    params: Mapping[str, Any] = field(default_factory=dict)
    mu: float | None = None
    orders: tuple[float, ...] | None = None
    rdp: tuple[float, ...] | None = None
    approx: tuple[float, float] | None = None
    nodes: np.ndarray | None = None
    num_nodes: int | None = None
    profile: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    pld: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"`name` must be a non-empty string; got {self.name!r}")
        if not isinstance(self.mechanism, str) or not self.mechanism:
            raise ValueError(f"`mechanism` must be a non-empty string; got {self.mechanism!r}")
        set_(self, "unit", as_unit(self.unit))
        set_(self, "params", _freeze_params(self.params))

        if (self.orders is None) != (self.rdp is None):
            raise ValueError("`orders` and `rdp` must be given together")
        if self.mu is not None:
            set_(self, "mu", check_non_negative(self.mu, "mu"))
        if self.mu is None and self.rdp is None and self.approx is None:
            raise ValueError("a PrivacyEvent needs at least one of `mu`, `rdp` (with `orders`) or `approx`")
        if self.approx is not None and (self.mu is not None or self.rdp is not None):
            raise ValueError("an event is either a curve (`mu` or `rdp`) or an approximate-DP pair (`approx`, with an "
                             "optional `profile`), not both: the accountant would use only one of them")
        if self.rdp is not None:
            orders = check_orders(self.orders)
            values = tuple(float(v) for v in self.rdp)
            if len(values) != len(orders):
                raise ValueError(f"`rdp` has {len(values)} values for {len(orders)} orders")
            for a, v in zip(orders, values):
                if math.isnan(v) or v < 0:
                    raise ValueError(f"`rdp` must be non-negative (inf allowed); got {v!r} at order {a!r}")
            set_(self, "orders", orders)
            set_(self, "rdp", values)
        if self.approx is not None:
            try:
                eps, delta = self.approx
            except (TypeError, ValueError):
                raise TypeError(f"`approx` must be an (epsilon, delta) pair; got {self.approx!r}") from None
            set_(self, "approx", (check_non_negative(eps, "approx epsilon"),
                                  check_delta(delta, "approx delta", allow_zero=True)))
        self._validate_profile()
        self._validate_pld()
        self._validate_nodes()

    def _validate_profile(self) -> None:
        if self.profile is None:
            return
        if self.approx is None:
            raise ValueError("a `profile` refines an (epsilon, delta) event: give `approx` (its calibrated point) too")
        try:
            deltas, epsilons = self.profile
            deltas = tuple(float(d) for d in deltas)
            epsilons = tuple(float(e) for e in epsilons)
        except (TypeError, ValueError):
            raise TypeError("`profile` must be a pair (deltas, epsilons) of equal-length number sequences") from None
        if not deltas or len(deltas) != len(epsilons):
            raise ValueError(f"`profile` needs equally many deltas and epsilons (at least one); got "
                             f"{len(deltas)} and {len(epsilons)}")
        for d in deltas:
            check_delta(d, "profile delta")
        if any(b <= a for a, b in zip(deltas, deltas[1:])):
            raise ValueError("`profile` deltas must be strictly increasing")
        for e in epsilons:
            if math.isnan(e) or e < 0:
                raise ValueError(f"`profile` epsilons must be non-negative (inf allowed); got {e!r}")
        if any(b > a for a, b in zip(epsilons, epsilons[1:])):
            raise ValueError("`profile` epsilons must not increase with delta (a privacy profile is non-increasing)")
        object.__setattr__(self, "profile", (deltas, epsilons))

    def _validate_pld(self) -> None:
        if self.pld is None:
            return
        if not isinstance(self.pld, (tuple, list)) or not self.pld:
            raise TypeError(f"`pld` must be a tuple naming a dominating pair; got {self.pld!r}")
        kind, *args = self.pld
        arity = {"gaussian": 1, "laplace": 1, "pure": 2, "poisson_gaussian": 3}
        if kind not in arity or len(args) != arity[kind]:
            raise ValueError(f"`pld` must be one of ('gaussian', mu), ('laplace', ratio), ('pure', epsilon, k), "
                             f"('poisson_gaussian', noise_multiplier, sample_rate, steps); got {self.pld!r}")
        pure = self.rdp[-1] if self.rdp is not None and math.isinf(self.orders[-1]) else None
        if self.approx is not None:
            raise ValueError("an approximate-DP event composes through its own (epsilon, delta) pair: no `pld`")
        if kind == "gaussian":
            mu = check_non_negative(args[0], "pld mu")
            if self.mu is None or not math.isclose(mu, self.mu, rel_tol=1e-12):
                raise ValueError(f"`pld` ('gaussian', {mu!r}) needs the event's `mu` to be the same; got {self.mu!r}")
            value: tuple[Any, ...] = ("gaussian", mu)
        elif kind == "laplace":
            ratio = check_non_negative(args[0], "pld ratio")
            if pure is not None and not math.isclose(ratio, pure, rel_tol=1e-9, abs_tol=1e-300):
                raise ValueError(f"`pld` Laplace ratio {ratio!r} disagrees with the curve's pure epsilon {pure!r}")
            value = ("laplace", ratio)
        elif kind == "pure":
            eps = check_non_negative(args[0], "pld epsilon")
            k = check_positive_int(args[1], "pld compositions")
            if pure is not None and not math.isclose(eps * k, pure, rel_tol=1e-9, abs_tol=1e-300):
                raise ValueError(f"`pld` pure epsilon {eps * k!r} disagrees with the curve's {pure!r}")
            value = ("pure", eps, k)
        else:
            sigma = check_non_negative(args[0], "pld noise_multiplier")
            q = float(args[1])
            if not 0 < q <= 1:
                raise ValueError(f"`pld` sample rate must lie in (0, 1]; got {args[1]!r}")
            if not sigma > 0:
                raise ValueError(f"`pld` noise multiplier must be > 0; got {args[0]!r}")
            value = ("poisson_gaussian", sigma, q, check_positive_int(args[2], "pld steps"))
        object.__setattr__(self, "pld", value)

    def _validate_nodes(self) -> None:
        set_ = object.__setattr__
        if self.unit is not Unit.LOCAL:
            if self.nodes is not None or self.num_nodes is not None:
                raise ValueError(
                    f"`nodes`/`num_nodes` describe a per-node (local DP) ledger; an event on unit "
                    f"{self.unit.value!r} protects the whole graph and must not carry them"
                )
            return
        if self.num_nodes is None:
            raise ValueError("an event on unit 'local' must say `num_nodes` (the size of the node set)")
        set_(self, "num_nodes", check_positive_int(self.num_nodes, "num_nodes"))
        if self.nodes is None:
            return
        nodes = np.asarray(self.nodes)
        if nodes.dtype == np.bool_:
            if nodes.shape != (self.num_nodes,):
                raise ValueError(f"a boolean `nodes` mask must have shape ({self.num_nodes},); got {nodes.shape}")
            nodes = np.flatnonzero(nodes)
        if nodes.ndim != 1 or (nodes.size and not np.issubdtype(nodes.dtype, np.integer)):
            raise ValueError("`nodes` must be a 1-D array of integer node ids or a boolean mask")
        nodes = np.unique(nodes.astype(np.int64))
        if nodes.size and (nodes[0] < 0 or nodes[-1] >= self.num_nodes):
            raise ValueError(f"`nodes` ids must lie in [0, {self.num_nodes}); got range [{nodes[0]}, {nodes[-1]}]")
        nodes.setflags(write=False)
        set_(self, "nodes", nodes)

    # ------------------------------------------------------------------ helpers
    @property
    def representation(self) -> str:
        """The representation composition uses: ``"gdp"``, ``"rdp"`` or ``"approx"``."""
        if self.mu is not None:
            return "gdp"
        if self.rdp is not None:
            return "rdp"
        return "approx"

    @property
    def num_touched(self) -> int | None:
        """Local events: how many nodes were randomised (``None`` for other units)."""
        if self.unit is not Unit.LOCAL:
            return None
        return self.num_nodes if self.nodes is None else int(self.nodes.size)

    def node_mask(self) -> np.ndarray:
        """Local events: a boolean mask of the randomised nodes."""
        if self.unit is not Unit.LOCAL:
            raise ValueError(f"node_mask() is only defined for unit 'local'; this event is on {self.unit.value!r}")
        mask = np.zeros(self.num_nodes, dtype=bool)
        if self.nodes is None:
            mask[:] = True
        else:
            mask[self.nodes] = True
        return mask

    def cost_summary(self) -> str:
        """A short human-readable description of the cost."""
        if self.mu is not None:
            return f"mu-GDP, mu={self.mu:.4g}"
        if self.rdp is not None:
            pure = self.rdp[-1] if math.isinf(self.orders[-1]) else math.inf
            return "RDP curve" + (f", pure eps={pure:.4g}" if math.isfinite(pure) else "")
        eps, delta = self.approx
        return f"({eps:.4g}, {delta:.3g})-DP" + (", with its privacy profile" if self.profile is not None else "")

    # ------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible dict from which :meth:`from_dict` rebuilds an equal event."""
        return {
            "name": self.name,
            "unit": self.unit.value,
            "mechanism": self.mechanism,
            "params": dict(self.params),
            "mu": self.mu,
            "orders": None if self.orders is None else [_enc(a) for a in self.orders],
            "rdp": None if self.rdp is None else [_enc(v) for v in self.rdp],
            "approx": None if self.approx is None else list(self.approx),
            "nodes": None if self.nodes is None else self.nodes.tolist(),
            "num_nodes": self.num_nodes,
            "profile": None if self.profile is None else [list(self.profile[0]), [_enc(e) for e in self.profile[1]]],
            "pld": None if self.pld is None else list(self.pld),
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> "PrivacyEvent":
        """Rebuild (and re-validate) an event saved by :meth:`to_dict`."""
        state = dict(state)
        for key in ("orders", "rdp"):
            if state.get(key) is not None:
                state[key] = tuple(_dec(v) for v in state[key])
        if state.get("approx") is not None:
            state["approx"] = tuple(state["approx"])
        if state.get("nodes") is not None:
            state["nodes"] = np.asarray(state["nodes"], dtype=np.int64)
        if state.get("profile") is not None:
            deltas, epsilons = state["profile"]
            state["profile"] = (tuple(deltas), tuple(_dec(e) for e in epsilons))
        if state.get("pld") is not None:
            state["pld"] = tuple(state["pld"])
        return cls(**state)

    def __reduce__(self):
        # the frozen params mapping (a mappingproxy) cannot be pickled: rebuild from the dict form
        return (PrivacyEvent.from_dict, (self.to_dict(),))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrivacyEvent):
            return NotImplemented
        same_nodes = (self.nodes is None and other.nodes is None) or (
            self.nodes is not None and other.nodes is not None and np.array_equal(self.nodes, other.nodes)
        )
        return same_nodes and all(
            getattr(self, f) == getattr(other, f)
            for f in ("name", "unit", "mechanism", "mu", "orders", "rdp", "approx", "num_nodes", "profile", "pld")
        ) and dict(self.params) == dict(other.params)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = f", nodes={self.num_touched}/{self.num_nodes}" if self.unit is Unit.LOCAL else ""
        return f"PrivacyEvent(name={self.name!r}, unit={self.unit.value!r}, mechanism={self.mechanism!r}, {self.cost_summary()}{extra})"


def _enc(x: float) -> float | str:
    """inf is not JSON: store it as the string "inf"."""
    return "inf" if math.isinf(x) else float(x)


def _dec(x: float | str) -> float:
    return math.inf if x == "inf" else float(x)
