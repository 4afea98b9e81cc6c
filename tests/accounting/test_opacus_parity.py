"""Opacus parity: make_private_with_epsilon with our accountant, and private layers kept out of DP-SGD models."""
import pytest
import torch
from opacus import PrivacyEngine
from opacus.accountants.utils import get_noise_multiplier
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pyg_private import PrivacyAccountant
from pyg_private.accounting import OpacusAccountant, gdp_event
from pyg_private.accounting.opacus_bridge import (
    ReleaseInsideDPSGDError,
    _opacus_steps,
    check_opacus_model,
    dp_sgd_noise_multiplier,
    make_private,
    make_private_with_epsilon,
)
from pyg_private.nn import ContractiveGraphLayer, GAPAggregation, NoisyPPRDiffusion

N, BATCH, EPOCHS = 32, 8, 2  # 4 batches per epoch: 8 steps at sample rate 1/4
DELTA = 1e-5

pytestmark = [
    pytest.mark.filterwarnings("ignore:Secure RNG turned off:UserWarning"),
    pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning"),
    pytest.mark.filterwarnings("ignore:Optimal order is the:RuntimeWarning"),
]


def _data(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(N, 4, generator=gen), torch.randint(0, 2, (N,), generator=gen)


def _train(acct, *, target, helper=False, **kwargs):
    torch.manual_seed(0)
    x, y = _data()
    model = nn.Linear(4, 2)
    args = dict(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
                data_loader=DataLoader(TensorDataset(x, y), batch_size=BATCH), target_epsilon=target,
                target_delta=DELTA, epochs=EPOCHS, max_grad_norm=1.0)
    engine = PrivacyEngine()
    engine.accountant = OpacusAccountant(acct, unit="node")
    if helper:
        model, optimizer, loader = make_private_with_epsilon(engine, **args, **kwargs)
    else:
        model, optimizer, loader = engine.make_private_with_epsilon(**args)
    for _ in range(EPOCHS):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb) if len(yb) else model(xb).sum() * 0
            loss.backward()
            optimizer.step()
    return optimizer.noise_multiplier


def test_engine_make_private_with_epsilon_works_with_our_accountant():
    # was: ValueError "Unexpected accounting mechanism: pyg_private"
    acct = PrivacyAccountant()
    sigma = _train(acct, target=2.0)
    eps = acct.epsilon("node", DELTA)
    print(f"engine.make_private_with_epsilon: target 2.0, noise multiplier {sigma:.4f}, "
          f"ledger epsilon after {len(acct)} steps {eps:.4f}")
    assert len(acct) == EPOCHS * N // BATCH
    assert eps <= 2.0
    assert eps > 0.8 * 2.0  # calibrated, not merely safe


