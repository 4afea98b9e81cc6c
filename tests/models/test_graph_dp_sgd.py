"""Per-graph DP-SGD (unit "graph"): the per-graph clipped gradient against each graph alone, one event
registered before any noise, refusals before any charge, Poisson sampling of graphs (the batch-size
law), calibration landing on its target, and check_opacus_model refusing message-passing models."""
import math

import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import MLP, GINConv, global_add_pool

import pyg_private.models.graph_dp_sgd as graph_dp_sgd
from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import (MessagePassingInDPSGDError, OpacusAccountant, check_opacus_model,
                                    subsampled_gaussian_event)
from pyg_private.datasets import cycles_vs_trees
from pyg_private.models import (GraphClassifier, GraphDPSGD, GraphDPSGDConfig, clipped_gradient_sum,
                                graph_dp_sgd_noise_multiplier, per_graph_gradients)
from pyg_private.models.per_graph_gradients import clipped_sum
from pyg_private.sampling import RandomSource
from pyg_private.utils import dp_sgd_plan, poisson_mask, poisson_threshold

GRAPHS = cycles_vs_trees(40, min_nodes=5, max_nodes=12, seed=3)
WIDTH = GRAPHS[0].x.size(1)


def _model(conv="gin", pool="add", seed=0):
    torch.manual_seed(seed)
    return GraphClassifier(WIDTH, 8, 2, conv=conv, pool=pool)


def _alone(model, graph):
    """The gradient of one graph's loss, the graph alone in its batch (the brute-force reference)."""
    b = Batch.from_data_list([graph])
    params = [p for p in model.parameters() if p.requires_grad]
    loss = F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y)
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])


# ------------------------------------------------------------------ per-graph gradients
@pytest.mark.parametrize("conv,pool", [("gin", "add"), ("gcn", "mean"), ("none", "add")])
def test_per_graph_gradients_equal_each_graph_alone(conv, pool):
    model = _model(conv, pool)
    graphs = GRAPHS[:7]
    rows = per_graph_gradients(model, Batch.from_data_list(graphs))
    reference = torch.stack([_alone(model, g) for g in graphs])
    assert rows.shape == reference.shape
    torch.testing.assert_close(rows, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 3, 8])
def test_clipped_sum_equals_clipping_each_graph_alone_then_summing(chunk_size):
    model = _model("gin", "add")
    graphs = GRAPHS[:7]
    reference = torch.stack([_alone(model, g) for g in graphs]).double()
    norms = reference.norm(dim=1)
    c = float(norms.median())  # about half of the graphs are clipped
    assert (norms > c).any() and (norms < c).any()
    expected = (reference * torch.clamp(c / norms, max=1.0).unsqueeze(1)).sum(0)
    got = clipped_gradient_sum(model, graphs, max_grad_norm=c, chunk_size=chunk_size)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # and not what clipping the batch's summed gradient (or per node) would give
    assert not torch.allclose(got, reference.sum(0) * min(1.0, c / float(reference.sum(0).norm())), rtol=1e-3)


def test_clipped_rows_never_exceed_the_norm():
    grads = torch.randn(50, 300, dtype=torch.float64) * torch.logspace(-3, 3, 50, dtype=torch.float64)[:, None]
    for i in range(50):
        out = clipped_sum(grads[i:i + 1], 1.0)
        assert float(out.norm()) <= 1.0


