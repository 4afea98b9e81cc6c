"""The scenarios of the distributed noisy PPR diffusion and APPR propagation, run by the same two
processes as :mod:`distributed_scenarios` (whose worker adds :data:`SCENARIOS` to its own)."""
from __future__ import annotations

import math
from typing import Any

import torch

from distributed_scenarios import (N_NOISE, N_SMALL, _accountant, _block_graph, _outcome, features, noise_graph,
                                   small_graph)

#: the public seeds of the seed scenarios (150 twice: a personalized release charges 2 columns)
SEEDS = [3, 150, 299, 10, 150]
K_NOISE = 1  # one step: the released noise is exactly the last step's (the std test)
NOISE_SCALE = 2e-3
ETA_NOISE = 1e-3


def signals(n: int, c: int, seed: int) -> torch.Tensor:
    """Non-negative public signals; column 0 small (inside the l1 ball), the others not."""
    x = features(n, c, seed=seed).abs() / 20
    x[:, 0] *= 1e-2
    return x


#: (name, NoisyPPRDiffusion arguments, input kind, ranges of rank 0 and 1)
PPR_CONFIGS = [
    ("seeds_plain", dict(alpha=0.2, num_iterations=10, eta=1e-3), "seeds", [(0, 150), (150, N_SMALL)]),
    ("signals_l1_swapped", dict(alpha=0.15, num_iterations=8, eta=0.05, output_projection="l1_ball"), "signals",
     [(120, N_SMALL), (0, 120)]),
    ("personalized_simplex_empty", dict(alpha=0.3, num_iterations=6, eta=1e-4, personalized=True,
                                        output_projection="simplex"), "seeds", [(0, N_SMALL), (N_SMALL, N_SMALL)]),
    ("signals_column_block", dict(alpha=0.2, num_iterations=5, eta=0.01, column_block=3, cached=False,
                                  output_projection="simplex"), "signals", [(0, 77), (77, N_SMALL)]),
    ("one_signal_1d", dict(alpha=0.2, num_iterations=4, eta=0.01), "signal_1d", [(0, 200), (200, N_SMALL)]),
]


def appr_graph(kind: str) -> torch.Tensor:
    """``"small"``; ``"isolated"``: it with nodes 5 and 200 isolated (degree 0 without self-loops);
    ``"star"``: node 0 joined to every other node (float32 iterates stall at their rounding level)."""
    ei, _ = small_graph()
    if kind == "isolated":
        return ei[:, ~((ei == 5) | (ei == 200)).any(dim=0)]
    if kind == "star":
        leaves = torch.arange(1, N_SMALL)
        hub = torch.zeros(N_SMALL - 1, dtype=torch.long)
        return torch.stack([torch.cat([hub, leaves]), torch.cat([leaves, hub])])
    return ei


#: (name, appr_propagate arguments, dtype, ranges of rank 0 and 1, graph form, graph)
APPR_CONFIGS = [
    ("gcon_multi", dict(alpha=0.1, steps=[0, 2, 5, math.inf]), torch.float64, [(0, 150), (150, N_SMALL)],
     "edge_index", "small"),
    ("gcon_inference_float32", dict(alpha=0.3, steps=1), torch.float32, [(120, N_SMALL), (0, 120)], "edge_index",
     "small"),
    ("privge_r_half_inf", dict(alpha=0.2, steps=math.inf, r=0.5, self_loops=False), torch.float64,
     [(0, 77), (77, N_SMALL)], "edge_index", "isolated"),
    ("empty_block_sparse", dict(alpha=0.15, steps=[3, 7], r=0.3), torch.float64, [(0, N_SMALL), (N_SMALL, N_SMALL)],
     "sparse", "small"),
    ("float32_star_stall", dict(alpha=0.1, steps=math.inf, r=0.5, self_loops=False), torch.float32,
     [(0, 150), (150, N_SMALL)], "edge_index", "star"),
]


