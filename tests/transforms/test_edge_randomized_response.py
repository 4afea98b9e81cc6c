"""Edge randomized response: exact flip law, edge-DP density ratio, accounting, validation."""
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph, is_undirected

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.mechanisms import flip_edges
from pyg_private.transforms import EdgeRandomizedResponse


def _adjacency(edge_index, n):
    a = torch.zeros(n, n)
    a[edge_index[0], edge_index[1]] = 1
    return a


def test_flip_law_and_density_ratio():
    n, trials, eps = 12, 4000, 1.0
    q = math.exp(eps) / (1 + math.exp(eps))
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(3)
    edge_index = erdos_renyi_graph(n, 0.3)
    truth = _adjacency(edge_index, n)
    counts = torch.zeros(n, n)
    for _ in range(trials):
        out = flip_edges(edge_index, n, q, generator=gen)
        assert out.size(1) % 2 == 0 and is_undirected(out) and bool((out[0] != out[1]).all())
        counts += _adjacency(out, n)
    iu = torch.triu_indices(n, n, 1)
    freq = (counts / trials)[iu[0], iu[1]]
    bit = truth[iu[0], iu[1]].bool()
    # per-pair frequencies: binomial std at most 0.0075; allow 5 std for the extremes
    assert (freq[bit] - q).abs().max() < 0.04
    assert (freq[~bit] - (1 - q)).abs().max() < 0.04
    # the edge-DP likelihood ratio of reporting 1 is e^eps (pooled, tight)
    ratio = freq[bit].mean() / freq[~bit].mean()
    assert ratio == pytest.approx(math.exp(eps), rel=0.03)


def test_transform_charges_once_and_marks_data():
    torch.manual_seed(0)
    data = Data(edge_index=erdos_renyi_graph(50, 0.1), num_nodes=50, edge_weight=None)
    acct = PrivacyAccountant(budget={"edge": 3.0})
    rr = EdgeRandomizedResponse(epsilon=2.0, accountant=acct, generator=torch.Generator().manual_seed(0))
    out = rr(data.clone())
    assert len(acct) == 1 and acct.pure_epsilon("edge") == pytest.approx(2.0)
    assert is_undirected(out.edge_index)
    with pytest.raises(ValueError, match="already randomised"):
        rr(out)
    with pytest.raises(PrivacyBudgetExceeded):  # 2 + 2 > 3, refused before sampling
        EdgeRandomizedResponse(epsilon=2.0, accountant=acct, allow_recompose=True)(out)
    assert len(acct) == 1
    assert "epsilon=2" in repr(rr)


def test_directed_input_is_refused_unless_symmetrized():
    data = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3)
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="directed"):
        EdgeRandomizedResponse(epsilon=1.0, accountant=acct)(data.clone())
    assert len(acct) == 0
    out = EdgeRandomizedResponse(epsilon=5.0, accountant=acct, symmetrize=True)(data.clone())
    assert is_undirected(out.edge_index)
    with pytest.raises(ValueError, match="self-loops"):
        EdgeRandomizedResponse(epsilon=1.0)(Data(edge_index=torch.tensor([[0, 1, 1], [1, 0, 1]]), num_nodes=2))
    with pytest.raises(ValueError, match="exactly one"):
        EdgeRandomizedResponse()


def test_a_release_too_large_to_hold_is_refused_before_any_charge_with_the_expected_count():
    from torch_geometric.data import Data

    from pyg_private import PrivacyAccountant
    from pyg_private.transforms import EdgeRandomizedResponse

    n = 3000
    data = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=n)
    acct = PrivacyAccountant()
    rr = EdgeRandomizedResponse(epsilon=1.0, accountant=acct, max_edges=1_000_000)
    expected = (1 - rr.q) * n * (n - 1) / 2  # about 1.2M pairs flipped in at epsilon 1
    with pytest.raises(ValueError, match=f"about {expected:,.0f} edges"):
        rr(data)
    assert len(acct) == 0
    small = EdgeRandomizedResponse(epsilon=1.0, accountant=acct, max_edges=2_000_000)(data.clone())
    assert len(acct) == 1 and small.edge_index.size(1) > 0
    with pytest.raises(ValueError, match="max_edges"):
        EdgeRandomizedResponse(epsilon=1.0, max_edges=0)
