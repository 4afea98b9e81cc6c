"""The noisy PPR diffusion and the APPR propagation across two gloo processes against the
single-process layer and function: equal without noise, the single-process grid and noise std with
noise, one charge on rank 0 (the single-process event), refusals and bad input raised on every
process before any charge."""
from __future__ import annotations

import math

import pytest
import torch

from distributed_scenarios import N_NOISE, N_SMALL, noise_graph, results_of, small_graph
from ppr_scenarios import (APPR_CONFIGS, ETA_NOISE, K_NOISE, NOISE_SCALE, PPR_CONFIGS, PPR_HALO_CASES, SEEDS,
                           appr_graph, charge_layers, noise_signals, signals)
from pyg_private import PrivacyAccountant
from pyg_private.distributed import DistributedNoisyPPRDiffusion, distributed_appr_propagate
from pyg_private.nn import GAPAggregation, NoisyPPRDiffusion
from pyg_private.utils import appr_propagate


def _assemble(parts: list[torch.Tensor], ranges: list[tuple[int, int]], n: int) -> torch.Tensor:
    out = torch.full((n, parts[0].size(1)), float("nan"), dtype=parts[0].dtype)
    for part, (s, e) in zip(parts, ranges):
        assert part.shape[0] == e - s
        out[s:e] = part
    return out


def _tolerance(reference: torch.Tensor) -> float:
    """A few units of roundoff of the largest entry (float64: ~1e-15 relative)."""
    return 8 * torch.finfo(reference.dtype).eps * max(float(reference.abs().max()), 1e-300)


# ---------------------------------------------------------------- noise off: the single-process output
@pytest.mark.parametrize("config", PPR_CONFIGS, ids=[c[0] for c in PPR_CONFIGS])
def test_ppr_without_noise_equals_single_process(ranks, config):
    name, kwargs, kind, ranges = config
    ei, _ = small_graph()
    layer = NoisyPPRDiffusion(**kwargs, noise_scale=0.0)
    if kind == "seeds":
        reference = layer(edge_index=ei, seed_index=torch.tensor(SEEDS), num_nodes=N_SMALL)
    elif kind == "signal_1d":
        reference = layer(signals(N_SMALL, 4, seed=5)[:, 1], ei)
    else:
        reference = layer(signals(N_SMALL, 4, seed=5), ei)
    parts = [r[name] for r in results_of(ranks, "ppr_equal")]
    assert all(p.dtype == reference.dtype for p in parts)
    torch.testing.assert_close(_assemble(parts, ranges, N_SMALL), reference, rtol=0.0, atol=_tolerance(reference))


@pytest.mark.parametrize("name,exchange", PPR_HALO_CASES)
def test_ppr_halo_exchange_equals_single_process(ranks, name, exchange):
    """On a band graph (halos of a few rows) every exchange gives the single-process output, and the
    halo's sums are the all-gather's bit for bit."""
    from distributed_scenarios import band_graph

    ei = band_graph(N_SMALL, 3)
    layer = NoisyPPRDiffusion(alpha=0.2, num_iterations=8, eta=1e-2, noise_scale=0.0, column_block=3,
                              cached=False)
    references = {"signals": layer(signals(N_SMALL, 4, seed=5), ei),
                  "seeds": layer(edge_index=ei, seed_index=torch.tensor(SEEDS), num_nodes=N_SMALL)}
    results = results_of(ranks, "ppr_halo")
    for kind, reference in references.items():
        out = _assemble([r[(name, kind)] for r in results], [(0, 140), (140, N_SMALL)], N_SMALL)
        torch.testing.assert_close(out, reference, rtol=0.0, atol=_tolerance(reference))
        for r in results:
            assert torch.equal(r[(name, kind)], r[("all_gather", kind)])
    assert f"exchange={exchange!r}" in results[0][(name, "repr")]


@pytest.mark.parametrize("name,exchange", PPR_HALO_CASES)
def test_appr_halo_exchange_equals_single_process(ranks, name, exchange):
    """The APPR propagation (fixed steps, and to convergence with its stall checks) with each
    exchange: the single-process rows, and the halo's bit for bit the all-gather's."""
    from distributed_scenarios import band_graph

    ei = band_graph(N_SMALL, 3)
    _, x = small_graph()
    results = results_of(ranks, "appr_halo")
    for steps in (10, math.inf):
        for r in (0.0, 0.5):
            reference = appr_propagate(x.float(), ei, num_nodes=N_SMALL, alpha=0.2, steps=steps, r=r)
            out = _assemble([res[(name, steps, r)] for res in results], [(0, 140), (140, N_SMALL)], N_SMALL)
            torch.testing.assert_close(out, reference, rtol=0.0, atol=_tolerance(reference))
            for res in results:
                assert torch.equal(res[(name, steps, r)], res[("all_gather", steps, r)])


