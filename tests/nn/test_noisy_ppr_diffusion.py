"""NoisyPPRDiffusion: exactness, the distortion bound by brute force, accounting, caching, inputs."""
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.accounting.pabi import lazy_ppr_rdp
from pyg_private.nn import NoisyPPRDiffusion

NO_NOISE = dict(noise_scale=1e-300, sampler="float")  # the float path's noise-free limit (no grid fits 1e-300)


def exact_lazy_ppr(edge_index, n, seeds, beta, K):
    """Independent dense reference: s_k = beta W s_{k-1} + (1-beta) s, W = (I + A D^-1)/2."""
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edge_index[0], edge_index[1]] = 1
    d = a.sum(0)
    w = 0.5 * (torch.eye(n, dtype=torch.float64) + a / torch.where(d > 0, d, torch.ones_like(d)))
    s = torch.zeros(n, len(seeds), dtype=torch.float64)
    s[seeds, torch.arange(len(seeds))] = 1
    p = s.clone()
    for _ in range(K):
        p = beta * w @ p + (1 - beta) * s
    return p


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def test_sigma_to_zero_eta_to_infinity_is_exact_lazy_ppr():
    torch.manual_seed(0)
    ei = erdos_renyi_graph(60, 0.08)
    layer = NoisyPPRDiffusion(alpha=0.15, num_iterations=80, eta=1e300, **NO_NOISE)
    x = torch.zeros(60, 3, dtype=torch.float64)
    x[[0, 7, 59], [0, 1, 2]] = 1
    out = layer(x, ei)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, exact_lazy_ppr(ei, 60, [0, 7, 59], 0.85, 80), rtol=0, atol=1e-13)


def test_noise_scale_zero_is_the_exact_non_private_reference():
    torch.manual_seed(0)
    ei = erdos_renyi_graph(60, 0.08)
    layer = NoisyPPRDiffusion(alpha=0.15, num_iterations=80, eta=1e300, noise_scale=0.0)
    x = torch.zeros(60, 3, dtype=torch.float64)
    x[[0, 7, 59], [0, 1, 2]] = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to track: no UntrackedPrivacyWarning either
        out = layer(x, ei)
    torch.testing.assert_close(out, exact_lazy_ppr(ei, 60, [0, 7, 59], 0.85, 80), rtol=0, atol=1e-13)
    assert torch.equal(layer(x, ei), out)  # deterministic
    assert torch.isinf(layer.column_curve()).all()
    with pytest.raises(ValueError, match="no privacy event"):
        layer.event(1)
    with pytest.raises(ValueError, match="non-private reference"):
        NoisyPPRDiffusion(noise_scale=0.0, accountant=PrivacyAccountant())


def _random_simple_graph(rng, n):
    pairs = [(i, j) for i, j in itertools.combinations(range(n), 2) if rng.random() < 0.5]
    return pairs


def test_single_step_distortion_never_exceeds_rho_diff():
    # Lemma B.1 by brute force: one step on G and on G' = G +/- one edge, identical input
    # (and no noise); the l1 distance must stay below 2 beta eta. Inputs are adversarial:
    # entries near and beyond each node's threshold eta * d_i.
    rng = np.random.default_rng(0)
    beta, eta = 0.8, 0.1
    worst = 0.0
    for trial in range(250):
        n = int(rng.integers(3, 8))
        pairs = _random_simple_graph(rng, n)
        all_pairs = list(itertools.combinations(range(n), 2))
        flip = all_pairs[int(rng.integers(len(all_pairs)))]
        other = [p for p in pairs if p != flip] if flip in pairs else pairs + [flip]
        graphs = []
        for edges in (pairs, other):
            ei = torch.tensor(edges, dtype=torch.long).t().reshape(2, -1)
            graphs.append(to_undirected(ei, num_nodes=n) if ei.numel() else ei)
        layer = NoisyPPRDiffusion(alpha=1 - beta, num_iterations=1, eta=eta, **NO_NOISE)
        deg_max = n - 1
        for _ in range(6):
            mode = rng.integers(3)
            if mode == 0:
                x = rng.uniform(0, 2 * eta * deg_max, size=(n, 1))
            elif mode == 1:  # exactly at the thresholds of one graph or the other
                d = np.bincount(graphs[int(rng.integers(2))][0].numpy(), minlength=n)
                x = (eta * d * rng.choice([0.0, 1.0, 1.5], size=n)).reshape(n, 1)
            else:
                x = rng.exponential(eta * 3, size=(n, 1))
            x = torch.tensor(x, dtype=torch.float64)
            out = [layer(x, g, num_nodes=n) for g in graphs]
            dist = (out[0] - out[1]).abs().sum().item()
            worst = max(worst, dist / (2 * beta * eta))
    assert worst <= 1.0 + 1e-9, f"distortion/rho_diff reached {worst}"
    assert worst > 0.5  # the search does come close to the bound


