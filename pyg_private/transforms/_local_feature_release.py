r"""Bookkeeping shared by the local-DP feature transforms (HDS and the LP/PM/MB baselines).

A subclass supplies the mechanism (how many coordinates a node perturbs, how one chunk of
normalised values is randomised, which event one release costs); this base does the rest
the same way for all of them:

* map the features into :math:`[-1, 1]` with a **public**, declared ``feature_range``
  (never computed from the data), refusing values outside it unless ``clamp=True``, and
  refusing NaN/inf;
* validate everything, then charge the accountant (unit ``"local"``, per node, with the
  ids of the perturbed nodes), then draw the noise, chunk by chunk so that the
  temporaries stay bounded;
* draw it with the floating-point-safe samplers by default (``sampler="safe"``: exactly
  sampled laws on power-of-two grids, from one
  :class:`~pyg_private.sampling.RandomSource` per release, ``secure_mode`` for the
  operating system's CSPRNG; see :mod:`pyg_private.mechanisms.square_wave`), or with the
  floating-point samplers (``sampler="float"``, for benchmarks and audits), and record the
  released values' grid (``granularity``);
* mark the data (which nodes were perturbed, by which mechanism), refuse to perturb a
  node twice unless ``allow_recompose=True`` (then it is charged again), and remember a
  fingerprint of every input it released so that re-perturbing the *same raw features*
  (the ``transform=`` pitfall) is detected too;
* across processes (``DataLoader(num_workers=...)`` workers, forked or spawned children):
  with a :class:`~pyg_private.accounting.PersistentPrivacyAccountant` the fingerprints are kept
  in the ledger's file and checked in the transaction that charges the release, so every copy
  of the transform refuses what any copy released; otherwise a copy in another process refuses
  to release (:class:`~pyg_private.accounting.LedgerProcessError`, before any noise; see
  :mod:`pyg_private.transforms._shared_ledger`).
"""
from __future__ import annotations

import copy
import functools
import inspect
import math
from dataclasses import dataclass
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.transforms import BaseTransform

from ._shared_ledger import SharedLedgerCopy
from ..accounting import PrivacyAccountant, PrivacyEvent, charge
from ..accounting.validation import check_epsilon
from ..mechanisms._noise import check_generator
from ..mechanisms.sampler_options import check_sampler_options
from ..sampling.words import RandomSource, resolve_secure_mode
from ..mechanisms.square_wave import sample_k_subsets
from ._fingerprint import ReleaseFingerprints
from ._fingerprint import crc32_update as _crc

__all__ = ["LocalFeatureRelease", "FeatureRange"]

FeatureRange = Optional[tuple[Union[float, Sequence[float], Tensor], Union[float, Sequence[float], Tensor]]]

#: elements per chunk (rows x features) processed at once
_CHUNK_ELEMENTS = 1 << 22
#: values outside the declared range by at most this many ulps of the bound are rounding
#: (e.g. an L2-normalised float32 row with one entry 1.0000001) and are clamped silently
_ROUNDING_ULPS = 8.0


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True or False; got {value!r}")
    return value


def _as_bound(value: Any, name: str) -> float | Tensor:
    if isinstance(value, bool):
        raise TypeError(f"`{name}` must be a number or a 1-D sequence of numbers; got {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"`{name}` must be finite; got {value!r}")
        return v
    try:
        t = torch.as_tensor(value, dtype=torch.float64).detach().cpu()
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"`{name}` must be a number or a 1-D sequence of numbers; got {type(value).__name__}") from None
    if t.dim() == 0:
        return _as_bound(float(t), name)
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"`{name}` must be a number or a non-empty 1-D sequence; got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"`{name}` must be finite")
    return t


#: Arguments that may be given per node type (a dict keyed by node type) for a ``HeteroData``.
PER_TYPE_ARGUMENTS = ("epsilon", "k", "feature_range", "node_mask", "clamp")


@dataclass
class _Plan:
    """What :meth:`LocalFeatureRelease._prepare` checked, for the charge and the release."""

    x: Tensor
    n: int
    d: int
    k: int
    rng: Any
    ids: Optional[Tensor]
    new_mask: Tensor
    rows: int
    prior: Optional[Tensor]
    key: bytes
    seen: Any
    users: Optional[np.ndarray]
    num_users: int
    secure: bool
    claim: Any
    out: Optional[Tensor]


