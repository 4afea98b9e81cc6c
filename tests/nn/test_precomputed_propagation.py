"""PrecomputedPropagation: one private release for the whole training run, a trainable head, and the
module protocols (deepcopy, pickle, state_dict) without a second charge."""
import copy
import io
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import APPNP, MLP, GCNConv
from torch_geometric.utils import to_undirected

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.nn import (ContractiveGraphLayer, GAPAggregation, PerturbedAPPRConv, PrecomputedPropagation,
                            precompute_propagation)

N, F_IN, C = 12, 4, 3


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def ring(n, chord=False):
    i = torch.arange(n)
    ei = torch.stack([i, (i + 1) % n])
    if chord:
        ei = torch.cat([ei, torch.tensor([[0], [n // 2]])], dim=1)
    return to_undirected(ei, num_nodes=n)


def features(seed=0):
    return F.normalize(torch.randn(N, F_IN, generator=torch.Generator().manual_seed(seed)), dim=-1)


def layer(acct, **kwargs):
    return ContractiveGraphLayer(K=2, contraction=0.9, min_degree=0, epsilon=1.0, delta=1e-5, accountant=acct,
                                 generator=torch.Generator().manual_seed(0), **kwargs)


def model_of(acct, include_input=True, **kwargs):
    torch.manual_seed(0)
    width = 2 * F_IN if include_input else F_IN
    return PrecomputedPropagation(layer(acct, **kwargs), MLP([width, 8, C], dropout=0.5, norm=None),
                                  include_input=include_input)


def train_epochs(model, x, ei, y, epochs):
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(x, ei), y).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            model(x, ei)


def test_one_event_for_a_whole_training_run():
    acct = PrivacyAccountant()
    model = model_of(acct)
    x, ei, y = features(), ring(N), torch.arange(N) % C
    assert len(acct.events) == 0  # nothing is released before the first forward
    out = model(x, ei)
    assert out.shape == (N, C) and len(acct.events) == 1
    train_epochs(model, x, ei, y, 30)  # 30 training and 30 evaluation forwards
    assert len(acct.events) == 1
    assert acct.epsilon("edge", 1e-5) == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("include_input", [True, False])
def test_the_layer_runs_once_for_the_same_tensors_and_its_cache_answers_for_equal_ones(include_input):
    acct = PrivacyAccountant()
    model = model_of(acct, include_input=include_input)
    calls = []
    model.propagation.register_forward_hook(lambda *args: calls.append(1))
    x, ei = features(), ring(N)
    for _ in range(5):
        model(x, ei)
    assert len(calls) == 1  # the same tensors: not even the layer's graph check runs again
    model(x.clone(), ei.clone())  # equal content, new objects: the layer's cache, no new release
    assert len(calls) == 2 and len(acct.events) == 1
    x.mul_(1.0)  # modified in place (same values): looked up again, still no new release
    model(x, ei)
    assert len(calls) == 3 and len(acct.events) == 1


def test_gradients_reach_the_head_only():
    acct = PrivacyAccountant()
    model = model_of(acct)
    x, ei, y = features(), ring(N), torch.arange(N) % C
    model.train()
    F.cross_entropy(model(x, ei), y).backward()
    grads = [p.grad for p in model.head.parameters()]
    assert grads and all(g is not None and bool(g.abs().sum() > 0) for g in grads)
    assert list(model.propagation.parameters()) == []
    assert not model.released(x, ei).requires_grad


def test_head_input_is_x_and_the_release_or_the_release_alone():
    acct = PrivacyAccountant()
    x, ei = features(), ring(N)
    both = model_of(acct).head_input(x, ei)
    assert both.shape == (N, 2 * F_IN) and torch.equal(both[:, :F_IN], x)
    z = model_of(PrivacyAccountant(), include_input=False).head_input(x, ei)
    assert z.shape == (N, F_IN)
    assert bool((z.norm(dim=-1) <= 1.0 + 1e-6).all())  # the layer's projected rows


def test_a_different_graph_or_input_is_a_new_charged_release():
    acct = PrivacyAccountant()
    model = model_of(acct)
    x = features()
    first = model.released(x, ring(N))
    second = model.released(x, ring(N, chord=True))
    assert len(acct.events) == 2 and not torch.equal(first, second)
    model.released(features(seed=1), ring(N, chord=True))  # other (public) features: a new release too
    assert len(acct.events) == 3


def test_input_requiring_grad_in_training_mode_is_refused_before_any_charge():
    acct = PrivacyAccountant()
    model = model_of(acct)
    encoder = torch.nn.Linear(F_IN, F_IN)
    x, ei = features(), ring(N)
    model.train()
    with pytest.raises(ValueError, match=r"requires grad.*encoder\(x\)\.detach\(\)"):
        model(encoder(x), ei)
    assert len(acct.events) == 0
    frozen = encoder(x).detach()
    model(frozen, ei)  # the frozen encoder's output: one release
    assert len(acct.events) == 1
    frozen.requires_grad_()  # the same tensor, now requiring grad: still refused, cache or not
    with pytest.raises(ValueError, match="requires grad"):
        model(frozen, ei)
    model.eval()
    assert model(frozen, ei).shape == (N, C) and len(acct.events) == 1  # evaluation: the cached release
    with pytest.raises(ValueError, match="floating-point"):  # integer features cannot be concatenated
        model(torch.ones(N, F_IN, dtype=torch.long), ei)
    assert len(acct.events) == 1


def test_reset_parameters_keeps_the_release_forget_release_forgets_it():
    acct = PrivacyAccountant()
    model = model_of(acct)
    x, ei = features(), ring(N)
    z = model.released(x, ei).clone()
    before = [p.detach().clone() for p in model.head.parameters()]
    model.reset_parameters()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.head.parameters()))
    assert torch.equal(model.released(x, ei), z) and len(acct.events) == 1
    model.forget_release()
    model.released(x, ei)
    assert len(acct.events) == 2
    model.clear_release()  # the former name
    model.released(x, ei)
    assert len(acct.events) == 3


def _trained(acct):
    model = model_of(acct)
    x, ei, y = features(), ring(N), torch.arange(N) % C
    train_epochs(model, x, ei, y, 5)
    model.eval()
    return model, x, ei


def test_deepcopy_reuses_the_release_and_shares_the_accountant():
    acct = PrivacyAccountant()
    model, x, ei = _trained(acct)
    best = copy.deepcopy(model)
    with torch.no_grad():
        assert torch.equal(best(x, ei), model(x, ei))
    assert len(acct.events) == 1
    best.released(x, ring(N, chord=True))  # a new release by the copy lands in the same ledger
    assert len(acct.events) == 2


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_pickled_model_reloads_without_a_new_charge(how):
    acct = PrivacyAccountant()
    model, x, ei = _trained(acct)
    if how == "pickle":
        loaded = pickle.loads(pickle.dumps(model))
    else:
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
    assert loaded._last is None
    with torch.no_grad():
        assert torch.equal(loaded(x, ei), model(x, ei))
    assert len(loaded.accountant.events) == 1 and len(acct.events) == 1


def test_state_dict_round_trip_reloads_without_a_new_charge():
    acct = PrivacyAccountant()
    model, x, ei = _trained(acct)
    fresh_acct = PrivacyAccountant()
    fresh = model_of(fresh_acct)
    fresh.load_state_dict(model.state_dict())
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(fresh(x, ei), model(x, ei))
    assert len(fresh_acct.events) == 0 and len(acct.events) == 1


def test_gap_aggregation_and_the_functional_form():
    acct = PrivacyAccountant()
    gap = GAPAggregation(2, epsilon=1.0, delta=1e-5, accountant=acct, generator=torch.Generator().manual_seed(0))
    x, ei = features(), ring(N)
    z = precompute_propagation(gap, x.requires_grad_(), ei)
    assert z.shape == (N, 3 * F_IN) and not z.requires_grad and len(acct.events) == 1
    both = precompute_propagation(gap, x, ei, include_input=True)  # the layer's cache: free
    assert both.shape == (N, 4 * F_IN) and torch.equal(both[:, F_IN:], z) and len(acct.events) == 1
    model = PrecomputedPropagation(gap, torch.nn.Linear(4 * F_IN, C))
    assert model(x.detach(), ei).shape == (N, C) and len(acct.events) == 1


def test_a_non_private_propagation_gives_the_reference():
    x, ei = features(), ring(N)
    model = PrecomputedPropagation(APPNP(K=2, alpha=0.1), torch.nn.Linear(2 * F_IN, C))
    assert model.accountant is None
    assert torch.allclose(model.released(x, ei), APPNP(K=2, alpha=0.1)(x, ei))


def test_bad_arguments_raise_with_guidance():
    acct = PrivacyAccountant()
    head = torch.nn.Linear(2 * F_IN, C)
    with pytest.raises(ValueError, match="trainable parameters"):
        PrecomputedPropagation(GCNConv(F_IN, F_IN), head)
    with pytest.raises(ValueError, match="cached=True"):
        PrecomputedPropagation(layer(acct, cached=False), head)
    with pytest.raises(TypeError, match="objective perturbation"):
        PrecomputedPropagation(PerturbedAPPRConv(in_channels=F_IN, out_channels=C, alpha=0.4, steps=(2,),
                                                 epsilon=1.0, delta=1e-5), head)
    with pytest.raises(TypeError, match="head"):
        PrecomputedPropagation(layer(acct), "mlp")
    with pytest.raises(TypeError, match="include_input"):
        PrecomputedPropagation(layer(acct), head, include_input=1)
    model = PrecomputedPropagation(layer(acct), head)
    with pytest.raises(ValueError, match="edge_weight"):
        model(features(), ring(N), torch.ones(ring(N).size(1)))
    with pytest.raises(ValueError, match=r"\[N, F\]"):
        model(torch.ones(N), ring(N))
    assert len(acct.events) == 0
    assert "include_input=True" in repr(model) and "ContractiveGraphLayer" in repr(model)