def _ppr_call(layer, kind: str, x: torch.Tensor, block: tuple[int, int], graph: Any, n: int = N_SMALL,
              seeds: Any = None):
    s, e = block
    if kind == "seeds":
        return layer(edge_index=graph, seed_index=torch.tensor(SEEDS if seeds is None else seeds), row_range=(s, e),
                     num_nodes=n)
    if kind == "signal_1d":
        return layer(x[s:e, 1], graph, row_range=(s, e), num_nodes=n)
    return layer(x[s:e], graph, row_range=(s, e), num_nodes=n)


def scenario_ppr_equal(rank: int) -> dict:
    from pyg_private.distributed import DistributedNoisyPPRDiffusion, row_block
    from pyg_private.nn import NoisyPPRDiffusion

    ei, _ = small_graph()
    x = signals(N_SMALL, 4, seed=5)
    out = {}
    for name, kwargs, kind, ranges in PPR_CONFIGS:
        block = ranges[rank]
        layer = DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(**kwargs, noise_scale=0.0))
        out[name] = _ppr_call(layer, kind, x, block, row_block(ei, block))
    return out


def noise_signals() -> torch.Tensor:
    return features(N_NOISE, 8, seed=6).abs() / 10


def scenario_ppr_noise(rank: int) -> dict:
    from pyg_private.distributed import DistributedNoisyPPRDiffusion, row_block
    from pyg_private.nn import NoisyPPRDiffusion

    ei, _ = noise_graph()
    x = noise_signals()
    block = [(0, N_NOISE // 2), (N_NOISE // 2, N_NOISE)][rank]
    graph = row_block(ei, block)
    runs = {"secure": dict(secure_mode=True), "default": dict(secure_mode=False),
            "seeded": dict(generator=torch.Generator().manual_seed(7)),
            "seeded_again": dict(generator=torch.Generator().manual_seed(7)),
            "float": dict(sampler="float"), "three_steps": dict(num_iterations=3)}
    out = {}
    for name, kwargs in runs.items():
        kwargs = {"num_iterations": K_NOISE, **kwargs}
        layer = DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(0.2, eta=ETA_NOISE, noise_scale=NOISE_SCALE, **kwargs))
        out[name] = _ppr_call(layer, "signals", x, block, graph, n=N_NOISE)
        out[name + "_granularity"] = layer.granularity
    ei, _ = small_graph()  # one process holds every node, the other none
    block = [(0, N_SMALL), (N_SMALL, N_SMALL)][rank]
    for name, kwargs in {"empty_block_safe": {}, "empty_block_float": dict(sampler="float")}.items():
        layer = DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(0.2, 3, 1e-3, noise_scale=1e-3, personalized=True,
                                                               output_projection="l1_ball", **kwargs))
        out[name] = _ppr_call(layer, "seeds", None, block, row_block(ei, block))
    return out


def charge_layers(acct):
    """The two releases of the charge scenario (the test builds them again for one process)."""
    from pyg_private.nn import NoisyPPRDiffusion

    return (NoisyPPRDiffusion(0.2, 4, 1e-3, epsilon=1.0, delta=1e-5, personalized=True, accountant=acct),
            NoisyPPRDiffusion(0.25, 3, 1e-3, noise_scale=5e-2, output_projection="l1_ball", accountant=acct))


def scenario_ppr_charge(rank: int) -> dict:
    from pyg_private.distributed import DistributedNoisyPPRDiffusion, row_block

    ei, _ = small_graph()
    x = signals(N_SMALL, 4, seed=5)
    block = [(0, 150), (150, N_SMALL)][rank]
    graph = row_block(ei, block)
    acct = _accountant(rank, 100.0)
    personalized, plain = (DistributedNoisyPPRDiffusion(layer) for layer in charge_layers(acct))
    _ppr_call(personalized, "seeds", x, block, graph)
    _ppr_call(plain, "signals", x, block, graph)
    return {"state": None if acct is None else acct.state_dict(), "granularity": personalized.granularity,
            "plain_granularity": plain.granularity}


