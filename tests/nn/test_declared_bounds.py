"""Declared public bounds of ContractiveGraphLayer: checked against every input before anything
is charged or drawn, at edge level (``min_degree``) and node level (fixed node universe,
``max_degree``, ``num_nodes``, ``min_degree`` over the present nodes); node counts from ``x``."""
import warnings

import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.nn import ContractiveGraphLayer, GAPAggregation


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def ring(n: int) -> torch.Tensor:
    i = torch.arange(n)
    return to_undirected(torch.stack([i, (i + 1) % n]), num_nodes=n)


def path(n: int) -> torch.Tensor:
    i = torch.arange(n - 1)
    return to_undirected(torch.stack([i, i + 1]), num_nodes=n)


def degree(ei: torch.Tensor, n: int) -> torch.Tensor:
    return torch.bincount(ei[0], minlength=n)


def _refused(layer, acct, gen, *args, match="min_degree", unit="edge"):
    state = gen.get_state()
    with pytest.raises(ValueError, match=match):
        layer(*args)
    assert len(acct.events_of(unit)) == 0 and torch.equal(gen.get_state(), state)  # nothing charged or drawn


# --------------------------------------------------------------------------------------------
# edge level: min_degree <= smallest degree - 1, and 0 with isolated nodes
# --------------------------------------------------------------------------------------------
def test_min_degree_of_the_graph_itself_is_refused_before_any_charge_or_noise():
    # a ring has minimum degree 2, but a ring minus one edge has 1: declaring 2 is false
    gen, acct = torch.Generator().manual_seed(0), PrivacyAccountant()
    layer = ContractiveGraphLayer(3, 0.9, min_degree=2, noise_multiplier=1.0, accountant=acct, generator=gen)
    x = torch.rand(8, 3)
    _refused(layer, acct, gen, x, ring(8), match=r"min_degree`=2.*any one edge removed.*minus one")
    # a path (degree-1 ends, like Cora's 485 degree-1 nodes) admits only 0
    layer = ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct, generator=gen)
    _refused(layer, acct, gen, x, path(8), match="degree_floor=True")
    # isolated nodes: only 0
    two_rings = torch.cat([ring(4), ring(3) + 4], 1)  # nodes 7 is isolated
    _refused(layer, acct, gen, x, two_rings, match="isolated")
    # the valid declarations pass and charge once
    ContractiveGraphLayer(3, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct)(x, ring(8))
    ContractiveGraphLayer(3, 0.9, min_degree=0, noise_multiplier=1.0, accountant=acct)(x, two_rings)
    assert len(acct.events_of("edge")) == 2


def test_the_rule_is_exactly_smallest_degree_minus_one_in_every_input_form():
    from torch_geometric.utils import to_torch_csr_tensor

    from pyg_private.utils.degree_bounds import max_valid_min_degree

    torch.manual_seed(0)
    for t in range(20):
        n = 6 + t % 7
        ei = erdos_renyi_graph(n, 0.3 + 0.03 * t)
        deg = degree(ei, n)
        ok = max_valid_min_degree(deg)
        assert ok == (max(int(deg.min()) - 1, 0))
        x = torch.rand(n, 2)
        csr = to_torch_csr_tensor(ei, size=(n, n))
        for adj in (ei, csr, torch.sparse_coo_tensor(ei, torch.ones(ei.size(1)), (n, n))):
            ContractiveGraphLayer(2, 0.9, min_degree=ok, noise_multiplier=1.0)(x, adj)
            with pytest.raises(ValueError, match="min_degree"):
                ContractiveGraphLayer(2, 0.9, min_degree=ok + 1, noise_multiplier=1.0)(x, adj)


def test_the_check_applies_to_the_non_private_reference_and_the_cache():
    x, ei = torch.rand(6, 2), path(6)
    with pytest.raises(ValueError, match="min_degree"):
        ContractiveGraphLayer(2, 0.9, min_degree=1, noise_multiplier=0.0)(x, ei)
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(2, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct, cached=True)
    layer(x, ring(6))
    with pytest.raises(ValueError, match="min_degree"):  # a new graph is checked, not served from the cache
        layer(x, ei)
    assert len(acct.events_of("edge")) == 1


def test_error_names_no_value_of_the_private_graph():
    x = torch.rand(30, 2)
    for ei in (path(30), torch.cat([ring(20), ring(10) + 20], 1)):
        with pytest.raises(ValueError) as info:
            ContractiveGraphLayer(2, 0.9, min_degree=5, noise_multiplier=1.0)(x, ei)
        message = str(info.value)
        assert "`min_degree`=5" in message
        digits = {tok for tok in message.replace("=", " ").replace("`", " ").split() if tok.isdigit()}
        assert digits <= {"5", "0"}, digits  # the declared value and the rule's constant only


def test_repr_and_event_name_the_declared_bounds():
    layer = ContractiveGraphLayer(2, 0.9, min_degree=3, noise_multiplier=1.0)
    assert "min_degree=3" in repr(layer) and "degree_floor" not in repr(layer)
    floored = ContractiveGraphLayer(2, 0.9, min_degree=3, degree_floor=True, noise_multiplier=1.0)
    assert "min_degree=3, degree_floor=True" in repr(floored) and floored.event().params["degree_floor"] is True
    node = ContractiveGraphLayer(2, 0.9, 0.5, level="node", min_degree=0, max_degree=4, num_nodes=9,
                                 noise_multiplier=1.0)
    assert "max_degree=4, num_nodes=9" in repr(node)
    with pytest.raises(TypeError, match="min_degree"):
        ContractiveGraphLayer(2, 0.9, min_degree=1.5, noise_multiplier=1.0)


