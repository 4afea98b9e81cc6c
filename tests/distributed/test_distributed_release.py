"""Row-partitioned releases across two gloo processes against the single-process layers: equal
without noise, one charge on rank 0 (the single-process event), refusals and bad input raised on
every process before any charge, and the noise's grid, std and independence across processes."""
from __future__ import annotations

import math

import pytest
import torch

from distributed_scenarios import (CONTRACTIVE_CONFIGS, GAP_RANGES, HALO_CASES, N_NOISE, N_SMALL, halo_graph,
                                   noise_graph, results_of, small_graph)
from pyg_private import PrivacyAccountant
from pyg_private.nn import ContractiveGraphLayer, GAPAggregation


def _assemble(parts: list[torch.Tensor], ranges: list[tuple[int, int]], n: int) -> torch.Tensor:
    out = torch.full((n, parts[0].size(1)), float("nan"), dtype=parts[0].dtype)
    for part, (s, e) in zip(parts, ranges):
        assert part.shape[0] == e - s
        out[s:e] = part
    return out


# ---------------------------------------------------------------- noise off: the single-process output
@pytest.mark.parametrize("config", CONTRACTIVE_CONFIGS, ids=[c[0] for c in CONTRACTIVE_CONFIGS])
def test_contractive_without_noise_equals_single_process(ranks, config):
    name, kwargs, dtype, ranges, _, with_x0 = config
    ei, x = small_graph()
    x0 = (x.flip(0) * 0.5).to(dtype) if with_x0 else None
    reference = ContractiveGraphLayer(**kwargs, noise_multiplier=0.0)(x.to(dtype), ei, x0)
    parts = [r[name] for r in results_of(ranks, "contractive_equal")]
    assert all(p.dtype == dtype for p in parts)
    out = _assemble(parts, ranges, N_SMALL)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out, reference, rtol=0.0, atol=tol)


def test_contractive_symmetrize_equals_single_process(ranks):
    ei, x = small_graph()
    directed = ei[:, ei[0] < ei[1]]
    reference = ContractiveGraphLayer(2, 0.9, min_degree=0, noise_multiplier=0.0, symmetrize=True)(x, directed)
    parts = [r["symmetrize"] for r in results_of(ranks, "contractive_equal")]
    torch.testing.assert_close(_assemble(parts, [(0, 200), (200, N_SMALL)], N_SMALL), reference, rtol=0.0,
                               atol=1e-12)


@pytest.mark.parametrize("name,ranges", list(GAP_RANGES.items()))
def test_gap_without_noise_equals_single_process(ranks, name, ranges):
    ei, x = small_graph()
    reference = GAPAggregation(2, noise_multiplier=0.0)(x.float(), ei)
    parts = [r[name] for r in results_of(ranks, "gap_equal")]
    assert parts[1].shape == (ranges[1][1] - ranges[1][0], 3 * x.size(1))
    torch.testing.assert_close(_assemble(parts, ranges, N_SMALL), reference, rtol=0.0, atol=1e-6)


# ---------------------------------------------------------------- halo exchange
@pytest.mark.parametrize("name,exchange,kind", HALO_CASES, ids=[c[0] for c in HALO_CASES])
def test_halo_exchange_equals_single_process(ranks, name, exchange, kind):
    """Each exchange gives the single-process output: GAP exactly (the same sums in the same order),
    CGL to float rounding (its mean term is all-reduced in float64 under the halo)."""
    _, x = small_graph()
    ei = halo_graph(kind)
    ranges = [(0, 140), (140, N_SMALL)]
    results = results_of(ranks, "halo")
    for alpha1 in (0.0, 0.7, 1.0):
        reference = ContractiveGraphLayer(3, 0.9, alpha1, 0.2, min_degree=0, noise_multiplier=0.0)(x.float(), ei)
        out = _assemble([r[(name, "cgl", alpha1)] for r in results], ranges, N_SMALL)
        torch.testing.assert_close(out, reference, rtol=0.0, atol=1e-6)
    gap = _assemble([r[(name, "gap")] for r in results], ranges, N_SMALL)
    assert torch.equal(gap, GAPAggregation(2, noise_multiplier=0.0)(x.float(), ei))
    assert f"exchange={exchange!r}" in results[0][(name, "repr")]


