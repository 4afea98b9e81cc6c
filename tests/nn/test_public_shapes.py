"""Edge-level privacy: the node set is public, so nothing observable may follow the private edges.

Neighbouring graphs share their nodes and differ in one edge. ``G`` below is a path on nodes
0..n-2 with node n-1 isolated; ``G'`` is ``G`` plus the edge (0, n-1). A node count read off
the largest id of ``edge_index`` (n-1 on G, n on G') changes the output's shape, the pairs
randomised, and which seeds are accepted: a perfect distinguisher. Every component must take
the count from public input (``num_nodes``, ``x``, a sparse adjacency's size, a declared
``data.num_nodes``), refuse without one before charging, and behave the same on G and G'.
"""
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.mechanisms import flip_edges
from pyg_private.nn import DPPushFlowCap, EdgeFlippingPPR, NoisyPPRDiffusion, PerturbedAPPRConv
from pyg_private.transforms import EdgeRandomizedResponse

N = 8


def _path_with_isolated_last(n=N):
    path = torch.stack([torch.arange(n - 2), torch.arange(1, n - 1)])
    g = to_undirected(path, num_nodes=n)
    g_prime = to_undirected(torch.cat([path, torch.tensor([[0], [n - 1]])], dim=1), num_nodes=n)
    return g, g_prime


G, G_PRIME = _path_with_isolated_last()
EMPTY = torch.empty(2, 0, dtype=torch.long)
ONE_EDGE = torch.tensor([[0, 1], [1, 0]])


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def _seeded(gen_seed=0):
    return torch.Generator().manual_seed(gen_seed)


# name -> (make(accountant, generator), call(layer, edge_index, **kwargs) -> Tensor)
SEEDED_LAYERS = {
    "NoisyPPRDiffusion": (
        lambda acct, gen: NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=10, accountant=acct,
                                            generator=gen),
        lambda layer, ei, **kw: layer(edge_index=ei, seed_index=kw.pop("seeds", [0]), **kw)),
    "NoisyPPRDiffusion-personalized": (
        lambda acct, gen: NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=10, personalized=True,
                                            accountant=acct, generator=gen),
        lambda layer, ei, **kw: layer(edge_index=ei, seed_index=kw.pop("seeds", [0]), **kw)),
    "DPPushFlowCap": (
        lambda acct, gen: DPPushFlowCap(noise_scale=1e-3, eta=1e-2, num_iterations=10, accountant=acct,
                                        generator=gen),
        lambda layer, ei, **kw: layer(edge_index=ei, seed_index=kw.pop("seeds", [0]), **kw)),
    "EdgeFlippingPPR": (
        lambda acct, gen: EdgeFlippingPPR(epsilon=1.0, num_iterations=10, accountant=acct, generator=gen),
        lambda layer, ei, **kw: layer(edge_index=ei, seed_index=kw.pop("seeds", [0]), **kw)),
    "EdgeFlippingPPR-personalized": (
        lambda acct, gen: EdgeFlippingPPR(epsilon=1.0, num_iterations=10, personalized=True, accountant=acct,
                                          generator=gen),
        lambda layer, ei, **kw: layer(edge_index=ei, seed_index=kw.pop("seeds", [0]), **kw)),
}


def _outcome(fn):
    """What an observer sees of one call: the output's shape and dtype, or the error's type."""
    try:
        out = fn()
    except ValueError:
        return "ValueError"
    return tuple(out.shape), out.dtype


@pytest.mark.parametrize("name", list(SEEDED_LAYERS))
def test_seeded_layers_take_the_node_count_from_public_input_only(name):
    make, call = SEEDED_LAYERS[name]
    # with the public count: the same shape and dtype on both neighbours
    outs = [call(make(None, _seeded()), ei, num_nodes=N) for ei in (G, G_PRIME)]
    assert outs[0].shape == outs[1].shape == (N, 1)
    assert outs[0].dtype == outs[1].dtype == torch.get_default_dtype()
    # without it: refused on both, before anything is charged or drawn
    for ei in (G, G_PRIME):
        acct, gen = PrivacyAccountant(), _seeded()
        state = gen.get_state().clone()
        with pytest.raises(ValueError, match="num_nodes"):
            call(make(acct, gen), ei)
        assert len(acct) == 0 and torch.equal(gen.get_state(), state)


