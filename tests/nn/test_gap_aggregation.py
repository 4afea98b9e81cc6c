"""GAPAggregation: the GAP multi-hop baseline, its linear accounting and its edge sensitivity."""
import math
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning, gdp_epsilon
from pyg_private.nn import GAPAggregation

TINY = 1e-12


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def ring(n):
    i = torch.arange(n)
    return to_undirected(torch.stack([i, (i + 1) % n]), num_nodes=n)


def test_noise_free_hops_are_normalised_sums_concatenated():
    torch.manual_seed(0)
    ei = erdos_renyi_graph(20, 0.3)
    x = torch.randn(20, 3, dtype=torch.float64)
    out = GAPAggregation(3, noise_multiplier=TINY, sampler="float")(x, ei)
    a = np.zeros((20, 20))
    a[ei[0].numpy(), ei[1].numpy()] = 1.0
    unit = lambda m: m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)  # noqa: E731
    hops = [unit(x.numpy())]
    for _ in range(3):
        hops.append(unit(a @ hops[-1]))
    assert out.shape == (20, 12)
    assert np.allclose(out.numpy(), np.concatenate(hops, axis=1), atol=1e-9)


def test_one_linear_gdp_event_and_exact_calibration():
    acct = PrivacyAccountant()
    layer = GAPAggregation(10, epsilon=1.0, delta=1e-5, accountant=acct)
    assert layer.noise_multiplier == pytest.approx(11.797, abs=1e-3)  # spec §4.5: linear, GDP, K = 10
    layer(torch.rand(8, 2), ring(8))
    (event,) = acct.events_of("edge")
    assert event.mu == pytest.approx(math.sqrt(10) / layer.noise_multiplier, rel=1e-12)
    eps = acct.epsilon("edge", 1e-5)
    assert eps <= 1.0 and eps == pytest.approx(1.0, rel=1e-6)
    layer(torch.rand(8, 2), ring(8))
    assert acct.epsilon("edge", 1e-5) == pytest.approx(gdp_epsilon(mu=math.sqrt(2) * event.mu, delta=1e-5))


def test_one_hop_edge_sensitivity_is_sqrt_two_and_attained():
    # unit rows; G and G + e differ by x_v in row u and x_u in row v before the noise
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(40):
        n = int(rng.integers(4, 10))
        ei = erdos_renyi_graph(n, 0.4)
        row, col = ei[:, ei[0] < ei[1]]
        if row.numel() == 0:
            continue
        k = int(rng.integers(row.numel()))
        u, v = int(row[k]), int(col[k])
        keep = ~(((ei[0] == u) & (ei[1] == v)) | ((ei[0] == v) & (ei[1] == u)))
        x = torch.tensor(rng.normal(size=(n, 3)), dtype=torch.float64)
        x = x / x.norm(dim=1, keepdim=True)
        a = torch.zeros(n, n, dtype=torch.float64)
        a[ei[0], ei[1]] = 1.0
        b = torch.zeros(n, n, dtype=torch.float64)
        b[ei[0][keep], ei[1][keep]] = 1.0
        worst = max(worst, ((a - b) @ x).norm().item() / GAPAggregation(1, noise_multiplier=1.0).sensitivity)
    assert worst == pytest.approx(1.0, abs=1e-12)  # ||x_v||^2 + ||x_u||^2 = 2: sqrt(2) exactly


def test_budget_before_noise_cache_and_validation():
    gen = torch.Generator().manual_seed(0)
    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-5)})
    layer = GAPAggregation(2, epsilon=0.9, delta=1e-5, accountant=acct, generator=gen, cached=True)
    x, ei = torch.rand(6, 2), ring(6)
    first = layer(x, ei)
    assert torch.equal(layer(x, ei), first) and len(acct.events_of("edge")) == 1
    state = gen.get_state()
    with pytest.raises(PrivacyBudgetExceeded):
        layer(x + 1, ei)
    assert torch.equal(gen.get_state(), state)
    with pytest.raises(ValueError, match="exactly one"):
        GAPAggregation(2)
    with pytest.raises(ValueError, match="directed"):
        GAPAggregation(2, noise_multiplier=1.0)(torch.rand(3, 2), torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="NaN"):
        GAPAggregation(2, noise_multiplier=1.0)(torch.full((3, 2), float("nan")), ring(3))
    assert "K=2" in repr(layer)


