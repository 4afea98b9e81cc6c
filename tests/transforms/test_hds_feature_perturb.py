"""HDSFeaturePerturb: Lemma 3.2 moments through the transform, support, exactly k non-zeros,
density ratio, public range, per-node accounting, re-release guards (marks and the
``transform=`` pitfall), node_mask, sparse output."""
import tempfile
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData, InMemoryDataset

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.mechanisms.square_wave import hds_moments, square_wave_params
from pyg_private.transforms import HDSFeaturePerturb, L2RowNormalize

from moment_checks import mean_var_checks


def _data(n=200, d=12, seed=0, low=0.0, high=1.0):
    g = torch.Generator().manual_seed(seed)
    x = low + (high - low) * torch.rand(n, d, generator=g)
    return Data(x=x, edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=n)


def _quiet(transform, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return transform(data)




@pytest.mark.parametrize("unbiased", [False, True])
def test_moments_match_lemma_3_2_through_the_public_range(unbiased):
    """d = 10, k = 3, eps = 1 (the spec's Monte Carlo setting); features in [0, 2] declared
    public, so x_norm = x - 1; the mean is C x_norm (C x_norm / C if unbiased)."""
    n, d, k, eps = 30_000, 10, 3, 1.0
    row = torch.linspace(0.0, 2.0, d, dtype=torch.float64)
    data = Data(x=row.expand(n, d).clone(), num_nodes=n)
    t = HDSFeaturePerturb(eps, k, (0.0, 2.0), unbiased=unbiased, accountant=PrivacyAccountant(),
                          generator=torch.Generator().manual_seed(1))
    out = t(data).x
    assert out.dtype == torch.float64
    mean, var = hds_moments(row - 1.0, eps, k, d, unbiased=unbiased)
    for j in range(d):
        mean_var_checks(out[:, j], float(mean[j]), float(var[j]))
    assert t.coefficient(d) == pytest.approx((k / d) * square_wave_params(eps / k).c1)


@pytest.mark.parametrize("sparse", [False, True])
def test_exactly_k_nonzeros_and_the_output_range(sparse):
    n, d, k = 500, 40, 7
    data = _data(n, d)
    t = HDSFeaturePerturb(2.0, k, (0.0, 1.0), sparse_output=sparse, chunk_size=64,
                          accountant=PrivacyAccountant(), generator=torch.Generator().manual_seed(2))
    out = t(data.clone()).x
    b = square_wave_params(2.0 / k).b
    if sparse:
        assert out.layout == torch.sparse_coo and out.is_coalesced() and out._nnz() == n * k
        rows = out.indices()[0]
        assert bool((torch.bincount(rows, minlength=n) == k).all())
        vals = out.values()
        dense = out.to_dense()
    else:
        dense = out
        vals = out[out != 0]
    assert bool(((dense != 0).sum(1) == k).all())
    assert out.dtype == torch.float32
    # float32 outputs: within [-1-b, 1+b] up to the float32 rounding of the bound
    assert float(vals.abs().max()) <= 1 + b + 1e-6
    lo, hi = t.output_range(d)
    assert hi == pytest.approx(1 + b) and lo == -hi


def test_sparse_and_dense_outputs_sample_the_same_coordinates_for_the_same_seed():
    data = _data(300, 25)
    kw = dict(epsilon=1.0, k=4, feature_range=(0.0, 1.0), accountant=PrivacyAccountant())
    dense = HDSFeaturePerturb(**kw, generator=torch.Generator().manual_seed(5))(data.clone()).x
    sparse = HDSFeaturePerturb(**kw, sparse_output=True, generator=torch.Generator().manual_seed(5))(data.clone()).x
    assert torch.equal(sparse.to_dense() != 0, dense != 0)


def test_density_ratio_of_a_sampled_coordinate_is_bounded_by_e_eps_over_k():
    """Column 0 holds -1 for half the nodes and +1 for the other half (normalised); the
    sampled outputs' histograms differ by at most e^(eps/k) per bin."""
    n, d, k, eps = 120_000, 4, 2, 1.0
    x = torch.zeros(n, d, dtype=torch.float64)
    x[: n // 2, 0], x[n // 2:, 0] = -1.0, 1.0
    out = HDSFeaturePerturb(eps, k, accountant=PrivacyAccountant(),
                            generator=torch.Generator().manual_seed(3))(Data(x=x, num_nodes=n)).x
    a, c = out[: n // 2, 0], out[n // 2:, 0]
    a, c = a[a != 0].numpy(), c[c != 0].numpy()
    b = square_wave_params(eps / k).b
    edges = np.unique(np.concatenate([np.linspace(-1 - b, -1 + b, 5), np.linspace(-1 + b, 1 - b, 5),
                                      np.linspace(1 - b, 1 + b, 5)]))
    ca, _ = np.histogram(a, bins=edges)
    cc, _ = np.histogram(c, bins=edges)
    assert ca.sum() == a.size and cc.sum() == c.size and (ca > 0).all() and (cc > 0).all()
    ca, cc = ca / a.size, cc / c.size  # the two groups sample column 0 a different number of times
    se = np.sqrt(1 / (ca * a.size) + 1 / (cc * c.size))
    assert (np.abs(np.log(ca / cc)) - eps / k - 5 * se).max() <= 0


def test_public_range_is_declared_never_computed():
    data = _data(400, 6, low=0.0, high=0.5)  # the data never reach the declared high = 1
    t = HDSFeaturePerturb(600.0, 6, (0.0, 1.0), accountant=PrivacyAccountant(),
                          generator=torch.Generator().manual_seed(0))
    out = t(data.clone()).x  # eps/k = 100: outputs ~ x_norm = 2x - 1 in [-1, 0] (mean -1/2), not [-1, 1]
    assert float(out.mean()) == pytest.approx(-0.5, abs=0.05)
    # values outside the declared range raise, and nothing is released or charged
    acct = PrivacyAccountant()
    bad = _data(50, 6, low=0.0, high=2.0)
    x_before = bad.x.clone()
    with pytest.raises(ValueError, match="outside the declared public feature_range"):
        HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct)(bad)
    assert len(acct) == 0 and torch.equal(bad.x, x_before) and "ldp" not in bad
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        HDSFeaturePerturb(1.0, 2, accountant=acct)(bad)  # no range: must already be in [-1, 1]
    # unless clamping is asked for
    out = HDSFeaturePerturb(200.0, 6, (0.0, 1.0), clamp=True, accountant=acct,
                            generator=torch.Generator().manual_seed(0))(bad.clone()).x
    assert float(out.max()) <= 1 + square_wave_params(200.0 / 6).b + 1e-6 and len(acct) == 1
    # NaN always raises
    nan = _data(10, 3)
    nan.x[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        HDSFeaturePerturb(1.0, 1, (0.0, 1.0), clamp=True, accountant=acct)(nan)
    # a few ulps outside is rounding (e.g. an L2-normalised float32 row)
    edge = Data(x=torch.tensor([[1.0000001, 0.0], [-1.0, 0.5]]), num_nodes=2)
    HDSFeaturePerturb(1.0, 1, accountant=acct)(edge)


def test_per_column_range_and_l2_normalised_input():
    acct = PrivacyAccountant()
    x = torch.tensor([[0.0, 10.0, -3.0], [1.0, 20.0, 3.0], [0.5, 15.0, 0.0]])
    t = HDSFeaturePerturb(600.0, 3, ([0.0, 10.0, -3.0], [1.0, 20.0, 3.0]), accountant=acct,
                          generator=torch.Generator().manual_seed(0))
    out = t(Data(x=x, num_nodes=3)).x  # eps/k = 200: the output is the normalised input
    assert torch.allclose(out, torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), atol=1e-6)
    with pytest.raises(ValueError, match="3 features"):
        HDSFeaturePerturb(1.0, 1, ([0.0, 0.0], [1.0, 1.0]), accountant=acct)(Data(x=x, num_nodes=3))
    with pytest.raises(ValueError, match="low < high"):
        HDSFeaturePerturb(1.0, 1, ([0.0, 1.0], [1.0, 1.0]))
    # L2RowNormalize is a per-node way into [-1, 1]
    data = L2RowNormalize()(_data(40, 8, low=-5.0, high=5.0))
    HDSFeaturePerturb(1.0, 2, accountant=acct)(data)


def test_ledger_charges_users_by_node_id_across_subgraphs():
    """Two subgraphs of one population (PyG's ``subgraph`` keeps ``node_id``): users 5-9 sit
    at positions 5-9 in the first and 0-4 in the second. By position the ledger would
    say every user spent epsilon once; by ``node_id`` users 5-9 spent it twice."""
    acct = PrivacyAccountant()
    population = _data(15, 4)
    population.node_id = torch.arange(15)
    first = population.subgraph(torch.arange(0, 10))
    second = population.subgraph(torch.arange(5, 15))
    assert first.node_id.tolist() == list(range(10)) and second.node_id.tolist() == list(range(5, 15))
    HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct)(first)
    HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct)(second)
    np.testing.assert_allclose(acct.node_epsilons(), [1.0] * 5 + [2.0] * 5 + [1.0] * 5)
    assert acct.pure_epsilon("local") == pytest.approx(2.0)
    # with node_mask: positions are mapped to their users
    masked = population.subgraph(torch.arange(5, 15))
    _quiet(HDSFeaturePerturb(1.0, 2, (0.0, 1.0), node_mask=torch.tensor([0, 9]), accountant=acct), masked)
    assert acct.events[-1].nodes.tolist() == [5, 14] and acct.events[-1].num_nodes == 15
    for bad in (torch.tensor([0, 1, 1]), torch.tensor([-1, 0, 1]), torch.tensor([0.0, 1.0, 2.0])):
        d = _data(3, 4)
        d.node_id = bad
        with pytest.raises(ValueError, match="node_id"):
            HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=PrivacyAccountant())(d)


