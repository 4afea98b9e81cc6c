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
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from example_data import load_or_exit  # noqa: E402

from pyg_private.metrics import hits_at_k, roc_auc  # noqa: E402
from pyg_private.models import LinkPredictionConfig, run_link_prediction  # noqa: E402
from pyg_private.models.recipe_inputs import clean_graph  # noqa: E402
from pyg_private.transforms import PrivateLinkSplit  # noqa: E402
from pyg_private.utils import sample_pairs  # noqa: E402


class _GCN(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(channels, 128), GCNConv(128, 64)

    def encode(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    @staticmethod
    def decode(z, pairs):
        return (z[pairs[0]] * z[pairs[1]]).sum(-1)


def gcn_anchor(train, val, test, seed: int = 0) -> tuple[float, float]:
    """Test ROC-AUC and Hits@50 of the non-private GCN at its best validation epoch. Not private, it
    uses every training edge as PyG's ``RandomLinkSplit`` would: the message and the supervision
    edges, both as messages and as positive labels."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = _GCN(train.num_features)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sup = train.edge_label_index
    message = train.edge_index
    pos = torch.cat([message[:, message[0] < message[1]], sup], dim=1)
    train = train.clone()
    train.edge_index = torch.cat([pos, pos.flip(0)], dim=1)
    best = (-1.0, math.nan, math.nan)
    for _ in range(200):
        model.train()
        opt.zero_grad()
        z = model.encode(train.x, train.edge_index)
        neg = sample_pairs(train.num_nodes, pos.size(1), generator=gen)
        scores = torch.cat([model.decode(z, pos), model.decode(z, neg)])
        labels = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))])
        F.binary_cross_entropy_with_logits(scores, labels).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            z = model.encode(train.x, train.edge_index)
            score = roc_auc(model.decode(z, val.edge_label_index), val.edge_label)
            if score > best[0]:
                s, lab = model.decode(z, test.edge_label_index), test.edge_label.bool()
                best = (score, roc_auc(s, test.edge_label), hits_at_k(s[lab], s[~lab], 50))
    return best[1], best[2]


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
    auc, hits = gcn_anchor(train, val, test, args.seed)
    print(f"non-private GCN anchor: test AUC {auc:.4f}, Hits@50 {hits:.4f} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