def _per_type_init(init: Any) -> Any:
    """Wrap a subclass's ``__init__``: record its arguments (to build one transform per node type),
    and accept the :data:`PER_TYPE_ARGUMENTS` as dicts keyed by node type."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def wrapped(self: "LocalFeatureRelease", *args: Any, **kwargs: Any) -> None:
        if "_arguments" in self.__dict__:  # an inner call of the constructor chain
            return init(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = {}
        for key, value in bound.arguments.items():
            kind = signature.parameters[key].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                raise TypeError(f"{type(self).__name__}: unexpected positional arguments {value!r}")
            elif key != "self":
                arguments[key] = value
        per_type = {k: v for k, v in arguments.items() if k in PER_TYPE_ARGUMENTS and isinstance(v, Mapping)}
        shared = {k: v for k, v in arguments.items() if k not in ("accountant", "generator")}
        self.__dict__["_arguments"] = shared
        self.__dict__["_per_type"] = tuple(per_type)
        self.__dict__["_children"] = {}
        if not per_type:
            return init(self, *args, **kwargs)
        types = list(dict.fromkeys(t for m in per_type.values() for t in m))
        for key, mapping in per_type.items():
            missing = [t for t in types if t not in mapping]
            if missing:
                raise ValueError(f"{type(self).__name__}: `{key}` is given per node type but has no entry for {missing} "
                                 f"(the types the per-type arguments name: {types})")
        for t in types:  # one transform per type, validated now
            one = {**shared, **{k: m[t] for k, m in per_type.items()}}
            self._children[t] = type(self)(**one, accountant=arguments.get("accountant"),
                                           generator=arguments.get("generator"))
        # the common attributes from the first type's values (the per-type ones are its children's)
        init(self, **{**arguments, **{k: m[types[0]] for k, m in per_type.items()}})

    return wrapped


class LocalFeatureRelease(SharedLedgerCopy, BaseTransform):
    r"""Base of the local-DP feature transforms (not for direct use).

    Subclasses set :attr:`mechanism` and implement :meth:`_num_coordinates`,
    :meth:`_sample`, :meth:`_output_granularity`, :meth:`_event` and :meth:`_summary`.
    Arguments are documented on the subclasses (:class:`~pyg_private.transforms.HDSFeaturePerturb`).

    After a call, :attr:`granularity` is the power of two every value that call released is a
    multiple of (in the transform's output units, i.e. the normalised domain after any
    rescaling; ``None`` for ``sampler="float"`` and before the first call). Rows left raw by
    ``node_mask`` and the zeros of unsampled coordinates are not released values.
    """

    #: the mechanism's name in events and in the data's ``ldp`` record
    mechanism: str = ""
    #: False for mechanisms that perturb every coordinate (Laplace): no sparse output
    samples_coordinates: bool = True
    #: The arguments given per node type (dicts), and the constructor's other arguments.
    _per_type: tuple = ()
    _arguments: Optional[dict] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _per_type_init(cls.__dict__["__init__"])  # type: ignore[method-assign]
        if "__repr__" in cls.__dict__:
            own = cls.__dict__["__repr__"]

            @functools.wraps(own)
            def __repr__(self: "LocalFeatureRelease") -> str:
                if self.__dict__.get("_per_type"):
                    inner = ", ".join(f"{t!r}: {child!r}" for t, child in self._children.items())
                    return f"{type(self).__name__}(per node type: {{{inner}}})"
                return own(self)

            cls.__repr__ = __repr__  # type: ignore[method-assign]

    def __init__(self, epsilon: float, *, feature_range: FeatureRange = None, clamp: bool = False,
                 attr: str = "x", node_mask: Any = None, sparse_output: bool = False,
                 allow_recompose: bool = False, chunk_size: Optional[int] = None,
                 accountant: Optional[PrivacyAccountant] = None, generator: Optional[torch.Generator] = None,
                 name: Optional[str] = None, sampler: str = "safe", secure_mode: Optional[bool] = None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, generator)
        #: the grid of the values released by the most recent call (``None``: float sampler / no call yet)
        self.granularity: Optional[float] = None
        self.feature_range = self._check_range(feature_range)
        self.clamp = _check_bool(clamp, "clamp")
        if not isinstance(attr, str) or not attr:
            raise TypeError(f"`attr` must be a non-empty string; got {attr!r}")
        self.attr = attr
        if node_mask is not None and not isinstance(node_mask, str):
            node_mask = torch.as_tensor(node_mask).detach()
            if node_mask.dtype != torch.bool and node_mask.is_floating_point():
                raise TypeError("`node_mask` must be a boolean mask, integer node ids or the name of a data attribute")
            node_mask = node_mask.view(-1)
        self.node_mask = node_mask
        self.sparse_output = _check_bool(sparse_output, "sparse_output")
        if self.sparse_output and not self.samples_coordinates:
            raise ValueError(f"{type(self).__name__} perturbs every coordinate: `sparse_output=True` is not available")
        self.allow_recompose = _check_bool(allow_recompose, "allow_recompose")
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                       or chunk_size < 1):
            raise ValueError(f"`chunk_size` must be a positive integer (rows per chunk) or None; got {chunk_size!r}")
        self.chunk_size = chunk_size
        self.accountant = accountant
        self.generator = generator
        self.name = name or self.mechanism
        # keyed fingerprint of each raw input released by this instance -> nodes released
        self._released = ReleaseFingerprints()

    # ------------------------------------------------------------------ hooks
    def _num_coordinates(self, d: int) -> int:
        """How many coordinates each node perturbs (validates against ``d``)."""
        raise NotImplementedError

    def _sample(self, z: Tensor, d: int, source: Optional[RandomSource]) -> Tensor:
        """Randomise normalised values ``z`` (float64, ``[rows, k]``, in [-1, 1]); float64 out,
        multiples of :meth:`_output_granularity` when ``source`` is given (the safe sampler's
        words), the float sampler otherwise."""
        raise NotImplementedError

    def _output_granularity(self, d: int) -> float:
        """The power of two every value the safe sampler releases for ``d`` features is a
        multiple of (raises ``ValueError`` for settings the safe sampler cannot realise)."""
        raise NotImplementedError

    def _sampler_params(self, d: int) -> dict[str, Any]:
        """The sampler's fields of the event's parameters and of the data's ``ldp`` record."""
        if self.sampler == "float":
            return {"sampler": "float"}
        return {"sampler": "safe", "granularity": self._output_granularity(d)}

    def _sampler_repr(self) -> str:
        out = f", sampler={self.sampler!r}"
        if self.secure_mode is not None:
            out += f", secure_mode={self.secure_mode}"
        return out

    def _event(self, num_nodes: int, d: int, nodes: Optional[np.ndarray]) -> PrivacyEvent:
        """The event one release over ``nodes`` (None: all) costs."""
        raise NotImplementedError

    def _summary(self, d: int) -> dict[str, Any]:
        """The mechanism's fields of the data's ``ldp`` record."""
        raise NotImplementedError

    def event(self, num_nodes: int, num_features: int, nodes: Any = None) -> PrivacyEvent:
        """The event a release of ``num_nodes`` rows of ``num_features`` features registers
        (``nodes``: the perturbed ids, ``None`` for all)."""
        return self._event(int(num_nodes), int(num_features), None if nodes is None else np.asarray(nodes))

    # ------------------------------------------------------------ the range
    @staticmethod
    def _check_range(feature_range: FeatureRange) -> Optional[tuple[float | Tensor, float | Tensor]]:
        if feature_range is None:
            return None
        try:
            lo, hi = feature_range
        except (TypeError, ValueError):
            raise TypeError("`feature_range` must be None or a (low, high) pair of numbers or of 1-D "
                            f"sequences; got {feature_range!r}") from None
        lo, hi = _as_bound(lo, "feature_range low"), _as_bound(hi, "feature_range high")
        lo_t, hi_t = torch.as_tensor(lo, dtype=torch.float64), torch.as_tensor(hi, dtype=torch.float64)
        if lo_t.dim() and hi_t.dim() and lo_t.numel() != hi_t.numel():
            raise ValueError(f"`feature_range` bounds have different lengths ({lo_t.numel()} and {hi_t.numel()})")
        if not bool((lo_t < hi_t).all()):
            raise ValueError("`feature_range` must have low < high (for every column)")
        return lo, hi

    def _range_on(self, d: int, device: torch.device) -> Optional[tuple[Any, Any, Any]]:
        """``(low, 2 / (high - low), high)`` as floats or float64 ``[d]`` tensors on ``device``."""
        if self.feature_range is None:
            return None
        lo, hi = self.feature_range
        out = []
        for v, name in ((lo, "low"), (hi, "high")):
            if isinstance(v, Tensor):
                if v.numel() != d:
                    raise ValueError(f"`feature_range` {name} has {v.numel()} entries but `{self.attr}` has {d} "
                                     "features")
                v = v.to(device)
            out.append(v)
        lo, hi = out
        if isinstance(lo, Tensor) and not isinstance(hi, Tensor):
            hi = torch.full_like(lo, hi)
        if isinstance(hi, Tensor) and not isinstance(lo, Tensor):
            lo = torch.full_like(hi, lo)
        return lo, 2.0 / (hi - lo), hi

    def _range_text(self) -> str:
        if self.feature_range is None:
            return "[-1, 1]"
        lo, hi = self.feature_range
        if isinstance(lo, Tensor) or isinstance(hi, Tensor):
            return "per-column"
        return f"[{lo:g}, {hi:g}]"

    # ------------------------------------------------------------- the input
    def _features(self, data: Data) -> Tensor:
        if not isinstance(data, Data):
            raise TypeError(f"{type(self).__name__} takes a torch_geometric.data.Data or HeteroData; got {type(data).__name__}")
        if self.attr not in data:
            raise ValueError(f"the data have no attribute `{self.attr}` to perturb")
        x = data[self.attr]
        if not isinstance(x, Tensor):
            raise TypeError(f"`{self.attr}` must be a dense Tensor; got {type(x).__name__}")
        if x.layout != torch.strided:
            raise TypeError(f"`{self.attr}` must be a dense Tensor (got layout {x.layout}); call .to_dense() first")
        if x.dim() != 2 or x.size(0) == 0 or x.size(1) == 0:
            raise ValueError(f"`{self.attr}` must be a non-empty 2-D [num_nodes, num_features] matrix; "
                             f"got shape {tuple(x.shape)}")
        if x.is_complex():
            raise TypeError(f"`{self.attr}` must be real; got dtype {x.dtype}")
        if x.dtype == torch.bool:
            x = x.to(torch.uint8)
        return x.contiguous()

    def _perturbed_ids(self, data: Data, n: int, device: torch.device) -> Optional[Tensor]:
        """The ids of the nodes to perturb, sorted (``None``: all)."""
        m = self.node_mask
        if m is None:
            return None
        if isinstance(m, str):
            if m not in data:
                raise ValueError(f"`node_mask` names the attribute {m!r}, which the data do not have")
            m = torch.as_tensor(data[m]).view(-1)
        m = m.to(device)
        if m.dtype == torch.bool:
            if m.numel() != n:
                raise ValueError(f"a boolean `node_mask` must have {n} entries (one per node); got {m.numel()}")
            ids = m.nonzero().view(-1)
        elif m.is_floating_point():
            raise TypeError("`node_mask` must be a boolean mask or integer node ids")
        else:
            ids = m.long().unique()
            if ids.numel() and (int(ids[0]) < 0 or int(ids[-1]) >= n):
                raise ValueError(f"`node_mask` ids must lie in [0, {n}); got range [{int(ids[0])}, {int(ids[-1])}]")
        if ids.numel() == 0:
            raise ValueError("`node_mask` selects no node: nothing to perturb")
        return None if ids.numel() == n else ids

    @staticmethod
    def _ledger_ids(data: Data, n: int, ids: Optional[Tensor]) -> tuple[Optional[np.ndarray], int]:
        """Who is charged: ``(node ids, id space size)`` for the ledger of unit ``"local"``.

        Rows are users by **position** unless the data carry global ids: ``n_id`` (what
        PyG's ``NeighborLoader`` and ``ClusterLoader`` attach to a batch) or ``node_id``
        (``member_subgraph``, or set by the caller). Then row ``i`` is user ``n_id[i]``, so
        one user released in two batches at different positions is charged twice to the
        same ledger entry, and two users at the same position are not charged to one.
        When both are present they must agree. Raises ``ValueError`` before anything is
        charged."""
        found = {}
        for key in ("n_id", "node_id"):
            if key not in data:
                continue
            gid = data[key]
            if not isinstance(gid, Tensor) or gid.dim() != 1 or gid.numel() != n or gid.is_floating_point() \
                    or gid.dtype == torch.bool:
                raise ValueError(f"`{key}` must be a 1-D integer tensor with one global id per row ({n}); the "
                                 "ledger of unit 'local' charges users by it")
            gid = gid.detach().cpu().long()
            if n and int(gid.min()) < 0:
                raise ValueError(f"`{key}` holds negative ids")
            if gid.unique().numel() != n:
                raise ValueError(f"`{key}` repeats an id: two rows would be the same user")
            found[key] = gid
        if not found:
            return (None if ids is None else ids.cpu().numpy()), n
        if len(found) == 2 and not torch.equal(found["n_id"], found["node_id"]):
            raise ValueError("`n_id` and `node_id` both give global node ids and disagree; the ledger of unit "
                             "'local' charges users by them. Remove the stale one (or make them equal)")
        gid = next(iter(found.values()))
        users = gid if ids is None else gid[ids.cpu()]
        return users.numpy(), (int(gid.max()) + 1 if n else 0)

    def _scan(self, x: Tensor, ids: Optional[Tensor], rng: Optional[tuple[Any, Any, Any]], rows: int) -> int:
        """One pass over ``x``: NaN/inf and range checks on the rows to perturb, and a CRC-32
        fingerprint of the whole matrix. Raises ``ValueError`` before anything is charged."""
        n, d = x.shape
        lo = hi = None
        tol: Any = 0.0
        if rng is None:
            lo, hi = -1.0, 1.0
        else:
            lo, _, hi = rng
        if x.is_floating_point():
            eps = torch.finfo(x.dtype).eps * _ROUNDING_ULPS
            if isinstance(lo, Tensor):
                tol = torch.maximum(lo.abs(), hi.abs()).clamp_min(1.0) * eps
            else:
                tol = max(abs(lo), abs(hi), 1.0) * eps
        selected = None
        if ids is not None:
            selected = torch.zeros(n, dtype=torch.bool, device=x.device)
            selected[ids] = True
        crc = 0
        bad = 0
        for start in range(0, n, rows):
            chunk = x[start:start + rows]
            crc = _crc(chunk, crc)
            if selected is not None:
                chunk = chunk[selected[start:start + rows]]
                if chunk.size(0) == 0:
                    continue
            cmin, cmax = (float(v) for v in chunk.aminmax())
            if not (math.isfinite(cmin) and math.isfinite(cmax)):
                raise ValueError(f"`{self.attr}` contains NaN or infinite entries in rows to perturb; "
                                 "nothing was released")
            if self.clamp:
                continue
            if isinstance(lo, Tensor):
                cmin_c, cmax_c = chunk.amin(0).to(torch.float64), chunk.amax(0).to(torch.float64)
                if bool(((cmin_c < lo - tol) | (cmax_c > hi + tol)).any()):
                    c64 = chunk.to(torch.float64)
                    bad += int(((c64 < lo - tol) | (c64 > hi + tol)).sum())
            elif cmin < lo - tol or cmax > hi + tol:
                bad += int(((chunk < lo - tol) | (chunk > hi + tol)).sum())
        if bad:
            raise ValueError(
                f"{bad} entries of `{self.attr}` (in rows to perturb) lie outside the declared public "
                f"feature_range {self._range_text()}; nothing was released. Declare bounds that hold for every "
                "possible user (never computed from these data), or pass clamp=True to clamp to them"
            )
        return crc

    # ------------------------------------------------------------- marks
    def _keys(self) -> tuple[str, str]:
        prefix = "" if self.attr == "x" else f"{self.attr}_"
        return f"{prefix}ldp", f"{prefix}ldp_mask"

    def _prior_mask(self, data: Data, n: int, device: torch.device) -> Optional[Tensor]:
        meta_key, mask_key = self._keys()
        if mask_key in data and isinstance(data[mask_key], Tensor) and data[mask_key].numel() == n:
            return data[mask_key].to(device=device, dtype=torch.bool).view(-1)
        if meta_key in data:  # marked, but the node mask is gone: assume every node
            return torch.ones(n, dtype=torch.bool, device=device)
        return None

    @staticmethod
    def _as_mask(ids: Optional[Tensor], n: int, device: torch.device) -> Tensor:
        if ids is None:
            return torch.ones(n, dtype=torch.bool, device=device)
        m = torch.zeros(n, dtype=torch.bool, device=device)
        m[ids] = True
        return m

    # ------------------------------------------------------------- forward
    def __call__(self, data: Data, *, out: Optional[Tensor] = None) -> Data:
        """Perturb a shallow copy of ``data`` (PyG's transform call). ``out``: a dense tensor of
        the output's shape, dtype and device that receives the perturbed features (every entry is
        overwritten; it may be ``data[attr]`` itself, perturbed in place). Reusing one buffer
        across releases saves allocating and page-faulting a fresh output each time."""
        return self.forward(copy.copy(data), out=out)

    def _check_out(self, out: Optional[Tensor], x: Tensor) -> None:
        """Validate a caller's output buffer, before any charge."""
        if out is None:
            return
        if not isinstance(out, Tensor):
            raise TypeError(f"`out` must be a tensor or None; got {type(out).__name__}")
        if self.sparse_output:
            raise ValueError("`out` receives a dense output: it cannot be combined with sparse_output=True")
        odt = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        if out.layout != torch.strided:
            raise ValueError(f"`out` must be a dense (strided) tensor; got layout {out.layout}")
        if tuple(out.shape) != tuple(x.shape) or out.dtype != odt or out.device != x.device:
            raise ValueError(f"`out` must have the output's shape {tuple(x.shape)}, dtype {odt} and device "
                             f"{x.device}; got {tuple(out.shape)}, {out.dtype}, {out.device}")
        if out.requires_grad:
            raise ValueError("`out` must not require grad (it is written in place)")
        if out.numel() and out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
            same = (out.data_ptr() == x.data_ptr() and out.stride() == x.stride() and out.dtype == x.dtype)
            if not same:  # a partial overlap would overwrite rows before they are read
                raise ValueError(f"`out` overlaps `{self.attr}` without being it: pass a separate buffer, "
                                 f"or `{self.attr}` itself to perturb in place")

    def forward(self, data: Data, *, out: Optional[Tensor] = None) -> Data:
        if isinstance(data, HeteroData):
            if out is not None:
                raise ValueError("`out` receives one feature matrix: it is for a Data, not a HeteroData")
            return self._forward_hetero(data)
        if self._per_type:
            raise ValueError(f"{type(self).__name__} was given per-node-type arguments ({', '.join(self._per_type)} as "
                             "dicts): they are for a HeteroData; give single values for a Data")
        plan = self._prepare(data, out)
        charge(self.accountant, self._event(plan.num_users, plan.d, plan.users), self,
               claim=plan.claim)  # budget enforced before noise
        return self._commit(data, plan)

    def _prepare(self, data: Data, out: Optional[Tensor] = None,
                 ledger: Optional[tuple[int, int]] = None) -> "_Plan":
        """Everything a release checks, before anything is charged (nothing is changed): the
        features, the range, the node mask, the re-release guards and who is charged. ``ledger``
        ``(offset, size)``: rows are users ``offset + position`` of a space of ``size`` (one node
        type of a ``HeteroData``)."""
        x = self._features(data)
        n, d = x.shape
        device = x.device
        check_generator(self.generator, device)
        k = self._num_coordinates(d)
        self._check_out(out, x)
        rng = self._range_on(d, device)
        ids = self._perturbed_ids(data, n, device)
        new_mask = self._as_mask(ids, n, device)
        rows = self.chunk_size or max(256, _CHUNK_ELEMENTS // d)

        prior = self._prior_mask(data, n, device)
        if prior is not None and bool((prior & new_mask).any()) and not self.allow_recompose:
            raise ValueError(
                f"`{self.attr}` of {int((prior & new_mask).sum())} of these nodes was already perturbed by a local-DP "
                f"transform ({self._keys()[0]}={data.get(self._keys()[0])!r}). Perturbing them again is a new release "
                "(pass allow_recompose=True to do it and be charged again)"
            )
        crc = self._scan(x, ids, rng, rows)
        if not self.allow_recompose:
            self._check_release_process()  # a copy in another process cannot see what was released
        parts = (self.attr, tuple(x.shape), str(x.dtype), crc)
        key = self._released.digest(*parts)
        seen = self._released.get(key)
        refusal = (
            f"{type(self).__name__} has already released these exact raw features (`{self.attr}`, same content) "
            "for {count} of these nodes. A second release draws fresh noise and costs epsilon again; averaging the "
            "releases removes the noise. This is what happens when a noisy transform is a dataset's `transform=` "
            "(it runs at every access): use it as `pre_transform=` or call it once. Pass allow_recompose=True to "
            "release again and be charged again."
        )
        if seen is not None and bool((seen.to(device) & new_mask).any()) and not self.allow_recompose:
            raise ValueError(refusal.format(count=int((seen.to(device) & new_mask).sum())))

        if ledger is None:
            users, num_users = self._ledger_ids(data, n, ids)
        else:
            offset, num_users = ledger
            users = (torch.arange(n) if ids is None else ids.cpu()).numpy() + int(offset)
        secure = resolve_secure_mode(self.secure_mode, self.generator) if self.sampler == "safe" else False
        # with a shared ledger the guard's fingerprint is checked and recorded in the charge's transaction
        claim = self._release_claim(parts, new_mask.cpu().numpy(), refusal)
        return _Plan(x=x, n=n, d=d, k=k, rng=rng, ids=ids, new_mask=new_mask, rows=rows, prior=prior, key=key,
                     seen=seen, users=users, num_users=num_users, secure=secure, claim=claim, out=out)

    def _commit(self, data: Data, plan: "_Plan") -> Data:
        """Draw the noise of a charged release and write it into ``data``."""
        x, n, d, ids = plan.x, plan.n, plan.d, plan.ids
        device = x.device
        source = None if self.sampler == "float" else RandomSource(device, generator=self.generator,
                                                                   secure=plan.secure)
        if ids is not None:
            warnings.warn(
                f"{type(self).__name__}: `node_mask` leaves {n - ids.numel()} of {n} rows of `{self.attr}` raw. "
                "Those nodes are not protected (epsilon = inf for them if these data reach the server)",
                UserWarning, stacklevel=3,
            )
        out = self._release(x, ids, plan.k, plan.rng, plan.rows, source, out=plan.out)
        self.granularity = None if source is None else self._output_granularity(d)

        new_mask, seen, prior = plan.new_mask, plan.seen, plan.prior
        self._released[plan.key] = new_mask.cpu() if seen is None else (seen | new_mask.cpu())
        meta_key, mask_key = self._keys()
        prev = data.get(meta_key)
        count = int(prev.get("num_releases", 1)) + 1 if isinstance(prev, dict) else 1
        record = {"mechanism": self.mechanism, "epsilon": self.epsilon, **self._summary(d),
                  **self._sampler_params(d), "feature_range": self._range_text(), "attr": self.attr,
                  "num_releases": count}
        data[self.attr] = out
        data[mask_key] = new_mask if prior is None else (prior | new_mask)
        data[meta_key] = record
        return data

    # ------------------------------------------------------------ heterogeneous graphs
    def _type_transform(self, node_type: str) -> "LocalFeatureRelease":
        """The transform of one node type: built from this one's arguments with the type's entries
        of the per-type ones, once, and kept (its re-release guard stays with it)."""
        children = self.__dict__.setdefault("_children", {})
        child = children.get(node_type)
        if child is None:
            if self._per_type:
                raise ValueError(f"{type(self).__name__}: no entry for node type {node_type!r} in the per-node-type "
                                 f"arguments ({', '.join(self._per_type)}); every node type with `{self.attr}` needs "
                                 "one, or its features would stay raw. Nothing was charged")
            child = children[node_type] = type(self)(**(self._arguments or {}), accountant=self.accountant,
                                                     generator=self.generator)
        child.accountant, child.generator = self.accountant, self.generator  # follow the parent's
        return child

    def _forward_hetero(self, data: HeteroData) -> HeteroData:
        """Perturb ``attr`` of every node type that has it, each type charged once (one event per
        type, its own epsilon), every event registered before any noise (see the class notes)."""
        from ..nn._call_checks import reject_sampled_batch
        from ..utils.graph_validation import declared_type_num_nodes

        name = type(self).__name__
        reject_sampled_batch(name, data)
        types = [t for t in data.node_types if self.attr in data[t]]
        if not types:
            raise ValueError(f"{name}: no node type of the HeteroData has `{self.attr}` to perturb")
        unknown = [t for t in self.__dict__.get("_children", {}) if t not in types] if self._per_type else []
        if unknown:
            raise ValueError(f"{name}: the per-node-type arguments name {unknown}, which have no `{self.attr}` in "
                             f"these data (types with it: {types}). Nothing was charged")
        counts = {}
        for t in sorted(data.node_types):  # the ledger's ids: node types in sorted order, rows in order
            c = declared_type_num_nodes(data[t])
            if c is None:
                raise ValueError(f"{name}: node type {t!r} has no declared node count (set data[{t!r}].num_nodes): the "
                                 "ledger of unit 'local' numbers the nodes of all types one after the other. Nothing "
                                 "was charged")
            counts[t] = c
        offsets, total = {}, 0
        for t, c in counts.items():
            offsets[t], total = total, total + c
        plans = []
        for t in types:
            sub = Data(**dict(data[t].items()))
            if counts[t] != sub[self.attr].size(0):
                raise ValueError(f"{name}: data[{t!r}].{self.attr} has {sub[self.attr].size(0)} rows but the type "
                                 f"declares {counts[t]} nodes. Nothing was charged")
            child = self._type_transform(t)
            plan = child._prepare(sub, ledger=(offsets[t], total))
            plans.append((t, child, sub, plan, child._event(plan.num_users, plan.d, plan.users)))
        # every type's event checked first: they charge disjoint nodes of the per-node ledger, so each
        # fitting alone means all fit together; then all registered, then the noise
        if self.accountant is not None:
            for _, child, _, plan, event in plans:
                self.accountant.check(event)
        for _, child, _, plan, event in plans:
            charge(child.accountant, event, child, claim=plan.claim)
        for t, child, sub, plan, _ in plans:
            child._commit(sub, plan)
            meta_key, mask_key = child._keys()
            for key in (self.attr, meta_key, mask_key):
                data[t][key] = sub[key]
        self.granularity = plans[-1][1].granularity
        return data

    def _normalise(self, xs: Tensor, idx: Optional[Tensor], rng: Optional[tuple[Any, Any, Any]]) -> Tensor:
        z = xs.to(torch.float64)  # may be a view of the input: the first operation is out of place
        if rng is None:
            return z.clamp(-1.0, 1.0)
        lo, scale, _ = rng
        if isinstance(lo, Tensor):
            if idx is None:
                lo, scale = lo.unsqueeze(0), scale.unsqueeze(0)
            else:
                lo, scale = lo[idx], scale[idx]
        return (z - lo).mul_(scale).sub_(1.0).clamp_(-1.0, 1.0)

    def _release(self, x: Tensor, ids: Optional[Tensor], k: int, rng: Optional[tuple[Any, Any, Any]],
                 rows: int, source: Optional[RandomSource] = None, out: Optional[Tensor] = None) -> Tensor:
        n, d = x.shape
        device = x.device
        odt = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        total = n if ids is None else ids.numel()
        sampled = self.samples_coordinates
        if self.sparse_output:  # filled chunk by chunk: row-major, k entries a row, columns sorted
            coo = _empty_output((2, total * k), torch.long, device)
            coo_val = _empty_output((total * k,), odt, device)
        elif ids is None:
            if out is None:
                out = _empty_output((n, d), odt, device)  # zeroed chunk by chunk, while in cache
        elif out is None:
            out = x.to(odt, copy=True)
        elif out.data_ptr() != x.data_ptr():  # the raw rows, then the perturbed ones over them
            out.copy_(x)
        for start in range(0, total, rows):
            stop = min(start + rows, total)
            xc = x[start:stop] if ids is None else x.index_select(0, ids[start:stop])
            r = xc.size(0)
            if sampled:
                if source is None:
                    idx = sample_k_subsets(r, d, k, generator=self.generator, device=device, sort=self.sparse_output,
                                           sampler="float")
                else:
                    idx = sample_k_subsets(r, d, k, sort=self.sparse_output, source=source)
                vals = self._sample(self._normalise(xc.gather(1, idx), idx, rng), d, source).to(odt)
            else:
                idx = None
                vals = self._sample(self._normalise(xc, None, rng), d, source).to(odt)
            if self.sparse_output:
                rows_of = (torch.arange(start, stop, device=device) if ids is None else ids[start:stop])
                coo[0, start * k:stop * k] = rows_of.repeat_interleave(k)
                coo[1, start * k:stop * k] = idx.view(-1)
                coo_val[start * k:stop * k] = vals.view(-1)
            elif ids is None:
                if sampled:
                    out[start:stop].zero_().scatter_(1, idx, vals)
                else:
                    out[start:stop] = vals
            else:
                blk = torch.zeros((r, d), dtype=odt, device=device).scatter_(1, idx, vals) if sampled else vals
                out.index_copy_(0, ids[start:stop], blk)
        if not self.sparse_output:
            return out
        if ids is not None:  # add the raw rows' non-zeros, then restore the row-major order
            keep = torch.ones(n, dtype=torch.bool, device=device)
            keep[ids] = False
            raw_ids = keep.nonzero().view(-1)
            raw = x.index_select(0, raw_ids)
            nz = raw.nonzero()
            coo = torch.cat([coo, torch.stack([raw_ids[nz[:, 0]], nz[:, 1]])], dim=1)
            coo_val = torch.cat([coo_val, raw[nz[:, 0], nz[:, 1]].to(odt)])
            order = torch.argsort(coo[0] * d + coo[1])
            coo, coo_val = coo[:, order], coo_val[order]
        return torch.sparse_coo_tensor(coo, coo_val, (n, d), is_coalesced=True, check_invariants=False)

    def _base_repr(self, *mechanism_args: str) -> str:
        parts = [f"epsilon={self.epsilon:g}", *mechanism_args]
        parts.append(f"feature_range={self._range_text()}")
        parts.append(f"clamp={self.clamp}")
        if self.attr != "x":
            parts.append(f"attr={self.attr!r}")
        if self.node_mask is not None:
            parts.append("node_mask=" + (repr(self.node_mask) if isinstance(self.node_mask, str)
                                         else f"<{self.node_mask.numel()} entries>"))
        if self.sparse_output:
            parts.append("sparse_output=True")
        if self.allow_recompose:
            parts.append("allow_recompose=True")
        return ", ".join(parts)


def _empty_output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """An uninitialised output. Large CPU outputs are allocated by NumPy, which asks the
    kernel for transparent huge pages (``madvise``): writing a fresh multi-GiB output then
    costs far fewer page faults (about 2.5x faster to fill on the benchmark machine). Such
    a tensor's storage is not resizable (``resize_`` raises); every other use is unchanged."""
    numel = math.prod(shape)
    np_dtype = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
                torch.int64: np.int64}.get(dtype)
    if device.type == "cpu" and np_dtype is not None and numel * np.dtype(np_dtype).itemsize >= (1 << 26):
        return torch.from_numpy(np.empty(shape, dtype=np_dtype))
    return torch.empty(shape, dtype=dtype, device=device)
