"""The CARIBOU recipe: what each method charges, node-level joint calibration, the search.

The chains have nodes of degree one, so the only valid declaration is ``min_degree=0``.
"""
import dataclasses
import math

import pytest
import torch

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import contraction_factor
from pyg_private.datasets import load_chain
from pyg_private.models import (CaribouConfig, config_grid, fit_dp_sgd, node_level_noise_multiplier, run_caribou,
                                search_caribou)
from pyg_private.nn import ContractiveGraphLayer

FAST = dict(epochs=5, lr=1e-2)


@pytest.fixture(scope="module")
def chain():
    return load_chain("Chain-S", seed=0)


def test_caribou_edge_level_charges_one_event_at_the_target(chain):
    config = CaribouConfig("caribou", K=6, contraction=0.9, encoder_dim=None, normalize="clip", **FAST)
    result = run_caribou(chain, config, epsilon=2.0, delta=1e-2, min_degree=0, seed=0)
    events = result.accountant.events
    assert len(events) == 1 and events[0].unit.value == "edge"
    layer = ContractiveGraphLayer(6, 0.9, min_degree=0, epsilon=2.0, delta=1e-2)
    assert events[0].mu == pytest.approx(layer.mu)
    assert result.noise_std == pytest.approx(layer.noise_std)
    assert result.accountant.epsilon("edge", 1e-2) == pytest.approx(2.0, rel=1e-6)
    assert result.accountant.epsilon("edge", 1e-2) <= 2.0 + 1e-9
    assert 0.0 <= result.test_accuracy <= 1.0 and 0.0 <= result.val_accuracy <= 1.0


def test_gap_charges_linear_composition_and_mlp_charges_nothing(chain):
    gap = run_caribou(chain, CaribouConfig("gap", K=4, **FAST), epsilon=1.0, delta=1e-2, min_degree=0, seed=0)
    (event,) = gap.accountant.events
    assert event.mu == pytest.approx(math.sqrt(4) / gap.noise_multiplier)
    assert gap.accountant.epsilon("edge", 1e-2) == pytest.approx(1.0, rel=1e-6)
    mlp = run_caribou(chain, CaribouConfig("mlp", **FAST), epsilon=1.0, delta=1e-2, min_degree=0, seed=0)
    assert len(mlp.accountant) == 0 and mlp.noise_std == 0.0


@pytest.mark.parametrize("method", ["caribou", "gap"])
def test_infinite_epsilon_is_noise_free_and_charges_nothing(chain, method):
    config = CaribouConfig(method, K=3, encoder_dim=None, normalize="clip", **FAST)
    a = run_caribou(chain, config, epsilon=math.inf, delta=1e-2, min_degree=0, seed=0)
    b = run_caribou(chain, config, epsilon=math.inf, delta=1e-2, min_degree=0, seed=1)
    assert len(a.accountant) == 0 and a.noise_std == 0.0
    assert b.noise_std == 0.0


def test_a_given_accountant_with_a_budget_refuses_an_overspend(chain):
    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-2)})
    config = CaribouConfig("caribou", K=2, encoder_dim=None, **FAST)
    run_caribou(chain, config, epsilon=1.0, delta=1e-2, min_degree=0, accountant=acct, seed=0)
    with pytest.raises(PrivacyBudgetExceeded):
        run_caribou(chain, config, epsilon=1.0, delta=1e-2, min_degree=0, accountant=acct, seed=0)
    assert len(acct) == 1


def test_node_level_shares_one_calibrated_multiplier(chain):
    config = CaribouConfig("caribou", K=4, contraction=0.9, encoder_dim=4, hidden=8, epochs=3, lr=1e-2,
                           batch_size=8)  # q = 1: Opacus' RDP of a subsampled Gaussian is slow for q < 1
    num_train = int(chain.train_mask.sum())
    sigma = node_level_noise_multiplier(epsilon=8.0, delta=1e-3, config=config, num_train=num_train)
    result = run_caribou(chain, config, epsilon=8.0, delta=1e-3, level="node", min_degree=0, max_degree=2,
                         num_nodes=48, seed=0)
    acct = result.accountant
    steps = config.epochs * math.ceil(num_train / config.batch_size)
    names = [e.name for e in acct.events]
    assert names.count("encoder") == steps and names.count("head") == steps  # one event per DP-SGD step
    (agg,) = [e for e in acct.events if e.name == "contractive_graph_layer"]
    assert agg.unit.value == "node" and agg.mu == pytest.approx(math.sqrt(contraction_factor(4, 0.9)) / sigma)
    assert all(e.unit.value == "node" for e in acct.events)
    assert acct.epsilon("node", 1e-3) <= 8.0 * (1 + 1e-6)
    assert acct.epsilon("node", 1e-3) == pytest.approx(8.0, rel=1e-3)  # tight: the whole budget is used
    assert result.noise_multiplier == pytest.approx(sigma)


