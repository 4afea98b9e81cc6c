"""ProGAP (Sajadmanesh and Gatica-Perez, WSDM 2024): the per-stage perturbed aggregation, its edge- and
node-level sensitivities by brute force, one event per stage charged before its noise, the joint
calibration, refusals before any charge, and small end-to-end runs."""
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from brute_force import block_diagonal_edge_index, sup_frobenius
from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.models import ProGAPConfig, progap_noise_multiplier, run_progap
from pyg_private.models import progap as progap_module
from pyg_private.nn import gap_aggregation as gap_module
from pyg_private.nn.progap_aggregation import ProGAPAggregation, sum_aggregation_node_sensitivity

FAST = dict(epochs=3, hidden=8, label_hop=False)  # the stages alone (the label hop has its own test)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        warnings.filterwarnings("ignore", module="opacus")
        yield


def _graph(n=60, classes=3, seed=0, signal=1.0):
    """A homophilous block graph: a ring inside each class plus a few edges across; features are the
    one-hot class (times ``signal``) plus Gaussian noise. Degrees are at most 6."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    edges = set()
    for c in range(classes):
        members = (y == c).nonzero().flatten().tolist()
        for i, u in enumerate(members):
            for step in (1, 2):
                v = members[(i + step) % len(members)]
                edges.add((min(u, v), max(u, v)))
    for _ in range(n // 10):
        u, v = torch.randint(n, (2,), generator=g).tolist()
        if u != v:
            edges.add((min(u, v), max(u, v)))
    e = torch.tensor(sorted(edges)).t()
    edge_index = torch.cat([e, e.flip(0)], dim=1)
    x = signal * torch.nn.functional.one_hot(y, classes).float() + torch.randn(n, 8, generator=g)[:, :classes]
    x = torch.cat([x, torch.randn(n, 5, generator=g)], dim=1)
    perm = torch.randperm(n, generator=g)
    train, val, test = (torch.zeros(n, dtype=torch.bool) for _ in range(3))
    train[perm[: n // 3]], val[perm[n // 3: 2 * n // 3]], test[perm[2 * n // 3:]] = True, True, True
    return Data(x=x, edge_index=edge_index, y=y, train_mask=train, val_mask=val, test_mask=test)


def _max_degree(data):
    return int(torch.bincount(data.edge_index[0], minlength=data.num_nodes).max())


# ----------------------------------------------------------------------------- sensitivity by brute force


def _sum_operators(layer, n, masks, pairs, monkeypatch):
    """``H -> A H`` as [n, n] matrices, one per edge set, from the layer's own noise-free aggregation
    on one block-diagonal graph (the renormalisation after the sum made the identity)."""
    monkeypatch.setattr(torch.nn.functional, "normalize", lambda v, dim=-1, **kw: v)
    monkeypatch.setattr(gap_module, "_normalize_rows_", lambda v: v)
    ei = block_diagonal_edge_index(masks, pairs, n)
    eye = torch.eye(n, dtype=torch.float64).repeat(len(masks), 1)  # unit rows: block b of A X is A_b
    out = layer(eye, ei)
    monkeypatch.undo()
    return out[:, n:].reshape(len(masks), n, n).numpy()


def test_node_level_sensitivity_holds_on_every_graph_up_to_five_nodes_and_is_attained(monkeypatch):
    """For every graph G' on 2..5 nodes and every node v, G is G' with v absent (no edges; its row of H
    may differ too, but v is isolated in G, so A_G ignores it): sup over unit rows of
    ||A_G' H' - A_G H||_F against sqrt(D(D+1)), D the largest degree of G' (the tightest declaration)."""
    rng = np.random.default_rng(0)
    worst, worst_papers = 0.0, 0.0
    for n in range(2, 6):
        pairs = list(itertools.combinations(range(n), 2))
        masks = list(range(1 << len(pairs)))
        layer = ProGAPAggregation(level="node", max_degree=n - 1, noise_multiplier=0.0)
        ops = _sum_operators(layer, n, masks, pairs, monkeypatch)
        diffs, bounds, papers = [], [], []
        for mask in masks:
            edges = [p for k, p in enumerate(pairs) if mask >> k & 1]
            if not edges:
                continue
            deg = np.zeros(n, dtype=int)
            for i, j in edges:
                deg[i] += 1
                deg[j] += 1
            for v in range(n):
                without = sum(1 << k for k, p in enumerate(pairs) if mask >> k & 1 and v not in p)
                diffs.append(ops[mask] - ops[without])
                bounds.append(sum_aggregation_node_sensitivity(int(deg.max())))
                papers.append(math.sqrt(deg.max()))
        measured = sup_frobenius(np.stack(diffs), rng)
        worst = max(worst, float((measured / np.array(bounds)).max()))
        worst_papers = max(worst_papers, float((measured / np.array(papers)).max()))
    assert worst <= 1.0 + 1e-9
    assert worst == pytest.approx(1.0, abs=1e-9)  # attained (equal rows around a star's centre): not vacuous
    assert worst_papers > 2.0  # the papers' sqrt(D) leaves out the removed node's own row: sqrt(D + 1) at D = 4


