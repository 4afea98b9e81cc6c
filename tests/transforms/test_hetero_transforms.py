"""The noisy transforms on a HeteroData: edge randomized response per edge type (bipartite relations
over their n_src x n_dst pairs, one event for all relations), and the local-DP feature transforms per
node type (per-type arguments, one event per type on the per-node ledger, all registered before any
noise)."""
import copy
import math
import pickle
import warnings

import numpy as np
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data, HeteroData

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.mechanisms import flip_bipartite_edges
from pyg_private.transforms import (EdgeRandomizedResponse, HDSFeaturePerturb, LaplaceFeaturePerturb,
                                    MultiBitFeaturePerturb, PiecewiseFeaturePerturb)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def graph(seed=0, users=6, items=5, tags=3):
    g = torch.Generator().manual_seed(seed)
    d = HeteroData()
    d["user"].x = torch.rand(users, 4, generator=g)
    d["item"].x = torch.rand(items, 7, generator=g)
    d["tag"].num_nodes = tags
    d["user", "buys", "item"].edge_index = (torch.rand(users, items, generator=g) < 0.4).nonzero().t()
    d["user", "buys", "item"].edge_attr = torch.rand(d["user", "buys", "item"].edge_index.size(1), 2, generator=g)
    d["item", "has", "tag"].edge_index = (torch.rand(items, tags, generator=g) < 0.5).nonzero().t()
    knows = torch.triu(torch.rand(users, users, generator=g) < 0.4, 1).nonzero().t()
    d["user", "knows", "user"].edge_index = torch.cat([knows, knows.flip(0)], 1)
    return d


# ----------------------------------------------------------------------------- edge randomized response
def test_rr_randomises_every_edge_type_under_one_event():
    acct = PrivacyAccountant()
    d = graph()
    out = EdgeRandomizedResponse(epsilon=2.0, accountant=acct, generator=torch.Generator().manual_seed(1))(d)
    (event,) = acct.events
    assert event.params["relations"] == 3 and event.params["compositions"] == 1  # three node-type pairs
    assert acct.pure_epsilon("edge") == pytest.approx(2.0)
    assert set(out["user", "buys", "item"].keys()) == {"edge_index"}  # the true edges' attributes are gone
    ei = out["user", "buys", "item"].edge_index
    assert int(ei[0].max()) < 6 and int(ei[1].max()) < 5
    knows = out["user", "knows", "user"].edge_index
    assert torch.equal(torch.sort(knows[0] * 6 + knows[1]).values, torch.sort(knows[1] * 6 + knows[0]).values)
    assert torch.equal(out["user"].x, d["user"].x)  # the node stores are not touched


def test_reverse_relations_compose_sequentially():
    acct = PrivacyAccountant()
    EdgeRandomizedResponse(epsilon=1.5, accountant=acct)(T.ToUndirected()(graph(1)))
    (event,) = acct.events
    assert event.params["compositions"] == 2  # buys and rev_buys share every edge
    assert acct.pure_epsilon("edge") == pytest.approx(3.0)


def test_bipartite_flips_every_pair_with_probability_one_minus_q():
    # exact sampler: over 200 releases of a 7 x 9 relation, each of the 63 pairs flips ~ Binomial(200, 1 - q)
    q = 0.8
    ei = torch.tensor([[0, 2, 6, 3], [1, 8, 0, 3]])
    truth = torch.zeros(7, 9, dtype=torch.bool)
    truth[ei[0], ei[1]] = True
    flips = torch.zeros(7, 9)
    g = torch.Generator().manual_seed(5)
    for _ in range(200):
        out = flip_bipartite_edges(ei, 7, 9, q, generator=g)
        now = torch.zeros(7, 9, dtype=torch.bool)
        now[out[0], out[1]] = True
        flips += (now ^ truth).float()
    rate = flips.sum() / (200 * 63)
    assert abs(float(rate) - (1 - q)) < 6 * math.sqrt(q * (1 - q) / (200 * 63))
    assert float(flips.min()) > 0  # every pair, edges and non-edges, flips sometimes


@pytest.mark.parametrize("bad", ["max_edges", "count", "keep", "metapath", "sampled", "duplicate", "directed"])
def test_rr_refusals_come_before_any_charge(bad):
    acct = PrivacyAccountant()
    d = graph(2)
    kw = {}
    if bad == "max_edges":
        kw["max_edges"] = 3
    elif bad == "count":
        del d["tag"].num_nodes
        d["tag"].y = torch.zeros(3)  # not a node count: "y" is not a declared one
    elif bad == "keep":
        kw["keep_nodes"] = [0]
    elif bad == "metapath":
        d.metapath_dict = {("user", "metapath_0", "tag"): [("user", "buys", "item"), ("item", "has", "tag")]}
    elif bad == "sampled":
        d["user"].n_id = torch.arange(6)
    elif bad == "duplicate":
        ei = d["user", "buys", "item"].edge_index
        d["user", "buys", "item"].edge_index = torch.cat([ei, ei[:, :1]], 1)
    elif bad == "directed":
        d["user", "knows", "user"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError):
        EdgeRandomizedResponse(epsilon=1.0, accountant=acct, **kw)(d)
    assert len(acct.events) == 0


def test_rr_refuses_to_release_the_same_relations_twice():
    acct = PrivacyAccountant()
    rr = EdgeRandomizedResponse(epsilon=1.0, accountant=acct)
    out = rr(graph(3))
    with pytest.raises(ValueError, match="already randomised"):
        rr(out)
    with pytest.raises(ValueError, match="already released"):
        rr(graph(3))
    assert len(acct.events) == 1
    EdgeRandomizedResponse(epsilon=1.0, accountant=acct, allow_recompose=True)(graph(3))
    assert len(acct.events) == 2


