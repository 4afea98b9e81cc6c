"""The private PPR baselines DPPushFlowCap and EdgeFlippingPPR: events, budgets, caching,
exactness in the no-noise limits, personalization, validation and adjacency inputs."""
import math
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import (
    UntrackedPrivacyWarning,
    calibrated_truth_probability,
    push_flow_rdp,
    push_flow_sensitivity,
    randomized_response_rdp,
    truth_probability,
)
from pyg_private.mechanisms import flip_edges
from pyg_private.nn import DPPushFlowCap, EdgeFlippingPPR
from pyg_private.utils import lazy_ppr, push_flow_cap_ppr, simple_undirected

NO_NOISE = dict(noise_scale=1e-300, sampler="float")  # the float path's noise-free limit (no grid fits 1e-300)
NO_FLIP = dict(flip_probability=1e-12)  # q = 1 - 5e-13: no pair flips in practice



@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def _graph(n=40, p=0.12, seed=0):
    torch.manual_seed(seed)
    ei, _ = simple_undirected(erdos_renyi_graph(n, p), n)
    return ei


# ------------------------------------------------------------------ accounting

def test_push_flow_cap_charges_one_event_per_forward_with_the_laplace_curve():
    ei = _graph()
    acct = PrivacyAccountant()
    layer = DPPushFlowCap(noise_scale=1e-5, eta=1e-6, num_iterations=50, accountant=acct)
    layer(edge_index=ei, seed_index=torch.tensor([1, 2, 3]), num_nodes=40)
    layer(edge_index=ei, seed_index=torch.tensor([4]), num_nodes=40)
    assert len(acct) == 2
    kw = dict(noise_scale=1e-5, eta=1e-6, alpha=0.2, num_iterations=50)
    np.testing.assert_allclose(acct.events[0].rdp, push_flow_rdp(layer.orders, num_columns=3, **kw), rtol=1e-15)
    np.testing.assert_allclose(acct.events[1].rdp, push_flow_rdp(layer.orders, **kw), rtol=1e-15)
    e = acct.events[0]
    assert e.unit.value == "edge" and e.mechanism == "dp_push_flow_cap" and e.params["columns"] == 3
    sens = push_flow_sensitivity(eta=1e-6, alpha=0.2, num_iterations=50)
    assert e.params["sensitivity"] == pytest.approx(sens, rel=1e-15)
    assert acct.pure_epsilon("edge") == pytest.approx(4 * sens / 1e-5, rel=1e-12)


def test_push_flow_cap_personalized_charges_the_most_columns_one_seed_receives():
    ei = _graph()
    acct = PrivacyAccountant()
    layer = DPPushFlowCap(noise_scale=1e-5, eta=1e-6, personalized=True, accountant=acct)
    layer(edge_index=ei, seed_index=torch.tensor([3, 3, 5, 3, 7]), num_nodes=40)  # seed 3 receives three columns
    layer(edge_index=ei, seed_index=torch.tensor([0, 1, 2, 4]), num_nodes=40)  # one column each
    kw = dict(noise_scale=1e-5, eta=1e-6, alpha=0.2, num_iterations=100)
    np.testing.assert_allclose(acct.events[0].rdp, push_flow_rdp(layer.orders, num_columns=3, **kw), rtol=1e-15)
    np.testing.assert_allclose(acct.events[1].rdp, push_flow_rdp(layer.orders, num_columns=1, **kw), rtol=1e-15)
    assert acct.events[0].mechanism == "dp_push_flow_cap_personalized"


def test_edge_flipping_charges_one_rr_event_whatever_the_columns():
    ei = _graph()
    for personalized in (False, True):
        acct = PrivacyAccountant()
        layer = EdgeFlippingPPR(epsilon=2.0, personalized=personalized, accountant=acct, num_iterations=20,
                                generator=torch.Generator().manual_seed(0))
        layer(edge_index=ei, seed_index=torch.arange(40), num_nodes=40)
        layer(edge_index=ei, seed_index=torch.tensor([5, 5, 5]), num_nodes=40)
        assert len(acct) == 2
        q = truth_probability(epsilon=2.0)
        for e in acct.events:
            assert e.unit.value == "edge" and e.mechanism == "randomized_response"
            np.testing.assert_allclose(e.rdp, randomized_response_rdp(e.orders, q=q), rtol=1e-15)
        assert acct.pure_epsilon("edge") == pytest.approx(4.0, rel=1e-12)


