"""pyg-private demo: edge-private statistics of a synthetic social graph, one accountant.

Runs offline in a few seconds. A stochastic block model stands in for a sensitive
social graph (three communities). Three releases protect its edges, each charged to
one :class:`pyg_private.PrivacyAccountant` with an edge-level budget:

1. the number of edges, with the Laplace mechanism (pure DP);
2. the edge counts between and within communities, with the Gaussian mechanism
   (calibrated exactly through Gaussian DP);
3. a whole randomised copy of the graph (edge randomized response), from which the
   community densities are estimated without bias.

A fourth release that would overrun the budget is refused before any noise is drawn.

**Negative counts.** The private counts are unbiased: where a true count is small against the
noise (the randomised graph's estimates between two communities, above all), a release can be
negative. The table shows each release as drawn and, beside it, ``max(0, .)``: post-processing
of the release, so it costs no privacy, but it is no longer unbiased (it can only move up).

**Options.** ``--dataset`` (default ``SBM``, the synthetic graph above) also takes an offline
graph small enough for the randomised copy of every node pair (Cora, CiteSeer, Cora_ML, the
chains), with its classes as the communities (``Planetoid``'s ``y``; an unknown label ``y < 0``
is a community of its own); without the files it stops with one line naming where they come
from. ``--quick`` runs the same releases (the demo takes a few seconds) and writes its own
CSV. ``--threads`` (default 1) sets torch's CPU threads. ``--out`` (default ``outputs``) gets
``demo_<dataset>.csv`` (``demo_<dataset>_quick.csv`` with ``--quick``): one row per release,
written as it is drawn.

Usage: ``python examples/demo.py [--seed 0] [--budget 2.5] [--delta 1e-5] [--dataset SBM] [--quick]
[--threads 1] [--out outputs]``.
"""
from __future__ import annotations

import argparse

import torch
from torch_geometric.data import Data
from torch_geometric.utils import stochastic_blockmodel_graph

from example_data import add_dataset_argument, file_stem, load_or_exit, spec
from example_io import CsvWriter, add_out_argument, add_threads_argument, output_stem
from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.mechanisms import GaussianMechanism, LaplaceMechanism
from pyg_private.models.recipe_inputs import clean_graph
from pyg_private.transforms import EdgeRandomizedResponse

BLOCKS = (300, 200, 100)
P_IN, P_OUT = 0.06, 0.004
#: the offline graphs the randomised copy of every node pair fits for (n(n-1)/2 draws; PubMed and the
#: larger graphs would hold tens of millions of randomised edges)
GRAPHS = ("Cora", "CiteSeer", "Cora_ML", "Chain-S", "Chain-M", "Chain-L", "Chain-X")


def block_pair_counts(edge_index: torch.Tensor, block: torch.Tensor, k: int) -> torch.Tensor:
    """Undirected edge counts per unordered block pair (upper triangle, row-major)."""
    row, col = edge_index
    keep = row < col
    a, b = block[row[keep]], block[col[keep]]
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    counts = torch.zeros(k, k).index_put_((lo, hi), torch.ones(lo.numel()), accumulate=True)
    iu = torch.triu_indices(k, k)
    return counts[iu[0], iu[1]]


