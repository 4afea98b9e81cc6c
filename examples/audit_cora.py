"""Privacy audit on Cora: LinkTeller, canary edges and membership inference against every component.

For each edge-private component (ContractiveGraphLayer, NoisyPPRDiffusion,
PerturbedAPPRConv) at epsilon in {1, 4} and its non-private counterpart (the same
computation without noise, epsilon = inf), plus PyG's GCN and APPNP, the script runs

* a **LinkTeller** influence attack through the component's inference API (1 + |S|
  queries over the nodes S of 100 sampled edges; every query of a private release is a
  new release, so its noise is calibrated for the whole attack and the accountant's total
  after the attack is the claimed epsilon). For ``PerturbedAPPRConv`` the released object
  is the trained head; its inference step (Eq. 16) reads the graph in the clear and is
  **outside** the guarantee, so a high AUC there is expected and flagged, not a violation;
* a **canary-edge audit** of the release the guarantee covers (the layer output, the PPR
  vectors, GCON's head): m disjoint canary pairs among non-edges, each inserted with
  probability 1/2 in each of R independent runs (GCON: one canary, the candidate with the
  largest noiseless effect, in each of 2000 releases, since its head is one global matrix
  in which many canaries drown each other), scored by the projection of the release on
  the canary's noiseless effect, turned into an empirical epsilon lower bound at 95%
  confidence by the one-run bound of Steinke, Nasr and Jagielski (2023);
* a node-level **membership-inference** loss-threshold attack (each node a member with
  probability 1/2; train on the members' subgraph, query on the full graph) against the
  non-private GCN and MLP and the CARIBOU pipeline at node level (DP-SGD encoder and
  head, ContractiveGraphLayer at level "node") at each epsilon; the claimed epsilon
  includes the test-on-full aggregation, a second release.

Expected: the non-private versions are attackable and no private component shows an
empirical lower bound above its claimed epsilon (that would be a bug). Features are
public under edge-level DP; they are projected to 64 dimensions by a fixed random matrix
(public post-processing) to keep the audit fast. Seeded generators make the runs
reproducible, which voids the guarantee of the released numbers (fine for an audit).

**Any dataset** (``--dataset``, any name of ``example_data.NAMES`` with node features). The graph
is cleaned first (self-loops dropped, duplicate and one-directional entries merged: the recipes'
deterministic, 1-stable map, ``pyg_private/models/recipe_inputs.py``). Where some labels are
unknown (``y < 0``, as in Cornell) the audit runs on the subgraph induced by the **labelled** nodes
(GCON's head and the membership attack need every node's label); the header says so. A graph
without a public split gets 20 training nodes per class (the rule of ``gcon_common.split_sizes``)
for the trained GCN. **delta = 1/|E|** for the edge-level components, ``|E|`` the undirected edges
of the audited (cleaned) graph, the rule of every example here; the node-level membership
experiment uses delta = 1e-5 (below 1/n: the one-run bound loses 2 m delta). The
bounds are public rules: ContractiveGraphLayer declares ``min_degree=1`` with the degree floor
(valid for every graph, isolated nodes included). The node-level membership experiment declares
``max_degree`` = the largest degree of the **full** graph: in this experiment the full graph is
the public universe the members are drawn from (the attacker queries it), the private data is
the member set, and every member subgraph satisfies the bound; ``--max-degree`` declares another
(a smaller one is refused by the layer before any release).

``--quick`` (under 2 minutes on one thread): 200 canaries x 2 runs (GCON: 1 x 100), 40 attack
edges, 100 training epochs (the LinkTeller GCN's too), the node-level membership experiment at the
largest finite epsilon and inf only (it took 2.5 to 2.7 minutes on a loaded 2-core machine with
GCON 1 x 200, the LinkTeller GCN at 200 epochs and the membership experiment at every epsilon).
``--smoke`` (the tests): epsilon {1, inf}, 20 canaries x 1 run (GCON: 1 x 20), 4 attack edges, 10
training epochs (5 for the LinkTeller GCN). On a graph of fewer than 4 m nodes the m canary
pairs are cut to n // 4 (disjoint pairs need 2 m <= n). ``--threads`` (default 1) sets torch's CPU
threads; ``--out`` (default ``outputs/audit_<dataset>``) gets ``audit_<dataset>.csv``
(``audit_<dataset>_quick.csv`` or ``_smoke.csv`` in those modes). Rows go to the CSV as they
finish; progress bars (stderr) follow the LinkTeller queries, the canary releases and the
membership models.

    PYG_PRIVATE_DATA=... python examples/audit_cora.py [--quick] [--out outputs/audit_cora] [--dataset CiteSeer]
        [--threads 1]
"""
from __future__ import annotations