def test_edge_level_sensitivity_is_sqrt_two_on_every_graph_up_to_five_nodes(monkeypatch):
    rng = np.random.default_rng(0)
    worst = 0.0
    for n in range(2, 6):
        pairs = list(itertools.combinations(range(n), 2))
        masks = list(range(1 << len(pairs)))
        layer = ProGAPAggregation(level="edge", noise_multiplier=0.0)
        ops = _sum_operators(layer, n, masks, pairs, monkeypatch)
        diffs = [ops[mask] - ops[mask & ~(1 << k)] for mask in masks for k in range(len(pairs)) if mask >> k & 1]
        worst = max(worst, float(sup_frobenius(np.stack(diffs), rng).max()) / layer.sensitivity)
    assert worst == pytest.approx(1.0, abs=1e-12)


def test_node_level_noise_is_scaled_by_the_node_sensitivity(monkeypatch):
    monkeypatch.setattr(torch.nn.functional, "normalize", lambda v, dim=-1, **kw: v)
    monkeypatch.setattr(gap_module, "_normalize_rows_", lambda v: v)
    n = 2000
    i = torch.arange(n)
    ring = torch.stack([torch.cat([i, (i + 1) % n]), torch.cat([(i + 1) % n, i])])
    x = torch.rand(n, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) / 2
    layer = ProGAPAggregation(level="node", max_degree=3, noise_multiplier=0.5, accountant=PrivacyAccountant(),
                              generator=torch.Generator().manual_seed(1))
    noisy = layer(x, ring)[:, 4:]
    exact = ProGAPAggregation(level="node", max_degree=3, noise_multiplier=0.0)(x, ring)[:, 4:]
    assert float((noisy - exact).std()) == pytest.approx(0.5 * math.sqrt(12), rel=0.05)
    assert torch.equal(torch.remainder(noisy, layer.granularity), torch.zeros_like(noisy))  # the safe grid
    (event,) = layer.accountant.events
    assert event.unit.value == "node" and event.mu == pytest.approx(2.0)
    assert event.params["sensitivity"] == pytest.approx(math.sqrt(12))


def test_node_level_state_keeps_only_the_noisy_aggregation_and_no_fingerprint_of_the_features():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    layer = ProGAPAggregation(level="node", max_degree=2, noise_multiplier=1.0, accountant=PrivacyAccountant())
    x = torch.rand(4, 3, dtype=torch.float64)
    out = layer(x, ei)
    assert out.shape == (4, 6) and torch.allclose(out[:, :3], torch.nn.functional.normalize(x, dim=-1))
    assert torch.equal(layer(x, ei), out) and len(layer.accountant) == 1  # cached: no new charge
    state = layer.state_dict()["_extra_state"]
    assert tuple(state["release"]["release"].shape) == (4, 3)  # the noisy block only
    other = ProGAPAggregation(level="node", max_degree=2, noise_multiplier=1.0, accountant=PrivacyAccountant())
    other(torch.rand(4, 3, dtype=torch.float64), ei)
    assert other.state_dict()["_extra_state"]["release"]["fingerprint"] == state["release"]["fingerprint"]
    assert repr(layer) == "ProGAPAggregation(level='node', max_degree=2, noise_multiplier=1, sampler='safe', cached=True)"


