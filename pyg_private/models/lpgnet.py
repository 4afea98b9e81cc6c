r"""The LPGNet node-classification recipe: MLPs that read noisy counts of their neighbours' classes.

Kolluri, Baluta, Hooi and Saxena, `"LPGNet: Link Private Graph Networks for Node Classification"
<https://arxiv.org/abs/2205.03105>`_ (CCS 2022), Sec. 4 and Algorithm 1. The graph enters only
through **class counts**: for every node, how many of its neighbours belong to each class (their
"cluster degree vectors"), released once per stage with Laplace noise. With ``K`` stages
(``config.K``):

* stage 0 is the plain PyG MLP on the node features
  (:func:`~pyg_private.models.edge_free_mlp.fit_edge_free_mlp`), which reads no edge;
* before stage :math:`k \ge 1`, every node gets a class row :math:`\mathbf{r}_u` (``rows``): its
  one-hot label if its label is known (``row_labels``: the training nodes, and by default the
  validation nodes too), otherwise stage :math:`k-1`'s class probabilities (``"soft"``) or one-hot
  prediction (``"predicted"``); the release is
  :math:`\tilde{\mathbf{C}}_k = \mathbf{W}_k\mathbf{R}_k + \mathbf{Z}_k`, :math:`\mathbf{Z}_k` i.i.d.
  :math:`\mathrm{Lap}(b)` (:class:`~pyg_private.mechanisms.LaplaceMechanism`, safe sampler), where
  :math:`\mathbf{W}_k` is the adjacency matrix :math:`\mathbf{A}` whose entry :math:`(v, u)` for each
  edge is the share of its budget that goes to :math:`v` (1 with ``edge_split="even"``, the paper's
  :math:`\mathbf{A}\mathbf{R}_k`; see "Uncertainty split" below);
* stage :math:`k` is an MLP (the same as stage 0) on the releases so far,
  :math:`\mathbf{F}_k = [\tilde{\mathbf{C}}_1 \,\|\, \mathbf{P}_1 \,\|\, \cdots \,\|\,
  \tilde{\mathbf{C}}_k \,\|\, \mathbf{P}_k]`, where :math:`\mathbf{P}_k` is
  :math:`\tilde{\mathbf{C}}_k` clamped at zero and divided by its row sum (at least 1): the
  neighbours' class shares, post-processing of the release. Next to them it reads either the
  features, :math:`[\mathbf{X} \,\|\, \mathbf{F}_k]` (``head="features"``, as in the paper's
  Algorithm 1), or stage :math:`k-1`'s **out-of-fold** log-probabilities,
  :math:`[\log \hat{\mathbf{Y}}_{k-1} \,\|\, \mathbf{F}_k]` (``head="stacked"``: stacking, see
  :func:`~pyg_private.models.out_of_fold_log_probs`; a training node's scores come from a model fitted without it,
  so the stage learns how far to trust stage :math:`k-1` against the counts). With ``head="both"``
  (the default) each stage fits both and keeps the one of better validation accuracy.

The prediction is the stage with the best **validation** accuracy (``select_stage``; stage 0, the
edge-free MLP, is always a candidate), read on public data at edge level. A validation node's own
label never enters its own inputs (only its neighbours' counts), so the selection stays a fair
held-out estimate with ``row_labels="train+val"``.

**Accounting.** The rows of every release are computed from public features and labels and from
earlier releases only, so adding or removing one undirected edge changes the count query by
:math:`\ell_1` norm at most 2 (:mod:`~pyg_private.utils.class_counts`; with ``sources``, too); the Laplace mechanism of
scale :math:`b` is then :math:`2/b`-DP (pure), one event per stage on unit ``"edge"``, registered
before its noise. One :math:`b` serves every stage and is calibrated on the accountant's own
composition (the events' privacy loss distributions), so the run spends at most
``(epsilon, delta)`` (:func:`lpgnet_noise_scale`). The whole plan is checked against the
accountant's budget before the first charge. Edge level only: at node level the features and labels
are private and a node's removal changes the counts of all its neighbours.

**Why Laplace.** The counts of one node are a vector of ``C`` (number of classes) coordinates, and
one edge moves two of them (one at each end) by one. For so few coordinates the Laplace
mechanism's :math:`\ell_1` calibration beats the Gaussian's :math:`\ell_2` one: at edge
:math:`\epsilon = 1`, :math:`\delta = 1/|E|` on Facebook Page-Page the Laplace noise has standard
deviation :math:`2\sqrt 2 = 2.8` per count, the Gaussian of the same budget (:math:`\mu = 0.26`)
5.4; at :math:`\epsilon = 4`, 0.71 against 1.57.

**Defaults** (:class:`LPGNetConfig`): one stage (``K = 1``; the paper tunes the number of stages),
the known labels of the training and validation nodes as their rows (public at edge level; the paper
uses the predictions everywhere) and the previous stage's class probabilities elsewhere (the paper:
its one-hot predictions), both heads with 5 folds, each edge's budget split by the ends' uncertainty
(``edge_split="uncertainty"``; the paper splits it evenly), and the edge-free MLP's settings for every
stage. Each choice was measured across the offline graphs before it became the default
(``benchmarks/recipes_across_datasets.py --sweep``).

**Sources** (``sources=True``, off by default). An edge between two counted nodes moves two
counts by one, so each end reads it with half of the budget. The validation nodes and part of the
training nodes (chosen at random, without the graph) can give their share to their neighbours
instead: they get no counts of their own and are counted twice, the same sensitivity for a
signal twice as strong at the nodes that read it. The stages are then fitted, stopped and selected on
the training nodes that keep their counts (the readers).

**Uncertainty split** (``edge_split="uncertainty"``, the default). The same idea with a
continuous claim: each edge's budget is split between its ends in proportion to their uncertainty
under the previous stage, :math:`1 - \max_c p_c` (out of fold on the training nodes; public at edge
level), so a node the features already classify gives most of each edge to its less certain
neighbours; the sensitivity is still 2 for any public claims. It combines with ``sources``. With
fewer than ``folds`` training nodes to score out of fold, the split is even (as ``head="both"`` then
keeps the features head only).

**Pair contrasts** (``release="pairs"``, off by default). With ``C`` counts per node, the difference
of the counts of a node's two likeliest classes, which decides between them, carries the noise of
two Laplace draws. Each node can instead receive :math:`\lceil C/2 \rceil` numbers: the count of its
most likely class under the previous stage (out of fold, as the claims) minus that of its second,
the 3rd minus the 4th, and so on (:func:`~pyg_private.utils.class_counts.ranked_pair_contrasts`). Each
class enters one number with coefficient :math:`\pm 1`, so the sensitivity and the noise scale stay
the same and the deciding difference carries half the noise variance; the counts' total and the
comparisons across pairs are lost. It pays at small epsilon when the previous stage ranks the true
class among its first two (Facebook Page-Page at epsilon 1), and costs where it does not (many
classes, a weak edge-free stage) or where the noise is small.

``epsilon = inf`` runs the same pipeline without noise (the non-private reference).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from ..accounting import PrivacyAccountant, PrivacyEvent, Unit, calibrate_noise, check_plan, laplace_event
from ..accounting.hyperparameter_tuning import TrialDistribution, trial_curve
from ..accounting.validation import check_delta, check_epsilon, check_positive_int
from ..mechanisms.laplace import LaplaceMechanism
from ..nn._call_checks import reject_sampled_batch
from ..utils import simple_undirected
from ..utils.class_counts import CLASS_COUNTS_EDGE_L1_SENSITIVITY, neighbour_class_counts, ranked_pair_contrasts
from .edge_free_mlp import EDGE_FREE_MLP, fit_edge_free_mlp
from .node_training import accuracy
from .recipe_inputs import prepare_node_data, trains_with_autograd
from .selection import check_charged_search, select_on_validation, select_privately
from .stacking import out_of_fold_log_probs

__all__ = ["LPGNetConfig", "LPGNetResult", "LPGNetModel", "lpgnet_noise_scale", "run_lpgnet", "search_lpgnet"]


@dataclass(frozen=True)
class LPGNetConfig:
    r"""Settings of :func:`run_lpgnet`.

    Args:
        K: the number of class-count releases (stages after the edge-free one), 1 to 5.
        rows: the class row of a node whose label is not used (see ``row_labels``): ``"soft"`` (the
            previous stage's class probabilities), ``"predicted"`` (its one-hot prediction) or
            ``"train"`` (a zero row: only the neighbours of known label are counted).
        row_labels: the nodes whose row is their one-hot label: ``"train+val"`` (the nodes of
            ``train_mask`` and ``val_mask``) or ``"train"``. Labels are public at edge level.
        head: what every stage ``k >= 1`` reads next to the releases: ``"features"`` (the node
            features, as in the paper), ``"stacked"`` (stage ``k - 1``'s out-of-fold
            log-probabilities) or ``"both"`` (fit both, keep the better on validation; only the
            features with fewer than ``folds`` training nodes).
        folds: the number of folds of the out-of-fold scores (``head`` ``"stacked"`` or ``"both"``).
        sources: spend each edge's budget on the end that reads the counts. The validation nodes and
            a random ``1 - reader_share`` of the training nodes become *sources*: they get no counts
            of their own, and their neighbours count them twice (the l1 sensitivity stays 2, see
            :mod:`~pyg_private.utils.class_counts`). The other training nodes, the *readers*,
            fit every stage ``k >= 1`` (80%) and stop it early and select the stage (20%, in place of
            the validation nodes, so ``val_accuracy`` is measured on them); stage 0 is fitted without
            the latter. ``False``: every node gets its counts and counts once.
        reader_share: with ``sources``, the share of the training nodes that keep their counts.
        edge_split: how each edge's budget is split between its two ends. ``"even"``: each end counts
            the other once (with ``sources``: twice when the other is a source). ``"uncertainty"``: in
            proportion to each end's *claim*, its uncertainty under the previous stage,
            :math:`1 - \max_c p_c` (at least ``1e-4``; out of fold on the nodes that stage was fitted
            on, so the readers' claims are distributed like the test nodes'; 0 for the sources): a
            node the features already classify gives most of each edge to its less certain
            neighbours (the default). The l1 sensitivity stays 2 (see
            :mod:`~pyg_private.utils.class_counts`). With fewer than ``folds`` training nodes that fit
            the stages, the split is even.
        release: what each node receives. ``"counts"``: its ``C`` class counts (the paper).
            ``"pairs"``: its :math:`\lceil C/2 \rceil` *ranked pair contrasts*, the count of its most
            likely class under the previous stage minus that of its second, the 3rd minus the 4th, ...
            (for odd ``C`` the last class's count; ranked by the out-of-fold scores like the claims):
            the same l1 sensitivity of 2 (see :mod:`~pyg_private.utils.class_counts`), so the difference
            that decides between a node's two likeliest classes carries half the noise variance, at the
            price of the counts' total and of the comparisons across pairs. Meant for small epsilon;
            with fewer than ``folds`` training nodes that fit the stages, the counts are released.
        hidden, dropout, lr, weight_decay, epochs: every stage's MLP (a 2-layer PyG ``MLP``, full-batch
            Adam, the epoch of best validation accuracy kept); the defaults are the edge-free MLP's.
        select_stage: predict with the stage of best validation accuracy (stage 0, the edge-free MLP,
            included); ``False``: the last stage.
    """

    K: int = 1
    rows: Literal["soft", "predicted", "train"] = "soft"
    row_labels: Literal["train+val", "train"] = "train+val"
    head: Literal["both", "features", "stacked"] = "both"
    folds: int = 5
    sources: bool = False
    reader_share: float = 0.5
    edge_split: Literal["even", "uncertainty"] = "uncertainty"
    release: Literal["counts", "pairs"] = "counts"
    hidden: int = EDGE_FREE_MLP["hidden"]
    dropout: float = EDGE_FREE_MLP["dropout"]
    lr: float = EDGE_FREE_MLP["lr"]
    weight_decay: float = EDGE_FREE_MLP["weight_decay"]
    epochs: int = EDGE_FREE_MLP["epochs"]
    select_stage: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.K, bool) or not isinstance(self.K, int) or not 1 <= self.K <= 5:
            raise ValueError(f"`K` must be an integer in [1, 5]; got {self.K!r}")
        if self.rows not in ("predicted", "soft", "train"):
            raise ValueError(f"`rows` must be 'predicted', 'soft' or 'train'; got {self.rows!r}")
        if self.row_labels not in ("train+val", "train"):
            raise ValueError(f"`row_labels` must be 'train+val' or 'train'; got {self.row_labels!r}")
        if self.head not in ("both", "features", "stacked"):
            raise ValueError(f"`head` must be 'both', 'features' or 'stacked'; got {self.head!r}")
        if isinstance(self.folds, bool) or not isinstance(self.folds, int) or self.folds < 2:
            raise ValueError(f"`folds` must be an integer >= 2; got {self.folds!r}")
        if not isinstance(self.sources, bool):
            raise ValueError(f"`sources` must be a bool; got {self.sources!r}")
        share = self.reader_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < share <= 1.0:
            raise ValueError(f"`reader_share` must lie in (0, 1]; got {share!r}")
        if self.edge_split not in ("even", "uncertainty"):
            raise ValueError(f"`edge_split` must be 'even' or 'uncertainty'; got {self.edge_split!r}")
        if self.release not in ("counts", "pairs"):
            raise ValueError(f"`release` must be 'counts' or 'pairs'; got {self.release!r}")
        for name in ("hidden", "epochs"):
            check_positive_int(getattr(self, name), name)
        if isinstance(self.dropout, bool) or not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"`dropout` must lie in [0, 1); got {self.dropout!r}")
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
                    value < 0 or (name == "lr" and value == 0):
                raise ValueError(f"`{name}` must be a finite number {'> 0' if name == 'lr' else '>= 0'}; "
                                 f"got {value!r}")
        if not isinstance(self.select_stage, bool):
            raise ValueError(f"`select_stage` must be a bool; got {self.select_stage!r}")

    def mlp_settings(self) -> dict:
        """The keyword arguments of every stage's :func:`~pyg_private.models.fit_edge_free_mlp`."""
        return {"hidden": self.hidden, "dropout": float(self.dropout), "lr": float(self.lr),
                "weight_decay": float(self.weight_decay), "epochs": self.epochs}


_HEADS = ("features", "stacked")


def _planned_events(scale: float, K: int) -> list[PrivacyEvent]:
    """The events of a run whose releases have Laplace scale ``scale`` (before the grid's inflation,
    which the mechanism calibrates away: each release keeps the ratio ``2 / scale``)."""
    return [laplace_event(unit=Unit.EDGE, sensitivity=CLASS_COUNTS_EDGE_L1_SENSITIVITY, scale=scale,
                          name=f"lpgnet_counts_{k}") for k in range(1, K + 1)]


def lpgnet_noise_scale(*, epsilon: float, delta: float, K: int = 1) -> float:
    r"""The Laplace scale :math:`b` of each of the ``K`` count releases (:math:`\ell_1` sensitivity 2)
    so that their composition is ``(epsilon, delta)``-DP at edge level, computed with the accountant's
    own composition (:func:`~pyg_private.accounting.calibrate_noise`: the smallest :math:`b` that
    does not overshoot). For ``K = 1`` it is :math:`2/\epsilon` up to the tiny slack that ``delta``
    allows."""
    eps, d = check_epsilon(epsilon), check_delta(delta)
    K = check_positive_int(K, "K")

    def epsilon_of(scale: float) -> float:
        acct = PrivacyAccountant()
        for event in _planned_events(scale, K):
            acct.register(event)
        return acct.epsilon(Unit.EDGE, d)

    return calibrate_noise(epsilon_of, eps, min_scale=1e-4, max_scale=1e6, rtol=1e-9)


@dataclass
class LPGNetModel:
    """The trained stages and the released counts, for predictions on the nodes of the training graph.

    It holds released or public data only: the stages' MLPs (trained on public features and labels
    and on the releases), the noisy counts of every release, and the out-of-fold log-probabilities
    that the stacked stages read (computed from public features and labels and earlier releases).
    The counts are a release about the training graph, so the model predicts on that graph's nodes
    (``x`` with the same rows); another graph needs a run of its own. With ``config.sources`` the
    sources (validation nodes, training nodes that do not read) have no counts of their own, only
    noise: predict them with ``stage=0``.
    """

    config: LPGNetConfig
    stages: list[nn.Module]
    #: the releases, one float32 matrix each: noisy class counts ``[N, C]``, or noisy pair contrasts
    #: ``[N, ceil(C / 2)]`` with ``config.release="pairs"`` (see ``orders``)
    counts: list[Tensor]
    stage: int
    #: what each stage reads next to the releases: ``"features"`` or ``"stacked"`` (stage 0: ``"features"``)
    heads: list[str] = field(default_factory=list)
    #: the out-of-fold log-probabilities a stacked stage reads (``None`` for the other stages)
    priors: list[Optional[Tensor]] = field(default_factory=list)
    #: per release, the public class ranking of its pair contrasts (``[N, C]``; ``None``: class counts)
    orders: list[Optional[Tensor]] = field(default_factory=list)

    def inputs(self, x: Tensor, stage: int) -> Tensor:
        """Stage ``stage``'s input: the features (or, for a stacked stage, the previous stage's
        out-of-fold log-probabilities), then every earlier release's features (:func:`release_features`)."""
        if x.size(0) != (self.counts[0].size(0) if self.counts else x.size(0)):
            raise ValueError(f"an LPGNet model predicts on the {self.counts[0].size(0)} nodes of its training graph "
                             f"(its counts are a release about that graph); got {x.size(0)} rows")
        stacked = stage < len(self.heads) and self.heads[stage] == "stacked"
        first = self.priors[stage] if stacked else x.float()
        orders = getattr(self, "orders", None) or [None] * len(self.counts)  # models saved before the field
        return torch.cat([first] + [release_features(c, o) for c, o in zip(self.counts[:stage], orders)], dim=-1)

    @torch.no_grad()
    def logits(self, x: Tensor, stage: Optional[int] = None) -> Tensor:
        """Class scores of every node of the training graph from ``stage`` (default: the selected one)."""
        stage = self.stage if stage is None else int(stage)
        if not 0 <= stage < len(self.stages):
            raise ValueError(f"`stage` must lie in [0, {len(self.stages) - 1}]; got {stage!r}")
        return self.stages[stage].eval()(self.inputs(x, stage))


@dataclass
class LPGNetResult:
    """What one run measured: the selected stage's accuracies and every stage's.

    Like every recipe's result it holds only what was released or is public, plus the evaluation the
    run was asked for: the configuration, the cost (``epsilon``, ``accountant``), ``model`` and the
    accuracies on your own splits (statistics of the private data that the guarantee does not
    cover; report them as an evaluation). Never the graph, a noise-free count or a generator
    (tested by ``tests/test_saved_state_privacy.py``).
    """

    config: LPGNetConfig
    epsilon: float
    #: the selected stage's accuracy on the validation nodes (with ``config.sources``: on the
    #: training nodes held out to stop and select the stages)
    val_accuracy: float
    test_accuracy: float
    stage: int = 0
    stage_val_accuracy: tuple[float, ...] = ()
    stage_test_accuracy: tuple[float, ...] = ()
    #: what every stage read next to the releases (``"features"`` or ``"stacked"``)
    stage_heads: tuple[str, ...] = ()
    #: the Laplace scale of each count release (0: no noise), and its standard deviation per count
    noise_scale: float = 0.0
    noise_std: float = 0.0
    accountant: Optional[PrivacyAccountant] = field(default=None, repr=False)
    model: Optional[LPGNetModel] = field(default=None, repr=False)

    @property
    def candidate(self) -> str:
        """``"mlp"`` when the edge-free stage 0 predicts, else ``"stage"``."""
        return "mlp" if self.stage == 0 else "stage"


def count_features(counts: Tensor) -> Tensor:
    """A release's counts and the neighbours' class shares (counts clamped at 0 over their row sum,
    at least 1): post-processing."""
    c = counts.float()
    pos = c.clamp(min=0.0)
    return torch.cat([c, pos / pos.sum(dim=-1, keepdim=True).clamp(min=1.0)], dim=-1)


def pair_contrast_features(contrasts: Tensor, order: Tensor) -> Tensor:
    """A release of ranked pair contrasts (:func:`~pyg_private.utils.class_counts.ranked_pair_contrasts`)
    as ``2 C`` features: in class space (``+t`` on the first class of a pair, ``-t`` on the second, an
    odd last class its count) and in rank space, the same values by rank. Post-processing."""
    n, num_classes = order.shape
    pairs = num_classes // 2
    t = contrasts.float()
    ranked = torch.zeros(n, num_classes, dtype=t.dtype, device=t.device)
    ranked[:, 0:2 * pairs:2], ranked[:, 1:2 * pairs:2] = t[:, :pairs], -t[:, :pairs]
    ranked[:, 2 * pairs:] = t[:, pairs:]
    return torch.cat([torch.zeros_like(ranked).scatter(1, order.to(t.device), ranked), ranked], dim=-1)


def release_features(released: Tensor, order: Optional[Tensor] = None) -> Tensor:
    """What a stage reads of one release: :func:`count_features` of class counts, or
    :func:`pair_contrast_features` when the release holds the pair contrasts of ``order``."""
    return count_features(released) if order is None else pair_contrast_features(released, order)


def class_order(log_probs: Tensor) -> Tensor:
    """Every node's classes from the most to the least likely under ``log_probs`` (``[N, C]`` long;
    ties by class index), the ranking of ``release="pairs"``; public when the scores are."""
    return log_probs.double().sort(dim=-1, descending=True, stable=True).indices


def uncertainty_claims(log_probs: Tensor) -> Tensor:
    """Every node's claim on its edges' budget under ``edge_split="uncertainty"``: ``1 - max p`` of its
    class probabilities (given as log-probabilities), at least ``1e-4``, float64 ``[N]``. Public when the
    scores are (features, labels and earlier releases only)."""
    return (1.0 - log_probs.double().exp().amax(dim=-1)).clamp(min=1e-4)


def _class_rows(config: LPGNetConfig, stage: nn.Module, inputs: Tensor, y: Tensor, labelled: Tensor,
                num_classes: int) -> Tensor:
    """Every node's class row: its one-hot label on the ``labelled`` nodes, the previous stage's
    probabilities or prediction (``config.rows``) elsewhere; computed without reading an edge."""
    rows = torch.zeros(y.numel(), num_classes, dtype=torch.float64, device=inputs.device)
    if config.rows != "train":
        with torch.no_grad():
            scores = stage.eval()(inputs).double()
        rows = F.one_hot(scores.argmax(dim=-1), num_classes).double() if config.rows == "predicted" \
            else scores.softmax(dim=-1)
    rows[labelled] = 0.0
    rows[labelled, y[labelled]] = 1.0
    return rows


def _readers(config: LPGNetConfig, train: Tensor, seed: Optional[int]) -> tuple[Tensor, Tensor]:
    """With ``config.sources``: the training nodes that fit the stages and those that stop and select
    them, drawn at random without the graph (so the sources are public)."""
    idx = train.nonzero().view(-1)
    gen = torch.Generator().manual_seed(seed + 7) if seed is not None else None
    perm = idx[torch.randperm(idx.numel(), generator=gen).to(idx.device)]
    keep = int(round(config.reader_share * idx.numel()))
    held = max(1, keep // 5)
    if keep - held < 1:
        raise ValueError(f"sources=True keeps reader_share={config.reader_share} of {idx.numel()} training nodes: "
                         "at least 2 are needed (one to fit, one to stop and select)")
    fit_nodes, check_nodes = torch.zeros_like(train), torch.zeros_like(train)
    fit_nodes[perm[held:keep]] = True
    check_nodes[perm[:held]] = True
    return fit_nodes, check_nodes


@trains_with_autograd
def run_lpgnet(data: Data, config: Optional[LPGNetConfig] = None, *, epsilon: float, delta: float,
               level: str = "edge", accountant: Optional[PrivacyAccountant] = None, seed: Optional[int] = None,
               num_classes: Optional[int] = None, sampler: str = "safe", clean_graph: bool = False) -> LPGNetResult:
    """Train and evaluate LPGNet on ``data`` (``x``, ``edge_index``, ``y``, ``train_mask``,
    ``val_mask``, ``test_mask``; an undirected simple graph) at edge level.

    ``epsilon = math.inf`` runs without noise. ``seed`` fixes the initialisation and the noise for
    reproducible experiments (it voids the guarantee). The releases are charged to ``accountant``
    (a fresh one when ``None``), returned in the result. ``sampler`` is the Laplace mechanism's
    (``"safe"``: exact noise on a power-of-two grid; ``"float"``: for benchmarks only).
    ``clean_graph`` drops self-loops and merges duplicate and one-directional entries first (see
    :mod:`~pyg_private.models.recipe_inputs` for where that is valid); nodes with ``y < 0`` are
    taken out of the masks with a warning.

    Raises:
        ValueError: a bad argument, ``level="node"``, a graph that is not undirected and simple, or
            ``head="stacked"`` with fewer than ``folds`` training nodes, before any charge.
        PrivacyBudgetExceeded: the run would exceed the accountant's budget, before any charge.
    """
    reject_sampled_batch("run_lpgnet", data)
    config = LPGNetConfig() if config is None else config
    if not isinstance(config, LPGNetConfig):
        raise TypeError(f"`config` must be an LPGNetConfig; got {type(config).__name__}")
    if level != "edge":
        raise ValueError(f"run_lpgnet is an edge-level recipe; got level={level!r} (at node level the features and "
                         "labels are private and one node's removal changes the counts of all its neighbours: use "
                         "run_progap(level='node') or run_caribou(level='node'))")
    data = prepare_node_data(data, recipe="run_lpgnet", clean=clean_graph, level=level)
    private = not (isinstance(epsilon, (int, float)) and math.isinf(epsilon) and epsilon > 0)
    if private:
        epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    if accountant is not None and not isinstance(accountant, PrivacyAccountant):
        raise TypeError(f"`accountant` must be a PrivacyAccountant; got {type(accountant).__name__}")
    x, y = data.x, data.y
    if not isinstance(x, Tensor) or x.dim() != 2 or not torch.isfinite(x.float()).all():
        raise ValueError("`data.x` must be a finite node feature matrix [N, F]")
    n = x.size(0)
    ei, _ = simple_undirected(data.edge_index, n)  # raises on a directed or non-simple graph
    train, val, test = data.train_mask, data.val_mask, data.test_mask
    used = train | val | test
    if num_classes is None:
        num_classes = int(y[used].max()) + 1
    elif isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"`num_classes` must be an integer >= 2; got {num_classes!r}")
    if int(y[used].max()) >= num_classes or int(y[used].min()) < 0:
        raise ValueError(f"`data.y` must hold class indices in [0, num_classes={num_classes}) on the nodes of the "
                         "masks")

    # who fits the stages >= 1 and who stops and selects them; stage 0 is held out on the latter
    fit_nodes, check_nodes = _readers(config, train, seed) if config.sources else (train, val)
    sources = val | (train & ~fit_nodes & ~check_nodes) if config.sources else None
    base = train & ~check_nodes if config.sources else train
    folds_possible = int(fit_nodes.sum()) >= config.folds
    if config.head == "stacked" and not folds_possible:
        raise ValueError(f"head='stacked' needs at least folds={config.folds} training nodes that fit the stages; "
                         f"got {int(fit_nodes.sum())}")
    by_uncertainty = config.edge_split == "uncertainty" and folds_possible  # else an even split
    by_pairs = config.release == "pairs" and folds_possible  # else the class counts
    scale = lpgnet_noise_scale(epsilon=epsilon, delta=delta, K=config.K) if private else 0.0
    acct = PrivacyAccountant() if accountant is None else accountant
    if private:
        check_plan(acct, _planned_events(scale, config.K))
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    sens = CLASS_COUNTS_EDGE_L1_SENSITIVITY  # one Laplace release per stage; built (and checked) before any fit
    mechanisms = [LaplaceMechanism(sens, epsilon=sens / scale, unit=Unit.EDGE, accountant=acct,
                                   name=f"lpgnet_counts_{k}", generator=gen, sampler=sampler)
                  for k in range(1, config.K + 1)] if private else []
    x = x.float()

    def fit(inputs: Tensor, salt: int, mask: Tensor, stop: Tensor) -> nn.Module:
        return fit_edge_free_mlp(inputs, y, mask, stop, num_classes, seed=None if seed is None else seed + salt,
                                 **config.mlp_settings())

    labelled = train | val if config.row_labels == "train+val" else train
    heads = (_HEADS if folds_possible else _HEADS[:1]) if config.head == "both" else (config.head,)
    stages, inputs, chosen_heads, priors = [fit(x, 0, base, val)], [x], ["features"], [None]
    counts: list[Tensor] = []
    orders: list[Optional[Tensor]] = []
    for k in range(1, config.K + 1):
        rows = _class_rows(config, stages[-1], inputs[-1], y, labelled, num_classes)
        prev = inputs[-1]
        prev_nodes, prev_stop = (base, val) if k == 1 else (fit_nodes, check_nodes)

        def previous_out_of_fold() -> Tensor:  # the previous stage refitted on its own nodes without each fold
            return out_of_fold_log_probs(lambda mask, f: fit(prev, 100 * k + 10 + f, mask, prev_stop), prev,
                                         stages[-1], prev_nodes, folds=config.folds,
                                         seed=None if seed is None else seed + k)

        out_of_fold, claims, order = None, None, None
        if by_uncertainty or by_pairs:  # public: features, labels and earlier releases only
            out_of_fold = previous_out_of_fold()
            claims = uncertainty_claims(out_of_fold) if by_uncertainty else None
            order = class_order(out_of_fold) if by_pairs else None
        exact = neighbour_class_counts(rows, ei, n, sources=sources, claims=claims)
        if order is not None:  # a per-node map that does not increase the l1 norm of a change
            exact = ranked_pair_contrasts(exact, order)
        # one Laplace release of l1 sensitivity 2, charged before its noise
        released = mechanisms[k - 1](exact) if private else exact
        del exact
        counts.append(released.float())
        orders.append(order)
        releases = [release_features(c, o) for c, o in zip(counts, orders)]
        candidates = []  # (validation accuracy, head, inputs, prior, model); everything below is post-processing
        for head in heads:
            prior = None
            if head == "stacked":
                prior = previous_out_of_fold() if out_of_fold is None else out_of_fold
            z = torch.cat([x if head == "features" else prior] + releases, dim=-1)
            model = fit(z, k + 1000 * _HEADS.index(head), fit_nodes, check_nodes)  # seeds independent of the other head
            candidates.append((accuracy(model, z, y, check_nodes), head, z, prior, model))
        _, head, z, prior, model = max(candidates, key=lambda c: c[0])  # ties: the first (features)
        stages.append(model)
        inputs.append(z)
        chosen_heads.append(head)
        priors.append(prior)

    vals = tuple(accuracy(s, z, y, check_nodes) for s, z in zip(stages, inputs))
    tests = tuple(accuracy(s, z, y, test) for s, z in zip(stages, inputs))
    chosen = max(range(len(vals)), key=lambda i: (vals[i], -i)) if config.select_stage else config.K
    return LPGNetResult(config=config, epsilon=epsilon, val_accuracy=vals[chosen], test_accuracy=tests[chosen],
                        stage=chosen, stage_val_accuracy=vals, stage_test_accuracy=tests,
                        stage_heads=tuple(chosen_heads), noise_scale=scale, noise_std=math.sqrt(2.0) * scale,
                        accountant=acct, model=LPGNetModel(config, [s.eval() for s in stages], counts, chosen,
                                                           chosen_heads, priors, orders))


def _costliest_trial(grid: Sequence[LPGNetConfig], *, epsilon: float, delta: float) -> list[PrivacyEvent]:
    """The events of the candidate whose composed RDP curve is above every other candidate's at every
    order (each candidate spends ``(epsilon, delta)``; the curves of different ``K`` may cross, and
    then no single trial bound is exact: refused)."""
    costs = [_planned_events(lpgnet_noise_scale(epsilon=epsilon, delta=delta, K=c.K), c.K) for c in grid]
    orders, _ = trial_curve(costs[0])
    curves = [trial_curve(events, orders=orders)[1] for events in costs]
    for events, curve in zip(costs, curves):
        if all(bool((curve >= other - 1e-12).all()) for other in curves):
            return events
    raise ValueError("a charged search needs one candidate whose cost is at least every other's at every Renyi order; "
                     "the candidates' K values give crossing curves: search one K at a time")


def search_lpgnet(datasets: Sequence[Data], grid: Iterable[LPGNetConfig], *, epsilon: float, delta: float,
                  seeds: Sequence[Optional[int]], tuning: Optional[TrialDistribution] = None,
                  accountant: Optional[PrivacyAccountant] = None,
                  **kwargs) -> tuple[LPGNetConfig, list[LPGNetResult]]:
    """The configuration of ``grid`` with the best mean validation accuracy over the runs
    (``datasets[i]`` with ``seeds[i]``), and that configuration's runs.

    **Not charged** (``tuning=None``): each candidate spends on its own fresh accountant, as in the
    papers' hyperparameter searches; only the selected runs' spend is reported.

    **Charged** (``tuning`` a trial distribution of
    :mod:`~pyg_private.accounting.hyperparameter_tuning`): private selection with a random number of
    trials (Papernot and Steinke, ICLR 2022; :func:`~pyg_private.models.selection.select_privately`),
    one graph (``datasets=[data]``, ``seeds=[None]``); the whole search registers **one** event on
    ``accountant`` before the first trial. Returns the selected configuration and its one run (``[]``
    when no trial ran).
    """
    if tuning is None:
        return select_on_validation(
            grid, lambda config: [run_lpgnet(d, config, epsilon=epsilon, delta=delta, seed=s, **kwargs)
                                  for d, s in zip(datasets, seeds)], lambda r: r.val_accuracy)
    grid = list(grid)
    check_charged_search(datasets, seeds, kwargs, accountant)
    trial_cost = _costliest_trial(grid, epsilon=epsilon, delta=delta)
    chosen = select_privately(
        grid, lambda config, ledger: run_lpgnet(datasets[0], config, epsilon=epsilon, delta=delta, accountant=ledger,
                                                **kwargs),
        lambda r: r.val_accuracy, distribution=tuning, trial_cost=trial_cost, accountant=accountant,
        name="lpgnet_search")
    return chosen.config, ([] if chosen.run is None else [chosen.run])