def test_zero_noise_multiplier_is_the_non_private_reference():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="non-private"):
        GAPAggregation(2, noise_multiplier=0.0, accountant=PrivacyAccountant())
    layer = GAPAggregation(2, noise_multiplier=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = layer(x, ei)
    noisy = GAPAggregation(2, noise_multiplier=1e-12, sampler="float")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        assert torch.allclose(out, noisy(x, ei), atol=1e-9)


def test_grid_release_is_on_the_grid_and_charges_the_inflated_sensitivity(monkeypatch):
    """Safe sampler: the noisy sums are multiples of the granularity before the renormalisation
    (made the identity here), the noise std is sigma * Delta' and mu is unchanged."""
    import math

    from pyg_private import PrivacyAccountant
    from pyg_private.nn import gap_aggregation as gap_module

    monkeypatch.setattr(torch.nn.functional, "normalize", lambda v, dim=-1: v)
    monkeypatch.setattr(gap_module, "_normalize_rows_", lambda v: v)
    n = 40
    ei = torch.tensor([[i for i in range(n)] + [(i + 1) % n for i in range(n)],
                       [(i + 1) % n for i in range(n)] + [i for i in range(n)]])
    x = torch.rand(n, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    acct = PrivacyAccountant()
    layer = GAPAggregation(1, noise_multiplier=2.0, accountant=acct, generator=torch.Generator().manual_seed(1))
    out = layer(x, ei)
    g = layer.granularity
    hop = out[:, 8:]
    assert torch.equal(torch.remainder(hop, g), torch.zeros_like(hop))
    noiseless = GAPAggregation(1, noise_multiplier=0.0)(x, ei)[:, 8:]
    assert float((hop - noiseless).std()) == pytest.approx(2.0 * math.sqrt(2), rel=0.15)
    (ev,) = acct.events_of("edge")
    assert ev.mu == pytest.approx(1 / 2.0) and ev.params["granularity"] == g
    assert math.sqrt(2) < ev.params["grid_sensitivity"] <= math.sqrt(2) * (1 + 2.0 ** -16)


def test_canonical_csr_is_taken_as_it_is_and_equals_the_edge_index_path():
    """A CSR adjacency already simple and undirected is used as it is (no conversion to
    edge_index and back); the release equals the edge_index one, and a directed CSR goes through
    the general path, which refuses it."""
    from torch_geometric.utils import to_torch_csr_tensor

    g = torch.Generator().manual_seed(0)
    n = 30
    ei = to_undirected(torch.randint(n, (2, 80), generator=g), num_nodes=n)
    ei = ei[:, ei[0] != ei[1]]
    x = torch.randn(n, 5, generator=g)
    from_ei = GAPAggregation(2, noise_multiplier=0.0)(x, ei)
    from_csr = GAPAggregation(2, noise_multiplier=0.0)(x, to_torch_csr_tensor(ei, size=(n, n)))
    assert torch.equal(from_ei, from_csr)
    seeded = [GAPAggregation(2, noise_multiplier=1.0, generator=torch.Generator().manual_seed(3))(x, a)
              for a in (ei, to_torch_csr_tensor(ei, size=(n, n)))]
    assert torch.equal(seeded[0], seeded[1])  # the same release, noise included
    directed = ei[:, ei[0] < ei[1]]
    with pytest.raises(ValueError, match="directed|undirected|symmetr"):
        GAPAggregation(2, noise_multiplier=0.0)(x, to_torch_csr_tensor(directed, size=(n, n)))