@pytest.mark.parametrize("name", list(SEEDED_LAYERS))
def test_seed_range_is_checked_against_the_public_count(name):
    make, call = SEEDED_LAYERS[name]
    # the last node is isolated in G and not in G': a seed there is treated alike on both,
    # with or without num_nodes (HEAD refused it on G and released it on G')
    for kwargs in ({}, {"num_nodes": N}):
        seen = [_outcome(lambda ei=ei: call(make(None, _seeded()), ei, seeds=[N - 1], **kwargs))
                for ei in (G, G_PRIME)]
        assert seen[0] == seen[1], (kwargs, seen)
    assert _outcome(lambda: call(make(None, _seeded()), G, seeds=[N - 1], num_nodes=N)) == \
        ((N, 1), torch.get_default_dtype())
    for ei in (G, G_PRIME):  # a seed outside the public node set: refused before any charge
        acct = PrivacyAccountant()
        with pytest.raises(ValueError, match="seed_index"):
            call(make(acct, _seeded()), ei, seeds=[N], num_nodes=N)
        assert len(acct) == 0


@pytest.mark.parametrize("name", list(SEEDED_LAYERS))
def test_a_graph_without_edges_is_an_ordinary_neighbour(name):
    make, call = SEEDED_LAYERS[name]
    # zero edges vs one edge: the same kind of output with the public count, the same refusal without
    for kwargs, expected in (({"num_nodes": 5}, ((5, 1), torch.get_default_dtype())), ({}, "ValueError")):
        seen = [_outcome(lambda ei=ei: call(make(PrivacyAccountant(), _seeded()), ei, **kwargs))
                for ei in (EMPTY, ONE_EDGE)]
        assert seen == [expected, expected], (kwargs, seen)


def test_noisy_ppr_signals_give_the_count_and_must_agree_with_num_nodes():
    x = torch.rand(N, 2, dtype=torch.float32)
    outs = [NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=5)(x, ei) for ei in (G, G_PRIME)]
    assert outs[0].shape == outs[1].shape == (N, 2) and outs[0].dtype == outs[1].dtype == torch.float32
    acct = PrivacyAccountant()
    layer = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=5, accountant=acct)
    with pytest.raises(ValueError, match="num_nodes"):
        layer(x, G, num_nodes=N + 1)  # two public counts that disagree
    with pytest.raises(ValueError, match="num_nodes"):
        layer(x[: N - 1], G_PRIME)  # an edge at node N-1 outside the signals' N-1 rows
    # HEAD accepted signals with fewer rows than the largest id of G (a count from the edges)
    with pytest.raises(ValueError):
        layer(x[: N - 2], G)
    assert len(acct) == 0
    out = layer(torch.rand(5, 1), EMPTY)  # no edge at all: the signals' rows are the nodes
    assert out.shape == (5, 1) and len(acct) == 1


def test_sparse_adjacency_declared_size_is_public():
    for ei in (G, G_PRIME):
        adj = torch.sparse_coo_tensor(ei, torch.ones(ei.size(1)), (N, N), check_invariants=True)
        for layer in (NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-2, num_iterations=5),
                      DPPushFlowCap(noise_scale=1e-3, eta=1e-2, num_iterations=5),
                      EdgeFlippingPPR(epsilon=1.0, num_iterations=5)):
            assert layer(edge_index=adj, seed_index=[N - 1]).shape == (N, 1)
    from torch_geometric import EdgeIndex  # an EdgeIndex with a declared sparse size counts too

    for ei in (G, G_PRIME):
        declared = EdgeIndex(ei, sparse_size=(N, N))
        assert NoisyPPRDiffusion(noise_scale=1e-3)(edge_index=declared, seed_index=[0]).shape == (N, 1)
        assert EdgeRandomizedResponse(epsilon=1.0)(Data(edge_index=declared)).num_nodes == N
    with pytest.raises(ValueError, match="num_nodes"):
        adj = torch.sparse_coo_tensor(G, torch.ones(G.size(1)), (N, N), check_invariants=True)
        NoisyPPRDiffusion(noise_scale=1e-3)(edge_index=adj, seed_index=[0], num_nodes=N + 1)


def test_edge_ids_outside_the_public_node_set_are_refused_before_charging():
    for name, (make, call) in SEEDED_LAYERS.items():
        acct = PrivacyAccountant()
        with pytest.raises(ValueError, match="num_nodes"):
            call(make(acct, _seeded()), G_PRIME, num_nodes=N - 1)
        assert len(acct) == 0, name
    gen = _seeded()
    state = gen.get_state().clone()
    with pytest.raises(ValueError, match="num_nodes"):
        flip_edges(G_PRIME, N - 1, 0.7, generator=gen)  # HEAD drew bits and returned a wrong graph
    assert torch.equal(gen.get_state(), state)