def test_aggregation_refuses_before_any_charge():
    acct = PrivacyAccountant()
    ei = torch.tensor([[0, 1, 0, 2, 0, 3], [1, 0, 2, 0, 3, 0]])  # degree 3 at node 0
    with pytest.raises(ValueError, match="max_degree"):
        ProGAPAggregation(level="node", noise_multiplier=1.0)
    with pytest.raises(ValueError, match="max_degree"):
        ProGAPAggregation(level="node", max_degree=2, noise_multiplier=1.0, accountant=acct)(torch.rand(4, 2), ei)
    with pytest.raises(ValueError, match="num_nodes"):
        ProGAPAggregation(level="node", max_degree=3, num_nodes=5, noise_multiplier=1.0,
                          accountant=acct)(torch.rand(4, 2), ei)
    with pytest.raises(ValueError, match="level"):
        ProGAPAggregation(level="graph", noise_multiplier=1.0)
    with pytest.raises(ValueError, match="node-level"):
        ProGAPAggregation(level="edge", max_degree=3, noise_multiplier=1.0)
    assert len(acct) == 0


# ----------------------------------------------------------------------------- the recipe's accounting


def _spy(monkeypatch, acct):
    """Record, in order, every event registered with ``acct`` and every noise draw of an aggregation."""
    log = []
    register = acct.register

    def spy_register(event, **kw):
        log.append(("event", event.name))
        return register(event, **kw)

    draw = gap_module.add_grid_gaussian_

    def spy_draw(*args, **kw):
        log.append(("noise", None))
        return draw(*args, **kw)

    monkeypatch.setattr(acct, "register", spy_register)
    monkeypatch.setattr(gap_module, "add_grid_gaussian_", spy_draw)
    return log


