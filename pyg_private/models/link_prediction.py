r"""Edge-level private link prediction: one split of all node pairs, three releases composed in
parallel, and a private selection among the predictors on validation.

Under edge-level DP (neighbouring graphs differ in one undirected edge; the nodes and their
features are public) an edge is both a message and a label. :class:`~pyg_private.transforms.PrivateLinkSplit`
splits every possible pair into ``message``, ``train`` (supervision), ``val`` and ``test`` by a keyed
hash that does not read the graph, so the releases below, each of which reads the edges of one part
only, compose in **parallel** (McSherry, "Privacy Integrated Queries", SIGMOD 2009, Thm. 2; one
group, :meth:`~pyg_private.PrivacyAccountant.parallel`), each part announced with its edges so that
the accountant checks their disjointness before anything is charged:

1. part ``message``, the **encoder release**: the public features (reduced to ``feature_dim``
   principal components, a function of the features alone) put on unit rows and aggregated over
   the message edges by :class:`~pyg_private.nn.GAPAggregation` (``K`` hops, all released,
   :math:`\mu_f = \sqrt K/\sigma_f`-GDP), and, with the ``"channels"`` decoder, every node's
   **degree** in the message graph released by :class:`~pyg_private.nn.ProGAPAggregation` on a
   column of ones (:math:`\mathbf A \mathbf 1 + \mathbf Z`, sensitivity :math:`\sqrt 2`,
   :math:`\mu_d = 1/\sigma_d`-GDP). The part's budget :math:`\mu` (the GDP parameter of
   :math:`(\epsilon, \delta)`) is split as :math:`\mu_d^2 = s\mu^2` and :math:`\mu_f^2 = (1 - s)\mu^2`
   with :math:`s` = ``degree_share``, so that the two releases together cost exactly
   :math:`\mu`-GDP, hence :math:`(\epsilon, \delta)`, for this part alone;
2. part ``train``, the **decoder**: a node model :math:`f` on the released hops (a PyG ``MLP``) and
   the pair score :math:`f(z_u)^\top f(z_v)` (dot product, as PyG's ``examples/link_pred.py``) or
   :math:`\mathrm{MLP}(f(z_u) \odot f(z_v))` (Hadamard), trained by DP-SGD with one supervision edge
   per example and negatives drawn without reading the graph
   (:mod:`~pyg_private.models.link_training`), the noise multiplier calibrated
   (:func:`~pyg_private.accounting.dp_sgd_noise_multiplier`) so that this part alone costs
   :math:`(\epsilon, \delta)`; one :func:`~pyg_private.accounting.subsampled_gaussian_event` of all
   the steps, registered before the first noisy step;
3. part ``val``, the **selection** among the candidate predictors: the private decoder, the cosine of
   the released embeddings (post-processing of part 1), the **feature cosine** (raw features: reads
   no edge) and, optionally, an encoder-free decoder (the same DP-SGD run on :math:`\mathbf X^{(0)}`
   only, trained jointly: the two decoders' gradients of an example are clipped together, one
   mechanism). Each candidate counts the validation edges it scores above its own threshold, the
   ``1 - selection_fpr`` quantile of its scores on ``selection_pairs`` public random pairs of the
   validation part; adding one validation edge raises each count by 0 or 1, and report noisy max
   with :math:`\mathrm{Lap}(1/\epsilon)` (Dwork and Roth 2014, Claim 3.9) releases the index of the
   best, :math:`\epsilon`-DP, charged to this part.

The path therefore costs the maximum over the parts, :math:`(\epsilon, \delta)` on unit ``"edge"``.
The **test** edges are only evaluated: the validation and test ROC-AUC, Hits@K and MRR in the result
are evaluations on private edges, not releases (as the accuracies of the node-classification
recipes); only the selected index, the encoder's release and the decoder's weights are private releases.

**The number of supervision edges is private.** DP-SGD's Poisson rate, step count and averaging must
not depend on it. They come from ``num_edges``, a **declared public** number of undirected edges of
the graph (a published figure, or a count released privately beforehand and charged elsewhere;
reading ``data.edge_index.size(1) // 2`` leaks it): the expected number of supervision examples is
:math:`s_t \cdot` ``num_edges`` for the split's supervision share :math:`s_t`. It only sets the
rate, the number of steps and the scale of the averaged gradient, so it needs no check (Poisson
sampling is private at its rate whatever the true count; a poor estimate only costs utility).
*Why not a noisy count*: a count released in the same part would then set the rate and the step
count of the DP-SGD run that follows, and the tight (Rényi or PLD) composition the ledger applies
is proven for mechanisms whose parameters are fixed in advance; with parameters chosen from an
earlier release only basic composition, or a privacy filter, is proven, and the ledger would
overstate nothing but could understate. A declared figure keeps every parameter fixed before any
release, so the ledger's figure is exact.

**Refused before any charge**, with the reason: splits not made by ``PrivateLinkSplit`` (no rule
stored, different rules, or a pair of a part that does not hash into it: every part is recomputed
and checked), message and supervision sets that overlap, a ``train_data`` with negatives (labels 0)
or an example that is not one edge (a duplicate, or both directions of an edge), duplicate
validation edges (a count would move by 2), different features or message graphs across the three
``Data``. Negatives passed in ``val_data``/``test_data`` serve the evaluation only (the selection
draws its own public random pairs), so negatives filtered against the graph, as
``RandomLinkSplit``'s are, would bias the reported metrics but not the guarantee; they must hash
into their part, and that is checked.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..accounting import PrivacyAccountant, compose, subsampled_gaussian_event
from ..accounting.gdp import gdp_mu
from ..accounting.mechanism_events import gdp_event, pure_dp_event
from ..accounting.validation import check_delta
from ..metrics import hits_at_k, mean_reciprocal_rank, roc_auc
from ..nn import GAPAggregation, ProGAPAggregation
from ..nn._call_checks import reject_sampled_batch
from ..utils.graph_validation import simple_undirected
from ..utils.pair_sampling import PARTS, LinkSplitRule, sample_pairs
from .link_training import LinkDecoder, fit_link_decoders, report_noisy_max

__all__ = ["LinkPredictionConfig", "LinkPredictionResult", "LinkPredictionModel", "run_link_prediction"]

#: The candidates of the selection, in the order ties are broken.
CANDIDATES = ("private", "release cosine", "encoder-free", "feature cosine")

#: ``LinkPredictionConfig.degree_share`` by default with the ``"channels"`` decoder (see its notes)
DEGREE_SHARE = 0.25


@dataclass(frozen=True)
class LinkPredictionConfig:
    r"""The settings of :func:`run_link_prediction` (all public).

    Args:
        K: hops of the encoder's release (GAP).
        feature_dim: the public features are reduced to this many principal components before the
            release (``None``, or at least the number of features: the raw features). Fewer columns
            mean fewer decoder parameters for DP-SGD to noise.
        hidden, layers: width and depth of the decoder's node MLP (``layers=1``: one linear map).
        decoder: ``"dot"`` (:math:`f(z_u)^\top f(z_v)`) or ``"hadamard"``
            (:math:`\mathrm{MLP}(f(z_u) \odot f(z_v))`).
        num_negatives: negatives drawn for each example (with its positive, clipped together).
        epochs, batch_size, lr, max_grad_norm: DP-SGD's epochs (passes over the expected number of
            examples), expected batch, Adam's learning rate and the clipping norm.
        selection_fpr, selection_pairs: each candidate's threshold is the ``1 - selection_fpr``
            quantile of its scores on ``selection_pairs`` random pairs of the validation part.
        encoder_free_candidate: also train (in the same DP-SGD run) a decoder on the features alone
            (with ``"channels"``: the cosines of the principal components and of the raw features).
        hits: the K of the reported Hits@K.
        degree_share: the share :math:`s` of the message part's budget (of :math:`\mu^2`, the squared
            GDP parameter) spent on releasing every node's degree, which the ``"channels"`` decoder
            reads as two more channels (:class:`~pyg_private.models.link_training.LinkDecoder`);
            the hops get the rest. ``None`` (default): 0.25 with the ``"channels"`` decoder, 0 with
            the others, which read no degree (a share above 0 is refused there).

    The defaults keep the decoder small, because DP-SGD's noise grows with the number of parameters
    and the supervision part is small (10% of the pairs): the ``"channels"`` decoder (10 parameters
    for ``K = 2``) with a learning rate of 0.1 on a 32-component release. Measured before the degree
    channels (one seed, test ROC-AUC at epsilon 1 / 4 / 8): on Amazon Computers 0.834 / 0.925 / -
    against 0.717 for the feature cosine (the dot-product decoder: lower); on Cora 0.780 / 0.803 /
    0.829 against the cosine's 0.810 (the dot product 0.628 / 0.713 / 0.780, a two-layer Hadamard
    MLP 0.55 to 0.59 at 8).

    The degree release (``degree_share``) was chosen on Facebook Page-Page and Amazon Computers
    (one split, shares 0.15 / 0.25 / 0.35 against none, epsilon 1 and 4; the documentation's link
    prediction page has the figures): 0.25 was within 0.002 of the best share everywhere, and it
    also raised Cora and Coauthor CS over no degree release.
    """

    K: int = 2
    feature_dim: Optional[int] = 32
    hidden: int = 32
    layers: int = 1
    decoder: Literal["hadamard", "dot", "channels"] = "channels"
    num_negatives: int = 3
    epochs: int = 30
    batch_size: int = 256
    lr: float = 0.1
    max_grad_norm: float = 1.0
    selection_fpr: float = 0.05
    selection_pairs: int = 10_000
    encoder_free_candidate: bool = False
    hits: tuple[int, ...] = (20, 50, 100)
    degree_share: Optional[float] = None

    def __post_init__(self) -> None:
        for name in ("K", "hidden", "layers", "epochs", "batch_size", "selection_pairs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive int; got {value!r}")
        if self.feature_dim is not None and (isinstance(self.feature_dim, bool) or not isinstance(self.feature_dim, int)
                                             or self.feature_dim < 1):
            raise ValueError(f"`feature_dim` must be a positive int or None; got {self.feature_dim!r}")
        if self.decoder not in ("hadamard", "dot", "channels"):
            raise ValueError(f"`decoder` must be 'hadamard', 'dot' or 'channels'; got {self.decoder!r}")
        if isinstance(self.num_negatives, bool) or not isinstance(self.num_negatives, int) or self.num_negatives < 0:
            raise ValueError(f"`num_negatives` must be an int >= 0; got {self.num_negatives!r}")
        if not (self.lr > 0 and self.max_grad_norm > 0):
            raise ValueError("`lr` and `max_grad_norm` must be > 0")
        if not 0.0 < self.selection_fpr < 1.0:
            raise ValueError(f"`selection_fpr` must lie in (0, 1); got {self.selection_fpr!r}")
        if not self.hits or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.hits):
            raise ValueError(f"`hits` must be positive ints; got {self.hits!r}")
        if self.degree_share is not None:
            share = self.degree_share
            if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share < 1.0:
                raise ValueError(f"`degree_share` must be a number in [0, 1) or None; got {share!r}")
            if share > 0 and self.decoder != "channels":
                raise ValueError(f"`degree_share={share!r}` releases degrees that only the 'channels' decoder reads; "
                                 f"the {self.decoder!r} decoder would waste that budget (set degree_share=0)")

    def degree_fraction(self) -> float:
        """The share of the message part's :math:`\\mu^2` spent on the degrees (``degree_share``
        resolved: ``None`` is :data:`DEGREE_SHARE` with the ``"channels"`` decoder, 0 otherwise)."""
        if self.degree_share is None:
            return DEGREE_SHARE if self.decoder == "channels" else 0.0
        return float(self.degree_share)


@dataclass
class LinkPredictionModel:
    """The released predictors, for scoring pairs of a graph of the user's choice.

    ``layer`` is the encoder's :class:`~pyg_private.nn.GAPAggregation` and ``degree_layer`` the
    degrees' :class:`~pyg_private.nn.ProGAPAggregation` (``None`` when ``degree_share`` is 0); both
    cache their release: :meth:`embed` and :meth:`degrees` on the same message graph and features
    cost nothing; on any other graph they are **new releases**, charged to the run's accountant.
    ``decoders`` are the DP-SGD-trained decoders (``"private"``, and ``"encoder-free"`` when
    trained), ``projection`` the public principal components ``(mean, components)`` of the features
    (``None``: raw features). It holds released or public data only.
    """

    config: LinkPredictionConfig
    candidate: str
    layer: Optional[GAPAggregation]
    decoders: dict = field(default_factory=dict)
    projection: Optional[tuple[Tensor, Tensor]] = None
    degree_layer: Optional[ProGAPAggregation] = None

    def features(self, x: Tensor) -> Tensor:
        """The encoder's input: the public features projected (post-processing of public data)."""
        x = x.detach().float()
        if self.projection is None:
            return x
        mean, components = self.projection
        return (x - mean) @ components

    @torch.no_grad()
    def embed(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """The released hops :math:`[\\mathbf X^{(0)} \\| \\cdots \\| \\mathbf X^{(K)}]` over ``edge_index``."""
        return self.layer(self.features(x), edge_index).float()

    @torch.no_grad()
    def degrees(self, x: Tensor, edge_index: Tensor) -> Optional[Tensor]:
        """The released noisy degrees over ``edge_index`` (``None`` without a degree release)."""
        if self.degree_layer is None:
            return None
        return _released_degrees(self.degree_layer, x.size(0), edge_index, x.device)

    @torch.no_grad()
    def score(self, x: Tensor, edge_index: Tensor, pairs: Tensor, candidate: Optional[str] = None) -> Tensor:
        """Scores of ``pairs`` ``[2, P]`` by ``candidate`` (default: the selected one)."""
        which = self.candidate if candidate is None else candidate
        if which == "feature cosine":
            return _cosine(x.detach().float(), pairs)
        z = self.embed(x, edge_index)
        if which == "release cosine":
            return _cosine(z, pairs)
        if which not in self.decoders:
            raise ValueError(f"no decoder {which!r}; have {sorted(self.decoders)}")
        decoder = self.decoders[which]
        degree = self.degrees(x, edge_index) if getattr(decoder, "degree", None) is not None else None
        zd = _decoder_input(z, x.detach().float(), getattr(decoder, "raw", None), degree)
        return decoder(zd[pairs[0]], zd[pairs[1]])


@dataclass
class LinkPredictionResult:
    """What one run measured.

    **What a result holds.** Only what was released or is public, plus the evaluation the run was
    asked for: the configuration, the cost (``accountant``, public records of the events), ``model``
    (the released predictors) and ``candidate`` (the selection's released index, by name); ``val``
    and ``test`` (ROC-AUC ``"auc"``, ``"hits@K"``, ``"mrr"`` of the selected candidate) and
    ``candidates`` (the same for every candidate) are evaluations on private edges that the
    guarantee does not cover. Never the graph, the features, a noise-free aggregation, per-example
    gradients or a generator (tested by ``tests/test_saved_state_privacy.py``).
    """

    config: LinkPredictionConfig
    epsilon: float
    delta: float
    val: dict
    test: dict
    candidate: str
    candidates: dict = field(default_factory=dict, repr=False)
    encoder_noise_multiplier: float = 0.0
    degree_noise_multiplier: float = 0.0
    noise_multiplier: float = 0.0
    sample_rate: float = 1.0
    steps: int = 0
    accountant: Optional[PrivacyAccountant] = field(default=None, repr=False)
    model: Optional[LinkPredictionModel] = field(default=None, repr=False)


class _Inputs(NamedTuple):
    x: Tensor
    num_nodes: int
    rule: LinkSplitRule
    message: Tensor  # edge_index, both directions
    train: Tensor  # [2, E_t], u < v
    val_pairs: Tensor
    val_labels: Tensor
    test_pairs: Tensor
    test_labels: Tensor
    num_src: Optional[int] = None  # a user-item graph: the nodes [0, num_src) are one side


def _keys(pairs: Tensor, n: int) -> Tensor:
    return torch.minimum(pairs[0], pairs[1]) * n + torch.maximum(pairs[0], pairs[1])


def _labelled(data: Data, name: str, n: int) -> tuple[Tensor, Tensor]:
    pairs, labels = getattr(data, "edge_label_index", None), getattr(data, "edge_label", None)
    if not isinstance(pairs, Tensor) or pairs.dim() != 2 or pairs.size(0) != 2 or pairs.is_floating_point():
        raise ValueError(f"`{name}.edge_label_index` must be a [2, P] integer tensor of node pairs")
    if not isinstance(labels, Tensor) or labels.shape != (pairs.size(1),):
        raise ValueError(f"`{name}.edge_label` must hold one label per pair of edge_label_index")
    pairs = pairs.long()
    if pairs.numel() and (int(pairs.min()) < 0 or int(pairs.max()) >= n):
        raise ValueError(f"`{name}.edge_label_index` holds node ids outside [0, {n})")
    if bool((pairs[0] == pairs[1]).any()):
        raise ValueError(f"`{name}.edge_label_index` holds self-loops, which are no pairs of the split")
    if not bool(((labels == 0) | (labels == 1)).all()):
        raise ValueError(f"`{name}.edge_label` must be 0 or 1 (binary link labels)")
    return pairs, labels.bool()


def _single_edges(pairs: Tensor, n: int, what: str) -> None:
    keys = _keys(pairs, n)
    if torch.unique(keys).numel() != keys.numel():
        raise ValueError(f"{what} lists an edge twice (a duplicate, or both directions): every example must be one "
                         "edge, else one edge added or removed changes two examples (twice the sensitivity)")


def _in_part(rule: LinkSplitRule, pairs: Tensor, n: int, part: str, what: str) -> None:
    if pairs.numel() == 0:
        return
    found = rule.part_of(pairs, n)
    wrong = int((found != PARTS.index(part)).sum())
    if wrong:
        raise ValueError(f"{wrong} pair(s) of {what} do not hash into the split's {part!r} part: these data were not "
                         "split by PrivateLinkSplit (or were changed since). Parallel composition needs every part "
                         "fixed by the hash rule, which does not read the graph; split with PrivateLinkSplit")


def _across(pairs: Tensor, num_src: Optional[int], what: str) -> None:
    """On a user-item graph every pair joins the two sides (``u < num_src <= v`` in either order)."""
    if num_src is None or pairs.numel() == 0:
        return
    lo, hi = torch.minimum(pairs[0], pairs[1]), torch.maximum(pairs[0], pairs[1])
    bad = int(((lo >= num_src) | (hi < num_src)).sum())
    if bad:
        raise ValueError(f"{bad} pair(s) of {what} join two nodes of the same side of the user-item graph "
                         f"(split_num_src = {num_src}): these data were not split by PrivateLinkSplit")


def check_link_inputs(train_data: Data, val_data: Data, test_data: Data) -> _Inputs:
    """Validate the three outputs of :class:`~pyg_private.transforms.PrivateLinkSplit` (see the
    module notes for what is refused), before anything is charged."""
    datas = {"train_data": train_data, "val_data": val_data, "test_data": test_data}
    for name, d in datas.items():
        if isinstance(d, HeteroData):
            raise ValueError(f"`{name}` is a HeteroData: link prediction takes the homogeneous outputs of "
                             "PrivateLinkSplit (which maps a user-item HeteroData to one graph over both node types)")
        if not isinstance(d, Data):
            raise TypeError(f"`{name}` must be a torch_geometric Data; got {type(d).__name__}")
        reject_sampled_batch("run_link_prediction", d)
    rules = {}
    for name, d in datas.items():
        try:
            rules[name] = LinkSplitRule.of(d)
        except (ValueError, TypeError):
            raise ValueError(f"`{name}` carries no split rule (`split_key`, `split_shares`): the splits must be made "
                             "by PrivateLinkSplit, whose parts are fixed without reading the graph (RandomLinkSplit "
                             "splits the existing edges, which is not parallel composition)") from None
    rule = rules["train_data"]
    if any(r != rule for r in rules.values()):
        raise ValueError("train_data, val_data and test_data carry different split rules: split once with "
                         "PrivateLinkSplit and pass its three outputs")
    x = train_data.x
    if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point() or not bool(torch.isfinite(x).all()):
        raise ValueError("`train_data.x` must be a finite [N, F] floating-point feature matrix")
    for name in ("val_data", "test_data"):
        other = getattr(datas[name], "x", None)
        if not isinstance(other, Tensor) or other.shape != x.shape or not torch.equal(other, x):
            raise ValueError(f"`{name}.x` differs from `train_data.x`: pass the three outputs of one split")
    n = x.size(0)
    message = train_data.edge_index
    for name in ("val_data", "test_data"):
        ei = getattr(datas[name], "edge_index", None)
        if not isinstance(ei, Tensor) or ei.shape != message.shape or not torch.equal(ei, message):
            raise ValueError(f"`{name}.edge_index` differs from `train_data.edge_index` (the message edges): pass "
                             "the three outputs of one split")
    num_src = getattr(train_data, "split_num_src", None)
    for name in ("val_data", "test_data"):
        if getattr(datas[name], "split_num_src", None) != num_src:
            raise ValueError(f"`{name}.split_num_src` differs from `train_data`'s: pass the three outputs of one split")
    if num_src is not None and (isinstance(num_src, bool) or not isinstance(num_src, int) or not 0 < num_src < n):
        raise ValueError(f"`split_num_src` must be an int in [1, {n - 1}] (the source side of a user-item graph); "
                         f"got {num_src!r}")
    message, n = simple_undirected(message, n, name="train_data.edge_index")
    msg = message[:, message[0] < message[1]]
    train_pos, train_labels = _labelled(train_data, "train_data", n)
    if not bool(train_labels.all()):
        raise ValueError(f"`train_data.edge_label_index` holds {int((~train_labels).sum())} negative pair(s) (label "
                         "0): the supervision examples are the supervision edges only; negatives are drawn during "
                         "training without reading the graph (set add_negative_train_samples-like options off)")
    _single_edges(train_pos, n, "`train_data.edge_label_index`")
    overlap = int(torch.isin(_keys(train_pos, n), _keys(msg, n)).sum())
    if overlap:
        raise ValueError(f"the message edges and the supervision edges overlap ({overlap} edge(s)): an edge that is "
                         "both a message and a label is read by two releases, which do not compose in parallel")
    _in_part(rule, msg, n, "message", "`train_data.edge_index` (the message edges)")
    _in_part(rule, train_pos, n, "train", "`train_data.edge_label_index` (the supervision edges)")
    _across(msg, num_src, "`train_data.edge_index` (the message edges)")
    _across(train_pos, num_src, "`train_data.edge_label_index` (the supervision edges)")
    labelled = {}
    for name, part in (("val_data", "val"), ("test_data", "test")):
        pairs, labels = _labelled(datas[name], name, n)
        _across(pairs, num_src, f"`{name}.edge_label_index`")
        _single_edges(pairs[:, labels], n, f"the positives of `{name}`")
        _in_part(rule, pairs[:, labels], n, part, f"the positives of `{name}`")
        _in_part(rule, pairs[:, ~labels], n, part, f"the negatives of `{name}`")
        labelled[name] = (pairs, labels)
    return _Inputs(x, n, rule, message, train_pos, *labelled["val_data"], *labelled["test_data"], num_src)


def _decoder_input(z: Tensor, x: Tensor, raw: Optional[tuple[int, int]], degree: Optional[Tensor] = None) -> Tensor:
    """The decoders' node features: the release ``z``, the raw public features on unit rows
    after it when a decoder reads their cosine (``raw``, its columns), and last the degree channel
    (:func:`_degree_channel` of the released degrees) when given."""
    parts = [z] if raw is None else [z, F.normalize(x.float(), dim=-1)]
    if degree is not None:
        parts.append(_degree_channel(degree).unsqueeze(-1).to(z.dtype))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _degree_channel(degree: Tensor) -> Tensor:
    """The decoder's per-node degree channel: the square root of the released degree (negative
    noisy values clipped to 0), divided by its mean over the nodes so that it is about 1 whatever
    the graph (post-processing of the release)."""
    root = degree.float().clamp(min=0.0).sqrt()
    mean = root.mean()
    return root / mean if float(mean) > 0 else root


def _released_degrees(layer: ProGAPAggregation, n: int, edge_index: Tensor, device: torch.device) -> Tensor:
    """Every node's noisy degree: the release of :math:`\\mathbf A \\mathbf 1 + \\mathbf Z` (unit rows)."""
    ones = torch.ones(n, 1, dtype=torch.float64, device=device)
    return layer(ones, edge_index)[:, 1].float()


def _encoder_noise(eps: float, delta: float, K: int, share: float, acct: PrivacyAccountant) -> tuple[float, float]:
    """``(sigma_f, sigma_d)``: the hops' and the degrees' noise multipliers whose two events
    together cost at most ``(eps, delta)`` by the ledger's own composition (``sigma_d`` is 0 without
    a degree release)."""
    mu = gdp_mu(epsilon=eps, delta=delta)
    if share == 0.0:
        return math.sqrt(K) / mu, 0.0
    sigma_f, sigma_d = math.sqrt(K / (1.0 - share)) / mu, 1.0 / (math.sqrt(share) * mu)

    def cost(a: float, b: float) -> float:
        events = [gdp_event(unit="edge", mu=math.sqrt(K) / a, name="hops"), gdp_event(unit="edge", mu=1.0 / b,
                                                                                     name="degrees")]
        return compose(events).epsilon(delta, conversion=acct.conversion, use_pld=acct.pld)

    while cost(sigma_f, sigma_d) > eps:  # the two events exactly as charged
        sigma_f, sigma_d = sigma_f * (1.0 + 1e-12), sigma_d * (1.0 + 1e-12)
    return sigma_f, sigma_d


def _cosine(h: Tensor, pairs: Tensor) -> Tensor:
    return F.cosine_similarity(h[pairs[0]], h[pairs[1]], dim=-1)


def _projection(x: Tensor, dim: Optional[int]) -> Optional[tuple[Tensor, Tensor]]:
    """The top ``dim`` principal components of the public features (deterministic: the randomised
    solver seeded in a forked generator), or ``None`` to keep the raw features."""
    if dim is None or dim >= x.size(1):
        return None
    x = x.detach().float()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        _, _, v = torch.pca_lowrank(x, q=dim, center=True, niter=4)
    return x.mean(0), v[:, :dim].contiguous()


def _metrics(scores: Tensor, labels: Tensor, hits: tuple[int, ...]) -> dict:
    pos, neg = scores[labels], scores[~labels]
    out = {"auc": roc_auc(scores, labels) if pos.numel() and neg.numel() else math.nan}
    for k in hits:
        out[f"hits@{k}"] = hits_at_k(pos, neg, k)
    out["mrr"] = mean_reciprocal_rank(pos, neg)
    return out


def _group_name(acct: PrivacyAccountant) -> str:
    taken, name, i = acct.parallel_groups, "link_prediction", 1
    while name in taken:
        i += 1
        name = f"link_prediction-{i}"
    return name


def _dp_sgd_plan(rule: LinkSplitRule, num_edges: int, config: LinkPredictionConfig) -> tuple[float, int, float]:
    """``(sample rate, steps, expected batch)`` from public quantities only: the expected number of
    supervision examples ``s_t * num_edges``, as :func:`~pyg_private.models.fit_dp_sgd` plans them."""
    expected = max(1, round(rule.shares[PARTS.index("train")] * num_edges))
    per_epoch = math.ceil(expected / min(config.batch_size, expected))
    rate = 1.0 / per_epoch
    return rate, config.epochs * per_epoch, expected * rate


def _calibrate(epsilon: float, delta: float, rate: float, steps: int, acct: PrivacyAccountant) -> float:
    """The noise multiplier whose run of ``steps`` steps, alone, costs at most ``(epsilon, delta)``
    by the ledger's own composition of the event that will be charged."""
    from ..accounting.opacus_bridge import dp_sgd_noise_multiplier  # imports Opacus: on the first calibration

    scratch = PrivacyAccountant(conversion=acct.conversion, pld=acct.pld)
    sigma = dp_sgd_noise_multiplier(scratch, target_epsilon=epsilon, target_delta=delta, sample_rate=rate,
                                    steps=steps, unit="edge", name="link_decoder")

    def cost(s: float) -> float:
        event = subsampled_gaussian_event(noise_multiplier=s, sample_rate=rate, steps=steps, unit="edge")
        return compose([event]).epsilon(delta, conversion=acct.conversion, use_pld=acct.pld)

    while cost(sigma) > epsilon:  # the one event of all steps, exactly as charged
        sigma *= 1.0 + 1e-9
    return sigma


def run_link_prediction(train_data: Data, val_data: Data, test_data: Data, config: LinkPredictionConfig, *,
                        epsilon: float, delta: float, num_edges: Optional[int] = None,
                        accountant: Optional[PrivacyAccountant] = None,
                        seed: Optional[int] = None) -> LinkPredictionResult:
    """Train and evaluate the edge-level private link predictor (see the module notes).

    ``train_data, val_data, test_data`` are the outputs of
    :class:`~pyg_private.transforms.PrivateLinkSplit`. The run costs ``(epsilon, delta)`` on unit
    ``"edge"`` (the maximum over three parts of one parallel group), charged to ``accountant`` (a
    fresh one when ``None``); ``epsilon = math.inf`` runs the same pipeline without noise and charges
    nothing (the non-private reference). ``num_edges`` is the **declared public** number of undirected
    edges of the graph that sets DP-SGD's rate and steps (required when private; see the module notes).
    ``seed`` fixes the initialisation and every random draw (reproducible experiments; it voids the
    guarantee). Everything is checked before anything is charged.
    """
    if not isinstance(config, LinkPredictionConfig):
        raise TypeError(f"`config` must be a LinkPredictionConfig; got {type(config).__name__}")
    eps = float(epsilon)
    if math.isnan(eps) or eps <= 0:
        raise ValueError(f"`epsilon` must be > 0 (or math.inf); got {epsilon!r}")
    private = math.isfinite(eps)
    delta = check_delta(delta)
    if private and num_edges is None:
        raise ValueError("`num_edges` (a declared public number of undirected edges of the graph) is required: it "
                         "sets DP-SGD's sampling rate and steps, which must not depend on the private edge count")
    if num_edges is not None and (isinstance(num_edges, bool) or not isinstance(num_edges, int) or num_edges < 1):
        raise ValueError(f"`num_edges` must be a positive int; got {num_edges!r}")
    if accountant is not None and not isinstance(accountant, PrivacyAccountant):
        raise TypeError(f"`accountant` must be a PrivacyAccountant; got {type(accountant).__name__}")
    inputs = check_link_inputs(train_data, val_data, test_data)
    acct = PrivacyAccountant() if accountant is None else accountant
    n, rule, x = inputs.num_nodes, inputs.rule, inputs.x.float()
    gens = [None] * 5 if seed is None else [torch.Generator().manual_seed(int(seed) + i) for i in range(5)]
    projection = _projection(x, config.feature_dim)
    x0 = x if projection is None else (x - projection[0]) @ projection[1]
    d = x0.size(1)
    if private:
        rate, steps, expected = _dp_sgd_plan(rule, num_edges, config)
    else:  # the reference reads the count (nothing is released)
        count = max(1, inputs.train.size(1) if num_edges is None else round(rule.shares[1] * num_edges))
        per_epoch = math.ceil(count / min(config.batch_size, count))
        rate, steps, expected = 1.0 / per_epoch, config.epochs * per_epoch, count / per_epoch
    forked = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    with forked:
        if seed is not None:
            torch.manual_seed(int(seed))
        width = (config.K + 1) * d
        raw = (width, width + x.size(1)) if config.decoder == "channels" and projection is not None else None
        share = config.degree_fraction()
        degree_column = (width if raw is None else raw[1]) if share > 0 else None
        decoders = {"private": LinkDecoder(width, config.hidden, config.layers, config.decoder,
                                           columns=(0, width), blocks=config.K + 1, raw=raw, degree=degree_column)}
        if config.encoder_free_candidate:
            decoders["encoder-free"] = LinkDecoder(d, config.hidden, config.layers, config.decoder, columns=(0, d),
                                                   raw=raw)
    names = [c for c in CANDIDATES if c != "encoder-free" or config.encoder_free_candidate]
    # public random pairs of the validation part: the candidates' thresholds (drawn before any release)
    reference = sample_pairs(n, config.selection_pairs, part="val", split=rule, generator=gens[2],
                             num_src=inputs.num_src)
    sigma_f, sigma_d = _encoder_noise(eps, delta, config.K, share, acct) if private else (0.0, 0.0)
    layer = GAPAggregation(config.K, noise_multiplier=sigma_f, accountant=acct if private else None, cached=True,
                           generator=gens[0], name="link_encoder")
    degree_layer = ProGAPAggregation(level="edge", noise_multiplier=sigma_d, accountant=acct if private else None,
                                     cached=True, generator=gens[4], name="link_degrees") if share > 0 else None
    sigma = _calibrate(eps, delta, rate, steps, acct) if private else 0.0
    sgd_event = subsampled_gaussian_event(noise_multiplier=sigma, sample_rate=rate, steps=steps, unit="edge",
                                          name="link_decoder", params={"examples": "supervision edges",
                                                                        "num_negatives": config.num_negatives}) \
        if private else None
    val_pos = inputs.val_pairs[:, inputs.val_labels]
    group = acct.parallel(_group_name(acct)) if private else contextlib.nullcontext(None)
    with group as part:
        # 1. the encoder release, on the message edges
        with part("message", edges=inputs.message) if private else contextlib.nullcontext():
            z = layer(x0, inputs.message).float()
            degree = None if degree_layer is None else _released_degrees(degree_layer, n, inputs.message, x.device)
        zd = _decoder_input(z, x, raw, degree)
        # 2. the decoders, DP-SGD on the supervision edges (all steps charged before the first)
        with part("train", edges=inputs.train) if private else contextlib.nullcontext():
            if private:
                acct.register(sgd_event)
            fit_link_decoders(list(decoders.values()), zd, inputs.train, rule=rule, sample_rate=rate, steps=steps,
                              expected_batch=expected, noise_multiplier=sigma,
                              max_grad_norm=config.max_grad_norm if private else None,
                              num_negatives=config.num_negatives, lr=config.lr, generator=gens[1],
                              num_src=inputs.num_src)
        scorers = {"private": lambda p: decoders["private"](zd[p[0]], zd[p[1]]),
                   "release cosine": lambda p: _cosine(z, p),
                   "encoder-free": lambda p: decoders["encoder-free"](zd[p[0]], zd[p[1]]),
                   "feature cosine": lambda p: _cosine(x, p)}
        # 3. the selection on the validation edges: report noisy max over monotone counts
        with torch.no_grad():
            counts = []
            for name in names:
                ref = scorers[name](reference)
                k = max(1, math.ceil(config.selection_fpr * ref.numel()))
                threshold = torch.topk(ref, k).values[-1]
                counts.append(int((scorers[name](val_pos) > threshold).sum()) if val_pos.numel() else 0)
        counts_t = torch.tensor(counts, dtype=torch.long)
        with part("val", edges=val_pos) if private else contextlib.nullcontext():
            if private:
                acct.register(pure_dp_event(unit="edge", epsilon=eps, name="link_selection",
                                            mechanism="report_noisy_max",
                                            params={"candidates": len(names), "fpr": config.selection_fpr}))
                chosen = names[report_noisy_max(counts_t, eps, generator=gens[3])]
            else:
                chosen = names[int(torch.argmax(counts_t))]
    del counts, counts_t  # noise-free counts of the validation edges: never kept
    # evaluation (not a release): every candidate on the validation and test pairs
    evaluated = {}
    with torch.no_grad():
        for name in names:
            evaluated[name] = {
                "val": _metrics(scorers[name](inputs.val_pairs), inputs.val_labels, config.hits),
                "test": _metrics(scorers[name](inputs.test_pairs), inputs.test_labels, config.hits)}
    for dec in decoders.values():
        dec.eval()
    model = LinkPredictionModel(config, chosen, layer, decoders, projection, degree_layer)
    return LinkPredictionResult(config=config, epsilon=eps, delta=delta, val=evaluated[chosen]["val"],
                                test=evaluated[chosen]["test"], candidate=chosen, candidates=evaluated,
                                encoder_noise_multiplier=layer.noise_multiplier,
                                degree_noise_multiplier=0.0 if degree_layer is None else degree_layer.noise_multiplier,
                                noise_multiplier=sigma,
                                sample_rate=rate, steps=steps, accountant=acct, model=model)
