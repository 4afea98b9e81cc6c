"""Heterogeneous graphs: GAP's aggregation on bipartite relations, the per-relation sensitivity checked
by brute force on every neighbouring graph (one edge of one relation removed, with its reverse copy
when ``T.ToUndirected`` made one), and how ``compose_relations`` composes the releases of one forward
of a ``to_hetero`` / ``HeteroConv`` model (sequential within a node-type pair, parallel across)."""
import copy
import io
import math
import pickle
import warnings

import numpy as np
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric import EdgeIndex
from torch_geometric.data import HeteroData
from torch_geometric.nn import HeteroConv, to_hetero

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning, gdp_epsilon
from pyg_private.nn import (ContractiveGraphLayer, GAPAggregation, NoisyPPRDiffusion, PerturbedAPPRConv,
                            ProGAPAggregation, bipartite_sensitivity, compose_relations, relation_of,
                            relation_part, relation_parts)

DELTA = 1e-5


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        warnings.simplefilter("ignore", UserWarning)  # to_hetero's "node types not updated"
        yield


def unit(m):
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def small_hetero(seed=0, undirected=True, users=5, items=4, tags=3):
    """users -buys-> items -has-> tags, users -knows- users (one node type: undirected), features
    of different widths."""
    g = torch.Generator().manual_seed(seed)
    d = HeteroData()
    d["user"].x = torch.randn(users, 3, generator=g, dtype=torch.float64)
    d["item"].x = torch.randn(items, 2, generator=g, dtype=torch.float64)
    d["tag"].x = torch.randn(tags, 4, generator=g, dtype=torch.float64)
    buys = (torch.rand(users, items, generator=g) < 0.5).nonzero().t()
    has = (torch.rand(items, tags, generator=g) < 0.5).nonzero().t()
    knows = torch.triu((torch.rand(users, users, generator=g) < 0.5), 1).nonzero().t()
    d["user", "buys", "item"].edge_index = buys
    d["item", "has", "tag"].edge_index = has
    d["user", "knows", "user"].edge_index = torch.cat([knows, knows.flip(0)], 1)
    return T.ToUndirected()(d) if undirected else d


# ----------------------------------------------------------------------------- the bipartite release
def test_bipartite_release_is_the_normalised_sum_of_unit_source_rows():
    d = small_hetero()
    x_src, x_dst, ei = d["user"].x, d["item"].x, d["user", "buys", "item"].edge_index
    out = GAPAggregation(1, noise_multiplier=0.0)((x_src, x_dst), ei)
    a = np.zeros((x_dst.size(0), x_src.size(0)))
    a[ei[1].numpy(), ei[0].numpy()] = 1.0
    assert out.shape == (x_dst.size(0), x_dst.size(1) + x_src.size(1))
    assert np.allclose(out.numpy(), np.concatenate([unit(x_dst.numpy()), unit(a @ unit(x_src.numpy()))], 1))
    raw = ProGAPAggregation(noise_multiplier=0.0)((x_src, x_dst), ei)  # ProGAP's: the sum itself
    assert np.allclose(raw[:, 2:].numpy(), a @ unit(x_src.numpy()))


def test_every_graph_form_gives_the_same_release():
    d = small_hetero(1)
    x = (d["user"].x, d["item"].x)
    ei = d["user", "buys", "item"].edge_index
    ns, nd = x[0].size(0), x[1].size(0)
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1)), (nd, ns))
    forms = [ei, ei[:, torch.randperm(ei.size(1))], EdgeIndex(ei, sparse_size=(ns, nd)), adj_t,
             adj_t.to_sparse_csr()]
    outs = [GAPAggregation(1, noise_multiplier=0.5, generator=torch.Generator().manual_seed(3))(x, f) for f in forms]
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_one_event_per_release_cached_and_restored_without_a_new_charge():
    d = small_hetero(2)
    x, ei = (d["user"].x, d["item"].x), d["user", "buys", "item"].edge_index
    acct = PrivacyAccountant()
    layer = GAPAggregation(1, epsilon=1.0, delta=DELTA, accountant=acct)
    first = layer(x, ei)
    (event,) = acct.events
    assert event.params["form"] == "bipartite" and event.params["sensitivity"] == 1.0
    assert event.mu == pytest.approx(1 / layer.noise_multiplier)
    assert acct.epsilon("edge", DELTA) == pytest.approx(1.0, rel=1e-6)
    assert torch.equal(layer(x, ei), first) and len(acct.events) == 1  # cached: no new charge
    pickled = pickle.loads(pickle.dumps(layer))
    assert pickled._cache.private is None and pickled._cache.public is None  # the relation's CSR is not pickled
    assert pickled._cache.release.shape == (x[1].size(0), x[0].size(1))  # the noisy block only, no normalize(x_dst)
    for twin in (copy.deepcopy(layer), pickled):
        assert torch.equal(twin(x, ei), first) and len(acct.events) == 1
    fresh = GAPAggregation(1, epsilon=1.0, delta=DELTA, accountant=acct)
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    buf.seek(0)
    fresh.load_state_dict(torch.load(buf))
    assert torch.equal(fresh(x, ei), first) and len(acct.events) == 1
    assert layer(x, ei[:, 1:]).shape == first.shape and len(acct.events) == 2  # another graph: a new release


