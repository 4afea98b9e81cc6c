"""NoisyPPRDiffusion with ``column_block``: the same release diffused a block of columns at a time
(equal to the whole release without noise, one charge equal to the whole release's, on the same
grid with the calibrated noise), written into ``out``; bad settings refused before any charge."""
from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from pyg_private import PrivacyAccountant
from pyg_private.nn import NoisyPPRDiffusion

N = 60


def _graph(seed=0):
    torch.manual_seed(seed)
    return to_undirected(erdos_renyi_graph(N, 0.1), num_nodes=N)


@pytest.mark.parametrize("projection", [None, "l1_ball"])
def test_blocks_equal_the_whole_release_without_noise(projection):
    ei = _graph()
    seeds = torch.tensor([0, 5, 5, 17, 59, 3, 8])
    whole = NoisyPPRDiffusion(0.2, 30, 1e-3, noise_scale=0.0, output_projection=projection)(
        edge_index=ei, seed_index=seeds, num_nodes=N)
    blocks = NoisyPPRDiffusion(0.2, 30, 1e-3, noise_scale=0.0, output_projection=projection, cached=False,
                               column_block=3)(edge_index=ei, seed_index=seeds, num_nodes=N)
    assert torch.equal(blocks, whole)
    x = torch.rand(N, 5, dtype=torch.float64)
    whole = NoisyPPRDiffusion(0.2, 30, 1e-3, noise_scale=0.0)(x, ei)
    out = torch.full((N, 5), math.nan, dtype=torch.float64)
    got = NoisyPPRDiffusion(0.2, 30, 1e-3, noise_scale=0.0, cached=False, column_block=2)(x, ei, out=out)
    assert got is out and torch.equal(out, whole)


@pytest.mark.parametrize("personalized", [False, True])
def test_one_charge_same_event_grid_and_noise(personalized):
    ei = _graph(1)
    seeds = torch.tensor([1, 2, 2, 9, 30, 31, 40, 41])
    kwargs = dict(alpha=0.2, num_iterations=5, eta=1e-2, epsilon=1.0, delta=1e-4, personalized=personalized)
    a, b = PrivacyAccountant(), PrivacyAccountant()
    whole = NoisyPPRDiffusion(**kwargs, accountant=a, generator=torch.Generator().manual_seed(0))
    whole(edge_index=ei, seed_index=seeds, num_nodes=N)
    layer = NoisyPPRDiffusion(**kwargs, accountant=b, cached=False, column_block=3,
                              generator=torch.Generator().manual_seed(0))
    out = layer(edge_index=ei, seed_index=seeds, num_nodes=N)
    assert len(a) == len(b) == 1
    assert a.epsilon("edge", 1e-4) == b.epsilon("edge", 1e-4)
    assert layer.granularity == whole.granularity
    assert bool(((out / layer.granularity).round() == out / layer.granularity).all())
    assert out.dtype == torch.get_default_dtype() and out.shape == (N, seeds.numel())


def test_noise_std_per_entry():
    """On a graph without edges the clip zeroes every iterate (``eta d_i = 0``), so a zero signal's
    release is the last step's noise alone: compare the blocks' per-entry std with the whole release's."""
    ei = torch.empty(2, 0, dtype=torch.long)
    x = torch.zeros(400, 64, dtype=torch.float64)
    kwargs = dict(alpha=0.5, num_iterations=3, eta=1.0, noise_scale=0.1, cached=False, accountant=PrivacyAccountant())
    whole = NoisyPPRDiffusion(**kwargs)(x, ei)
    blocks = NoisyPPRDiffusion(**kwargs, column_block=7)(x, ei)
    ratio = float(blocks.std() / whole.std())
    assert abs(ratio - 1) < 0.03  # 25,600 entries each: std of the ratio about 0.6%


def test_bad_settings_refused_before_any_charge():
    with pytest.raises(ValueError, match="cached=False"):
        NoisyPPRDiffusion(0.2, 5, 1e-2, noise_scale=0.1, column_block=4)
    with pytest.raises(ValueError, match="column_block"):
        NoisyPPRDiffusion(0.2, 5, 1e-2, noise_scale=0.1, cached=False, column_block=0)
    acct = PrivacyAccountant()
    layer = NoisyPPRDiffusion(0.2, 5, 1e-2, noise_scale=0.1, cached=False, column_block=4, accountant=acct)
    ei = _graph()
    with pytest.raises(ValueError, match="shape"):
        layer(edge_index=ei, seed_index=torch.tensor([0, 1]), num_nodes=N, out=torch.empty(N, 3))
    with pytest.raises(ValueError, match="lie in"):
        layer(edge_index=ei, seed_index=torch.tensor([0, N]), num_nodes=N)
    with pytest.raises(ValueError, match="non-negative"):
        layer(-torch.ones(N, 2), ei)
    with pytest.raises(ValueError, match="column_block"):
        NoisyPPRDiffusion(0.2, 5, 1e-2, noise_scale=0.1)(edge_index=ei, seed_index=torch.tensor([0]), num_nodes=N,
                                                         out=torch.empty(N, 1))
    assert len(acct) == 0
    assert "column_block=4" in repr(layer)
