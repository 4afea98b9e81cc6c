r"""A cached release that survives ``state_dict``, ``copy.deepcopy``, ``pickle`` and ``torch.save``
without carrying private data, and the module protocols the private layers share.

What may be stored. A saved model is usually shared, so everything a layer writes into its state
(``state_dict``, ``pickle``, ``torch.save``) is treated as public. The state of a cached release
therefore holds only

* the **released** (noisy) output, exactly as the mechanism produced it (the noise-free output of
  a non-private reference, ``noise_multiplier=0`` or ``noise_scale=0``, is never written out:
  recomputing it costs nothing; nor is a block that is no release, such as GAP's
  :math:`\mathbf{X}^{(0)} = \mathrm{normalize}(\mathbf{x})`, recomputed from the caller's input),
* the public record of what it cost: the privacy event (the mechanism's public parameters and its
  cost, :meth:`~pyg_private.accounting.PrivacyEvent.to_dict`) and whether it was registered with an
  accountant,
* the layer's privacy settings (a state is only loaded into a layer with the same settings), and
* a SHA-256 fingerprint of the inputs that the layer's guarantee treats as **public** (the features
  at edge level, the seeds or signals of the PPR modules) and of public sizes and dtypes.

Never the private graph, a function of it other than the release, the noise-free output, the noise,
or a generator state; nor a release whose guarantee holds per recipient only (personalized PPR, each
column for its seed's owner alone): a file would hand every column to one party, so such a release
stays in memory (reused in the process) and is released anew after a reload. A fingerprint of the
graph is ruled out on purpose: a deterministic digest of the private graph is a non-private release,
since anyone holding the file could hash the two candidate graphs that differ in one edge and learn
with certainty which one was used, which is exactly what edge-level differential privacy forbids.

So a release restored from a state cannot tell the graph it was released for from another graph
with the same public inputs. It is reused for the first call whose public inputs match (which
**binds** it to that call's graph, kept in memory only) and afterwards, as an in-memory cache,
only for that graph; a call with other public inputs (another node count, other features or seeds)
or, once bound, another graph is a new, charged release. Call ``forget_release()`` before using a
loaded model on a different graph.

A release is data, not a parameter. ``reset_parameters()`` (what ``torch_geometric.nn.inits.reset``
and PyG's benchmark loops call between runs) keeps it: the layers have no trainable parameters, and
dropping a paid release would only make the next forward pay again. ``forget_release()`` drops it
(the next forward is a new, charged release).

Dtypes and devices. ``model.double()``, ``model.half()`` or ``model.to(device)`` followed by the same
inputs in that dtype or on that device is post-processing of the same release: the cache compares
floating inputs across dtypes (equal when one is the other cast, e.g. ``x.double()`` or ``x.half()``
of the ``x`` released for) and across devices, and returns the stored release cast to the call's
dtype and moved to its device, never a new charge. A release restored from a state (an unbound one,
known by its fingerprint only) matches inputs in another dtype when they round to the saved ones
(``x.double()`` of a float32 ``x``); call it once in the saved dtype first to use it in a coarser one.

Inference mode. A release may be made under ``torch.inference_mode()`` (Lightning's
``trainer.test/validate/predict``). What the cache keeps is made of ordinary tensors even then, so a
later ordinary call (training on the cached release included) can use it.

Copies in one process. ``copy.deepcopy`` is the in-memory copy of a model that keeps working on the
same data (``best = copy.deepcopy(model)``, ``to_hetero``): it shares the accountant (one ledger) and
the generator (one noise stream), and it keeps the cached release *bound*, i.e. with its exact
in-memory key, which it **shares** with the original instead of duplicating it (the key tensors are
private copies that nothing writes in place). So a deep copy never makes a second copy of the
private graph or of node-level features, and it cannot carry them anywhere a pickle could not: a
``pickle``, ``torch.save`` or ``state_dict`` of the copy holds exactly what one of the original
holds. What else a module keeps in memory to run (the propagation ``PerturbedAPPRConv`` caches) is
shared the same way and never pickled; solver diagnostics and per-example gradients are neither
copied nor pickled.
"""
from __future__ import annotations