import argparse
import math
import os
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import APPNP, GCNConv

from example_data import add_dataset_argument, file_stem, spec
from example_io import CsvWriter, add_out_argument, add_threads_argument, output_stem, progress, say
from example_protocol import class_sizes, delta_text, edge_delta, labelled, load_clean, num_edges
from gcon_common import split_sizes
from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning
from pyg_private.audit import (canary_edge_audit, insert_edges, linear_canary_score, linkteller_attack, member_split,
                               member_subgraph, membership_scores, one_run_audit, sample_attack_nodes, sample_canary_pairs,
                               threshold_attack)
from pyg_private.datasets import attach_split, per_class_split
from pyg_private.models import CaribouConfig, fit_full_batch, run_caribou
from pyg_private.nn import ContractiveGraphLayer, NoisyPPRDiffusion, PerturbedAPPRConv
from pyg_private.utils.newton_solver import solve_separable_ridge
from pyg_private.utils.appr import appr_propagate

EPSILONS = (1.0, 4.0, math.inf)
CONFIDENCE = 0.95


@dataclass
class Row:
    component: str
    claimed: float  # the accountant's epsilon for what was attacked (inf: no noise)
    attack: str
    auc: float
    queries: Optional[int] = None
    lower_bound: Optional[float] = None
    ceiling: Optional[float] = None  # what a perfect attack could certify in the same audit
    canaries: Optional[int] = None  # independent coin-flip trials behind the bound (canaries or members)
    covered: bool = True  # is the attacked output covered by the claimed guarantee?
    seconds: float = 0.0


# ------------------------------------------------------------------------------ targets
class Target:
    """One component at one epsilon: how to release on a graph and what is noiseless."""

    name = ""

    def __init__(self, x: Tensor, y: Tensor, num_nodes: int, epsilon: float, delta: float, seed: int) -> None:
        self.x, self.y, self.n, self.epsilon, self.delta = x, y, num_nodes, epsilon, delta
        self.gen = torch.Generator().manual_seed(seed)

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    def release(self, edge_index: Tensor, accountant: Optional[PrivacyAccountant]) -> Tensor:
        """One fresh release on ``edge_index`` at the target epsilon (one event)."""
        raise NotImplementedError

    def noiseless(self, edge_index: Tensor) -> Tensor:
        """The same computation without noise (what the canary score projects on)."""
        raise NotImplementedError

    def linkteller_query(self, edge_index: Tensor, queries: int,
                         accountant: Optional[PrivacyAccountant]) -> tuple[Callable[[Tensor], Tensor], bool]:
        """The inference API the attacker queries ``queries`` times, and whether its
        outputs are covered by the guarantee."""
        raise NotImplementedError


class Contractive(Target):
    name = "ContractiveGraphLayer"
    K, CONTRACTION = 2, 0.9

    def _layer(self, multiplier: Optional[float], accountant) -> ContractiveGraphLayer:
        noise = {"noise_multiplier": 0.0} if not self.private else \
            {"noise_multiplier": multiplier} if multiplier is not None else {"epsilon": self.epsilon, "delta": self.delta}
        return ContractiveGraphLayer(self.K, self.CONTRACTION, min_degree=1, degree_floor=True,
                                     accountant=accountant if self.private else None, generator=self.gen, **noise)

    def release(self, edge_index, accountant):
        return self._layer(None, accountant)(self.x, edge_index).double()

    def noiseless(self, edge_index):
        return ContractiveGraphLayer(self.K, self.CONTRACTION, min_degree=1, degree_floor=True, noise_multiplier=0.0)(
            self.x, edge_index).double()

    def linkteller_query(self, edge_index, queries, accountant):
        # GDP composes exactly: Q releases at sigma * sqrt(Q) cost what one release at sigma costs
        multiplier = self._layer(None, None).noise_multiplier * math.sqrt(queries) if self.private else None
        layer = self._layer(multiplier, accountant)
        return (lambda x: layer(x, edge_index).double()), True


