r"""The GCON node-classification recipe (Wei et al., arXiv:2407.05034, Algorithm 1) and a
non-private GCN reference.

``edge-free encoder -> unit rows -> APPR propagation -> objective-perturbed linear head``:

1. a 2-layer MLP encoder trained on the labelled training nodes only (no edge: no cost);
   its hidden layer of width ``encoder_dim`` (:math:`d_1`) is the embedding;
2. every embedding row normalised to norm 1 (Algorithm 1, line 2);
3. :class:`~pyg_private.nn.PerturbedAPPRConv`: the deterministic propagation, then one
   private fit of the head (one :math:`(\epsilon, \delta)` event on unit ``"edge"``). With
   ``pseudo_labels=True`` the loss covers every node (``n_1 = n``), the unlabelled ones with
   the encoder's predictions (edge-free, so free);
4. predictions by the private one-hop inference (Eq. 16; see the layer's caveat) or, with
   ``inference="public"``, the full propagation; both read the private graph at inference, outside
   the guarantee of the fit (tables label GCON's rows "head private, inference on the private graph");
   ``inference="released"`` instead spends half of ``(epsilon, delta)`` on the head and half on one
   GAP aggregation of the embeddings (:class:`~pyg_private.nn.GAPAggregation`, ``K = 1``:
   :math:`\mathbf{X}^{(1)} = \mathrm{normalize}(\mathbf{A}\mathbf{X}_0 + \mathbf{Z})`), and predicts
   with the one-hop rule of Eq. 16 on that release, :math:`\alpha_I\mathbf{X}_0 + (1 - \alpha_I)
   \mathbf{X}^{(1)}`: the predictions are then post-processing of two releases, whose events
   compose on the ledger to at most ``(epsilon, delta)``;
5. ``calibrate=True``: the head's class scores recalibrated per class, :math:`a_j s_j + b_j`,
   fitted on the training nodes' **edge-free** scores :math:`\mathbf{x}_{0,i}^\top\theta_j`
   (released head, public features and labels at edge level: post-processing, free);
6. ``edge_free_candidate=True``: the encoder's own predictions and those of a plain PyG MLP on the
   raw features (:func:`~pyg_private.models.edge_free_mlp.fit_edge_free_mlp`; edge-free, free) are
   kept instead of the head's when they validate better, so the recipe is never below the MLP it
   contains by more than the selection's noise. The
   comparison reads the head's validation accuracy, so it is as private as the predictions: covered
   with ``inference="released"``, reading the private graph (uncharged) otherwise.

**Why the head needs step 5.** In the regime the privacy calibration puts the head in
(:math:`\Lambda` large against the loss' curvature, so :math:`\Theta` stays near 0), the minimiser
is close to one Newton step from 0: :math:`\theta_j \approx -\frac1{\Lambda n_1}\sum_i
\ell'(0; y_{ij})\mathbf{z}_i`, which for the soft-margin loss is
:math:`\frac{1}{2c\Lambda n_1}\big(2 n_j \boldsymbol\mu_j - n_1\boldsymbol\mu\big)` (:math:`n_j`
rows of class :math:`j` with mean :math:`\boldsymbol\mu_j`, all rows' mean :math:`\boldsymbol\mu`).
The common term does not change the argmax; the class sizes :math:`n_j` do: every node scores
highest on the largest class unless its class mean is far closer. On Amazon Computers (10
classes, the largest 37.5% of the nodes) the head predicted that class for almost every node
(38.5% accuracy at epsilon 1 and 4 alike, while its own encoder reached 73.1%); Facebook Page-Page
(4 classes of similar sizes) was unaffected. A per-class scale and offset learnt on public data
undo the :math:`n_j` weighting (measured: 38.5 -> 85.9 on Computers at epsilon 4, seed 0).

Hyperparameters are chosen on the validation split by :func:`search_gcon`, not charged
(as the paper, following its references [9], [25], [26]).
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Iterable, Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, MLP
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from ..accounting import PrivacyAccountant, approximate_dp_event, check_plan
from ..nn._call_checks import reject_sampled_batch
from ..nn import GAPAggregation, PerturbedAPPRConv
from ..nn.perturbed_appr_conv import GCONFit
from ..transforms import l2_row_normalize
from .edge_free_mlp import fit_edge_free_mlp
from .node_training import fit_full_batch
from .recipe_inputs import prepare_node_data, trains_with_autograd
from .selection import select_on_validation

__all__ = ["GCONConfig", "GCONResult", "gcon_grid", "encode", "run_gcon", "search_gcon", "run_gcn"]


@dataclass(frozen=True)
class GCONConfig:
    """One configuration (the paper's searched hyperparameters and the fixed ones)."""

    # defaults: alpha, steps, the encoder and the inference were chosen on Cora-ML (20 per class / 500 / 1000);
    # Lambda, the raw input, the calibration and the edge-free candidate across Computers, Cornell, Cornell-year
    # and Cora (benchmarks/recipes_across_datasets.py --sweep; the README gives the figures)
    alpha: float = 0.8
    steps: tuple = (2,)
    regularization: float = 0.02  # Lambda (with the calibration, 0.02 measured best across graphs; 2.0 before it)
    encoder_dim: int = 64  # d_1 (the encoder's hidden width; with embedding="logits" the rows are its c logits)
    loss: Literal["soft_margin", "pseudo_huber"] = "soft_margin"
    huber_delta: Optional[float] = None
    pseudo_labels: bool = True  # the edge-free encoder's labels for the unlabelled rows (more rows: less noise)
    alpha_inference: Optional[float] = 0.1  # Eq. 16's restart: one hop, 0.9 of the weight on the neighbours
    inference: Literal["private", "public", "released"] = "private"
    omega: float = 0.9
    epochs: int = 200
    lr: float = 1e-2
    weight_decay: float = 5e-4
    dropout: float = 0.0  # the encoder's (0.5 cost about 3 points on Cora-ML: its logits are the embedding)
    embedding: Literal["hidden", "logits"] = "logits"  # the encoder's hidden layer (d_1 wide) or its c logits
    normalize_input: bool = False  # the encoder reads row-normalised features (rows summing to 1 in absolute value)
    sampler: Literal["safe", "float"] = "safe"  # PerturbedAPPRConv's: "float" only for benchmarks and audits
    calibrate: bool = True  # per-class scale and offset of the head's scores, fitted on edge-free scores (free)
    edge_free_candidate: bool = True  # keep the encoder's or a plain MLP's predictions when they validate better


@dataclass
class GCONResult:
    """What one run measured.

    **What a result holds.** Only what was released or is public, plus the evaluation the run was asked for: the
    configuration; the cost (``epsilon`` and ``accountant``, public records of the events); ``fit``, the public
    record of the private fit (:class:`~pyg_private.nn.GCONFit`: its solver diagnostics are for a local check
    and are dropped by every copy and pickle); and the accuracies on your own splits, statistics of the private
    data that the guarantee does not cover (report them as an evaluation, not as a private release). Never the
    graph, the features, a noise-free propagation, solver diagnostics, per-example gradients or a generator:
    ``pickle``, ``torch.save`` and ``copy.deepcopy`` of a result carry nothing else (tested by
    ``tests/test_saved_state_privacy.py``).
    """

    config: GCONConfig
    epsilon: float
    val_accuracy: float
    test_accuracy: float  # = micro-F1 for single-label classes
    fit: Optional[GCONFit] = None
    accountant: Optional[PrivacyAccountant] = field(default=None, repr=False)
    #: which predictions the validation selection kept: ``"private"`` (the head), ``"edge-free"``
    #: (the encoder's) or ``"mlp"`` (the plain PyG MLP; see ``GCONConfig.edge_free_candidate``)
    candidate: str = "private"


def _encode(data: Data, config: GCONConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-row embeddings of every node and the encoder's predicted labels (edge-free)."""
    x, y = data.x.float(), data.y
    if config.normalize_input:  # as torch_geometric.transforms.NormalizeFeatures, for any sign
        x = x / x.abs().sum(dim=-1, keepdim=True).clamp(min=1e-12)
    c = _num_classes(data)
    encoder = MLP([x.size(1), config.encoder_dim], act="selu", norm=None, plain_last=False)
    model = nn.Sequential(nn.Dropout(config.dropout), encoder, nn.Dropout(config.dropout),
                          nn.Linear(config.encoder_dim, c))
    fit_full_batch(model, x, y, data.train_mask, epochs=config.epochs, lr=config.lr, weight_decay=config.weight_decay)
    model.eval()
    with torch.no_grad():
        logits = model(x)
        emb = encoder(x) if config.embedding == "hidden" else logits
        predicted = logits.argmax(-1)
    return l2_row_normalize(emb.double(), mode="normalize"), predicted


def _num_classes(data: Data) -> int:
    """The classes: read off the labelled nodes of the masks (public at edge level)."""
    used = data.train_mask | data.val_mask | data.test_mask
    return max(int(data.y[used].max()) + 1, 2)


def calibrate_scores(edge_free_scores: torch.Tensor, y: torch.Tensor, num_classes: int,
                     max_iter: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Per-class scale :math:`a_j` and offset :math:`b_j` minimising the softmax cross-entropy of
    :math:`a_j s_{ij} + b_j` over the given rows (a convex problem, L-BFGS in float64). The scores
    are divided by their standard deviation first, which :math:`a` absorbs."""
    s = edge_free_scores.detach().to(torch.float64)
    s = s / s.std().clamp(min=1e-12)
    a = torch.ones(num_classes, dtype=torch.float64, device=s.device, requires_grad=True)
    b = torch.zeros(num_classes, dtype=torch.float64, device=s.device, requires_grad=True)
    opt = torch.optim.LBFGS([a, b], max_iter=max_iter, line_search_fn="strong_wolfe", tolerance_grad=1e-9)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(s * a + b, y)
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    scale = edge_free_scores.detach().to(torch.float64).std().clamp(min=1e-12)
    return (a.detach() / scale), b.detach()


def encode(data: Data, config: GCONConfig, seed: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The edge-free part of :func:`run_gcon` (steps 1-2): unit-row embeddings of every node
    and the encoder's predicted labels. It depends only on the encoder fields of ``config``
    and may be computed once and passed to :func:`run_gcon` as ``encoded``."""
    data = prepare_node_data(data, recipe="encode")
    if seed is not None:
        torch.manual_seed(seed)
    return _encode(data, config)


@trains_with_autograd
def run_gcon(data: Data, config: GCONConfig, *, epsilon: float, delta: float,
             accountant: Optional[PrivacyAccountant] = None, seed: Optional[int] = None,
             encoded: Optional[tuple[torch.Tensor, torch.Tensor]] = None, clean_graph: bool = False) -> GCONResult:
    """Train GCON on ``data`` and measure validation and test accuracy.

    ``seed`` fixes the encoder's initialisation and the objective noise (reproducible,
    hence not private). The fit is charged to ``accountant`` (a fresh one when ``None``).
    ``encoded`` reuses :func:`encode`'s output for the same data, encoder fields and seed.
    ``clean_graph`` drops self-loops and merges duplicate and one-directional entries first (see
    :mod:`~pyg_private.models.recipe_inputs` for where that is valid); nodes with ``y < 0`` are
    taken out of the masks with a warning.
    """
    reject_sampled_batch("run_gcon", data)  # a sampled subgraph is refused with the reason, before anything
    data = prepare_node_data(data, recipe="run_gcon", clean=clean_graph)
    acct = PrivacyAccountant() if accountant is None else accountant
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    x0, predicted = encode(data, config, seed) if encoded is None else encoded
    c = _num_classes(data)
    released = config.inference == "released"
    share = 0.5 if released else 1.0  # "released": half of the budget for the head, half for the aggregation
    layer = PerturbedAPPRConv(x0.size(1), c, alpha=config.alpha, steps=config.steps, epsilon=epsilon * share,
                              delta=delta * share,
                              regularization=config.regularization, loss=config.loss, huber_delta=config.huber_delta,
                              omega=config.omega, alpha_inference=config.alpha_inference, accountant=acct,
                              sampler=config.sampler)
    aggregation = None
    if released:
        aggregation = GAPAggregation(1, epsilon=epsilon / 2, delta=delta / 2, accountant=acct, cached=True,
                                     generator=gen, name="gcon_inference_aggregation")
        # both releases must fit before the first is charged (the head's at its (eps, delta) bound)
        check_plan(acct, [approximate_dp_event(unit="edge", epsilon=epsilon / 2, delta=delta / 2, name=layer.name),
                          aggregation.event()])
    if config.pseudo_labels:
        labels = torch.where(data.train_mask, data.y, predicted)
        fit = layer.fit(x0, data.edge_index, labels, generator=gen)
    else:
        fit = layer.fit(x0, data.edge_index, data.y, data.train_mask, generator=gen)
    if released:
        hop = aggregation(x0.float(), data.edge_index)[:, x0.size(1):].to(torch.float64)  # released, unit rows
        alpha_i = config.alpha if config.alpha_inference is None else config.alpha_inference
        one_hop = alpha_i * x0.to(torch.float64) + (1 - alpha_i) * hop
        z = torch.cat([x0.to(torch.float64) if m == 0 else one_hop for m in layer.steps], dim=-1)
        scores = z @ layer.weight.to(torch.float64)
    else:
        scores = layer(x0, data.edge_index, mode=config.inference).to(torch.float64)
    if config.calibrate:  # fitted on the training nodes' edge-free scores: released head, public rows and labels
        train = data.train_mask
        blocks = len(layer.steps)  # Z's blocks without the graph (R = I): x0 in each, divided by their number
        edge_free = torch.cat([x0[train].to(torch.float64)] * blocks, dim=-1) / blocks
        a, b = calibrate_scores(edge_free @ layer.weight.to(torch.float64), data.y[train], c)
        scores = scores * a + b
    pred = scores.argmax(-1)

    def acc(p: torch.Tensor) -> dict[str, float]:
        return {k: float((p[m] == data.y[m]).double().mean()) for k, m in (("val", data.val_mask), ("test", data.test_mask))}

    candidate, result = "private", acc(pred)
    if config.edge_free_candidate:
        plain = acc(predicted)  # the encoder's own predictions: edge-free, free at edge level
        if plain["val"] > result["val"]:
            candidate, result = "edge-free", plain
        # the plain PyG MLP on the raw features (edge-free, free at edge level)
        mlp = fit_edge_free_mlp(data.x, data.y, data.train_mask, data.val_mask, c, seed=seed)
        with torch.no_grad():
            plain = acc(mlp(data.x.float()).argmax(-1))
        if plain["val"] > result["val"]:
            candidate, result = "mlp", plain
    return GCONResult(config=config, epsilon=epsilon, val_accuracy=result["val"], test_accuracy=result["test"],
                      fit=fit, accountant=acct, candidate=candidate)


ENCODER_FIELDS = ("encoder_dim", "embedding", "dropout", "weight_decay", "epochs", "lr", "normalize_input")


def search_gcon(datasets: Sequence[Data], grid: Iterable[GCONConfig], *, epsilon: float, delta: float,
                seeds: Sequence[int], cache: Optional[dict] = None) -> tuple[GCONConfig, list[GCONResult]]:
    """The configuration with the best mean validation accuracy, and its runs (not charged).

    The edge-free encodings are computed once per run and encoder setting (kept in
    ``cache`` across calls when one is given)."""
    cache = {} if cache is None else cache

    def evaluate(config: GCONConfig) -> list[GCONResult]:
        runs = []
        for i, (d, s) in enumerate(zip(datasets, seeds)):
            key = (i, s) + tuple(getattr(config, f) for f in ENCODER_FIELDS)
            if key not in cache:
                cache[key] = encode(d, config, s)
            runs.append(run_gcon(d, config, epsilon=epsilon, delta=delta, seed=s, encoded=cache[key]))
        return runs

    return select_on_validation(grid, evaluate, lambda r: r.val_accuracy)


class _GCN(nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int, dropout: float) -> None:
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden, cached=True)
        self.conv2, self.dropout = GCNConv(hidden, out_channels, cached=True), dropout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, self.dropout, self.training)
        x = F.relu(self.conv1(x, edge_index))
        return self.conv2(F.dropout(x, self.dropout, self.training), edge_index)

    def forward_sparse(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        r"""The same two layers, :math:`\hat A\,\mathrm{relu}(\hat A X W_1 + b_1) W_2 + b_2`, with a sparse
        (COO) ``x`` and the normalised adjacency ``adj`` (:func:`gcn_norm`, self-loops included) as a
        sparse matrix: the first product costs the features' non-zeros, not ``N x F`` (Cora-ML's bag of
        words is 1.8% dense)."""
        if self.training and self.dropout > 0:  # dropout of the stored entries (the zeros stay zero)
            x = torch.sparse_coo_tensor(x.indices(), F.dropout(x.values(), self.dropout, True), x.shape)
        h = torch.sparse.mm(adj, torch.sparse.mm(x, self.conv1.lin.weight.t())) + self.conv1.bias
        h = F.dropout(F.relu(h), self.dropout, self.training)
        return torch.sparse.mm(adj, h @ self.conv2.lin.weight.t()) + self.conv2.bias


def run_gcn(data: Data, *, hidden: int = 64, epochs: int = 200, lr: float = 1e-2, weight_decay: float = 5e-4,
            dropout: float = 0.5, seed: Optional[int] = None) -> tuple[float, float]:
    """Non-private 2-layer PyG ``GCNConv`` reference: (validation, test) accuracy. Not private.

    Features with at most 10% non-zeros are multiplied as a sparse matrix (the same model and
    parameters, :meth:`_GCN.forward_sparse`); dense ones go through ``GCNConv`` itself."""
    if seed is not None:
        torch.manual_seed(seed)
    model = _GCN(data.num_features, hidden, int(data.y.max()) + 1, dropout)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    x = data.x.float()
    if x.numel() and float((x != 0).float().mean()) <= 0.1:
        ei, w = gcn_norm(data.edge_index, num_nodes=data.num_nodes, add_self_loops=True)
        adj = torch.sparse_coo_tensor(ei.flip(0), w, (data.num_nodes, data.num_nodes)).coalesce()  # row = target
        x_sparse = x.to_sparse().coalesce()

        def logits() -> torch.Tensor:
            return model.forward_sparse(x_sparse, adj)
    else:
        def logits() -> torch.Tensor:
            return model(x, data.edge_index)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        F.cross_entropy(logits()[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = logits().argmax(-1)
    return tuple(float((pred[m] == data.y[m]).double().mean()) for m in (data.val_mask, data.test_mask))


def gcon_grid(**choices: Sequence) -> list[GCONConfig]:
    """Every combination of ``choices`` applied to the default :class:`GCONConfig`."""
    names = list(choices)
    return [dataclasses.replace(GCONConfig(), **dict(zip(names, values)))
            for values in itertools.product(*(choices[k] for k in names))]

