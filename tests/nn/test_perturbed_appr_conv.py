"""PerturbedAPPRConv (GCON): one event per fit, calibration wiring, solver, inference modes, validation."""
import math

import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting.objective_perturbation import appr_sensitivity
from pyg_private.nn import PerturbedAPPRConv


def _graph(n=40, f=6, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ei = to_undirected(erdos_renyi_graph(n, 0.15), num_nodes=n)
    x = torch.randn(n, f, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True)
    y = torch.randint(c, (n,), generator=g)
    return x, ei, y


def _dense_appr(x, ei, alpha, m):
    n = x.size(0)
    a = torch.zeros(n, n, dtype=torch.float64)
    a[ei[0], ei[1]] = 1.0
    a_t = (a + torch.eye(n, dtype=torch.float64))
    a_t = a_t / a_t.sum(1, keepdim=True)
    h = x.clone()
    for _ in range(m):
        h = (1 - alpha) * a_t @ h + alpha * x
    return h, a_t


def test_one_event_per_fit_with_the_calibration_and_no_noise_kept():
    x, ei, y = _graph()
    acct = PrivacyAccountant(budget={"edge": (2.5, 2.5e-3)})
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=1.0, delta=1e-3, accountant=acct, sampler="float")
    fit = layer.fit(x, ei, y, generator=torch.Generator().manual_seed(1))
    (event,) = acct.events
    assert event.unit.value == "edge" and event.approx == (1.0, 1e-3)
    assert event.profile is not None  # composes at any delta (Theorem 1 holds at every delta)
    assert 0.0 < acct.report(delta=1e-5)["edge"]["epsilon"] < 1.5  # answers below the fit's own delta
    assert event.params["beta"] == pytest.approx(fit.calibration.beta)
    assert event.params["Psi"] == pytest.approx(appr_sensitivity(0.4, 2))
    assert fit.converged and fit.grad_norm <= 1e-10 and fit.num_rows == 40
    assert set(layer.state_dict()) == {"weight"}  # the released model, and nothing of the noise
    assert not any(isinstance(v, torch.Generator) for v in vars(layer).values())
    layer.fit(x, ei, y)
    assert len(acct) == 2
    acct.set_budget("edge", (acct.epsilon("edge", 1e-9) * (1 + 1e-6), 1e-9))  # the two fits exhaust it
    with pytest.raises(PrivacyBudgetExceeded):
        layer.fit(x, ei, y)
    assert len(acct) == 2


def test_propagation_matches_the_dense_recursion_and_concatenates():
    x, ei, _ = _graph()
    layer = PerturbedAPPRConv(6, 3, alpha=0.3, steps=(0, 2, 5), epsilon=1.0, delta=1e-3, accountant=PrivacyAccountant())
    z = layer.propagation(x, ei)
    parts = [_dense_appr(x, ei, 0.3, m)[0] for m in (0, 2, 5)]
    assert torch.allclose(z.to(torch.float64), torch.cat(parts, dim=1) / 3, atol=1e-10)
    assert layer.out_features == 18 and layer.sensitivity == pytest.approx(appr_sensitivity(0.3, [0, 2, 5]))


def test_the_fit_solves_the_perturbed_objective():
    x, ei, y = _graph()
    gen = torch.Generator().manual_seed(3)
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=2.0, delta=1e-3, accountant=PrivacyAccountant(),
                              loss="pseudo_huber", huber_delta=0.2, sampler="float")
    fit = layer.fit(x, ei, y, generator=gen)
    cal = fit.calibration
    # recompute B from the optimality condition (Eq. 40) and compare with the same draw
    from pyg_private.mechanisms.objective_noise import sample_objective_noise
    b = sample_objective_noise(6, 3, cal.beta, generator=torch.Generator().manual_seed(3))
    z = layer.propagation(x, ei).to(torch.float64)
    targets = torch.nn.functional.one_hot(y, 3).double()
    recovered = -(z.T @ layer.loss.first(z @ layer.weight, targets)) - 40 * (cal.Lambda + cal.Lambda_prime) * layer.weight
    assert torch.allclose(recovered, b, atol=1e-7)


def test_inference_modes():
    x, ei, y = _graph()
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=(0, 3), epsilon=4.0, delta=1e-3, accountant=PrivacyAccountant(),
                              alpha_inference=0.9)
    layer.fit(x, ei, y)
    public = layer(x, ei, mode="public")
    assert torch.allclose(public, layer.propagation(x, ei).double() @ layer.weight)
    hop, _ = _dense_appr(x, ei, 0.9, 1)
    assert torch.allclose(layer(x, ei, mode="private"), torch.cat([x, hop], dim=1) @ layer.weight, atol=1e-10)
    with pytest.raises(ValueError, match="mode"):
        layer(x, ei, mode="both")


@pytest.mark.parametrize("kwargs, match", [
    (dict(delta=0.0), "delta > 0"), (dict(epsilon=0.0), "epsilon"), (dict(alpha=0.0), "alpha"),
    (dict(alpha=1.5), "alpha"), (dict(loss="cross_entropy"), "not covered"), (dict(steps=-1), "step count"),
])
def test_bad_arguments(kwargs, match):
    base = dict(alpha=0.4, steps=2, epsilon=1.0, delta=1e-3)
    with pytest.raises(ValueError, match=match):
        PerturbedAPPRConv(6, 3, **{**base, **kwargs})


def test_bad_inputs_raise_before_any_charge():
    x, ei, y = _graph()
    acct = PrivacyAccountant()
    layer = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=1.0, delta=1e-3, accountant=acct)
    with pytest.raises(ValueError, match="unit L2 ball"):
        layer.fit(2 * x, ei, y)
    with pytest.raises(ValueError):
        layer.fit(x, ei[:, ei[0] < ei[1]], y)  # directed
    with pytest.raises(ValueError, match="class index"):
        layer.fit(x, ei, y + 3)
    with pytest.raises(RuntimeError, match="fit"):
        PerturbedAPPRConv(6, 3, alpha=0.4, epsilon=1.0, delta=1e-3)(x, ei)
    assert len(acct) == 0
    assert "PerturbedAPPRConv(6, 3" in repr(layer) and math.isfinite(layer.sensitivity)


def test_the_released_head_round_trips_through_state_dict():
    x, ei, y = _graph()
    a = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=1.0, delta=1e-3, accountant=PrivacyAccountant())
    a.fit(x, ei, y)
    b = PerturbedAPPRConv(6, 3, alpha=0.4, steps=2, epsilon=1.0, delta=1e-3)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a(x, ei), b(x, ei))
