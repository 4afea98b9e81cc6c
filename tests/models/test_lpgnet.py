"""LPGNet (Kolluri et al., CCS 2022): the class-count query's l1 sensitivity by brute force, one Laplace
event per stage charged before its noise, the calibration, refusals before any charge, and small end-to-end
runs."""
import itertools
import math
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.accounting.hyperparameter_tuning import TruncatedNegativeBinomial, tuning_event
from pyg_private.models import LPGNetConfig, UnlabelledNodesWarning, lpgnet_noise_scale, run_lpgnet, search_lpgnet
from pyg_private.models import lpgnet as lpgnet_module
from pyg_private.sampling.sampler import RoundedNoiseSampler
from pyg_private.utils.class_counts import (CLASS_COUNTS_EDGE_L1_SENSITIVITY, check_class_rows,
                                            neighbour_class_counts, ranked_pair_contrasts)

from test_progap import _graph as progap_graph

FAST = dict(epochs=20, hidden=16)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def _graph(n=90, signal=0.6, **kwargs):
    """ProGAP's test graph (rings with chords inside each class, a few edges across) with weak features."""
    return progap_graph(n=n, signal=signal, **kwargs)


def _rows(kind, n, classes, gen):
    if kind == "onehot":
        return F.one_hot(torch.randint(classes, (n,), generator=gen), classes).double()
    if kind == "soft":
        return torch.rand(n, classes, generator=gen, dtype=torch.float64).softmax(-1)
    rows = F.one_hot(torch.randint(classes, (n,), generator=gen), classes).double()  # mixed: some zero rows
    rows[torch.rand(n, generator=gen) < 0.4] = 0.0
    return rows


# ----------------------------------------------------------------------------- the query's sensitivity


def _every_graph_and_flip(n):
    """Every graph on ``n`` nodes (each edge listed in both directions) with, for each pair ``(u, v)``, whether
    the edge is in it and the graph with that edge flipped (added or removed)."""
    pairs = list(itertools.combinations(range(n), 2))

    def both_ways(mask):
        e = torch.tensor([p for j, p in enumerate(pairs) if mask >> j & 1], dtype=torch.long).t().reshape(2, -1)
        return torch.cat([e, e.flip(0)], 1)

    for mask in range(1 << len(pairs)):
        yield both_ways(mask), [(u, v, bool(mask >> k & 1), both_ways(mask ^ (1 << k)))
                                for k, (u, v) in enumerate(pairs)]


@pytest.mark.parametrize("kind", ["onehot", "soft", "mixed"])
def test_class_counts_move_by_at_most_l1_two_when_any_edge_of_any_graph_on_five_nodes_changes(kind):
    """Every graph on 5 nodes (1,024) and every pair added or removed: the counts move by l1 <= 2, and by exactly 2
    for one-hot rows (the bound is attained)."""
    n, classes = 5, 3
    rows = _rows(kind, n, classes, torch.Generator().manual_seed(1))
    worst = 0.0
    for graph, flips in _every_graph_and_flip(n):
        base = neighbour_class_counts(rows, graph, n)
        for u, v, _, flipped in flips:
            moved = (neighbour_class_counts(rows, flipped, n) - base).abs().sum().item()
            expected = rows[u].sum().item() + rows[v].sum().item()  # r_v into row u, r_u into row v
            assert moved == pytest.approx(expected, abs=1e-12)
            worst = max(worst, moved)
    assert worst <= CLASS_COUNTS_EDGE_L1_SENSITIVITY + 1e-12
    if kind == "onehot":
        assert worst == CLASS_COUNTS_EDGE_L1_SENSITIVITY


@pytest.mark.parametrize("kind", ["onehot", "soft", "mixed"])
def test_class_counts_with_sources_move_by_at_most_l1_two_when_any_edge_of_any_graph_on_five_nodes_changes(kind):
    """Sources (nodes 0 and 3) count twice and get no counts of their own. Every graph on 5 nodes and every pair: the
    counts move by r_u + r_v between two other nodes, by 2 r_u when only u is a source, by nothing between two
    sources, so by l1 <= 2 (attained for one-hot rows); the sources' rows stay zero."""
    n, classes = 5, 3
    sources = torch.tensor([True, False, False, True, False])
    rows = _rows(kind, n, classes, torch.Generator().manual_seed(2))
    norm = rows.sum(-1)
    worst = 0.0
    for graph, flips in _every_graph_and_flip(n):
        base = neighbour_class_counts(rows, graph, n, sources=sources)
        assert not base[sources].any()
        for u, v, _, flipped in flips:
            moved = (neighbour_class_counts(rows, flipped, n, sources=sources) - base).abs().sum().item()
            su, sv = bool(sources[u]), bool(sources[v])
            expected = 0.0 if su and sv else 2 * norm[u].item() if su else 2 * norm[v].item() if sv else \
                norm[u].item() + norm[v].item()
            assert moved == pytest.approx(expected, abs=1e-12)
            worst = max(worst, moved)
    assert worst <= CLASS_COUNTS_EDGE_L1_SENSITIVITY + 1e-12
    if kind == "onehot":
        assert worst == CLASS_COUNTS_EDGE_L1_SENSITIVITY