def test_per_node_ledger_and_node_mask():
    n = 30
    acct = PrivacyAccountant()
    data = _data(n, 5)
    data.train_mask = torch.arange(n) < 10
    first = HDSFeaturePerturb(1.0, 2, (0.0, 1.0), node_mask="train_mask", accountant=acct)
    with pytest.warns(UserWarning, match="20 of 30 rows"):
        out = first(data.clone())
    assert torch.equal(out.x[10:], data.x[10:])  # the others stay raw
    assert not torch.equal(out.x[:10], data.x[:10])
    assert torch.equal(out.ldp_mask, data.train_mask)
    ev = acct.events[0]
    assert ev.unit.value == "local" and ev.nodes.tolist() == list(range(10)) and ev.num_nodes == n
    assert ev.params["k"] == 2 and ev.params["eps_per_coord"] == 0.5
    # the remaining nodes, by id, once: no overlap, no error
    second = HDSFeaturePerturb(0.5, 1, (0.0, 1.0), node_mask=torch.arange(10, n), accountant=acct)
    out2 = _quiet(second, out)
    assert bool(out2.ldp_mask.all()) and out2.ldp["num_releases"] == 2
    # overlapping nodes again: refused, then allowed and charged again
    third = HDSFeaturePerturb(0.25, 1, node_mask=torch.arange(5, 15), clamp=True, accountant=acct)
    with pytest.raises(ValueError, match="already perturbed"):
        _quiet(third, out2)
    third.allow_recompose = True
    _quiet(third, out2)
    expected = np.array([1.0] * 5 + [1.25] * 5 + [0.75] * 5 + [0.5] * 15)
    np.testing.assert_allclose(acct.node_epsilons(), expected)
    assert acct.pure_epsilon("local") == pytest.approx(1.25)
    assert acct.report()["local"]["nodes_touched"] == n