def test_engine_calibration_counts_what_the_ledger_already_spent():
    prior = gdp_event(unit="node", mu=0.3, name="aggregation")
    # the Rényi rules alone (pld=False): the calibration is then tight, and an overshoot would show
    fresh_sigma = _train(PrivacyAccountant(pld=False), target=3.0)  # a fresh ledger
    acct = PrivacyAccountant(pld=False)
    acct.register(prior)
    sigma = _train(acct, target=3.0)
    assert sigma > fresh_sigma  # the aggregation's spend was counted
    assert acct.epsilon("node", DELTA) <= 3.0
    # calibrating from zero (Opacus' own semantics) would have overshot on this ledger
    over = PrivacyAccountant(pld=False)
    over.register(prior)
    assert over._planned_epsilon(OpacusAccountant(over)._event(fresh_sigma, BATCH / N), DELTA,
                                 repeat=EPOCHS * N // BATCH) > 3.0


@pytest.mark.parametrize("pld", [True, False])
def test_helper_calibrates_tightly_against_ledger_and_budget(pld):
    acct = PrivacyAccountant(budget={"node": (1.5, DELTA)}, pld=pld)
    acct.register(gdp_event(unit="node", mu=0.1, name="aggregation"))
    _train(acct, target=2.0, helper=True, rtol=5e-3)  # the budget (1.5) is the binding limit
    eps = acct.epsilon("node", DELTA)
    print(f"make_private_with_epsilon helper (pld={pld}): budget 1.5, ledger epsilon {eps:.6f}")
    assert len(acct) == 1 + EPOCHS * N // BATCH  # no step was refused
    assert 1.5 * (1 - 1e-2) <= eps <= 1.5


def test_opacus_get_noise_multiplier_outside_an_engine_is_safe_for_both_conversions():
    sigma = get_noise_multiplier(target_epsilon=2.0, target_delta=DELTA, sample_rate=BATCH / N, epochs=EPOCHS,
                                 accountant="pyg_private")
    step = OpacusAccountant(PrivacyAccountant())._event(sigma, BATCH / N)  # what every training step charges
    for conversion in ("balle", "standard"):
        for pld in (True, False):
            acct = PrivacyAccountant(conversion=conversion, pld=pld)
            for _ in range(EPOCHS * N // BATCH):
                acct.register(step)
            assert acct.epsilon("node", DELTA) <= 2.0


def test_opacus_step_truncation_is_counted():
    assert int(1 / (1 / 93)) == 92  # what Opacus' get_noise_multiplier computes for one epoch of 93 batches
    assert _opacus_steps(1 / 93, 92) == 93
    assert _opacus_steps(1 / 4, 8) == 8 and _opacus_steps(0.01, 7) == 7


def test_calibration_errors_name_the_argument():
    acct = PrivacyAccountant()
    acct.register(gdp_event(unit="node", mu=3.0, name="big"))
    with pytest.raises(ValueError, match="cannot be met"):
        dp_sgd_noise_multiplier(acct, target_epsilon=1.0, target_delta=DELTA, sample_rate=0.1, steps=10)
    with pytest.raises(ValueError, match="pure-DP budget"):
        dp_sgd_noise_multiplier(PrivacyAccountant(budget={"node": 1.0}), target_epsilon=1.0, target_delta=DELTA,
                                sample_rate=0.1, steps=10)
    with pytest.raises(ValueError, match="sample_rate"):
        dp_sgd_noise_multiplier(PrivacyAccountant(), target_epsilon=1.0, target_delta=DELTA, sample_rate=0.0, steps=1)
    with pytest.raises(ValueError, match="target_epsilon"):
        dp_sgd_noise_multiplier(PrivacyAccountant(), target_epsilon=0.0, target_delta=DELTA, sample_rate=0.1, steps=1)
    with pytest.raises(TypeError, match="OpacusAccountant"):
        make_private_with_epsilon(PrivacyEngine(), module=nn.Linear(2, 2), optimizer=None, data_loader=[1],
                                  target_epsilon=1.0, target_delta=DELTA, epochs=1, max_grad_norm=1.0)


# ------------------------------------------------------------------ private layers in DP-SGD models
def _ring(n):
    i = torch.arange(n)
    ei = torch.stack([i, (i + 1) % n])
    return torch.cat([ei, ei.flip(0)], 1)


class _PropagateThenClassify(nn.Module):
    """The pattern that fails: a private propagation inside the model given to make_private."""

    def __init__(self, layer):
        super().__init__()
        self.propagate = layer
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.propagate(x, _ring(x.size(0))))


def _layers(acct):
    return [
        ContractiveGraphLayer(K=2, contraction=0.9, min_degree=1, noise_multiplier=2.0, accountant=acct),
        GAPAggregation(1, noise_multiplier=1.0, accountant=acct),
        NoisyPPRDiffusion(0.2, 5, 1e-2, noise_scale=1e-3, accountant=acct),
    ]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_check_opacus_model_names_the_layer_and_the_fix(index):
    acct = PrivacyAccountant()
    layer = _layers(acct)[index]
    with pytest.raises(ReleaseInsideDPSGDError, match=rf"propagate \({type(layer).__name__}\).*no_grad"):
        check_opacus_model(_PropagateThenClassify(layer))
    check_opacus_model(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))  # trainable layers only: fine
    model = _PropagateThenClassify(layer)
    engine = PrivacyEngine()
    engine.accountant = OpacusAccountant(acct)
    x, y = _data()
    with pytest.raises(ValueError, match="outside the DP-SGD model"):  # a ValueError, as Opacus' own
        make_private(engine, module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                     data_loader=DataLoader(TensorDataset(x, y), batch_size=BATCH), noise_multiplier=1.0,
                     max_grad_norm=1.0)
    assert len(acct) == 0


def test_plain_engine_make_private_refuses_the_release_before_charging():
    # was: the layer's release charged at every forward, then "Per sample gradient is not initialized"
    acct = PrivacyAccountant()
    layer = _layers(acct)[0]
    model = _PropagateThenClassify(layer)
    engine = PrivacyEngine()
    engine.accountant = OpacusAccountant(acct)
    x, y = _data()
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=DataLoader(TensorDataset(x, y), batch_size=N), noise_multiplier=1.0, max_grad_norm=1.0,
        poisson_sampling=False)
    with pytest.raises(ReleaseInsideDPSGDError, match="Nothing was charged"):
        model(x)
    assert len(acct) == 0
    # the same layer used outside any DP-SGD model still releases (and is charged once)
    fresh = ContractiveGraphLayer(K=2, contraction=0.9, min_degree=1, noise_multiplier=2.0, accountant=acct)
    fresh(x, _ring(N))
    assert len(acct) == 1


def test_precompute_pattern_trains_with_opacus():
    acct = PrivacyAccountant()
    x, y = _data()
    layer = ContractiveGraphLayer(K=2, contraction=0.9, min_degree=1, noise_multiplier=2.0, accountant=acct,
                                  cached=True)
    with torch.no_grad():
        h = layer(x, _ring(N))  # one release, outside the DP-SGD model
    model = nn.Linear(4, 2)
    engine = PrivacyEngine()
    engine.accountant = OpacusAccountant(acct)
    model, optimizer, loader = make_private(
        engine, module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=DataLoader(TensorDataset(h, y), batch_size=BATCH), noise_multiplier=1.0, max_grad_norm=1.0)
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb) if len(yb) else model(xb).sum() * 0
        loss.backward()
        optimizer.step()
    assert acct.events[0].mechanism == "contractive_graph_layer"
    assert len(acct.events_of("edge")) == 1 and len(acct.events_of("node")) == N // BATCH