# --------------------------------------------------------------------------------------------
# node level: a fixed public universe of num_nodes rows
# --------------------------------------------------------------------------------------------
def _node_layer(acct=None, gen=None, **kw):
    args = dict(level="node", min_degree=0, max_degree=3, num_nodes=10, noise_multiplier=1.0)
    args.update(kw)
    return ContractiveGraphLayer(3, 0.9, 0.8, 0.5, accountant=acct, generator=gen, **args)


def test_node_level_needs_exactly_the_universe_and_refuses_batch():
    gen, acct = torch.Generator().manual_seed(0), PrivacyAccountant()
    layer = _node_layer(acct, gen)
    for n in (9, 11):  # fewer rows (a node dropped) or more: the shape would reveal presence
        _refused(layer, acct, gen, torch.rand(n, 2), ring(n), match=r"universe of `num_nodes`=10", unit="node")
    _refused(layer, acct, gen, torch.rand(10, 2), ring(10), None, torch.zeros(10, dtype=torch.long),
             match="batch", unit="node")
    assert layer(torch.rand(10, 2), ring(10)).shape == (10, 2)


def test_node_present_and_absent_give_the_same_shape():
    # node 3 present (features, edges) or absent (a zero row without edges): both releases have 10 rows
    n = 10
    x = torch.rand(n, 4) + 0.1
    ei = ring(n)
    absent_x = x.clone()
    absent_x[3] = 0.0
    absent_ei = ei[:, (ei != 3).all(0)]
    acct = PrivacyAccountant()
    layer = _node_layer(acct)
    present_out, absent_out = layer(x, ei), layer(absent_x, absent_ei)
    assert present_out.shape == absent_out.shape == (n, 4)
    assert len(acct.events_of("node")) == 2 and len(acct.events_of("edge")) == 0
    # the other encoding of absence, deleting the row, would reveal it through the shape: refused
    keep = torch.arange(n) != 3
    relabel = torch.cumsum(keep.long(), 0) - 1
    with pytest.raises(ValueError, match="pad it to `num_nodes` rows"):
        layer(x[keep], relabel[absent_ei])
    assert len(acct.events_of("node")) == 2


def test_node_level_max_degree_is_checked():
    gen, acct = torch.Generator().manual_seed(0), PrivacyAccountant()
    star = to_undirected(torch.stack([torch.zeros(9, dtype=torch.long), torch.arange(1, 10)]), num_nodes=10)
    _refused(_node_layer(acct, gen), acct, gen, torch.rand(10, 2), star, match="max_degree`=3", unit="node")
    _node_layer(acct, gen, max_degree=9)(torch.rand(10, 2), star)
    assert len(acct.events_of("node")) == 1


def test_node_level_min_degree_rule_counts_present_nodes_only():
    # a 4-regular graph on the 8 present nodes 0..7 (degree 4 >= min_degree + 1), nodes 8, 9 absent
    base = torch.arange(8)
    ei = to_undirected(torch.cat([torch.stack([base, (base + 1) % 8]), torch.stack([base, (base + 2) % 8])], 1),
                       num_nodes=10)
    x = torch.rand(10, 2) + 0.1
    x[8:] = 0.0
    kw = dict(min_degree=3, max_degree=4)
    _node_layer(**kw)(x, ei)  # absent nodes are zero rows without edges: no degree to check
    with pytest.raises(ValueError, match="min_degree`=4.*any one node removed"):
        _node_layer(min_degree=4, max_degree=4)(x, ei)  # removing a node leaves degree 3 < 4
    lonely = x.clone()
    lonely[9] = 0.5  # node 9 present (features) but isolated: a new node could join it at degree 0
    with pytest.raises(ValueError, match="present node is isolated"):
        _node_layer(**kw)(lonely, ei)
    x0 = x.clone()
    x0[9] = 0.5  # present through x0 alone
    with pytest.raises(ValueError, match="min_degree"):
        _node_layer(**kw)(x, ei, x0)


def test_node_level_refuses_the_degree_floor():
    with pytest.raises(ValueError, match="edge-level privacy only"):
        _node_layer(min_degree=1, degree_floor=True)


# --------------------------------------------------------------------------------------------
# the node count comes from x, never from the largest id of edge_index
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: ContractiveGraphLayer(2, 0.9, min_degree=0, noise_multiplier=1.0),
    lambda: GAPAggregation(2, noise_multiplier=1.0),
])
def test_output_rows_follow_x_and_larger_ids_are_refused(make):
    acct = PrivacyAccountant()
    layer = make()
    layer.accountant = acct
    x = torch.rand(8, 3)
    ei = ring(5)  # nodes 5, 6, 7 isolated: still rows of the output
    assert layer(x, ei).shape[0] == 8
    events = len(acct.events_of("edge"))
    with pytest.raises(ValueError, match="refers to node 8|num_nodes"):
        layer(x, torch.cat([ei, torch.tensor([[0, 8], [8, 0]])], 1))
    with pytest.raises(ValueError):
        layer(x, torch.sparse_coo_tensor(ring(9), torch.ones(18), (9, 9)))
    assert len(acct.events_of("edge")) == events
