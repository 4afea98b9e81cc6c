"""NoisyPPRDiffusion's propagation core (issue 17 §1: buffers reused, fused passes) against a verbatim
copy of the loop it replaced: bit-for-bit equal outputs with the noise off, and with the noise on from
the same seed (the same draws in the same order), on every path (seeds or signals, personalized or not,
safe, float or no noise), plus the per-step state that must not leak between columns or calls."""
from __future__ import annotations

import contextlib
import warnings
from typing import Optional

import pytest
import torch
from torch_geometric.utils import spmm

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.mechanisms._noise import TwoLaplaceStream
from pyg_private.mechanisms.exact_integer_noise import RoundedNoiseSampler
from pyg_private.mechanisms.randomness import RandomSource
from pyg_private.nn import NoisyPPRDiffusion
from pyg_private.utils import simple_undirected
from pyg_private.utils.adjacency import adjacency_csr, inverse_degree
from pyg_private.utils.lazy_ppr import seed_matrix

_CLAMP = 2.0 ** 61


@torch.no_grad()
def reference_diffuse(layer: NoisyPPRDiffusion, edge_index, n: int, s0, seeds: Optional[torch.Tensor],
                      grid=None, source=None, sampler=None, generator: Optional[torch.Generator] = None):
    """The loop of ``NoisyPPRDiffusion._diffuse`` before issue 17 §1, verbatim (only ``self`` renamed and
    the generator passed in, ``propagate`` spelled out): one product per step into a new tensor, separate clamp/minimum
    passes, the grid rounding through a scaled copy."""
    beta = 1.0 - layer.alpha
    adj, deg = adjacency_csr(edge_index, n)
    deg_inv = inverse_degree(deg).unsqueeze(-1)
    upper = (layer.eta * deg).unsqueeze(-1)
    if seeds is not None:
        cols = torch.arange(seeds.numel(), device=seeds.device)
        restart = None
    else:
        restart = (1.0 - beta) * s0
    noise = TwoLaplaceStream(s0.shape, layer.noise_scale, device=s0.device, generator=generator) \
        if layer.noise_scale > 0 and grid is None else None
    if grid is not None:
        g = grid.granularity
        scaled_g = torch.empty_like(s0)
        steps = torch.empty(s0.shape, dtype=torch.int64, device=s0.device)
        ints = torch.empty(s0.numel(), dtype=torch.int64, device=s0.device)
    s = s0.clone()
    xc = torch.empty_like(s)
    scaled = torch.empty_like(s)
    for _ in range(layer.num_iterations):
        torch.clamp(s, min=0.0, out=xc)
        if layer.personalized and seeds is not None:
            seed_vals = xc[seeds, cols]
            torch.minimum(xc, upper, out=xc)
            xc[seeds, cols] = seed_vals
        else:
            torch.minimum(xc, upper, out=xc)
        torch.mul(xc, deg_inv, out=scaled)
        s = spmm(adj, scaled, reduce="sum")  # what layer.propagate(adj, x=scaled) ran
        s.add_(xc).mul_(0.5 * beta)
        if restart is None:
            s[seeds, cols] += 1.0 - beta
        else:
            s.add_(restart)
        if grid is not None:
            torch.mul(s, 1.0 / g, out=scaled_g)
            scaled_g.clamp_(-_CLAMP, _CLAMP).round_()
            steps.copy_(scaled_g)
            steps.view(-1).add_(sampler.sample(ints.numel(), source, out=ints))
            s.copy_(steps).mul_(g)
        elif layer.noise_scale > 0:
            s.add_(noise.sample())
    return s


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


@contextlib.contextmanager
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def graph(n: int = 40, p: float = 0.15, seed: int = 0) -> torch.Tensor:
    """A random undirected graph with a hub (node 0 joined to every third node) and isolated nodes."""
    g = gen(seed)
    a = torch.rand(n, n, generator=g) < p
    a[0, ::3] = True
    a[n - 3:, :] = False  # the last three nodes are isolated
    a[:, n - 3:] = False
    a = (a | a.t()).triu(1)
    ei = a.nonzero().t()
    return simple_undirected(torch.cat([ei, ei.flip(0)], 1), n)[0]


def signals(n: int, c: int, seed: int) -> torch.Tensor:
    x = torch.rand(n, c, dtype=torch.float64, generator=gen(seed))
    x[x < 0.5] = 0.0
    return x


def reference_release(layer: NoisyPPRDiffusion, ei, n, *, seed_index=None, x=None, seed: Optional[int] = None):
    """The old loop's release for this layer's settings, with the layer's own grid and a fresh seeded source."""
    if seed_index is not None:
        s0, seeds = seed_matrix(seed_index, n)
    else:
        s0, seeds = x.to(torch.float64), None
    grid = source = sampler = None
    if layer.noise_scale > 0 and layer.sampler == "safe":
        grid = layer.plan_grid(n, float(s0.max()))
        source = RandomSource("cpu", generator=gen(seed))
        sampler = RoundedNoiseSampler("two_laplace", grid.noise_scale / grid.granularity)
    generator = None if seed is None else gen(seed)
    return reference_diffuse(layer, ei, n, s0, seeds, grid, source, sampler, generator=generator)


