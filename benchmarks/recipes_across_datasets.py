"""Every node-classification recipe with the library's defaults on every offline graph, against a
plain PyG MLP and a non-private GCN: the figures behind the defaults and the README's results table.

Protocol (the same for every graph): the labelled nodes (``y >= 0``) split at random 50 / 25 / 25 %
per seed; the graph as PyG loads it, cleaned by the recipes' ``clean_graph=True`` (self-loops
dropped, duplicates merged); edge level with ``delta = 1 / |E|`` (``|E|`` the undirected edges of the
cleaned graph). Baselines: a 2-layer PyG ``MLP`` (hidden 64, dropout 0.5, Adam 0.01, weight decay
5e-4, 200 epochs, best validation epoch) and :func:`~pyg_private.models.run_gcn` (not private).
GCON's rows (``gcon``) are "head private, inference on the private graph" (its prediction reads the
edges); ``gcon-released`` is the variant whose inference reads a released aggregation instead (half of
the budget each). ``--recipes node-mlp`` adds node level: DP-SGD (Opacus) on the features alone,
``delta = 1 / n``; ``node-progap`` runs ProGAP at node level with the declared degree bound
``--node-max-degree`` (default 5,000, Facebook's limit on friends) and the in-degree cap
``--degree-cap`` (default 32; 0: no cap), ``node-caribou`` CARIBOU at node level under the same
declared bound (its contractive layer takes no cap), same delta.

Two modes:

* ``--sweep``: candidate settings of each recipe (``SWEEP``) at one epsilon, printed per graph and
  averaged over the graphs as the gap to the MLP: the defaults are the best valid candidates
  **across** graphs (the mean gap, then the worst one), never those of one graph;
* the table (default): the defaults at ``--epsilons`` over ``--seeds``, one CSV row per run as it
  finishes (``--out``), then mean +- std per recipe and graph, the gap to the MLP and the share of
  the GCN - MLP gap that the best private recipe closes.

``--quick`` runs Cora with one seed at one epsilon (under 2 minutes on one thread).

Usage::

    python benchmarks/recipes_across_datasets.py --datasets Facebook Computers --out results.csv
    python benchmarks/recipes_across_datasets.py --sweep --epsilons 4
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch_geometric.data import Data
from torch_geometric.nn import MLP

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from example_data import load_dataset  # noqa: E402

from pyg_private.models import (CaribouConfig, GCONConfig, LPGNetConfig, ProGAPConfig, run_caribou,  # noqa: E402
                                run_gcn, run_gcon, run_lpgnet, run_progap)
from pyg_private.models.node_training import accuracy, fit_full_batch  # noqa: E402
from pyg_private.models.recipe_inputs import UnlabelledNodesWarning, clean_graph  # noqa: E402

DATASETS = ("Cora", "Cora_ML", "Facebook", "Computers", "CS", "Cornell", "Cornell-year")
RECIPES = ("lpgnet", "progap", "gap", "caribou", "gcon", "gcon-released")

#: candidates per recipe for ``--sweep`` (overrides of the default configuration)
SWEEP = {
    "edge-free": [{}, {"dropout": 0.5}],
    "progap": [{}, {"dropout": 0.5}, {"label_hop_rows": "train", "label_hop_share": None},
               {"label_hop_rows": "predicted"}],
    "lpgnet": [{"rows": "predicted", "head": "features", "row_labels": "train"},
               {"head": "features", "row_labels": "train"}, {"head": "features"}, {"head": "stacked"}, {},
               {"rows": "predicted", "K": 2}, {"sources": True}, {"sources": True, "reader_share": 0.3},
               {"edge_split": "even"}, {"sources": True, "reader_share": 0.3, "edge_split": "even"},
               {"release": "pairs"}, {"sources": True, "reader_share": 0.3, "release": "pairs"}],
    "gap": [{"K": 1}, {"K": 2}, {"K": 3}, {"K": 2, "dropout": 0.5}],
    "caribou": [{"K": 2}, {"K": 4}, {"K": 2, "dropout": 0.5}],
    "gcon": [{"regularization": 2.0}, {"regularization": 0.02}],
    "node-progap": [{"degree_cap": 0}, {"degree_cap": 8}, {"degree_cap": 32}, {"degree_cap": 128}],
}


#: node level: the declared degree bound and the in-degree cap (``--node-max-degree``, ``--degree-cap``)
NODE_LEVEL = {"max_degree": 5000, "degree_cap": 32}


def split(data: Data, seed: int) -> Data:
    """Random 50 / 25 / 25 % of the labelled nodes."""
    data = data.clone()
    labelled = (data.y >= 0).nonzero().view(-1)
    perm = labelled[torch.randperm(labelled.numel(), generator=torch.Generator().manual_seed(seed))]
    a, b = int(0.5 * perm.numel()), int(0.75 * perm.numel())
    for name, idx in (("train_mask", perm[:a]), ("val_mask", perm[a:b]), ("test_mask", perm[b:])):
        mask = torch.zeros(data.num_nodes, dtype=torch.bool)
        mask[idx] = True
        setattr(data, name, mask)
    return data


def plain_mlp(data: Data, seed: int) -> tuple[float, float]:
    torch.manual_seed(seed)
    model = MLP([data.num_features, 64, int(data.y.max()) + 1], dropout=0.5)
    fit_full_batch(model, data.x.float(), data.y, data.train_mask, epochs=200, lr=0.01, weight_decay=5e-4,
                   val_mask=data.val_mask)
    return tuple(accuracy(model, data.x.float(), data.y, m) for m in (data.val_mask, data.test_mask))


def run(method: str, data: Data, seed: int, epsilon: float, delta: float, overrides: dict) -> tuple[float, float, str]:
    """(validation, test, what was selected) of one run."""
    if method == "mlp":
        return (*plain_mlp(data, seed), "")
    if method == "gcn":
        return (*run_gcn(data, seed=seed), "")
    if method == "progap":
        r = run_progap(data, ProGAPConfig(**overrides), epsilon=epsilon, delta=delta, seed=seed, clean_graph=True)
        return r.val_accuracy, r.test_accuracy, f"stage {r.stage}" if r.candidate == "stage" else r.candidate
    if method == "lpgnet":
        r = run_lpgnet(data, LPGNetConfig(**overrides), epsilon=epsilon, delta=delta, seed=seed, clean_graph=True)
        return r.val_accuracy, r.test_accuracy, f"stage {r.stage} ({r.stage_heads[r.stage]})"
    if method == "node-progap":  # node level: the aggregations over the in-degree-capped graph, DP-SGD stages
        overrides = dict(overrides)
        cap = overrides.pop("degree_cap", NODE_LEVEL["degree_cap"]) or None
        r = run_progap(data, ProGAPConfig(**overrides), epsilon=epsilon, delta=delta, seed=seed, clean_graph=True,
                       level="node", max_degree=NODE_LEVEL["max_degree"], num_nodes=data.num_nodes, degree_cap=cap)
        return r.val_accuracy, r.test_accuracy, f"stage {r.stage}"
    if method == "node-caribou":  # node level: the contractive layer under the declared degree bound (no cap)
        r = run_caribou(data, CaribouConfig(**overrides), epsilon=epsilon, delta=delta, seed=seed, clean_graph=True,
                        level="node", max_degree=NODE_LEVEL["max_degree"], num_nodes=data.num_nodes)
        return r.val_accuracy, r.test_accuracy, r.candidate
    if method == "node-mlp":  # node level: DP-SGD on the features alone (encoder and head), no edge read
        r = run_caribou(data, CaribouConfig(method="mlp", **overrides), epsilon=epsilon, delta=delta, seed=seed,
                        level="node", num_nodes=data.num_nodes)
        return r.val_accuracy, r.test_accuracy, "dp-sgd"
    if method in ("gap", "caribou", "edge-free"):
        config = CaribouConfig(method="mlp" if method == "edge-free" else method, **overrides)
        r = run_caribou(data, config, epsilon=epsilon, delta=delta, seed=seed, clean_graph=True)
        return r.val_accuracy, r.test_accuracy, r.candidate
    if method in ("gcon", "gcon-released"):
        if method == "gcon-released":  # the predictions read a released aggregation, not the private graph
            overrides = {**overrides, "inference": "released"}
        r = run_gcon(data, GCONConfig(**overrides), epsilon=epsilon, delta=delta, seed=seed, clean_graph=True)
        return r.val_accuracy, r.test_accuracy, r.candidate
    raise ValueError(method)


def _fmt(values: list[float]) -> str:
    if not values:
        return ""
    mean = 100 * statistics.mean(values)
    return f"{mean:.1f}" if len(values) == 1 else f"{mean:.1f} ± {100 * statistics.stdev(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 4.0, 8.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--gcn-seeds", type=int, default=None, help="seeds of the GCN reference (default: all)")
    parser.add_argument("--sweep", action="store_true", help="compare the candidates of SWEEP instead")
    parser.add_argument("--quick", action="store_true", help="Cora, one seed, epsilon 4")
    parser.add_argument("--baselines", nargs="*", default=["mlp", "gcn", "edge-free"],
                        help="which of mlp, gcn, edge-free (the library's own edge-free pipeline) to run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="CSV written row by row")
    parser.add_argument("--node-max-degree", type=int, default=NODE_LEVEL["max_degree"],
                        help="node level: the declared bound on every degree")
    parser.add_argument("--degree-cap", type=int, default=NODE_LEVEL["degree_cap"],
                        help="node level: neighbours summed per node (0: no cap)")
    args = parser.parse_args()
    NODE_LEVEL.update(max_degree=args.node_max_degree, degree_cap=args.degree_cap)
    if args.quick:
        args.datasets, args.seeds, args.epsilons = ["Cora"], [0], [4.0]
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", UnlabelledNodesWarning)
    warnings.filterwarnings("ignore", message=".*sampler='float'.*")
    fields = ["dataset", "method", "config", "epsilon", "seed", "val", "test", "selected", "seconds"]
    out = open(args.out, "a", newline="") if args.out else None
    writer = csv.DictWriter(out, fields) if out else None
    if out and os.path.getsize(args.out) == 0:
        writer.writeheader()
    rows: list[dict] = []

    def record(**row) -> None:
        rows.append(row)
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
        if writer:
            writer.writerow(row)
            out.flush()

    for name in args.datasets:
        base = load_dataset(name)
        base.edge_index = clean_graph(base.edge_index, base.num_nodes)
        delta = 1.0 / (base.edge_index.size(1) // 2)
        node_delta = 1.0 / base.num_nodes
        jobs = []
        for method in args.baselines:
            seeds = args.seeds[:args.gcn_seeds] if method == "gcn" and args.gcn_seeds else args.seeds
            for overrides in (SWEEP[method] if args.sweep and method in SWEEP else [{}]):
                jobs += [(method, overrides, math.inf, seeds)]
        for eps in args.epsilons:  # epsilon by epsilon: an interrupted run has every recipe at the first ones
            for method in args.recipes:
                for overrides in (SWEEP.get(method, [{}]) if args.sweep else [{}]):
                    jobs += [(method, overrides, eps, args.seeds)]
        for method, overrides, eps, seeds in jobs:
            for seed in seeds:
                data = split(base, seed)
                start = time.perf_counter()
                val, test, selected = run(method, data, seed, eps, node_delta if method.startswith("node-") else delta,
                                          overrides)
                record(dataset=name, method=method, config=str(overrides), epsilon=eps, seed=seed, val=val, test=test,
                       selected=selected, seconds=time.perf_counter() - start)
    if out:
        out.close()
    summarise(rows, args.sweep)


def summarise(rows: list[dict], sweep: bool) -> None:
    """Mean +- std per (dataset, method, config, epsilon); gaps to the MLP; the GCN gap closed."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["method"], r["config"], r["epsilon"]), []).append(r["test"])
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    mlp = {d: statistics.mean(groups[(d, "mlp", "{}", math.inf)]) for d in datasets if (d, "mlp", "{}", math.inf) in groups}
    gcn = {d: statistics.mean(groups[(d, "gcn", "{}", math.inf)]) for d in datasets if (d, "gcn", "{}", math.inf) in groups}
    print("\ntest accuracy % (mean ± std over seeds); [gap to the MLP in points]")
    for (d, method, config, eps), values in groups.items():
        gap = f" [{100 * (statistics.mean(values) - mlp[d]):+.1f}]" if d in mlp and method != "mlp" else ""
        closed = ""
        if d in mlp and d in gcn and method not in ("mlp", "gcn", "edge-free") and gcn[d] > mlp[d]:
            closed = f" closes {100 * (statistics.mean(values) - mlp[d]) / (gcn[d] - mlp[d]):.0f}% of the GCN gap"
        print(f"{d:>12} {method:>9} eps={eps:<4g} {config:<40} {_fmt(values)}{gap}{closed}")
    if sweep and mlp:
        print("\nacross graphs: mean and worst gap to the MLP (points) per recipe, candidate and epsilon")
        keys = {(m, c, e) for (_, m, c, e) in groups if m not in ("mlp", "gcn")}
        for m, c, e in sorted(keys, key=str):
            gaps = [100 * (statistics.mean(groups[(d, m, c, e)]) - mlp[d]) for d in datasets
                    if (d, m, c, e) in groups and d in mlp]
            print(f"{m:>9} eps={e:<4g} {c:<40} mean {statistics.mean(gaps):+.2f} worst {min(gaps):+.2f} "
                  f"over {len(gaps)} graphs")


if __name__ == "__main__":
    main()
