"""Throughput and peak memory of HDSFeaturePerturb on a large feature matrix (issue 6 benchmark;
the samplers of issue 14).

    python benchmarks/hds_feature_perturb.py [--threads 1] [--repeats 5] [--nodes 1000000]
                                             [--features 500] [--k 5 20] [--epsilon 1]
                                             [--samplers safe float secure] [--loop-rows 20000]

The input: --nodes x --features float32 features, uniform on [0, 1) (Pubmed has 500
TF-IDF features; this is 50 times its nodes), declared public range (0, 1). For each k:

  * HDSFeaturePerturb(epsilon, k, (0, 1)), dense output (the full matrix, k non-zeros a
    row), the dense output written into one buffer reused by every call (``transform(data,
    out=buffer)``: no fresh allocation, no page faults) and sparse_output=True (a COO tensor with
    k entries a row), for each sampler of
    --samplers: "safe" (the default: the exactly sampled grid law, words from a PCG64 stream
    seeded by the OS), "float" (sampler="float": the floating-point sampler of the continuous
    law, the code before issue 14) and "secure" (safe with secure_mode=True: every random
    word from os.urandom). Each call validates every perturbed row (finite, inside the public
    range), fingerprints the input (CRC-32, the re-release guard), charges one per-node event
    to an accountant, then perturbs the rows chunk by chunk. A fresh transform instance per
    call (the guard would refuse to release the same raw features twice). The figure is the
    median over --repeats calls; the cases are interleaved (one call of each in turn), so that
    the ratios to "float" printed at the end of each k compare calls made under the same load.
  * the reference: a per-row Python/NumPy loop of the same mechanism and checks (row
    finite and in range, k of d coordinates without replacement with
    numpy.random.Generator.choice, the square wave on each, written into a preallocated
    dense float32 output). It is timed on the first --loop-rows rows only and
    **extrapolated** linearly to --nodes rows (it is linear in the rows: one independent
    iteration each), after an uncounted warm-up on 1,000 rows; median over --repeats runs, one
    run in every round of the cases (interleaved, so that the speed-ups compare calls made under
    the same load).

Peak memory is the process's resident set size sampled every 2 ms during one more call of
each case (PeakRSS of benchmarks/ppr_blogcatalog.py), with its growth over the resident size
before that call: the input (4 bytes x nodes x features) is already resident, the dense
output adds as much again, the rest is the chunk temporaries.

Timings are printed, never asserted: other processes may share the machine.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch
from torch_geometric.data import Data

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from ppr_blogcatalog import PeakRSS  # noqa: E402
from pyg_private import PrivacyAccountant  # noqa: E402
from pyg_private.mechanisms.square_wave import square_wave_params  # noqa: E402
from pyg_private.transforms import HDSFeaturePerturb  # noqa: E402

try:
    _trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _trim = None


def numpy_loop(x: np.ndarray, epsilon: float, k: int, low: float, high: float, seed: int = 0) -> np.ndarray:
    """HDS one row at a time: the per-row reference the vectorised transform is compared with."""
    n, d = x.shape
    prm = square_wave_params(epsilon / k)
    b, near_p = prm.b, prm.near_probability
    rng = np.random.default_rng(seed)
    out = np.zeros((n, d), dtype=np.float32)
    for i in range(n):
        row = x[i]
        if not np.isfinite(row).all() or row.min() < low or row.max() > high:
            raise ValueError(f"row {i} is outside the public range")
        idx = rng.choice(d, k, replace=False)
        z = np.clip(2.0 * (row[idx].astype(np.float64) - low) / (high - low) - 1.0, -1.0, 1.0)
        eta, w = rng.random(k), rng.random(k)
        u = 2.0 * w
        far = np.where(u < z + 1.0, u - 1.0 - b, u - 1.0 + b)
        out[i, idx] = np.where(eta < near_p, z - b + 2.0 * b * w, far)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=500)
    ap.add_argument("--k", type=int, nargs="+", default=[5, 20])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--samplers", nargs="+", default=["safe", "float", "secure"],
                    choices=["safe", "float", "secure"])
    ap.add_argument("--loop-rows", type=int, default=20_000)
    ap.add_argument("--no-reuse-output", dest="reuse_output", action="store_false",
                    help="skip the cases that write the dense output into one reused buffer (`out=`)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)

    n, d, eps = args.nodes, args.features, args.epsilon
    x = torch.rand(n, d, generator=torch.Generator().manual_seed(0))
    print(f"HDSFeaturePerturb: {n:,} x {d} float32 features in [0, 1), epsilon={eps:g}, "
          f"torch threads={args.threads}, input {x.numel() * 4 / 2**20:,.0f} MiB", flush=True)
    x_np = x[: args.loop_rows].numpy()

    sampler_kwargs = {"safe": {}, "float": {"sampler": "float"}, "secure": {"secure_mode": True}}

    buffer = torch.empty_like(x) if args.reuse_output else None

    def case(k: int, sparse: bool, kwargs: dict, out=None):
        return lambda: HDSFeaturePerturb(eps, k, (0.0, 1.0), sparse_output=sparse, accountant=PrivacyAccountant(),
                                         **kwargs)(Data(x=x, num_nodes=n), out=out)

    for k in args.k:
        cases = {}
        for sampler in args.samplers:
            for sparse in (False, True):
                label = f"{sampler}, {'sparse_output=True' if sparse else 'dense output'}"
                cases[label] = case(k, sparse, sampler_kwargs[sampler])
                if buffer is not None and not sparse:
                    cases[f"{sampler}, dense into out="] = case(k, sparse, sampler_kwargs[sampler], buffer)
        print(f"\nk = {k}", flush=True)
        for fn in cases.values():
            fn()  # warm-up, not counted
        numpy_loop(x_np[:1000], eps, k, 0.0, 1.0)  # warm-up, not counted
        times = {name: [] for name in cases}
        loops = []
        for r in range(args.repeats):  # interleaved: every case and the loop see the same background load
            for name, fn in cases.items():
                t0 = time.perf_counter()
                out = fn()
                times[name].append(time.perf_counter() - t0)
                del out
            t0 = time.perf_counter()
            numpy_loop(x_np, eps, k, 0.0, 1.0, seed=r)
            loops.append((time.perf_counter() - t0) * n / args.loop_rows)  # extrapolated to n rows
        medians = {}
        for name, fn in cases.items():
            if _trim is not None:
                _trim(0)
            with PeakRSS() as mem:
                out = fn()
            del out
            med = medians[name] = statistics.median(times[name])
            print(f"  {name:<30} median {med:6.2f} s  ({n / med:>12,.0f} rows/s, min {min(times[name]):.2f} s)  "
                  f"{mem}", flush=True)
        for layout in ("dense output", "dense into out=", "sparse_output=True"):
            base = medians.get(f"float, {layout}")
            if base is None:
                continue
            for sampler in ("safe", "secure"):
                med = medians.get(f"{sampler}, {layout}")
                if med is not None:
                    ratio = [a / b for a, b in zip(times[f"{sampler}, {layout}"], times[f"float, {layout}"])]
                    print(f"  time {sampler} / float ({layout}): {med / base:.2f}x of the medians "
                          f"(median of the per-round ratios {statistics.median(ratio):.2f}x)", flush=True)
        loop = statistics.median(loops)
        print(f"  {'per-row NumPy loop':<22} median {loop * args.loop_rows / n:6.2f} s for {args.loop_rows:,} rows "
              f"({n / loop:>12,.0f} rows/s; extrapolated to {n:,} rows: {loop:,.1f} s)", flush=True)
        for name in cases:
            per_round = statistics.median(a / b for a, b in zip(loops, times[name]))
            print(f"  speed-up of {name}: {loop / medians[name]:.1f}x over the loop (medians; median of the "
                  f"per-round ratios {per_round:.1f}x)", flush=True)


if __name__ == "__main__":
    main()