def scenario_ppr_refusal(rank: int) -> dict:
    from pyg_private.distributed import DistributedNoisyPPRDiffusion, row_block
    from pyg_private.nn import NoisyPPRDiffusion

    ei, _ = small_graph()
    block = [(0, 150), (150, N_SMALL)][rank]
    graph = row_block(ei, block)
    seen = {}
    acct = _accountant(rank, 0.5)  # one release of epsilon 1 does not fit
    layer = DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(0.2, 3, 1e-3, epsilon=1.0, delta=1e-5, accountant=acct))
    seen["over_budget"] = _outcome(lambda: _ppr_call(layer, "seeds", None, block, graph, seeds=[3]))
    seen["events_after_refusal"] = None if acct is None else len(acct)
    acct = _accountant(rank, 1.2)  # one release of epsilon 1 fits, a second does not
    layer = DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(0.2, 3, 1e-3, epsilon=1.0, delta=1e-5, accountant=acct))
    seen["first"] = _outcome(lambda: _ppr_call(layer, "seeds", None, block, graph, seeds=[3]))
    seen["second"] = _outcome(lambda: _ppr_call(layer, "seeds", None, block, graph, seeds=[3]))
    seen["events_after_second"] = None if acct is None else len(acct)
    return seen


def scenario_ppr_bad_inputs(rank: int) -> dict:
    from pyg_private.distributed import DistributedNoisyPPRDiffusion, row_block
    from pyg_private.nn import NoisyPPRDiffusion

    ei, _ = small_graph()
    x = signals(N_SMALL, 4, seed=5)
    n = N_SMALL
    even = [(0, 150), (150, n)]
    acct = _accountant(rank, 100.0)

    def make(**overrides):
        kwargs = dict(alpha=0.2, num_iterations=3, eta=1e-3, noise_scale=1e-2, accountant=acct)
        kwargs.update(overrides)
        return DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(**kwargs))

    def call(layer=None, ranges=even, num_nodes=n, kind="seeds", seeds=None, xs=None):
        s, e = ranges[rank]
        if kind == "seeds":
            fn = lambda: (layer or make())(edge_index=row_block(ei, (s, e)), seed_index=torch.tensor(  # noqa: E731
                SEEDS if seeds is None else seeds), row_range=(s, e), num_nodes=num_nodes)
        else:
            fn = lambda: (layer or make())(x[s:e] if xs is None else xs, row_block(ei, (s, e)),  # noqa: E731
                                           row_range=(s, e), num_nodes=num_nodes)
        return _outcome(fn)

    seen = {}
    seen["overlap"] = call(ranges=[(0, 160), (150, n)])
    seen["hole"] = call(ranges=[(0, 140), (150, n)])
    seen["settings"] = call(layer=make(noise_scale=1e-2 if rank == 0 else 2e-2))
    seen["num_nodes"] = call(num_nodes=n if rank == 0 else n + 1)
    seen["seeds"] = call(seeds=SEEDS if rank == 0 else SEEDS[::-1])
    seen["mode"] = call(kind="seeds" if rank == 0 else "signals")
    negative = x[150:].clone()
    negative[4, 2] = -1.0
    seen["negative_signal_on_one_rank"] = call(kind="signals", xs=negative if rank == 1 else None)
    seen["seed_out_of_range"] = call(seeds=[0, n])
    seen["not_a_tensor_on_one_rank"] = call(kind="signals", xs=x[150:].tolist() if rank == 1 else None)
    seen["accountant_on_rank_1"] = call(layer=make(accountant=_accountant(0, 100.0)))
    seen["events_after_errors"] = None if acct is None else len(acct)
    seen["valid_after_errors"] = call()
    seen["events_after_valid"] = None if acct is None else len(acct)
    return seen


