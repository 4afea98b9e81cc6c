"""A node-level private model on Cora: one private aggregation, then a head trained with Opacus' DP-SGD.

Node-level differential privacy protects a whole node: its features, its label and all of
its edges (one node added or removed). Edge-level tricks no longer suffice: the features
and labels are private too, so the head must be trained with DP-SGD, and the aggregation
must cover a node that brings up to ``max_degree`` edges. The pattern (GAP's node-level
variant, Sajadmanesh et al. 2023; CARIBOU, Zheng et al. 2025, Sec. 4.5) is:

1. **one private aggregation**, :class:`~pyg_private.nn.ContractiveGraphLayer` at
   ``level="node"``, over a fixed public universe of ``num_nodes`` node slots (an absent node
   is a zero row without edges, so the output always has ``num_nodes`` rows) with the
   declared public bound ``max_degree``. It registers one mu-GDP event on unit ``"node"``
   before any noise is drawn;
2. **DP-SGD on the head** with Opacus' ``PrivacyEngine`` whose accountant is
   :class:`~pyg_private.accounting.OpacusAccountant` on unit ``"node"``: every step lands in
   the same ledger, and a step past the budget is refused before it is applied.

**Why they compose.** The aggregation's output ``Z`` is released, hence public for what
follows. Given ``Z``, the head's examples are the training nodes' rows ``[x_i || z_i]`` with
their labels ``y_i``; removing node ``v`` removes exactly one example (``v``'s own) and
leaves every other example unchanged, because ``z_i`` is fixed by the release. So the
DP-SGD run is add/remove-one-example private given ``Z``, and the two mechanisms compose
adaptively on unit ``"node"``: the accountant's total is the guarantee of the trained head.
(Training the head on an aggregation that is *not* released, e.g. a plain GCN layer, would
let one node change up to ``max_degree + 1`` examples; DP-SGD's per-example analysis would
then not apply.) The Poisson rate, the number of steps and Opacus' gradient averaging are
taken from the **public** size of the training split (``num_train``), never from the number
of present nodes, so they are the same on neighbouring datasets. The reported accuracies
use the test nodes' labels and are not themselves private releases.

The noise multiplier of DP-SGD is calibrated with the accountant's own composition (PLD) so
that the aggregation (``--aggregation-epsilon``) and DP-SGD together meet ``--epsilon``; the
accountant's budget ``(epsilon, delta)`` then enforces it step by step.
The edge-free baseline gives the whole budget to DP-SGD on ``x`` alone.

Split: Cora's public validation (500) and test (1,000) nodes, and **every other node for
training** (1,208; PyG's ``split="full"``): 140 examples are too few for DP-SGD.

**Any dataset** (``--dataset``, any name of ``example_data.NAMES`` with node features). The graph
is cleaned first (self-loops dropped, duplicate and one-directional entries merged: the recipes'
deterministic map, 1-stable at node level too, ``pyg_private/models/recipe_inputs.py``). A graph
without a public split gets GCON's validation and test sizes (500 / 1,000, scaled down where there
is no room: ``gcon_common.split_sizes``) drawn over its **labelled** nodes (``y >= 0``) with seed 0,
and every other labelled node for training; an unlabelled node is in no split.

**delta.** This example is **node level**: delta = ``--delta``, default 1e-5, below 1/n on every
offline graph (the largest, Facebook, has 22,470 nodes). The edge-level examples use delta = 1/|E|
(undirected edges of the cleaned graph); a node-level unit covers a node and all its edges, so the
edge-level rule is not reused here.

``max_degree`` (``--max-degree``) defaults to the largest degree of the cleaned graph: 168 on Cora.
That default is **read off the graph**, a stand-in for a public bound such as a platform's cap (see
below); pass a bound fixed in advance for a real guarantee. The node-level sensitivity grows with it (12.1
per unit row at 168, against 1.27 for one edge), so on Cora the aggregation is mostly noise
at any moderate epsilon, and its F extra inputs share DP-SGD's clipped gradient with ``x``:
the private model ends **below** the edge-free DP-SGD baseline. Measured (test accuracy,
mean of ``--seed 0 1 2``, epsilon 4, about 15 s per run on one CPU thread): linear on ``x``
with DP-SGD 60.6%, aggregation + linear head with DP-SGD 50.9%, the same pipeline without
noise 81.0%: at this degree bound the aggregation does not pay off on Cora. In a
deployment ``max_degree`` must be a public bound fixed in advance (a platform's cap, say),
never read off the private graph; the layer checks it before anything is charged.
``GAPAggregation`` is edge-level only here (GAP's node-level variant relies on a
degree-bounding sampler whose accounting CARIBOU disputes, Sec. 6).

Every release is seeded (``--seed``) for a reproducible run, which voids the guarantee.

Each finished model is printed and written as a CSV row at once
(``<out>/<dataset>_node_private_opacus.csv``, ``--out`` default ``outputs``; a quick run writes
``<dataset>_node_private_opacus_quick.csv``); progress bars go to stderr. ``--quick`` (10 DP-SGD
epochs, 100 reference epochs, Renyi calibration) finishes in well under 2 minutes on one thread.
``--threads`` (default 1) sets torch's CPU threads.

    python examples/pyg_node_private_opacus.py [--dataset Cora] [--epsilon 4] [--aggregation-epsilon 1]
        [--epochs 30] [--max-degree D] [--quick] [--threads 1] [--out outputs]
"""
from __future__ import annotations