def test_edge_level_one_event_per_stage_registered_before_its_noise(monkeypatch):
    data = _graph()
    acct = PrivacyAccountant()
    log = _spy(monkeypatch, acct)
    result = run_progap(data, ProGAPConfig(K=3, **FAST), epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    assert log == [entry for k in range(3) for entry in (("event", f"progap_aggregation_{k}"), ("noise", None))]
    events = acct.events_of("edge")
    assert len(events) == 3 and all(e.mu == pytest.approx(1.0 / result.noise_multiplier) for e in events)
    spent = acct.epsilon("edge", 1e-3)
    assert spent <= 2.0 and spent == pytest.approx(2.0, rel=1e-5)  # calibrated, and tightly
    assert result.noise_std == pytest.approx(result.noise_multiplier * math.sqrt(2))
    assert len(result.stage_val_accuracy) == 4
    if result.candidate == "stage":  # the selected stage, or the plain MLP when it validates better
        assert result.val_accuracy == max(result.stage_val_accuracy)
    else:
        assert result.candidate == "mlp" and result.val_accuracy > max(result.stage_val_accuracy)


def test_node_level_charges_every_stage_jointly_within_the_target(monkeypatch):
    data = _graph()
    acct = PrivacyAccountant()
    log = _spy(monkeypatch, acct)
    config = ProGAPConfig(K=2, **FAST)  # batch 256 > 20 training nodes: sampling rate 1 (fast RDP)
    result = run_progap(data, config, epsilon=4.0, delta=1e-3, level="node", max_degree=_max_degree(data),
                        accountant=acct, seed=0)
    aggregations = [i for i, entry in enumerate(log) if entry[1] is not None and "aggregation" in entry[1]]
    assert len(aggregations) == 2 and all(log[i + 1] == ("noise", None) for i in aggregations)
    assert sum(entry == ("noise", None) for entry in log) == 2
    names = {e.name for e in acct.events_of("node")}
    assert names == {"progap_aggregation_0", "progap_aggregation_1", "progap_stage_0", "progap_stage_1",
                     "progap_stage_2"}
    for e in acct.events_of("node"):
        if e.name.startswith("progap_aggregation"):
            assert e.params["sensitivity"] == pytest.approx(sum_aggregation_node_sensitivity(_max_degree(data)))
    spent = acct.epsilon("node", 1e-3)
    assert spent <= 4.0 and spent == pytest.approx(4.0, rel=1e-3)
    assert result.noise_multiplier == pytest.approx(progap_noise_multiplier(
        epsilon=4.0, delta=1e-3, config=config, level="node", num_train=int(data.train_mask.sum())))


@pytest.mark.parametrize("level", ["edge", "node"])
def test_calibration_never_overshoots_and_is_the_smallest_noise(level):
    config = ProGAPConfig(K=3, epochs=10)
    for eps in (0.5, 1.0, 4.0):
        sigma = progap_noise_multiplier(epsilon=eps, delta=1e-5, config=config, level=level, num_train=100)
        at = lambda s: _planned_epsilon(s, config, level)  # noqa: E731
        assert at(sigma) <= eps < at(sigma * (1 - 1e-4))


def _planned_epsilon(sigma, config, level):
    acct = PrivacyAccountant()
    for event in progap_module._planned_events(sigma, config=config, level=level, num_train=100):
        acct.register(event)
    return acct.epsilon(level, 1e-5)


def test_infinite_epsilon_charges_nothing():
    result = run_progap(_graph(), ProGAPConfig(K=2, **FAST), epsilon=math.inf, delta=1e-3, seed=0)
    assert len(result.accountant) == 0 and result.noise_std == 0.0


def test_bad_input_is_refused_before_any_charge():
    data = _graph()
    acct = PrivacyAccountant()
    config = ProGAPConfig(K=2, **FAST)
    with pytest.raises(ValueError, match="max_degree"):
        run_progap(data, config, epsilon=1.0, delta=1e-3, level="node", accountant=acct)
    with pytest.raises(ValueError, match="max_degree"):  # a false declaration
        run_progap(data, config, epsilon=1.0, delta=1e-3, level="node", max_degree=_max_degree(data) - 1,
                   accountant=acct)
    with pytest.raises(ValueError, match="K"):
        ProGAPConfig(K=0)
    for eps in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="epsilon"):
            run_progap(data, config, epsilon=eps, delta=1e-3, accountant=acct)
    with pytest.raises(ValueError, match="delta"):
        run_progap(data, config, epsilon=1.0, delta=1.5, accountant=acct)
    with pytest.raises(ValueError, match="level"):
        run_progap(data, config, epsilon=1.0, delta=1e-3, level="graph", accountant=acct)
    directed = data.clone()
    directed.edge_index = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    with pytest.raises(ValueError, match="directed|both directions|undirected"):
        run_progap(directed, config, epsilon=1.0, delta=1e-3, accountant=acct)
    assert len(acct) == 0


def test_a_run_past_the_budget_is_refused_before_any_charge():
    data = _graph()
    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-3)})
    config = ProGAPConfig(K=2, **FAST)
    run_progap(data, config, epsilon=0.5, delta=1e-3, accountant=acct, seed=0)
    before = len(acct)
    with pytest.raises(PrivacyBudgetExceeded):
        run_progap(data, config, epsilon=0.9, delta=1e-3, accountant=acct, seed=0)
    assert len(acct) == before == 2  # the second run charged nothing, not even its first stage


# ----------------------------------------------------------------------------- end to end


def test_end_to_end_the_aggregations_carry_the_graph():
    """Weak features, homophilous graph: without noise the last stage beats stage 0 by far; the model re-runs on the training graph from its cached releases at no cost."""
    data = _graph(n=150, signal=0.6)
    config = ProGAPConfig(K=2, hidden=16, epochs=100, weight_decay=5e-3)
    ref = run_progap(data, config, epsilon=math.inf, delta=1e-3, seed=0)
    assert ref.stage_val_accuracy[2] > ref.stage_val_accuracy[0] + 0.15
    private = run_progap(data, config, epsilon=8.0, delta=1e-3, seed=0)
    assert private.accountant.epsilon("edge", 1e-3) <= 8.0
    logits = private.model.logits(data.x, data.edge_index)
    # the label hop and the two aggregations, each cached: nothing new charged
    assert logits.shape == (150, 3) and len(private.accountant) == 3
    pred = logits.argmax(-1)
    assert float((pred[data.val_mask] == data.y[data.val_mask]).float().mean()) == pytest.approx(
        private.val_accuracy)


