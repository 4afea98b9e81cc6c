"""Releases across processes against one process (issue 17 benchmark): the row-partitioned
`DistributedContractiveGraphLayer` and `DistributedGAPAggregation` with --world processes of the gloo
backend, each with --threads threads, against the plain single-process layers.

    python benchmarks/distributed_release.py [--world 2] [--threads 1] [--repeats 3] [--nodes 100000]
                                             [--edges 1000000] [--channels 64] [--K 10] [--gap-K 2]
    python benchmarks/distributed_release.py --graph products [--quick] [--cache DIR]
                                             [--cases cgl,gap,ppr] [--ppr-seeds 8] [--ppr-steps 10]

The graph is benchmarks/caribou_layer.py's (uniform random undirected edges, seeded), 64 float32
channels. One command: the script spawns its --world processes itself (torch.multiprocessing, a free
local port). Every process builds the same graph and keeps its contiguous block of rows
(`even_row_ranges`, `row_block`), as a real deployment would load only its block; the timed call is
one release (the checks of the partition and of the graph across processes, the charge on rank 0,
the hops with an all-gather each, every process drawing the noise of its rows), between two
barriers, so the figure is the slowest process's. The single-process references run in the parent
with --world x --threads threads (the same cores). Peak memory is each process's resident set size
sampled every 2 ms during one more call, and its growth during the call. Printed, never asserted.

``--graph products`` runs the releases on benchmarks/products_scale.py's ogbn-products-shaped
Chung-Lu graph (2,449,029 nodes, 61,859,140 undirected edges, 100 float32 channels; ``--quick``: the
10x smaller graph of ``products_scale.py --quick``), read from the .pt file cached under ``--cache``
(the same default as products_scale.py; generated and cached there first when missing). Cases
(``--cases``): ``cgl``, products_scale's ``ContractiveGraphLayer(K=--K, min_degree=0,
noise_multiplier=1)``; ``gap``, ``GAPAggregation(K=--gap-K, noise_multiplier=1)``; ``ppr``,
``NoisyPPRDiffusion(alpha=0.2, num_iterations=--ppr-steps, eta=1e-7, epsilon=0.1, delta=1/|E|,
personalized=True, grid_tolerance=2**-14)`` for --ppr-seeds seeds (products_scale's setting: at
2.45M nodes the default tolerance 2^-16 would need a grid the values cannot span, and the layer
refuses before any charge). Two phases, one after the other, so that each phase's peak memory is its
own and the cores are not shared between them: first one spawned process with --world x --threads
threads loads the whole graph (a float32 CSR) and runs the single-process layers; then the --world
processes each load the cached graph, keep only their contiguous block of rows (a ``torch.sparse``
CSR block of ``end - start`` rows with global column ids, int32 indices and bool ones, and their
feature rows) and free the rest before the timed calls. Each timed call (--repeats, default 1 here:
a call takes minutes at full size; no warm-up call) is also the one whose resident size is sampled;
the per-process peak is printed with its growth during the call, next to the size held before the
calls (the block and the interpreter). ``--rss-limit-gb`` (default 20) is shared by a phase's
processes: a process passing its share stops the run, after printing what it saw.

On this 2-core machine two processes share the cores that one process with two threads uses: the
speed-up measures the protocol's overhead and the parallel efficiency, not more hardware.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from caribou_layer import random_graph  # noqa: E402  (the issue-4 benchmark's graph)
from ppr_blogcatalog import PeakRSS  # noqa: E402
import products_scale  # noqa: E402  (the issue-17 ogbn-products-shaped graph)
from pyg_private.distributed import (DistributedContractiveGraphLayer, DistributedGAPAggregation,  # noqa: E402
                                     DistributedNoisyPPRDiffusion, even_row_ranges, row_block)
from pyg_private.nn import ContractiveGraphLayer, GAPAggregation, NoisyPPRDiffusion  # noqa: E402

#: ``--cases`` keys and the names printed for them.
CASE_NAMES = {"cgl": "ContractiveGraphLayer", "gap": "GAPAggregation", "ppr": "NoisyPPRDiffusion"}
WRAPPERS = {"cgl": DistributedContractiveGraphLayer, "gap": DistributedGAPAggregation,
            "ppr": DistributedNoisyPPRDiffusion}


def layers(args):
    """Fresh single-process layers of the benchmark's settings (no accountant: timing only)."""
    return {"ContractiveGraphLayer": ContractiveGraphLayer(args.K, 0.9, 0.9, 0.1, min_degree=0, noise_multiplier=1.0,
                                                           cached=False),
            "GAPAggregation": GAPAggregation(args.gap_K, noise_multiplier=1.0, cached=False)}


