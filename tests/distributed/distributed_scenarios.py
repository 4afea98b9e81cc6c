"""What the two spawned processes of tests/distributed run: every scenario once, in one process group
(one spawn for the whole directory keeps it fast), each rank saving what it saw for the tests to check.

A scenario that raises is recorded as ``{"raised": (type name, message)}`` and the next one runs in
the same group, so the error scenarios also check that a refused call leaves the processes in step.
"""
from __future__ import annotations

import os
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch

WORLD = 2
N_SMALL, F_SMALL = 300, 8
N_NOISE, F_NOISE = 2000, 8


def random_graph(n: int, p: float, seed: int) -> torch.Tensor:
    """An undirected simple Erdos-Renyi graph (coalesced ``edge_index``, both directions)."""
    g = torch.Generator().manual_seed(seed)
    upper = torch.triu(torch.rand(n, n, generator=g) < p, diagonal=1)
    return (upper | upper.T).nonzero().T.contiguous()


def features(n: int, f: int, seed: int, norm: float | None = None) -> torch.Tensor:
    x = torch.randn(n, f, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if norm is not None:
        x = x / x.norm(dim=1, keepdim=True) * norm
    return x


def small_graph() -> tuple[torch.Tensor, torch.Tensor]:
    return random_graph(N_SMALL, 0.04, seed=1), features(N_SMALL, F_SMALL, seed=2)


def noise_graph() -> tuple[torch.Tensor, torch.Tensor]:
    return random_graph(N_NOISE, 0.005, seed=3), features(N_NOISE, F_NOISE, seed=4, norm=0.2)


#: (name, ContractiveGraphLayer arguments, dtype, ranges of rank 0 and 1, graph form, with x0)
CONTRACTIVE_CONFIGS = [
    ("swapped_blocks_float32", dict(K=3, contraction=0.9, alpha1=0.7, beta=0.2, min_degree=0),
     torch.float32, [(120, N_SMALL), (0, 120)], "edge_index", False),
    ("degree_floor_sparse_block", dict(K=2, contraction=0.8, alpha1=1.0, min_degree=4, degree_floor=True),
     torch.float64, [(0, 150), (150, N_SMALL)], "sparse", False),
    ("node_level_x0", dict(K=2, contraction=0.8, alpha1=0.9, beta=0.1, level="node", min_degree=0,
                           max_degree=N_SMALL, num_nodes=N_SMALL),
     torch.float64, [(0, 77), (77, N_SMALL)], "edge_index", True),
]


def _block_graph(ei: torch.Tensor, block: tuple[int, int], n: int, form: str) -> Any:
    from pyg_private.distributed import row_block

    local = row_block(ei, block)
    if form == "edge_index":
        return local
    rows = local[0] - block[0]
    values = torch.ones(local.size(1))
    return torch.sparse_coo_tensor(torch.stack([rows, local[1]]), values, (block[1] - block[0], n)).to_sparse_csr()


def scenario_contractive_equal(rank: int) -> dict:
    from pyg_private.distributed import DistributedContractiveGraphLayer
    from pyg_private.nn import ContractiveGraphLayer

    ei, x = small_graph()
    out = {}
    for name, kwargs, dtype, ranges, form, with_x0 in CONTRACTIVE_CONFIGS:
        s, e = ranges[rank]
        layer = DistributedContractiveGraphLayer(ContractiveGraphLayer(**kwargs, noise_multiplier=0.0))
        x0 = (x.flip(0) * 0.5).to(dtype)[s:e] if with_x0 else None
        out[name] = layer(x.to(dtype)[s:e], _block_graph(ei, (s, e), N_SMALL, form), x0, row_range=(s, e),
                          num_nodes=N_SMALL)
    # symmetrize=True on a directed input (each undirected edge once, as (min, max))
    directed = ei[:, ei[0] < ei[1]]
    s, e = (0, 200) if rank == 0 else (200, N_SMALL)
    layer = DistributedContractiveGraphLayer(ContractiveGraphLayer(2, 0.9, min_degree=0, noise_multiplier=0.0,
                                                                   symmetrize=True))
    out["symmetrize"] = layer(x[s:e], directed[:, (directed[0] >= s) & (directed[0] < e)], row_range=(s, e),
                              num_nodes=N_SMALL)
    return out


#: row blocks of the GAP equality test: equal (the gather buffer as it is), the last block short or
#: empty (a prefix view of it), the first block short (rows picked from the padded buffer)
GAP_RANGES = {"even": [(0, 150), (150, N_SMALL)], "empty_block": [(0, N_SMALL), (N_SMALL, N_SMALL)],
              "last_short": [(0, 160), (160, N_SMALL)], "first_short": [(0, 77), (77, N_SMALL)]}


def scenario_gap_equal(rank: int) -> dict:
    from pyg_private.distributed import DistributedGAPAggregation, row_block
    from pyg_private.nn import GAPAggregation

    ei, x = small_graph()
    out = {}
    for name, ranges in GAP_RANGES.items():
        s, e = ranges[rank]
        layer = DistributedGAPAggregation(GAPAggregation(2, noise_multiplier=0.0))
        out[name] = layer(x[s:e].float(), row_block(ei, (s, e)), row_range=(s, e), num_nodes=N_SMALL)
    return out


def _accountant(rank: int, budget: float):
    from pyg_private import PrivacyAccountant

    return PrivacyAccountant(budget={"edge": (budget, 1e-5)}) if rank == 0 else None


def scenario_charge(rank: int) -> dict:
    from pyg_private.distributed import DistributedContractiveGraphLayer, DistributedGAPAggregation, row_block
    from pyg_private.nn import ContractiveGraphLayer, GAPAggregation

    ei, x = small_graph()
    s, e = [(0, 150), (150, N_SMALL)][rank]
    acct = _accountant(rank, 10.0)
    contractive = DistributedContractiveGraphLayer(ContractiveGraphLayer(3, 0.9, 0.7, min_degree=0, epsilon=1.0,
                                                                         delta=1e-5, accountant=acct))
    gap = DistributedGAPAggregation(GAPAggregation(2, noise_multiplier=3.0, accountant=acct))
    contractive(x[s:e], row_block(ei, (s, e)), row_range=(s, e), num_nodes=N_SMALL)
    gap(x[s:e], row_block(ei, (s, e)), row_range=(s, e), num_nodes=N_SMALL)
    return {"state": None if acct is None else acct.state_dict(), "granularity": contractive.granularity,
            "gap_granularity": gap.granularity}


def scenario_refusal(rank: int) -> dict:
    from pyg_private.distributed import DistributedContractiveGraphLayer, DistributedGAPAggregation, row_block
    from pyg_private.nn import ContractiveGraphLayer, GAPAggregation

    ei, x = small_graph()
    s, e = [(0, 150), (150, N_SMALL)][rank]
    block = row_block(ei, (s, e))
    seen = {}
    acct = _accountant(rank, 0.5)  # one release of epsilon 1 does not fit
    layer = DistributedContractiveGraphLayer(ContractiveGraphLayer(2, 0.9, min_degree=0, epsilon=1.0, delta=1e-5,
                                                                   accountant=acct))
    seen["over_budget"] = _outcome(lambda: layer(x[s:e], block, row_range=(s, e), num_nodes=N_SMALL))
    seen["events_after_refusal"] = None if acct is None else len(acct)
    acct = _accountant(rank, 1.2)  # one release of epsilon 1 fits, a second (epsilon 1.47) does not
    gap = DistributedGAPAggregation(GAPAggregation(1, epsilon=1.0, delta=1e-5, accountant=acct))
    seen["first"] = _outcome(lambda: gap(x[s:e], block, row_range=(s, e), num_nodes=N_SMALL))
    seen["second"] = _outcome(lambda: gap(x[s:e], block, row_range=(s, e), num_nodes=N_SMALL))
    seen["events_after_second"] = None if acct is None else len(acct)
    return seen


def scenario_noise(rank: int) -> dict:
    from pyg_private.distributed import DistributedContractiveGraphLayer, DistributedGAPAggregation, row_block
    from pyg_private.nn import ContractiveGraphLayer, GAPAggregation

    ei, x = noise_graph()
    s, e = [(0, N_NOISE // 2), (N_NOISE // 2, N_NOISE)][rank]
    block = row_block(ei, (s, e))
    out = {}
    runs = {"secure": dict(secure_mode=True), "default": dict(secure_mode=False),
            "seeded": dict(generator=torch.Generator().manual_seed(7)),
            "seeded_again": dict(generator=torch.Generator().manual_seed(7)),
            "float": dict(sampler="float")}
    for name, kwargs in runs.items():
        layer = DistributedContractiveGraphLayer(ContractiveGraphLayer(1, 0.5, min_degree=0, noise_multiplier=0.03,
                                                                       **kwargs))
        out[name] = layer(x[s:e], block, row_range=(s, e), num_nodes=N_NOISE)
        out[name + "_granularity"] = layer.granularity
    gap = DistributedGAPAggregation(GAPAggregation(1, noise_multiplier=0.3))
    out["gap"] = gap(x[s:e], block, row_range=(s, e), num_nodes=N_NOISE)
    out["gap_granularity"] = gap.granularity
    return out


def scenario_bad_inputs(rank: int) -> dict:
    from pyg_private.distributed import DistributedContractiveGraphLayer, row_block
    from pyg_private.nn import ContractiveGraphLayer

    ei, x = small_graph()
    n = N_SMALL
    even = [(0, 150), (150, n)]
    acct = _accountant(rank, 100.0)

    def make(**overrides):
        kwargs = dict(K=2, contraction=0.9, min_degree=0, noise_multiplier=2.0,
                      accountant=acct if rank == 0 else None)
        kwargs.update(overrides)
        return DistributedContractiveGraphLayer(ContractiveGraphLayer(**kwargs))

    def call(layer=None, ranges=even, num_nodes=n, xs=None, graph=None):
        s, e = ranges[rank]
        local_x = x[s:e] if xs is None else xs
        local_graph = row_block(ei, (s, e)) if graph is None else graph
        return _outcome(lambda: (layer or make())(local_x, local_graph, row_range=(s, e), num_nodes=num_nodes))

    seen = {}
    seen["overlap"] = call(ranges=[(0, 160), (150, n)])
    seen["hole"] = call(ranges=[(0, 140), (150, n)])
    seen["settings"] = call(layer=make(noise_multiplier=2.0 if rank == 0 else 2.5))
    seen["num_nodes"] = call(num_nodes=n if rank == 0 else n + 1)
    nan_x = x[150:].clone()
    nan_x[3, 1] = float("nan")
    seen["nan_on_one_rank"] = call(xs=nan_x if rank == 1 else None)
    block = row_block(ei, even[rank])
    cross = ((block[0] >= 150) & (block[1] < 150)).nonzero().flatten()
    keep = torch.ones(block.size(1), dtype=torch.bool)
    keep[cross[:1]] = False  # rank 1 drops the reverse of one edge rank 0 holds
    seen["directed_across"] = call(graph=block[:, keep] if rank == 1 else None)
    seen["accountant_on_rank_1"] = call(layer=make(accountant=_accountant(0, 100.0)))
    seen["min_degree"] = call(layer=make(min_degree=50))
    seen["rows_outside_block"] = call(graph=ei if rank == 0 else None)
    seen["rows_mismatch"] = call(xs=x[150:-1] if rank == 1 else None)
    seen["events_after_errors"] = None if acct is None else len(acct)
    seen["valid_after_errors"] = call()
    seen["events_after_valid"] = None if acct is None else len(acct)
    return seen


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - recorded for the test
        return ("raised", type(exc).__name__, str(exc))
    return ("ok",)


def band_graph(n: int, width: int) -> torch.Tensor:
    """Every node linked to the nodes within ``width`` of it (a path-like band): a block of rows
    references its own rows and ``width`` rows of each neighbouring block, its halo."""
    i = torch.arange(n)
    pairs = [torch.stack([i[:-d], i[d:]]) for d in range(1, width + 1)]
    ei = torch.cat(pairs, dim=1)
    ei = torch.cat([ei, ei.flip(0)], dim=1)
    return ei[:, torch.argsort(ei[0] * n + ei[1])]


#: (name, exchange, graph) of the halo scenario: the halo forced on the band and on the random
#: graph, and chosen by "auto" on the band (each block needs 150 + 3 of 300 rows)
HALO_CASES = [("halo_band", "halo", "band"), ("auto_band", "auto", "band"), ("halo_random", "halo", "random"),
              ("gather_band", "all_gather", "band")]


def halo_graph(kind: str) -> torch.Tensor:
    return band_graph(N_SMALL, 3) if kind == "band" else small_graph()[0]


def scenario_halo(rank: int) -> dict:
    """CGL (with the mean term, and without) and GAP with each exchange, the blocks (0, 140) and (140, 300)."""
    from pyg_private.distributed import DistributedContractiveGraphLayer, DistributedGAPAggregation, row_block
    from pyg_private.nn import ContractiveGraphLayer, GAPAggregation

    _, x = small_graph()
    s, e = [(0, 140), (140, N_SMALL)][rank]
    out = {}
    for name, exchange, kind in HALO_CASES:
        block = row_block(halo_graph(kind), (s, e))
        for alpha1 in (0.0, 0.7, 1.0):
            layer = DistributedContractiveGraphLayer(
                ContractiveGraphLayer(3, 0.9, alpha1, 0.2, min_degree=0, noise_multiplier=0.0), exchange=exchange)
            out[(name, "cgl", alpha1)] = layer(x.float()[s:e], block, row_range=(s, e), num_nodes=N_SMALL)
        gap = DistributedGAPAggregation(GAPAggregation(2, noise_multiplier=0.0), exchange=exchange)
        out[(name, "gap")] = gap(x.float()[s:e], block, row_range=(s, e), num_nodes=N_SMALL)
        out[(name, "repr")] = repr(gap)
    # the processes disagree on the exchange: refused on both, before any collective of the release
    mine = DistributedGAPAggregation(GAPAggregation(2, noise_multiplier=0.0),
                                     exchange="halo" if rank == 0 else "all_gather")
    out["disagree"] = _outcome(lambda: mine(x.float()[s:e], row_block(halo_graph("band"), (s, e)), row_range=(s, e),
                                            num_nodes=N_SMALL))
    return out


def scenario_root_release(rank: int) -> dict:
    """One release per job: rank 0 releases GAP on the whole graph and every rank receives it; a second
    release over the budget is refused on both ranks, nothing sent; a wrong `like` is refused alike."""
    from pyg_private.distributed import release_on_root
    from pyg_private.nn import GAPAggregation

    ei, x = small_graph()
    acct = _accountant(rank, 1.2)  # one release of epsilon 1 fits, a second does not
    layer = GAPAggregation(1, epsilon=1.0, delta=1e-5, accountant=acct) if rank == 0 else None
    like = torch.empty(N_SMALL, 2 * F_SMALL, dtype=torch.float64)
    seen = {"first": release_on_root(lambda: layer(x, ei), like)}
    seen["second"] = _outcome(lambda: release_on_root(lambda: GAPAggregation(1, epsilon=1.0, delta=1e-5,
                                                                             accountant=acct)(x, ei), like))
    seen["wrong_like"] = _outcome(lambda: release_on_root(lambda: seen["first"], like[:, :F_SMALL]))
    seen["events"] = None if acct is None else len(acct)
    return seen


SCENARIOS = {
    "contractive_equal": scenario_contractive_equal,
    "halo": scenario_halo,
    "gap_equal": scenario_gap_equal,
    "charge": scenario_charge,
    "refusal": scenario_refusal,
    "noise": scenario_noise,
    "bad_inputs": scenario_bad_inputs,
    "root_release": scenario_root_release,
}


def results_of(ranks: list[dict], name: str) -> list:
    """The results of scenario ``name`` on every rank; fails with the traceback of a crashed one."""
    import pytest

    results = [r[name] for r in ranks]
    for rank, result in enumerate(results):
        if isinstance(result, dict) and "crashed" in result:
            pytest.fail(f"scenario {name!r} crashed on rank {rank}:\n{result['crashed']}")
    return results


def worker(rank: int, world: int, store: str, out_dir: str) -> None:
    """Entry point of a spawned process: join the group, run every scenario, save the results."""
    import warnings

    import torch.distributed as dist

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # the untracked-privacy warning of the reference layers, etc.
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    import ppr_scenarios  # imported here: it imports this module's helpers

    results = {}
    try:
        for name, scenario in {**SCENARIOS, **ppr_scenarios.SCENARIOS}.items():
            try:
                results[name] = scenario(rank)
            except Exception as exc:  # noqa: BLE001 - reported by the tests
                results[name] = {"crashed": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}
    finally:
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()  # every collective done on both sides before the group goes (gloo may abort otherwise)
    dist.destroy_process_group()
