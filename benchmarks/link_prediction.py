"""Edge-level private link prediction (:func:`pyg_private.models.run_link_prediction`) on an offline
graph, against the free feature cosine and a non-private GCN anchor.

Protocol: the graph as PyG loads it, cleaned (``PrivateLinkSplit(clean=True)``), split by the keyed
hash into message / supervision / validation / test pairs (70 / 10 / 10 / 10 %, one negative per
validation and test edge, drawn in the same part), ``delta = 1e-5``, one seed. ``num_edges`` (the
declared public edge count that sets DP-SGD's rate) is the cleaned graph's: a published statistic of
these benchmark graphs. Printed per epsilon: the selected candidate, its test ROC-AUC and Hits@50,
the test figures of every candidate, and the seconds of the run. The anchor is PyG's
``examples/link_pred.py`` model (two ``GCNConv`` layers, 128 and 64 channels, dot product, BCE against
fresh uniform negatives every epoch; Adam 0.01, 200 epochs, the epoch of best validation AUC), trained
without privacy on every training edge (message and supervision edges as both messages and labels,
as ``RandomLinkSplit`` would give it). ``--epsilons`` may include ``inf``: the same private pipeline
without noise.

Usage::

    PYG_PRIVATE_DATA=../shared/data python benchmarks/link_prediction.py --dataset Cora --epsilons 1 4 8
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from example_data import load_or_exit  # noqa: E402
from link_anchors import gcn_anchor  # noqa: E402

from pyg_private.models import LinkPredictionConfig, run_link_prediction  # noqa: E402
from pyg_private.models.recipe_inputs import clean_graph  # noqa: E402
from pyg_private.transforms import PrivateLinkSplit  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0, 8.0])
    parser.add_argument("--key", type=int, default=2024, help="the split's hash key")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decoder", default=None, help="LinkPredictionConfig.decoder (default: the config's)")
    parser.add_argument("--no-anchor", action="store_true", help="skip the non-private GCN anchor")
    parser.add_argument("--anchor-only", action="store_true", help="only the non-private GCN anchor")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_or_exit(parser, args.dataset, classification=False)
    split = PrivateLinkSplit(key=args.key, clean=True, generator=torch.Generator().manual_seed(args.seed))
    train, val, test = split(data)
    num_edges = clean_graph(data.edge_index, data.num_nodes).size(1) // 2
    print(f"{args.dataset}: {data.num_nodes} nodes, {num_edges} undirected edges; message "
          f"{train.edge_index.size(1) // 2}, supervision {train.edge_label_index.size(1)}, validation "
          f"{int(val.edge_label.sum())}, test {int(test.edge_label.sum())}")
    config = LinkPredictionConfig() if args.decoder is None else LinkPredictionConfig(decoder=args.decoder)
    for eps in [] if args.anchor_only else args.epsilons:
        start = time.perf_counter()
        result = run_link_prediction(train, val, test, config, epsilon=eps, delta=1e-5, num_edges=num_edges,
                                     seed=args.seed)
        seconds = time.perf_counter() - start
        print(f"epsilon {eps:g}: selected {result.candidate!r}, test AUC {result.test['auc']:.4f}, Hits@50 "
              f"{result.test['hits@50']:.4f} ({seconds:.1f} s)")
        for name, figures in result.candidates.items():
            print(f"    {name:15s} test AUC {figures['test']['auc']:.4f}  Hits@50 {figures['test']['hits@50']:.4f}")
    if args.no_anchor:
        return
    start = time.perf_counter()
    anchor = gcn_anchor(train, val, test, args.seed)
    print(f"non-private GCN anchor: test AUC {anchor['auc']:.4f}, Hits@50 {anchor['hits@50']:.4f} "
          f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
