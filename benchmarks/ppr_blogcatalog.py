"""Time and memory of the private PPR releases on BlogCatalog (issues 3 and 17 benchmark).

    python benchmarks/ppr_blogcatalog.py [--threads 1] [--seeds 100] [--repeats 3] [--epsilon 0.1]
                                         [--skip-authors] [--skip-flip-ppr]

Measures, for 100 random seeds and K = 100 lazy-PPR steps (beta = 0.8, eta = 1e-7):
  * noise-free batched lazy PPR (`pyg_private.utils.lazy_ppr`), the reference;
  * `NoisyPPRDiffusion` (personalized, `--epsilon`, delta 1/|E|, the default floating-point-safe
    sampler) as one batched diffusion: one sparse-dense product per step for all columns plus
    N x C exact integer draws of the rounded sum of two Laplace variables;
  * its noise steps alone: the K grid releases of the N x C iterate that release makes (the exact
    draws of the K x N x C integers, at its scale in grid steps, and the grid rounding, in the
    same call as the release: `RoundedNoiseSampler.add_to_grid_`), the part of the release no
    propagation speed-up can remove;
  * the authors' per-seed NumPy/SciPy code for the same release (`PrivatePageRankClip.
    compute_private_pagerank_threshold` of github.com/Jesson-Wei/DP_GraphDiffusion, model.py,
    MIT licence, with personalize=True, middlestep=0, noise_type='Laplacian', ported below with
    its matrix construction), run in the same process, alternately with `NoisyPPRDiffusion`;
    the ratio of the two is printed for CPU time (time.process_time) and wall time;
  * `DPPushFlowCap` with the same seeds;
  * Edge flipping at epsilon = 1: the randomised graph (`flip_edges`) and the 100-seed
    PPR on it with each seed's own edges restored (`EdgeFlippingPPR`).
Times include graph validation. CPU time is the process's (all threads), the figure to compare on
a shared machine. Peak memory is the process's resident set size sampled every 2 ms during the
call (and its growth over the resident size before the call); `faults` counts the minor page faults
(ru_minflt) of the call. Targets from the issues: the noisy diffusion in at most 3 s on 2 CPU cores
(issue 3); at least 5x the authors' code in the same process, one thread (issue 17).
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import threading
import time
import warnings

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from pyg_private.datasets import load_blogcatalog  # noqa: E402
from pyg_private.mechanisms import flip_edges  # noqa: E402
from pyg_private.nn import DPPushFlowCap, EdgeFlippingPPR, NoisyPPRDiffusion  # noqa: E402
from pyg_private.utils import lazy_ppr, simple_undirected  # noqa: E402
from pyg_private.accounting import truth_probability  # noqa: E402
from pyg_private.sampling import RandomSource, RoundedNoiseSampler  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


class PeakRSS:
    """Samples the resident set size in a background thread while the block runs."""

    def __enter__(self) -> "PeakRSS":
        self.before = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.002)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    def __str__(self) -> str:
        return f"peak RSS {self.peak / 2**20:7.0f} MiB (+{(self.peak - self.before) / 2**20:.0f} MiB during the call)"


class Run:
    """One timed call: wall and CPU seconds, minor page faults, and the peak memory."""

    def __init__(self, fn) -> None:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        with PeakRSS() as self.mem:
            cpu, wall = time.process_time(), time.perf_counter()
            out = fn()
            self.wall, self.cpu = time.perf_counter() - wall, time.process_time() - cpu
        self.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        del out


def timed(fn, repeats: int) -> list[Run]:
    return [Run(fn) for _ in range(repeats)]


def line(name: str, runs: list[Run]) -> None:
    wall, cpu = [r.wall for r in runs], [r.cpu for r in runs]
    mem = max(runs, key=lambda r: r.mem.peak).mem
    print(f"{name:<44} wall median {statistics.median(wall):6.2f} s  min {min(wall):6.2f} s  "
          f"cpu median {statistics.median(cpu):6.2f} s  faults {statistics.median(r.faults for r in runs):7.0f}  "
          f"{mem}", flush=True)


def authors_private_ppr(edge_index: torch.Tensor, seeds: np.ndarray, *, beta: float, eta: float, sigma: float,
                        max_iter: int, rng: np.random.RandomState) -> np.ndarray:
    """The authors' release, one seed at a time: `PrivatePageRankClip` (create_matrices,
    create_transition_matrix) and `propagate_selected` -> `compute_private_pagerank_threshold` with
    personalize=True, middlestep=0, noise_type='Laplacian', c=1, as in model.py (MIT licence,
    Copyright (c) 2025 Rongzhe Wei), statement for statement; the edge list is read from
    `edge_index` instead of a pandas frame (each undirected edge once, as in edges.csv), the global
    NumPy random state is a `RandomState` argument (the same legacy sampler), and the unused
    `clip_transition_matrix` of the constructor is left out (it only serves the other noise types)."""
    row, col = edge_index.numpy()
    upper = row < col
    edges = np.stack([row[upper], col[upper]], 1)
    num_nodes = edges.max() + 1  # the authors' convention: the largest id + 1
    A = sp.coo_matrix((np.ones(edges.shape[0]), (edges[:, 0], edges[:, 1])), shape=(num_nodes, num_nodes),
                      dtype=np.float64)
    A = A + A.T - sp.diags(A.diagonal())
    D = sp.diags(np.array(A.sum(axis=1)).flatten(), offsets=0)
    degrees = D.diagonal()
    inv_degrees = np.reciprocal(degrees, where=degrees != 0)
    P = A.dot(sp.diags(inv_degrees, offsets=0)).tocsr()

    def project_onto_simplex(v, z=1):
        v = np.asarray(v, dtype=np.float64)
        n_features = v.shape[0]
        u = np.sort(v)[::-1]
        cssv = np.cumsum(u) - z
        ind = np.arange(n_features, dtype=np.float64) + 1
        cond = u - cssv / ind > 0
        rho = ind[cond][-1]
        theta = cssv[cond][-1] / float(rho)
        return np.maximum(v - theta, 0)

    score_matrix = np.zeros((seeds.shape[0], num_nodes))
    for idx, node_index in enumerate(seeds):
        s = np.zeros((num_nodes, 1))
        s[node_index] = 1
        p = s.copy()
        source_node_index = np.argmax(s)
        W = 0.5 * (sp.eye(num_nodes) + P)
        eta_D = eta * D.diagonal()
        eta_D[source_node_index] = 1
        eta_D = eta_D.reshape(-1, 1)
        for i in range(max_iter):
            p = (1 - beta) * s + beta * W.dot(p)
            if i > 0:  # middlestep = 0
                noise1 = rng.laplace(scale=sigma / np.sqrt(2), size=p.shape)
                noise2 = rng.laplace(scale=sigma / np.sqrt(2), size=p.shape)
                p = p + noise1 + noise2
                if i < max_iter - 1:
                    p = project_onto_simplex(p.flatten())
                    p = p.reshape(-1, 1)
                    p = np.minimum(np.maximum(p, 0), eta_D)
                p = p.reshape(-1, 1)
            else:
                p = p.reshape(-1, 1)
        score_matrix[idx, :] = p.T
    return score_matrix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (1 for the comparison with the authors' "
                                                           "code, which runs on one)")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=0.1, help="epsilon of the NoisyPPRDiffusion and DPPushFlowCap "
                                                               "releases (delta = 1/|E|)")
    ap.add_argument("--skip-authors", action="store_true", help="skip the authors' per-seed code")
    ap.add_argument("--only-diffusion", action="store_true",
                    help="only the lazy PPR, NoisyPPRDiffusion, its sampler and the authors' code")
    ap.add_argument("--skip-flip-ppr", action="store_true", help="skip the 100-seed PPR on the flipped graph")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)

    data = load_blogcatalog()
    ei, n = simple_undirected(data.edge_index, data.num_nodes)
    num_edges = ei.size(1) // 2
    seeds = torch.randperm(n, generator=torch.Generator().manual_seed(123))[: args.seeds]
    k, eps = args.iterations, args.epsilon
    print(f"BlogCatalog: {n} nodes, {num_edges} edges; {args.seeds} seeds, K = {k}, beta = 0.8; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)

    line("noise-free batched lazy PPR", timed(
        lambda: lazy_ppr(ei, n, seed_index=seeds, alpha=0.2, num_iterations=k), args.repeats))
    noisy = NoisyPPRDiffusion(alpha=0.2, num_iterations=k, eta=1e-7, epsilon=eps, delta=1.0 / num_edges,
                              personalized=True, cached=False)  # every call a fresh release
    release = lambda: noisy(edge_index=ei, seed_index=seeds, num_nodes=n)  # noqa: E731
    release()  # builds the exact sampler's table for this scale once (cached by the library)
    name = f"NoisyPPRDiffusion (personalized, eps {eps:g})"
    if args.skip_authors:
        line(name, timed(release, args.repeats))
    else:
        rng = np.random.RandomState(0)
        ours, theirs = [], []
        for _ in range(args.repeats):  # alternately, so that both meet the same load on a shared machine
            theirs.append(Run(lambda: authors_private_ppr(ei, seeds.numpy(), beta=0.8, eta=1e-7,
                                                          sigma=noisy.noise_scale, max_iter=k, rng=rng)))
            ours.append(Run(release))
        line(name, ours)
        line("authors' code, one seed at a time (NumPy)", theirs)
        med = statistics.median
        print(f"{'':<44} speed-up over the authors' code: {med(r.cpu for r in theirs) / med(r.cpu for r in ours):.2f}x "
              f"CPU time, {med(r.wall for r in theirs) / med(r.wall for r in ours):.2f}x wall time"
              + ("" if torch.get_num_threads() == 1 else " (the authors' code uses one thread)"), flush=True)
    grid = noisy.plan_grid(n)
    steps = grid.noise_scale / grid.granularity
    sampler, source = RoundedNoiseSampler("two_laplace", steps), RandomSource("cpu")
    iterate = torch.zeros(n, seeds.numel(), dtype=torch.float64)

    def draws() -> None:  # the release's noise step, K times: exact draws and the grid rounding, one call each
        for _ in range(k):
            sampler.add_to_grid_(iterate, grid.granularity, source, on_scale=True)

    line(f"  its noise steps alone (2^{math.log2(steps):.1f} steps)", timed(draws, args.repeats))
    if args.only_diffusion:
        return
    push = DPPushFlowCap(alpha=0.2, num_iterations=k, eta=1e-6, epsilon=eps, delta=1.0 / num_edges,
                         personalized=True, cached=False)
    line(f"DPPushFlowCap (personalized, eps {eps:g})", timed(
        lambda: push(edge_index=ei, seed_index=seeds, num_nodes=n), args.repeats))

    q = truth_probability(epsilon=1.0)
    runs = timed(lambda: flip_edges(ei, n, q), args.repeats)
    released = flip_edges(ei, n, q, generator=torch.Generator().manual_seed(0))
    line("edge flipping eps 1: flip_edges", runs)
    print(f"{'':<44} released graph: {released.size(1) // 2} edges "
          f"({released.size(1) // 2 / num_edges:.1f}x the true graph)", flush=True)
    del released
    if not args.skip_flip_ppr:
        flip = EdgeFlippingPPR(alpha=0.2, num_iterations=k, epsilon=1.0, personalized=True, cached=False)
        line("edge flipping eps 1: flip + 100-seed PPR", timed(
            lambda: flip(edge_index=ei, seed_index=seeds, num_nodes=n), 1))


if __name__ == "__main__":
    main()
