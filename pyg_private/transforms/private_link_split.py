r"""The private counterpart of PyG's ``RandomLinkSplit``: all node pairs split by a keyed hash."""
from __future__ import annotations

import copy
import os
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from ..nn._call_checks import reject_sampled_batch
from ..utils.graph_validation import declared_num_nodes, simple_undirected
from ..utils.pair_sampling import PARTS, LinkSplitRule, check_key, sample_pairs

__all__ = ["PrivateLinkSplit", "bipartite_union"]


def _share(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"`{name}` must be a share of all node pairs in (0, 1) (not a number of edges: a count "
                         f"taken from the graph would make the split depend on it); got {value!r}")
    return float(value)


def _both_directions(pairs: Tensor, num_nodes: int) -> Tensor:
    """The undirected edges ``pairs`` (``u < v``) as a sorted ``edge_index`` holding both directions."""
    ei = torch.cat([pairs, pairs.flip(0)], dim=1)
    order = torch.argsort(ei[0] * num_nodes + ei[1])
    return ei[:, order]


def _reverse_of(data: HeteroData, edge_type: tuple, other: tuple) -> bool:
    """Whether ``other`` is ``edge_type`` reversed, as ``T.ToUndirected`` adds it (``rev_<relation>``,
    the same pairs the other way round)."""
    src, rel, dst = edge_type
    if other != (dst, f"rev_{rel}", src):
        return False
    a, b = data[edge_type].edge_index, data[other].edge_index
    if a.size(1) != b.size(1):
        return False
    n = max(int(data[src].num_nodes), int(data[dst].num_nodes)) + 1
    return torch.equal(torch.sort(a[0] * n + a[1]).values, torch.sort(b[1] * n + b[0]).values)


