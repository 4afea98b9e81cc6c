"""ProGAP on Cora (or any node-classification graph): edge-level DP node classification, next to LPGNet and GAP.

ProGAP (Sajadmanesh and Gatica-Perez, "ProGAP: Progressive Graph Neural Networks with
Differential Privacy Guarantees", WSDM 2024, Sec. 4) through
:func:`pyg_private.models.run_progap`, with the architecture and training of the authors' code
(github.com/sisaman/ProGAP): stage k has one base MLP per cached input (the features and the k
noisy aggregations so far), their outputs concatenated and row-normalised before the stage's
head; after stage k < K the newest base's output (unit rows) is summed over the neighbours once
with Gaussian noise (one release, one accountant event: K events in all, composed exactly as
GDP). The prediction comes from the stage with the best validation accuracy (stage 0, the
edge-free MLP, is a candidate). The ProGAP paper reports no Cora figures (its datasets are
Facebook, Amazon, Reddit, FB-100 and WikiCS), so nothing here is compared with a published Cora
number.

LPGNet (Kolluri et al., "LPGNet: Link Private Graph Networks for Node Classification", CCS 2022) is
:func:`pyg_private.models.run_lpgnet`: MLPs that read each node's noisy counts of its neighbours'
classes (Laplace noise, one release per stage), searched over the class rows {predicted, soft} and
the stages {1, 2} (``--quick``: its defaults). GAP is :func:`pyg_private.models.run_caribou` with
``method="gap"`` (all K hops released, linear composition), searched the same way.

**Any dataset** (``--dataset``, default Cora; any name of ``example_data.NAMES`` with node
features: Cora_ML, Facebook, Computers, CS, Cornell, Cornell-year, the chains, ...). Every graph is
cleaned first (self-loops dropped, duplicate and one-directional entries merged: a deterministic,
1-stable map, see ``pyg_private/models/recipe_inputs.py``, so the guarantee carries over to the graph
as loaded) and the recipes get ``clean_graph=True``. The splits are drawn over the **labelled**
nodes (``y >= 0``: Cornell's unknown labels are in no split; a chain keeps its own split).

Protocols (``--split``): ``random`` is CARIBOU's random 10% train / 20% test, the rest
validation (Zheng et al. 2025, Sec. 6); ``gap`` is GAP's and ProGAP's loader, 70% / 10% / 20%;
``per-class`` is 20 per class / 500 / 1000 (GCON's Cora-ML protocol; scaled down on a graph without
room for it, as ``gcon_common.split_sizes``). **delta = 1/|E|**, ``|E|`` the undirected edges of the
cleaned graph (Cora: 1/5278), the rule of every example here, printed in the header (``--delta``
overrides it). Seeds 0..runs-1 fix the split, the initialisation and the noise (a known seed voids
the guarantee: these are experiments).

Hyperparameters are chosen on the **validation** split by mean validation accuracy over the runs
(not charged to the budget, as in the papers); the reported test accuracies are the selected
configuration's. ProGAP's full grid is the authors' (``experiments.py`` of their repository, depth
cut at 4): learning rate {0.01, 0.05} x base layers {1, 2} x stages {1, 2, 3, 4}, the other
settings :class:`~pyg_private.models.ProGAPConfig`'s defaults (hidden 16, 100 epochs, no dropout or
weight decay), and the small-graph variant (stages {1, 2, 3, 4} x width {16, 64}). ``--quick``
searches 3 ProGAP configurations (the authors' stages 2 and 3, the variant's 2; every earlier stage
is a candidate of ProGAP's selection too) and 1 GAP configuration (K 1) over 2 runs (not 3), under
2 minutes on one thread on Cora (it searched 5 ProGAP and 2 GAP configurations over 3 runs until
that took 3.7 minutes on a loaded 2-core machine). ``--threads`` (default 1) sets torch's CPU threads; ``--out``
(default ``outputs``) gets ``progap_<dataset>_<split>.csv`` (``_quick`` appended for a quick run, so
it never overwrites a full run's). The CSV is written row by row, so an interrupted run keeps
what it finished; progress bars go to stderr, one line per finished search to stdout.

    PYG_PRIVATE_DATA=/work/shared/data python examples/progap_cora.py --quick
    python examples/progap_cora.py --epsilons 1 4 8 inf --split gap [--dataset Facebook] [--threads 1] [--out outputs]
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings

import torch
from torch_geometric.data import Data

from example_data import add_dataset_argument, file_stem, spec
from example_io import CsvWriter, add_out_argument, add_threads_argument, output_stem, progress, say
from example_protocol import (class_sizes, edge_delta, header, labelled, load_clean, per_class_labelled_split,
                              random_labelled_split)
from gcon_common import split_sizes
from pyg_private.datasets import attach_split
from pyg_private.models import (CaribouConfig, LPGNetConfig, ProGAPConfig, config_grid, search_caribou,
                                search_lpgnet, search_progap)


#: The authors' configuration (their code's defaults; see pyg_private.models.progap).
AUTHORS = ProGAPConfig()
#: This package's earlier variant, which suits small graphs with weak features (Cora with 10% training
#: nodes) better: one base over the concatenated inputs, renormalised aggregations, unit-length
#: features, no BatchNorm, 200 epochs with weight decay and dropout.
SMALL_GRAPH = ProGAPConfig(combine="inputs", batch_norm=False, renormalize=True, feature_norm="l2", epochs=200,
                           weight_decay=5e-3, dropout=0.5)


def progap_grid(quick: bool) -> list[ProGAPConfig]:
    """The authors' grid (learning rate x base layers x stages) and the small-graph variant's (stages x
    width); quick: the first learning rate and base depth at stages 2 and 3, and the variant's stage 2 at
    width 16 (the earlier stages are candidates of every run's selection)."""
    if quick:
        return (config_grid(AUTHORS, lr=(1e-2,), base_layers=(1,), K=(2, 3))
                + config_grid(SMALL_GRAPH, K=(2,), hidden=(16,)))
    return (config_grid(AUTHORS, lr=(1e-2, 5e-2), base_layers=(1, 2), K=(1, 2, 3, 4))
            + config_grid(SMALL_GRAPH, K=(1, 2, 3, 4), hidden=(16, 64)))


def lpgnet_grid(quick: bool) -> list[LPGNetConfig]:
    """LPGNet's defaults; the full grid adds the paper's one-hot class rows and a second stage."""
    if quick:
        return [LPGNetConfig()]
    return config_grid(LPGNetConfig(), rows=("predicted", "soft"), K=(1, 2))


def gap_grid(quick: bool) -> list[CaribouConfig]:
    base = CaribouConfig(method="gap", hidden=64, encoder_dim=16, lr=1e-2, epochs=200, weight_decay=5e-3,
                         dropout=0.5)
    if quick:  # the head on [X0, X^1] (GAP's)
        return config_grid(base, K=(1,))
    return config_grid(base, K=(1, 2, 3, 5), encoder_dim=(16, None), use_x0=(True, False))


def splits(parser: argparse.ArgumentParser, name: str, protocol: str, runs: int) -> tuple[Data, list[Data]]:
    """The cleaned graph and one split of its **labelled** nodes per seed 0..runs-1 (a chain: one
    generated graph per seed, with its own split)."""
    if spec(name).collection == "Chain":
        if protocol != "random":
            parser.error(f"{name} has its own split; --split {protocol} applies to the other graphs")
        datasets = [load_clean(parser, name, seed=s) for s in range(runs)]
        return datasets[0], datasets
    base = load_clean(parser, name)
    if protocol == "random":
        make = lambda s: random_labelled_split(base.y, 0.1, None, 0.2, seed=s)  # noqa: E731
    elif protocol == "gap":
        make = lambda s: random_labelled_split(base.y, 0.7, 0.1, 0.2, seed=s)  # noqa: E731
    else:  # 20 per class / 500 / 1000, scaled down where the graph has no room (gcon_common.split_sizes)
        sizes = split_sizes(int(labelled(base.y).sum()), class_sizes(base.y))
        make = lambda s: per_class_labelled_split(base.y, *sizes, seed=s)  # noqa: E731
    return base, [attach_split(base, make(s)) for s in range(runs)]


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_argument(parser, "Cora")
    parser.add_argument("--split", default="random", choices=["random", "gap", "per-class"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 4.0])
    parser.add_argument("--runs", type=int, default=None, help="splits (default 3; --quick: 2)")
    parser.add_argument("--delta", type=float, default=None,
                        help="default: 1/|E|, |E| the undirected edges of the cleaned graph (every example's rule)")
    parser.add_argument("--quick", action="store_true", help="a small grid (under 2 minutes on one thread)")
    parser.add_argument("--no-gap", action="store_true", help="skip the GAP baseline")
    parser.add_argument("--no-lpgnet", action="store_true", help="skip LPGNet")
    add_threads_argument(parser)
    add_out_argument(parser, "the CSV")
    args = parser.parse_args()
    runs_count = args.runs or (2 if args.quick else 3)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    name = spec(args.dataset).label
    base, datasets = splits(parser, args.dataset, args.split, runs_count)
    seeds = list(range(runs_count))
    delta = edge_delta(base) if args.delta is None else args.delta  # every example's rule, unless --delta
    d0 = datasets[0]
    say(header(base, args.dataset) + ("" if args.delta is None else f" (--delta {delta:g} used instead)")
        + f"; {args.split} split {int(d0.train_mask.sum())} / {int(d0.val_mask.sum())} / {int(d0.test_mask.sum())}; "
        f"{runs_count} runs; grid {'quick' if args.quick else 'full'}")
    grids = {"ProGAP": progap_grid(args.quick)}
    if not args.no_lpgnet:
        grids["LPGNet"] = lpgnet_grid(args.quick)
    if not args.no_gap:
        grids["GAP"] = gap_grid(args.quick)
    say(f"{'eps':>4s} {'method':7s} {'test mean ± std':>16s} {'val':>6s} {'spent':>7s} {'sigma':>7s} "
        f"{'sec':>5s}  selected")
    writer = CsvWriter(output_stem(args.out, f"progap_{file_stem(args.dataset)}_{args.split}",
                                   "quick" if args.quick else "full") + ".csv")
    bar = progress([(eps, method) for eps in args.epsilons for method in grids], desc=f"{name} eps x method")
    for eps, method in bar:
        grid = grids[method]
        t0 = time.perf_counter()
        configs = progress(grid, desc=f"  {method} grid eps={eps:g} (x{runs_count} runs)", total=len(grid))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Opacus / PyG notices
            # clean_graph=True: the recipes' deterministic, 1-stable cleaning (pyg_private/models/recipe_inputs.py),
            # so the guarantee holds for the graph as loaded (the graph is cleaned already: there, a no-op)
            if method == "ProGAP":
                config, runs = search_progap(datasets, configs, epsilon=eps, delta=delta, seeds=seeds,
                                             clean_graph=True)
            elif method == "LPGNet":
                config, runs = search_lpgnet(datasets, configs, epsilon=eps, delta=delta, seeds=seeds,
                                             clean_graph=True)
            else:  # GAP reads no min_degree
                config, runs = search_caribou(datasets, configs, epsilon=eps, delta=delta, seeds=seeds,
                                              clean_graph=True)
        configs.close()
        tests = [100 * r.test_accuracy for r in runs]
        mean, std = mean_std(tests)
        spent = max(r.accountant.epsilon("edge", delta) for r in runs) if math.isfinite(eps) else math.inf
        row = {"dataset": name, "split": args.split, "epsilon": eps, "delta": delta, "method": method,
               "test_mean": mean, "test_std": std, "test_runs": " ".join(f"{t:.1f}" for t in tests),
               "val_mean": 100 * statistics.mean(r.val_accuracy for r in runs), "epsilon_spent": spent,
               "noise_multiplier": runs[0].noise_scale if method == "LPGNet" else runs[0].noise_multiplier,
               "noise_std": runs[0].noise_std,
               "configs_searched": len(grid), "seconds": time.perf_counter() - t0}
        if method == "ProGAP":
            mlp, _ = mean_std([100 * r.stage_test_accuracy[0] for r in runs])
            row.update(stages=config.K, hidden=config.hidden, dropout=config.dropout,
                       weight_decay=config.weight_decay, lr=config.lr, base_layers=config.base_layers,
                       combine=config.combine, selected_stages=" ".join(str(r.stage) for r in runs),
                       stage0_mlp_test_mean=mlp)
            chosen = (f"K={config.K} {'authors' if config.combine == 'cat' else 'small-graph variant'} "
                      f"lr={config.lr:g} base={config.base_layers} h={config.hidden} "
                      f"stage per run {row['selected_stages']} (stage-0 MLP test {mlp:.1f})")
        elif method == "LPGNet":  # noise_multiplier: the Laplace scale of each release
            row.update(stages=config.K, hidden=config.hidden, rows=config.rows,
                       selected_stages=" ".join(str(r.stage) for r in runs))
            chosen = f"K={config.K} rows={config.rows} stage per run {row['selected_stages']}"
        else:
            winners = " ".join(str(getattr(r, "candidate", "private")) for r in runs)
            row.update(stages=config.K, hidden=config.hidden, encoder_dim=config.encoder_dim or "raw",
                       use_x0=config.use_x0, candidates=winners)
            chosen = (f"K={config.K} enc={config.encoder_dim or 'raw'}" + ("" if config.use_x0 else " noX0")
                      + f" head per run: {winners}")
        writer.write(row)  # on disk before the next search starts
        e = "inf" if math.isinf(eps) else f"{eps:g}"
        s = "inf" if math.isinf(spent) else f"{spent:.4f}"
        say(f"{e:>4s} {method:7s} {mean:8.1f} ± {std:5.1f} {row['val_mean']:6.1f} {s:>7s} "
            f"{row['noise_multiplier']:7.3f} {row['seconds']:5.0f}  {chosen}  [{row['test_runs']}]")
        if method == "ProGAP" and math.isfinite(eps) and eps == min(args.epsilons):
            report = str(runs[0].accountant.report(delta)).replace("\n", "\n    ")
            say(f"    accountant of the selected ProGAP run 0:\n    {report}")
    bar.close()
    writer.close()
    say(f"wrote {writer.path}\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