def test_node_level_degree_cap_charges_the_capped_bound_and_shares_one_order(monkeypatch):
    from pyg_private.utils.degree_cap import capped_sum_aggregation_node_sensitivity
    data = _graph()
    acct = PrivacyAccountant()
    cap, bound = 2, _max_degree(data)
    assert bound > cap  # the cap is active on this graph
    result = run_progap(data, ProGAPConfig(K=2, **FAST), epsilon=4.0, delta=1e-3, level="node", max_degree=bound,
                        degree_cap=cap, accountant=acct, seed=0)
    capped = capped_sum_aggregation_node_sensitivity(bound, cap)
    aggregations = [e for e in acct.events_of("node") if e.name.startswith("progap_aggregation")]
    assert len(aggregations) == 2 and all(e.params["sensitivity"] == pytest.approx(capped) for e in aggregations)
    assert result.noise_std == pytest.approx(result.noise_multiplier * capped)
    layers = result.model.layers
    assert len({layer.cap_key for layer in layers}) == 1 and all(layer.degree_cap == cap for layer in layers)
    assert acct.epsilon("node", 1e-3) <= 4.0
    with pytest.raises(ValueError, match="degree_cap"):
        run_progap(data, ProGAPConfig(K=2, **FAST), epsilon=1.0, delta=1e-3, degree_cap=cap,
                   accountant=PrivacyAccountant())


