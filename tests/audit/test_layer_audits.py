"""Canary-edge audits of the library's edge-private layers on a graph built to be audited.

Each layer is audited at its calibrated noise (the empirical lower bound must stay at or
below the claimed epsilon) and with its noise deliberately cut (the same audit must then
catch it: a lower bound above the claim). The graph makes single edges as visible as the
analyses allow: every canary joins two degree-1 nodes with opposite features (each hangs
off its own anchor), so inserting it changes both endpoints' neighbourhoods as much as one
edge can at ``min_degree=1``.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import pyg_private.nn.perturbed_appr_conv as perturbed_appr_conv
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.audit import canary_edge_audit, linear_canary_score
from pyg_private.nn import ContractiveGraphLayer, NoisyPPRDiffusion, PerturbedAPPRConv
from pyg_private.utils.appr import appr_propagate
from pyg_private.utils.newton_solver import solve_separable_ridge

EPSILON, DELTA = 2.0, 1e-4
M = 100  # canaries
N = 4 * M


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


@pytest.fixture(scope="module")
def graph():
    u = torch.arange(M) * 4
    v = u + 1
    ei = torch.stack([torch.cat([u, v]), torch.cat([u + 2, v + 2])])  # u - anchor, v - anchor
    ei = torch.cat([ei, ei.flip(0)], dim=1)
    x = torch.zeros(N, 2, dtype=torch.float64)
    x[u, 0], x[v, 0] = 0.999, -0.999
    x[u + 2, 1], x[v + 2, 1] = 0.999, -0.999
    y = torch.zeros(N, dtype=torch.long)
    y[v], y[v + 2] = 1, 1
    return ei, torch.stack([u, v]), x, y


def _audit(graph, release, noiseless, canaries, runs):
    ei, _, _, _ = graph
    score = linear_canary_score(noiseless, ei, N, canaries)
    return canary_edge_audit(release, score, ei, N, num_canaries=canaries.size(1), runs=runs, canaries=canaries,
                             delta=DELTA, confidence=0.95, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("cut, caught", [(1.0, False), (10.0, True)])
def test_contractive_graph_layer(graph, cut, caught):
    ei, canaries, x, _ = graph
    # the canaries join degree-1 nodes: min_degree=1 holds only with the degree floor (which changes
    # nothing on this graph, no node is isolated)
    bounds = dict(min_degree=1, degree_floor=True)
    sigma = ContractiveGraphLayer(1, 0.9, epsilon=EPSILON, delta=DELTA, **bounds).noise_multiplier
    layer = ContractiveGraphLayer(1, 0.9, noise_multiplier=sigma / cut, generator=torch.Generator().manual_seed(4),
                                  **bounds)
    exact = ContractiveGraphLayer(1, 0.9, noise_multiplier=0.0, **bounds)
    audit = _audit(graph, lambda e: layer(x, e), lambda e: exact(x, e), canaries, runs=10)
    assert audit.canaries == 1000
    if caught:
        assert audit.epsilon > EPSILON, audit  # measured 3.82
    else:
        assert audit.epsilon <= EPSILON, audit  # measured 0.45


@pytest.mark.parametrize("cut, caught", [(1.0, False), (10.0, True)])
def test_noisy_ppr_diffusion(graph, cut, caught):
    ei, canaries, _, _ = graph
    s = torch.zeros(N, 1, dtype=torch.float64)
    s[canaries[0], 0] = 1.0
    scale = NoisyPPRDiffusion(0.2, 1, 1.0, epsilon=EPSILON, delta=DELTA).noise_scale
    layer = NoisyPPRDiffusion(0.2, 1, 1.0, noise_scale=scale / cut, generator=torch.Generator().manual_seed(4))
    exact = NoisyPPRDiffusion(0.2, 1, 1.0, noise_scale=0.0)
    audit = _audit(graph, lambda e: layer(s, e), lambda e: exact(s, e), canaries, runs=10)
    if caught:
        assert audit.epsilon > EPSILON, audit  # measured 2.39
    else:
        assert audit.epsilon <= EPSILON, audit  # measured 0.05


@pytest.mark.parametrize("cut, caught", [(1.0, False), (float("inf"), True)])
def test_perturbed_appr_conv(graph, cut, caught, monkeypatch):
    """One canary per release (the head is one global matrix, so many canaries in one
    release drown each other), pooled over 400 releases. Objective perturbation keeps
    slack beyond its noise (the regularisation it adds), so the broken version removes
    the noise altogether; a 10x cut measured 0.69, not caught."""
    ei, canaries, x, y = graph
    sample = perturbed_appr_conv.sample_coupled_objective_noise  # the safe default's noise
    monkeypatch.setattr(perturbed_appr_conv, "sample_coupled_objective_noise", lambda *a, **k: sample(*a, **k) / cut)
    gen = torch.Generator().manual_seed(5)

    def layer():
        return PerturbedAPPRConv(2, 2, alpha=0.3, steps=1, epsilon=EPSILON, delta=DELTA, regularization=0.2,
                                 cached=False)

    def release(e):
        conv = layer()
        conv.fit(x, e, y, generator=gen)
        return conv.weight.clone()

    ref = layer()
    cal = ref.calibration(N)

    def noiseless(e):
        z = appr_propagate(x, e, alpha=0.3, steps=[1], tol=1e-12)
        return solve_separable_ridge(z, F.one_hot(y, 2).double(), ref.loss, regularization=cal.Lambda + cal.Lambda_prime,
                                     tol=1e-12).theta

    audit = _audit(graph, release, noiseless, canaries[:, :1], runs=400)
    if caught:
        assert audit.epsilon > EPSILON, audit  # measured 3.60
    else:
        assert audit.epsilon <= EPSILON, audit  # measured 0
