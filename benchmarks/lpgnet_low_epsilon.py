"""What limits LPGNet at low epsilon: one class-count release, studied with everything else fixed.

For each seed it fits LPGNet's stage 0 as :func:`~pyg_private.models.run_lpgnet` does (the edge-free
MLP and its 5-fold out-of-fold log-probabilities), builds the default class rows (one-hot labels of the
training and validation nodes, the MLP's class probabilities elsewhere) and the exact neighbour
counts, then draws the release's Laplace noise at every ``--epsilons`` value (scale from
:func:`~pyg_private.models.lpgnet_noise_scale`, ``delta = 1/|E|``) and fits the stacked head of stage 1
(out-of-fold log-probabilities and the count features). Same protocol as
``recipes_across_datasets.py`` (50 / 25 / 25 % random splits of the labelled nodes). It prints, per
seed and as means:

* ``epsilon``: the head's test accuracy at each epsilon (``inf``: exact counts), to read which budget
  a target needs;
* ``degree``: test accuracy per degree bucket, against the edge-free MLP's (the prior);
* ``head``: the head's MLP settings (is the model or the release the limit?);
* ``design``: the release itself. ``identity`` is LPGNet's (every class count). ``pairs`` releases
  per node the differences of its counts for the classes ranked 1 and 2, 3 and 4, ... by its
  stage-0 out-of-fold probabilities (public at edge level; ``LPGNetConfig(release="pairs")``). Each
  class still moves one coordinate by 1 per edge end, so the l1 sensitivity stays 2 and the noise
  scale is the same, but a difference of two counts
  carries half the noise variance that it has when computed from two noisy counts; the other
  contrasts and the degree are lost. ``sources`` spends each edge's budget on the end that needs it:
  the validation nodes and half of the training nodes become *sources*, which get no release and
  are counted with weight 2 by their neighbours (an edge to a source moves one count by 2; between
  two other nodes, two counts by 1; between two sources, nothing: the l1 sensitivity stays 2). The
  other training nodes fit the head (80 %) and stop it early (20 %); the test nodes read it.
  ``uncertainty`` splits each edge's budget between its ends in proportion to their uncertainty
  under stage 0 (``1 - max p`` of the out-of-fold scores, as ``LPGNetConfig(edge_split="uncertainty")``;
  the l1 sensitivity stays 2), ``sources + uncertainty`` does both, and ``sources + uncertainty +
  pairs`` releases the pair contrasts of the latter (``LPGNetConfig(sources=True,
  release="pairs")``).

A utility study, not a release: the noise comes from a seeded float inverse-CDF sampler and nothing
leaves the process except accuracies. ``--quick`` runs Cora, one seed, under a minute on one thread.

Usage::

    python benchmarks/lpgnet_low_epsilon.py --dataset Facebook --seeds 0 1 2 --out facebook_low_eps.csv
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch_geometric.utils import degree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from example_data import load_dataset  # noqa: E402
from recipes_across_datasets import DATASETS, split  # noqa: E402

from pyg_private.models import lpgnet_noise_scale, out_of_fold_log_probs  # noqa: E402
from pyg_private.models.edge_free_mlp import fit_edge_free_mlp  # noqa: E402
from pyg_private.models.lpgnet import (class_order, count_features, pair_contrast_features,  # noqa: E402
                                       uncertainty_claims)
from pyg_private.models.recipe_inputs import clean_graph  # noqa: E402
from pyg_private.utils import simple_undirected  # noqa: E402
from pyg_private.utils.class_counts import neighbour_class_counts, ranked_pair_contrasts  # noqa: E402

PARTS = ("epsilon", "degree", "head", "design")
DEGREE_EDGES = (0, 2, 4, 7, 12, 20, 40, math.inf)
SOURCE_HEAD_SHARE = 0.5  # the training nodes that keep a release in the ``sources`` design
HEAD_SETTINGS = {"default": {}, "dropout 0": {"dropout": 0.0}, "hidden 256": {"hidden": 256},
                 "hidden 256, dropout 0.2, 500 epochs": {"hidden": 256, "dropout": 0.2, "epochs": 500},
                 "hidden 16": {"hidden": 16}}


def laplace(shape: tuple, scale: float, gen: torch.Generator) -> torch.Tensor:
    u = torch.rand(shape, generator=gen, dtype=torch.float64) - 0.5
    return -scale * torch.sign(u) * torch.log1p(-2 * u.abs())


def study(name: str, seed: int, epsilons: list, parts: set, emit) -> None:
    torch.manual_seed(seed)
    data = split(load_dataset(name, seed=seed), seed)
    n = data.num_nodes
    x, y = data.x.float(), data.y
    tr, va, te = data.train_mask, data.val_mask, data.test_mask
    C = int(y[tr | va | te].max()) + 1
    edge_index, _ = simple_undirected(clean_graph(data.edge_index, n), n)
    delta = 1.0 / (edge_index.size(1) // 2)
    deg = degree(edge_index[0], n)

    def fit(inputs, mask, s, val=va, **kw):
        return fit_edge_free_mlp(inputs.float(), y, mask, val, C, seed=s, **kw)

    def test_acc(pred, mask=te):
        return 100.0 * float((pred[mask] == y[mask]).float().mean()) if bool(mask.any()) else float("nan")

    t0 = time.time()
    stage0 = fit(x, tr, seed)
    logp = out_of_fold_log_probs(lambda m, f: fit(x, m, seed + 100 + 10 + f), x, stage0, tr, folds=5,
                                 seed=seed + 1).double()
    with torch.no_grad():
        rows = stage0.eval()(x).double().softmax(dim=-1)
    labelled = tr | va
    rows[labelled] = 0.0
    rows[labelled, y[labelled]] = 1.0
    exact = neighbour_class_counts(rows, edge_index, n)
    prior_pred = logp.argmax(dim=-1)
    emit(name, seed, "inf", "prior", "edge-free MLP", test_acc(prior_pred))
    print(f"{name} seed {seed}: stage 0 and out-of-fold scores in {time.time() - t0:.0f} s", flush=True)

    order = tr.nonzero().view(-1)
    order = order[torch.randperm(order.numel(), generator=torch.Generator().manual_seed(seed))]
    k = int(SOURCE_HEAD_SHARE * order.numel())
    stop_nodes, fit_nodes = (torch.zeros(n, dtype=torch.bool) for _ in range(2))
    stop_nodes[order[:k // 5]], fit_nodes[order[k // 5:k]] = True, True
    sources = va | (tr & ~stop_nodes & ~fit_nodes)
    weighted = neighbour_class_counts(rows, edge_index, n, sources=sources)  # as LPGNetConfig(sources=True)
    claims = uncertainty_claims(logp)  # as LPGNetConfig(edge_split="uncertainty")
    by_need = neighbour_class_counts(rows, edge_index, n, claims=claims)
    both = neighbour_class_counts(rows, edge_index, n, sources=sources, claims=claims)

    ranks = class_order(logp)  # as LPGNetConfig(release="pairs")

    def pairs(counts, noise):
        contrasts = ranked_pair_contrasts(counts, ranks)
        return pair_contrast_features(contrasts + noise(contrasts.shape), ranks)

    def head(features, mask=tr, val=va, **kw):
        inputs = torch.cat([logp, features], dim=-1)
        model = fit(inputs, mask, seed + 1, val=val, **kw)
        with torch.no_grad():
            return model.eval()(inputs.float()).argmax(dim=-1)

    for eps in epsilons:
        scale = lpgnet_noise_scale(epsilon=eps, delta=delta) if math.isfinite(eps) else 0.0
        gen = torch.Generator().manual_seed(1000 + seed)
        noise = (lambda shape: laplace(shape, scale, gen)) if scale > 0 else \
            (lambda shape: torch.zeros(shape, dtype=torch.float64))
        noisy = exact + noise(exact.shape)
        pred = head(count_features(noisy))
        emit(name, seed, eps, "epsilon", "identity (LPGNet)", test_acc(pred))
        if "degree" in parts:
            for lo, hi in zip(DEGREE_EDGES, DEGREE_EDGES[1:]):
                bucket = te & (deg >= lo) & (deg < hi)
                label = f"degree {lo}-{hi if math.isfinite(hi) else 'max'}"
                emit(name, seed, eps, "degree", label + " share of test %", 100 * float(bucket.sum() / te.sum()))
                emit(name, seed, eps, "degree", label, test_acc(pred, bucket))
                emit(name, seed, eps, "degree", label + " prior", test_acc(prior_pred, bucket))
        if "head" in parts:
            for label, kw in HEAD_SETTINGS.items():
                if kw:
                    emit(name, seed, eps, "head", label, test_acc(head(count_features(noisy), **kw)))
        if "design" in parts and C >= 2:
            emit(name, seed, eps, "design", "pairs", test_acc(head(pairs(exact, noise))))
            pred = head(count_features(weighted + noise(exact.shape)), mask=fit_nodes, val=stop_nodes)
            emit(name, seed, eps, "design", "sources", test_acc(pred))
            emit(name, seed, eps, "design", "uncertainty", test_acc(head(count_features(by_need + noise(exact.shape)))))
            pred = head(count_features(both + noise(exact.shape)), mask=fit_nodes, val=stop_nodes)
            emit(name, seed, eps, "design", "sources + uncertainty", test_acc(pred))
            pred = head(pairs(both, noise), mask=fit_nodes, val=stop_nodes)
            emit(name, seed, eps, "design", "sources + uncertainty + pairs", test_acc(pred))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=DATASETS, default="Facebook")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 1.5, 2.0, 4.0, math.inf])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--out", type=Path, default=None, help="CSV, one row per figure as it comes")
    parser.add_argument("--quick", action="store_true", help="Cora, seed 0, epsilon 1 and inf")
    args = parser.parse_args(argv)
    if args.quick:
        args.dataset, args.seeds, args.epsilons = "Cora", [0], [1.0, math.inf]
    torch.set_num_threads(1)
    results = defaultdict(list)
    writer = None
    if args.out is not None:
        handle = args.out.open("w", newline="")
        writer = csv.writer(handle)
        writer.writerow(["dataset", "seed", "epsilon", "part", "what", "test_accuracy"])

    def emit(name, seed, eps, part, what, value):
        results[(part, what, str(eps))].append(value)
        if writer is not None:
            writer.writerow([name, seed, eps, part, what, f"{value:.2f}"])
            handle.flush()
        print(f"  seed {seed}  eps {eps:>4}  {part:8s} {what:40s} {value:6.2f}", flush=True)

    for seed in args.seeds:
        study(args.dataset, seed, args.epsilons, set(args.parts), emit)
    print(f"\n{args.dataset}, mean test accuracy % over seeds {args.seeds}:")
    for (part, what, eps), values in results.items():
        values = [v for v in values if not math.isnan(v)]
        if values:
            print(f"  eps {eps:>4}  {part:8s} {what:40s} {statistics.mean(values):6.2f}  (n={len(values)})")


if __name__ == "__main__":
    main()