@pytest.mark.parametrize("kind", ["onehot", "soft", "mixed"])
def test_class_counts_with_claims_move_by_at_most_l1_two_when_any_edge_of_any_graph_on_five_nodes_changes(kind):
    """Claims split each edge's budget: node 0 claims nothing, node 3 is a source (its claim of 0.7 is dropped), the
    others claim unequal amounts. Every graph on 5 nodes and every pair: row u moves by exactly
    2 c_u / (c_u + c_v) r_v and row v by 2 c_v / (c_u + c_v) r_u (nothing when both claims are 0), so by l1 <= 2,
    attained for one-hot rows; the rows of the nodes without a claim stay zero. Equal claims give the plain query
    and 0/1 claims the sources' query."""
    n, classes = 5, 3
    claims = torch.tensor([0.0, 0.35, 1e-4, 0.7, 0.02], dtype=torch.float64)
    sources = torch.tensor([False, False, False, True, False])
    c = torch.where(sources, torch.zeros_like(claims), claims)
    rows = _rows(kind, n, classes, torch.Generator().manual_seed(3))
    norm = rows.sum(-1)
    worst = 0.0
    for graph, flips in _every_graph_and_flip(n):
        base = neighbour_class_counts(rows, graph, n, sources=sources, claims=claims)
        assert not base[c == 0].any()
        assert torch.equal(neighbour_class_counts(rows, graph, n, claims=torch.full((n,), 0.3, dtype=torch.float64)),
                           neighbour_class_counts(rows, graph, n))
        assert torch.equal(neighbour_class_counts(rows, graph, n, claims=(~sources).double()),
                           neighbour_class_counts(rows, graph, n, sources=sources))
        for u, v, present, flipped in flips:
            delta = neighbour_class_counts(rows, flipped, n, sources=sources, claims=claims) - base
            total = (c[u] + c[v]).item()
            au, av = (2 * c[u].item() / total, 2 * c[v].item() / total) if total > 0 else (0.0, 0.0)
            sign = -1.0 if present else 1.0
            assert torch.allclose(delta[u], sign * au * rows[v], atol=1e-12)
            assert torch.allclose(delta[v], sign * av * rows[u], atol=1e-12)
            others = [w for w in range(n) if w not in (u, v)]
            assert not delta[others].any()
            moved = delta.abs().sum().item()
            assert moved == pytest.approx(au * norm[v].item() + av * norm[u].item(), abs=1e-12)
            worst = max(worst, moved)
    assert worst <= CLASS_COUNTS_EDGE_L1_SENSITIVITY + 1e-12
    if kind == "onehot":
        assert worst == pytest.approx(CLASS_COUNTS_EDGE_L1_SENSITIVITY, abs=1e-12)


@pytest.mark.parametrize("classes", [3, 4])
@pytest.mark.parametrize("kind", ["onehot", "soft", "mixed"])
def test_pair_contrasts_move_by_at_most_l1_two_when_any_edge_of_any_graph_on_five_nodes_changes(kind, classes):
    """Ranked pair contrasts of the counts, with a different public ranking per node, plain and with claims (node 0
    claims nothing, node 3 is a source): every graph on 5 nodes and every pair, the contrasts move by at most the
    counts' l1 change (so by l1 <= 2), and by exactly 2 when the rows are one-hot and both ends claim equally; the
    contrasts are the rank-space differences (and an odd last class's count)."""
    n = 5
    gen = torch.Generator().manual_seed(4 + classes)
    rows = _rows(kind, n, classes, gen)
    order = torch.stack([torch.randperm(classes, generator=gen) for _ in range(n)])
    claims = torch.tensor([0.0, 0.35, 1e-4, 0.7, 0.02], dtype=torch.float64)
    sources = torch.tensor([False, False, False, True, False])
    worst = {"plain": 0.0, "claims": 0.0}
    for graph, flips in _every_graph_and_flip(n):
        for case, kw in (("plain", {}), ("claims", {"claims": claims, "sources": sources})):
            counts = neighbour_class_counts(rows, graph, n, **kw)
            base = ranked_pair_contrasts(counts, order)
            ranked = counts.gather(1, order)
            assert torch.equal(base[:, 0], ranked[:, 0] - ranked[:, 1])
            assert torch.equal(base[:, -1], ranked[:, 2] if classes == 3 else ranked[:, 2] - ranked[:, 3])
            for u, v, _, flipped in flips:
                moved_counts = neighbour_class_counts(rows, flipped, n, **kw)
                moved = (ranked_pair_contrasts(moved_counts, order) - base).abs().sum().item()
                assert moved <= (moved_counts - counts).abs().sum().item() + 1e-12
                worst[case] = max(worst[case], moved)
    assert max(worst.values()) <= CLASS_COUNTS_EDGE_L1_SENSITIVITY + 1e-12
    if kind == "onehot":
        assert worst["plain"] == CLASS_COUNTS_EDGE_L1_SENSITIVITY


