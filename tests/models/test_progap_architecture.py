"""ProGAP's architecture and training as the authors' code builds them (github.com/sisaman/ProGAP;
Sajadmanesh and Gatica-Perez, WSDM 2024): one base per cached input, row normalisation before the
head, the newest base's output aggregated without renormalisation after the noise, progressive or
layer-wise training, best-validation epochs at edge level only, GroupNorm instead of BatchNorm and
``dp_epochs`` of DP-SGD at node level; the trained model re-embeds exactly what was released."""
import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.models import ProGAPConfig, run_progap
from pyg_private.models import node_training
from pyg_private.models import progap as progap_module
from pyg_private.nn.progap_aggregation import ProGAPAggregation

FAST = dict(epochs=5, hidden=8, label_hop=False)  # the stages alone


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        warnings.filterwarnings("ignore", module="opacus")
        yield


def _graph(n=60, classes=3, seed=0):
    """Rings inside each class plus a few edges across (degrees at most 6), noisy one-hot features."""
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
    x = torch.cat([F.one_hot(y, classes).float(), torch.zeros(n, 4)], dim=1) + torch.randn(n, classes + 4, generator=g)
    perm = torch.randperm(n, generator=g)
    train, val, test = (torch.zeros(n, dtype=torch.bool) for _ in range(3))
    train[perm[: n // 3]], val[perm[n // 3: 2 * n // 3]], test[perm[2 * n // 3:]] = True, True, True
    return Data(x=x, edge_index=torch.cat([e, e.flip(0)], dim=1), y=y, train_mask=train, val_mask=val,
                test_mask=test)


def _max_degree(data):
    return int(torch.bincount(data.edge_index[0], minlength=data.num_nodes).max())


def _spy_releases(monkeypatch):
    """Record the input and output of every ProGAPAggregation forward."""
    calls = []
    forward = ProGAPAggregation.forward

    def spy(self, x, edge_index):
        out = forward(self, x, edge_index)
        calls.append((x.clone(), out.clone()))
        return out

    monkeypatch.setattr(ProGAPAggregation, "forward", spy)
    return calls


def test_the_defaults_are_the_authors_but_layerwise():
    c = ProGAPConfig()
    assert (c.hidden, c.base_layers, c.head_layers, c.epochs, c.lr, c.weight_decay, c.dropout) == \
        (16, 1, 1, 100, 0.01, 0.0, 0.0)
    assert (c.batch_norm, c.combine, c.renormalize, c.checkpoint, c.feature_norm, c.dp_epochs) == \
        (True, "cat", False, None, None, 10)
    assert c.layerwise is True  # the one deviation, measured on Cora (module notes)
    for bad in (dict(combine="sum"), dict(checkpoint="best"), dict(dp_epochs=0), dict(batch_norm=1)):
        with pytest.raises(ValueError):
            ProGAPConfig(**bad)


def test_stage_layout_one_base_per_input_batchnorm_and_unit_rows_before_the_head():
    data = _graph()
    result = run_progap(data, ProGAPConfig(K=2, **FAST), epsilon=4.0, delta=1e-3, seed=0)
    stages = result.model.stages
    assert [len(s.bases) for s in stages] == [1, 2, 3]
    base = stages[2].bases[0]
    assert [type(m) for m in base] == [nn.Linear, nn.SELU, nn.BatchNorm1d]  # the authors' order, last layer too
    assert base[0].in_features == data.num_features  # raw features (feature_norm=None)
    assert [type(m) for m in stages[2].head] == [nn.Linear] and stages[2].head[0].in_features == 3 * 8
    seen = []
    stages[2].head.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    result.model.logits(data.x, data.edge_index, stage=2)
    assert torch.allclose(seen[0].norm(dim=-1), torch.ones(data.num_nodes), atol=1e-5)
    assert len(result.accountant) == 2  # the training graph again: the cached releases


def test_the_newest_base_is_aggregated_and_the_noisy_sum_is_not_renormalised(monkeypatch):
    data = _graph()
    calls = _spy_releases(monkeypatch)
    result = run_progap(data, ProGAPConfig(K=2, **FAST), epsilon=4.0, delta=1e-3, seed=0)
    stages = result.model.stages
    feats = [data.x.float()]
    for k, (x_in, out) in enumerate(calls):
        with torch.no_grad():
            assert torch.allclose(x_in, stages[k].eval().bases[k](feats[k]), atol=1e-6)  # B_k(X_k) only
        noisy = out[:, x_in.size(1):]
        assert not torch.allclose(noisy.norm(dim=-1), torch.ones(data.num_nodes), atol=1e-2)  # not renormalised
        feats.append(noisy.float())


def test_aggregation_releases_the_noisy_sum_and_renormalises_only_on_request():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])  # a path
    x = torch.rand(4, 3, dtype=torch.float64) + 0.1
    unit = F.normalize(x, dim=-1)
    adj = torch.zeros(4, 4, dtype=torch.float64)
    adj[ei[0], ei[1]] = 1.0
    for level, extra in (("edge", {}), ("node", {"max_degree": 2})):
        out = ProGAPAggregation(level=level, noise_multiplier=0.0, **extra)(x, ei)
        assert torch.allclose(out[:, :3], unit) and torch.allclose(out[:, 3:], adj @ unit)  # sum, no renormalisation
        gap = ProGAPAggregation(level=level, noise_multiplier=0.0, normalize_output=True, **extra)(x, ei)
        assert torch.allclose(gap[:, 3:], F.normalize(adj @ unit, dim=-1))
    acct = PrivacyAccountant()
    plain = ProGAPAggregation(noise_multiplier=1.0, accountant=acct, generator=torch.Generator().manual_seed(0))
    plain(x, ei)
    assert len(acct) == 1 and plain.event().params["sensitivity"] == pytest.approx(math.sqrt(2))  # unchanged
    renorm = ProGAPAggregation(noise_multiplier=1.0, normalize_output=True)
    with pytest.raises(ValueError, match="normalize_output"):  # a release made under the other setting
        renorm.load_state_dict(plain.state_dict())
    assert "normalize_output=True" in repr(renorm) and "normalize_output" not in repr(plain)