def test_node_level_rejects_gap_and_needs_the_bounds(chain):
    with pytest.raises(ValueError, match="edge-level only"):
        run_caribou(chain, CaribouConfig("gap", K=2, **FAST), epsilon=1.0, delta=1e-3, level="node", min_degree=0)
    with pytest.raises(ValueError, match="max_degree"):
        run_caribou(chain, CaribouConfig("caribou", K=2, **FAST), epsilon=1.0, delta=1e-3, level="node",
                    min_degree=0)


def test_dp_sgd_charges_every_step_and_stops_at_the_budget(chain):
    acct = PrivacyAccountant(budget={"node": (3.0, 1e-3)})
    model = torch.nn.Linear(5, 2)
    before = model.weight.detach().clone()
    with pytest.raises(PrivacyBudgetExceeded):
        fit_dp_sgd(model, chain.x, chain.y, chain.train_mask, noise_multiplier=2.0, accountant=acct, epochs=50,
                   batch_size=4)
    spent = acct.epsilon("node", 1e-3)
    assert 0 < spent <= 3.0 and 2 <= len(acct) < 100
    assert not torch.equal(before, model.weight)  # the affordable steps were taken


def test_search_selects_on_validation_and_returns_that_configs_runs(chain):
    data = [load_chain("Chain-S", seed=s) for s in (0, 1)]
    grid = config_grid(CaribouConfig("mlp", **FAST), hidden=(4, 8))
    best, runs = search_caribou(data, grid, epsilon=1.0, delta=1e-2, seeds=(0, 1), min_degree=0)
    assert best in grid and len(runs) == 2 and all(r.config == best for r in runs)
    others = [run_caribou(d, c, epsilon=1.0, delta=1e-2, min_degree=0, seed=s)
              for c in grid for d, s in zip(data, (0, 1))]
    scores = {c: sum(r.val_accuracy for r in others if r.config == c) for c in grid}
    assert scores[best] == max(scores.values())
    with pytest.raises(ValueError, match="empty"):
        search_caribou(data, [], epsilon=1.0, delta=1e-2, seeds=(0, 1), min_degree=0)


def test_bad_config_raises():
    with pytest.raises(ValueError, match="method"):
        CaribouConfig("gcn")
    with pytest.raises(ValueError, match="level"):
        run_caribou(load_chain("Chain-S"), CaribouConfig(**FAST), epsilon=1.0, delta=1e-2, level="graph",
                    min_degree=0)


def test_dp_sgd_survives_empty_poisson_batches(chain):
    # rate 1/8 on 8 training nodes: about a third of the batches are empty, each still one noisy step
    acct = PrivacyAccountant()
    model = torch.nn.Linear(5, 2)
    fit_dp_sgd(model, chain.x, chain.y, chain.train_mask, noise_multiplier=1.0, accountant=acct, epochs=3,
               batch_size=1, generator=torch.Generator().manual_seed(0))
    assert len(acct) == 3 * 8 and all(e.params["sample_rate"] == 1 / 8 for e in acct.events)


