"""Every torch / PyG module protocol on every private layer, before and after a release: the cached
release survives ``state_dict``, ``deepcopy``, ``pickle`` and ``torch.save`` without a new charge and
without carrying the private graph; settings that differ refuse the state; ``cached`` defaults to
True everywhere; ``repr`` shows the privacy settings and the unit; ``torch.compile`` works and
``torch.jit.script`` refuses with the reason."""
from __future__ import annotations

import copy
import io
import pickle
import warnings
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from pyg_private import PrivacyAccountant
from pyg_private.accounting import PrivacyBudgetExceeded, UntrackedPrivacyWarning
from pyg_private.nn import ContractiveGraphLayer, DPPushFlowCap, EdgeFlippingPPR, GAPAggregation, NoisyPPRDiffusion

N = 10


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def ring(n: int = N, step: int = 1) -> torch.Tensor:
    src = torch.arange(n)
    ei = torch.stack([src, (src + step) % n])
    return torch.cat([ei, ei.flip(0)], dim=1)


RING = ring()
CHORD = torch.cat([RING, torch.tensor([[0, 5], [5, 0]])], dim=1)  # one more edge: a neighbouring graph
X = F.normalize(torch.rand(N, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
X_OTHER = F.normalize(torch.rand(N, 3, generator=torch.Generator().manual_seed(1)), dim=-1)


@dataclass
class Spec:
    name: str
    make: Callable[..., torch.nn.Module]  # make(accountant=..., **settings)
    call: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]  # call(layer, graph, public input)
    other_settings: dict
    unit: str = "edge"


def _features(layer, graph, public):
    return layer(public, graph)


def _seeds(layer, graph, public):
    return layer(edge_index=graph, seed_index=public, num_nodes=N)


SEEDS, SEEDS_OTHER = torch.tensor([0, 3]), torch.tensor([1, 3])

SPECS = [
    Spec("cgl_edge", lambda **kw: ContractiveGraphLayer(2, 0.9, **{"min_degree": 1, "epsilon": 1.0, "delta": 1e-5,
                                                                  **kw}),
         _features, {"epsilon": 2.0}),
    Spec("cgl_node", lambda **kw: ContractiveGraphLayer(2, 0.9, **{"level": "node", "min_degree": 0, "max_degree": 3,
                                                                  "num_nodes": N, "noise_multiplier": 2.0, **kw}),
         _features, {"max_degree": 4}, unit="node"),
    Spec("gap", lambda **kw: GAPAggregation(**{"K": 2, "epsilon": 1.0, "delta": 1e-5, **kw}), _features, {"K": 3}),
    Spec("noisy_ppr", lambda **kw: NoisyPPRDiffusion(0.2, 5, 1e-2, **{"noise_scale": 1e-3, **kw}), _seeds,
         {"noise_scale": 2e-3}),
    Spec("push_flow", lambda **kw: DPPushFlowCap(**{"alpha": 0.2, "num_iterations": 5, "eta": 1e-2,
                                                    "noise_scale": 1e-3, **kw}), _seeds, {"eta": 2e-2}),
    Spec("edge_flipping", lambda **kw: EdgeFlippingPPR(0.2, 5, **{"epsilon": 1.0, **kw}), _seeds,
         {"epsilon": 2.0}),
]
IDS = [s.name for s in SPECS]


def public_inputs(spec: Spec) -> tuple[torch.Tensor, torch.Tensor]:
    """An input and another one that a saved state can tell apart: at node level the features are
    private, so only their shape and dtype are public (fingerprinted)."""
    if spec.call is _seeds:
        return SEEDS, SEEDS_OTHER
    return (X, X_OTHER) if spec.unit == "edge" else (X, F.normalize(X[:, :2], dim=-1))


def released(spec: Spec, acct: PrivacyAccountant, **kw) -> tuple[torch.nn.Module, torch.Tensor]:
    layer = spec.make(accountant=acct, **kw)
    out = spec.call(layer, RING, public_inputs(spec)[0])
    assert len(acct) == 1
    return layer, out


def saved(obj) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


# ----------------------------------------------------------------------------- defaults and repr
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_cached_is_the_default_and_repr_shows_the_privacy_settings(spec):
    layer = spec.make()
    assert layer.cached is True
    text = repr(layer)
    assert f"unit={spec.unit!r}" in text and "cached=True" in text and "sampler='safe'" in text
    if getattr(layer, "epsilon", None) is not None:
        assert f"epsilon={layer.epsilon:g}" in text


def test_repr_is_pinned():
    cgl = ContractiveGraphLayer(10, 0.9, min_degree=1, epsilon=1.0, delta=1e-5)
    assert repr(cgl) == (
        "ContractiveGraphLayer(K=10, contraction=0.9, alpha1=1, beta=0, level='edge', min_degree=1, "
        f"noise_multiplier={cgl.noise_multiplier:.6g}, epsilon=1, delta=1e-05, accounting='convergent', "
        "unit='edge', sampler='safe', cached=True)")
    node = ContractiveGraphLayer(2, 0.5, level="node", min_degree=0, max_degree=3, num_nodes=N, noise_multiplier=2.0,
                                 cached=False)
    assert repr(node) == (
        "ContractiveGraphLayer(K=2, contraction=0.5, alpha1=1, beta=0, level='node', min_degree=0, max_degree=3, "
        "num_nodes=10, noise_multiplier=2, accounting='convergent', unit='node', sampler='safe', cached=False)")
    gap = GAPAggregation(2, epsilon=1.0, delta=1e-5)
    assert repr(gap) == (f"GAPAggregation(K=2, noise_multiplier={gap.noise_multiplier:.6g}, epsilon=1, delta=1e-05, "
                         "unit='edge', sampler='safe', cached=True)")
    flip = EdgeFlippingPPR(epsilon=1.0)
    assert repr(flip) == (
        f"EdgeFlippingPPR(alpha=0.2, num_iterations=100, flip_probability={flip.flip_probability:.6g}, epsilon=1, "
        "personalized=False, unit='edge', sampler='safe', cached=True)")


# ----------------------------------------------------------------------------- state_dict
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_state_dict_reload_reuses_the_release_without_a_charge(spec):
    layer, out = released(spec, PrivacyAccountant())
    buf = saved(layer.state_dict())
    acct = PrivacyAccountant()
    fresh = spec.make(accountant=acct)
    fresh.load_state_dict(torch.load(buf))  # weights_only: the state is plain data and tensors
    public, other = public_inputs(spec)
    assert torch.equal(spec.call(fresh, RING, public), out) and len(acct) == 0
    assert torch.equal(spec.call(fresh, RING, public), out) and len(acct) == 0
    # bound to that graph now: a neighbouring graph is a new, charged release
    assert not torch.equal(spec.call(fresh, CHORD, public), out) and len(acct) == 1
    # another public input is a new release straight after loading, too
    fresh.load_state_dict(torch.load(saved(layer.state_dict())))
    spec.call(fresh, RING, other)
    assert len(acct) == 2
    if spec.unit == "node":  # private features: a loaded release binds to any of the right shape
        fresh.load_state_dict(torch.load(saved(layer.state_dict())))
        assert torch.equal(spec.call(fresh, RING, X_OTHER), out) and len(acct) == 2


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_the_state_holds_the_release_and_nothing_derived_from_the_graph(spec):
    """The only tensor is the noisy output; the fingerprint is the same for two different graphs with
    the same public inputs (it is no function of the graph), and a pickle holds no raw input."""
    layer, out = released(spec, PrivacyAccountant())
    state = layer.state_dict()["_extra_state"]
    tensors = [v for v in _leaves(state) if isinstance(v, torch.Tensor)]
    noisy = out[:, X.size(1):] if spec.name == "gap" else out  # GAP's X^(0) = normalize(x) is no release
    assert len(tensors) == 1 and torch.equal(tensors[0].to(out.dtype), noisy)
    other = spec.make(accountant=PrivacyAccountant())
    spec.call(other, CHORD, public_inputs(spec)[0])
    other_state = other.state_dict()["_extra_state"]
    assert other_state["release"]["fingerprint"] == state["release"]["fingerprint"]
    assert not torch.equal(other_state["release"]["release"], state["release"]["release"])
    copy_ = pickle.loads(pickle.dumps(layer))
    assert copy_._cache.public is None and copy_._cache.private is None and copy_._cache.bound is False


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_other_privacy_settings_refuse_a_saved_release(spec):
    layer, _ = released(spec, PrivacyAccountant())
    state = layer.state_dict()
    acct = PrivacyAccountant()
    different = spec.make(accountant=acct, **spec.other_settings)
    with pytest.raises(ValueError, match="other privacy settings.*" + next(iter(spec.other_settings))):
        different.load_state_dict(state)
    assert different._cache is None and len(acct) == 0
    # a state without a release carries nothing to protect: it loads into any settings
    different.load_state_dict(spec.make().state_dict())
    assert different._cache is None


def test_a_state_of_another_layer_or_a_malformed_state_raises():
    gap_state = released(SPECS[2], PrivacyAccountant())[0].state_dict()
    cgl = SPECS[0].make()
    with pytest.raises(ValueError, match="release of 'GAPAggregation'"):
        cgl.load_state_dict(gap_state)
    with pytest.raises(ValueError, match="not a pyg_private cached release"):
        cgl.load_state_dict({"_extra_state": {"release": torch.zeros(N, 3)}})
    state = released(SPECS[0], PrivacyAccountant())[0].state_dict()
    state["_extra_state"]["release"]["release"] = torch.zeros(N + 1, 3)
    with pytest.raises(ValueError, match="rows"):
        cgl.load_state_dict(state)


def test_an_untracked_release_is_charged_once_when_reused_with_an_accountant():
    spec = SPECS[0]
    layer = spec.make()  # no accountant: released, untracked
    out = spec.call(layer, RING, X)
    event = layer.state_dict()["_extra_state"]["release"]["event"]
    assert layer.state_dict()["_extra_state"]["release"]["charged"] is False
    acct = PrivacyAccountant()
    fresh = spec.make(accountant=acct)
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(spec.call(fresh, RING, X), out) and len(acct) == 1
    assert acct.events[0].to_dict() == event
    assert torch.equal(spec.call(fresh, RING, X), out) and len(acct) == 1
    # past the budget nothing is returned
    full = PrivacyAccountant(budget={"edge": (0.5, 1e-5)})
    capped = spec.make(accountant=full)
    capped.load_state_dict(layer.state_dict())
    with pytest.raises(PrivacyBudgetExceeded):
        spec.call(capped, RING, X)
    assert len(full) == 0


def test_uncached_layers_save_no_release_and_charge_every_call():
    acct = PrivacyAccountant()
    layer = SPECS[0].make(accountant=acct, cached=False)
    a, b = SPECS[0].call(layer, RING, X), SPECS[0].call(layer, RING, X)
    assert not torch.equal(a, b) and len(acct) == 2
    assert layer.state_dict()["_extra_state"]["release"] is None


# ----------------------------------------------------------------------------- copies
@pytest.mark.parametrize("after_release", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_deepcopy_shares_the_accountant_and_keeps_the_cache(spec, after_release):
    acct = PrivacyAccountant()
    gen = torch.Generator().manual_seed(0)
    layer = spec.make(accountant=acct, generator=gen)
    public = public_inputs(spec)[0]
    out = spec.call(layer, RING, public) if after_release else None
    twin = copy.deepcopy(layer)
    assert twin.accountant is acct and twin.generator is gen
    before = len(acct)
    result = spec.call(twin, RING, public)
    if after_release:
        assert torch.equal(result, out) and len(acct) == before
    else:
        assert len(acct) == before + 1  # the copy's release is in the one ledger
    spec.call(twin, CHORD, public)
    assert len(acct) == before + 2 - after_release


@pytest.mark.parametrize("protocol", ["pickle", "torch.save"])
@pytest.mark.parametrize("after_release", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_pickle_and_torch_save_of_the_module(spec, after_release, protocol):
    acct = PrivacyAccountant()
    layer = spec.make(accountant=acct, generator=torch.Generator().manual_seed(0))
    public = public_inputs(spec)[0]
    out = spec.call(layer, RING, public) if after_release else None
    loaded = pickle.loads(pickle.dumps(layer)) if protocol == "pickle" else \
        torch.load(saved(layer), weights_only=False)
    assert loaded.generator is None  # its state would let the file's holder recompute the noise
    ledger = loaded.accountant
    assert ledger is not acct and len(ledger) == len(acct)
    before = len(ledger)
    result = spec.call(loaded, RING, public)
    if after_release:
        assert torch.equal(result, out) and len(ledger) == before
        spec.call(loaded, CHORD, public)  # bound on first use: another graph is a new release
    assert len(ledger) == before + 1 and len(acct) == int(after_release)


# ----------------------------------------------------------------------------- compile and script
class Head(torch.nn.Module):
    def __init__(self, layer: torch.nn.Module, channels: int) -> None:
        super().__init__()
        self.layer = layer
        self.lin = torch.nn.Linear(channels, 2)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.lin(self.layer(x, edge_index))


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("spec", SPECS[:3], ids=IDS[:3])
def test_torch_compile_runs_the_release_eagerly_and_charges_once_per_release(spec, cached):
    """backend="eager" exercises Dynamo's capture and graph breaks; inductor's C++ compile would take
    seconds per model on CPU (it was run by hand: same outputs and counts)."""
    torch._dynamo.reset()
    acct = PrivacyAccountant()
    layer = spec.make(accountant=acct, cached=cached)
    channels = 3 * (layer.K + 1) if isinstance(layer, GAPAggregation) else 3
    model = Head(layer, channels).eval()
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        outs = [compiled(X, RING) for _ in range(3)]
        eager = model(X, RING)
    if cached:
        assert all(torch.equal(o, outs[0]) for o in outs) and torch.equal(eager, outs[0]) and len(acct) == 1
    else:
        assert not torch.equal(outs[0], outs[1]) and len(acct) == 4  # every call a release, none skipped


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_torch_jit_script_refuses_with_the_reason(spec):
    with pytest.raises(RuntimeError, match="TorchScript.*accountant.*torch.compile"):
        torch.jit.script(spec.make())
    with pytest.raises(RuntimeError, match="cannot be compiled by TorchScript"):
        torch.jit.script(Head(spec.make(), 3))


@pytest.mark.parametrize("make", [
    lambda: ContractiveGraphLayer(2, 0.9, min_degree=1, noise_multiplier=0.0),
    lambda: GAPAggregation(2, noise_multiplier=0.0),
])
def test_the_noise_free_reference_output_is_never_written_out(make):
    """noise_multiplier=0 is the non-private reference: its cached output is the exact function of the
    graph, kept in memory (free to recompute) but never in a state dict or a pickle."""
    layer = make()
    out = layer(X, RING)
    assert torch.equal(layer(X, RING), out) and layer._cache is not None
    assert layer.state_dict()["_extra_state"]["release"] is None
    assert pickle.loads(pickle.dumps(layer))._cache is None
    assert torch.equal(copy.deepcopy(layer)(X, RING), out)


def test_to_hetero_copies_share_the_accountant_after_a_release():
    """to_hetero deep-copies the layer once per relation (and calls reset_parameters(), which keeps the
    release): every copy charges the one ledger, and relation r, whose graph and features are those of
    the release already made, reuses it."""
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import to_hetero

    acct = PrivacyAccountant()
    model = Head(GAPAggregation(1, epsilon=1.0, delta=1e-5, accountant=acct), 6)
    model(X, RING)
    data = HeteroData()
    data["a"].x = X
    data["a", "r", "a"].edge_index = RING
    data["a", "s", "a"].edge_index = ring(step=2)
    hetero = to_hetero(model, data.metadata(), aggr="sum")
    out = hetero(data.x_dict, data.edge_index_dict)
    assert out["a"].shape == (N, 2) and len(acct) == 2  # r: the release of RING again; s: a new one, same ledger
    assert all(layer.accountant is acct for layer in hetero.layer.values())
    hetero(data.x_dict, data.edge_index_dict)
    assert len(acct) == 2  # cached


def test_a_saved_model_reloads_its_head_and_release_without_a_charge():
    """The pattern of a training script: torch.save(model.state_dict()), later a fresh model in a
    new process (a fresh accountant restored from its own state) loads it and predicts for free."""
    acct = PrivacyAccountant()
    model = Head(SPECS[0].make(accountant=acct), 3).eval()
    with torch.no_grad():
        out = model(X, RING)
    buf, ledger = saved(model.state_dict()), acct.state_dict()
    restored = PrivacyAccountant.from_state_dict(ledger)
    fresh = Head(SPECS[0].make(accountant=restored), 3).eval()
    fresh.load_state_dict(torch.load(buf))
    with torch.no_grad():
        assert torch.equal(fresh(X, RING), out)
    assert len(restored) == 1 and restored.events == acct.events