def test_pair_contrasts_refuse_an_order_that_is_not_a_ranking():
    counts = torch.rand(3, 4, dtype=torch.float64)
    good = torch.arange(4).repeat(3, 1)
    assert ranked_pair_contrasts(counts, good).shape == (3, 2)
    for bad, message in ((good[:, :3], "class ranks"), (good.float(), "class ranks"),
                         (torch.tensor([[0, 1, 2, 2]] * 3), "permutation"), (torch.tensor([[0, 1, 2, 4]] * 3),
                                                                             "permutation")):
        with pytest.raises(ValueError, match=message):
            ranked_pair_contrasts(counts, bad)
    with pytest.raises(ValueError, match="floating-point"):
        ranked_pair_contrasts(torch.ones(3, 4, dtype=torch.long), good)


def test_class_rows_outside_the_premise_are_refused():
    for bad in (torch.tensor([[0.7, 0.6]]), torch.tensor([[-0.1, 0.5]]), torch.tensor([[math.nan, 0.0]]),
                torch.tensor([[1, 0]]), torch.ones(3)):
        with pytest.raises(ValueError):
            check_class_rows(bad)
    rounded = torch.tensor([[0.5, 0.5 + 1e-12]], dtype=torch.float64)  # rounding of a softmax: put back on the simplex
    assert check_class_rows(rounded).sum().item() <= 1.0
    with pytest.raises(ValueError, match="one row per node"):
        neighbour_class_counts(torch.eye(3), torch.tensor([[0, 1], [1, 0]]), 4)
    for bad in (torch.tensor([1, 0, 0]), torch.tensor([True, False]), [True, False, True]):
        with pytest.raises(ValueError, match="boolean mask"):
            neighbour_class_counts(torch.eye(3), torch.tensor([[0, 1], [1, 0]]), 3, sources=bad)
    for bad, message in ((torch.tensor([1, 0, 0]), "floating-point"), (torch.ones(2), "floating-point"),
                         (torch.tensor([0.5, -0.1, 0.2]), "non-negative"), (torch.tensor([0.5, math.inf, 0.2]),
                                                                            "non-negative")):
        with pytest.raises(ValueError, match=message):
            neighbour_class_counts(torch.eye(3), torch.tensor([[0, 1], [1, 0]]), 3, claims=bad)


# ----------------------------------------------------------------------------- accounting


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("epsilon", [0.5, 4.0])
def test_noise_scale_spends_exactly_the_budget_and_never_more(K, epsilon):
    delta = 1e-5
    b = lpgnet_noise_scale(epsilon=epsilon, delta=delta, K=K)
    spent = lambda scale: _spent(scale, K, delta)  # noqa: E731
    assert spent(b) <= epsilon and spent(b) == pytest.approx(epsilon, rel=1e-6)
    assert spent(b * (1 - 1e-6)) > epsilon  # the smallest such scale
    assert b <= 2.0 * K / epsilon  # never more noise than adding pure epsilons


def _spent(scale, K, delta):
    acct = PrivacyAccountant()
    for event in lpgnet_module._planned_events(scale, K):
        acct.register(event)
    return acct.epsilon("edge", delta)


def _spy(monkeypatch, acct):
    """Record, in order, every event registered with ``acct`` and every draw of the safe sampler."""
    log = []
    register = acct.register

    def spy_register(event, **kw):
        log.append(("event", event.name))
        return register(event, **kw)

    sample = RoundedNoiseSampler.sample

    def spy_sample(self, *args, **kw):
        log.append(("noise", None))
        return sample(self, *args, **kw)

    monkeypatch.setattr(acct, "register", spy_register)
    monkeypatch.setattr(RoundedNoiseSampler, "sample", spy_sample)
    return log


