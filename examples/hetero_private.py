"""Edge-level privacy on a heterogeneous graph: a user-item-tag graph built from an offline dataset,
GAP's aggregation per relation inside ``HeteroConv``, the releases of one forward composed by
node-type pairs (:func:`pyg_private.nn.compose_relations`).

**The graph** (built in code from ``--dataset``, default Amazon Computers; any offline graph with
node features works). Each node of the dataset is an **item** (its label is the target). The
feature columns are split in two halves by index: the first half stays the items' features, the
second half becomes **tags** (one tag node per column), and item ``i`` is linked to at most
``--tags-per-item`` of its non-zero second-half columns, the ones appearing in the fewest items
(document frequency of the public features, ties by column). **Users** come from the co-purchase
graph: one user per item, user ``i`` buying item ``i`` and ``--basket`` items drawn uniformly, with
replacement, from its co-purchase neighbours (seed 0). The heterogeneous graph holds
``(user, buys, item)`` and ``(item, has, tag)`` with their reverses (``T.ToUndirected``); the
co-purchase edges themselves are not in it, so the item-item signal reaches an item only through
its users. The private data are the edges of both relations (the unit: one edge of one relation);
features and labels are public.

**The private model** (GAP's three modules, Sajadmanesh et al., USENIX Security 2023): an edge-free
encoder (an MLP on the item features, trained on the training items; its 16-wide hidden layer is
the item embedding), then two aggregation hops released with Gaussian noise, then a head. Hop 1 is a
``HeteroConv`` with ``GAPAggregation`` on ``item -> user`` and ``item -> tag`` (users and tags sum
the unit embeddings of their items), hop 2 a ``HeteroConv`` on ``user -> item`` and ``tag -> item``
(on hop 1's released blocks: post-processing inputs). ``compose_relations`` charges each forward by parts:
the user-item part holds ``rev_buys`` (hop 1) and ``buys`` (hop 2), the item-tag part ``has`` and
``rev_has``, and the parts compose in parallel. One edge moves two releases of one part, so the
whole model is ``sqrt(2)/sigma``-GDP, and sigma is calibrated to epsilon at ``delta = 1/|E|``
(``|E|``: the edges of both relations, counted once). The head (an MLP on the embedding and hop 2's
release) trains on the cached release at no further cost.

**Baselines**: the non-private ``to_hetero`` GraphSAGE (a 64-wide input projection per node type,
then two layers, hidden 64, every relation) on
the same graph and features, the edge-free encoder itself (an MLP on the item features), and the
private pipeline without noise. Test accuracy at the epoch of best validation accuracy; split 10% /
10% / 80% of the labelled items, per seed. Every release is seeded (``--seeds``) for a reproducible
run, which voids the guarantee; drop the generator in a deployment.

Rows are printed and appended to ``<out>/<dataset>_hetero_private.csv`` as they finish (``--quick``:
``<out>/<dataset>_hetero_private_quick.csv``); a progress bar goes to stderr. ``--quick`` (one seed,
epsilons 1 and 8, 100 epochs, baskets of 5) took 48 s on one thread (the full run 8.4 min).

    python examples/hetero_private.py [--dataset Computers] [--epsilons 1 4 8] [--seeds 0 1 2]
        [--epochs 200] [--basket 10] [--tags-per-item 8] [--threads 1] [--quick] [--out outputs]
"""
from __future__ import annotations

import argparse
import math
import os
import time
import warnings

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.data import HeteroData
from torch_geometric.nn import MLP, HeteroConv, Linear, SAGEConv, to_hetero

from example_data import add_dataset_argument, file_stem, spec
from example_io import CsvWriter, progress, say
from example_protocol import labelled, load_clean, random_labelled_split
from pyg_private import PrivacyAccountant
from pyg_private.accounting import gdp_mu
from pyg_private.nn import GAPAggregation, compose_relations, relation_parts

