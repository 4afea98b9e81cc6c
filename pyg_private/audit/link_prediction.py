r"""One-run canary audit of the edge-level private link predictor
(:func:`~pyg_private.models.run_link_prediction`), with the attack that reads its scores.

The game is the one-run audit of Steinke, Nasr and Jagielski ("Privacy Auditing with One (1)
Training Run", NeurIPS 2023; :mod:`~pyg_private.audit.one_run`), played with canary **edges**
as in :mod:`~pyg_private.audit.canary_edges`, but with canaries chosen **inside one part** of the
split:

1. :func:`sample_part_canaries` draws :math:`m` node pairs that hash into the chosen part of the
   keyed split (:class:`~pyg_private.utils.pair_sampling.LinkSplitRule`, drawn with
   :func:`~pyg_private.utils.sample_pairs` restricted to that part) and are no edges of the graph
   (by default a matching: no node in two canaries, so that one canary does not move another's
   neighbourhood).
2. Each canary is inserted as an undirected edge with probability 1/2 (independent fair coins,
   drawn after the canaries).
3. The graph is split with the **same key** (:class:`~pyg_private.transforms.PrivateLinkSplit`), so
   every canary stays in its part: inserting one changes that part only, which is exactly the
   edge-level neighbour relation under which the pipeline claims :math:`(\epsilon, \delta)`
   (the three releases compose in parallel: McSherry, "Privacy Integrated Queries", SIGMOD 2009).
   The audit checks that the inserted canaries landed in the part and the others did not.
4. The whole pipeline runs **once**.
5. **The attack** scores each canary by the released predictor's score of the pair,
   ``result.model.score(x, message_edges, canaries)``: with the candidate that the run's private
   selection chose, and with the DP-SGD decoder by name (``"private"``). Both are post-processing
   of the releases: the model scores from its cached encoder release (the message graph is passed
   only as the key of that cache; the audit checks that the ledger did not move, i.e. that no new
   release was made).
6. :func:`~pyg_private.audit.one_run.one_run_audit` turns each attack's scores and the coins into a
   lower bound on :math:`\epsilon` at the claimed :math:`\delta`. The two attacks share the
   confidence (Bonferroni: each at :math:`1 - (1 - c)/2`), so their maximum, ``epsilon``, holds at
   the stated confidence :math:`c`.

**What the attack can see.** A ``message`` canary moves the encoder's release: the hop
:math:`\mathbf X^{(1)}_v` of an endpoint then sums the other endpoint's features, which raises the
cosine channels of the pair that the decoder reads, and it adds one to both endpoints' released
degrees (the decoder's degree channels). A ``train`` canary moves only the DP-SGD
decoder, through one supervision example among hundreds: a small decoder (the default
``"channels"`` decoder has at most 10 parameters) cannot memorise one pair, so even the non-private run
leaves the train-part attack near chance; a decoder with the capacity to memorise (a wide node
MLP trained long, without privacy) does show it. The ``val`` part (read only by the selection's
index) and the ``test`` part (read by nothing that is released) are not offered.

**Reading the bound.** It is a *lower* bound (at its confidence, over the coins and the
pipeline's noise): a value above the claimed :math:`\epsilon` shows the implementation or its
analysis wrong; a small value shows only that this attack could not tell. With :math:`m` canaries
the bound cannot exceed ``ceiling`` (a perfect attack's bound), which the :math:`2 m \delta` term of
the theorem caps. ``seed`` fixes the canaries, the coins and the pipeline's noise (a reproducible
experiment); the statistics treat that noise as fresh, which holds as long as the seed is not
chosen after seeing results.

**User-item graphs.** A ``HeteroData`` with one edge type between two node types (users and
items) is audited as :class:`~pyg_private.transforms.PrivateLinkSplit` splits it: as the union
graph of :func:`~pyg_private.transforms.private_link_split.bipartite_union` (destination ``j`` is
node ``n_s + j``, block-diagonal features), with ``split_num_src = n_s``; a homogeneous ``Data``
carrying ``split_num_src`` (or given ``num_src=``) is taken as such a union. The canaries are then
user-item pairs (``u < n_s <= v``, drawn with :func:`~pyg_private.utils.sample_pairs`'s ``num_src``;
a matching holds at most :math:`\min(n_s, n_d)` of them), since an interaction is the unit of the
guarantee and a same-side pair is no possible edge of the graph; everything else (the coins, the
split under the same key, the one run, the two attacks, the bound) is the homogeneous audit's.

**Why no LinkTeller variant.** LinkTeller (Wu, Yang, Zhang and Li, "LinkTeller: Recovering Private
Edges from Graph Neural Networks via Influence Analysis", IEEE S&P 2022;
:mod:`~pyg_private.audit.linkteller`) queries an inference API on the secret graph with perturbed
features and measures how much a node's features move another node's output. The released
predictor is no such API: its encoder output is a release over the message graph, made once and
cached; scoring with perturbed features misses the cache and is a **new, charged release** with
fresh noise (:math:`1 + |\text{nodes}|` releases in all, whose composition, not the pipeline's
:math:`\epsilon`, the attack would be measured against; and the fresh noise, divided by the small
perturbation, swamps the finite difference). A pair score also reads both endpoints' own features
directly, so the influence of :math:`\mathbf x_u` on the score of :math:`(u, v)` is non-zero for every
pair, edge or not. And the encoder puts the feature rows on the unit sphere, so LinkTeller's
scaling perturbation moves the release only through the principal components' centring (exactly
nothing without it). Against the non-private pipeline (no noise, nothing charged) LinkTeller on the
embedding does recover message edges, but that audits no claimed guarantee.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from numbers import Integral
from typing import Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..models.link_prediction import LinkPredictionConfig, LinkPredictionResult, run_link_prediction
from ..transforms import PrivateLinkSplit
from ..transforms.private_link_split import bipartite_union
from ..utils.graph_validation import declared_num_nodes, simple_undirected
from ..utils.pair_sampling import PARTS, LinkSplitRule, sample_pairs
from .canary_edges import _check_edge_index, _default_guesses, _pair_keys, insert_edges
from .empirical_epsilon import _check_confidence
from .one_run import OneRunAudit, one_run_audit

__all__ = ["LinkPredictionAudit", "sample_part_canaries", "link_prediction_canary_audit"]

#: The parts whose canaries the audit inserts: the encoder's and the decoder's.
AUDITED_PARTS = ("message", "train")
_MAX_ROUNDS = 1000


@dataclass(frozen=True)
class LinkPredictionAudit:
    r"""The result of :func:`link_prediction_canary_audit`.

    Attributes:
        part (str): the part the canaries were drawn from (``"message"`` or ``"train"``).
        claimed_epsilon (float): the :math:`\epsilon` the run claimed (``inf``: the non-private pipeline).
        delta (float): the claimed :math:`\delta`, at which the bounds are stated.
        epsilon (float): the larger of the two attacks' bounds; it holds with probability at least
            ``confidence`` (each attack was evaluated at :math:`1 - (1 - c)/2`).
        confidence (float): :math:`c`.
        candidate (str): the candidate the run's private selection chose.
        selected (OneRunAudit): the attack that scores with the selected candidate.
        private (OneRunAudit): the attack that scores with the DP-SGD decoder (``"private"``).
        selected_scores, private_scores (Tensor): ``[m]`` float64 scores of the two attacks.
        pairs (Tensor): ``[2, m]`` canaries (``u < v``), all in ``part``.
        included (Tensor): ``[m]`` bool: the coins (canary inserted).
        result (LinkPredictionResult): the run (its ``accountant`` holds its events and
            nothing else; its ``model`` the released predictors).
        num_src (int, optional): on a user-item graph, the source side's node count :math:`n_s` of
            the union graph (every canary joins ``[0, n_s)`` to ``[n_s, n)``); ``None`` otherwise.

    **Ground truth, returned knowingly.** ``pairs`` with ``included`` are the auditor's own data (the
    canaries and the coins), kept because the attack is scored against them; ``result`` holds the
    run's evaluations on private edges. None of this is released data: store a result with the
    private data and publish its summary fields (``epsilon``, ``auc``, the counts) instead.
    """

    part: str
    claimed_epsilon: float
    delta: float
    epsilon: float
    confidence: float
    candidate: str
    selected: OneRunAudit
    private: OneRunAudit
    selected_scores: Tensor
    private_scores: Tensor
    pairs: Tensor
    included: Tensor
    result: LinkPredictionResult
    num_src: Optional[int] = None

    @property
    def contradicts_claim(self) -> bool:
        """Whether the bound exceeds the claimed epsilon (the implementation or its analysis is wrong
        at the stated confidence)."""
        return self.epsilon > self.claimed_epsilon


def _check_count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 1:
        raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
    return int(value)


def _check_num_src(num_src, n: int) -> int:
    if isinstance(num_src, bool) or not isinstance(num_src, Integral) or not 0 < int(num_src) < n:
        raise ValueError(f"`num_src` must be an int in [1, {n - 1}] (the source side of the user-item graph: both "
                         f"sides non-empty); got {num_src!r}")
    return int(num_src)


def sample_part_canaries(edge_index: Tensor, num_nodes: int, num_canaries: int, *, part: Union[str, int], split,
                         disjoint: bool = True, generator: Optional[torch.Generator] = None,
                         num_src: Optional[int] = None) -> Tensor:
    r"""Draw ``num_canaries`` distinct node pairs of one part of a keyed split that are no edges.

    Uniform pairs of the part are drawn with :func:`~pyg_private.utils.sample_pairs` (``part``,
    ``split``: a :class:`~pyg_private.utils.pair_sampling.LinkSplitRule`, a
    :class:`~pyg_private.transforms.PrivateLinkSplit` or its output data) and kept in the order
    drawn, dropping the edges of ``edge_index`` (read as undirected), repeats and, with
    ``disjoint=True``, every pair that shares a node with one kept before (a greedy matching: one
    canary then never changes another's neighbourhood). Since a pair's part depends on the pair,
    the node count and the key only, an inserted canary falls in ``part`` of any split made with
    the same rule.

    **User-item graphs** (``num_src``): the nodes ``[0, num_src)`` are one side and
    ``[num_src, num_nodes)`` the other, and the canaries are pairs across the sides
    (``u < num_src <= v``), drawn with ``sample_pairs(..., num_src=num_src)``; a matching then holds
    at most ``min(num_src, num_nodes - num_src)`` canaries.

    Args:
        edge_index (Tensor): ``[2, E]`` edges of the graph.
        num_nodes (int): :math:`n`.
        num_canaries (int): :math:`m \ge 1` (``2 m <= n`` when ``disjoint``; with ``num_src``,
            ``m <= min(num_src, n - num_src)``).
        part (str or int): a name of :data:`~pyg_private.utils.pair_sampling.PARTS` or its index.
        split: the rule (see above).
        disjoint (bool): draw a matching. (default: :obj:`True`)
        generator (torch.Generator, optional): for reproducible draws.
        num_src (int, optional): a user-item graph's source side (see above).

    Returns:
        Tensor: ``[2, m]`` long, ``u < v`` (with ``num_src``: ``u < num_src <= v``).

    Raises:
        ValueError: when not enough such pairs were found, or cannot be.
    """
    edge_index, n = _check_edge_index(edge_index, num_nodes)
    m = _check_count(num_canaries, "num_canaries")
    rule = LinkSplitRule.of(split)
    rule.index(part)
    if num_src is not None:
        num_src = _check_num_src(num_src, n)
        side = min(num_src, n - num_src)
        if disjoint and m > side:
            raise ValueError(f"cannot draw {m} disjoint canaries across the sides of {num_src} and {n - num_src} "
                             f"nodes (each canary takes one node of each side: need num_canaries <= {side}); use "
                             "fewer canaries or disjoint=False")
        if m > num_src * (n - num_src):
            raise ValueError(f"cannot draw {m} distinct canaries among the {num_src * (n - num_src)} pairs across the "
                             "sides")
    elif disjoint and 2 * m > n:
        raise ValueError(f"cannot draw {m} disjoint canaries on {n} nodes (need 2 * num_canaries <= num_nodes)")
    edges = set(_pair_keys(edge_index.cpu(), n).tolist())
    taken: set[int] = set()
    used: set[int] = set()
    kept: list[tuple[int, int]] = []
    for _ in range(_MAX_ROUNDS):
        draw = sample_pairs(n, 4 * (m - len(kept)) + 64, part=part, split=rule, generator=generator,
                            num_src=num_src)
        for u, v in draw.cpu().t().tolist():
            k = u * n + v
            if k in edges or k in taken or (disjoint and (u in used or v in used)):
                continue
            taken.add(k)
            if disjoint:
                used.update((u, v))
            kept.append((u, v))
            if len(kept) == m:
                return torch.tensor(kept, dtype=torch.long, device=edge_index.device).t().contiguous()
    where = "" if num_src is None else " across the sides"
    raise ValueError(f"found only {len(kept)} of {m} canaries among the non-edges{where} of part {part!r}: use fewer "
                     "canaries" + (" or disjoint=False" if disjoint else ""))


def _keys(pairs: Tensor, n: int) -> Tensor:
    return torch.minimum(pairs[0], pairs[1]) * n + torch.maximum(pairs[0], pairs[1])


def _audited_graph(data: Union[Data, HeteroData], num_src: Optional[int],
                   clean: bool) -> tuple[Data, Tensor, int, Optional[int]]:
    """The graph the audit inserts its canaries into and splits, as
    :class:`~pyg_private.transforms.PrivateLinkSplit` would see it: a user-item ``HeteroData`` as
    its :func:`~pyg_private.transforms.private_link_split.bipartite_union` with ``split_num_src``,
    a homogeneous ``Data`` as it is (``split_num_src`` set to ``num_src`` when given). Returns the
    graph, its undirected simple ``edge_index``, the node count and the source side's size
    (``None``: a homogeneous graph)."""
    if isinstance(data, HeteroData):
        union, n_s = bipartite_union(data, clean=clean)
        if num_src is not None and _check_num_src(num_src, union.num_nodes) != n_s:
            raise ValueError(f"`num_src` = {num_src} differs from the HeteroData's source side ({n_s} nodes of type "
                             f"{union.node_types[0]!r}); leave it out, it is read off the HeteroData")
        data, num_src = union, n_s
    elif not isinstance(data, Data):
        raise TypeError(f"`data` must be a torch_geometric Data or a user-item HeteroData; got {type(data).__name__}")
    else:
        carried = getattr(data, "split_num_src", None)
        if num_src is None:
            num_src = carried
        elif carried is not None and carried != num_src:
            raise ValueError(f"`num_src` = {num_src!r} differs from `data.split_num_src` = {carried!r}")
    n = declared_num_nodes(data)
    if n is None:
        raise ValueError("`data` must declare its number of nodes (features `x` or `num_nodes`)")
    base, n = simple_undirected(data.edge_index, n, symmetrize=clean, name="data.edge_index")
    if num_src is None:
        return data, base, n, None
    num_src = _check_num_src(num_src, n)
    same = int(((base[0] < num_src) == (base[1] < num_src)).sum()) // 2
    if same:
        raise ValueError(f"{same} edge(s) of `data` join two nodes of the same side of the user-item graph (num_src = "
                         f"{num_src}): a user-item graph has interactions across its sides only")
    data = copy.copy(data)
    data.split_num_src = num_src
    return data, base, n, num_src


def link_prediction_canary_audit(data: Union[Data, HeteroData], config: LinkPredictionConfig, *, epsilon: float,
                                 delta: float, num_canaries: int, part: str = "message", key: int,
                                 seed: Optional[int] = None,
                                 shares: Sequence[float] = (0.7, 0.1, 0.1, 0.1), num_edges: Optional[int] = None,
                                 neg_sampling_ratio: float = 1.0, disjoint: bool = True,
                                 guesses: Union[int, Sequence[int], None] = None, confidence: float = 0.95,
                                 clean: bool = False, accountant=None,
                                 num_src: Optional[int] = None) -> LinkPredictionAudit:
    r"""One-run canary audit of :func:`~pyg_private.models.run_link_prediction` (see the module notes).

    Draws ``num_canaries`` non-edges of ``part`` (:func:`sample_part_canaries`), inserts each with
    probability 1/2, splits the graph with :class:`~pyg_private.transforms.PrivateLinkSplit` under
    ``key`` and ``shares``, runs the pipeline once at ``(epsilon, delta)`` (``math.inf``: the
    non-private pipeline), scores the canaries with the selected candidate and with the private
    decoder, and returns both attacks' one-run lower bounds at ``delta``.

    On a user-item graph (a ``HeteroData`` with one edge type between two node types, or a
    homogeneous ``Data`` with ``split_num_src`` or ``num_src``) the canaries are user-item pairs and
    the graph is split as ``PrivateLinkSplit`` splits it (see the module notes).

    Args:
        data (Data or HeteroData): the graph (features ``x``, an undirected simple ``edge_index``;
            ``clean=True`` makes it so first, as ``PrivateLinkSplit(clean=True)`` does), or a user-item
            ``HeteroData`` (one edge type, plus its ``T.ToUndirected`` reverse if any; features ``x``
            on both node types).
        config (LinkPredictionConfig): the pipeline's settings.
        epsilon, delta (float): the claimed guarantee (per edge) of the run.
        num_canaries (int): :math:`m`.
        part (str): ``"message"`` (the encoder's part) or ``"train"`` (the decoder's).
        key (int): the split's hash key.
        seed (int, optional): draws the canaries, the coins and the evaluation negatives, and seeds
            the pipeline (a seed of its own, drawn from the same generator); ``None``: fresh randomness.
        shares: the split's shares (message, train, val, test). (default: PrivateLinkSplit's)
        num_edges (int, optional): the declared public edge count of the run (default: the number of
            undirected edges of ``data``, which the auditor knows; the canaries add about ``m / 2``).
        neg_sampling_ratio (float): evaluation negatives per validation and test edge.
        disjoint (bool): canaries form a matching. (default: :obj:`True`)
        guesses (int or sequence of int, optional): the numbers of guesses of the one-run bound
            (default: ``m // 10, m // 4, m // 2, m``, as :func:`~pyg_private.audit.canary_edge_audit`).
        confidence (float): :math:`c`, shared by the two attacks.
        clean (bool): clean the graph first instead of raising.
        accountant (PrivacyAccountant, optional): the run's ledger (a fresh one when ``None``).
        num_src (int, optional): a homogeneous ``data`` is the union of a user-item graph whose nodes
            ``[0, num_src)`` are one side (default: ``data.split_num_src`` if set). Read off a
            ``HeteroData``.

    Returns:
        :class:`LinkPredictionAudit`.

    Raises:
        ValueError: on bad input (among others: a ``HeteroData`` with several edge types, ``num_src``
            out of range, an edge within one side, more canaries than the sides can hold), before
            anything is run or charged.
    """
    shares = tuple(shares)
    if len(shares) != len(PARTS):
        raise ValueError(f"`shares` must be four shares (message, train, val, test); got {shares!r}")
    if part not in AUDITED_PARTS:
        raise ValueError(f"`part` must be one of {AUDITED_PARTS}; got {part!r} (the 'val' edges are read only by the "
                         "selection's index and the 'test' edges by no release, so their scores show nothing)")
    if not isinstance(config, LinkPredictionConfig):
        raise TypeError(f"`config` must be a LinkPredictionConfig; got {type(config).__name__}")
    if not isinstance(data, (Data, HeteroData)):
        raise TypeError(f"`data` must be a torch_geometric Data or a user-item HeteroData; got {type(data).__name__}")
    m = _check_count(num_canaries, "num_canaries")
    if m < 2:
        raise ValueError("the audit needs at least 2 canaries")
    c = _check_confidence(confidence)
    if not isinstance(key, Integral) or isinstance(key, bool):
        raise TypeError(f"`key` must be an int; got {type(key).__name__}")
    data, base, n, num_src = _audited_graph(data, num_src, clean)
    splitter = PrivateLinkSplit(num_val=shares[2], num_test=shares[3], num_message=shares[0], num_train=shares[1],
                                neg_sampling_ratio=neg_sampling_ratio, key=int(key))
    rule = splitter.rule
    if seed is None:
        gen = torch.Generator()
        gen.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    else:
        gen = torch.Generator().manual_seed(int(seed))
    # the canaries first, then the coins, then the seeds of the split's negatives and of the pipeline
    pairs = sample_part_canaries(base, n, m, part=part, split=rule, disjoint=disjoint, generator=gen,
                                 num_src=num_src)
    included = torch.rand(m, generator=gen, dtype=torch.float64) < 0.5
    if bool(included.all()) or not bool(included.any()):
        raise ValueError("the coins included all canaries or none: draw again (another seed) or use more canaries")
    split_seed, run_seed = (int(s) for s in torch.randint(0, 2 ** 62, (2,), generator=gen))
    splitter.generator = torch.Generator().manual_seed(split_seed)
    graph = copy.copy(data)
    graph.edge_index = insert_edges(base, pairs[:, included], n)
    train, val, test = splitter(graph)

    # every inserted canary is in its part, and no other canary is an edge there
    found = train.edge_index[:, train.edge_index[0] < train.edge_index[1]] if part == "message" \
        else train.edge_label_index
    present = torch.isin(_keys(pairs, n), _keys(found.long(), n))
    if not torch.equal(present, included) or not bool((rule.part_of(pairs, n) == PARTS.index(part)).all()):
        raise RuntimeError(f"the split did not put exactly the inserted canaries into the {part!r} part")
    if getattr(train, "split_num_src", None) != num_src:
        raise RuntimeError("the split lost the user-item graph's sides (`split_num_src`)")

    declared = base.size(1) // 2 if num_edges is None else num_edges
    result = run_link_prediction(train, val, test, config, epsilon=epsilon, delta=delta, num_edges=declared,
                                 accountant=accountant, seed=None if seed is None else run_seed)
    acct = result.accountant
    events = len(acct)
    model = result.model
    selected_scores = model.score(train.x, train.edge_index, pairs).detach().double().cpu()
    private_scores = model.score(train.x, train.edge_index, pairs, "private").detach().double().cpu()
    if len(acct) != events:
        raise RuntimeError("scoring the canaries made a new release: the attack must read the run's releases only")

    rs = _default_guesses(m) if guesses is None else guesses
    each = 1.0 - (1.0 - c) / 2.0
    selected = one_run_audit(selected_scores, included, guesses=rs, delta=result.delta, confidence=each)
    private = one_run_audit(private_scores, included, guesses=rs, delta=result.delta, confidence=each)
    return LinkPredictionAudit(part=part, claimed_epsilon=result.epsilon, delta=result.delta,
                               epsilon=max(selected.epsilon, private.epsilon), confidence=c,
                               candidate=result.candidate, selected=selected, private=private,
                               selected_scores=selected_scores, private_scores=private_scores, pairs=pairs.cpu(),
                               included=included, result=result, num_src=num_src)
