"""The release layers on a GPU against their non-private PyG counterparts, in one process.

    python benchmarks/gpu_releases.py [--sizes 100k products] [--repeats 5] [--out results.csv]
    python benchmarks/gpu_releases.py --device cpu --sizes tiny        # a CPU check of the script itself

Graphs (uniform random pairs, no self-loop, no duplicate, stored in both directions as a
``torch.sparse_csr_tensor`` of float32 ones, the form the layers take fastest):

* ``100k``: 100,000 nodes, 1,000,000 undirected edges, 64 channels;
* ``products``: ogbn-products' size, 2,449,029 nodes, 30,929,523 undirected edges (61,859,046 entries),
  100 channels;
* ``tiny``: 2,000 nodes, 10,000 edges, 16 channels (for testing the script on a CPU).

Cases per graph, each the median of ``--repeats`` calls after one warm-up call, uncached (every call
a new release), the noise ``safe`` (the default: exact integer noise on a grid), ``float``
(``torch.randn``, open to floating-point attacks) and ``secure`` (``secure_mode=True``):

* ``ContractiveGraphLayer(K=10)`` against PyG's ``APPNP(K=10, alpha=0.1, cached=False)`` on the same
  CSR adjacency (the anchor of the issue's table);
* ``GAPAggregation(K=2)`` and ``ProGAPAggregation`` against the same layer with
  ``noise_multiplier=0`` (the same hops without noise);
* the exact Gaussian sampler alone (``RoundedNoiseSampler("gaussian").sample``) against
  ``torch.randn`` (float32), in samples per second.

For every case on CUDA: the host synchronisations of one call (``torch.cuda.set_sync_debug_mode``
warns once per synchronising operation; the warnings are counted), the exact-noise releases in that
call (``pyg_private.sampling.device_release.release`` calls: a grid release of a layer's hop, or a
sampler call) and so the synchronisations per release (the device release reads the device once;
the rest of a layer's call adds its own), and the peak GPU memory of one call
(``torch.cuda.max_memory_allocated`` after a reset). The ratios are taken in the same process, case
against anchor; nothing is asserted.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import torch

SIZES = {"tiny": (2_000, 10_000, 16), "100k": (100_000, 1_000_000, 64), "products": (2_449_029, 30_929_523, 100)}


def random_csr(n: int, m: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    """``m`` undirected edges drawn uniformly (no self-loop, no duplicate) as a symmetric CSR matrix of ones."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    keys = torch.empty(0, dtype=torch.int64)
    while keys.numel() < m:  # draw, drop self-loops and repeats, top up
        need = int((m - keys.numel()) * 1.05) + 16
        u = torch.randint(0, n, (need,), generator=gen)
        v = torch.randint(0, n, (need,), generator=gen)
        lo, hi = torch.minimum(u, v), torch.maximum(u, v)
        keep = lo != hi
        keys = torch.unique(torch.cat([keys, lo[keep] * n + hi[keep]]))
    keys = keys[torch.randperm(keys.numel(), generator=gen)[:m]]
    lo, hi = keys // n, keys % n
    row, col = torch.cat([lo, hi]).to(device), torch.cat([hi, lo]).to(device)
    adj = torch.sparse_coo_tensor(torch.stack([row, col]), torch.ones(row.numel(), device=device), (n, n))
    return adj.coalesce().to_sparse_csr()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    fn()  # warm-up (kernels compiled, tables built)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def host_syncs(fn: Callable[[], object], device: torch.device) -> tuple[str, str]:
    """The synchronising operations of one call (CUDA only), counted from torch's sync debug warnings,
    and the device releases of exact noise made in that call."""
    if device.type != "cuda":
        return "n/a", "n/a"
    from pyg_private.sampling import device_release

    releases = [0]
    real = device_release.release

    def counting(*args, **kwargs):
        releases[0] += 1
        return real(*args, **kwargs)

    synchronize(device)
    device_release.release = counting  # the sampler calls it through the module
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
            device_release.release = real
    return str(sum("synchroniz" in str(w.message) for w in caught)), str(releases[0])


def peak_memory(fn: Callable[[], object], device: torch.device) -> str:
    if device.type != "cuda":
        return "n/a"
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    synchronize(device)
    return f"{(torch.cuda.max_memory_allocated(device) - before) / 2 ** 20:.0f} MiB"