def test_calibrated_targets_are_met():
    ei = _graph()
    delta = 1 / 333_983
    acct = PrivacyAccountant()
    DPPushFlowCap(epsilon=0.5, delta=delta, accountant=acct)(edge_index=ei, seed_index=[0], num_nodes=40)
    spent = acct.epsilon("edge", delta)
    assert spent <= 0.5 and spent == pytest.approx(0.5, rel=1e-6)
    pure = DPPushFlowCap(epsilon=0.5)  # delta omitted: the pure calibration b = Delta_1 / epsilon
    assert pure.delta == 0.0
    assert pure.noise_scale == pytest.approx(push_flow_sensitivity(eta=1e-6, alpha=0.2, num_iterations=100) / 0.5,
                                             rel=1e-15)
    # epsilon_columns: the target covers that many columns in one release
    acct = PrivacyAccountant()
    DPPushFlowCap(epsilon=0.5, delta=delta, epsilon_columns=4, accountant=acct)(edge_index=ei, seed_index=[0, 1, 2, 3],
                                                                                num_nodes=40)
    assert acct.epsilon("edge", delta) <= 0.5
    acct = PrivacyAccountant()
    flip = EdgeFlippingPPR(epsilon=1.0, delta=1e-3, accountant=acct, num_iterations=5)
    assert flip.q == calibrated_truth_probability(epsilon=1.0, delta=1e-3) > truth_probability(epsilon=1.0)
    flip(edge_index=ei, seed_index=[0, 1], num_nodes=40)
    spent = acct.epsilon("edge", 1e-3)
    assert spent <= 1.0 and spent == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("make", [
    lambda acct, gen: DPPushFlowCap(epsilon=0.6, accountant=acct, generator=gen),
    lambda acct, gen: EdgeFlippingPPR(epsilon=0.6, accountant=acct, generator=gen, num_iterations=5),
    lambda acct, gen: EdgeFlippingPPR(epsilon=0.6, personalized=True, accountant=acct, generator=gen,
                                      num_iterations=5),
])
def test_budget_is_refused_before_anything_is_drawn(make):
    ei = _graph()
    gen = torch.Generator().manual_seed(0)
    acct = PrivacyAccountant(budget={"edge": 1.0})
    layer = make(acct, gen)
    first = layer(edge_index=ei, seed_index=torch.tensor([0]), num_nodes=40)
    state = gen.get_state().clone()
    assert not torch.equal(state, torch.Generator().manual_seed(0).get_state())  # the first call drew
    with pytest.raises(PrivacyBudgetExceeded):
        layer(edge_index=ei, seed_index=torch.tensor([1]), num_nodes=40)
    assert torch.equal(gen.get_state(), state) and len(acct) == 1
    assert first.shape == (40, 1)


@pytest.mark.parametrize("make", [
    lambda acct: DPPushFlowCap(noise_scale=1e-3, eta=1e-3, accountant=acct, cached=True),
    lambda acct: EdgeFlippingPPR(epsilon=1.0, accountant=acct, cached=True, num_iterations=10),
])
def test_cached_release_is_reused_for_identical_inputs_only(make):
    ei = _graph()
    acct = PrivacyAccountant()
    layer = make(acct)
    a = layer(edge_index=ei, seed_index=torch.tensor([0, 1]), num_nodes=40)
    b = layer(edge_index=ei, seed_index=[0, 1], num_nodes=40)
    assert torch.equal(a, b) and len(acct) == 1
    c = layer(edge_index=ei, seed_index=torch.tensor([2]), num_nodes=40)  # another seed set: a new release
    assert len(acct) == 2 and not torch.equal(c[:, 0], a[:, 0])
    layer(edge_index=ei, seed_index=torch.tensor([2]), num_nodes=40)
    assert len(acct) == 2
    layer(edge_index=ei, seed_index=torch.tensor([1, 0]), num_nodes=40)  # order matters: other columns
    assert len(acct) == 3
    layer(edge_index=_graph(seed=1), seed_index=torch.tensor([1, 0]), num_nodes=40)  # another graph
    assert len(acct) == 4
    layer.forget_release()
    layer(edge_index=_graph(seed=1), seed_index=torch.tensor([1, 0]), num_nodes=40)
    assert len(acct) == 5
    # not cached: every call is charged
    layer.cached = False
    layer(edge_index=ei, seed_index=torch.tensor([0, 1]), num_nodes=40)
    layer(edge_index=ei, seed_index=torch.tensor([0, 1]), num_nodes=40)
    assert len(acct) == 7


# ------------------------------------------------------------------ outputs

