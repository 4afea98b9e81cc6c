"""The calls a PyG user writes first get errors that say what the layer is and what to write, and
nothing is charged before them."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch_geometric.utils import add_self_loops

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.nn import ContractiveGraphLayer, GAPAggregation, NoisyPPRDiffusion, PerturbedAPPRConv


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def ring(n):
    src = torch.arange(n)
    ei = torch.stack([src, (src + 1) % n])
    return torch.cat([ei, ei.flip(0)], dim=1)


@pytest.mark.parametrize("make", [lambda: ContractiveGraphLayer(1433, 16), lambda: NoisyPPRDiffusion(1433, 16)])
def test_gcnconv_style_constructor_says_what_the_layer_is(make):
    with pytest.raises(TypeError, match="parameter-free private propagation .*APPNP.*Write for example"):
        make()


def test_valid_positional_calls_are_not_mistaken_for_channels():
    assert ContractiveGraphLayer(2, 0.9, min_degree=1, noise_multiplier=1.0).K == 2
    assert ContractiveGraphLayer(10, 0, min_degree=1, noise_multiplier=1.0).contraction == 0.0
    assert NoisyPPRDiffusion(0.2, 100, noise_scale=1e-3).num_iterations == 100


def test_perturbed_appr_conv_names_its_missing_keywords():
    with pytest.raises(TypeError, match="GCON's whole private model.*alpha, epsilon, delta"):
        PerturbedAPPRConv(1433, 16, cached=True)
    with pytest.raises(TypeError, match="needs the keyword arguments delta"):
        PerturbedAPPRConv(1433, 7, alpha=0.4, epsilon=1.0)


def test_edge_weight_in_the_third_slot_is_named_and_nothing_is_charged():
    n = 8
    ei = ring(n)
    x = torch.rand(n, 4, dtype=torch.float64)
    w = torch.rand(ei.size(1))
    acct = PrivacyAccountant()
    cgl = ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct)
    with pytest.raises(ValueError, match="takes no edge weights.*`x0`"):
        cgl(x, ei, w)
    ppr = NoisyPPRDiffusion(0.2, 10, noise_scale=1e-3, accountant=acct)
    with pytest.raises(ValueError, match="takes no edge weights.*`seed_index`"):
        ppr(x[:, :1], ei, w)
    assert len(acct) == 0
    conv = PerturbedAPPRConv(4, 2, alpha=0.4, epsilon=1.0, delta=1e-3)
    with pytest.raises(ValueError, match="takes no edge weights.*`mode`"):
        conv(x, ei, w)


def test_self_loops_get_a_fix_that_names_the_pyg_utility():
    n = 8
    ei, _ = add_self_loops(ring(n), num_nodes=n)
    x = torch.rand(n, 4, dtype=torch.float64)
    cgl = ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="self-loops .*remove_self_loops"):
        cgl(x, ei)
    x_ball = torch.nn.functional.normalize(x, dim=-1) * 0.99
    y = torch.tensor([0, 1] * (n // 2))
    mask = torch.ones(n, dtype=torch.bool)
    conv = PerturbedAPPRConv(4, 2, alpha=0.4, epsilon=1.0, delta=1e-3)
    with pytest.raises(ValueError, match="`edge_index` contains self-loops"):  # the public name
        conv.fit(x_ball, ei, y, mask)
    fixed = PerturbedAPPRConv(4, 2, alpha=0.4, epsilon=1.0, delta=1e-3, symmetrize=True)  # the suggested fix exists
    fixed.fit(x_ball, ei, y, mask)
    assert fixed(x_ball, ei).shape == (n, 2)


@pytest.mark.parametrize("make", [
    lambda acct: ContractiveGraphLayer(1, 0.9, min_degree=1, noise_multiplier=1.0, accountant=acct, cached=False),
    lambda acct: GAPAggregation(1, noise_multiplier=1.0, accountant=acct, cached=False),
])
def test_training_through_a_release_is_refused_before_any_charge(make):
    """A model lin -> private layer in training mode: the input requires grad, the release would be
    detached (lin gets no gradient) and charged every epoch. Refused, nothing charged; eval mode and
    an explicit detach release as before."""
    n = 8
    ei = ring(n)
    lin = torch.nn.Linear(3, 4)
    x = lin(torch.rand(n, 3))
    acct = PrivacyAccountant()
    layer = make(acct)
    with pytest.raises(ValueError, match="requires grad in training mode.*Precompute"):
        layer(x, ei)
    assert len(acct) == 0
    out = layer(x.detach(), ei)
    assert not out.requires_grad and len(acct) == 1
    layer.eval()(x, ei)
    assert len(acct) == 2
    with torch.no_grad():
        layer.train()(lin(torch.rand(n, 3)), ei)
    assert len(acct) == 3


def test_float32_normalised_rows_are_accepted_and_projected():
    """F.normalize in float32 leaves norms up to about 1 + sqrt(F) 2^-24: accepted and projected
    onto the ball (the sensitivity analysis then holds exactly); a row clearly outside raises."""
    from pyg_private.nn.perturbed_appr_conv import _check_ball

    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(2000, 1433, generator=g), dim=-1)
    assert float(x.double().norm(dim=1).max()) > 1.0  # float32 rounding overshoots
    ball = _check_ball(x, 1433)
    assert ball.dtype == torch.float64 and float(ball.norm(dim=1).max()) <= 1.0
    with pytest.raises(ValueError, match="unit L2 ball"):
        _check_ball(x * 1.01, 1433)


def test_unconverged_fit_warns(monkeypatch):
    from pyg_private.nn import perturbed_appr_conv as module

    real = module.solve_separable_ridge

    def capped(*args, **kwargs):
        kwargs["max_iter"] = 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "solve_separable_ridge", capped)
    n = 8
    x = torch.nn.functional.normalize(torch.rand(n, 4, dtype=torch.float64), dim=-1)
    y = torch.tensor([0, 1] * (n // 2))
    conv = PerturbedAPPRConv(4, 2, alpha=0.4, epsilon=1.0, delta=1e-3, tol=1e-14, sampler="float")
    with pytest.warns(RuntimeWarning, match="Newton solve stopped"):  # (the safe sampler raises instead)
        fit = conv.fit(x, ring(n), y, torch.ones(n, dtype=torch.bool))
    assert not fit.converged