def test_head_blocks_and_use_x0(chain, monkeypatch):
    """The head gets one block per released matrix: [X0, X^K] (2), X^K alone (1), GAP's hops."""
    import pyg_private.models.caribou as recipe

    seen = []
    original = recipe.fit_full_batch

    def spy(model, features, *args, **kwargs):
        seen.append((type(model).__name__, features.size(1), len(getattr(model, "blocks", []))))
        return original(model, features, *args, **kwargs)

    monkeypatch.setattr(recipe, "fit_full_batch", spy)
    raw = dict(encoder_dim=None, normalize="clip", **FAST)
    for method, use_x0, expected in (("caribou", True, ("MultiInputHead", 10, 2)), ("caribou", False, ("MLP", 5, 0)),
                                     ("gap", True, ("MultiInputHead", 20, 4)), ("gap", False, ("MultiInputHead", 15, 3)),
                                     ("mlp", True, ("MLP", 5, 0))):
        seen.clear()
        run_caribou(chain, CaribouConfig(method, K=3, use_x0=use_x0, **raw), epsilon=4.0, delta=1e-2, min_degree=0,
                    seed=0)
        private_head = seen[-2] if method != "mlp" else seen[-1]  # then the edge-free candidate on X0
        assert private_head == expected, (method, use_x0)
        if method != "mlp":
            assert seen[-1] == ("MLP", 5, 0)


def test_the_edge_free_head_is_a_candidate_of_the_validation_selection(chain, monkeypatch):
    """A private head worse on validation than the head on X0 alone is replaced by it (and the
    result says so); the release is still charged once. Node level keeps the private head."""
    import pyg_private.models.caribou as recipe

    scores = iter([0.2, 0.7, 0.1])  # the private head's validation accuracy, the edge-free head's, the encoder's
    real = recipe.accuracy
    monkeypatch.setattr(recipe, "accuracy", lambda model, z, y, mask: next(scores, None) or real(model, z, y, mask))
    config = CaribouConfig("caribou", K=3, contraction=0.9, encoder_dim=4, hidden=8, **FAST)
    result = run_caribou(chain, config, epsilon=2.0, delta=1e-2, min_degree=0, seed=0)
    assert result.candidate == "edge-free" and result.val_accuracy == 0.7 and len(result.accountant) == 1
    assert result.model.layer is None  # inference uses X0 alone: no new release
    monkeypatch.setattr(recipe, "accuracy", real)
    kept = run_caribou(chain, config, epsilon=2.0, delta=1e-2, min_degree=0, seed=0)
    assert kept.candidate in ("private", "edge-free")
    off = run_caribou(chain, dataclasses.replace(config, edge_free_candidate=False), epsilon=2.0, delta=1e-2,
                      min_degree=0, seed=0)
    assert off.candidate == "private" and off.model.layer is not None
    scores = iter([0.2, 0.3, 0.9])  # the encoder's own classifier validates best: it predicts, on the raw features
    monkeypatch.setattr(recipe, "accuracy", lambda model, z, y, mask: next(scores, None) or real(model, z, y, mask))
    own = run_caribou(chain, config, epsilon=2.0, delta=1e-2, min_degree=0, seed=0)
    assert own.candidate == "edge-free" and own.val_accuracy == 0.9 and own.model.raw
    assert own.model.logits(chain.x, chain.edge_index).shape == (chain.num_nodes, int(chain.y.max()) + 1)
    assert len(own.accountant) == 1  # no new release: the classifier reads no edge


