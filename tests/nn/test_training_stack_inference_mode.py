"""Releases under ``torch.inference_mode()`` (Lightning's default for ``trainer.validate/test/predict``)
and ``torch.no_grad()``, and the order of charge and failure: the sampler's workspace is made before
the charge and holds ordinary tensors only, so a release under inference mode cannot make the next
ordinary one fail after it has been charged, and after the charge no workspace is allocated."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import MLP

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.mechanisms import GaussianMechanism, LaplaceMechanism
from pyg_private.sampling import sampler as sampler_module
from pyg_private.sampling import workspace as _workspace
from pyg_private.nn import (ContractiveGraphLayer, DPPushFlowCap, GAPAggregation, NoisyPPRDiffusion,
                            PrecomputedPropagation, ProGAPAggregation)
from pyg_private.transforms import HDSFeaturePerturb

N = 12
SRC = torch.arange(N)
RING = torch.cat([torch.stack([SRC, (SRC + 1) % N]), torch.stack([(SRC + 1) % N, SRC])], dim=1)
X = F.normalize(torch.rand(N, 3, generator=torch.Generator().manual_seed(0)), dim=-1)


@pytest.fixture(autouse=True)
def _empty_pool(monkeypatch):
    """Every test starts with an empty scratch pool (it lives for the process: another test may have
    filled it)."""
    monkeypatch.setattr(_workspace, "_free", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def _seeds(layer):
    return layer(edge_index=RING, seed_index=torch.tensor([0, 4]), num_nodes=N)


RELEASES = {  # name -> (make(accountant), call(component)); safe sampler, every call a new release
    "laplace": (lambda a: LaplaceMechanism(1.0, epsilon=2.0, accountant=a), lambda m: m(torch.zeros(1000))),
    "gaussian": (lambda a: GaussianMechanism(1.0, epsilon=1.0, delta=1e-5, accountant=a),
                 lambda m: m(torch.zeros(1000))),
    "contractive": (lambda a: ContractiveGraphLayer(2, 0.9, min_degree=1, epsilon=1.0, delta=1e-5, accountant=a,
                                                    cached=False), lambda m: m(X, RING)),
    "gap": (lambda a: GAPAggregation(2, epsilon=1.0, delta=1e-5, accountant=a, cached=False), lambda m: m(X, RING)),
    "progap": (lambda a: ProGAPAggregation(epsilon=1.0, delta=1e-5, accountant=a, cached=False),
               lambda m: m(X, RING)),
    "noisy_ppr": (lambda a: NoisyPPRDiffusion(0.2, 5, 1e-2, noise_scale=1e-3, accountant=a, cached=False), _seeds),
    "push_flow": (lambda a: DPPushFlowCap(alpha=0.2, num_iterations=5, eta=1e-2, noise_scale=1e-3, accountant=a,
                                          cached=False), _seeds),
    "hds": (lambda a: HDSFeaturePerturb(1.0, 1, (-1.0, 1.0), accountant=a, allow_recompose=True),
            lambda m: m(Data(x=X.clone())).x),
}


@pytest.mark.parametrize("name", sorted(RELEASES))
@pytest.mark.parametrize("mode", ["inference_mode", "no_grad"])
def test_a_release_under_inference_mode_or_no_grad_and_the_next_ordinary_one(name, mode):
    make, call = RELEASES[name]
    acct = PrivacyAccountant()
    component = make(acct)
    with getattr(torch, mode)():
        first = call(component)
    second = call(component)  # before: "Inplace update to inference tensor outside InferenceMode", charged
    assert len(acct) == 2 and first.shape == second.shape and not second.is_inference()


def test_a_release_under_inference_mode_is_cached_as_an_ordinary_tensor_usable_for_training():
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(2, 0.9, min_degree=1, epsilon=1.0, delta=1e-5, accountant=acct)
    with torch.inference_mode():
        z_inf = layer(X, RING)
    z = layer(X, RING)
    assert len(acct) == 1 and torch.equal(z, z_inf) and not z.is_inference()
    weight = torch.ones(3, 2, requires_grad=True)
    (z @ weight).sum().backward()  # autograd on the reused release
    assert weight.grad is not None


def _model(acct):
    return PrecomputedPropagation(
        ContractiveGraphLayer(2, 0.9, min_degree=1, epsilon=1.0, delta=1e-5, accountant=acct),
        MLP([6, 8, 2], norm=None))


def test_precomputed_propagation_under_inference_mode_then_training():
    """Lightning's trainer.validate/test/predict run under inference_mode: before, the model crashed with
    'Inference tensors do not track version counter' after the release had been charged."""
    acct = PrivacyAccountant()
    model = _model(acct).eval()
    with torch.inference_mode():
        out = model(X, RING)
        again = model(X, RING)
    assert out.shape == (N, 2) and torch.equal(out, again) and len(acct) == 1
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(2):  # training afterwards, on the same release
        opt.zero_grad()
        F.cross_entropy(model(X, RING), torch.arange(N) % 2).backward()
        opt.step()
    model.eval()
    with torch.inference_mode():
        model(X, RING)
    with torch.no_grad():
        model(X, RING)
    assert len(acct) == 1


def test_precomputed_propagation_on_inference_tensors_made_earlier():
    acct = PrivacyAccountant()
    model = _model(acct).eval()
    with torch.inference_mode():
        x_inf, ei_inf = X.clone(), RING.clone()
    out = model(x_inf, ei_inf)  # inference tensors outside inference mode: answered, not tracked
    assert out.shape == (N, 2) and len(acct) == 1
    assert torch.equal(model(X, RING), out) and len(acct) == 1


@pytest.mark.parametrize("name", ["laplace", "gaussian", "contractive", "gap", "noisy_ppr", "push_flow"])
def test_after_the_charge_no_scratch_buffer_is_allocated(name, monkeypatch):
    """A borrow that would have to allocate (the pool has no free set for it) must not happen after the
    charge: the workspace is reserved before it."""
    make, call = RELEASES[name]
    acct = PrivacyAccountant()
    charged = []
    register = acct.register
    monkeypatch.setattr(acct, "register", lambda event, **kw: (charged.append(True), register(event, **kw))[1])
    real_borrow = sampler_module.borrow

    def borrow(key, factory):
        if charged and not _workspace._free.get(key):
            raise MemoryError(f"a scratch set for {key} allocated after the charge")
        return real_borrow(key, factory)

    monkeypatch.setattr(sampler_module, "borrow", borrow)
    call(make(acct))
    assert len(acct) == 1


@pytest.mark.parametrize("name", ["laplace", "contractive", "gap", "noisy_ppr", "push_flow"])
def test_a_failing_workspace_allocation_raises_before_the_charge(name, monkeypatch):
    make, call = RELEASES[name]
    acct = PrivacyAccountant()

    def out_of_memory(factory):
        raise MemoryError("no memory for the sampler's scratch buffers")

    monkeypatch.setattr(_workspace, "_make", out_of_memory, raising=False)
    with pytest.raises(MemoryError):
        call(make(acct))
    assert len(acct) == 0  # nothing charged for a release that was never returned


def test_a_failure_to_cache_after_the_charge_leaves_the_release_returned(monkeypatch):
    """Caching runs after the charge: out of memory there returns the paid release (uncached, with a
    warning) instead of losing it."""
    from pyg_private.nn import _release_cache

    acct = PrivacyAccountant()
    layer = GAPAggregation(2, epsilon=1.0, delta=1e-5, accountant=acct)

    def out_of_memory(t):
        raise MemoryError("no memory for the cache's copies")

    monkeypatch.setattr(_release_cache, "_keep", out_of_memory)
    with pytest.warns(RuntimeWarning, match="could not be cached"):
        out = layer(X, RING)
    assert out.shape == (N, 9) and len(acct) == 1