# ------------------------------------------------------------------ one event, before any noise
def test_one_event_for_the_run_registered_before_any_noise(monkeypatch):
    acct = PrivacyAccountant()
    seen = []
    original = graph_dp_sgd.add_grid_gaussian_

    def spy(out, *args, **kwargs):
        seen.append(len(acct.events))
        return original(out, *args, **kwargs)

    monkeypatch.setattr(graph_dp_sgd, "add_grid_gaussian_", spy)
    cfg = GraphDPSGDConfig(epochs=2, batch_size=10)
    trainer = GraphDPSGD(_model(), num_graphs=40, config=cfg, noise_multiplier=1.3, accountant=acct)
    result = trainer.fit(GRAPHS, generator=torch.Generator().manual_seed(0))
    plan = dp_sgd_plan(num_examples=40, batch_size=10, epochs=2)
    assert seen == [1] * plan.steps  # every noisy step saw the one event already registered
    (event,) = acct.events
    assert event.unit.value == "graph" and event.mechanism == "subsampled_gaussian"
    assert event.params["steps"] == plan.steps == 8 and event.params["sample_rate"] == plan.sample_rate == 0.25
    assert event.params["noise_multiplier"] == 1.3 and event.params["max_grad_norm"] == 1.0
    assert result.epsilon == acct.epsilon("graph", 1e-5)
    same = subsampled_gaussian_event(noise_multiplier=1.3, sample_rate=0.25, steps=8, unit="graph")
    assert event.rdp == same.rdp
    assert all(p.grad is None for p in result.model.parameters())  # no noise-free sum left behind


def test_a_run_charges_once_however_many_steps():
    acct = PrivacyAccountant()
    GraphDPSGD(_model(), num_graphs=40, config=GraphDPSGDConfig(epochs=3, batch_size=5), noise_multiplier=2.0,
               accountant=acct).fit(GRAPHS, generator=torch.Generator().manual_seed(1))
    assert len(acct.events) == 1 and acct.events[0].params["steps"] == 24


# ------------------------------------------------------------------ refusals before any charge
def test_batch_norm_is_refused_before_any_charge():
    acct = PrivacyAccountant()
    torch.manual_seed(0)
    conv = GINConv(MLP([WIDTH, 8, 8]))  # PyG's MLP normalises with batch norm by default
    model = nn.ModuleDict({"conv": conv, "head": nn.Linear(8, 2)})
    with pytest.raises(ValueError, match=r"batch normalisation.*conv\.nn\.norms\.0 \(BatchNorm\).*norm=None"):
        GraphDPSGD(model, num_graphs=40, epsilon=1.0, delta=1e-5, accountant=acct)
    with pytest.raises(ValueError, match="running statistics"):
        GraphDPSGD(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)), num_graphs=40, noise_multiplier=1.0)
    assert len(acct.events) == 0


def test_undeclared_size_and_bad_rates_are_refused_before_any_charge():
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="num_graphs.*declared"):
        GraphDPSGD(_model(), epsilon=1.0, delta=1e-5, accountant=acct)
    with pytest.raises(ValueError, match="num_examples"):
        GraphDPSGD(_model(), num_graphs=0, epsilon=1.0, delta=1e-5, accountant=acct)
    with pytest.raises(ValueError, match="batch_size"):
        GraphDPSGDConfig(batch_size=0)
    for rate in (0.0, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="sample_rate"):
            poisson_threshold(rate)
    with pytest.raises(ValueError, match="exactly one"):
        GraphDPSGD(_model(), num_graphs=40, accountant=acct)
    with pytest.raises(ValueError, match="noise_multiplier"):
        GraphDPSGD(_model(), num_graphs=40, noise_multiplier=-1.0, accountant=acct)
    with pytest.raises(ValueError, match="delta"):
        GraphDPSGD(_model(), num_graphs=40, epsilon=1.0, accountant=acct)
    assert len(acct.events) == 0


