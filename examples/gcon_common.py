"""What the two GCON examples share: the grids, the search, baselines, CSV and PNG.

Protocol (GCON, Wei et al., §VI): split 20 per class / 500 validation / 1000 test (seeded
0..runs-1), delta = 1/|E| (|E| = edge_index columns, as the paper's Table II), epsilon in
{0.5, 1, 2, 3, 4}. For each epsilon the hyperparameters are selected by the mean
**validation** accuracy of the first ``--search-runs`` runs (not charged to the budget,
as in the paper); the selected configuration is then run on all ``--runs`` splits and
its test micro-F1 (= accuracy) mean and standard deviation are reported.

Baselines, in the same run: MLP (the 2-layer edge-free encoder's own predictions, the
encoder setting with the best validation accuracy), GCN (non-private, PyG ``GCNConv``,
2 layers), and GAP (edge-level aggregation perturbation, ``pyg_private.models.run_caribou``
with ``method="gap"``) at the same epsilon and delta.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import time
import warnings
from typing import Callable

import torch
from torch_geometric.data import Data

from example_io import write_csv
from pyg_private.datasets import attach_split, per_class_split
from pyg_private.models import (CaribouConfig, GCONConfig, config_grid, gcon_grid, run_caribou, run_gcn, run_gcon,
                                search_caribou, search_gcon)
from pyg_private.models.gcon import encode

EPSILONS = (0.5, 1.0, 2.0, 3.0, 4.0)


def gcon_configs(quick: bool) -> list[GCONConfig]:
    if quick:
        return gcon_grid(alpha=(0.4, 0.8), steps=((2,),), regularization=(0.01,), pseudo_labels=(False, True),
                         embedding=("logits",), encoder_dim=(64,))
    grid = []
    for encoder in (dict(embedding="hidden", encoder_dim=16), dict(embedding="logits", encoder_dim=64)):
        for loss in (dict(loss="soft_margin"), dict(loss="pseudo_huber", huber_delta=0.2)):
            grid += [dataclasses.replace(c, **encoder, **loss) for c in gcon_grid(
                alpha=(0.4, 0.8), steps=((2,), (10,)), regularization=(0.01, 0.2), pseudo_labels=(False, True),
                alpha_inference=(None, 0.1))]
    return grid


def _mean_std(values: list[float]) -> tuple[float, float]:
    return 100 * statistics.mean(values), 100 * (statistics.stdev(values) if len(values) > 1 else 0.0)


def run_experiment(name: str, load: Callable[[], Data], description: str) -> None:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--search-runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="outputs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # PyG / Opacus notices
    start = time.perf_counter()
    base = load()
    num_edges = base.edge_index.size(1)
    delta = 1.0 / num_edges
    seeds = list(range(args.runs))
    data = [attach_split(base, per_class_split(base.y, seed=s)) for s in seeds]
    search = data[:args.search_runs]
    print(f"{name}: {base.num_nodes} nodes, {num_edges} edge_index columns, delta = 1/{num_edges}, "
          f"{args.runs} runs (search on the first {args.search_runs})")
    rows = []

    # non-private and edge-free references
    gcn = [run_gcn(d, seed=s)[1] for d, s in zip(data, seeds)]
    rows.append({"dataset": name, "method": "GCN (non-private)", "epsilon": math.inf, **_stats(gcn)})
    encoders = [GCONConfig(embedding="hidden", encoder_dim=16), GCONConfig(embedding="logits", encoder_dim=64)]
    best_encoder = max(encoders, key=lambda c: statistics.mean(_encoder_acc(d, c, s, "val_mask")
                                                               for d, s in zip(search, seeds)))
    mlp = [_encoder_acc(d, best_encoder, s, "test_mask") for d, s in zip(data, seeds)]
    rows.append({"dataset": name, "method": "MLP", "epsilon": 0.0, **_stats(mlp)})
    for row in rows:
        print(_format(row))

    grid = gcon_configs(args.quick)
    gap_grid = config_grid(CaribouConfig("gap", hidden=64, encoder_dim=16, lr=1e-2, epochs=200, weight_decay=5e-3,
                                         dropout=0.5), K=(1, 2, 4), use_x0=(True, False))
    cache: dict = {}
    for eps in args.epsilons:
        config, _ = search_gcon(search, grid, epsilon=eps, delta=delta, seeds=seeds[:args.search_runs], cache=cache)
        runs = [run_gcon(d, config, epsilon=eps, delta=delta, seed=s,
                         encoded=cache.get((i, s) + tuple(getattr(config, f) for f in _ENC)))
                for i, (d, s) in enumerate(zip(data, seeds))]
        cal = runs[0].fit.calibration
        spent = max(r.accountant.epsilon("edge", delta) for r in runs)
        row = {"dataset": name, "method": "GCON", "epsilon": eps, **_stats([r.test_accuracy for r in runs]),
               "epsilon_spent": spent, "alpha": config.alpha, "steps": "+".join(map(str, config.steps)),
               "Lambda": config.regularization, "Lambda_eff": cal.Lambda, "Lambda_prime": cal.Lambda_prime,
               "beta": cal.beta, "noise_norm_over_n1": cal.d / cal.beta / cal.n1 if cal.beta > 0 else 0.0,
               "alpha_inference": config.alpha_inference or config.alpha, "loss": config.loss, "embedding": f"{config.embedding}{config.encoder_dim}",
               "pseudo_labels": config.pseudo_labels}
        # solver diagnostics read the private objective: checked here, never written to the results
        if not all(r.fit.converged for r in runs):
            print("warning: a GCON fit did not reach its tolerance (the guarantee assumes the exact minimiser)")
        rows.append(row)
        print(_format(row))
        gap_config, _ = search_caribou(search, gap_grid, epsilon=eps, delta=delta, seeds=seeds[:args.search_runs],
                                       min_degree=0)
        gap = [run_caribou(d, gap_config, epsilon=eps, delta=delta, min_degree=0, seed=s) for d, s in zip(data, seeds)]
        row = {"dataset": name, "method": "GAP", "epsilon": eps, **_stats([r.test_accuracy for r in gap]),
               "epsilon_spent": max(r.accountant.epsilon("edge", delta) for r in gap), "K": gap_config.K}
        rows.append(row)
        print(_format(row))
    print("\naccountant of the last GCON run:\n" + str(runs[-1].accountant.report(delta)))
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, name.lower().replace("-", "_") + "_gcon")
    write_csv(rows, stem + ".csv")
    _plot(rows, name, stem + ".png")
    print(f"total {time.perf_counter() - start:.0f} s")


_ENC = ("encoder_dim", "embedding", "dropout", "weight_decay", "epochs", "lr")


def _encoder_acc(data: Data, config: GCONConfig, seed: int, mask: str) -> float:
    _, predicted = encode(data, config, seed)
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
                 f" spent={row['epsilon_spent']:.4g}")
    elif row["method"] == "GAP":
        extra = f"  K={row['K']} spent={row['epsilon_spent']:.4g}"
    return f"{row['dataset']:8s} eps={eps:>4s} {row['method']:18s} {row['test_mean']:5.1f} ± {row['test_std']:4.1f}{extra}"


def _plot(rows: list[dict], name: str, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no PNG (pip install 'pyg-private[plots]')")
        return
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for method, color in (("GCON", "C0"), ("GAP", "C1")):
        sel = [r for r in rows if r["method"] == method]
        ax.errorbar([r["epsilon"] for r in sel], [r["test_mean"] for r in sel], [r["test_std"] for r in sel],
                    marker="o", color=color, label=method, capsize=3)
    for method, color in (("MLP", "C2"), ("GCN (non-private)", "C3")):
        (r,) = [r for r in rows if r["method"] == method]
        ax.axhline(r["test_mean"], color=color, ls="--", label=method)
    ax.set_xlabel("epsilon (edge level)")
    ax.set_ylabel("test micro-F1 (%)")
    ax.set_title(name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")