import argparse
import math
import time
import warnings

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from opacus import PrivacyEngine
from opacus.data_loader import DPDataLoader
from torch.utils.data import TensorDataset
from torch_geometric.nn import MLP
from example_data import add_dataset_argument, file_stem, spec
from example_io import CsvWriter, add_out_argument, add_threads_argument, output_stem, progress, say
from example_protocol import class_sizes, labelled, load_clean, num_edges, per_class_labelled_split
from gcon_common import split_sizes
from pyg_private import PrivacyAccountant
from pyg_private.accounting import OpacusAccountant, calibrate_noise, subsampled_gaussian_event
from pyg_private.nn import ContractiveGraphLayer, PrecomputedPropagation
from pyg_private.transforms import L2RowNormalize
CALIBRATION_ORDERS = tuple(float(a) for a in range(2, 65)) + (math.inf,)  # DP-SGD at eps ~ 1-10: best order < 64


def dp_sgd_noise(accountant: PrivacyAccountant, *, epsilon: float, delta: float, sample_rate: float,
                 steps: int, pld: bool = True) -> float:
    """The smallest DP-SGD noise multiplier (within 0.1%) such that the events already in
    ``accountant`` and ``steps`` DP-SGD steps at ``sample_rate`` stay within ``epsilon`` on unit
    ``"node"``, by the accountant's own composition (PLD).

    A Renyi-only search on the integer orders 2..64 first gives a fast upper bound (Renyi
    composition is never below PLD); the PLD search then runs below it (``pld=False`` stops at
    the bound: faster, and more noise than needed)."""

    def total(sigma: float, pld: bool) -> float:
        trial = PrivacyAccountant(pld=pld)
        for event in accountant.events_of("node"):
            trial.register(event)
        trial.register(subsampled_gaussian_event(noise_multiplier=sigma, sample_rate=sample_rate, steps=steps,
                                                 orders=CALIBRATION_ORDERS))
        return trial.epsilon("node", delta)

    target = epsilon * (1 - 1e-6)  # a hair below: the ledger's own float rounding cannot pass the budget
    upper = calibrate_noise(lambda s: total(s, False), target, min_scale=0.05, max_scale=1e3, rtol=1e-3)
    if not pld:
        return upper
    try:
        return calibrate_noise(lambda s: total(s, True), target, min_scale=upper / 4, max_scale=upper, rtol=1e-3)
    except ValueError:  # the PLD bound is met even at upper / 4: keep the Renyi answer (safe, more noise)
        return upper