def test_one_laplace_event_per_stage_registered_before_its_noise(monkeypatch):
    data = _graph()
    acct = PrivacyAccountant()
    log = _spy(monkeypatch, acct)
    result = run_lpgnet(data, LPGNetConfig(K=2, **FAST), epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    assert log == [("event", "lpgnet_counts_1"), ("noise", None), ("event", "lpgnet_counts_2"), ("noise", None)]
    events = acct.events_of("edge")
    assert [e.mechanism for e in events] == ["laplace", "laplace"]
    assert all(e.params["query_sensitivity"] == CLASS_COUNTS_EDGE_L1_SENSITIVITY for e in events)
    spent = acct.epsilon("edge", 1e-3)
    assert spent <= 2.0 and spent == pytest.approx(2.0, rel=1e-5)
    assert result.noise_scale == pytest.approx(lpgnet_noise_scale(epsilon=2.0, delta=1e-3, K=2))
    assert result.noise_std == pytest.approx(math.sqrt(2) * result.noise_scale)
    assert len(result.stage_val_accuracy) == 3 and result.val_accuracy == max(result.stage_val_accuracy)


def test_infinite_epsilon_charges_nothing_and_releases_the_exact_counts():
    data = _graph()
    result = run_lpgnet(data, LPGNetConfig(rows="predicted", edge_split="even", **FAST), epsilon=math.inf, delta=1e-3,
                        seed=0)
    assert len(result.accountant) == 0 and result.noise_scale == 0.0
    stage0 = result.model.stages[0]
    with torch.no_grad():
        pred = stage0(data.x).argmax(-1)
    known = data.train_mask | data.val_mask  # the default row_labels: the labels of the training and validation nodes
    rows = F.one_hot(torch.where(known, data.y, pred), 3).double()
    exact = neighbour_class_counts(rows, data.edge_index, data.num_nodes).float()
    assert torch.equal(result.model.counts[0], exact)


@pytest.mark.parametrize("row_labels", ["train+val", "train"])
@pytest.mark.parametrize("rows", ["soft", "train"])
def test_soft_and_train_rows(rows, row_labels):
    assert LPGNetConfig().rows == "soft" and LPGNetConfig().row_labels == "train+val"  # the defaults
    data = _graph()
    result = run_lpgnet(data, LPGNetConfig(rows=rows, row_labels=row_labels, edge_split="even", **FAST),
                        epsilon=math.inf, delta=1e-3, seed=0)
    with torch.no_grad():
        prob = result.model.stages[0](data.x).double().softmax(-1)
    r = torch.zeros(data.num_nodes, 3, dtype=torch.float64) if rows == "train" else prob
    known = data.train_mask | data.val_mask if row_labels == "train+val" else data.train_mask
    r[known] = F.one_hot(data.y[known], 3).double()
    exact = neighbour_class_counts(r, data.edge_index, data.num_nodes).float()
    assert torch.allclose(result.model.counts[0], exact, atol=1e-5)


def test_noise_has_the_calibrated_laplace_spread():
    data = _graph(n=300)
    exact = run_lpgnet(data, LPGNetConfig(**FAST), epsilon=math.inf, delta=1e-3, seed=0).model.counts[0]
    noisy = run_lpgnet(data, LPGNetConfig(**FAST), epsilon=1.0, delta=1e-3, seed=0)
    z = (noisy.model.counts[0] - exact).double().flatten()  # same seed: same stage 0, same rows
    b = noisy.noise_scale
    assert b == pytest.approx(2.0, rel=1e-2)  # 2 / epsilon, less the slack delta allows
    # 900 Laplace(b) draws: mean |z| = b (std b / 30), variance 2 b^2
    assert z.abs().mean().item() == pytest.approx(b, rel=0.2)
    assert z.mean().abs().item() < 0.3 * b


def test_bad_input_is_refused_before_any_charge():
    data = _graph()
    acct = PrivacyAccountant()
    for kwargs in ({"level": "node"}, {"num_classes": 1}, {"epsilon": -1.0}, {"delta": 2.0}, {"sampler": "exact"}):
        args = {"epsilon": 1.0, "delta": 1e-3, **kwargs}
        with pytest.raises(ValueError):
            run_lpgnet(data, LPGNetConfig(**FAST), accountant=acct, **args)
    loops = data.clone()
    loops.edge_index = torch.cat([data.edge_index, torch.tensor([[0], [0]])], dim=1)
    with pytest.raises(ValueError):
        run_lpgnet(loops, LPGNetConfig(**FAST), epsilon=1.0, delta=1e-3, accountant=acct)
    with pytest.raises(TypeError):
        run_lpgnet(data, {"K": 1}, epsilon=1.0, delta=1e-3, accountant=acct)
    assert len(acct) == 0
    run_lpgnet(loops, LPGNetConfig(**FAST), epsilon=1.0, delta=1e-3, accountant=acct, clean_graph=True, seed=0)
    assert len(acct) == 1


@pytest.mark.parametrize("bad", [{"K": 0}, {"K": 6}, {"K": True}, {"K": 1.5}, {"rows": "labels"}, {"row_labels": "val"},
                                 {"head": "mlp"}, {"folds": 1}, {"folds": 2.0}, {"dropout": 1.0},
                                 {"dropout": True}, {"lr": 0.0}, {"weight_decay": -1.0}, {"hidden": 0}, {"epochs": 2.5},
                                 {"select_stage": "yes"}, {"sources": 1}, {"reader_share": 0.0}, {"edge_split": "need"},
                                 {"release": "contrasts"}, {"release": None},
                                 {"reader_share": 1.5}, {"reader_share": True}])
def test_bad_configurations_are_refused(bad):
    with pytest.raises((ValueError, TypeError)):
        LPGNetConfig(**bad)


def test_unlabelled_nodes_leave_the_masks_with_a_warning():
    data = _graph()
    data.y = data.y.clone()
    data.y[data.test_mask.nonzero()[:3].flatten()] = -1
    with pytest.warns(UnlabelledNodesWarning, match="test_mask: 3"):
        result = run_lpgnet(data, LPGNetConfig(**FAST), epsilon=4.0, delta=1e-3, seed=0)
    assert 0.0 <= result.test_accuracy <= 1.0


def test_a_run_past_the_budget_is_refused_before_any_charge():
    data = _graph()
    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-3)})
    run_lpgnet(data, LPGNetConfig(K=2, **FAST), epsilon=0.5, delta=1e-3, accountant=acct, seed=0)
    with pytest.raises(PrivacyBudgetExceeded):
        run_lpgnet(data, LPGNetConfig(K=2, **FAST), epsilon=0.9, delta=1e-3, accountant=acct, seed=0)
    assert len(acct) == 2  # the second run charged nothing, not even its first release