def test_trained_model_reuses_the_cached_release_and_charges_a_new_graph(chain):
    config = CaribouConfig("caribou", K=3, contraction=0.9, encoder_dim=4, hidden=8, edge_free_candidate=False, **FAST)
    result = run_caribou(chain, config, epsilon=2.0, delta=1e-2, min_degree=0, seed=0)
    model, acct = result.model, result.accountant
    assert len(acct.events) == 1
    logits = model.logits(chain.x, chain.edge_index)
    assert logits.shape == (chain.num_nodes, int(chain.y.max()) + 1)
    assert len(acct.events) == 1  # the training graph: the cached release, free
    pred = logits.argmax(-1)
    assert float((pred[chain.test_mask] == chain.y[chain.test_mask]).double().mean()) == pytest.approx(
        result.test_accuracy)
    sub = chain.edge_index[:, : chain.edge_index.size(1) // 2]
    sub = torch.cat([sub, sub.flip(0)], dim=1).unique(dim=1)
    model.logits(chain.x, sub)
    assert len(acct.events) == 2 and acct.events[1].unit.value == "edge"  # another graph: a new release
    mlp = run_caribou(chain, CaribouConfig("mlp", encoder_dim=None, **FAST), epsilon=2.0, delta=1e-2, min_degree=0)
    assert mlp.model.layer is None and mlp.model.logits(chain.x, sub).shape == logits.shape


def test_node_level_calibration_matches_opacus_sampling_rate(chain):
    """Opacus samples at 1 / len(loader), not batch / n: the calibration must use the same
    rate, or it spends less than the target (it did: 0.87 of 1.0 on a Cora subgraph).

    The target is epsilon = 1 (the bug's own setting): a calibration at the rate batch / n = 3 / 8
    lands at 0.960 of it here (0.953 at epsilon = 4), 40 times the tolerance below, and the
    calibration's search over sigma takes less than half the time it takes at epsilon = 4."""
    num_train = int(chain.train_mask.sum())
    batch = 3
    assert num_train % batch != 0  # so that batch / n and 1 / ceil(n / batch) differ
    config = CaribouConfig("caribou", K=2, contraction=0.9, encoder_dim=None, hidden=8, epochs=2, lr=1e-2,
                           batch_size=batch)
    result = run_caribou(chain, config, epsilon=1.0, delta=1e-3, level="node", min_degree=0, max_degree=2,
                         num_nodes=48, seed=0)
    rates = {e.params["sample_rate"] for e in result.accountant.events if e.name == "head"}
    assert rates == {1 / math.ceil(num_train / batch)}
    assert result.accountant.epsilon("node", 1e-3) == pytest.approx(1.0, rel=1e-3)
    assert result.accountant.epsilon("node", 1e-3) <= 1.0 * (1 + 1e-6)


def test_node_level_examples_follow_each_nodes_own_data(monkeypatch):
    """A zero-feature node u whose only neighbour is v: removing v (its slot zeroed, its edges gone)
    must change the DP-SGD examples by v alone and must not change u's row of X0."""
    import pyg_private.models.caribou as recipe
    from torch_geometric.data import Data

    n = 8
    edges = torch.tensor([[0, 1], [1, 2], [2, 3], [4, 5], [5, 6], [6, 7], [3, 4]]).T
    x = torch.rand(n, 3) + 0.1
    x[0] = 0.0  # u = 0: no features, one neighbour v = 1
    y = torch.arange(n) % 2
    mask = torch.ones(n, dtype=torch.bool)

    def run(data):
        masks, rows = [], []
        real = recipe.fit_dp_sgd

        def spy(model, features, y, mask, **kwargs):
            masks.append(mask.clone())
            rows.append(features.clone())
            return real(model, features, y, mask, **kwargs)

        monkeypatch.setattr(recipe, "fit_dp_sgd", spy)
        config = CaribouConfig("caribou", K=1, contraction=0.9, encoder_dim=2, hidden=4, epochs=1, batch_size=8,
                               edge_free_candidate=False)  # q = 1: a fast calibration
        run_caribou(data, config, epsilon=8.0, delta=1e-3, level="node", min_degree=0, max_degree=3, num_nodes=n,
                    num_classes=2, seed=0)
        monkeypatch.setattr(recipe, "fit_dp_sgd", real)
        return masks, rows

    ei = torch.cat([edges, edges.flip(0)], dim=1)
    full = Data(x=x, edge_index=ei, y=y, train_mask=mask, val_mask=mask, test_mask=mask)
    keep = (ei != 1).all(dim=0)
    x_minus = x.clone()
    x_minus[1] = 0.0
    minus = Data(x=x_minus, edge_index=ei[:, keep], y=y, train_mask=mask, val_mask=mask, test_mask=mask)
    (enc_a, head_a), (_, head_rows_a) = run(full)
    (enc_b, head_b), (_, head_rows_b) = run(minus)
    for a, b in ((enc_a, enc_b), (head_a, head_b)):
        assert int((a ^ b).sum()) == 1 and bool((a ^ b)[1])  # v alone changes status
        assert not bool(a[0]) and not bool(b[0])  # u is never an example
    assert not bool(head_rows_a[0, :2].any()) and not bool(head_rows_b[0, :2].any())  # u's X0 row: zero in both
