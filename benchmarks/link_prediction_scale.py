"""Edge-level private link prediction at scale: :func:`pyg_private.models.run_link_prediction` on a
generated graph of 100,000 nodes and 1,000,000 undirected edges (the size of the package's other
propagation benchmarks), one thread.

The graph is a planted partition, so that the structure carries signal: 1,000 communities of 100
nodes; each edge picks a uniform endpoint ``u`` and, with probability ``--within`` (0.8), a partner in
``u``'s community, otherwise a uniform one (duplicates and self-loops are cleaned away by the split);
64 features per node, the community's Gaussian centroid plus Gaussian noise of standard deviation
``--feature-noise`` (2.0, so the features alone are a weak predictor). Printed: the time of each
step (generation, the keyed split, the private run at each epsilon, which includes the GAP release,
DP-SGD and the selection), peak resident memory, and the test ROC-AUC of the selected predictor
next to the feature cosine.

Usage::

    python benchmarks/link_prediction_scale.py [--nodes 100000] [--edges 1000000] [--epsilons 4]
"""
from __future__ import annotations

import argparse
import resource
import time

import torch
from torch_geometric.data import Data

from pyg_private.models import LinkPredictionConfig, run_link_prediction
from pyg_private.transforms import PrivateLinkSplit


def planted_partition(nodes: int, edges: int, community: int, within: float, channels: int, noise: float,
                      seed: int) -> Data:
    """The generated graph of the module notes (edges listed once per direction, before cleaning)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randint(0, nodes, (edges,), generator=g)
    inside = torch.rand(edges, generator=g) < within
    base = (u // community) * community
    v = torch.where(inside, base + torch.randint(0, community, (edges,), generator=g) % (nodes - base).clamp_max(community),
                    torch.randint(0, nodes, (edges,), generator=g))
    centroids = torch.randn(nodes // community + 1, channels, generator=g)
    x = centroids[torch.arange(nodes) // community] + noise * torch.randn(nodes, channels, generator=g)
    edge_index = torch.stack([torch.cat([u, v]), torch.cat([v, u])])
    return Data(x=x, edge_index=edge_index, num_nodes=nodes)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--community", type=int, default=100)
    parser.add_argument("--within", type=float, default=0.8)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--feature-noise", type=float, default=2.0)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[4.0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    data = planted_partition(args.nodes, args.edges, args.community, args.within, args.channels,
                             args.feature_noise, args.seed)
    print(f"generated {args.nodes:,} nodes, {args.edges:,} edge draws in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    train, val, test = PrivateLinkSplit(key=2024, clean=True, generator=torch.Generator().manual_seed(args.seed))(data)
    num_edges = (train.edge_index.size(1) // 2 + train.edge_label_index.size(1) + int(val.edge_label.sum())
                 + int(test.edge_label.sum()))  # the cleaned graph's edges, every one in exactly one part
    print(f"split in {time.perf_counter() - start:.1f} s: {num_edges:,} undirected edges after cleaning; message "
          f"{train.edge_index.size(1) // 2:,}, supervision {train.edge_label_index.size(1):,}, validation "
          f"{int(val.edge_label.sum()):,}, test {int(test.edge_label.sum()):,}")
    for eps in args.epsilons:
        start = time.perf_counter()
        result = run_link_prediction(train, val, test, LinkPredictionConfig(), epsilon=eps, delta=1.0 / num_edges,
                                     num_edges=num_edges, seed=args.seed)
        seconds = time.perf_counter() - start
        print(f"epsilon {eps:g} (delta 1/|E|): {seconds:.1f} s, {result.steps:,} DP-SGD steps at rate "
              f"{result.sample_rate:.3g}; selected {result.candidate!r}, test AUC {result.test['auc']:.4f} "
              f"(feature cosine {result.candidates['feature cosine']['test']['auc']:.4f})")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    print(f"peak resident memory {peak:.2f} GiB, {args.threads} thread(s)")


if __name__ == "__main__":
    main()
