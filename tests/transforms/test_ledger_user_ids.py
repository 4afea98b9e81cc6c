"""The local-DP ledger charges users, not row positions.

PyG's ``NeighborLoader`` (and ``ClusterLoader``) attach ``n_id``, the global id of every row
of a batch. One user can sit at different positions in different batches, and different
users at the same position; a ledger keyed by position then undercounts the first and
overcounts the second. The local transforms charge by ``n_id`` (or ``node_id``)."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant
from pyg_private.transforms import HDSFeaturePerturb, LaplaceFeaturePerturb

EPS = 1.5


def _batch(n_id, d=4, seed=0):
    n_id = torch.as_tensor(n_id)
    x = torch.rand(n_id.numel(), d, generator=torch.Generator().manual_seed(seed))
    return Data(x=x, n_id=n_id)


def _transform(acct, cls=HDSFeaturePerturb):
    kwargs = {"k": 2} if cls is HDSFeaturePerturb else {}
    return cls(EPS, feature_range=(0.0, 1.0), accountant=acct, generator=torch.Generator().manual_seed(1), **kwargs)


@pytest.mark.parametrize("cls", [HDSFeaturePerturb, LaplaceFeaturePerturb])
def test_a_user_at_two_positions_is_charged_twice_to_one_entry(cls):
    acct = PrivacyAccountant()
    t = _transform(acct, cls)
    # two NeighborLoader-like batches of a path 0-1-2-3-4 (seeds 1 and 3, one hop):
    # user 2 is row 2 of the first batch and row 1 of the second
    t(_batch([1, 0, 2], seed=0))
    t(_batch([3, 2, 4], seed=1))
    per_node = acct.node_epsilons()
    assert per_node[2] == pytest.approx(2 * EPS)  # the double charge, on user 2's own entry
    np.testing.assert_allclose(per_node[[0, 1, 3, 4]], EPS)
    assert len(per_node) < 6 or per_node[5:].max() == 0  # nobody else was charged
    assert per_node.max() == pytest.approx(2 * EPS)


def test_different_users_at_one_position_are_not_charged_together():
    acct = PrivacyAccountant()
    t = _transform(acct)
    t(_batch([0, 1], seed=0))
    t(_batch([4, 3, 5], seed=1))
    per_node = acct.node_epsilons()
    np.testing.assert_allclose(per_node[[0, 1, 3, 4, 5]], EPS)  # every user once
    assert per_node[2] == 0.0
    assert per_node.max() == pytest.approx(EPS)  # by position it was 2 * EPS


def test_n_id_and_node_id_must_agree():
    acct = PrivacyAccountant()
    t = _transform(acct)
    data = _batch([5, 6, 7])
    data.node_id = torch.tensor([7, 6, 5])
    with pytest.raises(ValueError, match="n_id"):
        t(data)
    assert len(acct) == 0
    data.node_id = torch.tensor([5, 6, 7])  # both given and equal: fine
    t(data)
    per_node = acct.node_epsilons()
    np.testing.assert_allclose(per_node[[5, 6, 7]], EPS)
    assert per_node[:5].max() == 0


def test_malformed_n_id_is_refused_before_charging():
    acct = PrivacyAccountant()
    t = _transform(acct)
    for bad in (torch.tensor([0, 0, 1]), torch.tensor([0, 1]), torch.tensor([0.0, 1.0, 2.0]), torch.tensor([-1, 0, 1])):
        data = _batch([0, 1, 2])
        data.n_id = bad
        with pytest.raises(ValueError, match="n_id"):
            t(data)
    assert len(acct) == 0


def test_a_real_neighbor_loader_batch_is_charged_by_its_global_ids():
    import torch_geometric.typing as pyg_typing
    from torch_geometric.loader import NeighborLoader

    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        pytest.skip("NeighborLoader needs pyg-lib or torch-sparse")
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    data = Data(x=torch.rand(6, 4), edge_index=ei)
    acct = PrivacyAccountant()
    t = _transform(acct)
    expected = np.zeros(6)
    loader = NeighborLoader(data, num_neighbors=[-1], batch_size=1, input_nodes=torch.tensor([1, 3]), shuffle=False)
    for batch in loader:
        t(batch)
        expected[batch.n_id.numpy()] += EPS
    got = acct.node_epsilons()
    np.testing.assert_allclose(got[: len(expected)], expected[: len(got)])