def test_one_event_per_forward_with_the_theorem_curve():
    torch.manual_seed(1)
    ei = erdos_renyi_graph(50, 0.1)
    acct = PrivacyAccountant()
    layer = NoisyPPRDiffusion(noise_scale=1e-4, eta=1e-5, num_iterations=30, accountant=acct)
    layer(edge_index=ei, seed_index=torch.tensor([1, 2, 3]), num_nodes=50)
    layer(edge_index=ei, seed_index=torch.tensor([4]), num_nodes=50)
    assert len(acct) == 2
    curve = lazy_ppr_rdp(layer.orders, noise_scale=1e-4, num_iterations=30, eta=1e-5, alpha=0.2)
    np.testing.assert_allclose(acct.events[0].rdp, 3 * curve)
    np.testing.assert_allclose(acct.events[1].rdp, curve)
    assert acct.pure_epsilon("edge") == pytest.approx(4 * curve[-1])


def test_calibration_targets_one_column():
    layer = NoisyPPRDiffusion(epsilon=0.5, delta=1 / 333_983, eta=1e-6, num_iterations=100)
    # spec §3.8: sigma / eta = 16 for epsilon = 0.5 (Balle's conversion may need slightly less)
    assert 15.9 < layer.noise_scale / 1e-6 <= 16.0
    acct = PrivacyAccountant()
    layer.accountant = acct
    layer(edge_index=erdos_renyi_graph(20, 0.3), seed_index=torch.tensor([0]), num_nodes=20)
    assert acct.epsilon("edge", 1 / 333_983) <= 0.5
    whole = NoisyPPRDiffusion(epsilon=0.5, delta=1 / 333_983, eta=1e-6, epsilon_columns=10)
    # ten columns in one release: more noise per column, less than 10x (columns compose in RDP)
    assert layer.noise_scale < whole.noise_scale < 10 * layer.noise_scale
    assert lazy_ppr_rdp((math.inf,), noise_scale=whole.noise_scale, num_iterations=100, eta=1e-6, alpha=0.2)[0] > 0


def test_budget_refuses_before_noise():
    gen = torch.Generator().manual_seed(0)
    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-5)})
    layer = NoisyPPRDiffusion(epsilon=0.6, delta=1e-5, eta=1e-4, accountant=acct, generator=gen)
    ei = erdos_renyi_graph(30, 0.2)
    layer(edge_index=ei, seed_index=torch.tensor([0]), num_nodes=30)
    state = gen.get_state().clone()
    with pytest.raises(PrivacyBudgetExceeded):
        layer(edge_index=ei, seed_index=torch.tensor([1]), num_nodes=30)
    assert torch.equal(gen.get_state(), state) and len(acct) == 1


def test_cached_release_is_reused_for_identical_inputs_only():
    acct = PrivacyAccountant()
    ei = erdos_renyi_graph(30, 0.2)
    layer = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-3, accountant=acct, cached=True)
    a = layer(edge_index=ei, seed_index=torch.tensor([0, 1]), num_nodes=30)
    b = layer(edge_index=ei, seed_index=torch.tensor([0, 1]), num_nodes=30)
    assert torch.equal(a, b) and len(acct) == 1
    layer(edge_index=ei, seed_index=torch.tensor([2]), num_nodes=30)
    assert len(acct) == 2
    layer.forget_release()
    layer(edge_index=ei, seed_index=torch.tensor([2]), num_nodes=30)
    assert len(acct) == 3


def test_personalized_mode():
    torch.manual_seed(2)
    ei = erdos_renyi_graph(40, 0.15)
    acct = PrivacyAccountant()
    layer = NoisyPPRDiffusion(noise_scale=1e-3, eta=1e-3, personalized=True, accountant=acct)
    layer(edge_index=ei, seed_index=torch.tensor([3, 3, 5]), num_nodes=40)  # seed 3 receives two columns
    expected = 2 * lazy_ppr_rdp(layer.orders, noise_scale=1e-3, num_iterations=100, eta=1e-3, alpha=0.2,
                                personalized=True)
    np.testing.assert_allclose(acct.events[0].rdp, expected)
    assert acct.events[0].mechanism == "noisy_ppr_personalized"
    with pytest.raises(ValueError, match="seed_index"):
        layer(torch.ones(40, 1), ei)
    # the seed's own entry is not clipped: with no noise and a tiny eta it keeps its restart mass
    quiet = NoisyPPRDiffusion(eta=1e-9, personalized=True, num_iterations=20, **NO_NOISE)
    out = quiet(edge_index=ei, seed_index=torch.tensor([3]), num_nodes=40)
    assert out[3, 0] > 0.2 and out.sum() < 1.0
    clipped = NoisyPPRDiffusion(eta=1e-9, num_iterations=20, **NO_NOISE)(edge_index=ei, seed_index=torch.tensor([3]),
                                                                        num_nodes=40)
    assert clipped[3, 0] < out[3, 0]


