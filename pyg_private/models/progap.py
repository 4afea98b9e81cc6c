r"""The ProGAP node-classification recipe: progressive training, one perturbed aggregation per stage.

Sajadmanesh and Gatica-Perez, `"ProGAP: Progressive Graph Neural Networks with Differential
Privacy Guarantees" <https://arxiv.org/abs/2304.08928>`_ (WSDM 2024), Sec. 4, as their code
(github.com/sisaman/ProGAP: ``core/modules/prog.py``, ``core/nn/nap.py``,
``core/methods/progap/``) builds it. With ``K`` (``config.K``) aggregations, ProGAP trains
``K + 1`` stages one after the other on the cached inputs :math:`\mathbf{X}_0` (the node features)
and :math:`\mathbf{X}_1, \dots, \mathbf{X}_K` (the noisy aggregations):

* stage :math:`k` has one **base** MLP per input, :math:`B_j` on :math:`\mathbf{X}_j` for
  :math:`j \le k` (bases :math:`B_0, \dots, B_{k-1}` are those of the earlier stages), and its own
  **head**: :math:`\hat{\mathbf{Y}}_k = \mathrm{head}_k\big(\mathrm{normalize}\big([B_0(\mathbf{X}_0)
  \,\|\, \cdots \,\|\, B_k(\mathbf{X}_k)]\big)\big)` (``combine="cat"``: the jumping-knowledge
  concatenation with unit rows before the head);
* after stage :math:`k < K` the newest base's output :math:`\mathbf{H}_k = B_k(\mathbf{X}_k)` is
  put on the unit sphere row by row and aggregated **once** with Gaussian noise,
  :math:`\mathbf{X}_{k+1} = \mathbf{A}\,\mathrm{normalize}(\mathbf{H}_k) + \mathbf{Z}_k`
  (:class:`~pyg_private.nn.progap_aggregation.ProGAPAggregation`: sum over the neighbours, no
  self-loop, not renormalised after the noise unless ``renormalize=True``); the release is cached;
* ``layerwise=True`` freezes the earlier bases; with ``layerwise=False`` (the authors') they keep
  training in the later stages (only the earlier heads are finished). Either way each stage's model
  is kept as it was at its end (the next stage starts from copies of its bases), so the later
  stages and :meth:`ProGAPModel.logits` embed exactly as the released aggregations did (the
  authors' code re-embeds a new graph with the last stage's bases).

Every MLP layer is Linear, SELU, BatchNorm, dropout (``batch_norm``; the bases' last layers too,
the heads' last layers plain); each stage restores its epoch of best validation accuracy
(``checkpoint``, edge level). The prediction is the head of one stage: the one with the best
**validation** accuracy (``select_stage=True``, so stage 0, which reads no aggregation of the
features, is always a candidate; the authors predict with the last stage and tune the depth on
validation), or the last stage. At edge level a plain PyG MLP on the raw features
(:func:`~pyg_private.models.edge_free_mlp.fit_edge_free_mlp`, ``edge_free_candidate``; free there)
is a further candidate of the same selection, the edge-free one (with the label hop, stage 0
reads the released label counts).
``combine="inputs"`` is the earlier variant of this package: one new base per stage over
:math:`[\mathrm{normalize}(\mathbf{H}_0) \,\|\, \mathbf{X}_1 \,\|\, \cdots \,\|\, \mathbf{X}_k]`,
no row normalisation before the head, its output the stage's embedding.

**Accounting.** Each aggregation is one Gaussian mechanism with noise std :math:`\sigma\Delta`,
:math:`1/\sigma`-GDP, registered (before its noise) as one event; the ``K`` events compose
exactly (GDP, or RDP next to DP-SGD). One :math:`\sigma` serves every stage and is calibrated by
:func:`~pyg_private.accounting.calibrate_noise` with the accountant's own composition, so that
the run spends at most ``(epsilon, delta)`` (:func:`progap_noise_multiplier`). Before the first
stage the whole plan of events is checked against the accountant's budget on a copy of its
ledger, so a run that would not fit raises ``PrivacyBudgetExceeded`` before anything is charged.
Training on the cached releases is post-processing.

* ``level="edge"``: :math:`\Delta = \sqrt2` (one undirected edge changes two rows of the sum by
  a unit row each; ProGAP's code uses 1, one direction). Features and labels are public: the
  stages train with full-batch Adam, keep their best-validation epoch and cost nothing.
* ``level="node"``: every stage trains with DP-SGD (Opacus; one example per training node) for
  ``dp_epochs`` epochs, sharing :math:`\sigma` with the aggregations (GAP's and ProGAP's joint
  calibration), and :math:`\Delta = \sqrt{D(D+1)}` with the declared ``max_degree`` :math:`D`
  (:func:`~pyg_private.nn.progap_aggregation.sum_aggregation_node_sensitivity`). BatchNorm mixes
  the examples of a batch and its running statistics would carry other nodes' data into every
  node's embedding, so at node level ``batch_norm=True`` puts ``GroupNorm(1, C)`` (each row
  normalised over its own features) in its place. (Opacus' ``ModuleValidator.fix``, which the
  authors' code applies, makes ``GroupNorm(min(32, C), C)``: with 16 channels, groups of one value,
  whose output is the bias alone.) Each stage keeps its **last** epoch: choosing the epoch by
  validation accuracy reads the validation nodes' features and labels, which are private at node
  level and which no event charges (``checkpoint="best_val"`` is refused there). By adaptive
  composition, given the earlier releases (models and aggregations), node :math:`u`'s row of
  every stage's input and embedding is a function of :math:`u`'s own features only, so removing
  node :math:`v` removes one DP-SGD example and changes each aggregation by the rows of
  :math:`v` and of its :math:`\le D` neighbours: that is the bound. The papers state
  :math:`\sqrt D`, dropping the removed node's own aggregated row; here, as in
  :func:`~pyg_private.models.run_caribou`, ``data`` is a fixed, public universe of
  ``data.num_nodes`` nodes (an absent node is a zero feature row without edges), every release
  has one row per node, and that row is counted. A DP-SGD example is a training node with a
  non-zero feature row: a rule on the node's own data, so that removing a neighbour never
  changes which other nodes are examples. ``max_degree`` is checked before anything is trained
  or charged; it is declared, never read off the graph, and the guarantee covers the graphs whose
  degrees all lie within it. ProGAP's code samples at most ``max_degree`` edges per node instead
  and keeps :math:`\sqrt D`; but which edges of a node survive depends on its other edges, so
  removing one node can change the kept edges of every one of its neighbours, a number only the
  degree bound limits. ``degree_cap`` :math:`D_c` offers that sampling with the bound it implies:
  every node sums its :math:`D_c` first neighbours in a keyed order of the pairs, and
  :math:`\Delta = \sqrt{D_c^2 + 4D}` (:mod:`~pyg_private.utils.degree_cap`, proof and brute
  force), with :math:`D` = ``max_degree`` still declared and checked. The accuracies are
  measured on the present nodes of the masks; stage selection reads validation labels and, like
  the hyperparameter search of the papers, is not charged.

``epsilon = inf`` runs the same pipeline without noise (the non-private reference).

**Defaults** (:class:`ProGAPConfig`) are those of the authors' code (github.com/sisaman/ProGAP,
``core/methods/progap/base.py`` and ``experiments.py``; paper Sec. 5) but one: SELU, hidden width
16, one base and one head layer, BatchNorm, ``combine="cat"`` with row normalisation before the
head, no renormalisation after the noise, raw input features, Adam with learning rate 0.01 for 100
epochs per stage, best-validation epoch (edge level), no dropout or weight decay, and at node
level DP-SGD for 10 epochs per stage (their grid {5, 10}) with batch size 256 and clipping norm 1.
The exception is ``layerwise=True`` (the authors': ``False``): on Cora at edge level, epsilon 4,
3 seeds, ``K = 3``, retraining the earlier bases lost 4 to 8 points of validation accuracy at
stages 1 to 3 on both a 10% and a 70% training split (the base on the raw features keeps fitting
the few training nodes). Their grid is learning rate {0.01, 0.05} x base layers {1, 2} x depth
``K`` in 1..5; ``K = 2`` is the default here. The label hop (``label_hop``, on at edge level) is
this library's: one more release, every node's sum of its neighbours' class rows (the training
labels, and the edge-free MLP's class probabilities for the other nodes), given half of the
budget's :math:`\mu^2` (see :class:`ProGAPConfig`); each of these choices was measured across the
offline graphs before it became the default.

**Accounting** of the label hop: one Gaussian event of sensitivity :math:`\sqrt 2` (its rows are
unit or zero rows computed without the graph), with its own noise multiplier (its share of
:math:`\mu^2`), calibrated jointly with the ``K`` aggregations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from ..accounting import (PrivacyAccountant, PrivacyEvent, Unit, calibrate_noise, check_plan, gdp_event,
                          subsampled_gaussian_event)
from ..accounting.validation import check_delta, check_epsilon, check_positive_int
from ..nn._call_checks import reject_sampled_batch
from ..nn.progap_aggregation import ProGAPAggregation
from ..utils import simple_undirected
from ..utils.degree_bounds import check_declared_bounds, present_nodes
from ..utils.degree_cap import capped_sum_aggregation_node_sensitivity, draw_cap_key
from .edge_free_mlp import fit_edge_free_mlp
from .node_training import accuracy, fit_dp_sgd, fit_full_batch
from .recipe_inputs import prepare_node_data, trains_with_autograd
from .selection import check_charged_search, select_on_validation, select_privately
from ..accounting.hyperparameter_tuning import TrialDistribution

__all__ = ["ProGAPConfig", "ProGAPResult", "ProGAPModel", "progap_noise_multiplier", "run_progap", "search_progap"]


@dataclass(frozen=True)
class ProGAPConfig:
    r"""One ProGAP configuration; the defaults are those of the authors' code but ``layerwise``
    (see the module notes).

    Args:
        K: the number of perturbed aggregations (``K + 1`` trained stages), ``>= 1``.
        hidden: the width of every hidden layer and embedding :math:`\mathbf{H}_k`.
        base_layers, head_layers: layers of each base MLP (input -> embedding; SELU, then the
            normalisation and dropout, after every layer) and of each head MLP (-> classes; plain
            last layer).
        epochs, lr, weight_decay, dropout: each stage's full-batch Adam epochs, the learning rate
            (DP-SGD's too), the weight decay (full-batch training only) and the dropout.
        feature_norm: the input rows, ``None`` (as given, the authors'), ``"l2"`` (unit length) or
            ``"l1"`` (PyG's ``NormalizeFeatures``). A function of each node's own row: free.
        batch_size, max_grad_norm: DP-SGD's (node level only).
        select_stage: predict with the stage of best validation accuracy (``False``: the last).
        batch_norm: BatchNorm after every activation (node level: ``GroupNorm(1, C)``, see the
            module notes); ``False``: no normalisation layer.
        combine: ``"cat"``, one base per input, their outputs concatenated and row-normalised before
            the head, the newest base's output aggregated (the authors'); ``"inputs"``, one new base
            per stage over the concatenated inputs, its output aggregated (this package's earlier
            variant; ``layerwise`` has no effect there).
        layerwise: freeze the earlier stages' bases (default; ``False``: they keep training, the
            authors' default, measurably worse on Cora: see the module notes).
        renormalize: renormalise the rows of each noisy aggregation (GAP's; post-processing).
        checkpoint: ``"best_val"`` restores each stage's epoch of best validation accuracy,
            ``"last"`` keeps the last; ``None`` (default) is ``"best_val"`` at edge level and
            ``"last"`` at node level, where ``"best_val"`` is refused (it reads private data).
        dp_epochs: the epochs of each stage's DP-SGD at node level (the authors' grid: 5, 10).
        edge_free_candidate: at edge level, also train the plain PyG MLP of
            :func:`~pyg_private.models.edge_free_mlp.fit_edge_free_mlp` on the raw features (public
            there: free) and predict with it when it validates better than the selected stage
            (:attr:`ProGAPResult.candidate` says which won). With the label hop, the same MLP on the
            features and the released counts is a further candidate (``"label-mlp"``: post-processing
            of the release, no further cost). Node level trains no such candidate. ``False`` keeps
            the MLP out of the selection; ``label_hop_rows="soft"`` or ``"predicted"`` still trains
            it for the label hop's rows.
        label_hop: at edge level, also release :math:`\mathbf{A}\mathbf{R} + \mathbf{Z}`, every
            node's sum over its neighbours of a class row :math:`\mathbf{r}_w` computed without the
            graph (``label_hop_rows``; with the default, the one-hot label of a training neighbour
            and the edge-free MLP's class probabilities elsewhere, each put on the unit sphere:
            sensitivity :math:`\sqrt 2` as any aggregation of unit rows), and append it to the raw
            features of every stage. One more Gaussian event (``label_hop_share``). ``None``
            (default): on at edge level, off at node level, where the labels are private (``True``
            is refused there).
        label_hop_rows: what the label hop sums. ``"train"``: the one-hot labels of the training
            nodes (rows of the other nodes are zero), every node's count of training neighbours per
            class. ``"predicted"``: the same, and for every other node the one-hot class that the
            plain edge-free MLP (``edge_free_candidate``'s, trained on public features and labels)
            predicts, so that every neighbour counts (the cluster-degree vectors of LPGNet, Kolluri
            et al., CCS 2022). ``"soft"`` (default): that MLP's class probabilities instead of its
            class; the aggregation puts them on the unit sphere as it does every row, so an unsure
            neighbour adds to several classes and tells them apart less. Every row is computed
            without the graph (at edge level the features and labels are public) and summed as a
            unit or zero row: the same sensitivity and event.
        label_hop_share: the label hop's share :math:`s` of the run's GDP budget :math:`\mu^2` (the
            ``K`` feature aggregations share the rest equally), in ``(0, 1)``; default 0.5.
            ``None``: every release the same noise multiplier (the share :math:`1/(K+1)`). The
            label hop's noise multiplier is :math:`\sigma\sqrt{(1-s)/(sK)}`, with :math:`\sigma`
            the feature aggregations'; the composition is calibrated to ``(epsilon, delta)`` exactly
            either way. Ignored without the label hop.
    """

    K: int = 2
    hidden: int = 16
    base_layers: int = 1
    head_layers: int = 1
    epochs: int = 100
    lr: float = 1e-2
    weight_decay: float = 0.0
    dropout: float = 0.0
    feature_norm: Optional[Literal["l2", "l1"]] = None
    batch_size: int = 256
    max_grad_norm: float = 1.0
    select_stage: bool = True
    batch_norm: bool = True
    combine: Literal["cat", "inputs"] = "cat"
    layerwise: bool = True
    renormalize: bool = False
    checkpoint: Optional[Literal["best_val", "last"]] = None
    dp_epochs: int = 10
    edge_free_candidate: bool = True
    label_hop: Optional[bool] = None
    label_hop_rows: Literal["train", "predicted", "soft"] = "soft"
    label_hop_share: Optional[float] = 0.5

    def __post_init__(self) -> None:
        for name in ("K", "hidden", "base_layers", "head_layers", "epochs", "batch_size", "dp_epochs"):
            check_positive_int(getattr(self, name), name)
        if not (isinstance(self.lr, (int, float)) and self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"`lr` must be a positive number; got {self.lr!r}")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise ValueError(f"`weight_decay` must be >= 0; got {self.weight_decay!r}")
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"`dropout` must lie in [0, 1); got {self.dropout!r}")
        if not (isinstance(self.max_grad_norm, (int, float)) and self.max_grad_norm > 0):
            raise ValueError(f"`max_grad_norm` must be > 0; got {self.max_grad_norm!r}")
        if self.feature_norm not in ("l2", "l1", None):
            raise ValueError(f"`feature_norm` must be 'l2', 'l1' or None; got {self.feature_norm!r}")
        if self.combine not in ("cat", "inputs"):
            raise ValueError(f"`combine` must be 'cat' or 'inputs'; got {self.combine!r}")
        if self.checkpoint not in ("best_val", "last", None):
            raise ValueError(f"`checkpoint` must be 'best_val', 'last' or None; got {self.checkpoint!r}")
        for name in ("batch_norm", "layerwise", "renormalize", "select_stage", "edge_free_candidate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be a bool; got {getattr(self, name)!r}")
        if self.label_hop is not None and not isinstance(self.label_hop, bool):
            raise ValueError(f"`label_hop` must be a bool or None; got {self.label_hop!r}")
        if self.label_hop_rows not in ("train", "predicted", "soft"):
            raise ValueError(f"`label_hop_rows` must be 'train', 'predicted' or 'soft'; got {self.label_hop_rows!r}")
        share = self.label_hop_share
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0.0 < share < 1.0):
            raise ValueError(f"`label_hop_share` must lie in (0, 1) or be None; got {share!r}")

    def label_noise_ratio(self) -> float:
        """The label hop's noise multiplier over the feature aggregations' (1 with ``label_hop_share=None``)."""
        if self.label_hop_share is None:
            return 1.0
        s = float(self.label_hop_share)
        return math.sqrt((1.0 - s) / (s * self.K))

    def uses_label_hop(self, level: str) -> bool:
        """Whether a run at ``level`` releases the label hop (``label_hop=None``: at edge level only)."""
        return level == "edge" if self.label_hop is None else bool(self.label_hop)


@dataclass
class ProGAPResult:
    """What one run measured: the selected stage's accuracies and every stage's.

    **What a result holds.** Only what was released or is public, plus the evaluation the run was asked for: the
    configuration; the cost (``epsilon`` and ``accountant``, public records of the events); ``model``, the
    released stages (:class:`ProGAPModel`); and the accuracies on your own splits, statistics of the private
    data that the guarantee does not cover (report them as an evaluation, not as a private release). Never the
    graph, the features, a noise-free propagation, solver diagnostics, per-example gradients or a generator:
    ``pickle``, ``torch.save`` and ``copy.deepcopy`` of a result carry nothing else (tested by
    ``tests/test_saved_state_privacy.py``).
    """

    config: ProGAPConfig
    epsilon: float
    val_accuracy: float
    test_accuracy: float
    stage: int = 0  # the stage whose head predicts (the selected stage, when the MLP predicts instead)
    stage_val_accuracy: tuple[float, ...] = ()
    stage_test_accuracy: tuple[float, ...] = ()
    level: str = "edge"
    noise_std: float = 0.0  # per entry of each aggregation (0: no noise)
    noise_multiplier: float = 0.0
    #: the label hop's noise multiplier (0: no label hop or no noise; see ``ProGAPConfig.label_hop_share``)
    label_noise_multiplier: float = 0.0
    accountant: Optional[PrivacyAccountant] = field(default=None, repr=False)
    model: Optional["ProGAPModel"] = field(default=None, repr=False)
    #: what predicts: ``"stage"`` (the head of ``stage``), ``"mlp"`` (the plain PyG MLP, edge level;
    #: see ``ProGAPConfig.edge_free_candidate``) or ``"label-mlp"`` (the same MLP on the features and
    #: the label hop's released counts)
    candidate: str = "stage"


def _mlp(dims: Sequence[int], *, plain_last: bool, norm: Optional[str], dropout: float) -> nn.Sequential:
    """Linear layers, each but a plain last one followed by SELU, the normalisation and dropout
    (the layer order of the authors' ``core/nn/mlp.py``)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(a, b))
        if plain_last and i == len(dims) - 2:
            break
        layers.append(nn.SELU())
        if norm == "batch":
            layers.append(nn.BatchNorm1d(b))
        elif norm == "group":
            layers.append(nn.GroupNorm(1, b))  # per example: DP-SGD's per-example gradients allow it
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


class _Stage(nn.Module):
    """Stage ``k``'s predictor: base ``j`` on input block ``j`` (the blocks of ``widths``), the
    outputs concatenated (row-normalised with ``combine="cat"``), then the head. The first
    ``frozen`` bases are fixed: no gradient and evaluation mode (layer-wise training)."""

    def __init__(self, widths: Sequence[int], config: ProGAPConfig, num_classes: int, norm: Optional[str],
                 frozen: int = 0) -> None:
        super().__init__()
        h, p = config.hidden, float(config.dropout)
        self.widths = tuple(int(w) for w in widths)
        self.bases = nn.ModuleList(_mlp([w] + [h] * config.base_layers, plain_last=False, norm=norm, dropout=p)
                                   for w in self.widths)
        self.head = _mlp([h * len(self.widths)] + [h] * (config.head_layers - 1) + [num_classes], plain_last=True,
                         norm=norm, dropout=p)
        self.normalize = config.combine == "cat"
        self.frozen = int(frozen)
        for base in self.bases[:self.frozen]:
            base.requires_grad_(False)

    def train(self, mode: bool = True) -> "_Stage":
        super().train(mode)
        for base in self.bases[:self.frozen]:
            base.eval()
        return self

    def forward(self, z: Tensor) -> Tensor:
        blocks = z.split(self.widths, dim=-1)
        h = torch.cat([base(b) for base, b in zip(self.bases, blocks)], dim=-1)
        return self.head(F.normalize(h, p=2.0, dim=-1) if self.normalize else h)

    @torch.no_grad()
    def embed(self, z: Tensor) -> Tensor:
        """The embedding the next aggregation releases: the newest base on the newest block."""
        self.eval()
        return self.bases[-1](z[:, -self.widths[-1]:])


def _norm(config: ProGAPConfig, level: str) -> Optional[str]:
    if not config.batch_norm:
        return None
    return "group" if level == "node" else "batch"


def _new_stage(config: ProGAPConfig, k: int, feats: Sequence[Tensor], num_classes: int, level: str,
               previous: Optional[_Stage]) -> _Stage:
    """Stage ``k``, its earlier bases starting from the previous stage's (``combine="cat"``)."""
    if config.combine == "inputs":
        width = feats[0].size(1) if k == 0 else config.hidden + sum(f.size(1) for f in feats[1:k + 1])
        return _Stage([width], config, num_classes, _norm(config, level))
    stage = _Stage([f.size(1) for f in feats[:k + 1]], config, num_classes, _norm(config, level),
                   frozen=k if config.layerwise else 0)
    for j in range(k):
        stage.bases[j].load_state_dict(previous.bases[j].state_dict())
    return stage


def _stage_input(config: ProGAPConfig, feats: Sequence[Tensor], h0: Optional[Tensor], k: int) -> Tensor:
    """Stage ``k``'s input: its blocks side by side."""
    if config.combine == "inputs" and k > 0:
        return torch.cat([h0] + list(feats[1:k + 1]), dim=-1)
    return torch.cat(list(feats[:k + 1]), dim=-1) if k > 0 else feats[0]


def _release(config: ProGAPConfig, stage: _Stage, layer: ProGAPAggregation, feats: list[Tensor],
             h0: Optional[Tensor], k: int, edge_index: Tensor) -> Optional[Tensor]:
    """Aggregate stage ``k``'s embedding through ``layer`` (one charged release, or its cache) and
    append it to ``feats``; returns the unit-row embedding of stage 0 (``combine="inputs"``)."""
    z = stage.embed(_stage_input(config, feats, h0, k))
    out = layer(z, edge_index).float()
    width = out.size(1) // 2
    feats.append(out[:, width:])
    return out[:, :width] if h0 is None else h0


@dataclass
class ProGAPModel:
    """The trained stages and their aggregation layers, for inference on a graph of the user's choice.

    ``stages[k]`` is stage ``k``'s model as it was at the end of its training (its bases
    included), so its embedding is the one its aggregation released. :meth:`logits` re-runs the
    pipeline. Each aggregation layer caches its release: the training graph and inputs again cost
    nothing; any other graph is a **new release** of every stage, charged to the run's accountant
    under the same noise multiplier.

    It holds released or public data only: the stages' weights (full-batch Adam on public data and the releases
    at edge level, DP-SGD at node level, Opacus' per-example state removed) and the aggregation layers,
    whose ``pickle`` / ``state_dict`` keep the noisy aggregations alone (not the graph, not
    ``normalize(H)``, not the generator; see
    :class:`~pyg_private.nn.ProGAPAggregation`).
    """

    config: ProGAPConfig
    stages: list[nn.Module]
    layers: list[ProGAPAggregation]
    stage: int
    level: str = "edge"
    #: the plain MLP on the raw features when it won the selection (edge level); it then predicts
    mlp: Optional[nn.Module] = None
    #: ``label_hop``: the released noisy sums of the neighbours' class rows, one row per node of the
    #: training graph (a release: public), appended to the features as in training
    label_counts: Optional[Tensor] = None
    #: ``label_hop``: its aggregation layer (cached on the training graph) and the class rows it sums
    #: (``label_hop_rows``: the training labels, the edge-free MLP's classes or probabilities elsewhere;
    #: public at edge level), so that another graph gets its own, charged release
    label_layer: Optional[ProGAPAggregation] = None
    label_onehot: Optional[Tensor] = None
    #: whether :attr:`mlp` reads the label hop's counts next to the features (``"label-mlp"``)
    mlp_reads_labels: bool = False

    def _label_counts(self, x: Tensor, edge_index: Tensor) -> Tensor:
        if x.size(0) != self.label_onehot.size(0):
            raise ValueError("a `label_hop` model predicts on the nodes of its training graph (its label hop sums "
                             f"the class rows of {self.label_onehot.size(0)} nodes), not on {x.size(0)} nodes")
        return self.label_layer(self.label_onehot, edge_index)[:, self.label_onehot.size(1):].float()

    @torch.no_grad()
    def logits(self, x: Tensor, edge_index: Tensor, stage: Optional[int] = None) -> Tensor:
        """Class scores of every node from the head of ``stage`` (default: the selected candidate; the
        plain MLP reads no edge, the label MLP the label hop's released counts)."""
        if stage is None and self.mlp is not None:
            inputs = x.float()
            if self.mlp_reads_labels:
                inputs = torch.cat([inputs, self._label_counts(x, edge_index).to(inputs)], dim=-1)
            return self.mlp.eval()(inputs)
        stage = self.stage if stage is None else int(stage)
        if not 0 <= stage < len(self.stages):
            raise ValueError(f"`stage` must lie in [0, {len(self.stages) - 1}]; got {stage!r}")
        feats, h0 = [_normalise_features(x, self.config)], None
        if self.label_layer is not None:
            feats[0] = torch.cat([feats[0], self._label_counts(x, edge_index).to(feats[0])], dim=-1)
        for k in range(stage):
            h0 = _release(self.config, self.stages[k], self.layers[k], feats, h0, k, edge_index)
        model = self.stages[stage].eval()
        return model(_stage_input(self.config, feats, h0, stage))


def _normalise_features(x: Tensor, config: ProGAPConfig) -> Tensor:
    x = x.float()
    if config.feature_norm == "l2":
        return F.normalize(x, p=2.0, dim=-1)
    if config.feature_norm == "l1":
        return F.normalize(x, p=1.0, dim=-1)
    return x


def _dp_sgd_plan(num_train: int, config: ProGAPConfig) -> tuple[float, int]:
    """Poisson rate and steps of one DP-SGD fit exactly as :func:`fit_dp_sgd` runs it."""
    per_epoch = math.ceil(num_train / min(config.batch_size, num_train))
    return 1.0 / per_epoch, config.dp_epochs * per_epoch


def _planned_events(sigma: float, *, config: ProGAPConfig, level: str, num_train: int) -> list[PrivacyEvent]:
    """The events a run with noise multiplier ``sigma`` registers (their costs, not their grids)."""
    events = [gdp_event(unit=level, mu=1.0 / sigma, name=f"progap_aggregation_{k}") for k in range(config.K)]
    if config.uses_label_hop(level) and level == "edge":
        events.append(gdp_event(unit=level, mu=1.0 / (sigma * config.label_noise_ratio()),
                                name="progap_label_aggregation"))
    if level == "node":
        rate, steps = _dp_sgd_plan(num_train, config)
        # the K + 1 fits share sigma, rate and length: one event for all their steps (RDP adds up)
        events.append(subsampled_gaussian_event(noise_multiplier=sigma, sample_rate=rate,
                                                steps=(config.K + 1) * steps, name="progap_stages"))
    return events


def progap_noise_multiplier(*, epsilon: float, delta: float, config: ProGAPConfig, level: str = "edge",
                            num_train: Optional[int] = None) -> float:
    r"""The noise multiplier :math:`\sigma` shared by ProGAP's ``K`` aggregations (each
    :math:`1/\sigma`-GDP) and, at node level, the ``K + 1`` DP-SGD fits, so that their composition
    is ``(epsilon, delta)``-DP on unit ``level``, computed with the accountant's own composition
    (:func:`~pyg_private.accounting.calibrate_noise`: the smallest :math:`\sigma` that does not
    overshoot). ``num_train`` is the public number of training slots (node level)."""
    if level not in ("edge", "node"):
        raise ValueError(f"`level` must be 'edge' or 'node'; got {level!r}")
    eps, d = check_epsilon(epsilon), check_delta(delta)
    if level == "node":
        if num_train is None:
            raise ValueError("node level needs `num_train`, the public number of training nodes")
        num_train = check_positive_int(num_train, "num_train")
    unit = Unit(level)

    def epsilon_of(sigma: float) -> float:
        acct = PrivacyAccountant()
        for event in _planned_events(sigma, config=config, level=level, num_train=num_train or 1):
            acct.register(event)
        return acct.epsilon(unit, d)

    return calibrate_noise(epsilon_of, eps, min_scale=1e-4, max_scale=1e5, rtol=1e-6)


@trains_with_autograd
def run_progap(data: Data, config: ProGAPConfig, *, epsilon: float, delta: float, level: str = "edge",
               accountant: Optional[PrivacyAccountant] = None, max_degree: Optional[int] = None,
               num_nodes: Optional[int] = None, seed: Optional[int] = None,
               num_classes: Optional[int] = None, sampler: str = "safe", clean_graph: bool = False,
               degree_cap: Optional[int] = None) -> ProGAPResult:
    """Train and evaluate ProGAP on ``data`` (``x``, ``edge_index``, ``y``, ``train_mask``,
    ``val_mask``, ``test_mask``; an undirected simple graph).

    ``epsilon = math.inf`` runs without noise. At node level ``max_degree`` (every degree) is the
    **public** declared bound of the aggregations, checked before anything is trained or charged,
    and ``num_nodes``, if given, must equal ``data.num_nodes`` (the universe; see the module
    notes). ``seed`` fixes the initialisation and the noise for reproducible experiments (it voids
    the guarantee). The releases are charged to ``accountant`` (a fresh one when ``None``),
    returned in the result. ``num_classes`` sets the heads' width; pass it at node level, where it
    is otherwise read off the labels. ``sampler`` is the aggregations' (``"safe"`` or ``"float"``).
    ``clean_graph`` drops self-loops and merges duplicate and one-directional entries first (see
    :mod:`~pyg_private.models.recipe_inputs` for where that is valid); nodes with ``y < 0`` are
    taken out of the masks with a warning. ``degree_cap`` (node level) makes every aggregation sum
    at most that many neighbours per node, chosen by a keyed order of the pairs drawn once per run
    (:mod:`~pyg_private.utils.degree_cap`): the sensitivity falls from :math:`\\sqrt{D(D+1)}` to
    :math:`\\sqrt{D_c^2 + 4D}` (``max_degree`` :math:`D` is still declared and checked).

    Raises:
        ValueError: a bad argument (``config.checkpoint="best_val"`` at node level) or a graph
            outside the declared bounds, before any charge.
        PrivacyBudgetExceeded: the run would exceed the accountant's budget, before any charge.
    """
    reject_sampled_batch("run_progap", data)  # a sampled subgraph is refused with the reason, before anything
    if not isinstance(config, ProGAPConfig):
        raise TypeError(f"`config` must be a ProGAPConfig; got {type(config).__name__}")
    data = prepare_node_data(data, recipe="run_progap", clean=clean_graph, level=level)
    if level not in ("edge", "node"):
        raise ValueError(f"`level` must be 'edge' or 'node'; got {level!r}")
    private = not (isinstance(epsilon, (int, float)) and math.isinf(epsilon) and epsilon > 0)
    if private:
        epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    if level == "node":
        if max_degree is None:
            raise ValueError("node level needs `max_degree`, a public bound on every node's degree, declared "
                             "before seeing the graph (the guarantee covers the graphs whose degrees are all "
                             "<= max_degree; a graph outside that class is refused)")
        max_degree = check_positive_int(max_degree, "max_degree")
        if degree_cap is not None:
            degree_cap = check_positive_int(degree_cap, "degree_cap")
    elif max_degree is not None or num_nodes is not None or degree_cap is not None:
        raise ValueError("`max_degree`, `num_nodes` and `degree_cap` are node-level settings; edge level declares "
                         "none")
    if level == "node" and config.label_hop is True:
        raise ValueError("`label_hop=True` aggregates the training labels, private at node level and charged by no "
                         "node-level event: use it at edge level")
    if level == "node" and config.checkpoint == "best_val":
        raise ValueError("`checkpoint='best_val'` reads the validation nodes' features and labels, private at node "
                         "level and charged by no event: use 'last' (or None) at node level")
    if accountant is not None and not isinstance(accountant, PrivacyAccountant):
        raise TypeError(f"`accountant` must be a PrivacyAccountant; got {type(accountant).__name__}")
    x, y = data.x, data.y
    if not isinstance(x, Tensor) or x.dim() != 2 or not torch.isfinite(x.float()).all():
        raise ValueError("`data.x` must be a finite node feature matrix [N, F]")
    n = x.size(0)
    ei, _ = simple_undirected(data.edge_index, n)  # raises on a directed or non-simple graph
    degree = torch.bincount(ei[0], minlength=n)
    train, val, test = data.train_mask, data.val_mask, data.test_mask
    if level == "node":
        check_declared_bounds(degree, level="node", min_degree=0, max_degree=max_degree,
                              num_nodes=n if num_nodes is None else num_nodes)
        present = present_nodes(degree, x)
        examples = (x != 0).flatten(1).any(dim=1)  # the node's own data only (see the module notes)
        train, val, test = train & examples, val & present, test & present
    used = train | val | test
    if num_classes is None:
        num_classes = int(y[used].max()) + 1 if bool(used.any()) else 2
    elif isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"`num_classes` must be an integer >= 2; got {num_classes!r}")
    if bool(used.any()) and (int(y[used].max()) >= num_classes or int(y[used].min()) < 0):
        raise ValueError(f"`data.y` must hold class indices in [0, num_classes={num_classes}) on the nodes of the masks")
    for name, mask in (("train_mask", train), ("val_mask", val), ("test_mask", test)):
        if not bool(mask.any()):
            raise ValueError(f"`data.{name}` selects no (present) node")

    num_train = int(data.train_mask.sum())  # public: the split's size over the node universe
    node_private = private and level == "node"
    sigma = progap_noise_multiplier(epsilon=epsilon, delta=delta, config=config, level=level,
                                    num_train=num_train) if private else 0.0
    acct = PrivacyAccountant() if accountant is None else accountant
    if private:
        check_plan(acct, _planned_events(sigma, config=config, level=level, num_train=num_train))
    gen = None
    if seed is not None:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)

    best_val = config.checkpoint == "best_val" or (config.checkpoint is None and level == "edge")

    def fit(model: nn.Module, features: Tensor, k: int) -> nn.Module:
        if node_private:
            return fit_dp_sgd(model, features, y, train, noise_multiplier=sigma, accountant=acct,
                              epochs=config.dp_epochs, lr=config.lr, batch_size=config.batch_size,
                              max_grad_norm=config.max_grad_norm, name=f"progap_stage_{k}", generator=gen,
                              num_examples=num_train)
        return fit_full_batch(model, features, y, train, epochs=config.epochs, lr=config.lr,
                              weight_decay=config.weight_decay, val_mask=val if best_val else None)

    bounds = {"max_degree": max_degree, "num_nodes": num_nodes, "degree_cap": degree_cap} if level == "node" else {}
    cap_key = None if degree_cap is None else draw_cap_key(gen)  # one capped graph for every stage
    noise = {"noise_multiplier": sigma}
    stages: list[_Stage] = []
    layers: list[ProGAPAggregation] = []
    feats, h0 = [_normalise_features(x, config)], None
    label_counts = label_layer = onehot = edge_free = None
    if config.uses_label_hop(level):  # class rows (training labels; the MLP's elsewhere) summed: one release
        onehot = torch.zeros(n, num_classes, dtype=torch.float64, device=x.device)
        onehot[train, y[train]] = 1.0
        if config.label_hop_rows in ("predicted", "soft"):  # the edge-free MLP elsewhere (public: reads no edge)
            edge_free = fit_edge_free_mlp(x, y, train, val, num_classes, seed=seed)
            with torch.no_grad():
                scores = edge_free(x.float())
            others = (~train).nonzero().view(-1)
            if config.label_hop_rows == "predicted":
                onehot[others, scores.argmax(dim=-1)[others]] = 1.0
            else:  # class probabilities (the layer puts every row on the unit sphere)
                onehot[others] = scores[others].double().softmax(dim=-1)
        label_layer = ProGAPAggregation(level=level, accountant=acct if private else None, cached=True,
                                        generator=gen, name="progap_label_aggregation", sampler=sampler,
                                        noise_multiplier=sigma * config.label_noise_ratio())
        label_counts = label_layer(onehot, ei)[:, num_classes:].float()
        feats[0] = torch.cat([feats[0], label_counts], dim=-1)
    inputs = []
    for k in range(config.K + 1):
        stage = _new_stage(config, k, feats, num_classes, level, stages[-1] if stages else None)
        inputs.append(_stage_input(config, feats, h0, k))
        stages.append(fit(stage, inputs[k], k).eval())
        if k == config.K:
            break
        layer = ProGAPAggregation(level=level, accountant=acct if private else None, cached=True, generator=gen,
                                  name=f"progap_aggregation_{k}", sampler=sampler,
                                  normalize_output=config.renormalize, **bounds, **noise)
        if cap_key is not None:
            layer.cap_key = cap_key
        layers.append(layer)
        h0 = _release(config, stages[k], layer, feats, h0, k, ei)  # one release, charged before its noise

    vals = tuple(accuracy(s, z, y, val) for s, z in zip(stages, inputs))
    tests = tuple(accuracy(s, z, y, test) for s, z in zip(stages, inputs))
    chosen = max(range(len(vals)), key=lambda i: (vals[i], -i)) if config.select_stage else config.K
    val_acc, test_acc, candidate, mlp = vals[chosen], tests[chosen], "stage", None
    if config.edge_free_candidate and not node_private:  # the plain MLP: features and labels public here
        mlp = edge_free if edge_free is not None else fit_edge_free_mlp(x, y, train, val, num_classes, seed=seed)
        mlp_val = accuracy(mlp, x.float(), y, val)
        if mlp_val > val_acc:
            val_acc, test_acc, candidate = mlp_val, accuracy(mlp, x.float(), y, test), "mlp"
        else:
            mlp = None
    if label_counts is not None and config.edge_free_candidate:  # the same MLP on [x, counts]: post-processing
        with_labels = torch.cat([x.float(), label_counts], dim=-1)
        label_mlp = fit_edge_free_mlp(with_labels, y, train, val, num_classes, seed=seed)
        label_val = accuracy(label_mlp, with_labels, y, val)
        if label_val > val_acc:
            val_acc, test_acc, candidate = label_val, accuracy(label_mlp, with_labels, y, test), "label-mlp"
            mlp = label_mlp
    sensitivity = capped_sum_aggregation_node_sensitivity(max_degree, degree_cap) if level == "node" \
        else math.sqrt(2.0)
    return ProGAPResult(config=config, epsilon=epsilon, val_accuracy=val_acc, test_accuracy=test_acc,
                        stage=chosen, stage_val_accuracy=vals, stage_test_accuracy=tests, level=level,
                        noise_std=sigma * sensitivity, noise_multiplier=sigma, accountant=acct,
                        label_noise_multiplier=0.0 if label_layer is None else sigma * config.label_noise_ratio(),
                        model=ProGAPModel(config, stages, layers, chosen, level=level, mlp=mlp,
                                          label_counts=label_counts, label_layer=label_layer,
                                          label_onehot=onehot, mlp_reads_labels=candidate == "label-mlp"),
                        candidate=candidate)


def search_progap(datasets: Sequence[Data], grid: Iterable[ProGAPConfig], *, epsilon: float, delta: float,
                  seeds: Sequence[Optional[int]], tuning: Optional[TrialDistribution] = None,
                  accountant: Optional[PrivacyAccountant] = None,
                  **kwargs) -> tuple[ProGAPConfig, list[ProGAPResult]]:
    """The configuration of ``grid`` with the best mean validation accuracy over the runs
    (``datasets[i]`` with ``seeds[i]``), and that configuration's runs.

    **Not charged** (``tuning=None``): each candidate spends on its own fresh accountant, as in the
    papers' hyperparameter searches; only the selected runs' spend is reported.

    **Charged** (``tuning`` a :class:`~pyg_private.accounting.hyperparameter_tuning.TruncatedNegativeBinomial`
    or :class:`~pyg_private.accounting.hyperparameter_tuning.Poisson`): private selection with a
    random number of trials (Papernot and Steinke, ICLR 2022, Theorems 2 and 6;
    :func:`~pyg_private.models.selection.select_privately`), edge level, one graph
    (``datasets=[data]``, ``seeds=[None]``). Each trial runs a uniformly drawn candidate at
    ``(epsilon, delta)``; the whole search registers **one** event on ``accountant`` before the first
    trial, so the tuned pipeline has an end-to-end guarantee. The score, the validation accuracy of
    a model trained on public features and labels and the released aggregations, is post-processing
    at edge level. Returns the selected configuration and its one run (``[]`` when no trial ran).
    """
    if tuning is None:
        return select_on_validation(
            grid, lambda config: [run_progap(d, config, epsilon=epsilon, delta=delta, seed=s, **kwargs)
                                  for d, s in zip(datasets, seeds)], lambda r: r.val_accuracy)
    grid = list(grid)
    check_charged_search(datasets, seeds, kwargs, accountant)
    # every candidate is calibrated to (epsilon, delta): K GDP events of mu = 1/sigma each; the costliest
    # (largest composed mu) dominates every other at every order
    costs = [_planned_events(progap_noise_multiplier(epsilon=epsilon, delta=delta, config=c), config=c,
                             level="edge", num_train=1) for c in grid]
    trial_cost = max(costs, key=lambda events: sum(e.mu ** 2 for e in events))
    chosen = select_privately(
        grid, lambda config, ledger: run_progap(datasets[0], config, epsilon=epsilon, delta=delta, accountant=ledger,
                                                **kwargs),
        lambda r: r.val_accuracy, distribution=tuning, trial_cost=trial_cost, accountant=accountant,
        name="progap_search")
    return chosen.config, ([] if chosen.run is None else [chosen.run])