# ----------------------------------------------------------------------------- end to end


def test_end_to_end_the_counts_carry_the_graph_and_the_model_predicts_from_its_releases():
    """Weak features, homophilous graph: without noise stage 1 beats the edge-free stage 0 by far; at epsilon 8
    the model predicts from its stored releases, charging nothing more."""
    data = _graph(n=150)
    config = LPGNetConfig(epochs=100)
    ref = run_lpgnet(data, config, epsilon=math.inf, delta=1e-3, seed=0)
    assert ref.stage_val_accuracy[1] > ref.stage_val_accuracy[0] + 0.15
    private = run_lpgnet(data, config, epsilon=8.0, delta=1e-3, seed=0)
    logits = private.model.logits(data.x)
    assert logits.shape == (150, 3) and len(private.accountant) == 1
    pred = logits.argmax(-1)
    assert float((pred[data.val_mask] == data.y[data.val_mask]).float().mean()) == pytest.approx(
        private.val_accuracy)
    with pytest.raises(ValueError, match="training graph"):
        private.model.logits(data.x[:10])
    with pytest.raises(ValueError, match="stage"):
        private.model.logits(data.x, stage=2)


def test_search_uncharged_and_charged():
    data = _graph()
    grid = [LPGNetConfig(**FAST), LPGNetConfig(rows="soft", **FAST)]
    config, runs = search_lpgnet([data, data], grid, epsilon=4.0, delta=1e-3, seeds=[0, 1])
    assert config in grid and len(runs) == 2
    acct = PrivacyAccountant()
    dist = TruncatedNegativeBinomial(eta=1.0, gamma=0.5)
    with pytest.raises(ValueError, match="one K at a time"):  # K = 1 and K = 2 calibrated alike have crossing curves
        search_lpgnet([data], [LPGNetConfig(**FAST), LPGNetConfig(K=2, **FAST)], epsilon=4.0, delta=1e-3,
                      seeds=[None], tuning=dist, accountant=acct)
    assert len(acct) == 0
    config, runs = search_lpgnet([data], grid, epsilon=4.0, delta=1e-3, seeds=[None], tuning=dist, accountant=acct)
    assert [e.name for e in acct.events_of("edge")] == ["lpgnet_search"]
    assert config in grid and len(runs) == 1
    # the one event is Papernot and Steinke's bound on the trials' common cost (one release at (4, 1e-3))
    trial = lpgnet_module._planned_events(lpgnet_noise_scale(epsilon=4.0, delta=1e-3), 1)
    expected = PrivacyAccountant()
    expected.register(tuning_event(trial, distribution=dist))
    assert acct.epsilon("edge", 1e-3) == pytest.approx(expected.epsilon("edge", 1e-3), rel=1e-9)
    assert acct.epsilon("edge", 1e-3) > 4.0  # the search costs more than one run