CASES = [  # (noise_scale, sampler, personalized, eta): off, safe and float noise, both modes, clipping active
    (0.0, "safe", False, 1e-3), (0.0, "safe", True, 1e-3), (0.0, "safe", False, 1e300),
    (1e-3, "safe", False, 1e-3), (1e-3, "safe", True, 1e-3), (1e-4, "safe", True, 1e-5),
    (1e-3, "float", False, 1e-3), (1e-3, "float", True, 1e-3),
]


@pytest.mark.parametrize("noise_scale, sampler, personalized, eta", CASES)
@pytest.mark.parametrize("alpha", [0.2, 0.15])
def test_seeds_bit_for_bit_equal_to_the_old_loop(noise_scale, sampler, personalized, eta, alpha):
    n, K = 40, 25
    ei = graph(n)
    seeds = torch.tensor([0, 5, 5, 39, 12])  # a hub, a repeated seed and an isolated node
    seeded = noise_scale > 0
    layer = NoisyPPRDiffusion(alpha=alpha, num_iterations=K, eta=eta, noise_scale=noise_scale, sampler=sampler,
                              personalized=personalized, generator=gen(7) if seeded else None, cached=False)
    out = layer(edge_index=ei, seed_index=seeds, num_nodes=n)
    ref = reference_release(layer, ei, n, seed_index=seeds, seed=7 if seeded else None)
    assert out.dtype == torch.float32  # the default dtype; the loop ran in float64
    assert torch.equal(out, ref.to(torch.float32))
    with float64_default():  # the float64 result itself, before the cast to the output dtype
        layer.generator = gen(7) if seeded else None
        assert torch.equal(layer(edge_index=ei, seed_index=seeds, num_nodes=n), ref)
    if seeded:  # the noise matters: a different seed gives a different release
        layer.generator = gen(8)
        assert not torch.equal(layer(edge_index=ei, seed_index=seeds, num_nodes=n).double(), ref)


@pytest.mark.parametrize("noise_scale, sampler", [(0.0, "safe"), (1e-3, "safe"), (1e-3, "float")])
def test_signals_bit_for_bit_equal_to_the_old_loop(noise_scale, sampler):
    n, K = 40, 20
    ei = graph(n, seed=1)
    x = signals(n, 6, seed=2)
    seeded = noise_scale > 0
    layer = NoisyPPRDiffusion(num_iterations=K, eta=1e-2, noise_scale=noise_scale, sampler=sampler,
                              generator=gen(3) if seeded else None, cached=False)
    out = layer(x, ei)
    assert out.dtype == torch.float64
    assert torch.equal(out, reference_release(layer, ei, n, x=x, seed=3 if seeded else None))


def test_release_is_independent_of_other_columns_and_of_earlier_calls():
    """No state survives between calls, and without noise each column is diffused on its own: a column
    released alone equals the same column released among others (buffers reused inside one call only)."""
    n = 40
    ei = graph(n, seed=4)
    layer = NoisyPPRDiffusion(num_iterations=30, eta=1e-3, noise_scale=0.0, personalized=True, cached=False)
    with float64_default():
        many = layer(edge_index=ei, seed_index=[0, 5, 17, 38], num_nodes=n)
        again = layer(edge_index=ei, seed_index=[0, 5, 17, 38], num_nodes=n)
        alone = layer(edge_index=ei, seed_index=[17], num_nodes=n)
    assert torch.equal(many, again)
    assert torch.equal(many[:, 2:3], alone)


def test_one_event_before_the_first_draw_and_reproducible_from_a_seed(monkeypatch):
    """The fused loop still charges once, before the sampler's first call, and draws K times N C samples
    (one grid release of the N x C iterate per step)."""
    acct = PrivacyAccountant()
    n, K, seeds = 40, 12, [1, 2, 3]
    ei = graph(n, seed=5)
    calls = []
    original, original_grid = RoundedNoiseSampler.sample, RoundedNoiseSampler.add_to_grid_

    def spy(self, count, source, out=None):
        calls.append((count, len(acct)))
        return original(self, count, source, out=out)

    def spy_grid(self, values, granularity, source, *, on_scale=False):
        calls.append((values.numel(), len(acct)))
        with monkeypatch.context() as m:  # its own draws are this call's, not counted again
            m.setattr(RoundedNoiseSampler, "sample", original)
            return original_grid(self, values, granularity, source, on_scale=on_scale)

    monkeypatch.setattr(RoundedNoiseSampler, "sample", spy)
    monkeypatch.setattr(RoundedNoiseSampler, "add_to_grid_", spy_grid)
    kw = dict(noise_scale=1e-3, eta=1e-3, num_iterations=K, personalized=True, cached=False)
    a = NoisyPPRDiffusion(accountant=acct, generator=gen(11), **kw)(edge_index=ei, seed_index=seeds, num_nodes=n)
    assert calls == [(n * len(seeds), 1)] * K and len(acct) == 1
    b = NoisyPPRDiffusion(generator=gen(11), **kw)(edge_index=ei, seed_index=seeds, num_nodes=n)
    assert torch.equal(a, b)
