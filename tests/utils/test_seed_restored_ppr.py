"""lazy_ppr_restoring_seed_edges against lazy_ppr on each seed's explicitly rebuilt graph.

For seed v the graph is the released one with v's row and column put back to the truth:
the released edges with neither endpoint at v, plus v's true edges. The function shares
one released graph between all seeds and corrects each column; it must agree with the
explicit construction to rounding.
"""
import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph

from pyg_private.mechanisms import flip_edges
from pyg_private.utils import lazy_ppr, lazy_ppr_restoring_seed_edges, simple_undirected



def _restored_graph(released, truth, v):
    """Released edges not incident to v, plus v's true edges (both directions)."""
    away = (released[0] != v) & (released[1] != v)
    own = (truth[0] == v) | (truth[1] == v)
    return torch.cat([released[:, away], truth[:, own]], dim=1)


def _explicit(released, truth, n, seeds, alpha, k):
    cols = [lazy_ppr(_restored_graph(released, truth, v), n, seed_index=[v], alpha=alpha, num_iterations=k)
            for v in seeds]
    return torch.cat(cols, dim=1)


def _er(n, p, seed, num_nodes=None):
    torch.manual_seed(seed)
    ei, total = simple_undirected(erdos_renyi_graph(n, p), num_nodes or n)
    return ei, total


def _degree(ei, n):
    return torch.bincount(ei[0], minlength=n)


@pytest.mark.parametrize("seed, q", [(0, 0.9), (1, 0.7), (2, 0.55)])
def test_matches_the_explicit_graph_on_flipped_releases(seed, q):
    ei, n = _er(36, 0.1, seed, num_nodes=40)  # nodes 36..39 have no true edges
    gen = torch.Generator().manual_seed(seed)
    released = flip_edges(ei, n, q, generator=gen)
    deg_true, deg_rel = _degree(ei, n), _degree(released, n)
    zero_true = int(torch.nonzero(deg_true == 0)[0])
    assert deg_rel[zero_true] > 0 or q > 0.85  # the release gave the truly isolated seed edges
    hub = int(deg_true.argmax())
    seeds = [zero_true, hub, 0, hub, 5, 39, zero_true]  # repeated seeds, truly isolated seeds
    out = lazy_ppr_restoring_seed_edges(released, ei, n, torch.tensor(seeds), alpha=0.2, num_iterations=40)
    assert out.dtype == torch.float64 and out.shape == (n, len(seeds))
    ref = _explicit(released, ei, n, seeds, 0.2, 40)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    # restoring matters: lazy PPR on the bare release differs
    bare = lazy_ppr(released, n, seed_index=seeds, alpha=0.2, num_iterations=40)
    assert float((bare - ref).abs().max()) > 1e-3
    # a seed without true edges keeps only its own restart mass: (1-b) sum (b/2)^k + (b/2)^K
    expected = 0.2 * sum(0.4 ** k for k in range(40)) + 0.4 ** 40
    assert float(out[zero_true, 0]) == pytest.approx(expected, abs=1e-14)
    assert float(out[:, 0].abs().sum()) == pytest.approx(expected, abs=1e-14)


def test_matches_on_an_unrelated_release_with_isolated_nodes():
    # the release need not come from the truth: every seed's row differs a lot
    n = 30
    truth, _ = _er(26, 0.15, 10, num_nodes=n)  # 26..29 have no true edges
    released, _ = _er(28, 0.2, 11, num_nodes=n)  # 28, 29 isolated in the release
    released = released[:, (released[0] != 2) & (released[1] != 2)]  # 2: isolated in the release only
    deg_true, deg_rel = _degree(truth, n), _degree(released, n)
    assert deg_rel[2] == 0 < deg_true[2] and deg_true[27] == 0 < deg_rel[27] and deg_true[29] == deg_rel[29] == 0
    seeds = list(range(n)) + [3, 3, 2]
    out = lazy_ppr_restoring_seed_edges(released, truth, n, seeds, alpha=0.35, num_iterations=25)
    torch.testing.assert_close(out, _explicit(released, truth, n, seeds, 0.35, 25), rtol=0, atol=1e-12)


def test_a_seed_whose_release_is_isolated_gets_its_true_edges_back():
    # path 0-1-2-3 in the truth; the release drops every edge of node 0 and adds 0 nowhere
    truth = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    released = torch.tensor([[1, 2, 2, 3], [2, 1, 3, 2]])
    out = lazy_ppr_restoring_seed_edges(released, truth, 4, [0, 3], alpha=0.2, num_iterations=1)
    # one step: b W e_v + (1-b) e_v with v's true degree
    torch.testing.assert_close(out[:, 0], torch.tensor([0.6, 0.4, 0.0, 0.0], dtype=torch.float64),
                               rtol=0, atol=1e-15)
    torch.testing.assert_close(out[:, 1], torch.tensor([0.0, 0.0, 0.4, 0.6], dtype=torch.float64),
                               rtol=0, atol=1e-15)
    torch.testing.assert_close(
        lazy_ppr_restoring_seed_edges(released, truth, 4, [0, 3, 1], alpha=0.2, num_iterations=30),
        _explicit(released, truth, 4, [0, 3, 1], 0.2, 30), rtol=0, atol=1e-12)


def test_identical_truth_and_release_is_plain_lazy_ppr():
    ei, n = _er(50, 0.08, 20, num_nodes=53)
    seeds = torch.tensor([0, 7, 7, 52, 49])
    out = lazy_ppr_restoring_seed_edges(ei, ei, n, seeds, alpha=0.2, num_iterations=60)
    torch.testing.assert_close(out, lazy_ppr(ei, n, seed_index=seeds, alpha=0.2, num_iterations=60),
                               rtol=0, atol=1e-15)
    empty = torch.empty(2, 0, dtype=torch.long)
    out = lazy_ppr_restoring_seed_edges(empty, empty, 3, [1], alpha=0.5, num_iterations=3)
    torch.testing.assert_close(out[:, 0], torch.tensor([0.0, 0.5 * (1 + 0.25 + 0.0625) + 0.25 ** 3, 0.0],
                                                       dtype=torch.float64), rtol=0, atol=1e-15)


def test_bad_seeds_raise():
    ei, n = _er(10, 0.3, 30)
    with pytest.raises(ValueError, match="seed_index"):
        lazy_ppr_restoring_seed_edges(ei, ei, n, [n], alpha=0.2, num_iterations=3)
