"""What the two CARIBOU examples share: the paper's tables, the search loop, CSV and PNG output.

For every epsilon and method, the hyperparameters are chosen on the **validation** split
by the mean validation accuracy over the runs (:func:`pyg_private.models.search_caribou`);
that selection is **not charged** to the budget, as in the paper. The reported test
accuracies are those of the selected configuration's runs, and the epsilon spent is read
back from the selected run's own accountant.

Any dataset of :mod:`example_data` runs here: a chain is generated per seed with its own
split; any other graph gets CARIBOU's random split (10% train / 20% test / the rest
validation, seeded per run) drawn over its **labelled** nodes (``y >= 0``; an unlabelled node is in
no split). Every graph is cleaned first (:mod:`example_protocol`: self-loops dropped, duplicate and
one-directional entries merged; a deterministic, 1-stable map, so the guarantee carries over to the
graph as loaded), and the recipes get ``clean_graph=True``. delta = 1/|E|, ``|E|`` the undirected
edges of the cleaned graph (:func:`example_protocol.edge_delta`). The declared bound is a public
rule valid for every graph (``min_degree=0``, or ``D`` with the degree floor), never read off the
graph. Rows are written to the CSV as they finish, and progress bars (stderr) follow the grid.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from typing import Callable, Optional, Sequence

from torch_geometric.data import Data

from example_data import spec
from example_io import CsvWriter, epsilon_axis, finish_figure, progress, say
from example_protocol import load_clean, random_labelled_split
from pyg_private.datasets import attach_split
from pyg_private.models import CaribouConfig, ProGAPConfig, search_caribou, search_progap
from pyg_private.nn import ContractiveGraphLayer

EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, math.inf)
METHODS = ("caribou", "gap", "mlp", "progap")
LABELS = {"caribou": "CARIBOU", "gap": "GAP", "mlp": "MLP", "progap": "ProGAP"}
# The split protocols: CARIBOU's Sec. 6 text (10% train / 20% test, the rest validation) and GAP's data
# loader (70% / 10% / 20%), on which CARIBOU's Table 5 MLP and non-private figures are reproduced.
PROTOCOLS = {"random": (0.1, None, 0.2), "gap": (0.7, 0.1, 0.2)}

# Zheng et al., CARIBOU (arXiv:2506.22727), Sec. 6: Table 9 (mean of 3 runs) and Table 3 (best of 3 runs),
# edge-level DP, in %.
_COLUMNS = ("Chain-S", "Chain-M", "Chain-L", "Chain-X", "Cora")
_TABLE9 = {
    "caribou": {1: (78.1, 80.0, 70.0, 65.0, 84.3), 2: (90.6, 82.5, 71.7, 68.0, 86.0), 4: (90.6, 82.5, 71.7, 65.0, 86.7),
                8: (81.2, 82.5, 73.3, 68.0, 87.6), 16: (87.5, 85.0, 70.0, 68.0, 88.0),
                32: (90.6, 82.5, 78.3, 67.0, 88.2), math.inf: (100.0, 100.0, 100.0, 100.0, 88.4)},
    "gap": {1: (65.6, 67.5, 61.7, 55.5, 76.0), 2: (65.6, 67.5, 61.7, 55.0, 76.8), 4: (62.5, 60.0, 61.7, 55.5, 76.9),
            8: (59.4, 60.0, 61.7, 55.5, 78.2), 16: (59.4, 70.0, 61.7, 54.3, 80.3), 32: (59.4, 65.0, 61.7, 54.3, 82.2),
            math.inf: (97.9, 100.0, 93.3, 100.0, 85.1)},
    "mlp": {math.inf: (40.6, 47.5, 46.7, 51.0, 72.9)},
}
_TABLE3 = {
    "caribou": {1: (84.4, 82.5, 70.0, 66.0, 85.1), 2: (90.6, 82.5, 73.3, 68.0, 86.9), 4: (90.6, 82.5, 73.3, 69.0, 87.3),
                8: (93.8, 82.5, 75.0, 70.0, 88.4), 16: (93.8, 85.0, 73.3, 73.0, 88.6),
                32: (93.8, 82.5, 78.3, 73.0, 88.6), math.inf: (100.0, 100.0, 100.0, 100.0, 89.3)},
    "gap": {1: (65.6, 67.5, 61.7, 67.0, 77.1), 2: (65.6, 67.5, 61.7, 68.0, 77.5), 4: (65.6, 67.5, 61.7, 67.0, 77.1),
            8: (65.6, 60.0, 61.7, 67.0, 79.0), 16: (62.5, 70.0, 61.7, 68.0, 81.7), 32: (59.4, 65.0, 61.7, 68.0, 82.5),
            math.inf: (100.0, 100.0, 100.0, 100.0, 85.2)},
    "mlp": {math.inf: (40.6, 47.5, 46.7, 51.0, 72.9)},
}


def paper_value(table: str, method: str, dataset: str, eps: float) -> float:
    """The paper's accuracy (%) or NaN where it reports none (MLP is edge-free: one value for every eps;
    the CARIBOU paper reports no ProGAP)."""
    rows = (_TABLE9 if table == "mean" else _TABLE3).get(method, {})
    if method == "mlp":
        eps = math.inf
    row = rows.get(eps)
    return row[_COLUMNS.index(dataset)] if row is not None and dataset in _COLUMNS else math.nan


def load_runs(parser: argparse.ArgumentParser, name: str, seeds: Sequence[int],
              protocol: str = "random") -> list[Data]:
    """One cleaned graph per seed: a chain generated from the seed (features and its own split), or
    the graph ``name`` with the ``protocol``'s random split of its labelled nodes drawn from the seed
    (``"random"``: CARIBOU's 10% / rest / 20%; ``"gap"``: GAP's loader, 70% / 10% / 20%)."""
    if spec(name).collection == "Chain":
        if protocol != "random":
            parser.error(f"{name} has its own split; --split {protocol} applies to the other graphs")
        return [load_clean(parser, name, seed=s) for s in seeds]
    base = load_clean(parser, name)
    train, val, test = PROTOCOLS[protocol]
    return [attach_split(base, random_labelled_split(base.y, train, val, test, seed=s)) for s in seeds]


def bounds_from(degree_floor: Optional[int]) -> dict:
    """The declared public bound: ``min_degree=0`` (valid for every graph: isolated nodes and
    degree-1 nodes included), or ``min_degree=D`` made true by the degree floor."""
    return {"min_degree": 0} if degree_floor is None else {"min_degree": degree_floor, "degree_floor": True}


def run_grid(dataset: str, datasets: Sequence[Data], grids: dict[str, list[CaribouConfig | ProGAPConfig]], *,
             epsilons: Sequence[float], delta: float, min_degree: int, seeds: Sequence[int],
             degree_floor: bool = False,
             extra: Callable[[float, CaribouConfig, list], dict] | None = None,
             writer: Optional[CsvWriter] = None) -> list[dict]:
    """Search every method at every epsilon; one result row per (method, epsilon), printed and
    written to ``writer`` as soon as it is done.

    ``min_degree`` (and ``degree_floor``) are the declared public bound of
    :class:`~pyg_private.nn.ContractiveGraphLayer`: without the floor it must not exceed
    the graph's smallest degree minus one (0 with isolated nodes), or the layer refuses
    the graph. ProGAP (``grids["progap"]``, :func:`~pyg_private.models.search_progap`) reads no
    degree bound: its sensitivity is sqrt(2) per stage at edge level.
    """
    bounds = {"min_degree": min_degree, **({"degree_floor": True} if degree_floor else {})}
    rows = []
    edge_free: dict = {}  # the MLP reads no edge: its search (same seeds) is the same at every epsilon
    tasks = [(eps, method) for eps in epsilons for method in grids]
    bar = progress(tasks, desc=f"{dataset} eps x method", leave=False)
    for eps, method in bar:
        grid = grids[method]
        bar.set_postfix_str(f"eps={eps:g} {LABELS[method]}", refresh=False)
        start = time.perf_counter()
        if method == "mlp" and "mlp" in edge_free:
            config, runs = edge_free["mlp"]
        else:
            configs = progress(grid, desc=f"  {LABELS[method]} grid (x{len(seeds)} runs)", total=len(grid))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Opacus / PyG notices; privacy warnings are not expected here
                # the graphs are cleaned already; clean_graph=True keeps every recipe's input the simple
                # graph it documents (a deterministic, 1-stable map: pyg_private/models/recipe_inputs.py)
                if method == "progap":
                    config, runs = search_progap(datasets, configs, epsilon=eps, delta=delta, seeds=seeds,
                                                 clean_graph=True)
                else:
                    config, runs = search_caribou(datasets, configs, epsilon=eps, delta=delta, seeds=seeds,
                                                  clean_graph=True, **bounds)
            configs.close()
            if method == "mlp":
                edge_free["mlp"] = config, runs
        tests = [100 * r.test_accuracy for r in runs]
        spent = [r.accountant.epsilon("edge", delta) if math.isfinite(eps) else math.inf for r in runs]
        row = {
            "dataset": dataset, "epsilon": eps, "delta": delta, "method": LABELS[method],
            "min_degree": min_degree, "degree_floor": degree_floor, "runs": len(runs),
            "test_mean": statistics.mean(tests), "test_std": statistics.stdev(tests) if len(tests) > 1 else 0.0,
            "test_best": max(tests), "test_runs": " ".join(f"{t:.1f}" for t in tests),
            "val_mean": 100 * statistics.mean(r.val_accuracy for r in runs),
            "paper_mean": paper_value("mean", method, dataset, eps),
            "paper_best": paper_value("best", method, dataset, eps),
            "epsilon_spent": max(spent), "noise_std": runs[0].noise_std,
            "noise_multiplier": runs[0].noise_multiplier, "configs_searched": len(grid),
            "K": config.K if method == "progap" else config.K if method != "mlp" else 0,
            "contraction": config.contraction if method == "caribou" else "",
            "alpha1": config.alpha1 if method == "caribou" else "", "beta": config.beta if method == "caribou" else "",
            "hidden": config.hidden,
            "encoder_dim": "" if method == "progap" else config.encoder_dim if config.encoder_dim else "raw",
            "use_x0": True if method == "progap" else config.use_x0,
            # which head won the validation selection (ProGAP: the stage that predicts; 0 is its edge-free MLP)
            "candidates": " ".join(str(r.stage if method == "progap" else getattr(r, "candidate", ""))
                                   for r in runs).strip(),
            "seconds": time.perf_counter() - start,
        }
        if method == "caribou" and math.isfinite(eps):  # what linear accounting of the same K hops would force
            linear = ContractiveGraphLayer(config.K, config.contraction, config.alpha1, config.beta,
                                           epsilon=eps, delta=delta, accounting="linear", **bounds)
            row["noise_std_linear"] = linear.noise_std
        if extra is not None:
            row.update(extra(eps, config, runs))
        rows.append(row)
        if writer is not None:
            writer.write(row)
        say(_format(row))
        if math.isfinite(eps) and method != "mlp" and eps == min(epsilons):
            report = str(runs[0].accountant.report(delta)).replace("\n", "\n    ")
            say(f"    accountant of the selected run 0:\n    {report}")
    bar.close()
    return rows


HEADER = (f"{'dataset':8s} {'eps':>4s} {'method':8s} {'mean':>6s} {'best':>6s} {'paper':>6s} {'p.best':>6s} "
          f"{'spent':>7s} {'std':>6s}  selected (K, C_L, alpha1, beta, hidden, encoder, X0)  runs")


def _format(row: dict) -> str:
    eps = "inf" if math.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
    spent = "inf" if math.isinf(row["epsilon_spent"]) else f"{row['epsilon_spent']:.4f}"
    sel = f"K={row['K']}"
    if row["method"] == "CARIBOU":
        sel += f" C_L={row['contraction']} a1={row['alpha1']} b={row['beta']}"
    if row["method"] == "ProGAP":
        sel = f"stages={row['K']} h={row['hidden']} stage per run {row['candidates']}"
    else:
        sel += f" h={row['hidden']} enc={row['encoder_dim']}" + ("" if row["use_x0"] else " noX0")
    linear = f" (linear: {row['noise_std_linear']:.2f})" if "noise_std_linear" in row else ""
    return (f"{row['dataset']:8s} {eps:>4s} {row['method']:8s} {row['test_mean']:6.1f} {row['test_best']:6.1f} "
            f"{row['paper_mean']:6.1f} {row['paper_best']:6.1f} {spent:>7s} {row['noise_std']:6.2f}  {sel}  "
            f"[{row['test_runs']}]{linear}")


def plot(rows: list[dict], datasets: Sequence[str], path: str) -> None:
    """Mean test accuracy against epsilon per dataset, with error bars of one standard deviation
    over the runs: ours (solid) and the paper's Table 9 (dashed, where it has the dataset)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib not installed: no PNG (pip install 'pyg-private[plots]')")
        return
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.6), squeeze=False)
    runs = sorted({r["runs"] for r in rows})
    for ax, name in zip(axes[0], datasets):
        methods = []
        for i, (method, color) in enumerate((("CARIBOU", "C0"), ("GAP", "C1"), ("MLP", "C2"), ("ProGAP", "C3"))):
            sel = [r for r in rows if r["dataset"] == name and r["method"] == method and math.isfinite(r["epsilon"])]
            if not sel:
                continue
            methods.append(method)
            eps = [r["epsilon"] for r in sel]
            # a small offset per method keeps the error bars apart
            ax.errorbar([e * 2 ** (0.06 * (i - 1)) for e in eps], [r["test_mean"] for r in sel],
                        [r["test_std"] for r in sel], fmt="o-", color=color,
                        capsize=3, label=f"{method} (ours, mean ± 1 std)")
            paper = [r["paper_mean"] for r in sel]
            if not all(math.isnan(p) for p in paper):
                ax.plot(eps, paper, "x--", color=color, alpha=0.6, label=f"{method} (paper, Table 9 mean)")
        epsilon_axis(ax, [r["epsilon"] for r in rows if r["dataset"] == name], base=2)
        ax.set_title(f"{', '.join(methods)} on {name}", fontsize=9)
        ax.set_xlabel("epsilon (edge level)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    finish_figure(fig, path, "Points: mean test accuracy of the configuration selected on validation (offset "
                             "slightly along epsilon per method); error "
                             f"bars: ± 1 standard deviation over its {'/'.join(map(str, runs))} runs (seeds 0, 1, "
                             "...: split, initialisation and noise); dashed: the mean the paper reports (Zheng et "
                             "al. 2025, Table 9), where it has the dataset. Edge-level DP; MLP uses no edges.")