def case_layer(case: str, args, num_edges: int):
    """A fresh single-process layer of ``case`` (no accountant: timing only)."""
    if case == "ppr":
        return NoisyPPRDiffusion(alpha=0.2, num_iterations=args.ppr_steps, eta=1e-7, epsilon=0.1,
                                 delta=1.0 / num_edges, personalized=True, cached=False,
                                 grid_tolerance=args.ppr_grid_tolerance)
    if args.graph == "products":  # products_scale.py's layers
        if case == "cgl":
            return ContractiveGraphLayer(K=args.K, min_degree=0, noise_multiplier=1.0, cached=False)
        return GAPAggregation(K=args.gap_K, noise_multiplier=1.0, cached=False)
    return layers(args)[CASE_NAMES[case]]


def ppr_seeds(n: int, count: int) -> torch.Tensor:
    """The public seeds of the PPR case (products_scale.py's: the first of a seeded permutation)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(123))[:count]


def small_graph(args) -> torch.Tensor:
    """The ``edge_index`` of the in-memory graphs: ``uniform``, caribou_layer's random graph; ``band``,
    every node linked to the ``--edges / --nodes`` nodes after it (and so to as many before it): the
    same edge count with the locality of a well-partitioned graph, each block's halo a few rows."""
    if args.graph == "uniform":
        return random_graph(args.nodes, args.edges)
    n, width = args.nodes, max(1, args.edges // args.nodes)
    i = torch.arange(n)
    ei = torch.cat([torch.stack([i[:-d], i[d:]]) for d in range(1, width + 1)], dim=1)
    ei = torch.cat([ei, ei.flip(0)], dim=1)
    return ei[:, torch.argsort(ei[0] * n + ei[1])]


def wrap(case: str, layer, args):
    """The distributed wrapper of ``case`` (CGL and GAP with ``--exchange``)."""
    if case in ("cgl", "gap"):
        return WRAPPERS[case](layer, exchange=args.exchange)
    return WRAPPERS[case](layer)


def graph_size(args) -> tuple[int, int]:
    """``(nodes, undirected edges)`` of the benchmark's graph."""
    if args.graph == "products":
        if args.quick:
            return products_scale.NUM_NODES // 10, products_scale.NUM_EDGES // 10
        return products_scale.NUM_NODES, products_scale.NUM_EDGES
    return args.nodes, args.edges


def measure(call, args, sync=None) -> tuple[list, int, int]:
    """``(times, peak RSS, growth)`` of ``call``. The uniform graph: --repeats timed calls after one
    warm-up, then one more call sampled for memory (``sync``: the barrier around each). The products
    graph: --repeats calls, each timed and sampled (products_scale's sampler: heap trimmed first,
    the --rss-limit-gb share enforced)."""
    sync = sync or (lambda: None)
    times = []
    if args.graph != "products":
        for r in range(args.repeats + 1):
            sync()
            t0 = time.perf_counter()
            call()
            sync()
            if r > 0:
                times.append(time.perf_counter() - t0)
        with PeakRSS() as mem:
            call()
        sync()
        return times, mem.peak, mem.peak - mem.before
    peak = growth = 0
    for _ in range(args.repeats):
        sync()
        with products_scale.PeakRSS() as mem:
            t0 = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - t0)
        peak, growth = max(peak, mem.peak), max(growth, mem.growth)
    return times, peak, growth