@pytest.mark.parametrize("config", APPR_CONFIGS, ids=[c[0] for c in APPR_CONFIGS])
def test_appr_equals_single_process(ranks, config):
    name, kwargs, dtype, ranges, _, kind = config
    _, x = small_graph()
    reference = appr_propagate(x.to(dtype), appr_graph(kind), num_nodes=N_SMALL, **kwargs)
    parts = [r[name] for r in results_of(ranks, "appr_equal")]
    assert all(p.dtype == dtype for p in parts)
    torch.testing.assert_close(_assemble(parts, ranges, N_SMALL), reference, rtol=0.0, atol=_tolerance(reference))


# ---------------------------------------------------------------- with noise: grid, std, independence
def _ppr_noise_reference(stream: str) -> tuple[torch.Tensor, float | None, float]:
    """The noise-free K-step output, the single-process granularity and per-entry noise std."""
    ei, _ = noise_graph()
    x = noise_signals()
    clean = NoisyPPRDiffusion(0.2, K_NOISE, ETA_NOISE, noise_scale=0.0)(x, ei)
    if stream == "float":  # Lap + Lap of scale sigma: std 2 sigma
        return clean, None, 2 * NOISE_SCALE
    single = NoisyPPRDiffusion(0.2, K_NOISE, ETA_NOISE, noise_scale=NOISE_SCALE)
    single(x, ei)
    grid = single.plan_grid(N_NOISE, float(x.max()))
    assert grid.granularity == single.granularity
    return clean, single.granularity, 2 * grid.noise_scale  # + the rounding to g, ~1e-9 of it


@pytest.mark.parametrize("stream", ["secure", "default", "seeded", "float"])
def test_ppr_noise_is_on_the_grid_with_the_calibrated_std(ranks, stream):
    clean, granularity, std = _ppr_noise_reference(stream)
    half = N_NOISE // 2
    noises = []
    for rank, seen in enumerate(results_of(ranks, "ppr_noise")):
        assert seen[stream + "_granularity"] == granularity
        out = seen[stream]
        assert out.dtype == torch.float64 and out.shape == (half, 8)
        if granularity is not None:
            steps = out / granularity
            assert torch.equal(steps, steps.round())  # every released value on the single-process grid
        noise = out - clean[rank * half:(rank + 1) * half]
        m = noise.numel()
        # K = 1: the release is phi(s) + noise; SE of the std ratio ~ sqrt(3.5 / (4 m)) = 1.05% (kurtosis 4.5)
        assert abs(noise.std().item() / std - 1.0) < 0.05
        assert abs(noise.mean().item()) < 5 * std / math.sqrt(m)
        noises.append(noise.flatten())
    corr = torch.corrcoef(torch.stack(noises))[0, 1].item()  # each process its own stream (SE 1.1%)
    assert abs(corr) < 0.06


def test_ppr_noise_over_several_steps_stays_on_the_grid(ranks):
    ei, _ = noise_graph()
    single = NoisyPPRDiffusion(0.2, 3, ETA_NOISE, noise_scale=NOISE_SCALE)
    single(noise_signals(), ei)
    for seen in results_of(ranks, "ppr_noise"):
        assert seen["three_steps_granularity"] == single.granularity
        steps = seen["three_steps"] / single.granularity
        assert torch.equal(steps, steps.round())


@pytest.mark.parametrize("sampler", ["safe", "float"])
def test_ppr_noise_with_an_empty_block(ranks, sampler):
    rank0, rank1 = (seen["empty_block_" + sampler] for seen in results_of(ranks, "ppr_noise"))
    assert rank0.shape == (N_SMALL, len(SEEDS)) and rank1.shape == (0, len(SEEDS))
    assert bool(torch.isfinite(rank0).all())
    assert bool((rank0.double().abs().sum(dim=0) <= 1.0 + 1e-6).all())  # projected onto the l1 ball


def test_ppr_seeded_streams_are_reproducible_and_distinct_per_process(ranks):
    clean, _, std = _ppr_noise_reference("seeded")
    half = N_NOISE // 2
    seen = results_of(ranks, "ppr_noise")
    for rank in range(2):
        assert torch.equal(seen[rank]["seeded"], seen[rank]["seeded_again"])
        assert not torch.equal(seen[rank]["seeded"], seen[rank]["default"])
    noise = [seen[r]["seeded"] - clean[r * half:(r + 1) * half] for r in range(2)]
    assert (noise[0] - noise[1]).abs().max() > std


# ---------------------------------------------------------------- one accountant, one charge
def test_ppr_one_charge_on_rank_zero_equals_the_single_process_ledger(ranks):
    ei, _ = small_graph()
    acct = PrivacyAccountant(budget={"edge": (100.0, 1e-5)})
    personalized, plain = charge_layers(acct)
    personalized(edge_index=ei, seed_index=torch.tensor(SEEDS), num_nodes=N_SMALL)
    plain(signals(N_SMALL, 4, seed=5), ei)
    rank0, rank1 = results_of(ranks, "ppr_charge")
    assert rank1["state"] is None
    assert len(rank0["state"]["events"]) == 2
    assert acct.events[0].params["columns"] == 2  # per recipient: seed 150 receives two columns
    assert rank0["state"] == acct.state_dict()  # the same events (grid included), in the same order
    for seen in (rank0, rank1):
        assert seen["granularity"] == personalized.granularity
        assert seen["plain_granularity"] == plain.granularity