def test_second_application_and_transform_access_are_detected():
    acct = PrivacyAccountant(budget={"local": 3.5})
    t = HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct)
    data = _data(20, 4)
    out = t(data)
    with pytest.raises(ValueError, match="already perturbed"):
        t(out)
    # the same raw features again (what `transform=` does at every access)
    with pytest.raises(ValueError, match="pre_transform"):
        t(data)
    assert len(acct) == 1
    # other raw features are another release (charged to the same node ids: one ledger, one node set)
    t(_data(20, 4, seed=1))
    # allowed: charged again, and the budget is enforced before any noise
    again = HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct, allow_recompose=True)
    again(data)
    assert acct.pure_epsilon("local") == pytest.approx(3.0)
    x_before = data.x.clone()
    with pytest.raises(PrivacyBudgetExceeded):
        again(data)
    assert torch.equal(data.x, x_before) and acct.pure_epsilon("local") == pytest.approx(3.0)


class _OneGraph(InMemoryDataset):
    def __init__(self, root, transform=None, pre_transform=None):
        super().__init__(root, transform, pre_transform)
        self.load(self.processed_paths[0])

    @property
    def raw_file_names(self):
        return []

    @property
    def processed_file_names(self):
        return ["graph.pt"]

    def download(self):
        pass

    def process(self):
        data = _data(30, 5)
        if self.pre_transform is not None:
            data = self.pre_transform(data)
        self.save([data], self.processed_paths[0])


def test_dataset_transform_is_refused_and_pre_transform_is_charged_once():
    acct = PrivacyAccountant()
    with tempfile.TemporaryDirectory() as root:
        ds = _OneGraph(root + "/a", transform=HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct))
        first = ds[0]
        assert first.ldp["mechanism"] == "hds-square-wave"
        with pytest.raises(ValueError, match="transform="):
            ds[0]  # every access would be a new release
        assert len(acct) == 1
        pre = _OneGraph(root + "/b", pre_transform=HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct))
        a, b = pre[0], pre[0]
        assert torch.equal(a.x, b.x) and a.ldp["k"] == 2 and bool(a.ldp_mask.all())
        assert len(acct) == 2