def bipartite_union(data: HeteroData, *, clean: bool = False) -> tuple[Data, int]:
    r"""A user-item graph (``HeteroData`` with one node type on each side and one edge type, plus, if
    ``T.ToUndirected`` added it, its reverse) as one homogeneous graph of ``n_s + n_d`` nodes: the
    source nodes keep their ids, destination ``j`` becomes ``n_s + j``, each interaction one
    undirected edge ``{i, n_s + j}``, and the features the block-diagonal
    :math:`\begin{bmatrix}\mathbf X_s & 0\\ 0 & \mathbf X_d\end{bmatrix}` (the two types' features live in
    different spaces; a cosine across the sides is 0). Returns the graph and ``n_s``.

    Under edge-level DP the unit is one interaction (one edge of the relation), which is one edge of
    the union: every bound on the union graph holds for the user-item graph. Node counts and
    features are public; a duplicated interaction is refused unless ``clean`` (merged)."""
    edge_types = list(data.edge_types)
    if len(edge_types) == 2 and _reverse_of(data, edge_types[0], edge_types[1]):
        edge_types = edge_types[:1]
    elif len(edge_types) == 2 and _reverse_of(data, edge_types[1], edge_types[0]):
        edge_types = edge_types[1:]
    if len(edge_types) != 1:
        raise ValueError(f"PrivateLinkSplit takes a HeteroData with one edge type (a user-item graph; with its "
                         f"reverse added by T.ToUndirected, if any); got {len(data.edge_types)} edge types "
                         f"{data.edge_types}. Split each relation's link task on its own HeteroData")
    src, rel, dst = edge_types[0]
    if src == dst:
        raise ValueError(f"the edge type {edge_types[0]} joins one node type: pass data[{src!r}] with its edge_index as "
                         "a homogeneous Data")
    xs = []
    for t in (src, dst):
        x = getattr(data[t], "x", None)
        if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
            raise ValueError(f"node type {t!r} needs a floating-point feature matrix `x` [N, F] (its rows count the "
                             "public nodes; link prediction scores pairs from them)")
        xs.append(x)
    n_s, n_d = xs[0].size(0), xs[1].size(0)
    if n_s == 0 or n_d == 0:
        raise ValueError("both node types need at least one node")
    ei = data[edge_types[0]].edge_index
    if not isinstance(ei, Tensor) or ei.dim() != 2 or ei.size(0) != 2 or ei.is_floating_point():
        raise ValueError(f"data[{edge_types[0]}].edge_index must be a [2, E] integer tensor")
    ei = ei.long()
    if ei.numel() and (int(ei[0].min()) < 0 or int(ei[0].max()) >= n_s or int(ei[1].min()) < 0
                       or int(ei[1].max()) >= n_d):
        raise ValueError(f"data[{edge_types[0]}].edge_index holds ids outside [0, {n_s}) x [0, {n_d})")
    keys = ei[0] * n_d + ei[1]
    unique = torch.unique(keys)
    if unique.numel() != keys.numel():
        if not clean:
            raise ValueError(f"data[{edge_types[0]}].edge_index lists {keys.numel() - unique.numel()} interaction(s) "
                             "twice; pass clean=True to merge duplicates")
        ei = torch.stack([unique // n_d, unique % n_d])
    x = xs[0].new_zeros(n_s + n_d, xs[0].size(1) + xs[1].size(1))
    x[:n_s, :xs[0].size(1)] = xs[0]
    x[n_s:, xs[0].size(1):] = xs[1].to(x.dtype)
    pairs = torch.stack([ei[0], ei[1] + n_s])
    union = Data(x=x, edge_index=torch.cat([pairs, pairs.flip(0)], dim=1), num_nodes=n_s + n_d)
    union.node_types = (src, dst)
    union.edge_type = edge_types[0]
    return union, n_s


def _check_sides(pairs: Tensor, num_src: Any, n: int) -> None:
    """``split_num_src`` of a homogeneous graph: an int in ``[1, n)``, and every edge (``u < v``)
    joins the two sides."""
    if isinstance(num_src, bool) or not isinstance(num_src, int) or not 0 < num_src < n:
        raise ValueError(f"`split_num_src` must be an int in [1, {n - 1}] (the source side of a user-item graph); "
                         f"got {num_src!r}")
    same = int(((pairs[0] >= num_src) | (pairs[1] < num_src)).sum())
    if same:
        raise ValueError(f"{same} edge(s) join two nodes of the same side of the user-item graph (split_num_src = "
                         f"{num_src}): a user-item graph has interactions across its sides only")


@functional_transform("private_link_split")
class PrivateLinkSplit(BaseTransform):
    r"""Split a graph for link prediction under edge-level differential privacy (functional name:
    :obj:`private_link_split`), the counterpart of
    :class:`torch_geometric.transforms.RandomLinkSplit`:
    ``train_data, val_data, test_data = PrivateLinkSplit()(data)``.

    Under edge-level DP (neighbouring graphs differ in one undirected edge; the nodes and their
    features are public) an edge is both a message and a label. ``RandomLinkSplit`` splits the
    **existing edges** by a random permutation: which part an edge falls in depends on the other
    edges (their number and positions), so adding one edge moves others between the parts. This
    transform splits **the space of all unordered node pairs** instead, by a keyed hash
    (:class:`~pyg_private.utils.pair_sampling.LinkSplitRule`)

    .. math::
        h(u, v) = \mathrm{mix}\big((\min(u,v)\, n + \max(u,v)) \oplus \mathrm{mix}(\kappa)\big)
        \in [0, 1),

    with SplitMix64's finaliser :math:`\mathrm{mix}` and the key :math:`\kappa`, and public
    thresholds: ``message`` :math:`[0, s_m)`, ``train`` (supervision) :math:`[s_m, s_m + s_t)`,
    ``val``, ``test``; pairs beyond the sum of the shares are in no part. The part of a pair depends
    on the pair, the public node count :math:`n` and the key only, so **every possible edge falls in
    exactly one part whatever the graph**: adding or removing an edge changes that part's sets and
    no other's. Releases made each on one part's edges (the message edges, the supervision edges,
    the validation edges) therefore compose in **parallel** (McSherry, "Privacy Integrated Queries",
    SIGMOD 2009, Thm. 2): together they cost what the costliest part costs, not the sum
    (see :func:`~pyg_private.models.run_link_prediction`). The key need not be secret (the rule is
    public), but it must be chosen without looking at the graph; it is drawn from ``os.urandom``
    when not given, and stored (``split.key``, and ``split_key`` on every output).

    **Outputs**, with ``RandomLinkSplit``'s attribute names. Every returned ``Data`` keeps the node
    attributes (``x``, labels, masks, ``num_nodes``) and has ``edge_index`` = the **message** edges
    (both directions, sorted); edge attributes (every attribute whose name contains ``edge``) are
    dropped. ``train_data.edge_label_index`` ``[2, E_t]`` holds the supervision edges (one
    direction, ``u < v``), all positives (``edge_label`` 1): negatives are drawn during training,
    without reading the graph. ``val_data`` and ``test_data`` hold their part's edges (label 1) and
    ``neg_sampling_ratio`` times as many negatives (label 0), drawn **uniformly among the pairs of
    the same part** (rejection on the hash, :func:`~pyg_private.utils.sample_pairs`) and never
    filtered against the graph: a negative that happens to be an edge keeps label 0. They serve
    evaluation only (their number follows the part's private edge count). Every output also carries
    the rule: ``split_key`` (int) and ``split_shares`` (message, train, val, test), so a recipe can
    recompute every pair's part and check it.

    **User-item graphs.** A ``HeteroData`` with one node type on each side and one edge type (and,
    if ``T.ToUndirected`` added it, its reverse) is split as one homogeneous graph
    (:func:`bipartite_union`: destination ``j`` becomes node ``n_s + j``, block-diagonal features);
    the outputs are homogeneous ``Data`` over the ``n_s + n_d`` nodes with ``split_num_src = n_s``,
    and the evaluation negatives are drawn among the ``n_s n_d`` user-item pairs of their part
    (never user-user or item-item). The unit is one interaction. A homogeneous ``Data`` that carries
    ``split_num_src`` (such a union, e.g. an output of an earlier split, or one with canary
    interactions inserted) is split the same way: its nodes ``[0, split_num_src)`` are one side, every
    edge must join the two sides, and the negatives are drawn across them.

    **What it reads and releases.** The split releases nothing and charges nothing: it is a fixed
    map of the graph, and its outputs hold the private edges (your data, to be used only by private
    mechanisms, one part each). The negatives are drawn from ``generator`` (or the global
    generator) and never read the graph.

    **Input.** A homogeneous ``Data`` with a declared node count (``num_nodes`` or ``x``: the hash
    uses it; it is never read off the edges) and an undirected simple ``edge_index`` (both
    directions, no self-loop, no duplicate). ``clean=True`` maps any other ``edge_index`` onto one
    (self-loops dropped, missing reverse entries added, duplicates merged): a fixed, deterministic
    map applied to every neighbouring graph alike, after which a graph and its neighbour differ in
    one undirected edge at most (see :mod:`pyg_private.models.recipe_inputs`). A ``HeteroData`` is
    taken as a user-item graph (above).

    Args:
        num_val (float): the share of all node pairs in the validation part. (default: :obj:`0.1`)
        num_test (float): the share of the test part. (default: :obj:`0.1`)
        num_message (float): the share of the message part (the graph the encoder propagates over).
            (default: :obj:`0.7`)
        num_train (float): the share of the supervision part. (default: :obj:`0.1`)
        neg_sampling_ratio (float): negatives per positive in ``val_data`` and ``test_data``.
            (default: :obj:`1.0`)
        key (int, optional): the hash key, in ``[0, 2**64)``; drawn from ``os.urandom`` if not given.
        clean (bool): make the graph simple and undirected first instead of raising. (default: :obj:`False`)
        generator (torch.Generator, optional): draws the evaluation negatives (reproducibility). A
            pickle of the transform drops it.

    Every share must lie in (0, 1) and their sum be at most 1.
    """

    def __init__(self, num_val: float = 0.1, num_test: float = 0.1, *, num_message: float = 0.7,
                 num_train: float = 0.1, neg_sampling_ratio: float = 1.0, key: Optional[int] = None,
                 clean: bool = False, generator: Optional[torch.Generator] = None) -> None:
        shares = (_share(num_message, "num_message"), _share(num_train, "num_train"), _share(num_val, "num_val"),
                  _share(num_test, "num_test"))
        if sum(shares) > 1.0 + 1e-12:
            raise ValueError(f"num_message + num_train + num_val + num_test must be at most 1 (shares of all node "
                             f"pairs); got {' + '.join(f'{s:g}' for s in shares)} = {sum(shares):g}")
        ratio = neg_sampling_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= float(ratio) < float("inf"):
            raise ValueError(f"`neg_sampling_ratio` must be a finite number >= 0; got {neg_sampling_ratio!r}")
        if not isinstance(clean, bool):
            raise TypeError(f"`clean` must be True or False; got {clean!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"`generator` must be a torch.Generator; got {type(generator).__name__}")
        key = int.from_bytes(os.urandom(8), "little") if key is None else check_key(key)
        #: The split's rule: the key and the shares (message, train, val, test).
        self.rule = LinkSplitRule(key, shares)
        self.neg_sampling_ratio = float(ratio)
        self.clean = clean
        self.generator = generator

    @property
    def key(self) -> int:
        """The hash key."""
        return self.rule.key

    @property
    def shares(self) -> tuple[float, float, float, float]:
        """The shares of the parts (message, train, val, test)."""
        return self.rule.shares

    def forward(self, data: Data) -> tuple[Data, Data, Data]:  # type: ignore[override]
        num_src = None
        if isinstance(data, HeteroData):
            data, num_src = bipartite_union(data, clean=self.clean)
        if not isinstance(data, Data):
            raise TypeError(f"PrivateLinkSplit takes a torch_geometric Data; got {type(data).__name__}")
        if num_src is None:
            num_src = getattr(data, "split_num_src", None)  # the union of a user-item graph
        reject_sampled_batch("PrivateLinkSplit", data)
        if getattr(data, "edge_index", None) is None:
            raise ValueError("PrivateLinkSplit splits `data.edge_index`, which these data do not have")
        n = declared_num_nodes(data)
        if n is None:
            raise ValueError("PrivateLinkSplit needs the public number of nodes: set `data.num_nodes` (or give node "
                             "features `x`). It is never inferred from the private edges")
        try:
            edge_index, n = simple_undirected(data.edge_index, n, symmetrize=self.clean)
        except ValueError as err:
            raise ValueError(f"{err}. PrivateLinkSplit needs an undirected simple graph; pass clean=True to drop "
                             "self-loops, add the missing reverse entries and merge duplicates first") from None
        pairs = edge_index[:, edge_index[0] < edge_index[1]]
        if num_src is not None:
            _check_sides(pairs, num_src, n)
        parts = self.rule.part_of(pairs, n) if pairs.numel() else torch.empty(0, dtype=torch.long, device=pairs.device)
        base = copy.copy(data)
        for attr in list(base.keys()):  # everything aligned with (or built from) the input edges
            if attr != "edge_index" and ("edge" in attr or attr in ("e_id", "adj", "adj_t")):
                del base[attr]
        base.edge_index = _both_directions(pairs[:, parts == PARTS.index("message")], n)
        base.split_key = self.rule.key
        base.split_shares = self.rule.shares
        if num_src is not None:
            base.split_num_src = num_src
        outputs = []
        for name in ("train", "val", "test"):
            out = copy.copy(base)
            pos = pairs[:, parts == PARTS.index(name)]
            if name == "train":
                out.edge_label_index = pos
                out.edge_label = torch.ones(pos.size(1), device=pos.device)
            else:
                count = int(round(self.neg_sampling_ratio * pos.size(1)))
                neg = sample_pairs(n, count, part=name, split=self.rule, generator=self.generator,
                                   num_src=num_src).to(pos.device)
                out.edge_label_index = torch.cat([pos, neg], dim=1)
                out.edge_label = torch.cat([torch.ones(pos.size(1), device=pos.device),
                                            torch.zeros(neg.size(1), device=pos.device)])
            outputs.append(out)
        return outputs[0], outputs[1], outputs[2]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["generator"] = None  # reproducibility only; not written out
        return state

    def __repr__(self) -> str:
        m, t, v, s = self.rule.shares
        return (f"{self.__class__.__name__}(num_val={v:g}, num_test={s:g}, num_message={m:g}, num_train={t:g}, "
                f"neg_sampling_ratio={self.neg_sampling_ratio:g}, key={self.rule.key:#x}, clean={self.clean})")
