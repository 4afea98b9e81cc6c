"""The private layers on a graph of ogbn-products' size, next to PyG's APPNP (issue 17 benchmark).

    python benchmarks/products_scale.py [--threads 2] [--cases appnp,cgl,gap,appr,ppr] [--quick]
                                        [--cache DIR] [--skip-generation-check] [--trace]

The graph is generated in code, seeded: 2,449,029 nodes and exactly 61,859,140 distinct
undirected edges (ogbn-products' shape; ``--quick``: a tenth of both, the same average degree).
It is a Chung-Lu graph: node weights drawn from a Lomax (Pareto II, shape 2) law with mean
the average degree, capped at sqrt(2|E|) (Chung-Lu's condition w_i w_j <= sum(w), roughly);
edge endpoints drawn by the inverse CDF of the weights, self-loops and duplicates removed, and
topped up with further draws until at least |E| distinct pairs exist, the surplus then dropped at
random (the degrees are skewed: many nodes of degree 1 to 10, hubs of several thousand, some
isolated nodes). It is stored once as a symmetric ``torch.sparse`` CSR tensor (both directions,
123,718,280 entries, int32 indices, float32 ones, columns sorted in every row: the canonical form
the private layers take as it is) and cached as a .pt file under ``--cache`` (default: the
system's temporary directory) so that reruns skip the generation. Features: 100 float32 channels,
N(0, 1) rows scaled into the unit L2 ball (slightly inside it: GCON's propagation requires the
ball), seeded.

Cases (each its own timed call):

  * ``appnp``: PyG's ``APPNP(K=10, alpha=0.1, cached=False)`` on the CSR, the anchor;
  * ``cgl``: ``ContractiveGraphLayer(K=10, min_degree=0, noise_multiplier=1, cached=False)``
    (C_L = 0.9, the safe sampler);
  * ``gap``: ``GAPAggregation(K=2, noise_multiplier=1, cached=False)``;
  * ``appr``: GCON's propagation, ``PerturbedAPPRConv(100, 47, alpha=0.1, steps=10, ...).propagation``
    (``appr_propagate`` with ``steps=[10]``: ten APPNP steps of the row-stochastic
    D^-1 (A + I));
  * ``ppr``: ``NoisyPPRDiffusion(alpha=0.2, num_iterations=100, eta=1e-7, epsilon=0.1,
    delta=1/|E|, personalized=True, cached=False, grid_tolerance=2**-14)`` for 100 seeds (at
    2.45M nodes the default grid_tolerance 2^-16 needs a grid of 2^-61 that cannot hold the values
    within 2^60 steps: the layer raises before any charge; 2^-14 raises the noise scale by at most a
    factor 1 + 2^-14), one release (one charge) diffused in column blocks of ``--ppr-block`` seeds
    (the layer's ``column_block``: about six dense N x block float64/int64 buffers, 1.4 GB for the
    default 12 columns at full size (2.9 GB for 25, which measured 1.56x the bound), and the float32
    output). ``--ppr-max-blocks`` runs only the first blocks'
    seeds and extrapolates the 100-seed time (printed as such). With ``--quick``
    the diffusion runs 10 steps (``--ppr-iterations``), so that the smoke run stays under 2 minutes.

Every case prints its wall time, its time over APPNP's (from this run, or from the last APPNP
result stored under ``--cache``), the peak resident set size sampled every 2 ms during the call
(and its growth over the size before the call), and the issue's bound, 2 x the CSR adjacency's
bytes + 3 x the feature matrix's bytes, which the peak is compared with. Per-hop times are
printed as the hops run, so a case stopped early still reports them. Every case's result is
appended to ``results.json`` under ``--cache``; the table at the end merges them, so the full
cases may run one per process (``--cases appnp``, then ``--cases cgl``, ...).

``--rss-limit-gb`` (default 20) stops the process, after printing what it measured, when its
resident size passes the limit: a case that would exhaust a shared machine's memory is reported
instead of taking the machine down. ``--trace`` runs, instead of the layers, the steps of their
graph handling one at a time (the functions of ``pyg_private.utils``), printing what each
allocates (peak growth over the resident size before it, and what it keeps).

It is a benchmark, not a test: nothing is asserted, figures depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import sys
import tempfile
import threading
import time
import warnings
from typing import Callable, Optional

import torch
from torch import Tensor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

from torch_geometric.nn import APPNP  # noqa: E402

from pyg_private.nn import (  # noqa: E402
    ContractiveGraphLayer,
    GAPAggregation,
    NoisyPPRDiffusion,
    PerturbedAPPRConv,
)
from pyg_private.utils.csr_product import CsrProduct  # noqa: E402

NUM_NODES = 2_449_029
NUM_EDGES = 61_859_140  # undirected
CHANNELS = 100
CASES = ("appnp", "cgl", "gap", "appr", "ppr")

_PAGE = os.sysconf("SC_PAGE_SIZE")

try:
    _trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _trim = None


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


def trim() -> None:
    """Hand freed heap memory back to the system, so that the next growth is the next call's own."""
    if _trim is not None:
        _trim(0)