def test_output_shape_dtype_and_clipping():
    ei = _graph()
    for layer in (DPPushFlowCap(noise_scale=1e-3), EdgeFlippingPPR(epsilon=1.0, num_iterations=5)):
        out = layer(edge_index=ei, seed_index=torch.tensor([0, 3, 3]), num_nodes=40)
        assert out.shape == (40, 3) and out.dtype == torch.get_default_dtype()
        out = layer(edge_index=ei, seed_index=torch.tensor(7), num_nodes=45)  # isolated extra nodes
        assert out.shape == (45, 1)
    loud = DPPushFlowCap(noise_scale=1.0, generator=torch.Generator().manual_seed(0))
    out = loud(edge_index=ei, seed_index=torch.arange(40), num_nodes=40)
    assert float(out.min()) == 0.0 and float(out.max()) == 1.0  # the noise reaches both ends
    assert bool(((out == 0) | (out == 1)).float().mean() > 0.3)
    raw = DPPushFlowCap(noise_scale=1.0, clip_output=False, generator=torch.Generator().manual_seed(0))(
        edge_index=ei, seed_index=torch.arange(40), num_nodes=40)
    assert float(raw.min()) < -1 and float(raw.max()) > 2
    torch.testing.assert_close(raw.clamp(0, 1), out, rtol=0, atol=0)  # same noise, clipped


def test_push_flow_cap_without_noise_is_push_flow_cap_ppr():
    ei = _graph(n=50, p=0.1, seed=2)
    seeds = torch.tensor([0, 9, 9, 49])
    for personalized in (False, True):
        for eta, t in ((1e-3, 100), (1e300, 30)):
            layer = DPPushFlowCap(eta=eta, num_iterations=t, alpha=0.25, personalized=personalized, **NO_NOISE)
            ref = push_flow_cap_ppr(ei, 50, seeds, alpha=0.25, num_iterations=t, eta=eta, personalized=personalized)
            out = layer(edge_index=ei, seed_index=seeds, num_nodes=50)
            torch.testing.assert_close(out, ref.to(out.dtype), rtol=0, atol=0)
    # in float64 too (the computation is float64; only the return is cast)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = DPPushFlowCap(eta=1e-3, personalized=True, **NO_NOISE)(edge_index=ei, seed_index=seeds,
                                                                     num_nodes=50)
        ref = push_flow_cap_ppr(ei, 50, seeds, alpha=0.2, num_iterations=100, eta=1e-3, personalized=True)
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-300)
    finally:
        torch.set_default_dtype(old)


def test_edge_flipping_without_flips_is_exact_lazy_ppr():
    ei = _graph(n=50, p=0.1, seed=3)
    seeds = torch.tensor([0, 11, 11, 49])
    for personalized in (False, True):
        layer = EdgeFlippingPPR(alpha=0.3, num_iterations=40, personalized=personalized,
                                generator=torch.Generator().manual_seed(0), **NO_FLIP)
        assert layer.q == pytest.approx(1 - 5e-13, abs=1e-16)
        out = layer(edge_index=ei, seed_index=seeds, num_nodes=50)
        ref = lazy_ppr(ei, 50, seed_index=seeds, alpha=0.3, num_iterations=40)
        torch.testing.assert_close(out, ref.to(out.dtype), rtol=0, atol=0)


def _restored(released, truth, v):
    away = (released[0] != v) & (released[1] != v)
    own = (truth[0] == v) | (truth[1] == v)
    return torch.cat([released[:, away], truth[:, own]], dim=1)


def test_personalized_edge_flipping_restores_the_seed_row():
    # a path 0-1-2-3-4-5 and an isolated node 6; q ~ 0.5, so the release is far from the truth
    truth = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    n, seeds = 7, torch.tensor([0, 2, 6, 2])
    true_nbrs = {0: {1}, 2: {1, 3}, 6: set()}
    differs = 0
    for s in range(30):
        # one step from e_v: (1-b) e_v + b/2 e_v + b/2 A e_v / d_v, so the support off v is v's neighbours
        personal = EdgeFlippingPPR(epsilon=0.05, num_iterations=1, personalized=True,
                                   generator=torch.Generator().manual_seed(s))(edge_index=truth, seed_index=seeds,
                                                                              num_nodes=n)
        plain = EdgeFlippingPPR(epsilon=0.05, num_iterations=1,
                                generator=torch.Generator().manual_seed(s))(edge_index=truth, seed_index=seeds,
                                                                           num_nodes=n)
        for c, v in enumerate(seeds.tolist()):
            support = {u for u in torch.nonzero(personal[:, c]).view(-1).tolist() if u != v}
            assert support == true_nbrs[v]
            d = len(true_nbrs[v])
            assert float(personal[v, c]) == pytest.approx(0.2 + 0.4, abs=1e-7)
            for u in true_nbrs[v]:
                assert float(personal[u, c]) == pytest.approx(0.4 / d, abs=1e-7)
            differs += int({u for u in torch.nonzero(plain[:, c]).view(-1).tolist() if u != v} != true_nbrs[v])
    assert differs > 20  # without restoring, the seed's row is randomised