# ----------------------------------------------------------------------------- the heads


def test_both_heads_keep_the_better_on_validation_and_the_model_replays_each():
    """``head="both"`` fits exactly the two single-head candidates (same seeds) and keeps the one of better
    validation accuracy; a stacked stage's stored out-of-fold scores let the model replay its predictions."""
    data = _graph(n=150)
    runs = {head: run_lpgnet(data, LPGNetConfig(head=head, epochs=60), epsilon=8.0, delta=1e-3, seed=3)
            for head in ("features", "stacked", "both")}
    assert runs["features"].stage_heads == ("features", "features")
    assert runs["stacked"].stage_heads == ("features", "stacked")
    vals = {h: runs[h].stage_val_accuracy[1] for h in ("features", "stacked")}
    best = "stacked" if vals["stacked"] > vals["features"] else "features"
    assert runs["both"].stage_heads[1] == best and runs["both"].stage_val_accuracy[1] == vals[best]
    for head, result in runs.items():
        assert len(result.accountant) == 1  # the heads are post-processing of the one release
        model = result.model
        pred = model.logits(data.x, stage=1).argmax(-1)
        assert float((pred[data.val_mask] == data.y[data.val_mask]).float().mean()) == pytest.approx(
            result.stage_val_accuracy[1])
        if result.stage_heads[1] == "stacked":
            assert model.priors[1].shape == (150, 3) and model.inputs(data.x, 1).shape == (150, 3 + 2 * 3)
        else:
            assert model.priors[1] is None and model.inputs(data.x, 1).shape == (150, data.num_features + 2 * 3)


def test_too_few_training_nodes_for_the_folds():
    """``head="stacked"`` is refused before any charge; ``head="both"`` keeps the features head only."""
    data = _graph()
    data.train_mask = torch.zeros_like(data.train_mask)
    data.train_mask[:4] = True
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="at least folds=5 training nodes"):
        run_lpgnet(data, LPGNetConfig(head="stacked", **FAST), epsilon=1.0, delta=1e-3, accountant=acct)
    assert len(acct) == 0
    result = run_lpgnet(data, LPGNetConfig(**FAST), epsilon=1.0, delta=1e-3, accountant=acct, seed=0)
    assert result.stage_heads == ("features", "features") and len(acct) == 1
    stacked = run_lpgnet(data, LPGNetConfig(head="stacked", folds=4, **FAST), epsilon=1.0, delta=1e-3, seed=0)
    assert stacked.stage_heads == ("features", "stacked")  # one training node per fold
    # too few for the claims' out-of-fold scores: the split is even (the default edge_split="uncertainty" still runs)
    assert LPGNetConfig().edge_split == "uncertainty"
    even = run_lpgnet(data, LPGNetConfig(edge_split="even", **FAST), epsilon=math.inf, delta=1e-3, seed=0)
    fallback = run_lpgnet(data, LPGNetConfig(**FAST), epsilon=math.inf, delta=1e-3, seed=0)
    assert torch.equal(fallback.model.counts[0], even.model.counts[0])
    # and release="pairs" releases the class counts, with no ranking
    counts = run_lpgnet(data, LPGNetConfig(edge_split="even", release="pairs", **FAST), epsilon=math.inf, delta=1e-3,
                        seed=0)
    assert torch.equal(counts.model.counts[0], even.model.counts[0]) and counts.model.orders == [None]