@pytest.mark.parametrize("bad", ["K", "none", "dup", "range", "size", "weighted", "node"])
def test_refusals_come_before_any_charge(bad):
    d = small_hetero(3)
    x, ei = (d["user"].x, d["item"].x), d["user", "buys", "item"].edge_index
    acct = PrivacyAccountant()
    layer = GAPAggregation(1, noise_multiplier=1.0, accountant=acct)
    call = lambda: layer(x, ei)  # noqa: E731
    if bad == "K":
        call = lambda: GAPAggregation(2, noise_multiplier=1.0, accountant=acct)(x, ei)  # noqa: E731
    elif bad == "none":
        call = lambda: layer((x[0], None), ei)  # noqa: E731
    elif bad == "dup":
        call = lambda: layer(x, torch.cat([ei, ei[:, :1]], 1))  # noqa: E731
    elif bad == "range":
        call = lambda: layer(x, torch.cat([ei, torch.tensor([[0], [x[1].size(0)]])], 1))  # noqa: E731
    elif bad == "size":
        call = lambda: layer(x, EdgeIndex(ei, sparse_size=(x[0].size(0) + 1, x[1].size(0))))  # noqa: E731
    elif bad == "weighted":
        adj_t = torch.sparse_coo_tensor(ei.flip(0), 2 * torch.ones(ei.size(1)), (x[1].size(0), x[0].size(0)))
        call = lambda: layer(x, adj_t)  # noqa: E731
    elif bad == "node":
        call = lambda: ProGAPAggregation(level="node", max_degree=3, noise_multiplier=1.0, accountant=acct)(x, ei)  # noqa: E731,E501
    with pytest.raises(ValueError):
        call()
    assert len(acct.events) == 0


@pytest.mark.parametrize("make", [
    lambda acct: ContractiveGraphLayer(2, 0.9, min_degree=0, noise_multiplier=1.0, accountant=acct),
    lambda acct: NoisyPPRDiffusion(noise_scale=1.0, accountant=acct),
])
def test_the_multi_hop_diffusions_refuse_a_bipartite_relation(make):
    d = small_hetero(4)
    acct = PrivacyAccountant()
    x, ei = (d["user"].x, d["item"].x), d["user", "buys", "item"].edge_index
    with pytest.raises(ValueError, match="does not take a bipartite relation"):
        make(acct)(x, ei)
    with pytest.raises(ValueError, match="does not take a bipartite relation"):
        make(acct)(d["user"].x, EdgeIndex(ei, sparse_size=(5, 4)))
    assert len(acct.events) == 0


def test_perturbed_appr_conv_refuses_a_bipartite_relation():
    d = small_hetero(4)
    conv = PerturbedAPPRConv(3, 2, alpha=0.4, epsilon=1.0, delta=DELTA)
    with pytest.raises(ValueError, match="does not take a bipartite relation"):
        conv.fit((d["user"].x, d["item"].x), d["user", "buys", "item"].edge_index, torch.zeros(4, dtype=torch.long))


# ----------------------------------------------------------------------------- brute force
def _pre_noise(d):
    """Per relation, the pre-noise sum A normalize(x_src) of ProGAP's release (noise_multiplier 0)."""
    out = {}
    for et in d.edge_types:
        src, _, dst = et
        x = d[src].x if src == dst else (d[src].x, d[dst].x)
        res = ProGAPAggregation(noise_multiplier=0.0)(x, d[et].edge_index)
        out[et] = res[:, d[dst].x.size(1):]
    return out


