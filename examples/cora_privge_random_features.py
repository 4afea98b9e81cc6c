"""The structure-only level of the PrivGE pipeline on Cora: features that carry no label signal.

Runs the non-private PrivGE node-classification pipeline (PPR with D^(r-1) A D^(-r), no
self-loops, alpha = 0.1, r = 0.1; the reference scripts' MLP head) on splits 0-4 with the
real features replaced by random ones (dense Gaussian; sparse rows with k = 20 or 200
uniform entries in [-1, 1]), and with the real features. Every local-DP mechanism on Cora
at epsilon <= 5 lands at the random-feature level (see the PrivGE page of the documentation's user guide).

Any dataset (``--dataset``, see ``example_data.py``): the random features have the graph's
feature dimension; nothing is read off the graph but its size. The graph is cleaned first (the
recipes' deterministic map, ``pyg_private/models/recipe_inputs.py``) and the 50/25/25 splits are
drawn over the **labelled** nodes (``y >= 0``). Non-private: no epsilon, no delta. ``--quick`` (under 2 minutes
on one thread): 2 splits instead of 5. ``--smoke``: the real features and one random
variant, 1 split, a short head training (the tests). ``--threads`` (default 1) sets torch's CPU
threads; ``--out`` (default ``outputs``) gets ``<dataset>_privge_random_features.csv`` (``_quick`` or
``_smoke`` appended in those modes). One CSV row per variant, written as it finishes; progress bars
go to stderr.

    python examples/cora_privge_random_features.py [--quick] [--dataset CiteSeer] [--threads 1] [--out outputs]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import warnings

import torch

from example_data import add_dataset_argument, file_stem, spec
from example_io import CsvWriter, add_out_argument, add_threads_argument, output_stem, progress, say
from example_protocol import load_clean, random_labelled_split
from pyg_private.datasets import attach_split
from pyg_private.models.privge import PrivGEConfig, run_privge_node

#: the non-private pipeline of examples/cora_privge.py with its selected propagation
CONFIG = PrivGEConfig(mechanism="none", k=None, alpha=0.1, r=0.1, hidden=128, layers=2, dropout=0.5, lr=1e-2,
                      weight_decay=5e-4, epochs=300, patience=50)


def sparse_rows(n: int, d: int, k: int, g: torch.Generator) -> torch.Tensor:
    """k random coordinates per row, uniform in [-1, 1]; the others 0 (HDS's support)."""
    k = min(k, d)
    idx = torch.rand(n, d, generator=g).argsort(1)[:, :k]
    return torch.zeros(n, d).scatter_(1, idx, torch.rand(n, k, generator=g) * 2 - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_argument(parser, "Cora")
    parser.add_argument("--runs", type=int, default=None, help="splits (default 5; --quick: 2; --smoke: 1)")
    parser.add_argument("--quick", action="store_true", help="2 splits")
    parser.add_argument("--smoke", action="store_true", help="two variants, 1 split, short training (the tests)")
    add_threads_argument(parser)
    add_out_argument(parser, "the CSV")
    args = parser.parse_args()
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    runs = args.runs or {"smoke": 1, "quick": 2, "full": 5}[mode]
    config = dataclasses.replace(CONFIG, steps=10, epochs=20, patience=5) if args.smoke else CONFIG
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    base = load_clean(parser, args.dataset)  # cleaned: self-loops dropped, duplicate / one-way entries merged
    name = spec(args.dataset).label
    n, d = base.num_nodes, base.num_features
    variants = {
        f"dense Gaussian (all {d})": lambda g: torch.randn(n, d, generator=g),
        "sparse k=20 uniform": lambda g: sparse_rows(n, d, 20, g),
        "sparse k=200 uniform": lambda g: sparse_rows(n, d, 200, g),
        "real features": None,
    }
    if args.smoke:
        variants = {k: v for k, v in variants.items() if k in ("sparse k=20 uniform", "real features")}
    say(f"{name}: {n} nodes, {d} features; {runs} split(s) 50/25/25; test accuracy mean ± std over the splits")
    stem = output_stem(args.out, f"{file_stem(args.dataset)}_privge_random_features", mode)
    with CsvWriter(stem + ".csv") as writer:
        for variant, make in progress(list(variants.items()), desc="feature variants"):
            accs = []
            for s in progress(range(runs), desc=f"  {variant}"):
                data = attach_split(base, random_labelled_split(base.y, 0.5, 0.25, 0.25, s))
                if make is not None:
                    data.x = make(torch.Generator().manual_seed(100 + s))
                accs.append(100 * run_privge_node(data, config, float("inf"), s).test)
            std = statistics.stdev(accs) if len(accs) > 1 else 0.0
            writer.write({"dataset": name, "features": variant, "test_mean": statistics.mean(accs), "test_std": std,
                          "runs": len(accs), "test_runs": ";".join(f"{a:.2f}" for a in accs)})
            say(f"{variant:28s} {statistics.mean(accs):.1f} ± {std:.1f}  {[round(a, 1) for a in accs]}")
    say(f"wrote {stem}.csv")
    say(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