def test_personalized_edge_flipping_is_lazy_ppr_on_the_restored_release():
    # the release is reproduced with the same generator seed; column c is lazy PPR of seed c on
    # the release whose row and column seed_index[c] are the truth (many steps, a random graph)
    ei = _graph(n=30, p=0.15, seed=4)
    seeds = torch.tensor([0, 5, 5, 29])
    q = truth_probability(epsilon=0.5)
    layer = EdgeFlippingPPR(epsilon=0.5, num_iterations=15, personalized=True,
                            generator=torch.Generator().manual_seed(8))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = layer(edge_index=ei, seed_index=seeds, num_nodes=30)
    finally:
        torch.set_default_dtype(old)
    released = flip_edges(ei, 30, q, generator=torch.Generator().manual_seed(8))
    assert released.size(1) > 2 * ei.size(1)  # q ~ 0.62: many added pairs
    for c, v in enumerate(seeds.tolist()):
        ref = lazy_ppr(_restored(released, ei, v), 30, seed_index=[v], num_iterations=15)
        torch.testing.assert_close(out[:, c:c + 1], ref, rtol=0, atol=1e-12)
    plain = EdgeFlippingPPR(epsilon=0.5, num_iterations=15, generator=torch.Generator().manual_seed(8))(
        edge_index=ei, seed_index=seeds, num_nodes=30)
    torch.testing.assert_close(plain, lazy_ppr(released, 30, seed_index=seeds, num_iterations=15).float(),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda gen: DPPushFlowCap(noise_scale=1e-3, eta=1e-2, num_iterations=20, generator=gen),
    lambda gen: EdgeFlippingPPR(epsilon=1.0, num_iterations=20, generator=gen),
    lambda gen: EdgeFlippingPPR(epsilon=1.0, num_iterations=20, personalized=True, generator=gen),
])
def test_sparse_inputs_agree_with_edge_index(make):
    n = 25
    ei = _graph(n=n, p=0.2, seed=5)
    ref = make(torch.Generator().manual_seed(5))(edge_index=ei, seed_index=[0, 4], num_nodes=n)
    adj = torch.sparse_coo_tensor(ei, torch.ones(ei.size(1)), (n, n), check_invariants=True)
    for sparse in (adj, adj.to_sparse_csr()):
        out = make(torch.Generator().manual_seed(5))(edge_index=sparse, seed_index=[0, 4])
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
    # an unsorted edge_index is coalesced first: same release
    perm = torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(0))
    shuffled = make(torch.Generator().manual_seed(5))(edge_index=ei[:, perm], seed_index=[0, 4], num_nodes=n)
    torch.testing.assert_close(shuffled, ref, rtol=0, atol=0)
    torch_sparse = pytest.importorskip("torch_sparse")
    st = torch_sparse.SparseTensor.from_edge_index(ei, sparse_sizes=(n, n))
    torch.testing.assert_close(make(torch.Generator().manual_seed(5))(edge_index=st, seed_index=[0, 4]), ref,
                               rtol=0, atol=0)


# ------------------------------------------------------------------ validation and repr