def _declared(d, et):
    src, _, dst = et
    if src == dst:  # the homogeneous path: one undirected edge moves two rows
        return ProGAPAggregation(noise_multiplier=1.0).sensitivity
    return bipartite_sensitivity(d[src].x.size(0), d[dst].x.size(0))


def _remove(d, et, k, reverse):
    """``d`` without edge k of relation ``et`` (both directions of a one-type relation, and the reverse
    relation's copy when ``reverse`` names it)."""
    out = copy.copy(d)
    ei = d[et].edge_index
    s, t = int(ei[0, k]), int(ei[1, k])
    drop = (ei[0] == s) & (ei[1] == t)
    if et[0] == et[2]:
        drop |= (ei[0] == t) & (ei[1] == s)
    out[et].edge_index = ei[:, ~drop]
    if reverse is not None:
        r = d[reverse].edge_index
        out[reverse].edge_index = r[:, ~((r[0] == t) & (r[1] == s))]
    return out


@pytest.mark.parametrize("undirected", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_brute_force_one_edge_of_one_relation_moves_one_part_within_its_bound(seed, undirected):
    d = small_hetero(seed, undirected=undirected)
    base = _pre_noise(d)
    parts = relation_parts(d.edge_types)
    reverse = {et: (et[2], f"rev_{et[1]}", et[0]) for et in d.edge_types if not et[1].startswith("rev_")}
    worst = {}
    checked = 0
    for et in d.edge_types:
        if et[1].startswith("rev_"):
            continue  # removed together with its forward relation
        rev = reverse[et] if reverse[et] in d.edge_types else None
        for k in range(d[et].edge_index.size(1)):
            after = _pre_noise(_remove(d, et, k, rev))
            moved = {r: float((base[r] - after[r]).norm()) for r in d.edge_types}
            changed = [r for r, v in moved.items() if v > 1e-12]
            # only relations of the removed edge's node-type pair move: the parts are disjoint
            assert {relation_part(r) for r in changed} <= {relation_part(et)}
            for r in changed:  # each release within its own declared sensitivity
                assert moved[r] <= _declared(d, r) * (1 + 1e-12)
                worst[r] = max(worst.get(r, 0.0), moved[r] / _declared(d, r))
            # the part's joint squared sensitivity is at most the sum of its releases' (sequential composition)
            joint = sum(moved[r] ** 2 for r in changed)
            assert joint <= sum(_declared(d, r) ** 2 for r in parts[relation_part(et)]) * (1 + 1e-12)
            checked += 1
    assert checked > 5
    # the bipartite bound 1 is attained (a unit row moves); the one-type relation's sqrt(2) too
    assert max(v for r, v in worst.items() if r[0] != r[2]) == pytest.approx(1.0)
    assert worst.get(("user", "knows", "user"), 1.0) == pytest.approx(1.0)


def test_brute_force_equal_sizes_pair_covers_a_square_relation_passed_as_a_pair():
    # one node type passed as (x, x): an undirected edge is two entries and moves two rows
    d = small_hetero(5)
    x = d["user"].x
    ei = d["user", "knows", "user"].edge_index
    assert bipartite_sensitivity(x.size(0), x.size(0)) == pytest.approx(math.sqrt(2))
    base = ProGAPAggregation(noise_multiplier=0.0)((x, x), ei)
    worst = 0.0
    for k in range(ei.size(1)):
        s, t = int(ei[0, k]), int(ei[1, k])
        keep = ~(((ei[0] == s) & (ei[1] == t)) | ((ei[0] == t) & (ei[1] == s)))
        worst = max(worst, float((base - ProGAPAggregation(noise_multiplier=0.0)((x, x), ei[:, keep])).norm()))
    assert worst == pytest.approx(math.sqrt(2))


# ----------------------------------------------------------------------------- composition
class Encoder(torch.nn.Module):
    def __init__(self, acct, sigma=2.0, layer=GAPAggregation):
        super().__init__()
        self.agg = layer(1, noise_multiplier=sigma, accountant=acct) if layer is GAPAggregation else layer(acct)

    def forward(self, x, edge_index):
        return self.agg(x, edge_index)


def _same_width(d, width=4):
    """Every node type's features zero-padded to one width (public), so that to_hetero can sum relations."""
    for t in d.node_types:
        x = d[t].x
        d[t].x = torch.cat([x, x.new_zeros(x.size(0), width - x.size(1))], 1)
    return d


def test_to_hetero_composed_costs_the_worst_node_type_pair():
    d = _same_width(small_hetero(6))
    parts = relation_parts(d.edge_types)
    assert sorted(map(len, parts.values())) == [1, 2, 2]  # knows | buys + rev_buys | has + rev_has
    acct = PrivacyAccountant()
    model = compose_relations(to_hetero(Encoder(acct), d.metadata()), d.metadata())
    assert relation_of(model.agg.user__buys__item) == ("user", "buys", "item")
    out = model(d.x_dict, d.edge_index_dict)
    assert set(out) == {"user", "item", "tag"}
    assert len(acct.events) == len(d.edge_types)  # one event per relation release
    (group,) = acct.parallel_groups.values()
    assert group["parts"] == 3 and group["closed"]
    assert acct.epsilon("edge", DELTA) == pytest.approx(gdp_epsilon(mu=math.sqrt(2) / 2.0, delta=DELTA), rel=1e-9)
    model(d.x_dict, d.edge_index_dict)  # cached: nothing new, no new group
    assert len(acct.events) == len(d.edge_types) and len(acct.parallel_groups) == 1
    # the same model without compose_relations: every release in sequence
    seq = PrivacyAccountant()
    to_hetero(Encoder(seq), d.metadata())(d.x_dict, d.edge_index_dict)
    assert seq.epsilon("edge", DELTA) == pytest.approx(gdp_epsilon(mu=math.sqrt(5) / 2.0, delta=DELTA), rel=1e-9)


def test_heteroconv_composed_two_layers_sum_within_parts():
    d = small_hetero(7)
    acct = PrivacyAccountant()

    def conv():
        return HeteroConv({et: GAPAggregation(1, noise_multiplier=2.0, accountant=acct) for et in d.edge_types},
                          aggr="cat")

    model = torch.nn.ModuleList([conv(), conv()])

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = model

        def forward(self, x_dict, edge_index_dict):
            h = self.layers[0](x_dict, edge_index_dict)
            return self.layers[1](h, edge_index_dict)  # on the first layer's releases: post-processing inputs

    two = compose_relations(Two())
    two(d.x_dict, d.edge_index_dict)
    assert len(acct.events) == 2 * len(d.edge_types)
    # the worst part holds 2 relations x 2 layers: mu = 2 / sigma; sequentially it would be sqrt(10) / 2
    assert acct.epsilon("edge", DELTA) == pytest.approx(gdp_epsilon(mu=2 / 2.0, delta=DELTA), rel=1e-9)


def test_node_level_releases_stay_sequential_across_relations():
    d = small_hetero(8, undirected=True)
    acct = PrivacyAccountant()
    n = d["user"].x.size(0)
    hc = HeteroConv({("user", "knows", "user"): ContractiveGraphLayer(1, 0.9, level="node", min_degree=0,
                                                                      max_degree=n, num_nodes=n, noise_multiplier=2.0,
                                                                      accountant=acct),
                     ("user", "buys", "item"): GAPAggregation(1, noise_multiplier=2.0, accountant=acct)})
    compose_relations(hc)
    hc(d.x_dict, d.edge_index_dict)
    assert len(acct.events_of("node")) == 1 and len(acct.events_of("edge")) == 1
    (group,) = acct.parallel_groups.values()
    assert group["units"] == ["edge"]  # the node-level release was charged outside every part


def test_a_refusal_inside_a_composed_forward_charges_nothing_and_closes_the_group():
    d = _same_width(small_hetero(9))
    acct = PrivacyAccountant()
    model = compose_relations(to_hetero(Encoder(acct, layer=lambda a: ContractiveGraphLayer(
        2, 0.9, min_degree=0, noise_multiplier=1.0, accountant=a)), d.metadata()), d.metadata())
    with pytest.raises(ValueError, match="bipartite"):
        model(d.x_dict, d.edge_index_dict)
    assert not any(g["closed"] is False for g in acct.parallel_groups.values())
    # the square relation alone may have been released (one event, its part); a budget refusal: nothing more
    spent = len(acct.events)
    strict = PrivacyAccountant(budget={"edge": (0.1, DELTA)})
    model2 = compose_relations(to_hetero(Encoder(strict), d.metadata()), d.metadata())
    with pytest.raises(PrivacyBudgetExceeded):
        model2(d.x_dict, d.edge_index_dict)
    assert len(strict.events) == 0 and len(acct.events) == spent
    with strict.parallel("after"):  # no group was left open
        pass


def test_a_layer_shared_by_two_node_type_pairs_is_refused():
    d = small_hetero(10)
    layer = GAPAggregation(1, noise_multiplier=1.0)
    hc = HeteroConv({("user", "buys", "item"): layer, ("item", "has", "tag"): layer})
    with pytest.raises(ValueError, match="own layer"):
        compose_relations(hc)


def test_a_callers_own_part_keeps_the_releases():
    d = small_hetero(11)
    acct = PrivacyAccountant()
    hc = compose_relations(HeteroConv({et: GAPAggregation(1, noise_multiplier=2.0, accountant=acct)
                                       for et in d.edge_types}, aggr="cat"))
    with acct.parallel("graphs") as part:
        with part(0, graphs=[0]):
            hc(d.x_dict, d.edge_index_dict)
    assert list(acct.parallel_groups) == ["graphs"]  # charged to the caller's part, in sequence
    assert acct.epsilon("edge", DELTA) == pytest.approx(
        gdp_epsilon(mu=math.sqrt(len(d.edge_types)) / 2.0, delta=DELTA), rel=1e-9)


def test_composed_models_survive_deepcopy_pickle_and_state_dict():
    d = _same_width(small_hetero(12))
    acct = PrivacyAccountant()
    model = compose_relations(to_hetero(Encoder(acct), d.metadata()), d.metadata())
    first = model(d.x_dict, d.edge_index_dict)
    n = len(acct.events)
    twin = copy.deepcopy(model)
    again = twin(d.x_dict, d.edge_index_dict)
    assert all(torch.equal(first[k], again[k]) for k in first) and len(acct.events) == n
    restored = pickle.loads(pickle.dumps(model))
    assert relation_of(restored.agg.item__has__tag) == ("item", "has", "tag")
    restored.agg.user__buys__item.accountant = restored.agg.item__has__tag.accountant = None  # its own copy
    out = restored(d.x_dict, d.edge_index_dict)
    assert all(torch.equal(first[k], out[k]) for k in first)  # the pickled releases, bound on first use
    state = model.state_dict()
    fresh = compose_relations(to_hetero(Encoder(acct), d.metadata()), d.metadata())
    fresh.load_state_dict(state)
    out = fresh(d.x_dict, d.edge_index_dict)
    assert all(torch.equal(first[k], out[k]) for k in first) and len(acct.events) == n


def test_relation_parts_group_reverse_relations_whatever_their_names():
    ets = [("a", "r", "b"), ("b", "backwards", "a"), ("a", "s", "a"), ("b", "t", "c")]
    parts = relation_parts(ets)
    assert list(parts.values()) == [[ets[0], ets[1]], [ets[2]], [ets[3]]]
    assert relation_part(("x", "r", "y")) != relation_part(("x--y", "r", "x"))


def test_sparse_tensor_adj_t_gives_the_same_release():
    torch_sparse = pytest.importorskip("torch_sparse")
    d = small_hetero(13)
    x = (d["user"].x, d["item"].x)
    ei = d["user", "buys", "item"].edge_index
    adj_t = torch_sparse.SparseTensor(row=ei[1], col=ei[0], sparse_sizes=(x[1].size(0), x[0].size(0)))
    outs = [GAPAggregation(1, noise_multiplier=0.5, generator=torch.Generator().manual_seed(3))(x, f)
            for f in (ei, adj_t)]
    assert torch.equal(outs[0], outs[1])


def test_to_hetero_keys_are_read_without_metadata_too():
    d = _same_width(small_hetero(14))
    model = compose_relations(to_hetero(Encoder(None), d.metadata()))
    assert relation_of(model.agg.item__rev_buys__user) == ("item", "rev_buys", "user")
    with pytest.raises(ValueError, match="composed already"):
        compose_relations(model)
