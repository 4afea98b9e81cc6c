"""What the two GCON examples share: the grids, the search, baselines, CSV and PNG.

Protocol (GCON, Wei et al., §VI): split 20 per class / 500 validation / 1000 test (seeded
0..runs-1), epsilon in {0.5, 1, 2, 3, 4}. **delta = 1/|E|** with ``|E|`` the number of undirected
edges of the cleaned graph (Cora-ML: 1/8158), the rule of every example here, printed in the
header. (This script used to take ``|E|`` as the edge_index columns, i.e. delta = 1/(2|E|).)
For each epsilon the hyperparameters are selected by the mean **validation** accuracy of the
first ``--search-runs`` runs (not charged to the budget, as in the paper); the selected configuration is then run on all ``--runs`` splits and
its test micro-F1 (= accuracy) mean and standard deviation are reported.

Baselines, in the same run: MLP (the 2-layer edge-free encoder's own predictions, the
encoder setting with the best validation accuracy), GCN (non-private, PyG ``GCNConv``,
2 layers, on the first ``--gcn-runs`` splits), and GAP (edge-level aggregation perturbation,
``pyg_private.models.run_caribou`` with ``method="gap"``) at the same epsilon and delta.

**Any dataset** (``--dataset``, any name of ``example_data.NAMES`` with node features). Every
graph is cleaned first (self-loops dropped, duplicate and one-directional entries merged: a
deterministic, 1-stable map, see ``pyg_private/models/recipe_inputs.py``, so the guarantee carries
over to the graph as loaded); the recipes get ``clean_graph=True`` (``search_gcon`` takes no such
argument: it is handed the cleaned graph). The split is drawn over the **labelled** nodes
(``y >= 0``; an unknown label, as in Cornell, puts a node in no split) and is a public rule of
their number and the (public) class sizes: 20 per class / 500 / 1000 where the graph has room
for it; on a smaller graph ``min(20, smallest class)`` per class, then ``min(500, rest // 3)``
validation and ``min(1000, rest - validation)`` test nodes; a chain keeps its own per-seed split.
GCON needs no degree bound (its sensitivity holds for every graph); GAP none either.

``--quick`` (under 2 minutes on one thread): epsilon {1, 4}, 2 runs, search on 1, 4 GCON and 2
GAP configurations, the GCN on 1 split. ``--smoke``: one configuration of each, 20 training
epochs, 1 run (the tests). ``--threads`` (default 1) sets torch's CPU threads; ``--out`` (default
``outputs``) gets ``<dataset>_gcon.csv`` and ``.png`` (``_quick`` / ``_smoke`` appended in those
modes). Rows go to the CSV as they finish; progress bars go to stderr.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
import warnings

import torch
from torch_geometric.data import Data

from example_data import add_dataset_argument, file_stem, spec
from example_io import CsvWriter, add_out_argument, add_threads_argument, finish_figure, output_stem, progress, say
from example_protocol import class_sizes, edge_delta, header, labelled, load_clean, per_class_labelled_split
from pyg_private.datasets import attach_split
from pyg_private.models import (CaribouConfig, GCONConfig, config_grid, gcon_grid, run_caribou, run_gcn, run_gcon,
                                search_caribou, search_gcon)
from pyg_private.models.gcon import ENCODER_FIELDS, encode

EPSILONS = (0.5, 1.0, 2.0, 3.0, 4.0)
_GAP_BASE = CaribouConfig("gap", hidden=64, encoder_dim=16, lr=1e-2, epochs=200, weight_decay=5e-3, dropout=0.5)


def gcon_configs(mode: str) -> list[GCONConfig]:
    """The searched GCON configurations: ``mode`` is ``"full"``, ``"quick"`` or ``"smoke"``."""
    if mode == "smoke":
        return [GCONConfig(alpha=0.4, steps=(2,), regularization=0.01, embedding="logits", encoder_dim=64,
                           epochs=20)]
    if mode == "quick":  # the recipe's defaults (the best measured on Cora-ML) and a few neighbours
        return [GCONConfig()] + gcon_grid(alpha=(0.4, 0.8), steps=((2,),), regularization=(0.01,),
                                          pseudo_labels=(False, True), embedding=("logits",), encoder_dim=(64,))
    grid = [GCONConfig()]
    for encoder in (dict(embedding="hidden", encoder_dim=16), dict(embedding="logits", encoder_dim=64)):
        for loss in (dict(loss="soft_margin"), dict(loss="pseudo_huber", huber_delta=0.2)):
            grid += [dataclasses.replace(c, **encoder, **loss) for c in gcon_grid(
                alpha=(0.4, 0.8), steps=((2,), (10,)), regularization=(0.01, 0.2), pseudo_labels=(False, True),
                alpha_inference=(None, 0.1))]
    return grid


def gap_configs(mode: str) -> list[CaribouConfig]:
    if mode == "smoke":
        return [dataclasses.replace(_GAP_BASE, K=1, epochs=20)]
    return config_grid(_GAP_BASE, K=(1, 2) if mode == "quick" else (1, 2, 4),
                       use_x0=(True,) if mode == "quick" else (True, False))


def encoder_configs(mode: str) -> list[GCONConfig]:
    """The MLP baseline's encoder settings (the two GCON's grid uses)."""
    epochs = 20 if mode == "smoke" else GCONConfig().epochs
    return [GCONConfig(embedding="hidden", encoder_dim=16, epochs=epochs),
            GCONConfig(embedding="logits", encoder_dim=64, epochs=epochs)]


def split_sizes(num_nodes: int, class_sizes: list[int]) -> tuple[int, int, int]:
    """GCON's 20 per class / 500 / 1000 where the graph has room, else the scaled rule of the
    module notes. Reads only the node count and the class sizes (public labels)."""
    c = len(class_sizes)
    per_class = min(20, min(class_sizes))
    rest = num_nodes - per_class * c
    val = min(500, rest // 3)
    return per_class, val, min(1000, rest - val)


def load_splits(parser: argparse.ArgumentParser, name: str, seeds: list[int]) -> list[Data]:
    """One cleaned graph per seed with its split of the labelled nodes (see :func:`split_sizes`; a
    chain keeps its own)."""
    if spec(name).collection == "Chain":
        return [load_clean(parser, name, seed=s) for s in seeds]
    base = load_clean(parser, name)
    per_class, val, test = split_sizes(int(labelled(base.y).sum()), class_sizes(base.y))
    return [attach_split(base, per_class_labelled_split(base.y, per_class, val, test, seed=s)) for s in seeds]


def _mean_std(values: list[float]) -> tuple[float, float]:
    return 100 * statistics.mean(values), 100 * (statistics.stdev(values) if len(values) > 1 else 0.0)


def run_experiment(default_dataset: str, description: str) -> None:
    parser = argparse.ArgumentParser(description=description)
    add_dataset_argument(parser, default_dataset)
    parser.add_argument("--epsilons", nargs="+", type=float, default=None,
                        help="default: 0.5 1 2 3 4 (--quick: 1 4; --smoke: 1)")
    parser.add_argument("--runs", type=int, default=None, help="default 10 (--quick: 2, --smoke: 1)")
    parser.add_argument("--search-runs", type=int, default=None, help="default 3 (--quick, --smoke: 1)")
    parser.add_argument("--gcn-runs", type=int, default=None,
                        help="splits of the non-private GCN reference (default: all runs; --quick, --smoke: 1)")
    parser.add_argument("--quick", action="store_true", help="a small grid, 2 epsilons, 2 runs")
    parser.add_argument("--smoke", action="store_true", help="one tiny configuration end to end (the tests)")
    add_threads_argument(parser)
    add_out_argument(parser, "the CSV and the PNG")
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    epsilons = args.epsilons or {"smoke": [1.0], "quick": [1.0, 4.0], "full": list(EPSILONS)}[mode]
    runs = args.runs or {"smoke": 1, "quick": 2, "full": 10}[mode]
    search_runs = min(runs, args.search_runs or {"smoke": 1, "quick": 1, "full": 3}[mode])
    gcn_runs = min(runs, args.gcn_runs or {"smoke": 1, "quick": 1, "full": runs}[mode])
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # PyG / Opacus notices
    start = time.perf_counter()
    name = spec(args.dataset).label
    seeds = list(range(runs))
    data = load_splits(parser, args.dataset, seeds)
    delta = edge_delta(data[0])  # 1/|E| of the cleaned graph
    search = data[:search_runs]
    say(f"{header(data[0], args.dataset)}; split "
        f"{int(data[0].train_mask.sum())} / {int(data[0].val_mask.sum())} / {int(data[0].test_mask.sum())}; "
        f"{runs} runs (search on the first {search_runs}, GCN on {gcn_runs}); {mode} grid")
    rows = []
    stem = output_stem(args.out, file_stem(args.dataset) + "_gcon", mode)
    writer = CsvWriter(stem + ".csv")

    def emit(row: dict) -> None:
        rows.append(row)
        writer.write(row)
        say(_format(row))

    # the edge-free encodings, once per (run, encoder setting); the MLP baseline reads them too
    cache: dict = {}

    def encoded(i: int, config: GCONConfig) -> tuple:
        key = (i, seeds[i]) + tuple(getattr(config, f) for f in ENCODER_FIELDS)
        if key not in cache:
            cache[key] = encode(data[i], config, seeds[i])
        return cache[key]

    # non-private and edge-free references
    gcn_epochs = 5 if mode == "smoke" else 200
    gcn = [run_gcn(d, seed=s, epochs=gcn_epochs)[1]
           for d, s in progress(list(zip(data[:gcn_runs], seeds)), desc="GCN reference (non-private)")]
    emit({"dataset": name, "method": "GCN (non-private)", "epsilon": math.inf, **_stats(gcn)})
    encoders = encoder_configs(mode)
    val = {}
    for c in progress(encoders, desc="MLP encoders (validation)"):
        val[c] = statistics.mean(_accuracy(data[i], encoded(i, c)[1], "val_mask") for i in range(search_runs))
    best_encoder = max(encoders, key=val.__getitem__)
    mlp = [_accuracy(data[i], encoded(i, best_encoder)[1], "test_mask")
           for i in progress(range(runs), desc="MLP (test)")]
    emit({"dataset": name, "method": "MLP", "epsilon": 0.0, **_stats(mlp)})

    grid = gcon_configs(mode)
    gap_grid = gap_configs(mode)
    last = None
    for eps in progress(epsilons, desc=f"{name} epsilons"):
        search_cache = {key: v for key, v in cache.items() if key[0] < search_runs}
        config, found = search_gcon(search, progress(grid, desc=f"  GCON grid eps={eps:g} (x{search_runs} runs)"),
                                    epsilon=eps, delta=delta, seeds=seeds[:search_runs], cache=search_cache)
        cache.update(search_cache)
        # the search's runs are the first runs of the selected configuration (same seeds, same encodings);
        # clean_graph=True: the 1-stable cleaning of recipe_inputs.py (the graph is cleaned already: a no-op)
        finals = found + [run_gcon(data[i], config, epsilon=eps, delta=delta, seed=seeds[i],
                                   encoded=encoded(i, config), clean_graph=True)
                          for i in progress(range(search_runs, runs), desc="  GCON runs")]
        last = finals[-1]
        cal = finals[0].fit.calibration
        spent = max(r.accountant.epsilon("edge", delta) for r in finals)
        # solver diagnostics read the private objective: checked here, never written to the results
        if not all(r.fit.converged for r in finals):
            say("warning: a GCON fit did not reach its tolerance (the guarantee assumes the exact minimiser)")
        emit({"dataset": name, "method": "GCON", "epsilon": eps, **_stats([r.test_accuracy for r in finals]),
              "epsilon_spent": spent, "alpha": config.alpha, "steps": "+".join(map(str, config.steps)),
              "Lambda": config.regularization, "Lambda_eff": cal.Lambda, "Lambda_prime": cal.Lambda_prime,
              "beta": cal.beta, "noise_norm_over_n1": cal.d / cal.beta / cal.n1 if cal.beta > 0 else 0.0,
              "alpha_inference": config.alpha_inference or config.alpha, "loss": config.loss,
              "embedding": f"{config.embedding}{config.encoder_dim}", "pseudo_labels": config.pseudo_labels,
              # the validation split keeps the private head or the encoder's edge-free predictions per run
              "private_head_runs": sum(r.candidate == "private" for r in finals)})
        gap_config, gap_found = search_caribou(
            search, progress(gap_grid, desc=f"  GAP grid eps={eps:g} (x{search_runs} runs)"), epsilon=eps,
            delta=delta, seeds=seeds[:search_runs], clean_graph=True)  # GAP reads no min_degree
        gap = gap_found + [run_caribou(data[i], gap_config, epsilon=eps, delta=delta, seed=seeds[i], clean_graph=True)
                           for i in progress(range(search_runs, runs), desc="  GAP runs")]
        emit({"dataset": name, "method": "GAP", "epsilon": eps, **_stats([r.test_accuracy for r in gap]),
              "epsilon_spent": max(r.accountant.epsilon("edge", delta) for r in gap), "K": gap_config.K,
              # the validation split picks the private head or the edge-free one (on X0 alone) per run
              "private_head_runs": sum(r.candidate == "private" for r in gap)})
    writer.close()
    if last is not None:
        say("\naccountant of the last GCON run:\n" + str(last.accountant.report(delta)))
    say(f"wrote {stem}.csv")
    _plot(rows, name, stem + ".png")
    say(f"total {time.perf_counter() - start:.0f} s")


def _accuracy(data: Data, predicted: torch.Tensor, mask: str) -> float:
    m = getattr(data, mask)
    return float((predicted[m] == data.y[m]).double().mean())


def _stats(values: list[float]) -> dict:
    mean, std = _mean_std(values)
    return {"test_mean": mean, "test_std": std, "runs": len(values)}


def _format(row: dict) -> str:
    eps = "inf" if math.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
    extra = ""
    if row["method"] == "GCON":
        extra = (f"  alpha={row['alpha']} m={row['steps']} Lambda={row['Lambda']}->{row['Lambda_eff']:.3g}"
                 f" Lambda'={row['Lambda_prime']:.3g} beta={row['beta']:.3g} |B|/n1={row['noise_norm_over_n1']:.3g}"
                 f" alpha_I={row['alpha_inference']} {row['loss']} {row['embedding']} pseudo={row['pseudo_labels']}"
                 f" spent={row['epsilon_spent']:.4g}; the private head won {row['private_head_runs']} of {row['runs']}"
                 " runs (else the edge-free encoder)")
    elif row["method"] == "GAP":
        extra = (f"  K={row['K']} spent={row['epsilon_spent']:.4g}; the private head won {row['private_head_runs']} "
                 f"of {row['runs']} runs (else the edge-free head on X0 alone)")
    return (f"{row['dataset']:8s} eps={eps:>4s} {row['method']:18s} {row['test_mean']:5.1f} ± {row['test_std']:4.1f}"
            f" ({row['runs']} runs){extra}")


def _plot(rows: list[dict], name: str, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib not installed: no PNG (pip install 'pyg-private[plots]')")
        return
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for method, color in (("GCON", "C0"), ("GAP", "C1")):
        sel = [r for r in rows if r["method"] == method]
        if sel:
            ax.errorbar([r["epsilon"] for r in sel], [r["test_mean"] for r in sel], [r["test_std"] for r in sel],
                        marker="o", color=color, label=f"{method} (mean ± 1 std)", capsize=3)
    for method, color in (("MLP", "C2"), ("GCN (non-private)", "C3")):
        for r in (r for r in rows if r["method"] == method):
            ax.axhline(r["test_mean"], color=color, ls="--", label=f"{method} (mean)")
    ax.set_xlabel("epsilon (edge level)")
    ax.set_ylabel("test micro-F1 (%)")
    ax.set_title(f"GCON against GAP, MLP and GCN on {name}", fontsize=9)
    ax.grid(alpha=0.3)
    count = {r["method"]: r["runs"] for r in rows}
    finish_figure(fig, path, f"Points: mean test micro-F1 of the configuration selected on validation; error bars: "
                             f"± 1 standard deviation over {count.get('GCON', '-')} runs (seeded splits, "
                             f"initialisations and noise). Dashed: the edge-free MLP ({count.get('MLP', '-')} runs) "
                             f"and the non-private GCN ({count.get('GCN (non-private)', '-')} runs). Edge-level DP, "
                             "delta = 1/|E|.")
