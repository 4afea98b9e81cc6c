"""Adversarial search for the L1 sensitivity of the capped push-flow PPR (DP-PushFlowCap). NOT part of the suite.

Claim under test (spec §4.1):  ||p(G) - p(G')||_1 <= Delta1 = (3 - a)(1 - (1 - a)^iters) * eta  for neighbouring
G, G' (one undirected edge added or removed; personalized mode: the edge is not incident to the seed).

Run:  .venv/bin/python tests/nn/explore_push_flow_sensitivity.py [--quick]

Phases (every phase tracks the largest ratio ||p - p'||_1 / Delta1 per (mode, alpha, iters)):
  1. exhaustive over every graph with 2..7 nodes (networkx graph atlas, 1252 graphs), every seed, every
     neighbouring graph, a log grid of eta, several iteration counts and restart probabilities;
  2. random G(n, p) graphs (n = 3..9) and structured graphs (double stars, stars, paths, cycles, cliques,
     brooms) up to 14 nodes;
  3. hill climbing over graphs with n <= 8 (toggle edges, move log eta) maximising the ratio, separately per
     (mode, iters) at alpha = 0.2 and over all iters at alpha = 0.9 and 0.99.
It uses a batched NumPy implementation (`batched_push_flow`) that is first checked against the loop reference.
"""
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from push_flow_reference import reference_push_flow, sensitivity_bound  # noqa: E402

ITERS = (1, 2, 3, 5, 10, 30, 100)
ALPHAS = (0.2, 0.05, 0.5, 0.9)
MODES = (True, False)  # personalized?


def batched_push_flow(adjs, seeds, alpha, iters_list, etas, personalized):
    """Same algorithm as the reference, vectorised over a batch of (graph, seed, eta) triples.

    adjs: (B, n, n) 0/1; seeds: (B,) ints; etas: scalar or (B,). Returns {iters: (B, n) p after `iters` steps}.
    """
    adjs = np.asarray(adjs, dtype=np.float64)
    b, n, _ = adjs.shape
    deg = adjs.sum(axis=2)
    inv = np.where(deg > 0, 1.0 / np.where(deg > 0, deg, 1.0), 0.0)
    cap = np.broadcast_to(np.asarray(etas, dtype=np.float64).reshape(-1, 1), (b, 1)) * deg
    rows = np.arange(b)
    if personalized:
        cap[rows, seeds] = np.inf
    r = np.zeros((b, n))
    r[rows, seeds] = 1.0
    h = np.zeros((b, n))
    p = np.zeros((b, n))
    out = {0: p.copy()}
    for t in range(1, max(iters_list) + 1):
        f = np.maximum(0.0, np.minimum(r, cap - h))
        h += f
        p += alpha * f
        spread = np.einsum("bvu,bv->bu", adjs, f * inv)  # sum_v A[v, u] f_v / d_v
        r = r - f + (1.0 - alpha) / 2.0 * f + (1.0 - alpha) / 2.0 * spread
        if t in iters_list:
            out[t] = p.copy()
    return out


def neighbour_variants(adj, seed, personalized):
    """All graphs differing from adj by one undirected edge (not incident to the seed if personalized)."""
    n = adj.shape[0]
    variants, edges = [], []
    for u, v in itertools.combinations(range(n), 2):
        if personalized and seed in (u, v):
            continue
        g = adj.copy()
        g[u, v] = g[v, u] = 1 - g[u, v]
        variants.append(g)
        edges.append((u, v))
    return variants, edges


def edge_list(adj):
    return [(int(u), int(v)) for u, v in zip(*np.nonzero(np.triu(adj)))]


def from_edges(n, edges):
    a = np.zeros((n, n), dtype=np.int64)
    for u, v in edges:
        a[u, v] = a[v, u] = 1
    return a


class Record:
    """Largest ratio per (personalized, alpha, iters) and the configuration that achieved it."""

    def __init__(self):
        self.best = {}

    def update(self, key, ratio, config):
        if key not in self.best or ratio > self.best[key][0]:
            self.best[key] = (float(ratio), config)

    def merge(self, other, tag):
        for key, (ratio, cfg) in other.best.items():
            self.update(key, ratio, dict(cfg, tag=tag))

    def max_over(self, personalized, alpha=None, iters=None):
        keys = [k for k in self.best if k[0] == personalized and (alpha is None or k[1] == alpha)
                and (iters is None or k[2] == iters)]
        if not keys:
            return -1.0, None
        k = max(keys, key=lambda k: self.best[k][0])
        return self.best[k]