def scenario_appr_equal(rank: int) -> dict:
    from pyg_private.distributed import distributed_appr_propagate

    _, x = small_graph()
    out = {}
    for name, kwargs, dtype, ranges, form, kind in APPR_CONFIGS:
        graph = appr_graph(kind)
        s, e = ranges[rank]
        out[name] = distributed_appr_propagate(x.to(dtype)[s:e], _block_graph(graph, (s, e), N_SMALL, form),
                                               row_range=(s, e), num_nodes=N_SMALL, **kwargs)
    return out


def scenario_appr_bad_inputs(rank: int) -> dict:
    from pyg_private.distributed import distributed_appr_propagate, row_block

    ei, x = small_graph()
    n = N_SMALL
    even = [(0, 150), (150, n)]

    def call(ranges=even, num_nodes=n, xs=None, **kwargs):
        s, e = ranges[rank]
        settings = dict(alpha=0.1, steps=[1, 3])
        settings.update(kwargs)
        return _outcome(lambda: distributed_appr_propagate(x[s:e] if xs is None else xs, row_block(ei, (s, e)),
                                                           row_range=(s, e), num_nodes=num_nodes, **settings))

    nan_x = x[150:].clone()
    nan_x[0, 0] = float("nan")
    return {"overlap": call(ranges=[(0, 160), (150, n)]),
            "alpha": call(alpha=0.1 if rank == 0 else 0.2),
            "num_nodes": call(num_nodes=n if rank == 0 else n + 1),
            "nan_on_one_rank": call(xs=nan_x if rank == 1 else None),
            "max_iter": call(steps=math.inf, max_iter=3),
            "valid_after_errors": call()}


#: (name, exchange) of the PPR halo scenario, on the band graph (blocks (0, 140) and (140, 300))
PPR_HALO_CASES = [("halo", "halo"), ("auto", "auto"), ("all_gather", "all_gather")]


def scenario_ppr_halo(rank: int) -> dict:
    from distributed_scenarios import band_graph

    from pyg_private.distributed import DistributedNoisyPPRDiffusion, row_block
    from pyg_private.nn import NoisyPPRDiffusion

    block = [(0, 140), (140, N_SMALL)][rank]
    edges = row_block(band_graph(N_SMALL, 3), block)
    x = signals(N_SMALL, 4, seed=5)
    out = {}
    for name, exchange in PPR_HALO_CASES:
        layer = DistributedNoisyPPRDiffusion(NoisyPPRDiffusion(alpha=0.2, num_iterations=8, eta=1e-2, noise_scale=0.0,
                                                               column_block=3, cached=False),
                                            exchange=exchange)
        out[(name, "signals")] = _ppr_call(layer, "signals", x, block, edges)
        out[(name, "seeds")] = _ppr_call(layer, "seeds", x, block, edges)
        out[(name, "repr")] = repr(layer)
    return out


def scenario_appr_halo(rank: int) -> dict:
    """The APPR propagation on the band graph with each exchange, fixed steps and to convergence."""
    from distributed_scenarios import band_graph

    from pyg_private.distributed import distributed_appr_propagate, row_block

    s, e = [(0, 140), (140, N_SMALL)][rank]
    edges = row_block(band_graph(N_SMALL, 3), (s, e))
    _, x = small_graph()
    out = {}
    for name, exchange in PPR_HALO_CASES:
        for steps in (10, math.inf):
            for r in (0.0, 0.5):
                out[(name, steps, r)] = distributed_appr_propagate(
                    x[s:e].float(), edges, row_range=(s, e), num_nodes=N_SMALL, alpha=0.2, steps=steps, r=r,
                    exchange=exchange)
    return out


SCENARIOS = {
    "ppr_equal": scenario_ppr_equal,
    "appr_halo": scenario_appr_halo,
    "ppr_halo": scenario_ppr_halo,
    "ppr_noise": scenario_ppr_noise,
    "ppr_charge": scenario_ppr_charge,
    "ppr_refusal": scenario_ppr_refusal,
    "ppr_bad_inputs": scenario_ppr_bad_inputs,
    "appr_equal": scenario_appr_equal,
    "appr_bad_inputs": scenario_appr_bad_inputs,
}