def test_halo_and_gather_agree_bit_for_bit_without_the_mean(ranks):
    results = results_of(ranks, "halo")
    for r in results:
        assert torch.equal(r[("halo_band", "cgl", 1.0)], r[("gather_band", "cgl", 1.0)])
        assert torch.equal(r[("halo_band", "gap")], r[("gather_band", "gap")])


def test_disagreeing_exchange_is_refused_on_every_process(ranks):
    for r in results_of(ranks, "halo"):
        status, kind, message = r["disagree"]
        assert status == "raised" and kind == "ValueError" and "exchange" in message


def test_bad_exchange_setting_raises():
    from pyg_private.distributed import DistributedGAPAggregation

    with pytest.raises(ValueError, match="exchange"):
        DistributedGAPAggregation(GAPAggregation(2, noise_multiplier=1.0), exchange="halos")


# ---------------------------------------------------------------- one accountant, one charge
def test_one_charge_on_rank_zero_equals_the_single_process_ledger(ranks):
    ei, x = small_graph()
    acct = PrivacyAccountant(budget={"edge": (10.0, 1e-5)})
    contractive = ContractiveGraphLayer(3, 0.9, 0.7, min_degree=0, epsilon=1.0, delta=1e-5, accountant=acct)
    gap = GAPAggregation(2, noise_multiplier=3.0, accountant=acct)
    contractive(x, ei)
    gap(x, ei)
    rank0, rank1 = results_of(ranks, "charge")
    assert rank1["state"] is None  # no accountant anywhere but rank 0
    assert len(rank0["state"]["events"]) == 2
    assert rank0["state"] == acct.state_dict()  # the same events (grid included), in the same order
    for seen in (rank0, rank1):  # the single-process grid: planned from public N, F and bounds only
        assert seen["granularity"] == contractive.granularity
        assert seen["gap_granularity"] == gap.granularity


def test_refusal_reaches_every_process_and_releases_nothing(ranks):
    rank0, rank1 = results_of(ranks, "refusal")
    for seen in (rank0, rank1):
        assert seen["over_budget"][:2] == ("raised", "PrivacyBudgetExceeded")
        assert seen["first"] == ("ok",)
        assert seen["second"][:2] == ("raised", "PrivacyBudgetExceeded")
    assert "rank 0" in rank1["over_budget"][2]  # the other processes are told where it was refused
    assert rank0["events_after_refusal"] == 0
    assert rank0["events_after_second"] == 1


