"""Wall time of one full GCON fit on Cora-ML: encoder, propagation, calibration and convex solve.

    python benchmarks/gcon_fit.py [--threads 2] [--repeats 5]

Cora-ML (needs ``$PYG_PRIVATE_DATA``), split 20 per class / 500 / 1000 (seed 0), the
encoder's 64 logits-wide embedding, alpha = 0.4, m = 10, epsilon = 4, delta = 1/|E|,
pseudo-labels on every node (n_1 = 2995). Medians over --repeats; printed, never asserted.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

from pyg_private import PrivacyAccountant
from pyg_private.datasets import attach_split, load_cora_ml, per_class_split
from pyg_private.models import GCONConfig
from pyg_private.models.gcon import encode
from pyg_private.nn import PerturbedAPPRConv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    base = load_cora_ml()
    data = attach_split(base, per_class_split(base.y, seed=0))
    delta = 1.0 / base.edge_index.size(1)
    config = GCONConfig(embedding="logits", encoder_dim=64, alpha=0.4, steps=(10,), pseudo_labels=True)
    times = {"encoder": [], "propagation": [], "private fit (calibration + noise + solve)": [], "total": []}
    for r in range(args.repeats + 1):
        t0 = time.perf_counter()
        x0, predicted = encode(data, config, seed=r)
        t1 = time.perf_counter()
        layer = PerturbedAPPRConv(x0.size(1), 7, alpha=config.alpha, steps=config.steps, epsilon=4.0, delta=delta,
                                  regularization=config.regularization, accountant=PrivacyAccountant())
        layer.propagation(x0, data.edge_index)
        t2 = time.perf_counter()
        fit = layer.fit(x0, data.edge_index, torch.where(data.train_mask, data.y, predicted))
        t3 = time.perf_counter()
        if r:  # the first round warms up
            for key, value in zip(times, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
                times[key].append(value)
    for key, values in times.items():
        print(f"{key:44s} {1e3 * statistics.median(values):8.1f} ms")
    print(f"solver: {fit.iterations} Newton iterations, gradient norm {fit.grad_norm:.1e}, d = {layer.out_features}, "
          f"n_1 = {fit.num_rows}")


if __name__ == "__main__":
    main()