class NoisyPPR(Target):
    name = "NoisyPPRDiffusion"
    ALPHA, ITERATIONS = 0.2, 50

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # uniform restart signal (public); eta so that the clip f rarely binds on Cora
        self.signal = torch.full((self.n, 1), 1.0 / self.n, dtype=torch.float64)
        self.eta = 2.0 / self.n

    def _layer(self, columns: int, accountant) -> NoisyPPRDiffusion:
        noise = {"epsilon": self.epsilon, "delta": self.delta, "epsilon_columns": columns} if self.private \
            else {"noise_scale": 0.0}
        return NoisyPPRDiffusion(self.ALPHA, self.ITERATIONS, self.eta, accountant=accountant if self.private
                                 else None, generator=self.gen, **noise)

    def release(self, edge_index, accountant):
        return self._layer(1, accountant)(self.signal, edge_index)

    def noiseless(self, edge_index):
        return NoisyPPRDiffusion(self.ALPHA, self.ITERATIONS, self.eta, noise_scale=0.0)(self.signal, edge_index)

    def linkteller_query(self, edge_index, queries, accountant):
        # the attacker perturbs the (public) signal of one node at a time; the target covers
        # every column of every query
        layer = self._layer(queries, accountant)
        return (lambda s: layer(s, edge_index)), True


class GCON(Target):
    name = "PerturbedAPPRConv"
    ALPHA, STEPS, LAMBDA = 0.8, 2, 0.2

    def _layer(self, accountant) -> PerturbedAPPRConv:
        return PerturbedAPPRConv(self.x.size(1), int(self.y.max()) + 1, alpha=self.ALPHA, steps=self.STEPS,
                                 epsilon=self.epsilon if self.private else 1.0, delta=self.delta,
                                 regularization=self.LAMBDA, cached=False, accountant=accountant)

    def release(self, edge_index, accountant):
        if not self.private:
            return self.noiseless(edge_index)
        layer = self._layer(accountant)
        layer.fit(self.x, edge_index, self.y, generator=self.gen)
        return layer.weight.clone()

    def noiseless(self, edge_index):
        """The head without B, at the regularization the private fit uses."""
        layer = self._layer(None)
        reg = self.LAMBDA
        if self.private:
            cal = layer.calibration(self.n)
            reg = cal.Lambda + cal.Lambda_prime
        z = appr_propagate(self.x, edge_index, alpha=self.ALPHA, steps=[self.STEPS], tol=1e-10)
        targets = F.one_hot(self.y, layer.out_channels).to(torch.float64)
        return solve_separable_ridge(z, targets, layer.loss, regularization=reg, tol=layer.tol).theta

    def linkteller_query(self, edge_index, queries, accountant):
        layer = self._layer(accountant if self.private else None)
        if self.private:
            layer.fit(self.x, edge_index, self.y, generator=self.gen)  # the only release
        else:
            layer.weight = self.noiseless(edge_index)
        return (lambda x: layer(x, edge_index, mode="private")), False  # Eq. 16 reads the graph in the clear


TARGETS = (Contractive, NoisyPPR, GCON)