class PeakRSS:
    """Samples the resident set size every 2 ms in a background thread while the block runs
    (as ``benchmarks/ppr_blogcatalog.py``'s ``PeakRSS``); past ``limit`` bytes it prints what it
    saw and ends the process (exit status 3) before the machine runs out of memory."""

    limit: Optional[int] = None
    label: str = ""
    on_limit: Optional[Callable[["PeakRSS"], None]] = None  # called with the sampler before the exit

    def __enter__(self) -> "PeakRSS":
        trim()
        self.start = time.perf_counter()
        self.before = self.peak = _rss()
        self.peak_at = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            now = _rss()
            if now > self.peak:
                self.peak, self.peak_at = now, time.perf_counter()
            if PeakRSS.limit is not None and self.peak > PeakRSS.limit:
                print(f"\n!! {PeakRSS.label}: resident size {_mib(self.peak)} passed --rss-limit-gb "
                      f"({_mib(PeakRSS.limit)}; {_mib(self.before)} before the call) after "
                      f"{time.perf_counter() - self.start:.1f} s: stopped", flush=True)
                if PeakRSS.on_limit is not None:
                    PeakRSS.on_limit(self)
                os._exit(3)
            time.sleep(0.002)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        now = _rss()
        if now > self.peak:
            self.peak, self.peak_at = now, time.perf_counter()

    @property
    def growth(self) -> int:
        return self.peak - self.before


# --------------------------------------------------------------------------- the graph
def _lomax_weights(n: int, mean: float, cap: float, gen: torch.Generator) -> Tensor:
    """Node weights: Lomax(shape 2) draws scaled to ``mean``, capped at ``cap`` (float64)."""
    u = torch.rand(n, dtype=torch.float64, generator=gen)
    w = u.rsqrt_().sub_(1.0).mul_(mean)  # lambda (U^(-1/2) - 1), mean lambda / (2 - 1)
    return w.clamp_(max=cap)


def _draw_keys(cdf: Tensor, count: int, n: int, gen: torch.Generator, chunk: int = 1 << 23) -> Tensor:
    """``count`` endpoint pairs drawn from ``cdf`` (inverse CDF), as sorted unique keys
    ``min * n + max`` without self-loops (int64; chunked: two float64 + two int64 chunk temporaries)."""
    parts = []
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        u = torch.searchsorted(cdf, torch.rand(m, dtype=torch.float64, generator=gen)).clamp_(max=n - 1)
        v = torch.searchsorted(cdf, torch.rand(m, dtype=torch.float64, generator=gen)).clamp_(max=n - 1)
        keep = u != v
        u, v = u[keep], v[keep]
        parts.append(torch.minimum(u, v).mul_(n).add_(torch.maximum(u, v)))
        del u, v, keep
    keys = torch.cat(parts)
    del parts
    return torch.unique(keys)