HOP1 = [("item", "rev_buys", "user"), ("item", "has", "tag")]
HOP2 = [("user", "buys", "item"), ("tag", "rev_has", "item")]


# ---------------------------------------------------------------- the heterogeneous graph
def build_graph(data, *, basket: int, tags_per_item: int, seed: int = 0) -> HeteroData:
    """The user-item-tag graph of the module notes (public rules, seeded; the baskets read the
    dataset's co-purchase edges, which are not part of the result)."""
    g = torch.Generator().manual_seed(seed)
    n = data.num_nodes
    x = data.x.float()
    half = x.size(1) // 2
    # users: user i buys item i and `basket` co-purchased items drawn uniformly with replacement
    row, col = data.edge_index
    order = torch.argsort(row * n + col)
    row, col = row[order], col[order]
    crow = torch.zeros(n + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(row, minlength=n), 0, out=crow[1:])
    deg = crow.diff()
    step = (torch.rand(n, basket, generator=g) * deg.clamp_min(1)[:, None]).long()
    picked = col[(crow[:-1, None] + step).clamp_max(max(col.numel() - 1, 0))] if col.numel() else \
        torch.arange(n)[:, None].expand(n, basket)
    picked = torch.where(deg[:, None] > 0, picked, torch.arange(n)[:, None])
    items = torch.cat([torch.arange(n)[:, None], picked], 1)
    keys = torch.unique(torch.arange(n)[:, None].expand_as(items).reshape(-1) * n + items.reshape(-1))
    buys = torch.stack([keys // n, keys % n])
    # tags: the second half of the columns; each item keeps its rarest non-zero ones
    words = x[:, half:] != 0
    df = words.sum(0)
    rank = torch.argsort(torch.argsort(df * words.size(1) + torch.arange(words.size(1)), stable=True))
    score = torch.where(words, rank.float().expand_as(words), torch.full_like(words, math.inf, dtype=torch.float))
    k = min(tags_per_item, words.size(1))
    top = torch.topk(score, k, dim=1, largest=False)
    keep = torch.isfinite(top.values)
    has = torch.stack([torch.arange(n).repeat_interleave(k)[keep.view(-1)], top.indices[keep]])
    d = HeteroData()
    d["item"].x = x[:, :half]
    d["item"].y = data.y
    d["user"].x = torch.ones(n, 1)
    d["tag"].x = torch.ones(words.size(1), 1)
    d["user", "buys", "item"].edge_index = buys
    d["item", "has", "tag"].edge_index = has
    return T.ToUndirected()(d)


def num_relation_edges(d: HeteroData) -> int:
    """The edges of the graph's relations, each counted once (reverse relations excluded)."""
    return sum(d[et].edge_index.size(1) for et in d.edge_types if not et[1].startswith("rev_"))


# ---------------------------------------------------------------- models
class Encoder(torch.nn.Module):
    """GAP's edge-free encoder: an MLP whose 16-wide hidden layer is the item embedding."""

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.body = MLP([in_channels, 64, 16], dropout=0.5, norm=None)
        self.out = torch.nn.Linear(16, num_classes)

    def embed(self, x):
        return self.body(x)

    def forward(self, x):
        return self.out(F.relu(self.body(x)))


class PrivateHops(torch.nn.Module):
    """The two released hops (the module notes): one ``HeteroConv`` per hop, ``GAPAggregation`` per relation."""

    def __init__(self, noise_multiplier: float, accountant, generator) -> None:
        super().__init__()
        kw = dict(noise_multiplier=noise_multiplier, accountant=accountant, generator=generator)
        with warnings.catch_warnings():  # HeteroConv: "node types not updated" (by design: one direction a hop)
            warnings.simplefilter("ignore", UserWarning)
            self.hop1 = HeteroConv({et: GAPAggregation(1, **kw) for et in HOP1}, aggr="cat")
            self.hop2 = HeteroConv({et: GAPAggregation(1, **kw) for et in HOP2}, aggr="cat")

    def forward(self, x_dict, edge_index_dict):
        h = self.hop1(x_dict, edge_index_dict)  # user and tag rows: [1 || released sum of their items' embeddings]
        # hop 2 reads the released blocks only (the constant first column is no release: dropped)
        h = {"user": h["user"][:, 1:], "tag": h["tag"][:, 1:], "item": x_dict["item"]}
        out = self.hop2(h, edge_index_dict)["item"]  # per relation: [normalize(x_item) || released block]
        width = x_dict["item"].size(1)
        return out.view(out.size(0), len(HOP2), -1)[:, :, width:].reshape(out.size(0), -1)


class SAGE(torch.nn.Module):
    """GraphSAGE for ``to_hetero``: a per-type input projection (so that the messages are 64 wide),
    then two ``SAGEConv`` layers."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.lin = Linear(-1, 64)
        self.conv1 = SAGEConv(64, 64)
        self.conv2 = SAGEConv(64, num_classes)

    def forward(self, x, edge_index):
        x = self.lin(x).relu()
        x = F.dropout(self.conv1(x, edge_index).relu(), p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def fit(forward, params, y, masks, epochs: int, lr: float = 0.01) -> tuple[float, float]:
    """Adam; the test accuracy at the epoch of best validation accuracy."""
    train, val, test = masks
    optimizer = torch.optim.Adam(params, lr=lr, weight_decay=5e-4)
    best_val = best_test = 0.0
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(True)[train], y[train])
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            pred = forward(False).argmax(-1)
        acc = [float((pred[m] == y[m]).float().mean()) for m in (val, test)]
        if acc[0] > best_val:
            best_val, best_test = acc
    return best_val, best_test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_argument(parser, "Computers")
    parser.add_argument("--epsilons", type=float, nargs="+", default=None, help="default 1 4 8 (--quick: 1 8)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 (--quick: 0)")
    parser.add_argument("--epochs", type=int, default=None, help="default 200 (--quick: 100)")
    parser.add_argument("--basket", type=int, default=None, help="co-purchased items per user (default 10, "
                        "--quick: 5)")
    parser.add_argument("--tags-per-item", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--quick", action="store_true", help="one seed, epsilons 1 and 8, 100 epochs, baskets of 5")
    parser.add_argument("--out", default="outputs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    epsilons = args.epsilons or ([1.0, 8.0] if args.quick else [1.0, 4.0, 8.0])
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    epochs = args.epochs or (100 if args.quick else 200)
    start = time.perf_counter()

    base = load_clean(parser, args.dataset)
    name = spec(args.dataset).label
    basket = args.basket or (5 if args.quick else 10)
    d = build_graph(base, basket=basket, tags_per_item=args.tags_per_item)
    num_users = d["user"].num_nodes
    num_edges = num_relation_edges(d)
    delta = 1.0 / num_edges
    y = d["item"].y
    num_classes = int(y[labelled(y)].max()) + 1
    parts = relation_parts(HOP1 + HOP2)
    worst = max(len(v) for v in parts.values())  # releases of one node-type pair per forward
    say(f"{name} as users-items-tags: {d['item'].num_nodes} items, {d['user'].num_nodes} users, "
        f"{d['tag'].num_nodes} tags; {d['user', 'buys', 'item'].edge_index.size(1)} buys and "
        f"{d['item', 'has', 'tag'].edge_index.size(1)} has edges (+ reverses); delta = 1/|E| = 1/{num_edges}; "
        f"parts {[len(v) for v in parts.values()]} releases: the model is sqrt({worst})/sigma-GDP")
    stem = file_stem(args.dataset) + ("_hetero_private_quick" if args.quick else "_hetero_private")
    path = os.path.join(args.out, f"{stem}.csv")
    writer = CsvWriter(path)
    results: dict[str, list[float]] = {}

    def emit(model: str, epsilon: float, seed: int, spent: str, val: float, test: float, sigma=None) -> None:
        results.setdefault(model, []).append(test)
        writer.write({"dataset": name, "model": model, "epsilon": epsilon, "delta": delta, "epsilon_spent": spent,
                      "noise_multiplier": "" if sigma is None else sigma, "seed": seed, "val": 100 * val,
                      "test": 100 * test, "epochs": epochs, "items": d["item"].num_nodes, "users": num_users,
                      "tags": d["tag"].num_nodes, "basket": basket, "edges": num_edges})
        say(f"{model:40s} seed {seed}  {spent:>7s}  val {100 * val:5.1f}  test {100 * test:5.1f}")

    bar = progress(total=len(seeds) * (3 + len(epsilons)), desc="hetero_private")
    for seed in seeds:
        masks = random_labelled_split(y, 0.1, 0.1, 0.8, seed=seed)
        # the non-private to_hetero GraphSAGE on every relation
        torch.manual_seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # to_hetero: node types without an incoming relation
            sage = to_hetero(SAGE(num_classes), d.metadata(), aggr="sum")
            with torch.no_grad():
                sage(d.x_dict, d.edge_index_dict)  # initialise the lazy layers
        def sage_forward(train):
            sage.train(train)
            return sage(d.x_dict, d.edge_index_dict)["item"]
        emit("to_hetero GraphSAGE (not private)", math.inf, seed, "-",
             *fit(sage_forward, list(sage.parameters()), y, masks, epochs))
        bar.update()
        # the edge-free encoder (the MLP baseline)
        torch.manual_seed(seed)
        enc = Encoder(d["item"].x.size(1), num_classes)
        def enc_forward(train):
            enc.train(train)
            return enc(d["item"].x)
        emit("MLP on item features (no edges)", 0.0, seed, "0", *fit(enc_forward, list(enc.parameters()), y, masks,
                                                                      epochs))
        bar.update()
        with torch.no_grad():
            enc.eval()
            x_dict = {"item": enc.embed(d["item"].x), "user": d["user"].x, "tag": d["tag"].x}
        for eps in [math.inf] + list(epsilons):
            acct = PrivacyAccountant()
            gen = torch.Generator().manual_seed(seed)  # a reproducible run: voids the guarantee
            sigma = 0.0 if math.isinf(eps) else math.sqrt(worst) / gdp_mu(epsilon=eps, delta=delta)
            hops = compose_relations(PrivateHops(sigma, acct if sigma > 0 else None, gen if sigma > 0 else None))
            with torch.no_grad():
                released = hops(x_dict, d.edge_index_dict)  # charged once; cached in the layers
            # GAP's classification module: the unit embedding and the released blocks, all on one scale
            feats = torch.cat([F.normalize(x_dict["item"], dim=-1), released], dim=-1)
            torch.manual_seed(seed)
            head = MLP([feats.size(1), 64, num_classes], dropout=0.5, norm=None)
            def head_forward(train):
                head.train(train)
                return head(feats)
            val, test = fit(head_forward, list(head.parameters()), y, masks, epochs)
            label = "private pipeline, no noise" if math.isinf(eps) else f"private HeteroConv + GAP, eps={eps:g}"
            spent = "inf" if math.isinf(eps) else f"{acct.epsilon('edge', delta):.3f}"
            emit(label, eps, seed, spent, val, test, None if math.isinf(eps) else sigma)
            if not math.isinf(eps) and seed == seeds[0] and eps == epsilons[0]:
                say(str(acct.report(delta)))
            bar.update()
    bar.close()
    writer.close()
    print(f"\n{name} (users-items-tags), {epochs} epochs, seeds {seeds}, delta 1/{num_edges}: test accuracy (%)")
    for model, accs in results.items():
        t = torch.tensor(accs) * 100
        sd = f" ± {float(t.std()):.1f}" if t.numel() > 1 else ""
        print(f"  {model:40s} {float(t.mean()):5.1f}{sd}")
    print(f"\nwrote {path}\ntotal {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