def test_forward_validation():
    ei = _graph()
    for layer in (DPPushFlowCap(noise_scale=1.0), EdgeFlippingPPR(epsilon=1.0)):
        with pytest.raises(ValueError, match="seed_index"):
            layer(torch.ones(40, 1), ei, seed_index=[0])  # x is refused
        with pytest.raises(ValueError, match="seed_index"):
            layer(edge_index=ei)
        with pytest.raises(ValueError, match="edge_index"):
            layer(seed_index=[0])
        with pytest.raises(ValueError, match="seed_index"):
            layer(edge_index=ei, seed_index=[40], num_nodes=40)
        with pytest.raises(ValueError, match="directed"):
            layer(edge_index=torch.tensor([[0, 1], [1, 2]]), seed_index=[0], num_nodes=3)
    acct = PrivacyAccountant()
    layer = DPPushFlowCap(noise_scale=1.0, accountant=acct)
    with pytest.raises(ValueError):
        layer(edge_index=ei, seed_index=[-1], num_nodes=40)
    assert len(acct) == 0  # refused inputs are not charged
    out = DPPushFlowCap(noise_scale=1.0, symmetrize=True)(edge_index=torch.tensor([[0, 1], [1, 2]]), seed_index=[0],
                                                          num_nodes=3)
    assert out.shape == (3, 1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(alpha=0.0, noise_scale=1.0), "alpha"), (dict(alpha=1.0, noise_scale=1.0), "alpha"),
    (dict(alpha=-0.2, noise_scale=1.0), "alpha"),
    (dict(eta=0.0, noise_scale=1.0), "eta"), (dict(eta=-1e-6, noise_scale=1.0), "eta"),
    (dict(num_iterations=0, noise_scale=1.0), "num_iterations"),
    (dict(noise_scale=0.0), "noise_scale"), (dict(noise_scale=-1.0), "noise_scale"),
    (dict(epsilon=0.0), "epsilon"), (dict(epsilon=-1.0, delta=1e-5), "epsilon"),
    (dict(epsilon=1.0, delta=1.0), "delta"), (dict(epsilon=1.0, delta=-1e-5), "delta"),
    (dict(noise_scale=1.0, delta=1e-5), "delta"),
    (dict(noise_scale=1.0, epsilon=1.0), "exactly one"), (dict(), "exactly one"),
    (dict(noise_scale=1.0, epsilon_columns=0), "epsilon_columns"),
])
def test_push_flow_cap_constructor_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DPPushFlowCap(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(alpha=0.0, epsilon=1.0), "alpha"), (dict(alpha=1.0, epsilon=1.0), "alpha"),
    (dict(num_iterations=0, epsilon=1.0), "num_iterations"),
    (dict(epsilon=0.0), "epsilon"), (dict(epsilon=-1.0, delta=1e-5), "epsilon"),
    (dict(epsilon=1.0, delta=1.0), "delta"), (dict(delta=1e-5), "delta"),
    (dict(flip_probability=0.5, delta=1e-5), "delta"),
    (dict(epsilon=1.0, flip_probability=0.5), "exactly one"), (dict(), "exactly one"),
    (dict(flip_probability=0.0), "flip_probability"), (dict(flip_probability=1.5), "flip_probability"),
])
def test_edge_flipping_constructor_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EdgeFlippingPPR(**kwargs)


def test_repr_contains_the_key_numbers():
    text = repr(DPPushFlowCap(alpha=0.15, num_iterations=80, eta=2e-6, epsilon=0.5, delta=1e-5, personalized=True,
                              cached=True))
    layer = DPPushFlowCap(alpha=0.15, num_iterations=80, eta=2e-6, epsilon=0.5, delta=1e-5)
    for part in ("DPPushFlowCap", "alpha=0.15", "num_iterations=80", "eta=2e-06", "epsilon=0.5", "delta=1e-05",
                 "personalized=True", "cached=True", f"noise_scale={layer.noise_scale:.6g}"):
        assert part in text, (part, text)
    assert "epsilon" not in repr(DPPushFlowCap(noise_scale=0.25)) and "noise_scale=0.25" in repr(
        DPPushFlowCap(noise_scale=0.25))
    flip = EdgeFlippingPPR(alpha=0.3, num_iterations=12, epsilon=math.log(3.0), personalized=True)
    text = repr(flip)
    for part in ("EdgeFlippingPPR", "alpha=0.3", "num_iterations=12", "flip_probability=0.5", "personalized=True"):
        assert part in text, (part, text)
    assert flip.flip_probability == pytest.approx(0.5, rel=1e-14)  # q = 3/4


@pytest.mark.parametrize("make", [
    lambda: DPPushFlowCap(noise_scale=1e-3, cached=True),
    lambda: EdgeFlippingPPR(epsilon=1.0, cached=True, num_iterations=10),
])
def test_cached_release_is_not_aliased_to_the_caller(make):
    ei = _graph()
    layer = make()
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        first = layer(edge_index=ei, seed_index=[0], num_nodes=40)
        kept = first.clone()
        first.zero_()  # the caller post-processes its copy in place
        again = layer(edge_index=ei, seed_index=[0], num_nodes=40)
    finally:
        torch.set_default_dtype(old)
    assert torch.equal(again, kept)


def test_bad_inputs_found_in_review_get_clear_errors():
    from pyg_private.accounting import truth_probability
    from pyg_private.mechanisms import flip_edges

    with pytest.raises(ValueError, match="too large for randomized response"):
        truth_probability(epsilon=40.0)
    with pytest.raises(ValueError, match="too large for randomized response"):
        EdgeFlippingPPR(epsilon=40.0)
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    with pytest.raises(ValueError, match="keep_nodes"):
        flip_edges(ei, 3, 0.7, keep_nodes=[-1])
    with pytest.raises(ValueError, match="empty"):
        DPPushFlowCap(noise_scale=1.0)(edge_index=ei, seed_index=[], num_nodes=3)
