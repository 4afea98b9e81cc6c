"""``sampler="float"`` never draws from torch's global generator: after the usual
``torch.manual_seed(0)`` nobody can recompute the noise. It draws from a private generator seeded
from ``os.urandom`` unless a ``generator`` is passed (reproducible), warns once that it is open to
floating-point attacks, and no error message advises it any more."""
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from pyg_private.mechanisms import GaussianMechanism, LaplaceMechanism, flip_edges, sample_objective_noise
from pyg_private.mechanisms import ldp_baselines, square_wave
from pyg_private.nn import (ContractiveGraphLayer, DPPushFlowCap, EdgeFlippingPPR, GAPAggregation, NoisyPPRDiffusion,
                            PerturbedAPPRConv, ProGAPAggregation)
from pyg_private.transforms import EdgeRandomizedResponse, HDSFeaturePerturb

N = 10
SRC = torch.arange(N)
RING = torch.cat([torch.stack([SRC, (SRC + 1) % N]), torch.stack([(SRC + 1) % N, SRC])], dim=1)
X = F.normalize(torch.rand(N, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
Y = torch.arange(N) % 2
U = torch.rand(40, 3, generator=torch.Generator().manual_seed(1))  # in [0, 1]: the LDP samplers' domain


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _seeds(layer):
    return layer(edge_index=RING, seed_index=torch.tensor([0, 4]), num_nodes=N)


RELEASES = {  # name -> a float-sampler release without a generator (a fresh component each call)
    "laplace": lambda g=None: LaplaceMechanism(1.0, scale=1.0, sampler="float", generator=g)(torch.zeros(64)),
    "gaussian": lambda g=None: GaussianMechanism(1.0, noise_std=1.0, sampler="float", generator=g)(torch.zeros(64)),
    "contractive": lambda g=None: ContractiveGraphLayer(2, 0.9, min_degree=1, noise_multiplier=1.0, sampler="float",
                                                        cached=False, generator=g)(X, RING),
    "gap": lambda g=None: GAPAggregation(1, noise_multiplier=1.0, sampler="float", cached=False, generator=g)(X, RING),
    "progap": lambda g=None: ProGAPAggregation(noise_multiplier=1.0, sampler="float", cached=False,
                                               generator=g)(X, RING),
    "noisy_ppr": lambda g=None: _seeds(NoisyPPRDiffusion(0.2, 3, 1e-2, noise_scale=1e-2, sampler="float",
                                                         cached=False, generator=g)),
    "push_flow": lambda g=None: _seeds(DPPushFlowCap(alpha=0.2, num_iterations=3, eta=1e-2, noise_scale=1e-2,
                                                     sampler="float", cached=False, generator=g)),
    "edge_flipping_ppr": lambda g=None: _seeds(EdgeFlippingPPR(0.2, 3, epsilon=0.5, sampler="float", cached=False,
                                                               generator=g)),
    "edge_rr": lambda g=None: EdgeRandomizedResponse(0.5, sampler="float", allow_recompose=True, generator=g)(
        Data(x=X, edge_index=RING.clone())).edge_index,
    "flip_edges": lambda g=None: flip_edges(RING, N, 0.6, sampler="float", generator=g),
    "objective_noise": lambda g=None: sample_objective_noise(4, 2, 1.0, generator=g),
    "gcon_fit": lambda g=None: _gcon(g),
    "hds": lambda g=None: HDSFeaturePerturb(1.0, 2, (0.0, 1.0), sampler="float", allow_recompose=True,
                                            generator=g)(Data(x=U.clone())).x,
    "square_wave": lambda g=None: square_wave.sample_square_wave(U, 1.0, sampler="float", generator=g),
    "k_subsets": lambda g=None: square_wave.sample_k_subsets(64, 8, 3, sampler="float", generator=g),
    "laplace_ldp": lambda g=None: ldp_baselines.sample_laplace_ldp(U, 1.0, sampler="float", generator=g),
    "piecewise": lambda g=None: ldp_baselines.sample_piecewise(U, 1.0, sampler="float", generator=g),
    "multibit": lambda g=None: ldp_baselines.sample_multibit(U, 1.0, sampler="float", generator=g),
}


def _gcon(generator):
    conv = PerturbedAPPRConv(3, 2, alpha=0.4, epsilon=1.0, delta=1e-3, sampler="float")
    conv.fit(X, RING, Y, generator=generator)
    return conv.weight


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_the_global_generator_is_neither_read_nor_advanced(name):
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    first = RELEASES[name]()
    assert torch.equal(torch.random.get_rng_state(), state), "the float sampler drew from torch's global generator"
    torch.manual_seed(0)
    second = RELEASES[name]()
    assert not torch.equal(first, second), "the same global seed gave the same noise"


def test_a_known_global_seed_no_longer_recovers_the_query():
    """The attack of the issue: seed, release; seed again, recompute the Laplace draws, subtract."""
    secret = torch.linspace(-3.0, 3.0, 50, dtype=torch.float64)
    torch.manual_seed(0)
    out = LaplaceMechanism(1.0, scale=2.0, sampler="float")(secret)
    torch.manual_seed(0)
    e = torch.empty((2, 50), dtype=torch.float64).exponential_(1.0)
    recovered = out - (e[0] - e[1]) * 2.0
    assert not torch.allclose(recovered, secret)


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_a_passed_generator_still_reproduces(name):
    a = RELEASES[name](torch.Generator().manual_seed(3))
    b = RELEASES[name](torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_the_float_sampler_warns_once_per_process(monkeypatch):
    from pyg_private.mechanisms import FloatSamplerWarning
    from pyg_private.mechanisms import sampler_options

    monkeypatch.setattr(sampler_options, "_float_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LaplaceMechanism(1.0, scale=1.0, sampler="float")
        GAPAggregation(1, noise_multiplier=1.0, sampler="float")
        LaplaceMechanism(1.0, scale=1.0)  # the safe sampler: no warning
    ours = [w for w in caught if issubclass(w.category, FloatSamplerWarning)]
    assert len(ours) == 1
    assert "floating-point attacks" in str(ours[0].message) and "benchmarks and audits" in str(ours[0].message)


def _message(call) -> str:
    with pytest.raises((ValueError, RuntimeError)) as info:
        call()
    return str(info.value)


def test_push_flow_error_gives_no_float_advice():
    text = _message(lambda: DPPushFlowCap(alpha=0.2, num_iterations=3, eta=1e-2, noise_scale=1e-300).plan_grid(N))
    assert "too small for a grid release" in text and "float" not in text


def test_noisy_ppr_error_gives_no_float_advice():
    text = _message(lambda: NoisyPPRDiffusion(noise_scale=1e-300).plan_grid(N))
    assert "2^60 steps" in text and "float" not in text and "noise_scale" in text


def test_gcon_steps_inf_error_gives_no_float_advice(monkeypatch):
    conv = PerturbedAPPRConv(3, 2, alpha=0.4, steps=math.inf, epsilon=1.0, delta=1e-3)
    monkeypatch.setattr(PerturbedAPPRConv, "_inf_residual", lambda self, *a: math.inf)  # a propagation that stalls
    text = _message(lambda: conv.fit(X, RING, Y))
    assert "did not converge" in text and "float" not in text and "steps" in text


def test_approximate_minimiser_error_gives_no_float_advice():
    from pyg_private.accounting.approximate_minimizer import split_budget

    text = _message(lambda: split_budget(800.0, 1e-5))
    assert "float" not in text
