"""EdgeRandomizedResponse refuses to release the same raw graph twice (the ``transform=`` pitfall).

As a dataset's ``transform=`` it runs at every access on a fresh copy of the raw graph, which
carries no mark: three accesses were three releases (pure epsilon 18 at epsilon 6), and the
copies together remove the noise. The transform remembers a keyed fingerprint of every graph
it released, like the local feature transforms, and refuses a second release unless
``allow_recompose=True``."""
import warnings

import pytest
import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant
from pyg_private.transforms import EdgeRandomizedResponse, HDSFeaturePerturb

N = 30


def _graph(seed=0):
    torch.manual_seed(seed)
    return erdos_renyi_graph(N, 0.2)


class _OneGraph(InMemoryDataset):
    def __init__(self, data, transform=None):
        super().__init__(None, transform=transform)
        self.data, self.slices = self.collate([data])


def test_dataset_transform_is_released_once():
    acct = PrivacyAccountant()
    rr = EdgeRandomizedResponse(epsilon=6.0, accountant=acct)
    dataset = _OneGraph(Data(edge_index=_graph(), num_nodes=N), transform=rr)
    first = dataset[0]
    assert first.edge_randomized_response
    for _ in range(2):
        with pytest.raises(ValueError, match="allow_recompose"):
            dataset[0]
    assert len(acct) == 1 and acct.pure_epsilon("edge") == pytest.approx(6.0)  # not 18


def test_the_same_raw_graph_is_refused_and_another_graph_is_not():
    acct = PrivacyAccountant()
    gen = torch.Generator().manual_seed(0)
    rr = EdgeRandomizedResponse(epsilon=1.0, accountant=acct, generator=gen)
    raw = Data(edge_index=_graph(), num_nodes=N)
    rr(raw.clone())
    state = gen.get_state().clone()
    with pytest.raises(ValueError, match="already released this exact graph"):
        rr(raw.clone())
    # the same graph in another edge order, or with the node count declared through x, is the same graph
    perm = torch.randperm(raw.edge_index.size(1), generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="allow_recompose"):
        rr(Data(edge_index=raw.edge_index[:, perm], x=torch.ones(N, 1)))
    assert len(acct) == 1 and torch.equal(gen.get_state(), state)  # refused before any bit is drawn
    rr(Data(edge_index=_graph(seed=1), num_nodes=N))  # another graph: a release of its own
    rr(Data(edge_index=raw.edge_index, num_nodes=N + 1))  # another node set: another graph
    assert len(acct) == 3


def test_a_symmetrised_input_is_fingerprinted_as_the_graph_it_becomes():
    directed = torch.tensor([[0, 1, 2], [1, 2, 3]])
    rr = EdgeRandomizedResponse(epsilon=1.0, symmetrize=True)
    rr(Data(edge_index=directed, num_nodes=5))
    with pytest.raises(ValueError, match="allow_recompose"):
        rr(Data(edge_index=to_undirected(directed), num_nodes=5))


def test_allow_recompose_releases_and_charges_every_call():
    acct = PrivacyAccountant()
    rr = EdgeRandomizedResponse(epsilon=6.0, accountant=acct, allow_recompose=True)
    dataset = _OneGraph(Data(edge_index=_graph(), num_nodes=N), transform=rr)
    for _ in range(3):
        dataset[0]
    assert len(acct) == 3 and acct.pure_epsilon("edge") == pytest.approx(18.0)
    out = dataset[0]
    rr(out)  # marked data too, when asked
    assert len(acct) == 5
    assert "allow_recompose=True" in repr(rr)


def test_randomised_output_is_still_refused_without_the_opt_in():
    rr = EdgeRandomizedResponse(epsilon=1.0)
    out = rr(Data(edge_index=_graph(), num_nodes=N))
    with pytest.raises(ValueError, match="already randomised.*allow_recompose"):
        EdgeRandomizedResponse(epsilon=1.0)(out)
    EdgeRandomizedResponse(epsilon=1.0, allow_recompose=True)(out)
    with pytest.raises(TypeError, match="allow_recompose"):
        EdgeRandomizedResponse(epsilon=1.0, allow_recompose=1)


def test_allow_repeat_is_a_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="allow_recompose"):
        rr = EdgeRandomizedResponse(epsilon=1.0, allow_repeat=True)
    assert rr.allow_recompose and rr.allow_repeat
    raw = Data(edge_index=_graph(), num_nodes=N)
    rr(raw.clone())
    rr(raw.clone())


def test_the_true_adjacency_does_not_survive_next_to_the_release():
    ei = _graph()
    adj_t = torch.sparse_coo_tensor(ei, torch.ones(ei.size(1)), (N, N), check_invariants=True)
    out = EdgeRandomizedResponse(epsilon=1.0)(Data(edge_index=ei, adj_t=adj_t, edge_weight=torch.ones(ei.size(1))))
    assert "adj_t" not in out and "edge_weight" not in out
    assert out.num_nodes == N  # the count the adjacency declared is kept


def test_the_fingerprint_code_is_shared_with_the_feature_transforms():
    from pyg_private.transforms import _fingerprint, _local_feature_release

    assert _local_feature_release._crc is _fingerprint.crc32_update
    # and the feature transforms' guard still works through it
    t = HDSFeaturePerturb(1.0, 2, feature_range=(0.0, 1.0))
    x = torch.rand(5, 4)
    t(Data(x=x.clone()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="allow_recompose"):
            t(Data(x=x.clone()))


@pytest.mark.parametrize("make", [lambda: EdgeRandomizedResponse(epsilon=2.0),
                                  lambda: HDSFeaturePerturb(epsilon=1.0, k=2, feature_range=(0.0, 1.0))])
def test_the_remembered_fingerprints_reveal_nothing_and_never_leave_the_object(make):
    import copy
    import pickle
    import zlib

    transform = make()
    data = Data(x=torch.rand(N, 4), edge_index=to_undirected(_graph()), num_nodes=N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transform(data.clone())
    memory = transform._released
    assert len(memory) == 1
    (digest,) = list(memory)
    # not a checksum of the raw data (an attacker could test a candidate graph against that),
    # nor the edge count: a digest under a per-instance secret
    raw = (data.edge_index.t().contiguous().numpy(), data.x.contiguous().numpy())
    assert all(digest != zlib.crc32(r).to_bytes(4, "little") for r in raw)
    assert data.edge_index.size(1) not in memory and str(data.edge_index.size(1)).encode() not in digest
    assert make()._released.digest(1, 2, 3) != memory.digest(1, 2, 3)  # secrets differ per instance
    for clone in (pickle.loads(pickle.dumps(transform)), copy.deepcopy(transform)):
        assert len(clone._released) == 0  # nothing private is pickled or copied
    assert b"digest" not in pickle.dumps(transform) and digest not in pickle.dumps(transform)


def test_no_attribute_of_the_true_edges_survives():
    ei = to_undirected(_graph())
    # (PyG's `e_id` marks a sampled batch, which is refused: tests/nn/test_training_stack_sampled_batches.py)
    data = Data(x=torch.rand(N, 2), edge_index=ei, edge_weight=torch.rand(ei.size(1)),
                edge_label=torch.ones(ei.size(1)), num_nodes=N)
    out = EdgeRandomizedResponse(epsilon=1.0, accountant=PrivacyAccountant())(data)
    assert {"edge_weight", "edge_label"}.isdisjoint(out.keys())
    assert out.x is data.x and out.num_nodes == N
