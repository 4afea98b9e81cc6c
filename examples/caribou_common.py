"""What the two CARIBOU examples share: the paper's tables, the search loop, CSV and PNG output.

For every epsilon and method, the hyperparameters are chosen on the **validation** split
by the mean validation accuracy over the runs (:func:`pyg_private.models.search_caribou`);
that selection is **not charged** to the budget, as in the paper. The reported test
accuracies are those of the selected configuration's runs, and the epsilon spent is read
back from the selected run's own accountant.
"""
from __future__ import annotations

import math
import statistics
import time
import warnings
from typing import Callable, Sequence

from torch_geometric.data import Data

from pyg_private.models import CaribouConfig, search_caribou
from pyg_private.nn import ContractiveGraphLayer

EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, math.inf)
METHODS = ("caribou", "gap", "mlp")
LABELS = {"caribou": "CARIBOU", "gap": "GAP", "mlp": "MLP"}

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
    """The paper's accuracy (%) or NaN where it reports none (MLP is edge-free: one value for every eps)."""
    rows = (_TABLE9 if table == "mean" else _TABLE3)[method]
    if method == "mlp":
        eps = math.inf
    row = rows.get(eps)
    return row[_COLUMNS.index(dataset)] if row is not None else math.nan


def edge_delta(num_undirected_edges: int) -> float:
    """GAP's and CARIBOU's delta rule, ``1 / 10**len(str(|E|))`` (Chain-S: 42 edges -> 1e-2)."""
    return 1.0 / 10 ** len(str(int(num_undirected_edges)))


def run_grid(dataset: str, datasets: Sequence[Data], grids: dict[str, list[CaribouConfig]], *,
             epsilons: Sequence[float], delta: float, min_degree: int, seeds: Sequence[int],
             degree_floor: bool = False,
             extra: Callable[[float, CaribouConfig, list], dict] | None = None) -> list[dict]:
    """Search every method at every epsilon; one result row per (method, epsilon).

    ``min_degree`` (and ``degree_floor``) are the declared public bound of
    :class:`~pyg_private.nn.ContractiveGraphLayer`: without the floor it must not exceed
    the graph's smallest degree minus one (0 with isolated nodes), or the layer refuses
    the graph.
    """
    bounds = {"min_degree": min_degree, **({"degree_floor": True} if degree_floor else {})}
    rows = []
    for eps in epsilons:
        for method, grid in grids.items():
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Opacus / PyG notices; privacy warnings are not expected here
                config, runs = search_caribou(datasets, grid, epsilon=eps, delta=delta, seeds=seeds, **bounds)
            tests = [100 * r.test_accuracy for r in runs]
            spent = [r.accountant.epsilon("edge", delta) if math.isfinite(eps) else math.inf for r in runs]
            row = {
                "dataset": dataset, "epsilon": eps, "delta": delta, "method": LABELS[method],
                "min_degree": min_degree, "degree_floor": degree_floor,
                "test_mean": statistics.mean(tests), "test_best": max(tests),
                "test_runs": " ".join(f"{t:.1f}" for t in tests),
                "val_mean": 100 * statistics.mean(r.val_accuracy for r in runs),
                "paper_mean": paper_value("mean", method, dataset, eps),
                "paper_best": paper_value("best", method, dataset, eps),
                "epsilon_spent": max(spent), "noise_std": runs[0].noise_std,
                "noise_multiplier": runs[0].noise_multiplier, "configs_searched": len(grid),
                "K": config.K if method != "mlp" else 0, "contraction": config.contraction if method == "caribou" else "",
                "alpha1": config.alpha1 if method == "caribou" else "", "beta": config.beta if method == "caribou" else "",
                "hidden": config.hidden, "encoder_dim": config.encoder_dim if config.encoder_dim else "raw",
                "use_x0": config.use_x0,
                "seconds": time.perf_counter() - start,
            }
            if method == "caribou" and math.isfinite(eps):  # what linear accounting of the same K hops would force
                linear = ContractiveGraphLayer(config.K, config.contraction, config.alpha1, config.beta,
                                               epsilon=eps, delta=delta, accounting="linear", **bounds)
                row["noise_std_linear"] = linear.noise_std
            if extra is not None:
                row.update(extra(eps, config, runs))
            rows.append(row)
            print(_format(row), flush=True)
            if math.isfinite(eps) and method != "mlp" and eps == min(epsilons):
                report = str(runs[0].accountant.report(delta)).replace("\n", "\n    ")
                print(f"    accountant of the selected run 0:\n    {report}")
    return rows


HEADER = (f"{'dataset':8s} {'eps':>4s} {'method':8s} {'mean':>6s} {'best':>6s} {'paper':>6s} {'p.best':>6s} "
          f"{'spent':>7s} {'std':>6s}  selected (K, C_L, alpha1, beta, hidden, encoder, X0)  runs")


def _format(row: dict) -> str:
    eps = "inf" if math.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
    spent = "inf" if math.isinf(row["epsilon_spent"]) else f"{row['epsilon_spent']:.4f}"
    sel = f"K={row['K']}"
    if row["method"] == "CARIBOU":
        sel += f" C_L={row['contraction']} a1={row['alpha1']} b={row['beta']}"
    sel += f" h={row['hidden']} enc={row['encoder_dim']}" + ("" if row["use_x0"] else " noX0")
    linear = f" (linear: {row['noise_std_linear']:.2f})" if "noise_std_linear" in row else ""
    return (f"{row['dataset']:8s} {eps:>4s} {row['method']:8s} {row['test_mean']:6.1f} {row['test_best']:6.1f} "
            f"{row['paper_mean']:6.1f} {row['paper_best']:6.1f} {spent:>7s} {row['noise_std']:6.2f}  {sel}  "
            f"[{row['test_runs']}]{linear}")


def plot(rows: list[dict], datasets: Sequence[str], path: str) -> None:
    """Mean test accuracy against epsilon per dataset: ours (solid) and the paper's Table 9 (dashed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no PNG (pip install 'pyg-private[plots]')")
        return
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.6), squeeze=False)
    for ax, name in zip(axes[0], datasets):
        for method, color in (("CARIBOU", "C0"), ("GAP", "C1"), ("MLP", "C2")):
            sel = [r for r in rows if r["dataset"] == name and r["method"] == method and math.isfinite(r["epsilon"])]
            if not sel:
                continue
            eps = [r["epsilon"] for r in sel]
            ax.plot(eps, [r["test_mean"] for r in sel], "o-", color=color, label=f"{method} (ours)")
            paper = [r["paper_mean"] for r in sel]
            if not all(math.isnan(p) for p in paper):
                ax.plot(eps, paper, "x--", color=color, alpha=0.6, label=f"{method} (paper)")
        ax.set_xscale("log", base=2)
        ax.set_title(name)
        ax.set_xlabel("epsilon (edge level)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")