def scan_graph(adj, alpha, etas, personalized, iters_list, record, tag=""):
    """Every seed x every neighbouring graph x every eta, batched. Returns the max ratio seen for this graph."""
    n = adj.shape[0]
    etas = np.atleast_1d(np.asarray(etas, dtype=np.float64))
    graphs, meta = [], []
    for s in range(n):
        variants, edges = neighbour_variants(adj, s, personalized)
        if not variants:
            continue
        graphs.append(adj)
        meta.append((s, None))
        for g, e in zip(variants, edges):
            graphs.append(g)
            meta.append((s, e))
    if not graphs:
        return 0.0
    m = len(graphs)
    stack = np.stack(graphs)
    seeds = np.array([x[0] for x in meta])
    out = batched_push_flow(np.tile(stack, (len(etas), 1, 1)), np.tile(seeds, len(etas)), alpha, iters_list,
                            np.repeat(etas, m), personalized)
    base_index = np.zeros(m, dtype=np.int64)
    for i, (s, e) in enumerate(meta):
        base_index[i] = i if e is None else base_index[i - 1]
    is_pair = np.array([e is not None for _, e in meta])
    worst = 0.0
    for t in iters_list:
        p = out[t].reshape(len(etas), m, n)
        diff = np.abs(p - p[:, base_index]).sum(axis=2)  # (n_eta, m)
        bounds = np.array([sensitivity_bound(alpha, t, eta) for eta in etas])
        if np.any(bounds == 0):
            continue
        ratio = np.where(is_pair[None], diff / bounds[:, None], -1.0)
        j, i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        worst = max(worst, ratio[j, i])
        s, e = meta[i]
        record.update((personalized, alpha, t), ratio[j, i],
                      dict(tag=tag, n=n, edges=edge_list(adj), seed=s, toggled=e, added=bool(adj[e] == 0),
                           alpha=alpha, eta=float(etas[j]), iters=t,
                           abs_diff=float(diff[j, i]), delta1=float(bounds[j])))
    return worst


def self_check(rng):
    for _ in range(200):
        n = int(rng.integers(1, 9))
        a = np.triu((rng.random((n, n)) < rng.random()).astype(np.int64), 1)
        a = a + a.T
        s = int(rng.integers(n))
        alpha, eta = float(rng.choice(ALPHAS)), float(10 ** rng.uniform(-4, 0.5))
        pers = bool(rng.integers(2))
        out = batched_push_flow(a[None], np.array([s]), alpha, [1, 7, 30], eta, pers)
        for t in (1, 7, 30):
            ref = reference_push_flow(a, s, alpha, t, eta, pers)
            assert np.allclose(out[t][0], ref, atol=1e-14, rtol=0), (n, s, t)
    print("batched implementation agrees with the reference", flush=True)


def double_star(k1, k2):
    """Hubs 0 and 1 joined by an edge; hub 0 has k1 leaves, hub 1 has k2 leaves."""
    edges = [(0, 1)] + [(0, 2 + i) for i in range(k1)] + [(1, 2 + k1 + i) for i in range(k2)]
    return from_edges(2 + k1 + k2, edges)


def structured_graphs(max_n):
    out = {}
    for k1 in range(0, max_n - 1):
        for k2 in range(k1, max_n - 1 - k1):
            out[f"double_star({k1},{k2})"] = double_star(k1, k2)
    for n in range(3, max_n + 1):
        out[f"star({n})"] = from_edges(n, [(0, i) for i in range(1, n)])
        out[f"path({n})"] = from_edges(n, [(i, i + 1) for i in range(n - 1)])
        out[f"cycle({n})"] = from_edges(n, [(i, (i + 1) % n) for i in range(n)])
        out[f"clique({n})"] = from_edges(n, list(itertools.combinations(range(n), 2)))
        for handle in range(1, n - 1):  # broom: path 0..handle, star at the end
            out[f"broom({n},{handle})"] = from_edges(n, [(i, i + 1) for i in range(handle)]
                                                     + [(handle, j) for j in range(handle + 1, n)])
    return out


