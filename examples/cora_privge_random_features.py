"""The structure-only level of the PrivGE pipeline on Cora: features that carry no label signal.

Runs the non-private PrivGE node-classification pipeline (PPR with D^(r-1) A D^(-r), no
self-loops, alpha = 0.1, r = 0.1; the reference scripts' MLP head) on splits 0-4 with the
real features replaced by random ones (dense Gaussian; sparse rows with k = 20 or 200
uniform entries in [-1, 1]), and with the real features. Every local-DP mechanism on Cora
at epsilon <= 5 lands at the random-feature level (see the README's PrivGE section).
Needs the Cora files ($PYG_PRIVATE_DATA).

    python examples/cora_privge_random_features.py
"""
import statistics
import warnings

import torch

from pyg_private.datasets import attach_split, load_cora, random_split
from pyg_private.models.privge import PrivGEConfig, run_privge_node

#: the non-private pipeline of examples/cora_privge.py with its selected propagation
CONFIG = PrivGEConfig(mechanism="none", k=None, alpha=0.1, r=0.1, hidden=128, layers=2, dropout=0.5, lr=1e-2,
                      weight_decay=5e-4, epochs=300, patience=50)


def sparse_rows(n: int, d: int, k: int, g: torch.Generator) -> torch.Tensor:
    """k random coordinates per row, uniform in [-1, 1]; the others 0 (HDS's support)."""
    idx = torch.rand(n, d, generator=g).argsort(1)[:, :k]
    return torch.zeros(n, d).scatter_(1, idx, torch.rand(n, k, generator=g) * 2 - 1)


def main() -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    base = load_cora()
    n, d = base.num_nodes, base.num_features
    variants = {
        "dense Gaussian (all 1433)": lambda g: torch.randn(n, d, generator=g),
        "sparse k=20 uniform": lambda g: sparse_rows(n, d, 20, g),
        "sparse k=200 uniform": lambda g: sparse_rows(n, d, 200, g),
        "real features": None,
    }
    for name, make in variants.items():
        accs = []
        for s in range(5):
            data = attach_split(base, random_split(n, 0.5, 0.25, 0.25, s))
            if make is not None:
                data.x = make(torch.Generator().manual_seed(100 + s))
            accs.append(100 * run_privge_node(data, CONFIG, float("inf"), s).test)
        print(f"{name:28s} {statistics.mean(accs):.1f} ± {statistics.stdev(accs):.1f}  "
              f"{[round(a, 1) for a in accs]}", flush=True)


if __name__ == "__main__":
    main()