def single_process(args, x, adj, seeds, n: int, m: int) -> dict:
    """``{case: measure(...)}`` of the single-process layers on the whole graph ``adj``."""
    results = {}
    for case in args.case_list:
        layer = case_layer(case, args, m)
        if case == "ppr":
            call = lambda: layer(edge_index=adj, seed_index=seeds, num_nodes=n)  # noqa: E731
        else:
            call = lambda: layer(x, adj)  # noqa: E731
        if args.graph != "products":
            results[case] = measure(call, args)
            continue
        with torch.no_grad():
            results[case] = measure(call, args)
        print(f"  1 process: {CASE_NAMES[case]} done ({statistics.median(results[case][0]):.1f} s)", flush=True)
    return results


def products_reference(rank: int, args, port: int, queue) -> None:
    """The single-process phase on the products graph (its own process: its memory is its own)."""
    warnings.simplefilter("ignore")
    products_scale.trim()
    base = products_scale._rss()
    torch.set_num_threads(args.world * args.threads)
    products_scale.PeakRSS.limit = args.rss_limit_bytes
    products_scale.PeakRSS.label = "1 process"
    n, m = graph_size(args)
    crow, col = products_scale.load_graph(n, m, args.seed, args.cache, check=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adj = torch.sparse_csr_tensor(crow, col, torch.ones(col.numel(), dtype=torch.float32), (n, n))
    del crow, col
    x = products_scale.make_features(n, products_scale.CHANNELS, args.seed)
    seeds = ppr_seeds(n, args.ppr_seeds)
    products_scale.trim()
    held = products_scale._rss()
    queue.put((rank, {"base": base, "held": held, "cases": single_process(args, x, adj, seeds, n, m)}))


def products_block(args, rank: int):
    """This process's block of the products graph: ``(adj, x, (start, end), n, m)``, the CSR block
    (int32 indices, global columns, bool ones) and its feature rows; the rest is freed."""
    n, m = graph_size(args)
    start, end = even_row_ranges(n, args.world)[rank]
    crow, col = products_scale.load_graph(n, m, args.seed, args.cache, check=False)
    a, b = int(crow[start]), int(crow[end])
    block_crow = crow[start:end + 1] - a
    block_col = col[a:b].clone()
    del crow, col
    x = products_scale.make_features(n, products_scale.CHANNELS, args.seed)[start:end].clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adj = torch.sparse_csr_tensor(block_crow, block_col, torch.ones(b - a, dtype=torch.bool), (end - start, n))
    products_scale.trim()
    return adj, x, (start, end), n, m


def worker(rank: int, args, port: int, queue) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world)
    try:
        if args.graph == "products":
            queue.put((rank, products_worker(rank, args)))
            return
        n = args.nodes
        ei = small_graph(args)
        x = torch.randn(n, args.channels, generator=torch.Generator().manual_seed(1))
        start, end = even_row_ranges(n, args.world)[rank]
        x_block, edges = x[start:end].contiguous(), row_block(ei, (start, end))
        del ei, x
        seeds = ppr_seeds(n, args.ppr_seeds)
        results = {}
        for case in args.case_list:
            wrapper = wrap(case, case_layer(case, args, args.edges), args)
            if case == "ppr":
                call = lambda: wrapper(edge_index=edges, seed_index=seeds, row_range=(start, end),  # noqa: E731
                                       num_nodes=n)
            else:
                call = lambda: wrapper(x_block, edges, row_range=(start, end), num_nodes=n)  # noqa: E731
            results[case] = measure(call, args, dist.barrier)
        queue.put((rank, results))
    finally:
        dist.destroy_process_group()