def load_graph(parser: argparse.ArgumentParser, name: str, seed: int) -> tuple[torch.Tensor, torch.Tensor, int, str]:
    """``(edge_index, block, num_nodes, description)``: the synthetic SBM (``torch.manual_seed(seed)``
    first), or an offline graph, cleaned, with its classes as blocks (an unknown label: a block of its own)."""
    torch.manual_seed(seed)
    if name == "SBM":
        k = len(BLOCKS)
        probs = torch.full((k, k), P_OUT).fill_diagonal_(P_IN)
        edge_index = stochastic_blockmodel_graph(list(BLOCKS), probs)
        n = sum(BLOCKS)
        block = torch.repeat_interleave(torch.arange(k), torch.tensor(BLOCKS))
        return edge_index, block, n, f"Synthetic social graph: {n} nodes, {edge_index.size(1) // 2} undirected " \
                                     f"edges, communities {BLOCKS}"
    data = load_or_exit(parser, name, seed=seed, classification=False)
    if data.y is None or data.y.dim() != 1:
        parser.error(f"{spec(name).label} has no single-label classes to use as communities")
    n = data.num_nodes
    edge_index = clean_graph(data.edge_index, n)  # simple and undirected: one count per edge
    block = data.y.clone()
    block[block < 0] = int(block.max()) + 1  # unknown labels: one community of their own
    sizes = torch.bincount(block).tolist()
    return edge_index, block, n, (f"{spec(name).label}: {n} nodes, {edge_index.size(1) // 2} undirected edges "
                                  f"(cleaned), communities = its classes {tuple(sizes)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=2.5, help="edge-level epsilon budget")
    parser.add_argument("--delta", type=float, default=1e-5, help="edge-level delta budget")
    add_dataset_argument(parser, "SBM", extra=("SBM",), names=GRAPHS)
    parser.add_argument("--quick", action="store_true",
                        help="the same releases (the demo takes a few seconds), to a CSV of its own")
    add_threads_argument(parser)
    add_out_argument(parser, "the CSV")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    edge_index, block, n, description = load_graph(parser, args.dataset, args.seed)
    k = int(block.max()) + 1
    num_edges = edge_index.size(1) // 2
    print(description)
    print(f"Edge-level budget: epsilon = {args.budget}, delta = {args.delta}\n")
    stem = "sbm" if args.dataset == "SBM" else file_stem(args.dataset)
    writer = CsvWriter(output_stem(args.out, f"demo_{stem}", "quick" if args.quick else "full") + ".csv")

    acct = PrivacyAccountant(budget={"edge": (args.budget, args.delta)})
    gen = torch.Generator().manual_seed(args.seed)  # reproducible demo only: a known seed voids the guarantee

    # 1. edge count: one edge changes it by 1 (l1 sensitivity 1)
    count = LaplaceMechanism(1.0, epsilon=0.25, accountant=acct, name="edge count", generator=gen)
    noisy_edges = count(torch.tensor([float(num_edges)])).item()

    # 2. block-pair counts: one edge changes one cell by 1 (l2 sensitivity 1)
    true_pairs = block_pair_counts(edge_index, block, k)
    pairs = GaussianMechanism(1.0, epsilon=0.5, delta=1e-6, accountant=acct, name="block-pair counts", generator=gen)
    noisy_pairs = pairs(true_pairs)

    # 3. a randomised copy of the whole graph (randomized response on every node pair)
    rr = EdgeRandomizedResponse(epsilon=1.0, accountant=acct, generator=gen, name="randomised graph")
    noisy_graph = rr(Data(edge_index=edge_index, num_nodes=n))
    q = rr.q
    iu = torch.triu_indices(k, k)
    sizes = torch.bincount(block, minlength=k).to(torch.float64)
    num_pairs = torch.where(iu[0] == iu[1], sizes[iu[0]] * (sizes[iu[0]] - 1) / 2, sizes[iu[0]] * sizes[iu[1]])
    observed = block_pair_counts(noisy_graph.edge_index, block, k).double()
    # E[observed] = q * true + (1 - q) * (pairs - true)  =>  unbiased estimate of true
    estimated = (observed - (1 - q) * num_pairs) / (2 * q - 1)

    negative = 0

    def row(statistic: str, true: int, private: float, mechanism: str, epsilon: float, repeat: bool = False) -> None:
        """One release: printed (the statistic and its true value once) and written to the CSV at once."""
        nonlocal negative
        negative += private < 0
        shown = ("", "") if repeat else (statistic, f"{true:d}")
        print(f"{shown[0]:<28}{shown[1]:>10}{private:>12.1f}{max(0.0, private):>12.1f}   {mechanism}")
        writer.write({"dataset": args.dataset, "statistic": statistic, "true": true, "private": round(private, 3),
                      "private_clamped": round(max(0.0, private), 3), "mechanism": mechanism, "epsilon": epsilon})

    print(f"{'statistic':<28}{'true':>10}{'private':>12}{'max(0, .)':>12}   mechanism")
    row("undirected edges", num_edges, noisy_edges, "Laplace, eps=0.25", 0.25)
    word = "block" if args.dataset == "SBM" else "class"
    for (i, j), t, g, e in zip(iu.t().tolist(), true_pairs.tolist(), noisy_pairs.tolist(), estimated.tolist()):
        label = f"edges in {word} {i}" if i == j else f"edges between {i} and {j}"
        row(label, int(t), g, "Gaussian, eps=0.5 at delta=1e-6", 0.5)
        row(label, int(t), e, "from the randomised graph, eps=1", 1.0, repeat=True)
    writer.close()
    if negative:
        # the estimate's std over m pairs: sqrt(m q (1 - q)) / (2q - 1)
        rr_std = float(((q * (1 - q) * num_pairs).sqrt() / (2 * q - 1)).max())
        print(f"\n{negative} private count(s) above are negative. The releases are unbiased: where a true count is\n"
              f"small against the noise (the randomised graph's estimates have a std of up to {rr_std:.0f} here),\n"
              "the noise can take it below 0. max(0, .) is post-processing of the same release: it costs no\n"
              "privacy and is never negative, but it is biased upwards.")
    print(f"\nThe randomised graph has {noisy_graph.edge_index.size(1) // 2} undirected edges "
          f"(each pair kept truthfully with probability {q:.3f}).")

    # 4. one more release that does not fit: refused before any noise is drawn
    try:
        LaplaceMechanism(1.0, epsilon=1.0, accountant=acct, name="one release too many")(torch.zeros(1))
    except PrivacyBudgetExceeded as err:
        print(f"\nRefused: {err}")

    naive = 0.25 + 0.5 + 1.0
    print(f"\nBasic composition of the three targets gives epsilon = {naive:.2f} at delta = 1e-6; "
          f"the accountant gives {acct.epsilon('edge', 1e-6):.3f} at the same delta "
          f"({acct.epsilon('edge'):.3f} at the budget's delta {args.delta:g}).\n")
    print(acct.report())
    print(f"\nwrote {writer.path}")


if __name__ == "__main__":
    main()
