"""The package's order of summation of ``A @ x`` across paths and devices, and what it costs.

    python benchmarks/csr_summation_order.py [--nodes 100000] [--edges 1000000] [--channels 64]
                                             [--repeats 5] [--threads N]

Two graphs: a uniform random one and a skewed one (endpoints drawn with probability ~ 1/rank, so
that a few rows are very long), both undirected, ``--edges`` undirected edges on ``--nodes`` nodes,
weighted (GCN-like values). For float32 and float64 features it prints:

  * whether the C kernel (CPU), the torch path on the CPU and the torch path on CUDA (where a GPU
    is present) give the same bits;
  * how many entries of torch's own CSR products (MKL or torch's kernel on the CPU, cuSPARSE on
    CUDA) differ from ours, and their largest difference as a fraction of the rounding bound of
    two summation orders (must be <= 1);
  * the median time of ``--repeats`` products of each path, and its ratio to torch's product on
    the same device, in the same process.

Printed, never asserted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from pyg_private.utils.csr_product import (CsrProduct, csr_product_available, reference_csr_product,  # noqa: E402
                                           summation_error_bound)

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


def graph(n: int, m: int, skewed: bool, seed: int = 0) -> torch.Tensor:
    """A weighted undirected CSR adjacency (float64 values D^-1/2 A D^-1/2) with about m edges."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.randint(0, n, (m,), generator=gen)
    if skewed:
        weights = 1.0 / torch.arange(1, n + 1, dtype=torch.float64)
        v = torch.multinomial(weights, m, replacement=True, generator=gen)
    else:
        v = torch.randint(0, n, (m,), generator=gen)
    keep = u != v
    u, v = u[keep], v[keep]
    key = torch.unique(torch.cat([u * n + v, v * n + u]))
    row, col = key // n, key % n
    deg = torch.bincount(row, minlength=n).to(torch.float64)
    crow = torch.zeros(n + 1, dtype=torch.int64)
    crow[1:] = deg.long().cumsum(0)
    values = deg[row].rsqrt() * deg[col].rsqrt()
    return torch.sparse_csr_tensor(crow.int(), col.int(), values, (n, n))


def median_time(fn, repeats: int, cuda: bool) -> float:
    fn()  # warm-up (plans, caches, kernels)
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int64 if t.dtype == torch.float64 else torch.int32)


def compare(adj, x, ours, theirs) -> str:
    theirs = theirs.to(ours.device)
    differ = int((bits(ours) != bits(theirs)).sum())
    bound = summation_error_bound(adj, x)
    ratio = float(((ours.double() - theirs.double()).abs() / bound.clamp_min(1e-300)).max())
    return f"{differ} of {ours.numel()} entries differ, max |diff| / bound = {ratio:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    print(f"torch {torch.__version__}, {args.threads} threads, C kernel: {csr_product_available()}, "
          f"CUDA: {torch.cuda.get_device_name() if cuda else 'none'}")
    for skewed in (False, True):
        a64 = graph(args.nodes, args.edges, skewed)
        length = a64.crow_indices().diff()
        print(f"\n{'skewed' if skewed else 'uniform'} graph: {args.nodes} nodes, {a64.values().numel()} entries, "
              f"longest row {int(length.max())}")
        for dtype in (torch.float32, torch.float64):
            adj = torch.sparse_csr_tensor(a64.crow_indices(), a64.col_indices(), a64.values().to(dtype), a64.shape)
            x = torch.randn(args.nodes, args.channels, dtype=torch.float64,
                            generator=torch.Generator().manual_seed(1)).to(dtype)
            kernel, fallback = CsrProduct(adj), CsrProduct(adj, native=False)
            ours = kernel(x)
            print(f"  {str(dtype)[6:]}: C kernel ran: {kernel.native}; torch path on the CPU same bits: "
                  f"{torch.equal(bits(fallback(x)), bits(ours))}")
            print(f"    torch.sparse.mm (CPU): {compare(adj, x, ours, torch.sparse.mm(adj, x))}")
            t_torch = median_time(lambda: torch.sparse.mm(adj, x), args.repeats, False)
            t_kernel = median_time(lambda: kernel(x), args.repeats, False)
            t_fallback = median_time(lambda: fallback(x), args.repeats, False)
            print(f"    CPU: torch.sparse.mm {1e3 * t_torch:.1f} ms, CsrProduct {1e3 * t_kernel:.1f} ms "
                  f"({t_kernel / t_torch:.2f}x), torch path {1e3 * t_fallback:.1f} ms ({t_fallback / t_torch:.2f}x)")
            if cuda:
                gadj, gx = adj.to("cuda"), x.to("cuda")
                gproduct = CsrProduct(gadj)
                gours = gproduct(gx)
                print(f"    CUDA torch path same bits as the CPU kernel: {torch.equal(bits(gours.cpu()), bits(ours))}")
                print(f"    torch.sparse.mm (CUDA): {compare(adj, x, ours, torch.sparse.mm(gadj, gx))}")
                g_torch = median_time(lambda: torch.sparse.mm(gadj, gx), args.repeats, True)
                g_ours = median_time(lambda: gproduct(gx), args.repeats, True)
                print(f"    CUDA: torch.sparse.mm {1e3 * g_torch:.2f} ms, CsrProduct {1e3 * g_ours:.2f} ms "
                      f"({g_ours / g_torch:.1f}x)")


if __name__ == "__main__":
    main()