def products_worker(rank: int, args) -> dict:
    """One process of the distributed phase on the products graph: its block, then the timed releases."""
    products_scale.trim()
    base = products_scale._rss()
    products_scale.PeakRSS.limit = args.rss_limit_bytes
    products_scale.PeakRSS.label = f"rank {rank}"
    adj, x, (start, end), n, m = products_block(args, rank)
    seeds = ppr_seeds(n, args.ppr_seeds)
    block_bytes = sum(t.numel() * t.element_size() for t in (adj.crow_indices(), adj.col_indices(), adj.values(), x))
    held = products_scale._rss()
    results = {}
    for case in args.case_list:
        wrapper = wrap(case, case_layer(case, args, m), args)
        if case == "ppr":
            call = lambda: wrapper(edge_index=adj, seed_index=seeds, row_range=(start, end),  # noqa: E731
                                   num_nodes=n)
        else:
            call = lambda: wrapper(x, adj, row_range=(start, end), num_nodes=n)  # noqa: E731
        with torch.no_grad():
            results[case] = measure(call, args, dist.barrier)
        if rank == 0:
            print(f"  {args.world} processes: {CASE_NAMES[case]} done "
                  f"({statistics.median(results[case][0]):.1f} s)", flush=True)
    return {"base": base, "held": held, "rows": end - start, "entries": adj.col_indices().numel(),
            "block_bytes": block_bytes, "cases": results}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(target, args, count: int) -> dict:
    """Spawn ``count`` processes ``target(rank, args, port, queue)`` and return ``{rank: result}``.
    A process that exits without its result (a crash, the memory limit) ends the others and the
    run, instead of leaving them waiting in a collective."""
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, args, port, queue)) for r in range(count)]
    for p in procs:
        p.start()
    gathered = {}
    try:
        while len(gathered) < count:
            if not queue.empty():
                rank, result = queue.get()
                gathered[rank] = result
                continue
            failed = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if failed or (all(p.exitcode is not None for p in procs) and queue.empty()):
                codes = ", ".join(f"rank {r} with code {c}" for r, c in failed) or "code 0"
                raise SystemExit(f"a worker exited without its result ({codes}); the others were stopped")
            time.sleep(0.2)
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise SystemExit(f"a worker exited with code {p.exitcode}")
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    return gathered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", choices=("uniform", "band", "products"), default="uniform")
    ap.add_argument("--exchange", choices=("auto", "all_gather", "halo"), default="auto",
                    help="the CGL and GAP wrappers' exchange of the previous hop")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls (default: 3; 1 with --graph products)")
    ap.add_argument("--nodes", type=int, default=100_000, help="uniform graph only")
    ap.add_argument("--edges", type=int, default=1_000_000,
                    help="undirected edges (each stored twice; uniform graph only)")
    ap.add_argument("--channels", type=int, default=64, help="uniform graph only (products: 100)")
    ap.add_argument("--K", type=int, default=10, help="hops of ContractiveGraphLayer")
    ap.add_argument("--gap-K", type=int, default=2, help="hops of GAPAggregation")
    ap.add_argument("--cases", default=None, help="comma-separated, from cgl, gap, ppr (default: cgl,gap; "
                                                  "cgl,gap,ppr with --graph products)")
    ap.add_argument("--ppr-seeds", type=int, default=8, help="PPR seeds (columns)")
    ap.add_argument("--ppr-steps", type=int, default=10, help="PPR steps K")
    ap.add_argument("--ppr-grid-tolerance", type=float, default=2.0 ** -14)
    ap.add_argument("--quick", action="store_true", help="products: the 10x smaller graph")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "pyg_private_products_scale"),
                    help="products: where the graph is cached (as products_scale.py)")
    ap.add_argument("--seed", type=int, default=0, help="products: the graph's and the features' seed")
    ap.add_argument("--rss-limit-gb", type=float, default=20.0,
                    help="products: resident-size limit of a phase, shared by its processes (0: none)")
    args = ap.parse_args()
    if args.repeats is None:
        args.repeats = 1 if args.graph == "products" else 3
    if args.cases is None:
        args.cases = "cgl,gap,ppr" if args.graph == "products" else "cgl,gap"
    args.case_list = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in args.case_list:
        if c not in CASE_NAMES:
            ap.error(f"unknown case {c!r}; choose from {', '.join(CASE_NAMES)}")
    warnings.simplefilter("ignore")
    if args.graph == "products":
        products_main(args)
        return
    print(f"synthetic {args.graph} graph: {args.nodes} nodes, {args.edges} undirected edges, {args.channels} float32 "
          f"channels; exchange {args.exchange!r}; "
          f"{args.world} gloo processes x {args.threads} thread(s) against one process with "
          f"{args.world * args.threads} thread(s); medians of {args.repeats} calls; torch {torch.__version__}",
          flush=True)

    # the single-process references, on the same number of cores
    torch.set_num_threads(args.world * args.threads)
    n = args.nodes
    ei = small_graph(args)
    x = torch.randn(n, args.channels, generator=torch.Generator().manual_seed(1))
    single = single_process(args, x, ei, ppr_seeds(n, args.ppr_seeds), n, args.edges)
    del ei, x

    gathered = run_processes(worker, args, args.world)

    for case, (times, peak, growth) in single.items():
        name = CASE_NAMES[case]
        one = statistics.median(times)
        many = statistics.median(gathered[0][case][0])  # between barriers: the same on every rank
        print(f"{name:<22} 1 process: {one:6.3f} s  peak RSS {peak / 2**20:6.0f} MiB (+{growth / 2**20:.0f} MiB)",
              flush=True)
        per_rank = ", ".join(f"rank {r}: {gathered[r][case][1] / 2**20:.0f} MiB (+{gathered[r][case][2] / 2**20:.0f})"
                             for r in sorted(gathered))
        print(f"{'':<22} {args.world} processes: {many:6.3f} s  speed-up {one / many:4.2f}x  peak RSS {per_rank}",
              flush=True)


