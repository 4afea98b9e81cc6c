"""Samples per second of every noise sampler: float (open to floating-point attacks), safe (exact
integer noise on a grid, the default) and safe + secure_mode (every bit from the OS CSPRNG).

    python benchmarks/noise_samplers.py [--threads 2] [--n 6400000] [--repeats 5]

Each case draws --n samples; its figure is the best of --repeats rounds, the cases interleaved
round by round. The ratio is against the float sampler of the same distribution, in the same
process (the machine may be shared: ratios are more stable than absolute times). Printed, never
asserted.

  * float Gaussian: ``torch.randn`` in float64 (what the layers used), also float32
  * float Laplace: the difference of two exponentials (``pyg_private.mechanisms._noise.laplace_noise``)
  * safe: ``RoundedNoiseSampler`` at 2^30 grid steps per scale (the ratio hardly depends on it)
  * a release of float32 values, as the layers' hops make it: ``values.add_(randn)`` (float) against
    ``RoundedNoiseSampler.add_to_grid_`` (safe: the exact draws and the grid rounding in one fused
    pass); their ratio is against the float release
  * the safe release of fresh normal and of fresh subnormal values (a copy and a release each): their
    ratio shows whether the time of a release tells how many private values are tiny
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from pyg_private.mechanisms._noise import laplace_noise  # noqa: E402
from pyg_private.sampling import RandomSource, RoundedNoiseSampler  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n", type=int, default=6_400_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n = args.n
    scale = 2.0 ** 30 * 1.37
    gauss, lap = RoundedNoiseSampler("gaussian", scale), RoundedNoiseSampler("laplace", scale)
    values, noise = torch.randn(n), torch.empty(n)  # a hop's float32 values, and the float noise's buffer
    normal, work = torch.rand(n) + 0.5, torch.empty(n)
    subnormal = torch.rand(n) * torch.finfo(torch.float32).tiny  # below the smallest normal float32
    cases = {
        "float Gaussian (randn, float64)": lambda: torch.randn(n, dtype=torch.float64),
        "float Gaussian (randn, float32)": lambda: torch.randn(n),
        "safe Gaussian": lambda: gauss.sample(n, RandomSource()),
        "safe Gaussian, secure_mode": lambda: gauss.sample(n, RandomSource(secure=True)),
        "float Laplace (float64)": lambda: laplace_noise((n,), 1.0, device=torch.device("cpu")),
        "safe Laplace": lambda: lap.sample(n, RandomSource()),
        "safe Laplace, secure_mode": lambda: lap.sample(n, RandomSource(secure=True)),
        "float Gaussian release (float32)": lambda: values.add_(torch.randn(n, out=noise)),
        "safe Gaussian release (float32)": lambda: gauss.add_to_grid_(values, 2.0 ** -20, RandomSource()),
        # the same release of fresh values: normal ones, then subnormal ones (timing must not tell them apart)
        "safe release, normal values": lambda: gauss.add_to_grid_(work.copy_(normal), 2.0 ** -20, RandomSource()),
        "safe release, subnormal values": lambda: gauss.add_to_grid_(work.copy_(subnormal), 2.0 ** -20,
                                                                     RandomSource()),
    }
    best = {name: float("inf") for name in cases}
    for f in cases.values():  # warm-up
        f()
    for _ in range(args.repeats):
        for name, f in cases.items():
            start = time.perf_counter()
            f()
            best[name] = min(best[name], time.perf_counter() - start)
    print(f"{n:,} samples per call, best of {args.repeats}, {args.threads} threads, torch {torch.__version__}")
    anchors = {"Gaussian": best["float Gaussian (randn, float64)"], "Laplace": best["float Laplace (float64)"],
               "release": best["float Gaussian release (float32)"]}
    for name, t in best.items():
        kind = "release" if "release" in name else "Gaussian" if "Gaussian" in name else "Laplace"
        against = "float release" if kind == "release" else "float64"
        print(f"{name:34s} {n / t / 1e6:8.1f} M samples/s   {t * 1e3:8.1f} ms   {t / anchors[kind]:5.2f}x {against}")
    print(f"subnormal / normal values, the same release: "
          f"{best['safe release, subnormal values'] / best['safe release, normal values']:.3f}x")


if __name__ == "__main__":
    main()