def generate_graph(n: int, m: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``(crow, col)`` (int32) of a seeded Chung-Lu graph with exactly ``m`` distinct undirected
    edges on ``n`` nodes, stored in both directions, columns sorted in every row."""
    gen = torch.Generator().manual_seed(seed)
    w = _lomax_weights(n, mean=2.0 * m / n, cap=math.sqrt(2.0 * m), gen=gen)
    cdf = torch.cumsum(w, 0)
    cdf.div_(cdf[-1].clone())
    del w
    keys = _draw_keys(cdf, int(m * 1.02) + 1024, n, gen)
    rounds = 1
    while keys.numel() < m:  # top up: duplicates and self-loops were dropped
        rate = keys.numel() / (m * 1.02 + 1024 * rounds)  # distinct pairs per draw, roughly
        deficit = m - keys.numel()
        extra = _draw_keys(cdf, int(deficit / max(rate, 0.05) * 1.1) + 1024, n, gen)
        keys = torch.unique(torch.cat([keys, extra]))
        del extra
        rounds += 1
    if keys.numel() > m:  # drop the surplus at random, keep the rest sorted
        drop = torch.randperm(keys.numel(), generator=gen)[: keys.numel() - m]
        keep = torch.ones(keys.numel(), dtype=torch.bool)
        keep[drop] = False
        del drop
        keys = keys[keep]
        del keep
    del cdf
    print(f"  {rounds} draw round(s); assembling the symmetric CSR", flush=True)
    return _symmetric_csr(keys, n)


def _symmetric_csr(keys: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The CSR arrays of both directions of the sorted upper-triangle keys ``u * n + v`` (u < v).

    Row ``i`` holds first its lower-triangle columns (``u < i``, from the edges ``(u, i)``),
    then its upper-triangle ones (``v > i``): both runs sorted, so the row is sorted. One sort,
    of the transposed keys; every other step is a bincount, a cumsum or a scatter."""
    m = keys.numel()
    upper_row = keys // n
    deg_up = torch.bincount(upper_row, minlength=n)
    lower = (keys % n).mul_(n).add_(upper_row)  # v * n + u: the transposed entries
    del upper_row
    lower = torch.sort(lower).values
    lower_row = lower // n
    deg_low = torch.bincount(lower_row, minlength=n)
    deg = deg_up + deg_low
    crow = torch.zeros(n + 1, dtype=torch.long)
    torch.cumsum(deg, 0, out=crow[1:])
    start_up = torch.cumsum(deg_up, 0) - deg_up  # where row i's run starts in the sorted upper keys
    start_low = torch.cumsum(deg_low, 0) - deg_low
    col = torch.empty(2 * m, dtype=torch.int32)
    # lower entry j (row r): position crow[r] + (j - start_low[r])
    pos = torch.arange(m, dtype=torch.long).add_((crow[:-1] - start_low)[lower_row])
    col[pos] = (lower % n).to(torch.int32)
    del lower, lower_row
    # upper entry j (row r): position crow[r] + deg_low[r] + (j - start_up[r])
    upper_row = keys // n
    pos = torch.arange(m, dtype=torch.long).add_((crow[:-1] + deg_low - start_up)[upper_row])
    col[pos] = (keys % n).to(torch.int32)
    del pos, upper_row
    return crow.to(torch.int32), col


def check_graph(crow: Tensor, col: Tensor, n: int, m: int) -> None:
    """Raise unless ``(crow, col)`` is a simple undirected graph with ``m`` edges, sorted rows
    (the brute-force counterpart of the private layers' fast path, in row chunks)."""
    if crow.numel() != n + 1 or int(crow[-1]) != 2 * m or col.numel() != 2 * m:
        raise RuntimeError("wrong sizes")
    counts = crow.diff().long()
    if int(col.min()) < 0 or int(col.max()) >= n:
        raise RuntimeError("column out of range")
    if not torch.equal(torch.bincount(col.long(), minlength=n), counts):
        raise RuntimeError("in- and out-degrees differ")
    upper_keys, lower_keys = [], []
    for start in range(0, n, 1 << 18):  # rows [start, stop): sorted, no self-loop, no duplicate
        stop = min(n, start + (1 << 18))
        a, b = int(crow[start]), int(crow[stop])
        row = torch.repeat_interleave(torch.arange(start, stop), counts[start:stop])
        c = col[a:b].long()
        key = row * n + c
        if bool((key.diff() <= 0).any()) or bool((row == c).any()):
            raise RuntimeError("unsorted row, duplicate or self-loop")
        up = c > row
        upper_keys.append(key[up])
        lower_keys.append(c[~up].mul_(n).add_(row[~up]))  # the transposed entry's key
    upper, lower = torch.cat(upper_keys), torch.cat(lower_keys)
    del upper_keys, lower_keys
    # symmetric: the lower-triangle entries, transposed and sorted, are the upper-triangle ones
    if upper.numel() != m or not torch.equal(torch.sort(lower).values, upper):
        raise RuntimeError("not symmetric")


def load_graph(n: int, m: int, seed: int, cache: str, check: bool) -> tuple[Tensor, Tensor]:
    path = os.path.join(cache, f"chung_lu_n{n}_m{m}_seed{seed}.pt")
    if os.path.exists(path):
        t0 = time.perf_counter()
        data = torch.load(path)
        print(f"graph loaded from {path} in {time.perf_counter() - t0:.1f} s", flush=True)
        return data["crow"], data["col"]
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        crow, col = generate_graph(n, m, seed)
        took = time.perf_counter() - t0
    print(f"graph generated in {took:.1f} s (peak RSS {_mib(mem.peak)}, +{_mib(mem.growth)})", flush=True)
    if check:
        t0 = time.perf_counter()
        check_graph(crow, col, n, m)
        print(f"graph checked (simple, undirected, sorted rows) in {time.perf_counter() - t0:.1f} s", flush=True)
    os.makedirs(cache, exist_ok=True)
    torch.save({"crow": crow, "col": col, "seed": seed}, path + ".tmp")
    os.replace(path + ".tmp", path)
    print(f"graph cached to {path}", flush=True)
    return crow, col


def make_features(n: int, f: int, seed: int) -> Tensor:
    """N(0, 1) rows scaled to norm 1 - 1e-6 (float32, seeded), in row chunks."""
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.empty(n, f, dtype=torch.float32)
    for start in range(0, n, 1 << 18):
        part = x[start:start + (1 << 18)]
        part.normal_(generator=gen)
        part.div_(torch.linalg.vector_norm(part.double(), dim=1, keepdim=True).mul_(1 + 1e-6).float())
    return x


def degree_summary(crow: Tensor) -> str:
    deg = crow.diff().float()
    q = torch.quantile(deg[torch.randperm(deg.numel(), generator=torch.Generator().manual_seed(0))[:1_000_000]],
                       torch.tensor([0.5, 0.9, 0.99]))
    return (f"degrees: mean {float(deg.mean()):.1f}, median {q[0]:.0f}, 90% {q[1]:.0f}, 99% {q[2]:.0f}, "
            f"max {int(deg.max())}, isolated {int((deg == 0).sum())}, degree 1: {int((deg == 1).sum())}")


# --------------------------------------------------------------------------- hop timing
class HopLog:
    """Times every sparse-dense product of a case (a layer's ``propagate``, ``CsrProduct``, or
    ``torch.mm``, ``torch.addmm`` or ``torch.sparse.mm`` with a sparse operand; nested calls count once) and the interval between the
    ends of consecutive products (one whole hop), printing the first three, every tenth, and any
    over 2 s as they end."""

    def __init__(self, label: str) -> None:
        self.label, self.spmm, self.hops, self._last, self._depth = label, [], [], None, 0
        self.spans: list = []  # (start, end) of every product, perf_counter seconds

    def wrap(self, fn: Callable, sparse_only: bool = False) -> Callable:
        def timed(*args, **kwargs):
            if self._depth or (sparse_only and not any(isinstance(a, Tensor) and a.layout != torch.strided
                                                       for a in args[:3])):
                return fn(*args, **kwargs)
            self._depth += 1
            t0 = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
            finally:
                self._depth -= 1
            t1 = time.perf_counter()
            self.spmm.append(t1 - t0)
            self.spans.append((t0, t1))
            hop = None if self._last is None else t1 - self._last
            if hop is not None:
                self.hops.append(hop)
            self._last = t1
            k = len(self.spmm)
            if k <= 3 or k % 10 == 0 or t1 - t0 > 2.0:
                print(f"    {self.label} product {k:3d}: {t1 - t0:6.2f} s"
                      + ("" if hop is None else f"  (hop, since the previous product: {hop:6.2f} s)")
                      + f"  RSS {_mib(_rss())}", flush=True)
            return out
        return timed

    @contextlib.contextmanager
    def hooked(self, layer=None):
        """Time ``layer.propagate``, ``CsrProduct`` and every sparse ``torch.mm`` / ``addmm`` / ``sparse.mm``
        in the block."""
        if layer is not None and hasattr(layer, "propagate"):
            layer.propagate = self.wrap(layer.propagate)
        with patched(torch, "mm", self.wrap(torch.mm, sparse_only=True)), \
                patched(torch, "addmm", self.wrap(torch.addmm, sparse_only=True)), \
                patched(torch.sparse, "mm", self.wrap(torch.sparse.mm, sparse_only=True)), \
                patched(CsrProduct, "__call__", self.wrap(CsrProduct.__call__)):
            yield


@contextlib.contextmanager
def patched(obj, name: str, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


# --------------------------------------------------------------------------- the cases
def run_case(name: str, adj: Tensor, x: Tensor, args, n: int, m: int) -> dict:
    log = HopLog(name)
    extra: dict = {}
    if name == "appnp":
        layer = APPNP(K=10, alpha=0.1, cached=False)
        call = lambda: layer(x, adj)  # noqa: E731
    elif name == "cgl":
        layer = ContractiveGraphLayer(K=10, min_degree=0, noise_multiplier=1.0, cached=False)
        call = lambda: layer(x, adj)  # noqa: E731
    elif name == "gap":
        layer = GAPAggregation(K=2, noise_multiplier=1.0, cached=False)
        call = lambda: layer(x, adj)  # noqa: E731
    elif name == "appr":
        layer = PerturbedAPPRConv(CHANNELS, 47, alpha=0.1, steps=10, epsilon=1.0, delta=1e-6, cached=False)
        call = lambda: layer.propagation(x, adj)  # noqa: E731
    elif name == "ppr":
        layer = NoisyPPRDiffusion(alpha=0.2, num_iterations=args.ppr_iterations, eta=1e-7, epsilon=0.1,
                                  delta=1.0 / m, personalized=True, cached=False,
                                  grid_tolerance=args.ppr_grid_tolerance, column_block=args.ppr_block)
        seeds = torch.randperm(n, generator=torch.Generator().manual_seed(123))[: args.seeds]
        blocks = list(torch.split(seeds, args.ppr_block))
        run = blocks if args.ppr_max_blocks is None else blocks[: args.ppr_max_blocks]
        extra = {"seeds": args.seeds, "block": args.ppr_block, "blocks_run": len(run), "blocks": len(blocks),
                 "iterations": args.ppr_iterations}
        block_times: list = []

        def call():
            # one release (one charge) of the seeds run, diffused --ppr-block columns at a time and
            # written in float32 into one output
            t0 = time.perf_counter()
            out = layer(edge_index=adj, seed_index=torch.cat(run), num_nodes=n)
            block_times.append(time.perf_counter() - t0)
            return out
        extra["block_times"] = block_times
    else:
        raise ValueError(f"unknown case {name!r}; choose from {', '.join(CASES)}")
    PeakRSS.label = name
    with torch.no_grad(), log.hooked(layer), PeakRSS() as mem:
        t0 = time.perf_counter()
        out = call()
        took = time.perf_counter() - t0
    shape, dtype = tuple(out.shape), str(out.dtype).replace("torch.", "")
    print(f"    peak RSS reached {mem.peak_at - t0:.1f} s into the call, {_phase(mem.peak_at, log.spans)}", flush=True)
    del out
    result = {"case": name, "time": took, "peak": mem.peak, "before": mem.before, "growth": mem.growth,
              "out": f"{list(shape)} {dtype}", "products": len(log.spmm), "spmm_time": sum(log.spmm),
              "hop_median": sorted(log.hops)[len(log.hops) // 2] if log.hops else None, **extra}
    if name == "ppr" and extra["blocks_run"] < extra["blocks"]:
        result["time_extrapolated"] = took / extra["blocks_run"] * extra["blocks"]
    return result


def _phase(t: float, spans: list) -> str:
    """Where ``t`` lies relative to the products ``spans``: before, during or after which."""
    if not spans or t < spans[0][0]:
        return "before the first sparse product (graph validation and preparation)"
    for k, (a, b) in enumerate(spans):
        if a <= t <= b:
            return f"during sparse product {k + 1}"
        if k + 1 < len(spans) and b < t < spans[k + 1][0]:
            return f"between sparse products {k + 1} and {k + 2}"
    return "after the last sparse product"


# --------------------------------------------------------------------------- trace mode
def trace(adj: Tensor, x: Tensor, n: int) -> None:
    """The graph handling of the private layers, step by step, with what each step allocates."""
    from torch_geometric.utils import coalesce

    from pyg_private.utils.adjacency import (
        adjacency_csr,
        normalized_adjacency_csr,
        power_normalized_adjacency_csr,
        simple_undirected_csr,
    )
    from pyg_private.utils.graph_validation import adjacency_to_edge_index, check_edge_index

    held: dict = {}

    def step(label: str, fn: Callable[[], object], keep: Optional[str] = None) -> object:
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            value = fn()
            took = time.perf_counter() - t0
        if keep is not None:
            held[keep] = value
        after = _rss()
        print(f"  {label:<64} {took:7.1f} s  peak +{_mib(mem.growth):>11}  kept +{_mib(after - mem.before):>11}",
              flush=True)
        return value

    PeakRSS.label = "trace"
    print("simple_undirected_csr (the CSR fast path of ContractiveGraphLayer and appr_propagate), line by line:")
    crow0, col0 = adj.crow_indices(), adj.col_indices()
    step("whole call: simple_undirected_csr(adj, n)", lambda: simple_undirected_csr(adj, n), keep="graph")
    held.clear()
    trim()
    step("value == 1 check: (value == 1).all()", lambda: bool((adj.values() == 1).all()))
    crow = step("crow.long()", lambda: crow0.long(), keep="crow")
    col = step("col.long()", lambda: col0.long(), keep="col")
    counts = step("counts = crow.diff()", lambda: crow.diff(), keep="counts")
    step("col.min() / col.max()", lambda: (int(col.min()), int(col.max())))
    row = step("row = repeat_interleave(arange(n), counts)",
               lambda: torch.repeat_interleave(torch.arange(n), counts), keep="row")
    step("(diff(row * n + col) > 0).all()", lambda: bool((torch.diff(row * n + col) > 0).all()))
    step("(row == col).any()", lambda: bool((row == col).any()))
    step("bincount(col) == counts", lambda: torch.equal(torch.bincount(col, minlength=n), counts))
    r = step("r = row.to(int32)", lambda: row.to(torch.int32), keep="r")
    c = step("c = col.to(int32)", lambda: col.to(torch.int32), keep="c")
    order = step("order = sort(c, stable=True).indices", lambda: torch.sort(c, stable=True).indices, keep="order")
    step("equal(r.index_select(0, order), c)", lambda: torch.equal(r.index_select(0, order), c))
    crow = col = counts = row = r = c = order = None
    held.clear()
    trim()

    print("after validation (CGL, appr): the normalised adjacency")
    crow, col = crow0.long(), col0.long()
    step("normalized_adjacency_csr(crow, col, float32) (CGL)",
         lambda: normalized_adjacency_csr(crow, col, weight=0.9, dtype=torch.float32), keep="norm")
    held.clear()
    trim()
    step("power_normalized_adjacency_csr(r=0, float32) (appr)",
         lambda: power_normalized_adjacency_csr(crow, col, r=0.0, self_loops=True, weight=0.9,
                                                dtype=torch.float32), keep="norm")
    held.clear()
    crow = col = None
    trim()

    print("the general path (GAPAggregation, NoisyPPRDiffusion: adjacency_to_edge_index, simple_undirected, "
          "adjacency_csr), line by line:")
    step("whole call: adjacency_to_edge_index(adj, n)", lambda: adjacency_to_edge_index(adj, n), keep="ei")
    held.clear()
    trim()
    coo = step("adj.to_sparse_coo()", lambda: adj.to_sparse_coo(), keep="coo")
    coo = step("  .coalesce()", lambda: coo.coalesce(), keep="coo")
    ei = step("  .indices()  (the edge_index the layers get)", lambda: coo.indices(), keep="ei")
    step("  (coo.values() == 1).all()", lambda: bool((coo.values() == 1).all()))
    coo = None
    held.pop("coo")
    trim()
    step("simple_undirected: check_edge_index (min, max)", lambda: check_edge_index(ei, n))
    step("simple_undirected: (ei[0] == ei[1]).any()", lambda: bool((ei[0] == ei[1]).any()))
    co = step("simple_undirected: co = coalesce(ei, num_nodes=n)", lambda: coalesce(ei, num_nodes=n), keep="co")
    flipped = step("simple_undirected: co.flip(0)", lambda: co.flip(0), keep="flip")
    back = step("simple_undirected: coalesce(co.flip(0), num_nodes=n)", lambda: coalesce(flipped, num_nodes=n),
                keep="back")
    step("simple_undirected: torch.equal(co, ...)", lambda: torch.equal(co, back))
    flipped = back = None
    held.pop("flip"), held.pop("back")
    trim()
    step("adjacency_csr(co, n) (float64 ones, degrees)", lambda: adjacency_csr(co, n), keep="csr64")
    co = ei = None
    held.clear()
    trim()


# --------------------------------------------------------------------------- report
def table(results: dict, bound: int) -> None:
    """The merged results: time, ratio to APPNP, peak RSS and the part of it above the bare
    interpreter's (the data: graph, features, the call's buffers), compared with the bound."""
    anchor = results.get("appnp")
    print(f"\n{'case':<6} {'time':>9} {'x APPNP':>8} {'peak RSS':>11} {'call grew':>11} {'data peak':>11} "
          f"{'bound':>11} {'data/bound':>10} {'median hop':>10}  output")
    for name in CASES:
        r = results.get(name)
        if r is None:
            continue
        t = r.get("time_extrapolated", r["time"])
        ratio = "" if anchor is None or r.get("stopped") else f"{t / anchor['time']:.2f}"
        hop = "" if r.get("hop_median") is None else f"{r['hop_median']:.2f} s"
        mark = "*" if "time_extrapolated" in r else ("!" if r.get("stopped") else " ")
        data = r["peak"] - r.get("interpreter", 0)
        print(f"{name:<6} {t:8.1f}s{mark} {ratio:>8} {_mib(r['peak']):>11} {_mib(r['growth']):>11} {_mib(data):>11} "
              f"{_mib(bound):>11} {data / bound:10.2f} {hop:>10}  {r['out']}")
        if mark == "*":
            print(f"       * extrapolated from {r['blocks_run']} of {r['blocks']} blocks of {r['block']} seeds "
                  f"({r['time']:.1f} s measured, {r['iterations']} steps per block)")
    if any(r.get("stopped") for r in results.values()):
        print("       ! stopped by --rss-limit-gb: the time is until the stop, the peak the limit (a lower bound)")
    print("data peak: the peak RSS less the bare interpreter's (Python, torch, PyG, pyg_private before any data)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    ap.add_argument("--quick", action="store_true", help="a 10x smaller graph of the same shape ratios")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "pyg_private_products_scale"))
    ap.add_argument("--skip-generation-check", action="store_true",
                    help="do not check the generated graph (simple, undirected, sorted rows)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=100, help="PPR seeds (columns)")
    ap.add_argument("--ppr-block", type=int, default=12,
                    help="the release's column_block: PPR seeds diffused at a time (12: inside the memory bound)")
    ap.add_argument("--ppr-iterations", type=int, default=None,
                    help="PPR steps K (default: 100, the paper's; 10 with --quick)")
    ap.add_argument("--ppr-max-blocks", type=int, default=None,
                    help="run only this many PPR blocks and extrapolate the 100-seed time")
    ap.add_argument("--ppr-grid-tolerance", type=float, default=2.0 ** -14,
                    help="NoisyPPRDiffusion's grid_tolerance (its default 2^-16 cannot hold the values of a "
                         "2.45M-node diffusion with eta=1e-7 within 2^60 grid steps and raises)")
    ap.add_argument("--rss-limit-gb", type=float, default=20.0)
    ap.add_argument("--trace", action="store_true", help="the graph handling step by step instead of the cases")
    args = ap.parse_args()
    if args.ppr_iterations is None:
        args.ppr_iterations = 10 if args.quick else 100
    warnings.simplefilter("ignore")
    trim()
    interpreter = _rss()  # Python, torch, PyG and the package, before any data
    torch.set_num_threads(args.threads)
    PeakRSS.limit = int(args.rss_limit_gb * 2**30) if args.rss_limit_gb > 0 else None
    n, m = (NUM_NODES // 10, NUM_EDGES // 10) if args.quick else (NUM_NODES, NUM_EDGES)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r}; choose from {', '.join(CASES)}")

    print(f"synthetic ogbn-products-shaped graph: {n:,} nodes, {m:,} undirected edges, {CHANNELS} float32 "
          f"channels; torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    crow, col = load_graph(n, m, args.seed, args.cache, check=not args.skip_generation_check)
    print(degree_summary(crow), flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adj = torch.sparse_csr_tensor(crow, col, torch.ones(col.numel(), dtype=torch.float32), (n, n))
    del crow, col
    x = make_features(n, CHANNELS, args.seed)
    csr_bytes = sum(t.numel() * t.element_size() for t in (adj.crow_indices(), adj.col_indices(), adj.values()))
    feat_bytes = x.numel() * x.element_size()
    bound = 2 * csr_bytes + 3 * feat_bytes
    trim()
    print(f"CSR adjacency {_mib(csr_bytes)} (int32 indices, float32 values), features {_mib(feat_bytes)}; "
          f"bound 2 x CSR + 3 x features = {_mib(bound)}; resident: {_mib(interpreter)} interpreter (Python, "
          f"torch, PyG, pyg_private), {_mib(_rss())} with the graph and the features", flush=True)

    if args.trace:
        trace(adj, x, n)
        return

    store = os.path.join(args.cache, "results.json")
    key = "quick" if args.quick else "full"
    try:
        with open(store) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        saved = {}
    results = saved.setdefault(key, {})

    def save() -> None:
        os.makedirs(args.cache, exist_ok=True)
        with open(store + ".tmp", "w") as f:
            json.dump(saved, f, indent=1)
        os.replace(store + ".tmp", store)

    for name in cases:
        print(f"\n[{name}]", flush=True)

        def stopped(mem: PeakRSS, name: str = name) -> None:  # the memory limit ends the process: keep a record
            results[name] = {"case": name, "stopped": True, "time": time.perf_counter() - mem.start, "peak": mem.peak,
                             "before": mem.before, "growth": mem.growth, "out": "stopped at --rss-limit-gb",
                             "threads": args.threads, "interpreter": interpreter, "bound": bound}
            save()
        PeakRSS.on_limit = stopped
        r = run_case(name, adj, x, args, n, m)
        r["threads"], r["interpreter"], r["bound"] = args.threads, interpreter, bound
        results[name] = r
        t = r.get("time_extrapolated", r["time"])
        anchor = results.get("appnp")
        ratio = "" if anchor is None else f", {t / anchor['time']:.2f}x APPNP"
        data = r["peak"] - interpreter
        print(f"{name}: {r['time']:.1f} s{ratio}; peak RSS {_mib(r['peak'])} (+{_mib(r['growth'])} during the call; "
              f"{_mib(r['before'])} before), {_mib(data)} above the interpreter's; bound {_mib(bound)}: "
              f"{'within' if data <= bound else 'EXCEEDS'} ({data / bound:.2f}x); output {r['out']}", flush=True)
        save()
        trim()
    table(results, bound)


if __name__ == "__main__":
    main()
