"""Edge-level private link prediction on any offline graph, against every anchor, in one script.

The recipe is :func:`pyg_private.models.run_link_prediction` on a split made by
:class:`~pyg_private.transforms.PrivateLinkSplit` (a keyed hash of every node pair: message /
supervision / validation / test, 70 / 10 / 10 / 10 %; one negative per validation and test edge,
drawn uniformly in the same part, never filtered against the graph). Its three parts (a GAP release
of the features' 32 principal components and a release of the degrees over the message edges, a
decoder trained by DP-SGD on the supervision edges, report noisy max on the validation edges)
compose in parallel: the run costs
``(epsilon, delta)`` at edge level, one ledger. Printed and written per epsilon and split:

* ``selected``: what the recipe predicts with (its validation selection among the candidates below);
* its candidates, each on the test edges: ``private decoder`` (the released hops' similarity
  channels, DP-SGD), ``release cosine``, ``encoder-free decoder`` (the same decoder on the features
  alone, DP-SGD) and ``feature cosine`` (free: it reads no edge);
* ``randomized response``: :class:`~pyg_private.transforms.EdgeRandomizedResponse` on the message
  graph with a debiased aggregation (``link_anchors.rr_anchor``), where its expected output fits
  (``--rr-limit`` flipped-in pairs; otherwise the row says it was skipped and why);
* at epsilon ``inf``: the same pipeline without noise (the encoder-free decoder then is the
  edge-free decoder trained without noise);
* ``GCN (not private)``: PyG's ``link_pred.py`` model trained on every training edge.

The summary gives, per method and epsilon, the mean and standard deviation over the splits of the
test ROC-AUC, and the share of the gap between the best edge-free predictor (feature cosine or the
edge-free decoder without noise) and the non-private GCN that the selected predictor closes.

**Protocol.** The graph as PyG loads it, cleaned (self-loops dropped, duplicate and one-directional
entries merged: a deterministic 1-stable map, so the guarantee carries over to the graph as loaded);
**delta = 1/|E|** (``|E|``: undirected edges of the cleaned graph; ``--delta`` overrides it), the rule
of every example; ``num_edges``, the declared public edge count that sets DP-SGD's rate, is the
cleaned graph's (a published statistic of these benchmark graphs). Split ``r`` uses the hash key
``2024 + r`` and seed ``r`` (a known seed voids the guarantee: these are experiments). Rows go to the
CSV as they finish (``--quick`` to its own file); progress on stderr.

Usage::

    PYG_PRIVATE_DATA=/work/shared/data python examples/link_prediction.py --quick
    python examples/link_prediction.py --dataset Facebook --epsilons 1 2 4 8 --runs 3
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from example_data import add_dataset_argument, file_stem, load_or_exit
from example_io import CsvWriter, add_out_argument, add_threads_argument, output_stem, progress, say
from link_anchors import gcn_anchor, rr_anchor, rr_expected_edges
from pyg_private.models import LinkPredictionConfig, run_link_prediction
from pyg_private.models.recipe_inputs import clean_graph
from pyg_private.transforms import PrivateLinkSplit

#: The recipe's candidates, by the names the rows use.
CANDIDATE_NAMES = {"private": "private decoder", "release cosine": "release cosine",
                   "encoder-free": "encoder-free decoder", "feature cosine": "feature cosine"}


def _row(base: dict, method: str, metrics: dict | None, **extra) -> dict:
    row = dict(base, method=method)
    for name in ("auc", "hits@50", "mrr"):
        row[name] = "" if metrics is None else round(float(metrics[name]), 5)
    row.update(extra)
    return row


def summarise(rows: list[dict]) -> None:
    """Mean ± std of the test ROC-AUC per (method, epsilon), and the selected predictor's share of
    the gap between the best edge-free predictor and the non-private GCN."""
    groups: dict = {}
    for r in rows:
        if r["auc"] != "":
            groups.setdefault((r["method"], r["epsilon"]), []).append(float(r["auc"]))

    def mean(key):
        return statistics.fmean(groups[key]) if key in groups else math.nan

    say("\nsummary: test ROC-AUC, mean ± std over the splits")
    for (method, eps), values in groups.items():
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        say(f"  {method:24s} epsilon {eps:>4}  {statistics.fmean(values):.4f} ± {sd:.4f}  ({len(values)} splits)")
    free = max(mean(("feature cosine", 0)), mean(("encoder-free decoder", "inf")))
    gcn = mean(("GCN (not private)", "inf"))
    if math.isnan(free) or math.isnan(gcn):
        return
    say(f"best edge-free predictor {free:.4f}, non-private GCN {gcn:.4f}")
    for (method, eps) in groups:
        if method == "selected" and eps != "inf":
            share = (mean((method, eps)) - free) / (gcn - free) if gcn > free else math.nan
            say(f"  epsilon {eps:>4}: selected {mean((method, eps)):.4f}, "
                + (f"{round(100 * share):d}% of the gap closed" if not math.isnan(share)
                   else "the GCN is not above the edge-free predictor: no gap to close"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_argument(parser, "Cora")
    parser.add_argument("--epsilons", type=float, nargs="+", default=None,
                        help="edge-level epsilons (default 1 2 4 8; --quick: 1 8)")
    parser.add_argument("--runs", type=int, default=None, help="splits (keys 2024, 2025, ...; default 3, --quick 1)")
    parser.add_argument("--delta", type=float, default=None, help="default 1/|E| of the cleaned graph")
    parser.add_argument("--no-gcn", action="store_true", help="skip the non-private GCN anchor")
    parser.add_argument("--rr-limit", type=float, default=1e7,
                        help="run randomized response only where its expected flipped-in pairs are below this")
    parser.add_argument("--quick", action="store_true", help="1 split, epsilon 1 and 8 (under 2 minutes on Cora)")
    add_threads_argument(parser)
    add_out_argument(parser, "the CSV")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    epsilons = args.epsilons or ([1.0, 8.0] if args.quick else [1.0, 2.0, 4.0, 8.0])
    runs = args.runs or (1 if args.quick else 3)
    data = load_or_exit(parser, args.dataset, classification=False)
    num_edges = clean_graph(data.edge_index, data.num_nodes).size(1) // 2
    delta = args.delta if args.delta is not None else 1.0 / max(num_edges, 1)
    rule = "" if args.delta is None else " (--delta)"
    say(f"{args.dataset}: {data.num_nodes} nodes, {num_edges} undirected edges (cleaned); delta = "
        f"{'1/|E| = ' if args.delta is None else ''}{delta:.3g}{rule}; {runs} split(s); epsilons "
        f"{', '.join(f'{e:g}' for e in epsilons)}")
    writer = CsvWriter(output_stem(args.out, f"link_prediction_{file_stem(args.dataset)}",
                                   "quick" if args.quick else "full") + ".csv")
    config = LinkPredictionConfig(encoder_free_candidate=True)
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        writer.write(row)

    steps = runs * (2 * len(epsilons) + 1 + (0 if args.no_gcn else 1))
    bar = progress(total=steps, desc=f"{args.dataset} link prediction")
    for run in range(runs):
        split = PrivateLinkSplit(key=2024 + run, clean=True, generator=torch.Generator().manual_seed(run))
        train, val, test = split(data)
        if run == 0:
            say(f"split: message {train.edge_index.size(1) // 2}, supervision {train.edge_label_index.size(1)}, "
                f"validation {int(val.edge_label.sum())}, test {int(test.edge_label.sum())} edges")
        features = None
        for eps in epsilons + [math.inf]:
            start = time.perf_counter()
            result = run_link_prediction(train, val, test, config, epsilon=eps, delta=delta, num_edges=num_edges,
                                         seed=run)
            seconds = time.perf_counter() - start
            label = "inf" if math.isinf(eps) else eps
            base = dict(dataset=args.dataset, run=run, key=2024 + run, epsilon=label,
                        delta=delta if math.isfinite(eps) else 0.0)
            emit(_row(base, "selected", result.test, candidate=CANDIDATE_NAMES[result.candidate],
                      epsilon_spent=round(result.epsilon, 4), seconds=round(seconds, 1)))
            for cand, figures in result.candidates.items():
                if cand == "feature cosine":  # it reads no edge: one row per split, at epsilon 0
                    if math.isinf(eps):
                        emit(_row(dict(base, epsilon=0, delta=0.0), "feature cosine", figures["test"]))
                    continue
                emit(_row(base, CANDIDATE_NAMES[cand], figures["test"]))
            say(f"split {run}, epsilon {eps:g}: selected {CANDIDATE_NAMES[result.candidate]!r}, test AUC "
                f"{result.test['auc']:.4f}, Hits@50 {result.test['hits@50']:.4f} ({seconds:.0f} s)")
            features = result.model.features(train.x)
            bar.update()
        for eps in epsilons:
            start = time.perf_counter()
            base = dict(dataset=args.dataset, run=run, key=2024 + run, epsilon=eps, delta=0.0)
            metrics = rr_anchor(train, test, eps, features=features, seed=run, limit=args.rr_limit)
            expected = rr_expected_edges(data.num_nodes, eps)
            note = "" if metrics is not None else f"skipped: {expected:.3g} expected flipped-in pairs > --rr-limit"
            emit(_row(base, "randomized response", metrics, seconds=round(time.perf_counter() - start, 1), note=note))
            say(f"split {run}, epsilon {eps:g}: randomized response "
                + (f"test AUC {metrics['auc']:.4f}" if metrics is not None else note))
            bar.update()
        if not args.no_gcn:
            start = time.perf_counter()
            metrics = gcn_anchor(train, val, test, seed=run)
            emit(_row(dict(dataset=args.dataset, run=run, key=2024 + run, epsilon="inf", delta=0.0),
                      "GCN (not private)", metrics, seconds=round(time.perf_counter() - start, 1)))
            say(f"split {run}: non-private GCN test AUC {metrics['auc']:.4f}, Hits@50 {metrics['hits@50']:.4f}")
            bar.update()
    bar.close()
    writer.close()
    summarise(rows)
    say(f"wrote {writer.path}")


if __name__ == "__main__":
    main()