# ---------------------------------------------------------------- bad input: every process, before any charge
BAD_INPUTS = {
    "overlap": ("ValueError", "more than one process"),
    "hole": ("ValueError", "belong to no process"),
    "settings": ("ValueError", "noise_multiplier"),
    "num_nodes": ("ValueError", "disagree on the node count"),
    "nan_on_one_rank": ("ValueError", "rank 1 of 2: `x` contains NaN"),
    "directed_across": ("ValueError", "directed across the processes"),
    "accountant_on_rank_1": ("ValueError", "accountant on a process other than the group's rank 0"),
    "min_degree": ("ValueError", "violates the declared `min_degree`"),
    "rows_outside_block": ("ValueError", "rows outside this process's `row_range`"),
    "rows_mismatch": ("ValueError", "rank 1 of 2: `row_range`=(150, 300) holds 150 nodes but the local `x` has 149"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_on_every_process(ranks, case):
    kind, text = BAD_INPUTS[case]
    outcomes = [seen[case] for seen in results_of(ranks, "bad_inputs")]
    for rank, outcome in enumerate(outcomes):
        assert outcome[0] == "raised", f"rank {rank} did not raise"
        assert outcome[1] == kind, outcome
        assert text in outcome[2], outcome[2]


def test_bad_input_charges_nothing_and_keeps_the_processes_in_step(ranks):
    rank0, rank1 = results_of(ranks, "bad_inputs")
    assert rank0["events_after_errors"] == 0
    assert rank0["valid_after_errors"] == rank1["valid_after_errors"] == ("ok",)
    assert rank0["events_after_valid"] == 1


# ---------------------------------------------------------------- with noise: grid, std, independence
def _noise_reference() -> tuple[torch.Tensor, float, float]:
    """The noise-free output, and the single-process layer's granularity and noise std."""
    ei, x = noise_graph()
    clean = ContractiveGraphLayer(1, 0.5, min_degree=0, noise_multiplier=0.0)(x, ei)
    acct = PrivacyAccountant()
    noisy = ContractiveGraphLayer(1, 0.5, min_degree=0, noise_multiplier=0.03, accountant=acct)
    noisy(x, ei)
    std = noisy.noise_multiplier * acct.events[0].params["grid_sensitivity"]
    return clean, noisy.granularity, std


@pytest.mark.parametrize("stream", ["secure", "default", "seeded", "float"])
def test_contractive_noise_is_on_the_grid_with_the_calibrated_std(ranks, stream):
    clean, granularity, std = _noise_reference()
    if stream == "float":  # the floating-point sampler: no grid, std sigma * Delta
        granularity, std = None, 0.03 * ContractiveGraphLayer(1, 0.5, min_degree=0, noise_multiplier=0.03).sensitivity
    half = N_NOISE // 2
    noises = []
    for rank, seen in enumerate(results_of(ranks, "noise")):
        assert seen[stream + "_granularity"] == granularity
        out = seen[stream]
        assert bool((out.norm(dim=1) < 0.99).all())  # inside the ball: the projection did not act
        if granularity is not None:
            steps = out / granularity
            assert torch.equal(steps, steps.round())  # every released value on the single-process grid
        noise = out - clean[rank * half:(rank + 1) * half]
        m = noise.numel()
        assert abs(noise.std().item() / std - 1.0) < 0.05  # SE of the ratio ~ 1/sqrt(2m) = 0.8%
        assert abs(noise.mean().item()) < 5 * std / math.sqrt(m)
        noises.append(noise.flatten())
    # every process has its own stream: the two blocks' noises are uncorrelated (SE 1/sqrt(m) = 1.1%)
    corr = torch.corrcoef(torch.stack(noises))[0, 1].item()
    assert abs(corr) < 0.06


def test_seeded_streams_are_reproducible_and_distinct_per_process(ranks):
    """Every process seeds its layer's generator alike; each still draws its own stream."""
    clean, _, std = _noise_reference()
    half = N_NOISE // 2
    seen = results_of(ranks, "noise")
    for rank in range(2):
        assert torch.equal(seen[rank]["seeded"], seen[rank]["seeded_again"])
        assert not torch.equal(seen[rank]["seeded"], seen[rank]["default"])
    noise = [seen[r]["seeded"] - clean[r * half:(r + 1) * half] for r in range(2)]
    assert (noise[0] - noise[1]).abs().max() > std  # not the same draws on both blocks


def test_gap_noise_matches_the_single_process_distribution(ranks):
    """GAP renormalises every noisy hop, so compare the mean squared distance of the released hop to
    the noise-free one with a single-process release: a wrong std moves it by a factor ~4 per 2x."""
    ei, x = noise_graph()
    f = x.size(1)
    clean = GAPAggregation(1, noise_multiplier=0.0)(x, ei)[:, f:]
    single = GAPAggregation(1, noise_multiplier=0.3)
    reference = ((single(x, ei)[:, f:] - clean) ** 2).sum(dim=1).mean().item()
    seen = results_of(ranks, "noise")
    assert seen[0]["gap_granularity"] == seen[1]["gap_granularity"] == single.granularity
    out = torch.cat([s["gap"][:, f:] for s in seen])
    distributed = ((out - clean) ** 2).sum(dim=1).mean().item()
    assert abs(distributed / reference - 1.0) < 0.1, (distributed, reference)


def test_release_on_root_is_one_release_per_job(ranks):
    rank0, rank1 = results_of(ranks, "root_release")
    assert torch.equal(rank0["first"], rank1["first"])  # the one release, on every rank
    assert rank0["first"].shape == (300, 16)
    assert rank0["events"] == 1 and rank1["events"] is None  # charged once, on rank 0
    for seen in (rank0, rank1):  # over the budget: refused on both ranks, nothing sent
        assert seen["second"][:2] == ("raised", "PrivacyBudgetExceeded")
        assert seen["wrong_like"][:2] == ("raised", "ValueError") and "like" in seen["wrong_like"][2]