def phase_atlas(record, etas, alphas):
    import networkx as nx
    from networkx.generators.atlas import graph_atlas_g

    graphs = [nx.to_numpy_array(g, dtype=np.int64) for g in graph_atlas_g() if g.number_of_nodes() >= 2]
    t0 = time.time()
    for alpha in alphas:
        for adj in graphs:
            for pers in MODES:
                scan_graph(adj, alpha, etas, pers, ITERS, record, tag="atlas")
        print(f"  atlas alpha={alpha}: pers {record.max_over(True, alpha)[0]:.6f}  "
              f"non-pers {record.max_over(False, alpha)[0]:.6f}  ({time.time() - t0:.0f}s)", flush=True)


def phase_random(record, rng, etas, count, max_structured_n):
    for _ in range(count):
        n = int(rng.integers(3, 10))
        a = np.triu((rng.random((n, n)) < rng.uniform(0.1, 0.9)).astype(np.int64), 1)
        a = a + a.T
        for alpha in ALPHAS:
            for pers in MODES:
                scan_graph(a, alpha, etas, pers, ITERS, record, tag="gnp")
    print(f"  random G(n,p): pers {record.max_over(True)[0]:.6f}  non-pers {record.max_over(False)[0]:.6f}",
          flush=True)
    for name, adj in structured_graphs(max_structured_n).items():
        for alpha in ALPHAS:
            for pers in MODES:
                scan_graph(adj, alpha, etas, pers, ITERS, record, tag=name)
    print(f"  structured: pers {record.max_over(True)[0]:.6f}  non-pers {record.max_over(False)[0]:.6f}",
          flush=True)


def hill_climb(record, rng, personalized, alpha, iters_list, restarts, steps, max_n=8):
    """Maximise the ratio over (graph on n <= max_n nodes, log eta) for fixed mode, alpha and iters."""
    for _ in range(restarts):
        n = int(rng.integers(3, max_n + 1))
        a = np.triu((rng.random((n, n)) < rng.uniform(0.2, 0.8)).astype(np.int64), 1)
        a = a + a.T
        log_eta = rng.uniform(-3, 0)
        local = Record()
        cur = scan_graph(a, alpha, [10 ** log_eta], personalized, iters_list, local, tag="hill_climb")
        for _ in range(steps):
            b, le = a.copy(), log_eta
            move = rng.integers(3)
            if move <= 1:
                for _ in range(int(rng.integers(1, 3))):
                    u, v = rng.choice(n, 2, replace=False)
                    b[u, v] = b[v, u] = 1 - b[u, v]
            if move >= 1:
                le = float(np.clip(log_eta + rng.normal(0, 0.15), -5, 1))
            new = scan_graph(b, alpha, [10 ** le], personalized, iters_list, local, tag="hill_climb")
            if new >= cur:
                a, log_eta, cur = b, le, new
        record.merge(local, "hill_climb")


def report(record):
    for pers in MODES:
        name = "personalized" if pers else "non-personalized"
        ratio, cfg = record.max_over(pers)
        print(f"\n{name}: max ratio {ratio:.12f}\n    {cfg}")
        for alpha in ALPHAS + (0.99,):
            row = []
            for t in ITERS:
                r, _ = record.max_over(pers, alpha, t)
                row.append(f"T={t}:{r:.4f}")
            print(f"    alpha={alpha}: " + "  ".join(row))


def main():
    quick = "--quick" in sys.argv
    rng = np.random.default_rng(12345)
    self_check(rng)
    record = Record()
    etas = list(np.geomspace(1e-4, 3.0, 10 if quick else 46)) + [0.05, 0.3, 1e3]
    phase_atlas(record, etas, (0.2,) if quick else ALPHAS)
    phase_random(record, rng, etas, 20 if quick else 300, 10 if quick else 14)
    t0 = time.time()
    for pers in MODES:
        for t in ITERS:
            hill_climb(record, rng, pers, 0.2, (t,), restarts=2 if quick else 12, steps=50 if quick else 300)
        for alpha in (0.9, 0.99):  # the bound is nearly tight as alpha -> 1 (personalized mode)
            hill_climb(record, rng, pers, alpha, ITERS, restarts=2 if quick else 12, steps=50 if quick else 300)
    print(f"  hill climbing done ({time.time() - t0:.0f}s)", flush=True)
    report(record)


if __name__ == "__main__":
    main()