@pytest.mark.parametrize("layerwise", [True, False])
def test_earlier_bases_train_on_only_when_progressive(layerwise):
    result = run_progap(_graph(), ProGAPConfig(K=2, layerwise=layerwise, **FAST), epsilon=4.0, delta=1e-3,
                        seed=0)
    s0, s1, s2 = result.model.stages
    same = [torch.equal(a, b) for a, b in zip(s0.bases[0].state_dict().values(), s2.bases[0].state_dict().values())]
    assert all(same) == layerwise
    same = [torch.equal(a, b) for a, b in zip(s1.bases[1].state_dict().values(), s2.bases[1].state_dict().values())]
    assert all(same) == layerwise
    assert s2.frozen == (2 if layerwise else 0)


def test_best_validation_epoch_is_restored(monkeypatch):
    """``fit_full_batch(val_mask=...)`` keeps the epoch of best validation accuracy (the first of
    equals); without it, the last epoch, as before."""
    data = _graph()
    x, y, train, val = data.x, data.y, data.train_mask, data.val_mask

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(x.size(1), 8), nn.SELU(), nn.Linear(8, 3))

    reference, scores, states = model(), [], []
    opt = torch.optim.Adam(reference.parameters(), lr=0.05)
    for _ in range(30):
        opt.zero_grad()
        F.cross_entropy(reference(x[train]), y[train]).backward()
        opt.step()
        scores.append(node_training.accuracy(reference, x, y, val))
        states.append(copy.deepcopy(reference.state_dict()))
    best = max(range(30), key=lambda i: (scores[i], -i))
    assert best < 29  # the check is not vacuous
    fitted = node_training.fit_full_batch(model(), x, y, train, epochs=30, lr=0.05, val_mask=val)
    assert all(torch.equal(a, b) for a, b in zip(fitted.state_dict().values(), states[best].values()))
    last = node_training.fit_full_batch(model(), x, y, train, epochs=30, lr=0.05)
    assert all(torch.equal(a, b) for a, b in zip(last.state_dict().values(), states[-1].values()))