def layer_cases(adj: torch.Tensor, x: torch.Tensor) -> list[tuple[str, str, Callable[[], object]]]:
    """(case, its anchor, call) for every release layer on this graph."""
    from torch_geometric.nn import APPNP

    from pyg_private.nn import ContractiveGraphLayer, GAPAggregation, ProGAPAggregation

    appnp = APPNP(K=10, alpha=0.1, cached=False)
    cases = [("APPNP(K=10), not private", "", lambda: appnp(x, adj))]
    for noise, extra in (("safe", {}), ("float", {"sampler": "float"}), ("secure", {"secure_mode": True})):
        cgl = ContractiveGraphLayer(10, 0.9, 0.9, 0.1, min_degree=0, noise_multiplier=1.0, cached=False, **extra)
        cases.append((f"ContractiveGraphLayer(K=10), {noise}", "APPNP(K=10), not private",
                      lambda layer=cgl: layer(x, adj)))
    for name, make in (("GAPAggregation(K=2)", lambda **kw: GAPAggregation(2, cached=False, **kw)),
                       ("ProGAPAggregation", lambda **kw: ProGAPAggregation(cached=False, **kw))):
        plain = make(noise_multiplier=0.0)
        anchor = f"{name}, no noise"
        cases.append((anchor, "", lambda layer=plain: layer(x, adj)))
        for noise, extra in (("safe", {}), ("float", {"sampler": "float"}), ("secure", {"secure_mode": True})):
            layer = make(noise_multiplier=1.0, **extra)
            cases.append((f"{name}, {noise}", anchor, lambda layer=layer: layer(x, adj)))
    return cases


def sampler_cases(n: int, device: torch.device) -> list[tuple[str, str, Callable[[], object]]]:
    from pyg_private.sampling import RandomSource, RoundedNoiseSampler

    gauss = RoundedNoiseSampler("gaussian", 2.0 ** 30 * 1.37)
    return [("torch.randn float32", "", lambda: torch.randn(n, device=device)),
            ("exact Gaussian, default source", "torch.randn float32", lambda: gauss.sample(n, RandomSource(device))),
            ("exact Gaussian, secure_mode", "torch.randn float32",
             lambda: gauss.sample(n, RandomSource(device, secure=True)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", nargs="+", default=["100k", "products"], choices=list(SIZES))
    parser.add_argument("--samples", type=int, default=1 << 24, help="samples per call of the sampler cases")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="CSV of every case")
    args = parser.parse_args()
    device = torch.device(args.device)
    warnings.filterwarnings("ignore", message=".*sampler='float'.*")
    warnings.filterwarnings("ignore", message=".*has no accountant.*")  # the benchmark releases nothing
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device {name}, torch {torch.__version__}, repeats {args.repeats} (median)", flush=True)
    rows = []

    def run(group: str, cases: list[tuple[str, str, Callable[[], object]]], count: int) -> None:
        seconds: dict[str, float] = {}
        for case, anchor, fn in cases:
            try:
                t = median_seconds(fn, args.repeats, device)
                (syncs, releases), memory = host_syncs(fn, device), peak_memory(fn, device)
            except Exception as error:  # a case that fails is reported, the others still run
                print(f"{group:>9} {case:42s} FAILED: {type(error).__name__}: {error}", flush=True)
                continue
            seconds[case] = t
            ratio = f"{t / seconds[anchor]:7.2f}x {anchor}" if anchor in seconds else ""
            rate = f"{count / t / 1e9:8.3f} G/s" if group == "sampler" else ""
            print(f"{group:>9} {case:42s} {t * 1e3:10.2f} ms {rate} syncs {syncs:>4} releases {releases:>3} "
                  f"peak {memory:>9} {ratio}", flush=True)
            rows.append({"group": group, "case": case, "anchor": anchor, "ms": t * 1e3,
                         "ratio": t / seconds[anchor] if anchor in seconds else "", "host_syncs": syncs,
                         "releases": releases, "peak": memory, "device": name})

    for size in args.sizes:
        n, m, f = SIZES[size]
        start = time.perf_counter()
        adj = random_csr(n, m, device)
        x = torch.randn(n, f, device=device)
        print(f"graph {size}: {n:,} nodes, {m:,} undirected edges, {f} channels "
              f"(built in {time.perf_counter() - start:.1f} s)", flush=True)
        run(size, layer_cases(adj, x), n * f)
        del adj, x
    run("sampler", sampler_cases(args.samples, device), args.samples)
    if args.out:
        with open(args.out, "w", newline="") as out:
            writer = csv.DictWriter(out, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