class _PoolsEverything(nn.Module):
    """Pools the whole batch into one row: every graph's output reads every other graph."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(WIDTH, 2)

    def forward(self, x, edge_index, batch):
        return self.lin(x).mean(0, keepdim=True).expand(int(batch.max()) + 1, 2)


def test_bad_inputs_and_mixing_models_are_refused_before_any_charge():
    acct = PrivacyAccountant()
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = GraphDPSGD(model, num_graphs=40, noise_multiplier=1.0, accountant=acct)
    bad = [g.clone() for g in GRAPHS]
    bad[5].x[0, 0] = float("nan")
    with pytest.raises(ValueError, match="graph 5 has NaN"):
        trainer.fit(bad)
    no_label = [g.clone() for g in GRAPHS]
    no_label[2].y = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="graph 2 must carry one label"):
        trainer.fit(no_label)
    with pytest.raises(ValueError, match="mixes graphs"):
        GraphDPSGD(_PoolsEverything(), num_graphs=40, noise_multiplier=1.0, accountant=acct).fit(GRAPHS)
    assert len(acct.events) == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_run_over_the_budget_is_refused_before_any_noise():
    acct = PrivacyAccountant(budget={"graph": (0.5, 1e-5)})
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(PrivacyBudgetExceeded):
        GraphDPSGD(model, num_graphs=40, config=GraphDPSGDConfig(epochs=2, batch_size=10), noise_multiplier=0.8,
                   accountant=acct).fit(GRAPHS)
    assert len(acct.events) == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ------------------------------------------------------------------ Poisson sampling
def _binomial_pvalue(sizes, n, q):
    """Chi-square goodness of fit of observed batch sizes to Binomial(n, q) (cells pooled to >= 5 expected)."""
    sizes = torch.as_tensor(sizes)
    pmf = stats.binom.pmf(range(n + 1), n, q) * sizes.numel()
    observed = torch.bincount(sizes, minlength=n + 1).double().numpy()
    cells_o, cells_e, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, pmf):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 5:
            cells_o.append(acc_o)
            cells_e.append(acc_e)
            acc_o = acc_e = 0.0
    cells_o[-1] += acc_o
    cells_e[-1] += acc_e
    return stats.chisquare(cells_o, cells_e).pvalue


def test_poisson_batch_sizes_follow_the_binomial_law():
    source = RandomSource("cpu", generator=torch.Generator().manual_seed(7))
    n, q = 120, 0.1
    masks = torch.stack([poisson_mask(n, q, source) for _ in range(3000)])
    sizes = masks.sum(1)
    assert _binomial_pvalue(sizes, n, q) > 1e-3
    assert abs(float(sizes.float().var()) - n * q * (1 - q)) < 0.1 * n * q * (1 - q)
    freq = masks.double().mean(0)  # every item at rate q, independently of its position
    assert float((freq - q).abs().max()) < 0.04
    # the test can fail: a fixed-size batch (shuffle and cut) has variance 0
    assert _binomial_pvalue(torch.full((3000,), 12), n, q) < 1e-9
    assert poisson_threshold(0.5) == 1 << 62 and bool(poisson_mask(10, 1.0, source).all())


def test_the_trainer_draws_poisson_batches(monkeypatch):
    sizes = []

    def record(model, graphs, **kwargs):
        sizes.append(len(graphs))
        return torch.zeros(sum(p.numel() for p in model.parameters()), dtype=torch.float64)

    monkeypatch.setattr(graph_dp_sgd, "clipped_gradient_sum", record)
    graphs = GRAPHS * 3  # 120 graphs
    cfg = GraphDPSGDConfig(epochs=100, batch_size=12)
    GraphDPSGD(_model(), num_graphs=120, config=cfg, noise_multiplier=5.0).fit(
        graphs, generator=torch.Generator().manual_seed(3))
    assert len(sizes) == 1000  # every step, empty batches included
    assert _binomial_pvalue(sizes, 120, 0.1) > 1e-3


# ------------------------------------------------------------------ calibration
@pytest.mark.parametrize("target,rate,steps", [(1.0, 0.1, 100), (3.0, 0.2, 50)])
def test_calibration_lands_on_the_target(target, rate, steps):
    sigma = graph_dp_sgd_noise_multiplier(epsilon=target, delta=1e-5, sample_rate=rate, steps=steps)
    acct = PrivacyAccountant()
    acct.register(subsampled_gaussian_event(noise_multiplier=sigma, sample_rate=rate, steps=steps, unit="graph"))
    spent = acct.epsilon("graph", 1e-5)
    assert target * (1 - 5e-4) <= spent <= target
    less = PrivacyAccountant()
    less.register(subsampled_gaussian_event(noise_multiplier=sigma * 0.99, sample_rate=rate, steps=steps,
                                            unit="graph"))
    assert less.epsilon("graph", 1e-5) > target  # the smallest multiplier that meets it


def test_calibration_counts_what_the_ledger_spent_and_the_trainer_lands_on_it():
    acct = PrivacyAccountant()
    acct.register(subsampled_gaussian_event(noise_multiplier=2.0, sample_rate=0.1, steps=50, unit="graph"))
    acct.register(subsampled_gaussian_event(noise_multiplier=1.0, sample_rate=0.1, steps=50, unit="node"))
    first = acct.epsilon("graph", 1e-5)
    result = GraphDPSGD(_model(), num_graphs=40, config=GraphDPSGDConfig(epochs=2, batch_size=10), epsilon=2.0,
                        delta=1e-5, accountant=acct).fit(GRAPHS, generator=torch.Generator().manual_seed(0))
    assert 0 < first < 2.0 and 2.0 * (1 - 5e-4) <= result.epsilon <= 2.0
    assert acct.epsilon("graph", 1e-5) == result.epsilon and len(acct.events_of("graph")) == 2
    with pytest.raises(ValueError, match="cannot be met"):
        GraphDPSGD(_model(), num_graphs=40, epsilon=first * 0.5, delta=1e-5, accountant=acct)


# ------------------------------------------------------------------ Opacus
def test_check_opacus_model_refuses_gin_with_the_reason_and_the_fix():
    with pytest.raises(MessagePassingInDPSGDError, match=r"convs\.0 \(GINConv\).*per-node gradients.*unit is "
                                                         r"'graph'.*GraphDPSGD.*Nothing was charged"):
        check_opacus_model(_model("gin"))
    with pytest.raises(MessagePassingInDPSGDError, match=r"GCNConv"):
        check_opacus_model(_model("gcn"))
    check_opacus_model(_model("none"))  # node MLPs and a pooled head only: Opacus may train it
    check_opacus_model(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)))


def test_plain_engine_make_private_refuses_a_message_passing_model_before_any_charge():
    from opacus import PrivacyEngine
    from torch_geometric.loader import DataLoader

    acct = PrivacyAccountant()
    engine = PrivacyEngine()
    engine.accountant = OpacusAccountant(acct, unit="graph")
    model = _model("gin")
    with pytest.raises(MessagePassingInDPSGDError, match="GraphDPSGD"):
        engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                            data_loader=DataLoader(GRAPHS, batch_size=8), noise_multiplier=1.0, max_grad_norm=1.0)
    assert len(acct.events) == 0


# ------------------------------------------------------------------ the helper's surface
def test_non_private_reference_charges_nothing_and_repr_shows_the_settings():
    acct = PrivacyAccountant()
    trainer = GraphDPSGD(_model(), num_graphs=40, config=GraphDPSGDConfig(epochs=1, batch_size=10),
                         epsilon=math.inf, accountant=acct)
    result = trainer.fit(GRAPHS, generator=torch.Generator().manual_seed(0))
    assert len(acct.events) == 0 and math.isinf(result.epsilon) and result.noise_multiplier == 0.0
    private = GraphDPSGD(_model(), num_graphs=40, config=GraphDPSGDConfig(epochs=1, batch_size=10),
                         noise_multiplier=1.5)
    assert repr(private) == ("GraphDPSGD(num_graphs=40, noise_multiplier=1.5, sample_rate=0.25, steps=4, "
                             "max_grad_norm=1, epochs=1, batch_size=10, lr=0.01, optimizer='adam')")


def test_seeded_runs_are_reproducible():
    runs = []
    for _ in range(2):
        model = _model(seed=5)
        GraphDPSGD(model, num_graphs=40, config=GraphDPSGDConfig(epochs=1, batch_size=10),
                   noise_multiplier=1.0).fit(GRAPHS, generator=torch.Generator().manual_seed(9))
        runs.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    assert torch.equal(runs[0], runs[1])