# ----------------------------------------------------------------------------- local-DP features
@pytest.mark.parametrize("cls,kw", [(HDSFeaturePerturb, {"k": 2}), (LaplaceFeaturePerturb, {}),
                                    (PiecewiseFeaturePerturb, {"k": 2}), (MultiBitFeaturePerturb, {"k": 2})])
def test_every_feature_transform_perturbs_each_node_type_once(cls, kw):
    acct = PrivacyAccountant()
    d = graph(4)
    out = cls(1.0, feature_range=(0.0, 1.0), accountant=acct, **kw)(d)
    assert len(acct.events) == 2  # user and item have x; tag has none
    # the ledger numbers the types in sorted order: item 0-4, tag 5-7, user 8-13
    nodes = sorted(tuple(e.nodes.tolist()) for e in acct.events)
    assert nodes == [tuple(range(0, 5)), tuple(range(8, 14))]
    assert all(e.num_nodes == 14 for e in acct.events)
    assert float(acct.node_epsilons().max()) == pytest.approx(1.0)
    for t in ("user", "item"):
        assert out[t].x.shape == d[t].x.shape and not torch.equal(out[t].x, d[t].x)
        assert bool(out[t].ldp_mask.all()) and out[t].ldp["mechanism"] == cls.mechanism
    assert "x" in d["user"] and torch.equal(d["user"].x, graph(4)["user"].x)  # a shallow copy was perturbed


def test_per_type_epsilons_and_k_in_one_ledger():
    acct = PrivacyAccountant()
    t = HDSFeaturePerturb({"user": 1.0, "item": 2.0}, k={"user": 2, "item": 3}, feature_range=(0.0, 1.0),
                          accountant=acct)
    assert "per node type" in repr(t)
    t(graph(5))
    by_eps = {e.params["epsilon"]: e for e in acct.events}
    assert set(by_eps) == {1.0, 2.0} and by_eps[2.0].params["k"] == 3
    eps = acct.node_epsilons()
    assert np.allclose(eps[:5], 2.0) and np.allclose(eps[8:], 1.0) and np.allclose(eps[5:8], 0.0)


def test_per_type_refusals_before_any_charge():
    acct = PrivacyAccountant(budget={"local": 2.5})
    with pytest.raises(ValueError, match="no entry"):
        HDSFeaturePerturb({"user": 1.0}, k=2, feature_range=(0.0, 1.0), accountant=acct)(graph(6))
    with pytest.raises(ValueError, match="per node type but has no entry"):
        HDSFeaturePerturb({"user": 1.0, "item": 1.0}, k={"user": 2}, feature_range=(0.0, 1.0))
    with pytest.raises(ValueError, match="no `x`"):
        HDSFeaturePerturb({"user": 1.0, "item": 1.0, "tag": 1.0}, k=2, feature_range=(0.0, 1.0),
                          accountant=acct)(graph(6))
    with pytest.raises(ValueError, match="for a HeteroData"):
        HDSFeaturePerturb({"user": 1.0}, k=2, feature_range=(0.0, 1.0))(Data(x=torch.rand(3, 4)))
    assert len(acct.events) == 0
    t = HDSFeaturePerturb({"user": 1.0, "item": 2.0}, k=2, feature_range=(0.0, 1.0), accountant=acct)
    t(graph(6))
    assert len(acct.events) == 2
    # the item nodes would reach 4 > 2.5: refused before the user type (which would fit) is charged
    with pytest.raises(PrivacyBudgetExceeded):
        t(graph(7))
    assert len(acct.events) == 2
    with pytest.raises(ValueError, match="already released"):  # the same raw features again
        t(graph(6))
    assert len(acct.events) == 2


def test_perturbed_node_types_are_marked_and_refused_again():
    acct = PrivacyAccountant()
    t = LaplaceFeaturePerturb(1.0, feature_range=(0.0, 1.0), accountant=acct)
    out = t(graph(8))
    with pytest.raises(ValueError, match="already perturbed"):
        LaplaceFeaturePerturb(1.0, feature_range=(-10.0, 10.0), accountant=acct)(out)
    assert len(acct.events) == 2


def test_per_type_node_mask_and_range():
    acct = PrivacyAccountant()
    d = graph(9)
    d["user"].keep = torch.tensor([True, True, False, False, False, False])
    d["item"].keep = torch.ones(5, dtype=torch.bool)
    d["item"].x = d["item"].x * 10
    with pytest.warns(UserWarning, match="raw"):
        out = LaplaceFeaturePerturb(1.0, feature_range={"user": (0.0, 1.0), "item": (0.0, 10.0)}, node_mask="keep",
                                    accountant=acct)(d)
    assert torch.equal(out["user"].x[2:], d["user"].x[2:])  # the masked-out rows stay raw (and the warning says so)
    assert sorted(len(e.nodes) for e in acct.events) == [2, 5]


def test_feature_transforms_copy_and_pickle_with_their_per_type_children():
    acct = PrivacyAccountant()
    gen = torch.Generator().manual_seed(0)
    t = HDSFeaturePerturb({"user": 1.0, "item": 2.0}, k=2, feature_range=(0.0, 1.0), accountant=acct, generator=gen)
    twin = copy.deepcopy(t)
    assert twin._children["user"].accountant is acct and twin._children["user"].generator is gen
    restored = pickle.loads(pickle.dumps(t))
    assert restored._children["user"].generator is None and restored.generator is None
    twin(graph(10))
    assert len(acct.events) == 2
