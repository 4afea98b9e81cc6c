r"""The ProGAP node-classification recipe: progressive training, one perturbed aggregation per stage.

Sajadmanesh and Gatica-Perez, `"ProGAP: Progressive Graph Neural Networks with Differential
Privacy Guarantees" <https://arxiv.org/abs/2304.08928>`_ (WSDM 2024), Sec. 4. With ``K`` =
``config.stages`` aggregations, ProGAP trains ``K + 1`` stages one after the other:

* **stage 0** trains an MLP on the (row-normalised) node features; its last hidden layer gives
  :math:`\mathbf{H}_0`;
* after stage :math:`k < K`, the rows of :math:`\mathbf{H}_k` are put on the unit sphere and
  aggregated **once** with Gaussian noise, :math:`\tilde{\mathbf{A}}_k = \mathrm{normalize}(
  \mathbf{A}\,\mathrm{normalize}(\mathbf{H}_k) + \mathbf{Z}_k)`
  (:class:`~pyg_private.nn.progap_aggregation.ProGAPAggregation`, GAP's aggregation
  perturbation with one hop); the release is cached and the stage's model is frozen;
* **stage** :math:`k \ge 1` trains a new MLP (base, then head) on the concatenation
  :math:`[\mathrm{normalize}(\mathbf{H}_0) \,\|\, \tilde{\mathbf{A}}_0 \,\|\, \cdots \,\|\,
  \tilde{\mathbf{A}}_{k-1}]` (ProGAP's jumping-knowledge combination of the cached releases);
  its base's output is :math:`\mathbf{H}_k`.

The prediction is the head of one stage: the one with the best **validation** accuracy
(``select_stage=True``, so the edge-free stage 0 is always a candidate and the result is never
below the MLP inside the pipeline on validation), or the last stage.

**Accounting.** Each aggregation is one Gaussian mechanism with noise std :math:`\sigma\Delta`,
:math:`1/\sigma`-GDP, registered (before its noise) as one event; the ``K`` events compose
exactly (GDP, or RDP next to DP-SGD). One :math:`\sigma` serves every stage and is calibrated by
:func:`~pyg_private.accounting.calibrate_noise` with the accountant's own composition, so that
the run spends at most ``(epsilon, delta)`` (:func:`progap_noise_multiplier`). Before the first
stage the whole plan of events is checked against the accountant's budget on a copy of its
ledger, so a run that would not fit raises ``PrivacyBudgetExceeded`` before anything is charged.

* ``level="edge"``: :math:`\Delta = \sqrt2` (one undirected edge changes two rows of the sum by
  a unit row each; ProGAP's sensitivity 1 counts one direction). Features and labels are public:
  the stages train with full-batch Adam and cost nothing.
* ``level="node"``: every stage trains with DP-SGD (Opacus; one example per training node),
  sharing :math:`\sigma` with the aggregations (GAP's and ProGAP's joint calibration), and
  :math:`\Delta = \sqrt{D(D+1)}` with the declared ``max_degree`` :math:`D`
  (:func:`~pyg_private.nn.progap_aggregation.sum_aggregation_node_sensitivity`). By adaptive
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
  or charged; bound the degrees beforehand (ProGAP samples at most ``max_degree`` edges per node;
  here the bound is declared, never read off the graph). The accuracies are measured on the
  present nodes of the masks; stage selection reads validation labels and, like the
  hyperparameter search of the papers, is not charged.

``epsilon = inf`` runs the same pipeline without noise (the non-private reference).

**Defaults** (:class:`ProGAPConfig`) are the settings of the GAP family (Sajadmanesh et al. 2023,
Sec. 6; ProGAP, Sec. 5): SELU, hidden width 16, one base and one head layer per stage,
concatenation as the combination, Adam with learning rate 0.01 for 100 epochs per stage, no
dropout, DP-SGD with batch size 256 and clipping norm 1. The paper tunes the depth per dataset;
``K = 2`` is our default. On small graphs with weak features (Cora with 10% training nodes) the
edge-free stage needs regularisation (weight decay 5e-3, 200 epochs): tune on validation.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Iterable, Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import MLP

from ..accounting import (PrivacyAccountant, PrivacyEvent, Unit, calibrate_noise, gdp_event,
                          subsampled_gaussian_event)
from ..accounting.validation import check_delta, check_epsilon, check_positive_int
from ..nn.progap_aggregation import ProGAPAggregation, sum_aggregation_node_sensitivity
from ..utils import simple_undirected
from ..utils.degree_bounds import check_declared_bounds, present_nodes
from .node_training import accuracy, fit_dp_sgd, fit_full_batch
from .selection import select_on_validation

__all__ = ["ProGAPConfig", "ProGAPResult", "ProGAPModel", "progap_noise_multiplier", "run_progap", "search_progap"]


@dataclass(frozen=True)
class ProGAPConfig:
    r"""One ProGAP configuration.

    Args:
        stages: :math:`K`, the number of perturbed aggregations (``K + 1`` trained stages), ``>= 1``.
        hidden: the width of every hidden layer and embedding :math:`\mathbf{H}_k`.
        base_layers, head_layers: layers of each stage's base MLP (input -> embedding, SELU after
            each) and head MLP (embedding -> classes).
        epochs, lr, weight_decay, dropout: each stage's Adam epochs, learning rate, weight decay
            (full-batch training only; DP-SGD uses none) and the dropout of the hidden layers.
        feature_norm: the input rows, ``"l2"`` (unit length), ``"l1"`` (PyG's ``NormalizeFeatures``)
            or ``None`` (as given). A function of each node's own row: free at both levels.
        batch_size, max_grad_norm: DP-SGD's (node level only).
        select_stage: predict with the stage of best validation accuracy (``False``: the last).
    """

    stages: int = 2
    hidden: int = 16
    base_layers: int = 1
    head_layers: int = 1
    epochs: int = 100
    lr: float = 1e-2
    weight_decay: float = 0.0
    dropout: float = 0.0
    feature_norm: Optional[Literal["l2", "l1"]] = "l2"
    batch_size: int = 256
    max_grad_norm: float = 1.0
    select_stage: bool = True

    def __post_init__(self) -> None:
        for name in ("stages", "hidden", "base_layers", "head_layers", "epochs", "batch_size"):
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


@dataclass
class ProGAPResult:
    """What one run measured: the selected stage's accuracies and every stage's."""

    config: ProGAPConfig
    epsilon: float
    val_accuracy: float
    test_accuracy: float
    stage: int = 0  # the stage whose head predicts
    stage_val_accuracy: tuple[float, ...] = ()
    stage_test_accuracy: tuple[float, ...] = ()
    level: str = "edge"
    noise_std: float = 0.0  # per entry of each aggregation (0: no noise)
    noise_multiplier: float = 0.0
    accountant: Optional[PrivacyAccountant] = field(default=None, repr=False)
    model: Optional["ProGAPModel"] = field(default=None, repr=False)


class _Stage(nn.Module):
    """One stage: a base MLP (input -> embedding) and a head MLP (embedding -> classes)."""

    def __init__(self, in_channels: int, config: ProGAPConfig, num_classes: int) -> None:
        super().__init__()
        h, p = config.hidden, float(config.dropout)
        self.base = MLP([in_channels] + [h] * config.base_layers, act="selu", norm=None, dropout=p, plain_last=False)
        self.head = MLP([h] * config.head_layers + [num_classes], act="selu", norm=None, dropout=p)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.base(x))


@dataclass
class ProGAPModel:
    """The trained stages and their aggregation layers, for inference on a graph of the user's choice.

    :meth:`logits` re-runs the pipeline. Each aggregation layer caches its release: the training
    graph and inputs again cost nothing; any other graph is a **new release** of every stage,
    charged to the run's accountant under the same noise multiplier.
    """

    config: ProGAPConfig
    stages: list[nn.Module]
    layers: list[ProGAPAggregation]
    stage: int
    level: str = "edge"

    @torch.no_grad()
    def logits(self, x: Tensor, edge_index: Tensor, stage: Optional[int] = None) -> Tensor:
        """Class scores of every node from the head of ``stage`` (default: the selected one)."""
        stage = self.stage if stage is None else int(stage)
        if not 0 <= stage < len(self.stages):
            raise ValueError(f"`stage` must lie in [0, {len(self.stages) - 1}]; got {stage!r}")
        inputs = _stage_inputs(self.config, self.stages, self.layers, _normalise_features(x, self.config),
                               edge_index, upto=stage)
        model = self.stages[stage].eval()
        return model(inputs[stage])


def _normalise_features(x: Tensor, config: ProGAPConfig) -> Tensor:
    x = x.float()
    if config.feature_norm == "l2":
        return F.normalize(x, p=2.0, dim=-1)
    if config.feature_norm == "l1":
        return F.normalize(x, p=1.0, dim=-1)
    return x


@torch.no_grad()
def _embed(stage: nn.Module, z: Tensor) -> Tensor:
    stage.eval()
    return stage.base(z)


def _stage_inputs(config: ProGAPConfig, stages: Sequence[nn.Module], layers: Sequence[ProGAPAggregation],
                  x: Tensor, edge_index: Tensor, upto: int) -> list[Tensor]:
    """The inputs of stages ``0..upto`` through the (cached) aggregation layers."""
    inputs, released = [x], []
    h0 = None
    for k in range(upto):
        out = layers[k](_embed(stages[k], inputs[k]), edge_index).float()
        width = out.size(1) // 2
        if h0 is None:
            h0 = out[:, :width]
        released.append(out[:, width:])
        inputs.append(torch.cat([h0] + released, dim=-1))
    return inputs


def _dp_sgd_plan(num_train: int, config: ProGAPConfig) -> tuple[float, int]:
    """Poisson rate and steps of one DP-SGD fit exactly as :func:`fit_dp_sgd` runs it."""
    per_epoch = math.ceil(num_train / min(config.batch_size, num_train))
    return 1.0 / per_epoch, config.epochs * per_epoch


def _planned_events(sigma: float, *, config: ProGAPConfig, level: str, num_train: int) -> list[PrivacyEvent]:
    """The events a run with noise multiplier ``sigma`` registers (their costs, not their grids)."""
    events = [gdp_event(unit=level, mu=1.0 / sigma, name=f"progap_aggregation_{k}") for k in range(config.stages)]
    if level == "node":
        rate, steps = _dp_sgd_plan(num_train, config)
        # the K + 1 fits share sigma, rate and length: one event for all their steps (RDP adds up)
        events.append(subsampled_gaussian_event(noise_multiplier=sigma, sample_rate=rate,
                                                steps=(config.stages + 1) * steps, name="progap_stages"))
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


def _check_plan(accountant: PrivacyAccountant, events: Sequence[PrivacyEvent]) -> None:
    """Raise ``PrivacyBudgetExceeded`` now if the whole run would not fit the budget (a copy of
    the ledger is charged; the accountant itself is untouched)."""
    if not accountant.budget:
        return
    trial = copy.deepcopy(accountant)
    for event in events:
        trial.register(event)


def run_progap(data: Data, config: ProGAPConfig, *, epsilon: float, delta: float, level: str = "edge",
               accountant: Optional[PrivacyAccountant] = None, max_degree: Optional[int] = None,
               num_nodes: Optional[int] = None, seed: Optional[int] = None,
               num_classes: Optional[int] = None, sampler: str = "safe") -> ProGAPResult:
    """Train and evaluate ProGAP on ``data`` (``x``, ``edge_index``, ``y``, ``train_mask``,
    ``val_mask``, ``test_mask``; an undirected simple graph).

    ``epsilon = math.inf`` runs without noise. At node level ``max_degree`` (every degree) is the
    **public** declared bound of the aggregations, checked before anything is trained or charged,
    and ``num_nodes``, if given, must equal ``data.num_nodes`` (the universe; see the module
    notes). ``seed`` fixes the initialisation and the noise for reproducible experiments (it voids
    the guarantee). The releases are charged to ``accountant`` (a fresh one when ``None``),
    returned in the result. ``num_classes`` sets the heads' width; pass it at node level, where it
    is otherwise read off the labels. ``sampler`` is the aggregations' (``"safe"`` or ``"float"``).

    Raises:
        ValueError: a bad argument or a graph outside the declared bounds, before any charge.
        PrivacyBudgetExceeded: the run would exceed the accountant's budget, before any charge.
    """
    if not isinstance(config, ProGAPConfig):
        raise TypeError(f"`config` must be a ProGAPConfig; got {type(config).__name__}")
    if level not in ("edge", "node"):
        raise ValueError(f"`level` must be 'edge' or 'node'; got {level!r}")
    private = not (isinstance(epsilon, (int, float)) and math.isinf(epsilon) and epsilon > 0)
    if private:
        epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    if level == "node":
        if max_degree is None:
            raise ValueError("node level needs `max_degree`, a public bound on every node's degree (bound the "
                             "degrees first; ProGAP samples at most max_degree edges per node)")
        max_degree = check_positive_int(max_degree, "max_degree")
    elif max_degree is not None or num_nodes is not None:
        raise ValueError("`max_degree` and `num_nodes` are node-level bounds; edge level declares none")
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
        _check_plan(acct, _planned_events(sigma, config=config, level=level, num_train=num_train))
    gen = None
    if seed is not None:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)

    def fit(model: nn.Module, features: Tensor, k: int) -> nn.Module:
        if node_private:
            return fit_dp_sgd(model, features, y, train, noise_multiplier=sigma, accountant=acct,
                              epochs=config.epochs, lr=config.lr, batch_size=config.batch_size,
                              max_grad_norm=config.max_grad_norm, name=f"progap_stage_{k}", generator=gen,
                              num_examples=num_train)
        return fit_full_batch(model, features, y, train, epochs=config.epochs, lr=config.lr,
                              weight_decay=config.weight_decay)

    bounds = {"max_degree": max_degree, "num_nodes": num_nodes} if level == "node" else {}
    noise = {"noise_multiplier": sigma}
    stages: list[nn.Module] = []
    layers: list[ProGAPAggregation] = []
    inputs = [_normalise_features(x, config)]
    h0, released = None, []
    for k in range(config.stages + 1):
        stage = _Stage(inputs[k].size(1), config, num_classes)
        stages.append(fit(stage, inputs[k], k))
        if k == config.stages:
            break
        layer = ProGAPAggregation(level=level, accountant=acct if private else None, cached=True, generator=gen,
                                  name=f"progap_aggregation_{k}", sampler=sampler, **bounds, **noise)
        layers.append(layer)
        out = layer(_embed(stages[k], inputs[k]), ei).float()  # one release, charged before its noise
        width = out.size(1) // 2
        if h0 is None:
            h0 = out[:, :width]
        released.append(out[:, width:])
        inputs.append(torch.cat([h0] + released, dim=-1))

    vals = tuple(accuracy(s, z, y, val) for s, z in zip(stages, inputs))
    tests = tuple(accuracy(s, z, y, test) for s, z in zip(stages, inputs))
    chosen = max(range(len(vals)), key=lambda i: (vals[i], -i)) if config.select_stage else config.stages
    sensitivity = sum_aggregation_node_sensitivity(max_degree) if level == "node" else math.sqrt(2.0)
    return ProGAPResult(config=config, epsilon=epsilon, val_accuracy=vals[chosen], test_accuracy=tests[chosen],
                        stage=chosen, stage_val_accuracy=vals, stage_test_accuracy=tests, level=level,
                        noise_std=sigma * sensitivity, noise_multiplier=sigma, accountant=acct,
                        model=ProGAPModel(config, stages, layers, chosen, level=level))


def search_progap(datasets: Sequence[Data], grid: Iterable[ProGAPConfig], *, epsilon: float, delta: float,
                  seeds: Sequence[int], **kwargs) -> tuple[ProGAPConfig, list[ProGAPResult]]:
    """The configuration of ``grid`` with the best mean validation accuracy over the runs
    (``datasets[i]`` with ``seeds[i]``), and that configuration's runs.

    **Not charged:** each candidate spends on its own fresh accountant, as in the papers'
    hyperparameter searches; only the selected runs' spend is reported.
    """
    return select_on_validation(
        grid, lambda config: [run_progap(d, config, epsilon=epsilon, delta=delta, seed=s, **kwargs)
                              for d, s in zip(datasets, seeds)], lambda r: r.val_accuracy)