def test_ppr_refusal_reaches_every_process_and_releases_nothing(ranks):
    rank0, rank1 = results_of(ranks, "ppr_refusal")
    for seen in (rank0, rank1):
        assert seen["over_budget"][:2] == ("raised", "PrivacyBudgetExceeded")
        assert seen["first"] == ("ok",)
        assert seen["second"][:2] == ("raised", "PrivacyBudgetExceeded")
    assert "rank 0" in rank1["over_budget"][2]
    assert rank0["events_after_refusal"] == 0
    assert rank0["events_after_second"] == 1


# ---------------------------------------------------------------- bad input: every process, before any charge
PPR_BAD_INPUTS = {
    "overlap": ("ValueError", "more than one process"),
    "hole": ("ValueError", "belong to no process"),
    "settings": ("ValueError", "privacy settings of the layer (noise_scale: 0.01 on rank 0, 0.02 on rank 1)"),
    "num_nodes": ("ValueError", "disagree on the node count"),
    "seeds": ("ValueError", "disagree on the public `seed_index`"),
    "mode": ("ValueError", "disagree on whether the signals `x` or the seeds `seed_index` are given"),
    "negative_signal_on_one_rank": ("ValueError", "rank 1 of 2: `x` must be finite and non-negative"),
    "seed_out_of_range": ("ValueError", "on every process: `seed_index` must lie in [0, 300)"),
    "accountant_on_rank_1": ("ValueError", "accountant on a process other than the group's rank 0"),
    "not_a_tensor_on_one_rank": ("TypeError", "rank 1 of 2: `x` must be a dense Tensor"),
}


@pytest.mark.parametrize("case", sorted(PPR_BAD_INPUTS))
def test_ppr_bad_input_raises_on_every_process(ranks, case):
    kind, text = PPR_BAD_INPUTS[case]
    for rank, seen in enumerate(results_of(ranks, "ppr_bad_inputs")):
        outcome = seen[case]
        assert outcome[0] == "raised", f"rank {rank} did not raise"
        assert outcome[1] == kind, outcome
        assert text in outcome[2], outcome[2]


def test_ppr_bad_input_charges_nothing_and_keeps_the_processes_in_step(ranks):
    rank0, rank1 = results_of(ranks, "ppr_bad_inputs")
    assert rank0["events_after_errors"] == 0
    assert rank0["valid_after_errors"] == rank1["valid_after_errors"] == ("ok",)
    assert rank0["events_after_valid"] == 1


APPR_BAD_INPUTS = {
    "overlap": ("ValueError", "more than one process"),
    "alpha": ("ValueError", "settings of the propagation (alpha: 0.1 on rank 0, 0.2 on rank 1)"),
    "num_nodes": ("ValueError", "disagree on the node count"),
    "nan_on_one_rank": ("ValueError", "rank 1 of 2: `x` contains NaN"),
    "max_iter": ("RuntimeError", "did not converge in max_iter=3"),
}


@pytest.mark.parametrize("case", sorted(APPR_BAD_INPUTS))
def test_appr_bad_input_raises_on_every_process(ranks, case):
    kind, text = APPR_BAD_INPUTS[case]
    results = results_of(ranks, "appr_bad_inputs")
    for rank, seen in enumerate(results):
        outcome = seen[case]
        assert outcome[0] == "raised", f"rank {rank} did not raise"
        assert outcome[1] == kind, outcome
        assert text in outcome[2], outcome[2]
    assert all(seen["valid_after_errors"] == ("ok",) for seen in results)


# ---------------------------------------------------------------- no second process needed
def test_uninitialised_process_group_raises_before_anything():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # pragma: no cover - a test runner with a group
        pytest.skip("a process group is initialised in this process")
    ei = torch.tensor([[0, 1], [1, 0]])
    acct = PrivacyAccountant()
    layer = DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(0.2, 2, 1e-3, noise_scale=1e-2, accountant=acct))
    with pytest.raises(RuntimeError, match="process group is not initialised"):
        layer(edge_index=ei, seed_index=torch.tensor([0]), row_range=(0, 2), num_nodes=2)
    assert len(acct) == 0
    with pytest.raises(RuntimeError, match="process group is not initialised"):
        distributed_appr_propagate(torch.zeros(2, 3), ei, row_range=(0, 2), num_nodes=2, alpha=0.1, steps=2)


def test_ppr_wrapper_takes_a_noisy_ppr_layer_and_shows_it():
    with pytest.raises(TypeError, match="wraps a configured NoisyPPRDiffusion; got GAPAggregation"):
        DistributedNoisyPPRDiffusion(GAPAggregation(2, noise_multiplier=1.0))
    assert repr(DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(noise_scale=0.0))).startswith(
        "DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(alpha=0.2")