def train_dp_sgd(head: torch.nn.Module, features: torch.Tensor, y: torch.Tensor, *, accountant: PrivacyAccountant,
                 num_train: int, epsilon: float, delta: float, epochs: int, batch_size: int, lr: float,
                 max_grad_norm: float, name: str, seed: int, pld: bool) -> float:
    """Opacus DP-SGD on the rows ``features`` (the present training nodes), every step charged to
    ``accountant``; returns the noise multiplier used."""
    steps_per_epoch = math.ceil(num_train / batch_size)  # public: from the split's size
    sample_rate = 1.0 / steps_per_epoch
    sigma = dp_sgd_noise(accountant, epsilon=epsilon, delta=delta, sample_rate=sample_rate,
                         steps=epochs * steps_per_epoch, pld=pld)

    loader = DPDataLoader(TensorDataset(features, y), sample_rate=sample_rate,  # Poisson, public rate
                          generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.Adam(head.parameters(), lr=lr)
    with warnings.catch_warnings():  # Opacus' notice about its non-secure RNG (we seed for reproducibility)
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        engine = PrivacyEngine()
        engine.accountant = OpacusAccountant(accountant, unit="node", name=name)  # the same ledger
        private_head, optimizer, loader = engine.make_private(
            module=head, optimizer=optimizer, data_loader=loader, noise_multiplier=sigma,
            max_grad_norm=max_grad_norm, poisson_sampling=False,  # the loader above already samples
            noise_generator=torch.Generator().manual_seed(seed + 1))
    optimizer.expected_batch_size = num_train // steps_per_epoch  # average over the public expected batch
    private_head.train()
    with warnings.catch_warnings():  # torch's notice that Opacus' hooks fire on inputs without grad
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for _ in progress(range(epochs), desc=name):
            for xb, yb in loader:
                optimizer.zero_grad()
                out = private_head(xb)
                loss = F.cross_entropy(out, yb) if len(yb) else out.sum() * 0.0  # an empty batch still steps
                loss.backward()
                optimizer.step()
    head.eval()
    return sigma


def train_adam(head: torch.nn.Module, features: torch.Tensor, y: torch.Tensor, *, epochs: int, lr: float) -> None:
    """The non-private reference: full-batch Adam on the same rows."""
    optimizer = torch.optim.Adam(head.parameters(), lr=lr, weight_decay=5e-4)
    head.train()
    for _ in progress(range(epochs), desc="non-private"):
        optimizer.zero_grad()
        F.cross_entropy(head(features), y).backward()
        optimizer.step()
    head.eval()


@torch.no_grad()
def accuracy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> float:
    return float((logits[mask].argmax(dim=-1) == y[mask]).float().mean())


def training_split(data) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train, val, test): the public validation and test nodes (or GCON's sizes drawn over the
    labelled nodes, seed 0) and every other labelled node for training."""
    known = labelled(data.y)
    if getattr(data, "val_mask", None) is not None and getattr(data, "test_mask", None) is not None:
        val, test = data.val_mask & known, data.test_mask & known
    else:
        _, num_val, num_test = split_sizes(int(known.sum()), class_sizes(data.y))
        _, val, test = per_class_labelled_split(data.y, 0, num_val, num_test, seed=0)
    return known & ~(val | test), val, test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_argument(parser, "Cora")
    parser.add_argument("--epsilon", type=float, default=4.0, help="node-level epsilon of the whole model")
    parser.add_argument("--aggregation-epsilon", type=float, default=1.0, help="the aggregation's share")
    parser.add_argument("--delta", type=float, default=1e-5, help="node-level delta (default 1e-5: below 1/n)")
    parser.add_argument("--epochs", type=int, default=None, help="DP-SGD epochs (default 30; --quick: 10)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--max-degree", type=int, default=None,
                        help="the declared node-level degree bound (default: the cleaned graph's largest degree, "
                             "168 on Cora; see the module notes)")
    parser.add_argument("--calibration", choices=["pld", "renyi"], default=None,
                        help="the DP-SGD noise calibration: 'renyi' is faster and adds more noise than needed "
                             "(default pld; --quick: renyi)")
    parser.add_argument("--reference-epochs", type=int, default=None,
                        help="Adam epochs of the non-private run (default 200; --quick: 100)")
    parser.add_argument("--seed", type=int, default=0)
    add_threads_argument(parser)
    parser.add_argument("--quick", action="store_true", help="10 DP-SGD epochs, 100 reference epochs, Renyi "
                                                            "calibration (under 2 minutes on one thread)")
    add_out_argument(parser, "the CSV")
    args = parser.parse_args()
    epochs = args.epochs or (10 if args.quick else 30)
    reference_epochs = args.reference_epochs or (100 if args.quick else 200)
    calibration = args.calibration or ("renyi" if args.quick else "pld")
    if not 0 < args.aggregation_epsilon < args.epsilon:
        parser.error("--aggregation-epsilon must lie in (0, --epsilon)")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()

    base = load_clean(parser, args.dataset)  # offline copy from $PYG_PRIVATE_DATA, cleaned
    name = spec(args.dataset).label
    data = T.Compose([T.NormalizeFeatures(), L2RowNormalize()])(base)
    num_classes = int(data.y.max()) + 1
    degree = torch.bincount(data.edge_index[0], minlength=data.num_nodes)
    max_degree = args.max_degree if args.max_degree is not None else max(int(degree.max()) if degree.numel() else 0, 1)
    if int(degree.max()) > max_degree:
        parser.error(f"--max-degree {max_degree} is below the graph's largest degree {int(degree.max())}: "
                     "the layer would refuse the graph")
    train, val, test = training_split(data)
    num_train = int(train.sum())  # public: the split's size over the public universe of num_nodes slots
    common = dict(num_train=num_train, epsilon=args.epsilon, delta=args.delta, epochs=epochs,
                  batch_size=args.batch_size, lr=args.lr, max_grad_norm=args.max_grad_norm, seed=args.seed,
                  pld=calibration == "pld")
    unknown = int((~labelled(data.y)).sum())
    say(f"{name}: {data.num_nodes} nodes" + (f" ({unknown} unlabelled, in no split)" if unknown else "")
        + f", {num_edges(data)} undirected edges (cleaned); "
        f"node level, delta = {args.delta:g} (the edge-level examples' 1/|E| is not used at node level); "
        f"declared max_degree {max_degree}; split {num_train} / {int(val.sum())} / {int(test.sum())}")
    path = output_stem(args.out, f"{file_stem(args.dataset)}_node_private_opacus",
                       "quick" if args.quick else "full") + ".csv"
    writer = CsvWriter(path)
    rows = []

    def emit(model: str, spent: float, sigma: float, test_acc: float) -> None:
        rows.append((model, spent, sigma, test_acc))
        writer.write({"dataset": name, "model": model, "epsilon": args.epsilon, "delta": args.delta,
                      "epsilon_spent": spent, "sigma": sigma, "test": 100 * test_acc, "max_degree": max_degree,
                      "num_train": num_train, "epochs": epochs, "seed": args.seed})
        say(f"{model:46s} {spent:9.3f} {sigma:7.3f} {100 * test_acc:6.1f}")

    say(f"{'model':46s} {'eps spent':>9s} {'sigma':>7s} {'test':>6s}")
    # 1. the edge-free baseline: DP-SGD on x alone, the whole budget
    torch.manual_seed(args.seed)
    base_acct = PrivacyAccountant(budget={"node": (args.epsilon, args.delta)})
    linear = MLP([data.num_features, num_classes], norm=None)  # one linear layer
    sigma = train_dp_sgd(linear, data.x[train], data.y[train], accountant=base_acct, name="DP-SGD, no edges",
                         **common)
    with torch.no_grad():
        emit("linear on x (no edges), DP-SGD", base_acct.epsilon("node", args.delta), sigma,
             accuracy(linear(data.x), data.y, test))

    # 2. the private aggregation, once, then DP-SGD on the head: the same ledger
    torch.manual_seed(args.seed)
    acct = PrivacyAccountant(budget={"node": (args.epsilon, args.delta)})
    model = PrecomputedPropagation(
        ContractiveGraphLayer(K=2, contraction=0.9, level="node", min_degree=0, max_degree=max_degree,
                              num_nodes=data.num_nodes, epsilon=args.aggregation_epsilon, delta=args.delta,
                              accountant=acct, generator=torch.Generator().manual_seed(args.seed)),
        MLP([2 * data.num_features, num_classes], norm=None),  # a linear head, as SGC's
    )
    features = model.head_input(data.x, data.edge_index)  # the one node-level release: [x || z]
    sigma = train_dp_sgd(model.head, features[train], data.y[train], accountant=acct, name="DP-SGD head", **common)
    model.eval()
    with torch.no_grad():
        logits = model(data.x, data.edge_index)  # the cached release: nothing more is charged
    emit("ContractiveGraphLayer(node) + linear, DP-SGD", acct.epsilon("node", args.delta), sigma,
         accuracy(logits, data.y, test))

    # 3. the same pipeline without any noise (not private): its ceiling
    torch.manual_seed(args.seed)
    reference = PrecomputedPropagation(
        ContractiveGraphLayer(K=2, contraction=0.9, level="node", min_degree=0, max_degree=max_degree,
                              num_nodes=data.num_nodes, noise_multiplier=0.0),
        MLP([2 * data.num_features, num_classes], norm=None),
    )
    train_adam(reference.head, reference.head_input(data.x, data.edge_index)[train], data.y[train],
               epochs=reference_epochs, lr=0.01)
    with torch.no_grad():
        emit("same pipeline, no noise, Adam (not private)", math.inf, 0.0,
             accuracy(reference(data.x, data.edge_index), data.y, test))
    writer.close()

    print(f"\n{name}, node level, {num_train} training nodes (all labelled nodes but validation and test), "
          f"delta {args.delta:g}, target epsilon {args.epsilon:g} (aggregation {args.aggregation_epsilon:g}), "
          f"DP-SGD {epochs} epochs, batch {args.batch_size}, seed {args.seed}")
    print(f"{'model':46s} {'eps spent':>9s} {'sigma':>7s} {'test':>6s}")
    for model_name, spent, sigma, test_acc in rows:
        print(f"{model_name:46s} {spent:9.3f} {sigma:7.3f} {100 * test_acc:6.1f}")
    print(f"\naccountant of the private model ({len(acct.events)} events: the aggregation and one per DP-SGD step):")
    print(acct.report(args.delta))
    print(f"\nwrote {path}\ntotal {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
