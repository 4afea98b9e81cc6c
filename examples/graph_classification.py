"""Graph classification with graph-level privacy: per-graph DP-SGD GIN against its baselines.

**Unit ``"graph"``**: neighbouring datasets differ in one whole graph (its nodes, edges, features and
label) added or removed. Methods, each with its own accountant, three seeds (``--seeds``):

* ``DP-SGD GIN`` at epsilon 1, 4, 8 (``--epsilons``): :func:`pyg_private.models.run_graph_classification`,
  a 2-layer GIN (32 channels, sum pooling, MLP head) trained by per-graph DP-SGD
  (:class:`~pyg_private.models.GraphDPSGD`: Poisson sampling of graphs at rate 1/15 with 480 training
  graphs, expected batch 32, every graph's gradient clipped to 1, exact rounded Gaussian noise on the
  clipped sum, 20 epochs = 300 steps, Adam at 0.005); one subsampled-Gaussian event on unit
  ``"graph"`` per run, calibrated to (epsilon, delta) with **delta = 1e-5** (below 1/N for every
  dataset here);
* ``DP-SGD edge-free MLP`` at epsilon 4: the same run with node MLPs instead of GIN layers (no edge
  read): what graph-level DP buys without structure;
* ``GIN (not private)`` and ``edge-free MLP (not private)``: the same models and sampling, no clipping,
  no noise;
* ``edge-level GAP release`` at epsilon 4: a **different, weaker unit** (``"edge"``: one edge of one
  graph; node features and labels public): :func:`pyg_private.models.run_edge_level_graph_classification`,
  one GAP release (K = 2) over the disjoint union of all graphs, then a pooled MLP head trained without
  noise; delta = 1/|E| with |E| the undirected edges of the union (the edge-level examples' rule).

Hyperparameters were fixed beforehand on a synthetic dataset of another seed (123), never on the
evaluation data; the test accuracy reads the test graphs (a measurement, not a release).

**Datasets** (``--dataset``):

* ``Cycles`` (default): :func:`pyg_private.datasets.cycles_vs_trees`, 600 graphs of 10-30 nodes, half
  uniformly random trees, half such trees plus 3 random extra edges (cycles); node features: a constant
  1, a weak label signal (Bernoulli 0.55 against 0.45) and 6 Gaussian noise columns. A fresh dataset
  per seed (generator seed 1000 + seed), split 480 / 120 at random.
* ``TU/<NAME>`` (e.g. ``TU/MUTAG``): PyG's :class:`~torch_geometric.datasets.TUDataset` from
  ``$PYG_PRIVATE_DATA/TUDataset/<NAME>/raw`` (copied to the cache first). **The offline data of this
  project hold no graph-classification dataset**, so this exits with a message; nothing is downloaded.

``--quick`` (about a minute on one thread): one seed. ``--smoke`` (the tests): one seed, 120 graphs,
2 full-batch epochs, epsilon 4. Rows go to ``<out>/graph_classification_<dataset>[_quick|_smoke].csv`` as each run
finishes; progress bars on stderr.

    python examples/graph_classification.py [--dataset Cycles] [--seeds 0 1 2] [--epsilons 1 4 8]
        [--quick] [--threads 1] [--out outputs]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings

import torch

from example_io import CsvWriter, progress, say
from pyg_private.datasets import cycles_vs_trees
from pyg_private.models import (EdgeLevelGraphConfig, GraphClassificationConfig, run_edge_level_graph_classification,
                                run_graph_classification)

GRAPH_DELTA = 1e-5
EDGE_LEVEL_EPSILON = 4.0


def load_graphs(parser: argparse.ArgumentParser, name: str, seed: int, count: int = 600) -> tuple[list, int, str]:
    """``(graphs, num_classes, label)``; a missing offline dataset exits with one line (status 2)."""
    if name.lower() == "cycles":
        return cycles_vs_trees(count, seed=1000 + seed), 2, "Cycles (trees vs cycles, synthetic)"
    if name.upper().startswith("TU/"):
        from pyg_private.datasets import cache_dir, data_dir, resolve_root

        tu = name[3:]
        offline = data_dir()
        have = ((offline is not None and (offline / "TUDataset" / tu / "raw").is_dir())
                or (cache_dir() / "TUDataset" / tu / "raw").is_dir())
        if not have:
            print(f"{parser.prog}: error: TUDataset {tu!r} is not in the offline data (looked for "
                  f"$PYG_PRIVATE_DATA/TUDataset/{tu}/raw); this project's offline data hold no graph-classification "
                  "dataset, and this example does not download", file=sys.stderr)
            raise SystemExit(2)
        from torch_geometric.datasets import TUDataset

        dataset = TUDataset(resolve_root(None, collection="TUDataset", raw_subdir=f"{tu}/raw"), tu)
        graphs = []
        for g in dataset:
            if g.x is None:  # no node features: a constant column
                g.x = torch.ones(g.num_nodes, 1)
            graphs.append(g)
        return graphs, int(dataset.num_classes), f"TU/{tu}"
    parser.error(f"--dataset must be 'Cycles' or 'TU/<NAME>'; got {name!r}")
    raise AssertionError


def split(graphs: list, seed: int, train_share: float = 0.8) -> tuple[list, list]:
    order = torch.randperm(len(graphs), generator=torch.Generator().manual_seed(seed)).tolist()
    cut = int(round(train_share * len(graphs)))
    return [graphs[i] for i in order[:cut]], [graphs[i] for i in order[cut:]]


def _dataset_name(value: str) -> str:
    """``Cycles`` or ``TU/<NAME>``; anything else is a usage error at parse time."""
    if value == "Cycles" or (value.startswith("TU/") and len(value) > 3):
        return value
    raise argparse.ArgumentTypeError(f"must be 'Cycles' or 'TU/<NAME>'; got {value!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="Cycles", type=_dataset_name,
                        help="'Cycles' (synthetic) or 'TU/<NAME>' (offline only)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 (--quick: 0)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0, 8.0])
    parser.add_argument("--quick", action="store_true", help="one seed")
    parser.add_argument("--smoke", action="store_true", help="one seed, 120 graphs, 2 epochs, epsilon 4 (the tests)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--out", default="outputs", help="folder of the CSV")
    args = parser.parse_args()
    args.seeds = args.seeds or ([0] if args.quick or args.smoke else [0, 1, 2])
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    if args.smoke:
        args.epsilons = [EDGE_LEVEL_EPSILON]
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", UserWarning)
    start = time.perf_counter()

    stem = args.dataset.replace("/", "_").lower()
    path = os.path.join(args.out, f"graph_classification_{stem}" + ("" if mode == "full" else f"_{mode}") + ".csv")
    # --smoke: 2 epochs of full batches (rate 1: a fast, exact GDP calibration)
    quick = dict(epochs=2, batch_size=128) if args.smoke else {}
    gin = GraphClassificationConfig(**quick)
    mlp = GraphClassificationConfig(conv="none", **quick)
    edge_cfg = EdgeLevelGraphConfig(epochs=20 if args.smoke else EdgeLevelGraphConfig().epochs)
    runs = [("DP-SGD GIN", "graph", eps) for eps in args.epsilons]
    runs += [("DP-SGD edge-free MLP", "graph", EDGE_LEVEL_EPSILON), ("GIN (not private)", "graph", math.inf),
             ("edge-free MLP (not private)", "graph", math.inf),
             ("edge-level GAP release", "edge", EDGE_LEVEL_EPSILON)]
    results: dict[tuple[str, float], list[float]] = {}
    load_graphs(parser, args.dataset, args.seeds[0], 120 if args.smoke else 600)  # absent data: one line, first
    with CsvWriter(path) as writer:
        bar = progress(total=len(args.seeds) * len(runs), desc="graph classification runs")
        for seed in args.seeds:
            graphs, num_classes, label = load_graphs(parser, args.dataset, seed, 120 if args.smoke else 600)
            train, test = split(graphs, seed)
            if seed == args.seeds[0]:
                say(f"{label}: {len(graphs)} graphs, split {len(train)} / {len(test)}; graph level: delta = "
                    f"{GRAPH_DELTA:g}; edge level: delta = 1/|E| of the union; seeds {args.seeds}")
            for method, unit, eps in runs:
                if unit == "edge":
                    union_edges = sum(int(g.edge_index.size(1)) for g in graphs) // 2  # undirected, both listed
                    res = run_edge_level_graph_classification(train, test, edge_cfg, epsilon=eps,
                                                              delta=1.0 / union_edges, num_classes=num_classes,
                                                              seed=seed)
                    delta, sigma, steps = res.delta, res.noise_multiplier, 0
                else:
                    cfg = mlp if "MLP" in method else gin
                    res = run_graph_classification(train, test, cfg, epsilon=eps,
                                                   delta=None if math.isinf(eps) else GRAPH_DELTA,
                                                   num_graphs=len(train), num_classes=num_classes, seed=seed)
                    delta, sigma, steps = res.delta, res.noise_multiplier, res.steps
                results.setdefault((method, eps), []).append(res.test_accuracy)
                writer.write({"dataset": label, "method": method, "unit": unit, "epsilon": eps,
                              "epsilon_spent": res.epsilon, "delta": delta, "noise_multiplier": sigma,
                              "steps": steps, "seed": seed, "test_accuracy": res.test_accuracy,
                              "seconds": round(res.seconds, 2), "num_train": len(train), "num_test": len(test)})
                bar.update(1)
        bar.close()

    say(f"\n{label}: test accuracy, mean +- std over seeds {args.seeds}")
    say(f"{'method':30s} {'unit':6s} {'epsilon':>8s} {'accuracy':>16s}")
    for (method, eps), accs in results.items():
        unit = "edge" if method.startswith("edge-level") else "graph"
        spread = f" +- {100 * statistics.stdev(accs):4.1f}" if len(accs) > 1 else ""
        say(f"{method:30s} {unit:6s} {('inf' if math.isinf(eps) else f'{eps:g}'):>8s} "
            f"{100 * statistics.mean(accs):8.1f}{spread}")
    say(f"\nwrote {path}\ntotal {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