def test_tiny_budget_per_coordinate_has_no_nan():
    data = _data(100, 60)
    out = HDSFeaturePerturb(50 * 1e-8, 50, (0.0, 1.0), accountant=PrivacyAccountant(),
                            generator=torch.Generator().manual_seed(0))(data).x
    assert torch.isfinite(out).all() and bool(((out != 0).sum(1) == 50).all())


def test_reproducible_with_a_generator_and_fresh_without():
    data = _data(50, 10)
    kw = dict(epsilon=1.0, k=3, feature_range=(0.0, 1.0), accountant=PrivacyAccountant())
    a = HDSFeaturePerturb(**kw, generator=torch.Generator().manual_seed(9))(data.clone()).x
    b = HDSFeaturePerturb(**kw, generator=torch.Generator().manual_seed(9))(data.clone()).x
    c = HDSFeaturePerturb(**kw)(data.clone()).x
    assert torch.equal(a, b) and not torch.equal(a, c)
    # chunking changes the stream but not the law: every chunk size gives k non-zeros
    d = HDSFeaturePerturb(**kw, chunk_size=7, generator=torch.Generator().manual_seed(9))(data.clone()).x
    assert bool(((d != 0).sum(1) == 3).all())


def test_input_validation_and_repr():
    with pytest.raises(ValueError, match="epsilon"):
        HDSFeaturePerturb(0.0, 1)
    with pytest.raises(TypeError, match="k"):
        HDSFeaturePerturb(1.0, 2.5)
    with pytest.raises(ValueError, match="epsilon / k"):
        HDSFeaturePerturb(1e4, 1)
    with pytest.raises(ValueError, match="exceeds"):
        HDSFeaturePerturb(1.0, 5, accountant=PrivacyAccountant())(Data(x=torch.zeros(3, 4), num_nodes=3))
    with pytest.raises(TypeError, match="dense"):
        HDSFeaturePerturb(1.0, 1)(Data(x=torch.eye(3).to_sparse(), num_nodes=3))
    with pytest.raises(TypeError, match="Data"):
        HDSFeaturePerturb(1.0, 1)({"x": torch.zeros(3, 2)})
    with pytest.raises(ValueError, match="no node type"):  # a HeteroData is perturbed per node type
        HDSFeaturePerturb(1.0, 1)(HeteroData())
    with pytest.raises(ValueError, match="selects no node"):
        HDSFeaturePerturb(1.0, 1, node_mask=torch.zeros(3, dtype=torch.bool))(Data(x=torch.zeros(3, 2), num_nodes=3))
    with pytest.raises(ValueError, match="ids must lie"):
        HDSFeaturePerturb(1.0, 1, node_mask=[0, 7])(Data(x=torch.zeros(3, 2), num_nodes=3))
    with pytest.raises(ValueError, match="feature_range"):
        HDSFeaturePerturb(1.0, 1, (1.0, float("inf")))
    # no accountant: works, warns once that the cost is untracked
    with pytest.warns(UntrackedPrivacyWarning):
        out = HDSFeaturePerturb(1.0, 1)(Data(x=torch.zeros(3, 2, dtype=torch.long), num_nodes=3))
    assert out.x.dtype == torch.get_default_dtype()
    # another attribute gets its own marks
    data = Data(feat=torch.zeros(4, 3), num_nodes=4)
    out = HDSFeaturePerturb(1.0, 1, attr="feat", accountant=PrivacyAccountant())(data)
    assert "feat_ldp" in out and "feat_ldp_mask" in out and "ldp" not in out
    assert repr(HDSFeaturePerturb(1.0, 5, (0, 1), sparse_output=True)) == (
        "HDSFeaturePerturb(epsilon=1, k=5, feature_range=[0, 1], clamp=False, sparse_output=True, unbiased=False, "
        "sampler='safe')")
    assert repr(HDSFeaturePerturb(2.0, 3, ([0, 0], [1, 2]), clamp=True, node_mask="train_mask", unbiased=True,
                                  sampler="float")) == (
        "HDSFeaturePerturb(epsilon=2, k=3, feature_range=per-column, clamp=True, node_mask='train_mask', "
        "unbiased=True, sampler='float')")
    assert repr(HDSFeaturePerturb(1.0, 1, secure_mode=True)).endswith("sampler='safe', secure_mode=True)")