def test_checkpoint_reads_validation_at_edge_level_only(monkeypatch):
    seen = []
    fit = progap_module.fit_full_batch

    def spy(*args, val_mask=None, **kwargs):
        seen.append(val_mask is not None)
        return fit(*args, val_mask=val_mask, **kwargs)

    monkeypatch.setattr(progap_module, "fit_full_batch", spy)
    data = _graph()
    run_progap(data, ProGAPConfig(K=1, **FAST), epsilon=4.0, delta=1e-3, seed=0)
    run_progap(data, ProGAPConfig(K=1, checkpoint="last", **FAST), epsilon=4.0, delta=1e-3, seed=0)
    run_progap(data, ProGAPConfig(K=1, **FAST), epsilon=math.inf, delta=1e-3, level="node",
               max_degree=_max_degree(data), seed=0)
    assert seen == [True, True, False, False, False, False]
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="best_val"):
        run_progap(data, ProGAPConfig(K=1, checkpoint="best_val", **FAST), epsilon=4.0, delta=1e-3,
                   level="node", max_degree=_max_degree(data), accountant=acct)
    assert len(acct) == 0


def test_node_level_uses_groupnorm_and_dp_epochs(monkeypatch):
    data = _graph()
    seen = []
    fit = progap_module.fit_dp_sgd

    def spy(*args, epochs, **kwargs):
        seen.append(epochs)
        return fit(*args, epochs=epochs, **kwargs)

    monkeypatch.setattr(progap_module, "fit_dp_sgd", spy)
    acct = PrivacyAccountant()
    config = ProGAPConfig(K=1, dp_epochs=2, layerwise=False, **FAST)
    result = run_progap(data, config, epsilon=8.0, delta=1e-3, level="node", max_degree=_max_degree(data),
                        accountant=acct, seed=0)
    assert seen == [2, 2]
    kinds = {type(m) for s in result.model.stages for m in s.modules()}
    assert nn.GroupNorm in kinds and nn.BatchNorm1d not in kinds
    assert all(m.num_groups == 1 for s in result.model.stages for m in s.modules() if isinstance(m, nn.GroupNorm))
    assert acct.epsilon("node", 1e-3) == pytest.approx(8.0, rel=1e-3)  # the plan counted dp_epochs
    rate, steps = progap_module._dp_sgd_plan(int(data.train_mask.sum()), config)
    assert steps == 2 * round(1 / rate)


def test_logits_on_a_new_graph_re_releases_every_stage():
    data = _graph()
    result = run_progap(data, ProGAPConfig(K=2, **FAST), epsilon=4.0, delta=1e-3, seed=0)
    assert len(result.accountant) == 2
    u, v = data.edge_index[:, 0].tolist()
    ends = data.edge_index.t().tolist()
    other = data.edge_index[:, torch.tensor([e not in ([u, v], [v, u]) for e in ends])]  # one edge fewer
    result.model.logits(data.x, other, stage=2)
    assert len(result.accountant) == 4  # one new, charged release per stage


def test_the_earlier_variant_stays_available():
    data = _graph()
    config = ProGAPConfig(K=2, combine="inputs", batch_norm=False, renormalize=True, checkpoint="last",
                          feature_norm="l2", **FAST)
    result = run_progap(data, config, epsilon=4.0, delta=1e-3, seed=0)
    assert [len(s.bases) for s in result.model.stages] == [1, 1, 1]
    assert result.model.stages[2].bases[0][0].in_features == 3 * 8  # [normalize(H0) || X1 || X2]
    assert not any(isinstance(m, (nn.BatchNorm1d, nn.GroupNorm)) for s in result.model.stages for m in s.modules())
    logits = result.model.logits(data.x, data.edge_index)
    assert logits.shape == (60, 3) and len(result.accountant) == 2
