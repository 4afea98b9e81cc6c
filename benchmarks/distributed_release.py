"""Releases across processes against one process (issue 17 benchmark): the row-partitioned
`DistributedContractiveGraphLayer` and `DistributedGAPAggregation` with --world processes of the gloo
backend, each with --threads threads, against the plain single-process layers.

    python benchmarks/distributed_release.py [--world 2] [--threads 1] [--repeats 3] [--nodes 100000]
                                             [--edges 1000000] [--channels 64] [--K 10] [--gap-K 2]

The graph is benchmarks/caribou_layer.py's (uniform random undirected edges, seeded), 64 float32
channels. One command: the script spawns its --world processes itself (torch.multiprocessing, a free
local port). Every process builds the same graph and keeps its contiguous block of rows
(`even_row_ranges`, `row_block`), as a real deployment would load only its block; the timed call is
one release (the checks of the partition and of the graph across processes, the charge on rank 0,
the hops with an all-gather each, every process drawing the noise of its rows), between two
barriers, so the figure is the slowest process's. The single-process references run in the parent
with --world x --threads threads (the same cores). Peak memory is each process's resident set size
sampled every 2 ms during one more call, and its growth during the call. Printed, never asserted.

On this 2-core machine two processes share the cores that one process with two threads uses: the
speed-up measures the protocol's overhead and the parallel efficiency, not more hardware.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from caribou_layer import random_graph  # noqa: E402  (the issue-4 benchmark's graph)
from ppr_blogcatalog import PeakRSS  # noqa: E402
from pyg_private.distributed import (DistributedContractiveGraphLayer, DistributedGAPAggregation,  # noqa: E402
                                     even_row_ranges, row_block)
from pyg_private.nn import ContractiveGraphLayer, GAPAggregation  # noqa: E402


def layers(args):
    """Fresh single-process layers of the benchmark's settings (no accountant: timing only)."""
    return {"ContractiveGraphLayer": ContractiveGraphLayer(args.K, 0.9, 0.9, 0.1, min_degree=0, noise_multiplier=1.0,
                                                           cached=False),
            "GAPAggregation": GAPAggregation(args.gap_K, noise_multiplier=1.0, cached=False)}


def worker(rank: int, args, port: int, queue) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world)
    try:
        n = args.nodes
        ei = random_graph(n, args.edges)
        x = torch.randn(n, args.channels, generator=torch.Generator().manual_seed(1))
        start, end = even_row_ranges(n, args.world)[rank]
        x_block, edges = x[start:end].contiguous(), row_block(ei, (start, end))
        del ei, x
        results = {}
        for name, layer in layers(args).items():
            wrapper = (DistributedContractiveGraphLayer if name == "ContractiveGraphLayer" else
                       DistributedGAPAggregation)(layer)
            times = []
            for r in range(args.repeats + 1):
                dist.barrier()
                t0 = time.perf_counter()
                wrapper(x_block, edges, row_range=(start, end), num_nodes=n)
                dist.barrier()
                if r > 0:
                    times.append(time.perf_counter() - t0)
            with PeakRSS() as mem:
                wrapper(x_block, edges, row_range=(start, end), num_nodes=n)
            dist.barrier()
            results[name] = (times, mem.peak, mem.peak - mem.before)
        queue.put((rank, results))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=1_000_000, help="undirected edges (each stored twice)")
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--K", type=int, default=10, help="hops of ContractiveGraphLayer")
    ap.add_argument("--gap-K", type=int, default=2, help="hops of GAPAggregation")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"synthetic graph: {args.nodes} nodes, {args.edges} undirected edges, {args.channels} float32 channels; "
          f"{args.world} gloo processes x {args.threads} thread(s) against one process with "
          f"{args.world * args.threads} thread(s); medians of {args.repeats} calls; torch {torch.__version__}",
          flush=True)

    # the single-process references, on the same number of cores
    torch.set_num_threads(args.world * args.threads)
    n = args.nodes
    ei = random_graph(n, args.edges)
    x = torch.randn(n, args.channels, generator=torch.Generator().manual_seed(1))
    single = {}
    for name, layer in layers(args).items():
        times = []
        for r in range(args.repeats + 1):
            t0 = time.perf_counter()
            layer(x, ei)
            if r > 0:
                times.append(time.perf_counter() - t0)
        with PeakRSS() as mem:
            layer(x, ei)
        single[name] = (times, mem.peak, mem.peak - mem.before)
    del ei, x

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.world)]
    for p in procs:
        p.start()
    gathered = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a worker exited with code {p.exitcode}")

    for name, (times, peak, growth) in single.items():
        one = statistics.median(times)
        many = statistics.median(gathered[0][name][0])  # between barriers: the same on every rank
        print(f"{name:<22} 1 process: {one:6.3f} s  peak RSS {peak / 2**20:6.0f} MiB (+{growth / 2**20:.0f} MiB)",
              flush=True)
        per_rank = ", ".join(f"rank {r}: {gathered[r][name][1] / 2**20:.0f} MiB (+{gathered[r][name][2] / 2**20:.0f})"
                             for r in sorted(gathered))
        print(f"{'':<22} {args.world} processes: {many:6.3f} s  speed-up {one / many:4.2f}x  peak RSS {per_rank}",
              flush=True)


if __name__ == "__main__":
    main()