def test_label_hop_is_one_more_release_under_the_shared_sigma_and_refused_at_node_level():
    data = _graph()
    acct = PrivacyAccountant()
    config = ProGAPConfig(K=2, **{**FAST, "label_hop": True, "label_hop_rows": "train", "label_hop_share": None})
    result = run_progap(data, config, epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    events = acct.events_of("edge")
    assert [e.name for e in events] == ["progap_label_aggregation", "progap_aggregation_0", "progap_aggregation_1"]
    assert all(e.mu == pytest.approx(1.0 / result.noise_multiplier) for e in events)
    assert all(e.params["sensitivity"] == pytest.approx(math.sqrt(2)) for e in events)
    spent = acct.epsilon("edge", 1e-3)
    assert spent <= 2.0 and spent == pytest.approx(2.0, rel=1e-5)
    plain = progap_noise_multiplier(epsilon=2.0, delta=1e-3, config=ProGAPConfig(K=2, **FAST), level="edge")
    assert result.noise_multiplier > plain  # three releases share the budget instead of two
    counts = result.model.label_counts
    num_classes = int(data.y.max()) + 1
    assert counts.shape == (data.num_nodes, num_classes)
    stage = result.model.stage if result.candidate == "stage" else 0
    logits = result.model.logits(data.x, data.edge_index, stage=stage)
    assert logits.shape == (data.num_nodes, num_classes) and len(acct.events_of("edge")) == 3  # cached: no charge
    with pytest.raises(ValueError, match="label_hop"):
        result.model.logits(data.x[:-1], data.edge_index[:, (data.edge_index < data.num_nodes - 1).all(0)], stage=0)
    exact = run_progap(data, config, epsilon=math.inf, delta=1e-3, seed=0).model.label_counts
    onehot = torch.zeros(data.num_nodes, num_classes)
    onehot[data.train_mask, data.y[data.train_mask]] = 1.0
    adjacency = torch.zeros(data.num_nodes, data.num_nodes)
    adjacency[data.edge_index[0], data.edge_index[1]] = 1.0
    assert torch.allclose(exact, adjacency @ onehot)  # the training neighbours per class, as documented
    with pytest.raises(ValueError, match="label_hop"):
        run_progap(data, config, epsilon=1.0, delta=1e-3, level="node", max_degree=_max_degree(data),
                   accountant=acct)
    assert len(acct.events_of("node")) == 0


def test_the_label_mlp_candidate_predicts_from_the_released_counts_at_no_cost():
    data = _graph(n=150, signal=0.2)
    acct = PrivacyAccountant()
    result = run_progap(data, ProGAPConfig(K=1, **{**FAST, "label_hop": True}), epsilon=math.inf, delta=1e-3,
                        accountant=acct, seed=0)
    model = result.model
    assert result.candidate in ("stage", "mlp", "label-mlp")
    model.mlp_reads_labels = True  # force the label MLP's path: it appends the cached counts
    from pyg_private.models.edge_free_mlp import fit_edge_free_mlp
    with_labels = torch.cat([data.x.float(), model.label_counts], dim=-1)
    model.mlp = fit_edge_free_mlp(with_labels, data.y, data.train_mask, data.val_mask, int(data.y.max()) + 1, seed=0)
    assert torch.allclose(model.logits(data.x, data.edge_index), model.mlp.eval()(with_labels))
    private = run_progap(data, ProGAPConfig(K=1, **{**FAST, "label_hop": True}), epsilon=4.0, delta=1e-3, seed=0)
    before = len(private.accountant)
    private.model.logits(data.x, data.edge_index)
    assert len(private.accountant) == before == 2  # the label hop and one aggregation, both cached


def test_predicted_label_hop_rows_are_the_training_labels_and_the_edge_free_mlps_classes_elsewhere():
    from pyg_private.models.edge_free_mlp import fit_edge_free_mlp
    data = _graph(n=150, signal=0.2)
    num_classes = int(data.y.max()) + 1
    config = ProGAPConfig(K=1, **{**FAST, "label_hop": True, "label_hop_rows": "predicted"})
    acct = PrivacyAccountant()
    result = run_progap(data, config, epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    assert [e.name for e in acct.events_of("edge")] == ["progap_label_aggregation", "progap_aggregation_0"]
    plain = run_progap(data, ProGAPConfig(K=1, **{**FAST, "label_hop": True, "label_hop_rows": "train"}), epsilon=2.0,
                       delta=1e-3, seed=0)
    assert result.noise_multiplier == plain.noise_multiplier  # the same release, the same event
    rows = result.model.label_onehot
    train = data.train_mask
    mlp = fit_edge_free_mlp(data.x, data.y, train, data.val_mask, num_classes, seed=0)
    predicted = mlp(data.x.float()).argmax(-1)
    want = torch.nn.functional.one_hot(torch.where(train, data.y, predicted), num_classes).to(rows)
    assert torch.equal(rows, want) and bool((rows.sum(1) == 1).all())  # unit rows: sensitivity sqrt 2
    assert torch.equal(plain.model.label_onehot[train], rows[train]) and plain.model.label_onehot[~train].sum() == 0
    with pytest.raises(ValueError, match="label_hop_rows"):
        ProGAPConfig(label_hop_rows="all")


@pytest.mark.parametrize("share", [0.2, 0.5, 0.9])
def test_label_hop_share_splits_mu_squared_and_the_run_still_spends_exactly_its_budget(share):
    data = _graph()
    acct = PrivacyAccountant()
    config = ProGAPConfig(K=2, **{**FAST, "label_hop": True, "label_hop_share": share})
    result = run_progap(data, config, epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    events = {e.name: e for e in acct.events_of("edge")}
    assert set(events) == {"progap_label_aggregation", "progap_aggregation_0", "progap_aggregation_1"}
    total = sum(e.mu ** 2 for e in events.values())
    assert events["progap_label_aggregation"].mu ** 2 / total == pytest.approx(share, rel=1e-9)
    assert events["progap_aggregation_0"].mu == pytest.approx(1.0 / result.noise_multiplier)
    assert events["progap_aggregation_0"].mu == pytest.approx(events["progap_aggregation_1"].mu)
    assert events["progap_label_aggregation"].mu == pytest.approx(1.0 / result.label_noise_multiplier)
    assert result.model.label_layer.noise_multiplier == pytest.approx(result.label_noise_multiplier)
    spent = acct.epsilon("edge", 1e-3)
    assert spent <= 2.0 and spent == pytest.approx(2.0, rel=1e-5)
    # the composed GDP parameter is the one of the equal split: the share moves budget, it adds none
    equal = progap_noise_multiplier(epsilon=2.0, delta=1e-3,
                                    config=ProGAPConfig(K=2, **{**FAST, "label_hop": True, "label_hop_share": None}))
    assert total == pytest.approx(3.0 / equal ** 2, rel=1e-5)


def test_label_hop_share_defaults_to_half_none_is_the_equal_split_and_bad_shares_are_refused():
    config = ProGAPConfig(K=2, **{**FAST, "label_hop": True})
    assert config.label_hop_share == 0.5 and config.label_noise_ratio() == pytest.approx(math.sqrt(0.5))
    assert ProGAPConfig(K=2, label_hop_share=None).label_noise_ratio() == 1.0
    assert ProGAPConfig(K=2, label_hop_share=1 / 3).label_noise_ratio() == pytest.approx(1.0)
    for bad in (0.0, 1.0, -0.1, 1.5, True, "0.5", math.nan):
        with pytest.raises(ValueError, match="label_hop_share"):
            ProGAPConfig(label_hop_share=bad)
    acct = PrivacyAccountant()
    result = run_progap(_graph(), ProGAPConfig(K=1, **FAST), epsilon=1.0, delta=1e-3, seed=0, accountant=acct)
    assert result.label_noise_multiplier == 0.0 and len(acct) == 1  # no label hop: the share is ignored
    assert acct.epsilon("edge", 1e-3) == pytest.approx(1.0, rel=1e-5)


def test_soft_label_hop_rows_are_the_edge_free_mlps_probabilities_with_norm_at_most_one():
    from pyg_private.models.edge_free_mlp import fit_edge_free_mlp
    data = _graph(n=150, signal=0.2)
    num_classes = int(data.y.max()) + 1
    acct = PrivacyAccountant()
    config = ProGAPConfig(K=1, **{**FAST, "label_hop": True, "label_hop_rows": "soft"})
    result = run_progap(data, config, epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    plain = run_progap(data, ProGAPConfig(K=1, **{**FAST, "label_hop": True, "label_hop_rows": "train"}), epsilon=2.0,
                       delta=1e-3, seed=0)
    assert result.noise_multiplier == plain.noise_multiplier and len(acct.events_of("edge")) == 2
    rows, train = result.model.label_onehot, data.train_mask
    mlp = fit_edge_free_mlp(data.x, data.y, train, data.val_mask, num_classes, seed=0)
    with torch.no_grad():
        probabilities = mlp(data.x.float()).double().softmax(-1)
    assert torch.equal(rows[train], plain.model.label_onehot[train])
    assert torch.allclose(rows[~train], probabilities[~train])
    assert not bool((rows[~train].max(1).values == 1.0).all())  # soft: not the argmax rows
    exact = run_progap(data, config, epsilon=math.inf, delta=1e-3, seed=0).model.label_counts
    adjacency = torch.zeros(data.num_nodes, data.num_nodes, dtype=torch.float64)
    adjacency[data.edge_index[0], data.edge_index[1]] = 1.0
    unit = torch.nn.functional.normalize(rows, dim=1)  # what the layer sums: unit rows, sensitivity sqrt 2
    assert torch.allclose(exact.double(), adjacency @ unit, atol=1e-5)


def test_soft_label_hop_release_moves_by_at_most_sqrt2_when_any_edge_is_dropped():
    # brute force: the noise-free label hop of every graph obtained by dropping one edge of a small graph
    data = _graph(n=24, signal=0.2)
    config = ProGAPConfig(K=1, **{**FAST, "label_hop": True})  # the default rows: soft
    rows = run_progap(data, config, epsilon=math.inf, delta=1e-3, seed=0).model.label_onehot
    assert not bool((rows.max(1).values == 1.0).all())
    edges = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    layer = ProGAPAggregation(noise_multiplier=0.0)
    full = layer(rows, data.edge_index)[:, rows.size(1):]
    worst = 0.0
    for i in range(edges.size(1)):
        kept = torch.cat([edges[:, :i], edges[:, i + 1:]], dim=1)
        dropped = layer(rows, torch.cat([kept, kept.flip(0)], dim=1))[:, rows.size(1):]
        worst = max(worst, float((full - dropped).norm()))
    assert worst <= math.sqrt(2) + 1e-9 and worst == pytest.approx(math.sqrt(2), rel=1e-9)  # unit rows: attained
