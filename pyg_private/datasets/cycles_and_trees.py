r"""A synthetic graph-classification dataset whose label is structural: trees against graphs with cycles.

Graph :math:`i` has :math:`n_i` nodes drawn uniformly from ``[min_nodes, max_nodes]`` and a label
:math:`y_i \in \{0, 1\}` (half of each, in random order):

* class 0: a uniformly random labelled tree on :math:`n_i` nodes (a random Prüfer sequence),
  :math:`n_i - 1` edges, no cycle;
* class 1: such a tree plus ``extra_edges`` distinct node pairs that are not tree edges, drawn
  uniformly (each closes a cycle): :math:`n_i - 1 + \text{extra\_edges}` edges.

Node features (``2 + noise_features`` columns, float32): column 0 is the constant 1; column 1 is a
weak label signal, Bernoulli(:math:`\tfrac12 + s`) in class 1 and Bernoulli(:math:`\tfrac12 - s`) in
class 0, :math:`s` = ``feature_signal``; the other columns are independent :math:`\mathcal N(0, 1)`
noise. Without edges a classifier sees only the node count (the same law in both classes) and the
signal column (with :math:`s = 0.05` and 20 nodes, the Bayes accuracy of its mean is about 0.67);
with edges, the number of edges minus the number of nodes separates the classes exactly, and a
sum-aggregating GNN (GIN: the degree sum after one layer) can read it. Edges are undirected (both
directions listed), without self-loops or duplicates.
"""
from __future__ import annotations

import math

import torch
from torch_geometric.data import Data

from ._validate import check_count, make_generator

__all__ = ["cycles_vs_trees"]


def _prufer_tree(n: int, gen: torch.Generator) -> list[tuple[int, int]]:
    """The edges of a uniformly random labelled tree on ``n >= 2`` nodes (Prüfer decoding)."""
    if n == 2:
        return [(0, 1)]
    seq = torch.randint(0, n, (n - 2,), generator=gen).tolist()
    degree = [1] * n
    for v in seq:
        degree[v] += 1
    edges = []
    for v in seq:
        leaf = min(u for u in range(n) if degree[u] == 1)
        edges.append((leaf, v))
        degree[leaf] -= 1
        degree[v] -= 1
    u, w = [i for i in range(n) if degree[i] == 1]
    edges.append((u, w))
    return edges


def cycles_vs_trees(num_graphs: int = 600, *, min_nodes: int = 10, max_nodes: int = 30, extra_edges: int = 3,
                    feature_signal: float = 0.05, noise_features: int = 6, seed: int | torch.Generator = 0
                    ) -> list[Data]:
    """``num_graphs`` graphs of the trees-against-cycles task (see the module notes), each a
    :class:`~torch_geometric.data.Data` with ``x`` ``[n, 2 + noise_features]``, ``edge_index`` and
    ``y`` ``[1]``; everything drawn from one generator seeded with ``seed``."""
    num_graphs = check_count(num_graphs, "num_graphs", minimum=1)
    min_nodes = check_count(min_nodes, "min_nodes", minimum=3)
    max_nodes = check_count(max_nodes, "max_nodes", minimum=min_nodes)
    extra_edges = check_count(extra_edges, "extra_edges", minimum=1)
    noise_features = check_count(noise_features, "noise_features", minimum=0)
    if (min_nodes - 1) * (min_nodes - 2) // 2 < extra_edges:
        raise ValueError(f"`min_nodes`={min_nodes} leaves fewer than `extra_edges`={extra_edges} non-tree pairs")
    s = float(feature_signal)
    if not (math.isfinite(s) and 0.0 <= s <= 0.5):
        raise ValueError(f"`feature_signal` must lie in [0, 0.5]; got {feature_signal!r}")
    gen = make_generator(seed)
    labels = torch.arange(num_graphs) % 2
    labels = labels[torch.randperm(num_graphs, generator=gen)]
    graphs = []
    for y in labels.tolist():
        n = int(torch.randint(min_nodes, max_nodes + 1, (1,), generator=gen))
        edges = _prufer_tree(n, gen)
        if y == 1:
            taken = {(min(u, v), max(u, v)) for u, v in edges}
            added = 0
            while added < extra_edges:
                u, v = torch.randint(0, n, (2,), generator=gen).tolist()
                key = (min(u, v), max(u, v))
                if u != v and key not in taken:
                    taken.add(key)
                    edges.append(key)
                    added += 1
        pairs = torch.tensor(edges, dtype=torch.long).t()
        edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
        signal = (torch.rand(n, generator=gen) < (0.5 + s if y == 1 else 0.5 - s)).float()
        x = torch.cat([torch.ones(n, 1), signal.view(-1, 1), torch.randn(n, noise_features, generator=gen)], dim=1)
        graphs.append(Data(x=x, edge_index=edge_index, y=torch.tensor([y]), num_nodes=n))
    return graphs
