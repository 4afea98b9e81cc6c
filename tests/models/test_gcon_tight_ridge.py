"""The GCON recipe with the tight extra ridge Lambda' (Wei et al., arXiv:2407.05034, Theorem 1).

A small Lambda with few loss rows is where Eq. 17 as printed overshoots (Lambda' orders of
magnitude too large, almost none of the budget spent). The recipe's fit uses the tight rule:
one event with exactly the calibrated (eps, delta), registered before any noise is drawn, whose
profile spends the budget; the head is the minimiser with ridge Lambda + Lambda'.
"""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

import pyg_private.nn.perturbed_appr_conv as appr_module
from pyg_private import PrivacyAccountant
from pyg_private.accounting import calibrate_objective_perturbation
from pyg_private.accounting.objective_perturbation import objective_perturbation_profile
from pyg_private.datasets import attach_split, per_class_split
from pyg_private.models import GCONConfig, run_gcon

FAST = dict(epochs=20, encoder_dim=8, pseudo_labels=False, regularization=0.01)


@pytest.fixture(scope="module")
def graph():
    g = torch.Generator().manual_seed(0)
    n, c = 60, 3
    y = torch.arange(n) % c
    x = torch.nn.functional.one_hot(y, c).float() + 0.8 * torch.randn(n, c, generator=g)
    x = torch.cat([x, torch.randn(n, 5, generator=g)], dim=1)
    src = torch.randint(n, (300,), generator=g)
    dst = torch.randint(n, (300,), generator=g)
    keep = (y[src] == y[dst]) & (src != dst)
    ei = to_undirected(torch.stack([src[keep], dst[keep]]), num_nodes=n)
    return attach_split(Data(x=x, edge_index=ei, y=y), per_class_split(y, 5, 15, 30, seed=0))


@pytest.mark.parametrize("sampler", ["safe", "float"])
def test_one_event_before_the_noise_with_the_tight_ridge(graph, sampler, monkeypatch):
    acct = PrivacyAccountant()
    seen = []  # the number of registered events whenever noise is drawn
    for name in ("sample_coupled_objective_noise", "sample_objective_noise"):
        def spy(*args, _original=getattr(appr_module, name), **kwargs):
            seen.append(len(acct.events))
            return _original(*args, **kwargs)

        monkeypatch.setattr(appr_module, name, spy)
    eps, delta = 2.0, 1e-3
    r = run_gcon(graph, GCONConfig(sampler=sampler, **FAST), epsilon=eps, delta=delta, seed=0, accountant=acct)
    assert seen == [1]  # exactly one draw, after exactly one event
    (event,) = acct.events
    cal = r.fit.calibration
    assert cal.lambda_prime_rule == "tight" and cal.lambda_raised and cal.Lambda_prime > 0
    # the tight ridge is far below Eq. 17's for the same inputs, and the noise rate far above
    kw = dict(epsilon=cal.epsilon, delta=cal.delta, dim=cal.d, num_classes=cal.c, num_rows=cal.n1,
              sensitivity=cal.Psi, loss_constants=(cal.c1, cal.c2, cal.c3), regularization=cal.Lambda_user,
              omega=cal.omega)
    paper = calibrate_objective_perturbation(**kw, lambda_prime="paper")
    assert cal == calibrate_objective_perturbation(**kw)
    assert cal.Lambda + cal.Lambda_prime < 0.01 * (paper.Lambda + paper.Lambda_prime)
    assert cal.beta > 100 * paper.beta
    # the event charges the target pair (the safe sampler's split gives the exact mechanism a bit less)
    e_claimed, d_claimed = event.approx
    assert e_claimed <= eps and d_claimed <= delta and e_claimed >= eps * (1 - 1e-9)
    if sampler == "float":
        assert event.approx == (cal.epsilon, cal.delta) == (eps, delta)
    assert event.params["Lambda_prime"] == cal.Lambda_prime and event.params["lambda_prime_rule"] == "tight"
    # and it spends it: the exact mechanism's profile at the calibrated delta is its whole epsilon
    (_, (spent,)) = objective_perturbation_profile(cal, [cal.delta])
    assert cal.epsilon * (1 - 1e-9) <= spent <= cal.epsilon
    assert acct.epsilon("edge", delta) <= eps
    assert acct.epsilon("edge", delta) >= 0.97 * eps  # Eq. 17 as printed: ~1e-5 of it