def test_flip_edges_randomises_the_same_pairs_on_neighbours():
    # the pairs randomised are those of the public node set: node N-1's pairs on both graphs
    q = 0.6
    hits = []
    for ei in (G, G_PRIME):
        out = flip_edges(ei, N, q, generator=_seeded(3))
        hits.append(bool((out == N - 1).any()))
    assert hits == [True, True]
    assert flip_edges(EMPTY, N, q, generator=_seeded(3)).shape[0] == 2
    with pytest.raises(ValueError, match="num_nodes"):
        flip_edges(G, None, q)


def test_edge_randomized_response_needs_a_declared_node_count():
    for ei in (G, G_PRIME):
        acct = PrivacyAccountant()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyG's own warning about inferring the count
            with pytest.raises(ValueError, match="num_nodes"):
                EdgeRandomizedResponse(epsilon=1.0, accountant=acct)(Data(edge_index=ei))
        assert len(acct) == 0
    outs = [EdgeRandomizedResponse(epsilon=1.0, generator=_seeded(1))(Data(edge_index=ei, num_nodes=N))
            for ei in (G, G_PRIME)]
    assert [o.num_nodes for o in outs] == [N, N]
    # x declares the count too; its rows bound the ids
    out = EdgeRandomizedResponse(epsilon=1.0)(Data(x=torch.ones(N, 1), edge_index=G))
    assert out.num_nodes == N
    with pytest.raises(ValueError, match="num_nodes"):
        EdgeRandomizedResponse(epsilon=1.0)(Data(x=torch.ones(N - 1, 1), edge_index=G_PRIME))
    # zero edges: an ordinary release on the declared nodes
    out = EdgeRandomizedResponse(epsilon=1.0)(Data(edge_index=EMPTY, num_nodes=5))
    assert out.num_nodes == 5 and out.edge_index.size(0) == 2


def test_declared_num_nodes_never_reads_the_edges():
    from pyg_private.utils.graph_validation import declared_num_nodes, public_num_nodes

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyG's edge_index fallback warns; it must not be reached
        assert declared_num_nodes(Data(edge_index=G)) is None
        assert declared_num_nodes(Data(edge_index=G, num_nodes=N + 3)) == N + 3
        assert declared_num_nodes(Data(edge_index=G, x=torch.ones(N + 1, 2))) == N + 1
        assert declared_num_nodes(Data(edge_index=G, adj_t=torch.eye(N).to_sparse())) == N
    assert public_num_nodes(x=torch.ones(4, 1)) == 4 and public_num_nodes(5) == 5
    assert public_num_nodes(adj=torch.eye(3).to_sparse()) == 3
    with pytest.raises(ValueError, match="num_nodes"):
        public_num_nodes(adj=G)
    with pytest.raises(ValueError, match="empty"):
        public_num_nodes(0)
    with pytest.raises(TypeError, match="num_nodes"):
        public_num_nodes(2.0)


def test_perturbed_appr_conv_shapes_follow_the_features():
    # already public on HEAD (the count is x's rows); a guard that it stays so
    torch.manual_seed(0)
    x = torch.nn.functional.normalize(torch.rand(N, 3), dim=1)
    y = torch.arange(N) % 2
    shapes = []
    for ei in (G, G_PRIME, EMPTY):
        acct = PrivacyAccountant()
        layer = PerturbedAPPRConv(3, 2, alpha=0.3, steps=2, epsilon=1.0, delta=1e-3, accountant=acct)
        layer.fit(x, ei, y, generator=_seeded())
        shapes.append((tuple(layer(x, ei).shape), layer(x, ei).dtype, tuple(layer(x, ei, mode="public").shape)))
    # (float32 features: the scores follow the input dtype)
    assert shapes[0] == shapes[1] == shapes[2] == ((N, 2), torch.float32, (N, 2))
    acct = PrivacyAccountant()
    layer = PerturbedAPPRConv(3, 2, alpha=0.3, steps=2, epsilon=1.0, delta=1e-3, accountant=acct)
    with pytest.raises(ValueError):
        layer.fit(x[: N - 1], G_PRIME, y[: N - 1])
    assert len(acct) == 0