def test_sources_release_once_before_noise_count_the_sources_twice_and_select_on_held_out_readers(monkeypatch):
    """``sources=True``: one event before the noise; without noise the counts are the weighted query (validation and
    non-reader training nodes: no counts of their own, counted twice); the readers that stop and select are held out
    of every fit, so stage 0's accuracy on them is a held-out figure."""
    data = _graph(n=150)
    config = LPGNetConfig(sources=True, edge_split="even", **FAST)
    acct = PrivacyAccountant()
    log = _spy(monkeypatch, acct)
    noisy = run_lpgnet(data, config, epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    assert log == [("event", "lpgnet_counts_1"), ("noise", None)] and len(acct) == 1
    calls = []  # (train mask, early-stopping mask) of every MLP fit
    fit_mlp = lpgnet_module.fit_edge_free_mlp

    def recording_fit(x, y, train_mask, val_mask, *args, **kwargs):
        calls.append((train_mask.clone(), val_mask.clone()))
        return fit_mlp(x, y, train_mask, val_mask, *args, **kwargs)

    monkeypatch.setattr(lpgnet_module, "fit_edge_free_mlp", recording_fit)
    exact = run_lpgnet(data, config, epsilon=math.inf, delta=1e-3, seed=0)
    fit_nodes, check_nodes = lpgnet_module._readers(config, data.train_mask, 0)
    assert len(calls) == 1 + 1 + 5 + 1  # stage 0, the features head, 5 out-of-fold refits, the stacked head
    assert torch.equal(calls[0][0], data.train_mask & ~check_nodes)  # stage 0 without the check nodes
    assert all(not (mask & check_nodes).any() for mask, _ in calls)  # no fit ever trains on them
    assert all(torch.equal(mask, fit_nodes) and torch.equal(stop, check_nodes) for mask, stop in (calls[1], calls[-1]))
    assert not (fit_nodes & check_nodes).any() and ((fit_nodes | check_nodes) & ~data.train_mask).sum() == 0
    assert int(fit_nodes.sum() + check_nodes.sum()) == round(0.5 * int(data.train_mask.sum()))
    sources = data.val_mask | (data.train_mask & ~fit_nodes & ~check_nodes)
    with torch.no_grad():
        prob = exact.model.stages[0](data.x).double().softmax(-1)
    known = data.train_mask | data.val_mask
    prob[known] = F.one_hot(data.y[known], 3).double()
    reference = neighbour_class_counts(prob, data.edge_index, data.num_nodes, sources=sources).float()
    assert torch.allclose(exact.model.counts[0], reference, atol=1e-5)
    assert not exact.model.counts[0][sources].any() and noisy.model.counts[0][sources].abs().sum() > 0  # noise only
    # stage 0 never saw the check nodes: its selection accuracy is theirs
    with torch.no_grad():
        pred0 = exact.model.stages[0](data.x).argmax(-1)
    assert exact.stage_val_accuracy[0] == pytest.approx((pred0[check_nodes] == data.y[check_nodes]).float().mean())


def _count_fits(monkeypatch):
    """A list that gets one entry per MLP fit of run_lpgnet from now on."""
    calls = []
    fit_mlp = lpgnet_module.fit_edge_free_mlp

    def counting_fit(*args, **kwargs):
        calls.append(1)
        return fit_mlp(*args, **kwargs)

    monkeypatch.setattr(lpgnet_module, "fit_edge_free_mlp", counting_fit)
    return calls


def _rows_and_sources(result, data, config):
    """The default class rows of the run's first release (known labels, stage 0's probabilities elsewhere) and its
    sources mask (``None`` without ``config.sources``)."""
    with torch.no_grad():
        prob = result.model.stages[0](data.x).double().softmax(-1)
    known = data.train_mask | data.val_mask
    prob[known] = F.one_hot(data.y[known], 3).double()
    if not config.sources:
        return prob, None
    fit_nodes, check_nodes = lpgnet_module._readers(config, data.train_mask, 0)
    return prob, data.val_mask | (data.train_mask & ~fit_nodes & ~check_nodes)


@pytest.mark.parametrize("sources", [False, True])
def test_uncertainty_split_releases_once_before_noise_with_claims_from_the_out_of_fold_scores(monkeypatch, sources):
    """``edge_split="uncertainty"``: one event before the noise; without noise the counts are the query whose claims
    are 1 - max p of the previous stage's out-of-fold scores (the ones the stacked head reads, fitted before the
    release), at least 1e-4, zero on the sources; the out-of-fold refits run once per stage, not twice."""
    data = _graph(n=150)
    config = LPGNetConfig(edge_split="uncertainty", head="stacked", sources=sources, **FAST)
    acct = PrivacyAccountant()
    log = _spy(monkeypatch, acct)
    run_lpgnet(data, config, epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    assert log == [("event", "lpgnet_counts_1"), ("noise", None)] and len(acct) == 1
    calls = _count_fits(monkeypatch)
    exact = run_lpgnet(data, config, epsilon=math.inf, delta=1e-3, seed=0)
    assert len(calls) == 1 + 5 + 1  # stage 0, 5 out-of-fold refits shared by the claims and the head, the head
    prior = exact.model.priors[1]
    claims = (1.0 - prior.double().exp().amax(-1)).clamp(min=1e-4)
    assert bool((claims > 1e-4).any()) and bool((claims < claims.max()).any())  # unequal claims: a real split
    prob, mask = _rows_and_sources(exact, data, config)
    reference = neighbour_class_counts(prob, data.edge_index, data.num_nodes, sources=mask, claims=claims).float()
    assert torch.allclose(exact.model.counts[0], reference, atol=1e-5)
    even = neighbour_class_counts(prob, data.edge_index, data.num_nodes, sources=mask).float()
    assert not torch.allclose(exact.model.counts[0], even, atol=1e-3)
    assert float(exact.model.counts[0].sum()) == pytest.approx(float(even.sum()), rel=0.5)  # the same budget, moved


def test_sources_with_too_few_readers_are_refused_before_any_charge():
    data = _graph()
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="at least 2 are needed"):
        run_lpgnet(data, LPGNetConfig(sources=True, reader_share=0.01, **FAST), epsilon=1.0, delta=1e-3,
                   accountant=acct)
    with pytest.raises(ValueError, match="training nodes that fit the stages"):
        run_lpgnet(data, LPGNetConfig(sources=True, reader_share=0.1, head="stacked", **FAST), epsilon=1.0,
                   delta=1e-3, accountant=acct)
    assert len(acct) == 0


@pytest.mark.parametrize("sources", [False, True])
def test_pair_contrasts_release_once_before_noise_ranked_by_the_out_of_fold_scores(monkeypatch, sources):
    """``release="pairs"``: one event before the noise, ceil(C / 2) numbers per node; without noise they are the
    ranked pair contrasts of the uncertainty-split counts, ranked by the previous stage's out-of-fold scores (those
    the claims and the stacked head read, fitted once), and the model replays its stages from them."""
    data = _graph(n=150)
    config = LPGNetConfig(release="pairs", sources=sources, **FAST)
    acct = PrivacyAccountant()
    log = _spy(monkeypatch, acct)
    noisy = run_lpgnet(data, config, epsilon=2.0, delta=1e-3, accountant=acct, seed=0)
    assert log == [("event", "lpgnet_counts_1"), ("noise", None)] and len(acct) == 1
    assert noisy.model.counts[0].shape == (data.num_nodes, 2)  # 3 classes: one pair and the last class
    calls = _count_fits(monkeypatch)
    exact = run_lpgnet(data, config, epsilon=math.inf, delta=1e-3, seed=0)
    assert len(calls) == 1 + 5 + 2  # stage 0, 5 out-of-fold refits shared by the ranking, claims and head, 2 heads
    order = exact.model.orders[0]
    prior = run_lpgnet(data, LPGNetConfig(head="stacked", sources=sources, **FAST), epsilon=math.inf, delta=1e-3,
                       seed=0).model.priors[1]
    assert torch.equal(order, prior.double().sort(dim=-1, descending=True, stable=True).indices)
    claims = (1.0 - prior.double().exp().amax(-1)).clamp(min=1e-4)
    prob, mask = _rows_and_sources(exact, data, config)
    counts = neighbour_class_counts(prob, data.edge_index, data.num_nodes, sources=mask, claims=claims)
    reference = ranked_pair_contrasts(counts, order).float()
    assert torch.allclose(exact.model.counts[0], reference, atol=1e-5)
    assert bool((order[:, 0] != order[0, 0]).any())  # the ranking differs between nodes
    for stage in range(2):
        with torch.no_grad():
            logits = exact.model.stages[stage](exact.model.inputs(data.x, stage))
        assert torch.equal(exact.model.logits(data.x, stage), logits)
    features = lpgnet_module.pair_contrast_features(exact.model.counts[0], order)
    assert features.shape == (data.num_nodes, 6)
    assert torch.allclose(features[:, :3].gather(1, order), features[:, 3:])  # class space = rank space, re-ordered
    assert torch.allclose(features[:, 3], reference[:, 0]) and torch.allclose(features[:, 4], -reference[:, 0])
    assert torch.allclose(features[:, 5], reference[:, 1])


def test_a_model_saved_before_the_rankings_field_predicts_the_same():
    """An ``LPGNetModel`` pickled before ``orders`` existed (no such attribute) replays its stages from class counts."""
    data = _graph()
    result = run_lpgnet(data, LPGNetConfig(**FAST), epsilon=1.0, delta=1e-3, seed=0)
    expected = result.model.logits(data.x, 1)
    old = result.model
    del old.__dict__["orders"]
    restored = pickle.loads(pickle.dumps(old))
    assert "orders" not in restored.__dict__
    assert torch.equal(restored.logits(data.x, 1), expected)