import copy
import hashlib
import math
import warnings
from typing import Any, Mapping, Optional, Sequence

import torch
from torch import Tensor

from ..accounting import PrivacyAccountant, PrivacyEvent, charge

__all__ = ["CachedRelease", "PersistentRelease", "fingerprint"]

_FORMAT = "pyg_private.cached_release"
_VERSION = 1

Key = tuple[Optional[Tensor], ...]


def fingerprint(public: Key, meta: Sequence[Any]) -> str:
    """SHA-256 (hex) of the public inputs ``public`` (values, shapes and dtypes) and the public sizes
    and names ``meta``. Never pass private data: the digest is stored in the layer's state."""
    h = hashlib.sha256()
    h.update(repr(tuple(meta)).encode())
    for t in public:
        if t is None:
            h.update(b"|none")
            continue
        t = t.detach()
        h.update(f"|{tuple(t.shape)}|{t.dtype}|".encode())
        if t.numel():
            h.update(t.reshape(-1).contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _same(a: Optional[Tensor], b: Optional[Tensor]) -> bool:
    """Equal tensors; index arrays of different integer dtypes (an int32 CSR and the int64 arrays of
    the same graph) compare by value, floating ones must share their dtype."""
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape:
        return False
    if a.dtype != b.dtype:
        integral = all(not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool for t in (a, b))
        return integral and torch.equal(a.long(), b.to(a.device).long())
    return torch.equal(a, b.to(a.device))


_FLOAT_DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def _same_input(saved: Optional[Tensor], new: Optional[Tensor]) -> bool:
    """:func:`_same`, and floating tensors of two dtypes that are the same values: one is the other
    cast (``x.double()`` or ``x.half()`` of the saved ``x``), so a release for one is post-processing
    for the other."""
    if saved is None or new is None or saved.dtype == new.dtype or saved.shape != new.shape:
        return _same(saved, new)
    if not (saved.is_floating_point() and new.is_floating_point()):
        return _same(saved, new)
    new = new.to(saved.device)
    return torch.equal(saved.to(new.dtype), new) or torch.equal(new.to(saved.dtype), saved)


def _same_meta(saved: Sequence[Any], new: Sequence[Any]) -> bool:
    """Equal sizes and names; a floating dtype may differ (see :func:`_same_input`)."""
    return len(saved) == len(new) and all(
        a == b or (isinstance(a, str) and isinstance(b, str) and a in _FLOAT_DTYPES and b in _FLOAT_DTYPES)
        for a, b in zip(saved, new))


def _in_saved_dtype(public: Key, meta: tuple, saved_meta: tuple) -> tuple[Key, tuple]:
    """``public`` and ``meta`` with each floating dtype of ``meta`` that differs from the saved one
    replaced by it (the floating tensors of that dtype cast to it): what a call in the saved dtype
    would fingerprint."""
    change = {b: _FLOAT_DTYPES[a] for a, b in zip(saved_meta, meta)
              if a != b and isinstance(b, str) and b in _FLOAT_DTYPES}
    public = tuple(t.to(change[str(t.dtype)]) if t is not None and str(t.dtype) in change else t for t in public)
    meta = tuple(saved if isinstance(new, str) and new in change else new for saved, new in zip(saved_meta, meta))
    return public, meta


def _keep(t: Optional[Tensor]) -> Optional[Tensor]:
    """A private copy of ``t`` for the cache: an ordinary tensor, also under ``torch.inference_mode()``."""
    if t is None:
        return None
    with torch.inference_mode(False):
        return t.detach().clone()


class CachedRelease:
    """One release kept for reuse: the noisy output, the key it is reused for, and its cost.

    In memory the key is exact: the public inputs and the private graph (``public`` and
    ``private``, kept as copies, as :class:`~torch_geometric.nn.conv.GCNConv` keeps its normalised
    graph). :meth:`persisted` drops both and keeps only the public fingerprint; such a release is
    *unbound* until :meth:`matches` binds it to the first call whose public fingerprint agrees.
    """

    def __init__(self, release: Tensor, *, public: Optional[Key], private: Optional[Key], meta: Sequence[Any],
                 event: Optional[PrivacyEvent], charged: bool, granularity: Optional[float] = None,
                 digest: Optional[str] = None) -> None:
        self.release = release
        self.public = public
        self.private = private
        self.meta = tuple(meta)
        self.event = event
        self.charged = bool(charged)
        self.granularity = granularity
        self._digest = digest

    @property
    def digest(self) -> str:
        """The public fingerprint (computed once)."""
        if self._digest is None:
            if self.public is None:  # pragma: no cover - an unbound release always carries its digest
                raise RuntimeError("an unbound cached release has lost its fingerprint")
            self._digest = fingerprint(self.public, self.meta)
        return self._digest

    @property
    def bound(self) -> bool:
        """Whether the release knows the graph it is for (always in memory; after a load, once used)."""
        return self.private is not None

    def matches(self, public: Key, private: Key, meta: Sequence[Any]) -> bool:
        """Whether a call with these inputs may reuse the release; an unbound release whose public
        fingerprint agrees is bound to ``private`` (and to ``public``) here."""
        meta = tuple(meta)
        if not _same_meta(self.meta, meta):
            return False
        if self.public is not None:
            if len(public) != len(self.public) or not all(_same_input(a, b) for a, b in zip(self.public, public)):
                return False
        elif fingerprint(public, meta) != self.digest and (
                meta == self.meta or fingerprint(*_in_saved_dtype(public, meta, self.meta)) != self.digest):
            return False
        if self.private is not None:
            return len(private) == len(self.private) and all(_same_input(a, b)
                                                             for a, b in zip(self.private, private))
        self.public = tuple(_keep(t) for t in public)
        self.private = tuple(_keep(t) for t in private)
        return True

    def persisted(self) -> "CachedRelease":
        """The same release without the raw inputs (what a pickle or a state dict may hold)."""
        return CachedRelease(self.release, public=None, private=None, meta=self.meta, event=self.event,
                             charged=self.charged, granularity=self.granularity, digest=self.digest)

    def to_state(self) -> dict[str, Any]:
        return {"release": self.release.detach(), "fingerprint": self.digest, "meta": list(self.meta),
                "event": None if self.event is None else self.event.to_dict(), "charged": self.charged,
                "granularity": self.granularity}

    def __getstate__(self) -> dict[str, Any]:  # pickling one directly: never the raw inputs
        return self.persisted().__dict__.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> "CachedRelease":
        # in memory the copy keeps the exact key, *shared* with the original rather than duplicated:
        # the key tensors are private copies that nothing writes in place (`matches` rebinds them), so
        # a deep copy never makes a second copy of the private graph; pickling either drops it
        new = CachedRelease.__new__(CachedRelease)
        memo[id(self)] = new
        state = self.__dict__.copy()
        key = {k: state.pop(k) for k in ("public", "private")}
        new.__dict__.update(copy.deepcopy(state, memo))
        new.__dict__.update(key)
        return new

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class PersistentRelease:
    """Mixin for the private modules with a ``cached`` release (``self._cache``), a privacy ``event``,
    an optional ``accountant`` and ``generator``. It provides

    * ``get_extra_state`` / ``set_extra_state``: the cached release in ``state_dict`` (see the
      module notes for what is stored), so that a reloaded model reuses it without a new charge;
      a state made under other privacy settings raises;
    * ``__deepcopy__``: the copy shares the accountant and the generator (one ledger for the real
      data; no duplicated noise stream) and keeps the in-memory cache, its key shared with the
      original, not duplicated (see the module notes);
    * ``__getstate__`` (``pickle``, ``torch.save(module)``): the cache without the raw inputs, and no
      generator state;
    * ``__prepare_scriptable__``: a clear error from ``torch.jit.script``;
    * ``forget_release()``: drop the cached release (``reset_parameters()`` keeps it: see the module
      notes).

    A host implements ``_release_settings()`` (the settings a release is valid for) and sets
    ``_release_unit`` (the accountant unit it charges).
    """

    accountant: Optional[PrivacyAccountant]
    cached: bool
    generator: Optional[torch.Generator]
    _cache: Optional[CachedRelease]

    _JIT_REASON = (
        "{name} cannot be compiled by TorchScript (torch.jit.script): a TorchScript module runs without "
        "Python, but every release must first register its privacy event with the Python accountant "
        "(PrivacyAccountant, which enforces the budget before any noise is drawn) and draws its noise from "
        "exact integer samplers in Python (256-bit alias tables, ChaCha20 keyed from the OS); "
        "the graph argument is also a union of edge_index, SparseTensor and torch.sparse. Marking those "
        "calls torch.jit.ignore would leave a module that cannot be saved without Python, i.e. nothing "
        "gained. Use torch.compile (supported: the release runs eagerly and is charged once per new "
        "release), or script the rest of your model on the cached release: out = layer(x, edge_index) once, "
        "then a scripted head on `out`."
    )

    # ------------------------------------------------------------- host hooks
    @property
    def _release_unit(self) -> str:
        return "edge"

    def _release_settings(self) -> dict[str, Any]:  # pragma: no cover - implemented by hosts
        raise NotImplementedError

    # ------------------------------------------------------------- the cache
    def forget_release(self) -> None:
        """Drop the cached release: the next forward is a new, charged release. (``reset_parameters()``
        keeps it: a release is paid data, not a parameter.) Call it before using a loaded model on a
        graph other than the one it was released for."""
        self._cache = None

    @property
    def has_release(self) -> bool:
        """Whether a cached release is held (a later call with the same inputs reuses it at no cost)."""
        return self._cache is not None

    def _cached_release(self, public: Key, private: Key, meta: Sequence[Any], *, device: torch.device,
                        dtype: Optional[torch.dtype]) -> Optional[Tensor]:
        """The cached release for these inputs (a copy on ``device`` in ``dtype``, default the
        release's own), or ``None``.

        A release that no accountant recorded (made without one, or restored from such a state) is
        registered with the layer's accountant now, before it is returned."""
        entry = self._cache
        if not self.cached or entry is None or not entry.matches(public, private, meta):
            return None
        if not entry.charged and entry.event is not None:
            charge(self.accountant, entry.event, self)  # raises (returns nothing) past the budget
            entry.charged = self.accountant is not None
        return entry.release.to(device=device, dtype=dtype or entry.release.dtype, copy=True)

    def _keep_release(self, release: Tensor, public: Key, private: Key, meta: Sequence[Any],
                      event: Optional[PrivacyEvent], granularity: Optional[float] = None) -> None:
        """Cache a release made (and charged) just now. This runs after the charge: when the copies
        cannot be made (out of memory), the release is still returned to the caller, uncached, with a
        warning, rather than lost after it was paid for."""
        if not self.cached:
            return
        try:
            self._cache = CachedRelease(_keep(release), public=tuple(_keep(t) for t in public),
                                        private=tuple(_keep(t) for t in private), meta=meta, event=event,
                                        charged=event is not None and self.accountant is not None,
                                        granularity=granularity)
        except MemoryError as error:  # torch.OutOfMemoryError is a RuntimeError: named below
            self._uncached(error)
        except RuntimeError as error:
            if not isinstance(error, getattr(torch, "OutOfMemoryError", ())) and "out of memory" not in str(error):
                raise
            self._uncached(error)

    def _uncached(self, error: BaseException) -> None:
        self._cache = None
        warnings.warn(f"{type(self).__name__}: the release was returned but could not be cached ({error}); the next "
                      "call with the same inputs is a new, charged release", RuntimeWarning, stacklevel=3)

    # ------------------------------------------------------------- state dict
    def get_extra_state(self) -> dict[str, Any]:
        """The cached release and its public record (see the module notes); no private data."""
        state: dict[str, Any] = {"format": _FORMAT, "version": _VERSION, "layer": type(self).__name__,
                                 "unit": self._release_unit, "settings": _plain(self._release_settings())}
        state["release"] = None if not self._writable(self._cache) else self._cache.to_state()
        return state

    def set_extra_state(self, state: Any) -> None:
        """Restore a cached release saved by :meth:`get_extra_state` (unbound until first used).

        Raises:
            ValueError: the state is not a cached release of this class, or was made under other
                privacy settings (a release is only valid for the settings it was charged under).
        """
        name = type(self).__name__
        if not isinstance(state, Mapping) or state.get("format") != _FORMAT:
            raise ValueError(f"{name}: the '_extra_state' entry is not a pyg_private cached release")
        if state.get("version") != _VERSION:
            raise ValueError(f"{name}: unsupported cached-release state version {state.get('version')!r}")
        if state.get("layer") != name:
            raise ValueError(f"{name}: the state holds a release of {state.get('layer')!r}, not of {name}")
        saved = state.get("release")
        if saved is None:
            self._cache = None
            return
        settings, ours = state.get("settings") or {}, _plain(self._release_settings())
        differ = [k for k in sorted(set(settings) | set(ours)) if not _equal(settings.get(k), ours.get(k))]
        if differ or state.get("unit") != self._release_unit:
            shown = ", ".join(f"{k}={settings.get(k)!r} (this layer: {ours.get(k)!r})" for k in differ) or \
                f"unit={state.get('unit')!r} (this layer: {self._release_unit!r})"
            raise ValueError(
                f"{name}: the saved release was made under other privacy settings: {shown}. A release is "
                "only valid for the settings it was charged under. Build the layer with the saved settings, or "
                "drop this layer's '_extra_state' entry from the state dict and load with strict=False: its "
                "next forward then releases anew (a new charge).")
        release = saved.get("release")
        if not isinstance(release, Tensor) or not release.is_floating_point() or release.dim() != 2:
            raise ValueError(f"{name}: the saved release must be a floating-point [N, C] tensor")
        meta = tuple(saved.get("meta") or ())
        if not meta or meta[0] != release.size(0):
            raise ValueError(f"{name}: the saved release has {release.size(0)} rows but its record says "
                             f"{meta[0] if meta else None}")
        event = saved.get("event")
        event = None if event is None else PrivacyEvent.from_dict(event)
        if event is not None and event.unit.value != self._release_unit:
            raise ValueError(f"{name}: the saved release's event is on unit {event.unit.value!r}, not "
                             f"{self._release_unit!r}")
        digest = saved.get("fingerprint")
        if not isinstance(digest, str):
            raise ValueError(f"{name}: the saved release has no input fingerprint")
        self._cache = CachedRelease(_keep(release), public=None, private=None, meta=meta, event=event,
                                    charged=bool(saved.get("charged")), granularity=saved.get("granularity"),
                                    digest=digest)
        if hasattr(self, "granularity"):
            self.granularity = saved.get("granularity")

    # ------------------------------------------------------------- copies
    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        for shared in (getattr(self, "accountant", None), getattr(self, "generator", None)):
            if shared is not None:  # one ledger, one noise stream: shared unless copied elsewhere already
                memo.setdefault(id(shared), shared)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(torch.nn.Module.__getstate__(self), memo))
        return new

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()  # type: ignore[misc]
        cache = state.get("_cache")
        state["_cache"] = cache.persisted() if self._writable(cache) else None
        if state.get("generator") is not None:
            # its state would let whoever holds the file recompute the noise of past releases
            state["generator"] = None
        return state

    def __prepare_scriptable__(self) -> Any:
        raise RuntimeError(self._JIT_REASON.format(name=type(self).__name__))

    def _release_is_public(self) -> bool:
        """Whether the host's releases may be written out (every state is treated as public); a host
        whose guarantee holds per recipient only (personalized PPR) returns ``False``."""
        return True

    def _writable(self, cache: Optional[CachedRelease]) -> bool:
        """A cached release that a ``state_dict`` or a pickle may hold: a noisy one, of a public kind."""
        return not _noise_free(cache) and self._release_is_public()


def _noise_free(cache: Optional[CachedRelease]) -> bool:
    """No cache, or the noise-free output of a non-private reference (``event`` ``None``): never
    written out (it is the exact function of the graph, and recomputing it costs nothing)."""
    return cache is None or cache.event is None


def _plain(value: Any) -> Any:
    """Settings as plain Python values (what ``torch.load(weights_only=True)`` accepts)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, torch.dtype):
        return str(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return repr(value)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b
