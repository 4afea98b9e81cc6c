"""Wall time and peak memory of appr_propagate next to PyG's APPNP.

    python benchmarks/appr_propagation.py [--threads 2] [--repeats 7] [--nodes 100000] [--edges 1000000]
                                          [--channels 64] [--K 10] [--alpha 0.1]

The graph and the measurement are those of ``benchmarks/caribou_layer.py`` (imported from
it): --nodes nodes and --edges *undirected* edges (uniform random pairs, no self-loop, no
duplicate) stored in both directions; float32 N(0, 1) features with --channels columns; every
round runs each case once, the order rotating from round to round, after one uncounted
warm-up round; a case's figure is its median over --repeats rounds; peak memory is the
resident set size sampled during one more call of each case.

  * reference: APPNP(K, alpha, cached=False) given the torch.sparse CSR adjacency (float32
    ones). Uncached, it normalises on every call (PyG's gcn_norm adds the self-loops through
    edge_index and builds a new, sorted CSR), then runs K products.
  * appr_propagate(x, csr, alpha, steps=K) (GCON's r = 0 with self-loops): target no slower
    than the reference. It checks the CSR is simple and undirected, builds
    (1 - alpha) D^-1 A with the self-loop diagonal, then runs K products.
  * appr_propagate(x, edge_index, ...): validation (coalesce, symmetry) and the CSR built
    inside; target at most 1.5x the reference.
  * for information: appr_propagate with r = 1/2 and self-loops (APPNP's own operator,
    whose output is compared with APPNP's) and with r = 1/2 without self-loops (PrivGE);
    APPNP with cached=True (normalised once, then K products) and APPNP given the edge_index
    (gather/scatter message passing); with torch_sparse installed, APPNP on a SparseTensor.

Timings are printed, never asserted: other processes may share the machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

import torch
from torch_geometric.nn import APPNP
from torch_geometric.utils import to_torch_csr_tensor

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from caribou_layer import SparseTensor, measure, random_graph  # noqa: E402
from pyg_private.utils import appr_propagate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=1_000_000, help="undirected edges (each stored twice)")
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=0.1)
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # CSR-beta notices
    torch.set_num_threads(args.threads)

    n, k, alpha = args.nodes, args.K, args.alpha
    ei = random_graph(n, args.edges)
    x = torch.randn(n, args.channels, generator=torch.Generator().manual_seed(1))
    csr = to_torch_csr_tensor(ei, size=(n, n))
    print(f"synthetic graph: {n} nodes, {args.edges} undirected edges ({ei.size(1)} directed entries), "
          f"{args.channels} float32 channels, K = steps = {k}, alpha = {alpha}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; torch_sparse {'installed' if SparseTensor else 'not installed'}; "
          f"medians of {args.repeats} interleaved rounds", flush=True)

    appnp = APPNP(K=k, alpha=alpha, cached=False)
    appnp_cached = APPNP(K=k, alpha=alpha, cached=True)
    appnp_cached(x, csr)  # fills its cache

    # sanity: r = 1/2 with self-loops is APPNP's D^-1/2 (A + I) D^-1/2
    diff = float((appr_propagate(x, csr, alpha=alpha, steps=k, r=0.5) - appnp(x, csr)).abs().max())
    print(f"max |appr_propagate(r=1/2, self-loops) - APPNP| = {diff:.2e} (float32)", flush=True)

    reference = f"APPNP(K={k}), uncached, torch.sparse CSR"
    cases = {
        reference: lambda: appnp(x, csr),
        "appr_propagate, CSR (r=0, self-loops)": lambda: appr_propagate(x, csr, alpha=alpha, steps=k),
        "appr_propagate, edge_index (r=0, self-loops)": lambda: appr_propagate(x, ei, alpha=alpha, steps=k),
        "appr_propagate, CSR, r=1/2 (info)": lambda: appr_propagate(x, csr, alpha=alpha, steps=k, r=0.5),
        "appr_propagate, CSR, r=1/2, no loops (info)":
            lambda: appr_propagate(x, csr, alpha=alpha, steps=k, r=0.5, self_loops=False),
        "APPNP, cached normalisation (info)": lambda: appnp_cached(x, csr),
        "APPNP, edge_index (info)": lambda: appnp(x, ei),
    }
    if SparseTensor is not None:
        adj_t = SparseTensor.from_edge_index(ei, sparse_sizes=(n, n))
        cases["APPNP, uncached, SparseTensor (info)"] = lambda: appnp(x, adj_t)
    results = measure(cases, args.repeats)

    medians = {name: statistics.median(times) for name, (times, *_) in results.items()}
    fastest_appnp = min(t for name, t in medians.items() if name.startswith("APPNP") and "cached norm" not in name)
    targets = {"appr_propagate, CSR (r=0, self-loops)": 1.0, "appr_propagate, edge_index (r=0, self-loops)": 1.5}
    for name, (times, mem, *_) in results.items():
        median = medians[name]
        ratio = f"{median / fastest_appnp:5.2f}x APPNP"
        if name in targets:
            verdict = "meets" if median / fastest_appnp <= targets[name] else "MISSES"
            ratio += f" (target <= {targets[name]}x: {verdict})"
        print(f"{name:<46} median {median:6.3f} s  min {min(times):6.3f} s  {ratio:<38} {mem}", flush=True)
    cached = medians["APPNP, cached normalisation (info)"]
    print(f"(ratios are against APPNP's fastest uncached form, {fastest_appnp:.3f} s; against cached APPNP, "
          f"{cached:.3f} s, the CSR form is {medians['appr_propagate, CSR (r=0, self-loops)'] / cached:.2f}x)",
          flush=True)


if __name__ == "__main__":
    main()