def products_main(args) -> None:
    """The two phases on the products graph, then the table."""
    n, m = graph_size(args)
    mib = lambda b: f"{b / 2**20:,.0f} MiB"  # noqa: E731
    limit = int(args.rss_limit_gb * 2**30) if args.rss_limit_gb > 0 else None
    print(f"synthetic ogbn-products-shaped graph (products_scale.py{' --quick' if args.quick else ''}): {n:,} nodes, "
          f"{m:,} undirected edges, {products_scale.CHANNELS} float32 channels; cases {','.join(args.case_list)} "
          f"(CGL K={args.K}, GAP K={args.gap_K}, PPR {args.ppr_seeds} seeds x {args.ppr_steps} steps, grid_tolerance "
          f"{args.ppr_grid_tolerance:g}); {args.world} gloo processes x {args.threads} thread(s) against one process "
          f"with {args.world * args.threads} thread(s), one phase after the other; medians of {args.repeats} "
          f"call(s); torch {torch.__version__}", flush=True)

    print("phase 1: one process, the whole graph", flush=True)
    args.rss_limit_bytes = limit
    single = run_processes(products_reference, args, 1)[0]
    print(f"phase 2: {args.world} processes, one block of rows each", flush=True)
    args.rss_limit_bytes = None if limit is None else limit // args.world
    ranks = run_processes(worker, args, args.world)

    print(f"\n1 process: {mib(single['base'])} interpreter, {mib(single['held'])} resident with the graph "
          f"(float32 CSR) and the features before the calls")
    for r in sorted(ranks):
        g = ranks[r]
        print(f"rank {r}: {g['rows']:,} rows, {g['entries']:,} CSR entries; block (int32 CSR, bool ones, float32 "
              f"features) {mib(g['block_bytes'])}; {mib(g['base'])} interpreter, {mib(g['held'])} resident with the "
              "block before the calls")
    for case in args.case_list:
        times, peak, growth = single["cases"][case]
        one = statistics.median(times)
        many = statistics.median(ranks[0]["cases"][case][0])  # between barriers: the same on every rank
        name = CASE_NAMES[case]
        print(f"{name:<22} 1 process ({args.world * args.threads} threads): {one:8.2f} s  peak RSS {mib(peak)} "
              f"(+{mib(growth)} during the call)", flush=True)
        top = max(ranks, key=lambda r: ranks[r]["cases"][case][1])
        per_rank = ", ".join(f"rank {r}: {mib(ranks[r]['cases'][case][1])} (+{mib(ranks[r]['cases'][case][2])})"
                             for r in sorted(ranks))
        print(f"{'':<22} {args.world} processes x {args.threads} thread(s): {many:8.2f} s  speed-up "
              f"{one / many:4.2f}x  peak RSS per process: max {mib(ranks[top]['cases'][case][1])} (rank {top}); "
              f"{per_rank}", flush=True)


if __name__ == "__main__":
    main()
