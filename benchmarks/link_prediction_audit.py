"""One-run canary audit of the edge-level private link predictor
(:func:`pyg_private.audit.link_prediction.link_prediction_canary_audit`) on an offline graph.

Protocol: the graph as PyG loads it, cleaned, split by the keyed hash (70 / 10 / 10 / 10 %, key
2024, as ``benchmarks/link_prediction.py``), ``delta = 1e-5``, the default ``LinkPredictionConfig``.
Per part (``message``: the encoder's, ``train``: the DP-SGD decoder's) and per epsilon (``inf``: the
same pipeline without noise), ``--canaries`` non-edges of that part (a matching) are each inserted
with probability 1/2, the pipeline runs once, and each canary is scored by the released predictor:
the candidate the run selected, and the private decoder by name. Printed per run: the selected
candidate, the one-run lower bound of each attack (each at 97.5 %, so that their maximum holds at
95 %), its ROC-AUC against the coins, the most a perfect attack could certify with these canaries
(``ceiling``), the test ROC-AUC of the run, and the seconds. A bound above the claimed epsilon would
show the implementation broken and is flagged.

``--wide-epsilons`` adds train-part runs with a decoder that can memorise (a two-layer node MLP of
width 256, dot product, 200 epochs, Adam 0.01): the default decoder has 10 parameters and cannot
memorise one supervision pair, so its train-part audit stays near chance even without privacy.

Usage::

    PYG_PRIVATE_DATA=../shared/data python benchmarks/link_prediction_audit.py --dataset Cora --canaries 1000
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from example_data import load_or_exit  # noqa: E402

from pyg_private.audit import link_prediction_canary_audit  # noqa: E402
from pyg_private.models import LinkPredictionConfig  # noqa: E402

WIDE = LinkPredictionConfig(decoder="dot", hidden=256, layers=2, epochs=200, lr=0.01)


def _row(dataset, config_name, part, eps, audit, seconds) -> str:
    flag = "  <-- ABOVE THE CLAIM" if audit.contradicts_claim else ""
    return (f"{dataset:8s} {config_name:8s} {part:8s} {eps:>5g} {audit.candidate:15s} "
            f"{audit.selected.epsilon:6.3f} {audit.selected.auc:6.3f}  {audit.private.epsilon:6.3f} "
            f"{audit.private.auc:6.3f}  {audit.epsilon:6.3f} {audit.private.ceiling:6.3f} "
            f"{audit.result.test['auc']:6.3f} {seconds:7.1f}{flag}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0, 8.0, math.inf])
    parser.add_argument("--parts", nargs="+", default=["message", "train"], choices=["message", "train"])
    parser.add_argument("--canaries", type=int, default=1000)
    parser.add_argument("--wide-epsilons", type=float, nargs="*", default=[math.inf, 8.0],
                        help="train-part runs with the memorising decoder (none: skip)")
    parser.add_argument("--key", type=int, default=2024, help="the split's hash key")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_or_exit(parser, args.dataset, classification=False)
    print(f"{args.dataset}: {data.num_nodes} nodes; {args.canaries} canaries per run, delta 1e-5, seed {args.seed}")
    print(f"{'dataset':8s} {'decoder':8s} {'part':8s} {'eps':>5s} {'selected':15s} {'eps_lb':>6s} {'auc':>6s}  "
          f"{'private':>6s} {'auc':>6s}  {'max':>6s} {'ceil':>6s} {'test':>6s} {'seconds':>7s}")
    runs = [("channels", LinkPredictionConfig(), part, eps) for part in args.parts for eps in args.epsilons]
    runs += [("wide", WIDE, "train", eps) for eps in args.wide_epsilons]
    for name, config, part, eps in runs:
        start = time.perf_counter()
        audit = link_prediction_canary_audit(data, config, epsilon=eps, delta=1e-5, num_canaries=args.canaries,
                                             part=part, key=args.key, seed=args.seed, clean=True)
        print(_row(args.dataset, name, part, eps, audit, time.perf_counter() - start), flush=True)


if __name__ == "__main__":
    main()