def test_sparse_inputs_agree_with_edge_index():
    torch.manual_seed(3)
    n = 25
    ei = erdos_renyi_graph(n, 0.2)
    kwargs = dict(noise_scale=1e-3, eta=1e-2, num_iterations=10)
    ref = NoisyPPRDiffusion(generator=torch.Generator().manual_seed(5), **kwargs)(edge_index=ei, seed_index=[0, 4],
                                                                                  num_nodes=n)
    adj = torch.sparse_coo_tensor(ei, torch.ones(ei.size(1)), (n, n))
    for sparse in (adj, adj.to_sparse_csr()):
        out = NoisyPPRDiffusion(generator=torch.Generator().manual_seed(5), **kwargs)(edge_index=sparse,
                                                                                    seed_index=[0, 4])
        torch.testing.assert_close(out, ref)
    torch_sparse = pytest.importorskip("torch_sparse")
    st = torch_sparse.SparseTensor.from_edge_index(ei, sparse_sizes=(n, n))
    out = NoisyPPRDiffusion(generator=torch.Generator().manual_seed(5), **kwargs)(edge_index=st, seed_index=[0, 4])
    torch.testing.assert_close(out, ref)


def test_isolated_nodes_and_projection():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    out = NoisyPPRDiffusion(noise_scale=1e-2, eta=1.0, num_iterations=5, output_projection="simplex")(
        edge_index=ei, seed_index=[0, 4], num_nodes=6)
    assert torch.isfinite(out).all() and out.shape == (6, 2)
    torch.testing.assert_close(out.sum(0), torch.ones(2))
    assert (out >= 0).all()


@pytest.mark.parametrize("kwargs, match", [
    (dict(alpha=0.0, noise_scale=1.0), "alpha"), (dict(alpha=1.0, noise_scale=1.0), "alpha"),
    (dict(num_iterations=0, noise_scale=1.0), "num_iterations"), (dict(eta=-1.0, noise_scale=1.0), "eta"),
    (dict(noise_scale=-1.0), "noise_scale"), (dict(epsilon=0.0, delta=1e-5), "epsilon"),
    (dict(epsilon=1.0, delta=1.0), "delta"), (dict(epsilon=1.0), "delta"), (dict(), "exactly one"),
    (dict(noise_scale=1.0, output_projection="sphere"), "output_projection"),
])
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NoisyPPRDiffusion(**kwargs)


def test_bad_graphs_and_signals_release_nothing():
    acct = PrivacyAccountant()
    layer = NoisyPPRDiffusion(noise_scale=1.0, accountant=acct)
    directed = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="directed"):
        layer(edge_index=directed, seed_index=[0], num_nodes=3)
    with pytest.raises(ValueError, match="self-loops"):
        layer(edge_index=torch.tensor([[0, 0, 1], [0, 1, 0]]), seed_index=[0], num_nodes=2)
    with pytest.raises(ValueError, match="duplicate"):
        layer(edge_index=torch.tensor([[0, 1, 0, 1], [1, 0, 1, 0]]), seed_index=[0], num_nodes=2)
    weighted = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([2.0, 2.0]), (2, 2))
    with pytest.raises(ValueError, match="unweighted"):
        layer(edge_index=weighted, seed_index=[0])
    undirected = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="non-negative"):
        layer(torch.tensor([[-1.0], [0.0]]), undirected)
    with pytest.raises(ValueError, match="seed_index"):
        layer(edge_index=undirected, seed_index=[5], num_nodes=2)
    with pytest.raises(ValueError, match="exactly one"):
        layer(torch.ones(2, 1), undirected, seed_index=[0])
    assert len(acct) == 0
    sym = NoisyPPRDiffusion(noise_scale=1.0, accountant=acct, symmetrize=True)
    sym(edge_index=directed, seed_index=[0], num_nodes=3)
    assert len(acct) == 1


def test_repr_and_gradients():
    layer = NoisyPPRDiffusion(alpha=0.1, num_iterations=7, eta=1e-4, noise_scale=2e-3)
    assert repr(layer) == ("NoisyPPRDiffusion(alpha=0.1, num_iterations=7, eta=0.0001, noise_scale=0.002, "
                           "personalized=False, unit='edge', sampler='safe', cached=True)")
    x = torch.rand(3, 1, requires_grad=True)
    # in training mode an input that requires grad is refused (the release is detached and charged
    # at every call); released deliberately on x.detach() or in eval mode, the output is detached
    with pytest.raises(ValueError, match="requires grad"):
        layer(x, torch.tensor([[0, 1], [1, 0]]))
    out = layer(x.detach(), torch.tensor([[0, 1], [1, 0]]))
    assert not out.requires_grad
    out = layer.eval()(x, torch.tensor([[0, 1], [1, 0]]))
    assert not out.requires_grad