# ------------------------------------------------------------------ PyG references
class _GCN(torch.nn.Module):
    def __init__(self, fin: int, hidden: int, fout: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(fin, hidden), GCNConv(hidden, fout)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = F.dropout(x, 0.5, self.training)
        return self.conv2(F.dropout(F.relu(self.conv1(x, edge_index)), 0.5, self.training), edge_index)


def train_gcn(data, edge_index: Tensor, mask: Tensor, seed: int, epochs: int = 200) -> _GCN:
    torch.manual_seed(seed)
    model = _GCN(data.num_features, 64, int(data.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(data.x, edge_index)[mask], data.y[mask]).backward()
        opt.step()
    return model.eval()


# ------------------------------------------------------------------------- attacks
def run_linkteller(target: Target, edge_index: Tensor, nodes: Tensor, x: Tensor) -> Row:
    t0 = time.perf_counter()
    acct = PrivacyAccountant() if target.private else None
    queries = 1 + nodes.numel()
    query, covered = target.linkteller_query(edge_index, queries, acct)
    res = linkteller_attack(_ticking(query, queries, f"  {target.name} eps={target.epsilon:g} LinkTeller queries"),
                            x, edge_index, nodes)
    claimed = acct.epsilon("edge", target.delta) if acct is not None else math.inf
    return Row(target.name, claimed, "LinkTeller", res.auc, queries=res.queries, covered=covered,
               seconds=time.perf_counter() - t0)


def _ticking(fn: Callable, total: int, desc: str) -> Callable:
    """``fn`` with a progress bar that advances at every call (closed after ``total`` calls)."""
    bar = progress(total=total, desc=desc)

    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        bar.update(1)
        if bar.n >= total:
            bar.close()
        return out

    return call


def run_canaries(target: Target, edge_index: Tensor, canaries: Tensor, score, runs: int) -> Row:
    t0 = time.perf_counter()
    accountants: list[PrivacyAccountant] = []
    bar = progress(total=runs, desc=f"  {target.name} eps={target.epsilon:g} canary releases")

    def release(ei: Tensor) -> Tensor:
        acct = PrivacyAccountant() if target.private else None
        out = target.release(ei, acct)
        bar.update(1)
        if acct is not None:
            if len(acct.events) != 1:
                raise AssertionError(f"{target.name}: {len(acct.events)} events for one release")
            accountants.append(acct)
        return out

    audit = canary_edge_audit(release, score, edge_index, target.n, num_canaries=canaries.size(1), runs=runs,
                              canaries=canaries, delta=target.delta if target.private else 0.0,
                              guesses=runs * canaries.size(1),  # one pre-registered count: no split
                              confidence=CONFIDENCE, generator=torch.Generator().manual_seed(7))
    bar.close()
    claimed = max(a.epsilon("edge", target.delta) for a in accountants) if accountants else math.inf
    return Row(target.name, claimed, "canary edges", audit.auc, lower_bound=audit.epsilon, ceiling=audit.ceiling,
               canaries=audit.canaries, seconds=time.perf_counter() - t0)


def strongest_canary(noiseless: Callable[[Tensor], Tensor], edge_index: Tensor, num_nodes: int,
                     candidates: Tensor) -> Tensor:
    """The candidate pair whose insertion moves the noiseless output most (chosen from the
    canary-free graph only, before any inclusion bit is drawn)."""
    f0 = noiseless(edge_index)
    effects = [float((noiseless(insert_edges(edge_index, candidates[:, i:i + 1], num_nodes)) - f0).norm())
               for i in range(candidates.size(1))]
    best = max(range(len(effects)), key=effects.__getitem__)
    return candidates[:, best:best + 1]


def run_membership(data, epsilons, seed: int, epochs: int, max_degree: int) -> list[Row]:
    """Train on the members' induced subgraph, query on the full graph, loss-threshold attack.
    ``max_degree`` is the declared public bound of the node-level layer (see the module notes)."""
    rows = []
    bar = progress(total=2 + len(epsilons), desc="membership models (GCN, MLP, CARIBOU per eps)")
    members = member_split(data.num_nodes, generator=torch.Generator().manual_seed(seed))
    nonmembers = ~members
    sub = member_subgraph(data, members)
    everyone = torch.ones(sub.num_nodes, dtype=torch.bool)
    sub.train_mask = sub.val_mask = sub.test_mask = everyone  # the members are the training set
    num_classes = int(data.y.max()) + 1
    delta = 1e-5  # well below 1/n: the one-run bound loses 2 m delta, with m = n here

    started = [time.perf_counter()]  # when the model being attacked started training

    def attack(name: str, logits: Tensor, claimed: float) -> Row:
        seconds, started[0] = time.perf_counter() - started[0], time.perf_counter()
        scores = membership_scores(logits, data.y, "loss")
        res = threshold_attack(scores, members, nonmembers)
        # every node was a member independently with probability 1/2: the one-run bound applies
        m = data.num_nodes
        bound = one_run_audit(scores, members, guesses=m // 2, delta=delta if math.isfinite(claimed) else 0.0,
                              confidence=CONFIDENCE)
        return Row(name, claimed, "membership (loss threshold)", res.auc, lower_bound=bound.epsilon,
                   ceiling=bound.ceiling, canaries=m, seconds=seconds)

    gcn = train_gcn(sub, sub.edge_index, everyone, seed, epochs=epochs)
    with torch.no_grad():
        rows.append(attack("PyG GCN (non-private)", gcn(data.x, data.edge_index), math.inf))
    bar.update(1)
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(torch.nn.Linear(data.num_features, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, num_classes))
    fit_full_batch(mlp, sub.x, sub.y, everyone, epochs=epochs, lr=0.01)
    with torch.no_grad():
        rows.append(attack("MLP (non-private)", mlp(data.x), math.inf))
    bar.update(1)

    # CARIBOU at node level: DP-SGD encoder and head, ContractiveGraphLayer at level "node", on the
    # fixed universe of the graph's nodes: non-members are absent slots (zero feature rows, no edges),
    # so every release has one row per slot; the declared max_degree holds for every member subgraph
    keep = members[data.edge_index[0]] & members[data.edge_index[1]]
    universe = data.clone()
    universe.x = data.x * members.unsqueeze(1).to(data.x.dtype)
    universe.edge_index = data.edge_index[:, keep]
    slots = torch.ones(data.num_nodes, dtype=torch.bool)
    universe.train_mask = universe.val_mask = universe.test_mask = slots  # the present members train
    config = CaribouConfig("caribou", K=2, contraction=0.9, encoder_dim=16, hidden=64, epochs=epochs // 4,
                           lr=1e-2, batch_size=256, use_x0=False)
    for eps in epsilons:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Secure RNG turned off")  # Opacus: seeded on purpose
            result = run_caribou(universe, config, epsilon=eps, delta=delta, level="node", min_degree=0,
                                 max_degree=max_degree, num_nodes=data.num_nodes, seed=seed,
                                 num_classes=num_classes)
        logits = result.model.logits(data.x, data.edge_index)  # test-on-full: a new release, charged
        claimed = result.accountant.epsilon("node", delta) if math.isfinite(eps) else math.inf
        rows.append(attack("CARIBOU (node level)", logits, claimed))
        bar.update(1)
    bar.close()
    return rows


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_argument(parser, "Cora")
    parser.add_argument("--epsilons", type=float, nargs="+", default=None, help="default: 1 4 inf (--smoke: 1 inf)")
    parser.add_argument("--canaries", type=int, default=500, help="disjoint canary pairs per run")
    parser.add_argument("--runs", type=int, default=8, help="independent canary runs (pooled)")
    parser.add_argument("--gcon-runs", type=int, default=2000, help="PerturbedAPPRConv: releases of one canary")
    parser.add_argument("--attack-edges", type=int, default=100, help="LinkTeller: edges whose endpoints are S")
    parser.add_argument("--max-degree", type=int, default=None,
                        help="the node-level bound of the membership experiment (default: the largest degree "
                             "of the full graph, the public universe here; see the module notes)")
    parser.add_argument("--quick", action="store_true",
                        help="200 canaries x 2 runs (GCON: 1 x 100), 40 attack edges, 100 epochs, membership at the "
                             "largest finite epsilon and inf (under 2 minutes on one thread)")
    parser.add_argument("--smoke", action="store_true", help="a tiny audit end to end (the tests)")
    add_threads_argument(parser)
    add_out_argument(parser, "the CSV", default=None, default_text="outputs/audit_<dataset>")
    args = parser.parse_args()
    epochs = 200
    if args.quick:
        args.canaries, args.runs, args.gcon_runs, args.attack_edges, epochs = 200, 2, 100, 40, 100
    if args.smoke:
        args.canaries, args.runs, args.gcon_runs, args.attack_edges, epochs = 20, 1, 20, 4, 10
    epsilons = args.epsilons or ([1.0, math.inf] if args.smoke else list(EPSILONS))
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", UntrackedPrivacyWarning)

    data = load_clean(parser, args.dataset)  # cleaned: self-loops dropped, duplicate / one-way entries merged
    name = spec(args.dataset).label
    out = args.out or os.path.join("outputs", f"audit_{file_stem(args.dataset)}")
    known = labelled(data.y)
    subgraph = ""
    if not bool(known.all()):  # GCON's head and the membership attack need every label: audit the labelled part
        subgraph = (f" (the subgraph of its {int(known.sum())} labelled nodes; {int((~known).sum())} unlabelled "
                    "left out)")
        data = data.subgraph(known)
    if getattr(data, "train_mask", None) is None:  # no public split: 20 per class (or the scaled rule)
        sizes = class_sizes(data.y)
        data = attach_split(data, per_class_split(data.y, *split_sizes(data.num_nodes, sizes), seed=0))
    n, ei = data.num_nodes, data.edge_index
    delta = edge_delta(data)  # 1/|E| of the audited, cleaned graph
    if 4 * args.canaries > n:  # disjoint canary pairs need 2 m <= n nodes (and room to draw them): a small graph
        args.canaries = max(1, n // 4)
    max_degree = args.max_degree
    if max_degree is None:  # the public universe's bound (the full graph is public in this experiment)
        max_degree = int(torch.bincount(ei[0], minlength=n).max()) if ei.numel() else 0
    proj = torch.randn(data.num_features, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = data.x.double() @ proj
    x = 0.5 * x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)  # inside the unit ball, public
    say(f"{name}{subgraph}: {n} nodes, {num_edges(data)} undirected edges (cleaned); {delta_text(data)}; "
        f"{args.canaries} canaries x {args.runs} runs; LinkTeller on the endpoints of {args.attack_edges} edges; "
        f"confidence {CONFIDENCE}; membership: declared max_degree {max_degree}")

    nodes = sample_attack_nodes(ei, n, args.attack_edges, generator=torch.Generator().manual_seed(1))
    canaries = sample_canary_pairs(ei, n, args.canaries, generator=torch.Generator().manual_seed(2))
    rows: list[Row] = []
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    writer = CsvWriter(output_stem(out, f"audit_{file_stem(args.dataset)}", mode) + ".csv")

    def emit(new: list[Row]) -> None:
        _print(new)
        rows.extend(new)
        for r in new:
            writer.write(_csv_row(r))

    # the PyG references: a trained GCN (LinkTeller's original target) and APPNP's propagation
    t0 = time.perf_counter()
    gcn = train_gcn(data, ei, data.train_mask, seed=0, epochs=5 if args.smoke else epochs)
    queries = 1 + nodes.numel()
    res = linkteller_attack(_ticking(lambda f: gcn(f, ei), queries, "  PyG GCN LinkTeller queries"), data.x, ei, nodes)
    new = [Row("PyG GCN (trained)", math.inf, "LinkTeller", res.auc, queries=res.queries,
               seconds=time.perf_counter() - t0)]
    appnp = APPNP(K=10, alpha=0.1)
    res = linkteller_attack(_ticking(lambda f: appnp(f, ei), queries, "  PyG APPNP LinkTeller queries"), x, ei, nodes)
    new.append(Row("PyG APPNP (K=10)", math.inf, "LinkTeller", res.auc, queries=res.queries))
    emit(new)

    for cls, (i, eps) in progress([(c, ie) for c in TARGETS for ie in enumerate(epsilons)],
                                  desc="targets x epsilons"):
        if i == 0:
            direction_cache = None  # the noiseless canary effects do not depend on epsilon
        target = cls(x, data.y, n, eps, delta, seed=3 + i)  # fresh noise per epsilon
        link_x = target.signal if isinstance(target, NoisyPPR) else x
        new = [run_linkteller(target, ei, nodes, link_x)]
        if isinstance(target, GCON):
            # the head is one global matrix: many canaries in one release drown each other, so
            # GCON gets one canary (the candidate with the largest noiseless effect) per release
            t0 = time.perf_counter()
            pair = strongest_canary(target.noiseless, ei, n, canaries[:, :50])
            score = linear_canary_score(target.noiseless, ei, n, pair)
            new.append(run_canaries(target, ei, pair, score, args.gcon_runs))
            say(f"  [{cls.name}] one canary x {args.gcon_runs} releases: {time.perf_counter() - t0:.1f} s")
        else:
            if direction_cache is None:
                t0 = time.perf_counter()
                direction_cache = linear_canary_score(target.noiseless, ei, n, canaries)
                say(f"  [{cls.name}] noiseless canary effects: {time.perf_counter() - t0:.1f} s")
            new.append(run_canaries(target, ei, canaries, direction_cache, args.runs))
        emit(new)

    say("\nmembership inference (train on members' subgraph, query on the full graph)")
    member_epsilons = epsilons
    if args.quick:  # the node-level DP-SGD runs dominate: the largest finite epsilon (and inf) only
        finite = [e for e in epsilons if math.isfinite(e)]
        member_epsilons = [e for e in epsilons if not math.isfinite(e) or e == max(finite)]
    emit(run_membership(data, member_epsilons, seed=4, epochs=epochs, max_degree=max_degree))
    writer.close()
    _summary(rows)
    say(f"wrote {writer.path}")


def _fmt(v: Optional[float]) -> str:
    return "-" if v is None else ("inf" if v == math.inf else f"{v:.3f}")


def _print(rows: list[Row]) -> None:
    for r in rows:
        say(f"{r.component:32s} claimed eps {_fmt(r.claimed):>6s} | {r.attack:28s} AUC {r.auc:.3f}"
              + (f" | queries {r.queries}" if r.queries else "")
              + (f" | eps lower bound {_fmt(r.lower_bound)} (ceiling {_fmt(r.ceiling)}; {CONFIDENCE:.0%}, "
                 f"{r.canaries} coin-flip trials)"
                 if r.lower_bound is not None else "")
              + ("" if r.covered else " | inference NOT covered by the guarantee"))


def _summary(rows: list[Row]) -> None:
    say("\n| component | claimed eps | attack | AUC | empirical eps lower bound (95%) | ceiling | note |")
    say("|---|---|---|---|---|---|---|")
    violations = []
    for r in rows:
        note = "" if r.covered else "inference reads the graph: outside the guarantee"
        if r.ceiling is not None and math.isfinite(r.claimed) and r.ceiling <= r.claimed:
            note = "no power: even a perfect attack could not certify the claim"
        if r.lower_bound is not None and r.lower_bound > r.claimed:
            violations.append(r)
            note = "VIOLATION: lower bound above the claim"
        say(f"| {r.component} | {_fmt(r.claimed)} | {r.attack} | {r.auc:.3f} | {_fmt(r.lower_bound)} | "
              f"{_fmt(r.ceiling)} | {note} |")
    say(f"\n{len(violations)} violation(s) of a claimed epsilon.")


def _csv_row(r: Row) -> dict:
    return {"component": r.component, "claimed_epsilon": r.claimed, "attack": r.attack, "auc": f"{r.auc:.4f}",
            "queries": r.queries or "",
            "epsilon_lower_bound": "" if r.lower_bound is None else f"{r.lower_bound:.4f}",
            "ceiling": "" if r.ceiling is None else f"{r.ceiling:.4f}", "trials": r.canaries or "",
            "confidence": CONFIDENCE, "covered_by_guarantee": r.covered, "seconds": f"{r.seconds:.1f}"}


if __name__ == "__main__":
    main()
