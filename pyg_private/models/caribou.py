r"""The CARIBOU node-classification recipe and its baselines, in one code path.

``encoder -> L2 rows -> private aggregation -> head`` (Zheng et al. 2025, arXiv:2506.22727,
Sec. 4.5 and Fig. 4; GAP-style):

1. an **edge-free encoder** (an MLP with a linear classifier, trained on the training
   nodes; the hidden output of width ``encoder_dim`` is the embedding). Under
   edge-level DP it sees no edge and costs nothing; under node-level DP it is trained
   with DP-SGD (Opacus) and charged to the same accountant;
2. the embedding's rows put on the unit ball (:func:`~pyg_private.transforms.l2_row_normalize`);
3. the aggregation, computed **once** (cached):
   ``"caribou"``: :class:`~pyg_private.nn.ContractiveGraphLayer`, features
   :math:`[\mathbf{X}^{(0)} \| \mathbf{X}^{(K)}]`; ``"gap"``:
   :class:`~pyg_private.nn.GAPAggregation`, all hops
   :math:`[\mathbf{X}^{(0)} \| \cdots \| \mathbf{X}^{(K)}]`; ``"mlp"``: :math:`\mathbf{X}^{(0)}` only;
4. a **head** on those features, GAP's: one MLP per block (``X^(0)``, ``X^(K)``, each hop),
   concatenated, then an MLP (full-batch Adam under edge-level DP; DP-SGD under
   node-level DP, the aggregation being a released, public input by then).

``epsilon = inf`` runs the same pipeline without noise (the non-private reference).
Node level splits nothing by hand: one noise multiplier is shared by the encoder's
DP-SGD, the aggregation and the head's DP-SGD and calibrated so that their
composition meets ``(epsilon, delta)`` (GAP's joint calibration).

**What the node-level guarantee covers.** ``data`` is a fixed, public universe of
``num_nodes`` nodes (``data.num_nodes`` must equal it) with public masks. A node-level
neighbour removes one node: its slot stays, with a zero feature row and no edges (its label
is then unused). The pipeline treats such a slot as **absent**, and so every node whose own feature row is zero
(whatever its edges, so that removing a neighbour never changes another node's status): it is no
DP-SGD example of
the encoder or the head (the Poisson rate, step count and gradient averaging come from the
public size of ``train_mask``, not from the number of present nodes), its embedding row is
zeroed before the aggregation, and
:class:`~pyg_private.nn.ContractiveGraphLayer` (level ``"node"``) bounds the difference a
present and an absent node make on its ``num_nodes`` output rows. Every output has
``num_nodes`` rows, so presence is seen only through noisy values. By adaptive composition
the encoder (DP-SGD), the aggregation (given the released encoder) and the head (DP-SGD on
the released aggregation) compose on unit ``"node"``. The accuracies are measured on the
present nodes of the validation and test masks and are not themselves private releases.
The declared bounds are checked before anything is trained or charged.

Hyperparameter search (:func:`search_caribou`) picks the configuration with the best
mean **validation** accuracy. Like the paper, the search itself is **not charged** to
the budget: every candidate run spends its own budget on its own accountant, and only
the selected run's spend is reported. Releasing the selected configuration is itself a
release; a strict analysis would have to account for it.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Iterable, Literal, Optional, Sequence

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import MLP

from ..accounting import PrivacyAccountant, Unit, calibrate_noise, gdp_event, subsampled_gaussian_event
from ..accounting.contractive import contraction_factor
from ..nn._call_checks import reject_sampled_batch
from ..nn import ContractiveGraphLayer, GAPAggregation
from ..transforms import l2_row_normalize
from ..utils import simple_undirected
from ..utils.degree_bounds import check_declared_bounds, present_nodes
from .edge_free_mlp import fit_edge_free_mlp
from .node_training import accuracy, fit_dp_sgd, fit_full_batch
from .recipe_inputs import prepare_node_data, trains_with_autograd
from .selection import check_charged_search, select_on_validation, select_privately
from ..accounting.hyperparameter_tuning import TrialDistribution

__all__ = ["CaribouConfig", "CaribouResult", "CaribouModel", "config_grid", "run_caribou", "search_caribou",
           "node_level_noise_multiplier"]

Method = Literal["caribou", "gap", "mlp"]


@dataclass(frozen=True)
class CaribouConfig:
    r"""One configuration of the pipeline (the searched hyperparameters and the fixed ones).

    Args:
        method: ``"caribou"``, ``"gap"`` or ``"mlp"``.
        K, contraction, alpha1, beta: the aggregation's hops and CGL weights (``gap`` uses K only).
        hidden: the width of the encoder's and the head's hidden layer.
        encoder_dim: the embedding width; ``None`` skips the encoder (raw features).
        normalize: ``"normalize"`` (unit rows, GAP's choice) or ``"clip"`` (rows outside
            the ball shrink; rows inside keep their norm).
        epochs, lr, weight_decay, dropout: Adam's epochs, learning rate and weight decay,
            and the dropout of the hidden layers, for the encoder and the head.
        batch_norm: BatchNorm after every hidden layer at edge level (GAP's and ProGAP's MLPs);
            node level never normalises across examples (DP-SGD's examples must stay separate).
        checkpoint: ``"best_val"`` restores each fit's epoch of best validation accuracy, ``"last"``
            keeps the last; ``None`` (default) is ``"best_val"`` at edge level (features and labels
            public, the head trained on a release: free) and ``"last"`` at node level, where
            ``"best_val"`` is refused (it reads private validation labels).
        batch_size, max_grad_norm: DP-SGD's (node level only).
        use_x0: give the head :math:`\mathbf{X}^{(0)}` next to the aggregation. ``False``
            leaves it out: the encoder fits the training nodes' embeddings almost perfectly,
            so a head trained on the same nodes may learn to ignore the aggregation (on Cora
            without noise: 63.6% with :math:`\mathbf{X}^{(0)}`, 82.7% without).
        edge_free_candidate: at edge level, also train a head on :math:`\mathbf{X}^{(0)}` alone (the
            edge-free MLP inside the pipeline, free at edge level: features and labels are public
            there), compare the encoder's own classifier on the raw features and the plain PyG MLP of
            :func:`~pyg_private.models.edge_free_mlp.fit_edge_free_mlp` too, and keep whichever
            has the best validation accuracy, so a reported private figure is never below the MLP it
            contains by more than the selection's noise
            (:attr:`CaribouResult.candidate` says which won). Node level trains one head only (a
            second DP-SGD head and the selection on private labels would cost budget).
    """

    method: Method = "caribou"
    K: int = 2
    contraction: float = 0.9
    alpha1: float = 1.0
    beta: float = 0.0
    hidden: int = 64
    encoder_dim: Optional[int] = 16
    normalize: Literal["normalize", "clip"] = "normalize"
    epochs: int = 100
    lr: float = 1e-2
    weight_decay: float = 0.0
    dropout: float = 0.5
    batch_norm: bool = True
    checkpoint: Optional[Literal["best_val", "last"]] = None
    batch_size: int = 256
    max_grad_norm: float = 1.0
    use_x0: bool = True
    edge_free_candidate: bool = True

    def __post_init__(self) -> None:
        if self.method not in ("caribou", "gap", "mlp"):
            raise ValueError(f"`method` must be 'caribou', 'gap' or 'mlp'; got {self.method!r}")
        if self.checkpoint not in ("best_val", "last", None):
            raise ValueError(f"`checkpoint` must be 'best_val', 'last' or None; got {self.checkpoint!r}")


@dataclass
class CaribouResult:
    """What one run measured.

    **What a result holds.** Only what was released or is public, plus the evaluation the run was asked for: the
    configuration; the cost (``epsilon`` and ``accountant``, public records of the events); ``model``, the
    released pipeline (:class:`CaribouModel`); and the accuracies on your own splits, statistics of the private
    data that the guarantee does not cover (report them as an evaluation, not as a private release). Never the
    graph, the features, a noise-free propagation, solver diagnostics, per-example gradients or a generator:
    ``pickle``, ``torch.save`` and ``copy.deepcopy`` of a result carry nothing else (tested by
    ``tests/test_saved_state_privacy.py``).
    """

    config: CaribouConfig
    epsilon: float
    val_accuracy: float
    test_accuracy: float
    noise_std: float = 0.0  # per entry and hop of the aggregation (0: no noise)
    noise_multiplier: float = 0.0
    accountant: Optional[PrivacyAccountant] = field(default=None, repr=False)
    model: Optional["CaribouModel"] = field(default=None, repr=False)
    #: which head the validation selection kept: ``"private"`` (on the aggregation), ``"edge-free"``
    #: (on X0 alone, or the encoder's classifier) or ``"mlp"`` (the plain PyG MLP; see
    #: ``CaribouConfig.edge_free_candidate``)
    candidate: str = "private"


@dataclass
class CaribouModel:
    """The trained pipeline, for inference on a graph of the user's choice.

    :meth:`logits` runs the encoder, the unit rows, the aggregation and the head. The
    aggregation is the layer that was trained with, which caches its latest release:
    the same graph and features as its last call cost nothing; any other (for example
    test-on-full after training on a subgraph, or the training graph again after that)
    is a **new release**, charged to the run's accountant under the same noise multiplier.

    It holds released or public data only: the encoder and the head (trained on public features and
    labels at edge level, with DP-SGD at node level, Opacus' per-example state removed) and the
    aggregation layer, whose ``pickle`` / ``state_dict`` keep its noisy release without the graph and
    without its generator (see :class:`~pyg_private.nn.ContractiveGraphLayer`).
    """

    config: CaribouConfig
    encoder: Optional[nn.Module]
    layer: Optional[nn.Module]
    head: nn.Module
    level: str = "edge"
    #: the head is the encoder's own classifier on the raw features (the edge-free candidate that won)
    raw: bool = False

    @torch.no_grad()
    def logits(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Class scores of every node of the graph ``(x, edge_index)`` (at node level: of every
        slot of the universe; absent slots, zero rows without edges, get zero embeddings)."""
        absent = None
        if self.level == "node":  # as in training: a node without features gets a zero row
            absent = ~(x != 0).flatten(1).any(dim=1)
        x = x.float()
        if self.raw:
            self.head.eval()
            return self.head(x)
        if self.encoder is not None:
            self.encoder.eval()
            x = self.encoder(x)
        x0 = l2_row_normalize(x.detach(), mode=self.config.normalize)
        if absent is not None:
            x0[absent] = 0.0
        z = _aggregate(self.config, self.layer, x0, edge_index)
        self.head.eval()
        return self.head(z)


def _mlp(channels: list[int], config: CaribouConfig, plain_last: bool = True, norm: bool = False) -> nn.Module:
    return MLP(channels, act="selu", norm="batch_norm" if norm else None, dropout=float(config.dropout),
               plain_last=plain_last)


class MultiInputHead(nn.Module):
    """GAP's classification module: one MLP per input block (``X^(0)``, ``X^(K)``, or every
    hop), their outputs concatenated, then a final MLP."""

    def __init__(self, num_blocks: int, block_channels: int, config: CaribouConfig, out_channels: int,
                 norm: bool = False) -> None:
        super().__init__()
        self.block_channels = block_channels
        self.blocks = nn.ModuleList(_mlp([block_channels, config.hidden], config, plain_last=False, norm=norm)
                                    for _ in range(num_blocks))
        self.combine = _mlp([num_blocks * config.hidden, config.hidden, out_channels], config, norm=norm)

    def forward(self, z: Tensor) -> Tensor:
        parts = z.split(self.block_channels, dim=-1)
        return self.combine(torch.cat([block(p) for block, p in zip(self.blocks, parts)], dim=-1))


def _dp_sgd_steps(num_train: int, config: CaribouConfig) -> tuple[float, int]:
    """Poisson rate and number of steps of one DP-SGD fit, exactly as :func:`fit_dp_sgd`
    runs it: Opacus' ``DPDataLoader`` samples at rate ``1 / len(loader)`` (not
    ``batch / n``) and takes ``len(loader) = ceil(n / batch)`` steps per epoch."""
    batch = min(config.batch_size, num_train)
    per_epoch = math.ceil(num_train / batch)
    return 1.0 / per_epoch, config.epochs * per_epoch


def node_level_noise_multiplier(*, epsilon: float, delta: float, config: CaribouConfig, num_train: int) -> float:
    r"""The one noise multiplier :math:`\sigma` that the encoder's DP-SGD, the aggregation
    (:math:`\mu = \sqrt{\rho_K}/\sigma` for ``caribou``, :math:`\sqrt K/\sigma` for ``gap``)
    and the head's DP-SGD share, so that their composition on unit ``"node"`` is
    ``(epsilon, delta)``-DP, computed with the accountant's own composition."""
    rate, steps = _dp_sgd_steps(num_train, config)
    hops = {"caribou": contraction_factor(config.K, config.contraction), "gap": float(config.K), "mlp": 0.0}
    rho = hops[config.method]
    fits = 2 if config.encoder_dim is not None else 1

    def epsilon_of(sigma: float) -> float:
        acct = PrivacyAccountant()  # the fits share sigma, rate and length: one event for all their steps
        acct.register(subsampled_gaussian_event(noise_multiplier=sigma, sample_rate=rate, steps=fits * steps))
        if rho > 0:
            acct.register(gdp_event(unit=Unit.NODE, mu=math.sqrt(rho) / sigma, name="aggregation"))
        return acct.epsilon(Unit.NODE, delta)

    return calibrate_noise(epsilon_of, epsilon, min_scale=1e-3, max_scale=1e4, rtol=1e-6)


def _check_bounds(data: Data, *, method: str, level: str, min_degree: int, degree_floor: bool,
                  max_degree: Optional[int], num_nodes: Optional[int]) -> Optional[Tensor]:
    """Check the declared bounds against ``data`` before anything is trained or charged (the
    rule of :func:`~pyg_private.utils.degree_bounds.check_declared_bounds`, which the layer
    applies again), and return the present nodes at node level (``None`` at edge level).

    Raising on a violation reveals that the bounds are false for ``data`` (one bit); the
    guarantee is stated over the graphs satisfying them.
    """
    if level == "edge" and method != "caribou":
        return None  # GAP's and the MLP's releases use no declared bound
    n = data.x.size(0)
    degree = torch.bincount(simple_undirected(data.edge_index, n)[0][0], minlength=n)
    present = present_nodes(degree, data.x) if level == "node" else None
    if method == "mlp":  # node level, no aggregation: no degree bound is used, only the universe
        if num_nodes is not None and int(num_nodes) != n:
            raise ValueError(f"`num_nodes` (the public universe) must equal data.num_nodes; got {num_nodes!r}")
        return present
    check_declared_bounds(degree, level=level, min_degree=min_degree, degree_floor=degree_floor,
                          max_degree=max_degree, num_nodes=num_nodes, present=present)
    return present


@trains_with_autograd
def run_caribou(data: Data, config: CaribouConfig, *, epsilon: float, delta: float, level: str = "edge",
                min_degree: Optional[int] = None, max_degree: Optional[int] = None, num_nodes: Optional[int] = None,
                degree_floor: bool = False, accountant: Optional[PrivacyAccountant] = None,
                seed: Optional[int] = None, num_classes: Optional[int] = None,
                clean_graph: bool = False) -> CaribouResult:
    """Train and evaluate one configuration on ``data`` (``x``, ``edge_index``, ``y`` and masks).

    ``epsilon = math.inf`` runs without noise. ``min_degree`` (with ``degree_floor``) and,
    at node level, ``max_degree`` and ``num_nodes`` are the **public** bounds of
    :class:`~pyg_private.nn.ContractiveGraphLayer`, checked against ``data`` before
    anything is trained or charged: ``min_degree`` at most the smallest degree minus one
    (0 with isolated nodes) unless ``degree_floor``; at node level ``data.num_nodes ==
    num_nodes`` (the node universe, see the module notes) and every degree ``<= max_degree``
    (bound the degrees first). ``seed`` fixes the initialisation and the noise for
    reproducible experiments (it voids the guarantee). The releases are charged to
    ``accountant`` (a fresh one when ``None``), returned in the result. ``num_classes`` sets
    the width of the heads; pass it at node level, where it is otherwise read off the labels
    (``data.y.max() + 1``), which a neighbouring dataset could change if it held the only
    node of the last class and its slot's label were dropped.

    ``min_degree`` is used by ``method="caribou"`` alone; ``None`` declares ``0``, a bound that
    holds for every graph (isolated nodes included), at the price of the larger sensitivity.
    ``clean_graph`` drops self-loops and merges duplicate and one-directional entries first (see
    :mod:`~pyg_private.models.recipe_inputs` for where that is valid); nodes with ``y < 0`` are
    taken out of the masks with a warning.
    """
    reject_sampled_batch("run_caribou", data)  # a sampled subgraph is refused with the reason, before anything
    data = prepare_node_data(data, recipe="run_caribou", clean=clean_graph, level=level)
    if min_degree is None:
        min_degree = 0
    if level == "node" and config.checkpoint == "best_val":
        raise ValueError("`checkpoint='best_val'` reads the validation nodes' features and labels, private at node "
                         "level and charged by no event: use 'last' (or None) at node level")
    if level not in ("edge", "node"):
        raise ValueError(f"`level` must be 'edge' or 'node'; got {level!r}")
    if level == "node" and config.method == "gap":
        raise ValueError("the GAP baseline here is edge-level only (GAP-NDP's accounting is disputed, Zheng et al. 2025, Sec. 6)")
    private = math.isfinite(epsilon)
    acct = PrivacyAccountant() if accountant is None else accountant
    gen = None
    if seed is not None:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
    present = _check_bounds(data, method=config.method, level=level, min_degree=min_degree,
                            degree_floor=degree_floor, max_degree=max_degree, num_nodes=num_nodes)
    x, y, edge_index = data.x.float(), data.y, data.edge_index
    # labels are read only where they are used: absent slots may carry any label (e.g. -1)
    used = data.train_mask | data.val_mask | data.test_mask
    if present is not None:
        used = used & present
    if num_classes is None:  # the classes are public (the width of every head); read off the labels if not given
        num_classes = int(y[used].max()) + 1 if bool(used.any()) else 2
    elif isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"`num_classes` must be an integer >= 2; got {num_classes!r}")
    if bool(used.any()) and (int(y[used].max()) >= num_classes or int(y[used].min()) < 0):
        raise ValueError(f"`data.y` must hold class indices in [0, num_classes={num_classes}) on the nodes of the "
                         "masks (absent slots excepted)")
    node_private = private and level == "node"
    num_train = int(data.train_mask.sum())  # public: the split's size over the node universe
    train, val, test = data.train_mask, data.val_mask, data.test_mask
    own = (data.x != 0).flatten(1).any(dim=1)  # a node's own data decides whether it is an example
    if node_private:  # absent nodes are no examples and are not evaluated
        # the examples and the zeroed rows follow the node's *own* features, never its edges: a
        # zero-feature node kept "present" by one neighbour would otherwise turn absent when that
        # neighbour is removed, changing two DP-SGD examples and its own row of X0
        train, val, test = train & own, val & own, test & own
    sigma = node_level_noise_multiplier(epsilon=epsilon, delta=delta, config=config,
                                        num_train=num_train) if node_private else 0.0

    best_val = config.checkpoint == "best_val" or (config.checkpoint is None and level == "edge")
    norm = config.batch_norm and level == "edge"

    def fit(model: nn.Module, features: Tensor, name: str) -> nn.Module:
        if node_private:
            return fit_dp_sgd(model, features, y, train, noise_multiplier=sigma, accountant=acct, epochs=config.epochs,
                              lr=config.lr, batch_size=config.batch_size, max_grad_norm=config.max_grad_norm,
                              name=name, generator=gen, num_examples=num_train)
        return fit_full_batch(model, features, y, train, epochs=config.epochs, lr=config.lr,
                              weight_decay=config.weight_decay, val_mask=val if best_val else None)

    # 1-2. edge-free encoder, rows on the ball
    encoder = classifier = None
    raw = x
    if config.encoder_dim is not None:
        encoder = _mlp([x.size(1), config.hidden, config.encoder_dim], config, plain_last=False, norm=norm)
        classifier = fit(nn.Sequential(encoder, nn.Linear(config.encoder_dim, num_classes)), x, "encoder")
        with torch.no_grad():
            x = encoder(x)
    x0 = l2_row_normalize(x.detach(), mode=config.normalize)
    if node_private:
        x0[~own] = 0.0  # a node without features has a zero row (an absent node also has no edges)

    # 3. the aggregation, computed once
    noise_std = 0.0
    multiplier = sigma
    layer = None
    if config.method == "mlp":
        z = x0
    else:
        noise = ({"noise_multiplier": sigma} if node_private else {"epsilon": epsilon, "delta": delta}) \
            if private else {"noise_multiplier": 0.0}
        if config.method == "caribou":
            layer = ContractiveGraphLayer(config.K, config.contraction, config.alpha1, config.beta, level=level,
                                          min_degree=min_degree, max_degree=max_degree, num_nodes=num_nodes,
                                          degree_floor=degree_floor, accountant=acct if private else None,
                                          cached=True, generator=gen, **noise)
            noise_std = layer.noise_std
        else:
            layer = GAPAggregation(config.K, accountant=acct if private else None, cached=True, generator=gen, **noise)
            noise_std = layer.noise_multiplier * layer.sensitivity
        z = _aggregate(config, layer, x0, edge_index)
        multiplier = layer.noise_multiplier

    # 4. the head on the released features
    blocks = z.size(1) // x0.size(1)
    head = fit(MultiInputHead(blocks, x0.size(1), config, num_classes, norm=norm) if blocks > 1
               else _mlp([z.size(1), config.hidden, num_classes], config, norm=norm), z, "head")
    candidate, val_acc = "private" if layer is not None else "edge-free", accuracy(head, z, y, val)
    model = CaribouModel(config, encoder, layer, head, level="node" if node_private else "edge")
    if config.edge_free_candidate and not node_private:
        # edge-free heads (post-processing at edge level: features and labels are public there), kept
        # if they validate better: a head on X0 alone, and the encoder's own classifier on the features
        if layer is not None:
            plain = fit(_mlp([x0.size(1), config.hidden, num_classes], config, norm=norm), x0, "edge-free head")
            plain_val = accuracy(plain, x0, y, val)
            if plain_val > val_acc:
                candidate, val_acc, head, z = "edge-free", plain_val, plain, x0
                model = CaribouModel(config, encoder, None, plain, level="edge")
        if classifier is not None:
            own_val = accuracy(classifier, raw, y, val)
            if own_val > val_acc:
                candidate, val_acc, head, z = "edge-free", own_val, classifier, raw
                model = CaribouModel(config, None, None, classifier, level="edge", raw=True)
        mlp = fit_edge_free_mlp(raw, y, train, val, num_classes, seed=seed)  # the plain PyG MLP
        mlp_val = accuracy(mlp, raw, y, val)
        if mlp_val > val_acc:
            candidate, val_acc, head, z = "mlp", mlp_val, mlp, raw
            model = CaribouModel(config, None, None, mlp, level="edge", raw=True)
    return CaribouResult(config=config, epsilon=epsilon, val_accuracy=val_acc,
                         test_accuracy=accuracy(head, z, y, test), noise_std=noise_std,
                         noise_multiplier=multiplier, accountant=acct, candidate=candidate, model=model)


def _aggregate(config: CaribouConfig, layer: Optional[nn.Module], x0: Tensor, edge_index: Tensor) -> Tensor:
    """The head's input: ``[X0 || X^K]`` (CARIBOU), the hops (GAP) or ``X0`` (MLP)."""
    if layer is None:
        return x0
    z = layer(x0, edge_index).to(x0.dtype)
    if config.method == "caribou":
        return torch.cat([x0, z], dim=-1) if config.use_x0 else z
    return z if config.use_x0 else z[:, x0.size(1):]


def config_grid(base: CaribouConfig, **choices: Sequence) -> list[CaribouConfig]:
    """Every combination of ``choices`` (field name -> values) applied to ``base``."""
    names = list(choices)
    return [dataclasses.replace(base, **dict(zip(names, values)))
            for values in itertools.product(*(choices[k] for k in names))]


def search_caribou(datasets: Sequence[Data], grid: Iterable[CaribouConfig], *, epsilon: float, delta: float,
                   seeds: Sequence[Optional[int]], tuning: Optional[TrialDistribution] = None,
                   accountant: Optional[PrivacyAccountant] = None,
                   **kwargs) -> tuple[CaribouConfig, list[CaribouResult]]:
    """The configuration of ``grid`` with the best mean validation accuracy over the runs
    (``datasets[i]`` with ``seeds[i]``), and that configuration's runs.

    **Not charged** (``tuning=None``): each candidate spends on its own fresh accountant; see the
    module notes. **Charged** (``tuning`` a trial distribution of
    :mod:`~pyg_private.accounting.hyperparameter_tuning`): private selection with a random number of
    trials (Papernot and Steinke, ICLR 2022), edge level, one graph (``datasets=[data]``,
    ``seeds=[None]``), every candidate a private method (``"caribou"`` or ``"gap"``): one event on
    ``accountant`` for the whole search, before the first trial (see
    :func:`~pyg_private.models.search_progap`).
    """
    if tuning is None:
        return select_on_validation(
            grid, lambda config: [run_caribou(d, config, epsilon=epsilon, delta=delta, seed=s, **kwargs)
                                  for d, s in zip(datasets, seeds)], lambda r: r.val_accuracy)
    grid = list(grid)
    check_charged_search(datasets, seeds, kwargs, accountant)
    if any(c.method == "mlp" for c in grid):
        raise ValueError("a charged search compares private runs; method='mlp' releases nothing (it is every "
                         "private run's edge-free candidate already)")

    def cost(config: CaribouConfig):  # the one GDP event a candidate's run registers, from public settings
        if config.method == "caribou":
            return ContractiveGraphLayer(config.K, config.contraction, config.alpha1, config.beta, level="edge",
                                         min_degree=kwargs.get("min_degree") or 0,
                                         degree_floor=kwargs.get("degree_floor", False),
                                         epsilon=epsilon, delta=delta).event()
        return GAPAggregation(config.K, epsilon=epsilon, delta=delta).event()

    trial_cost = max((cost(c) for c in grid), key=lambda e: e.mu)
    chosen = select_privately(
        grid, lambda config, ledger: run_caribou(datasets[0], config, epsilon=epsilon, delta=delta,
                                                 accountant=ledger, **kwargs),
        lambda r: r.val_accuracy, distribution=tuning, trial_cost=trial_cost, accountant=accountant,
        name="caribou_search")
    return chosen.config, ([] if chosen.run is None else [chosen.run])
