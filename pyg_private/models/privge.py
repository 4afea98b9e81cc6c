r"""The PrivGE recipe (Li et al., CIKM 2024; Sec. 3 and 4.1): local-DP node features,
a PPR embedding over the public graph, and an MLP head.

``raw features -> one local-DP release per node -> PPR propagation -> MLP head``:

1. every node's feature vector is perturbed **once** per run by one of the local
   randomizers (``mechanism``): ``"hds"`` (:class:`~pyg_private.transforms.HDSFeaturePerturb`),
   the baselines ``"laplace"`` (LP), ``"piecewise"`` (PM), ``"multibit"`` (MB), or ``"none"``
   (the non-private reference: the raw features). The public ``feature_range``
   (``(0, 1)`` for Cora's binary bag-of-words) maps the features into :math:`[-1, 1]`.
   The release is charged to a fresh :class:`~pyg_private.PrivacyAccountant` on unit
   ``"local"``: every node exactly :math:`\epsilon` once. :math:`\epsilon = \infty`, or
   ``mechanism="none"``, releases the raw features and charges nothing (no protection);
2. the PPR embedding :math:`\tilde{\mathbf Z} = \sum_\ell \alpha(1-\alpha)^\ell
   (\mathbf D^{r-1}\mathbf A\mathbf D^{-r})^\ell \tilde{\mathbf X}` without self-loops (Sec. 3.2,
   Eq. 12), computed once with :func:`~pyg_private.utils.appr.appr_propagate` (``self_loops=False``).
   It uses the graph, which PrivGE takes to be public to the server (Sec. 2: the untrusted
   curator sees :math:`\mathcal V` and :math:`\mathcal E`; no edge privacy, left to future work
   in Sec. 6), and the released features only: post-processing, zero cost;
3. optionally (``standardize=True``, the default) every embedding column is centred and
   scaled to unit variance. This is post-processing of the released data too (free), and it
   puts the raw, shrunken HDS output (:math:`\mathbb E = Cx`, :math:`C \approx \epsilon/2d`)
   and the unbiased, very noisy LP/PM/MB outputs on the same scale for the head;
4. the head. **Node classification**: an MLP ``[Dropout -> Linear -> ReLU] x (L-1) ->
   Dropout -> Linear`` trained full batch with Adam and cross-entropy on the training
   nodes' **true labels** (labels are not protected in PrivGE), early stopping on the
   validation accuracy, the best-validation weights tested. **Link prediction**: the edges
   are split 85/5/10 by PyG's :class:`~torch_geometric.transforms.RandomLinkSplit` (undirected,
   one negative per validation/test edge); the propagation uses the **training edges only**;
   a pair :math:`(u, v)` is scored by an MLP on :math:`\tilde z_u \odot \tilde z_v`, trained
   with binary cross-entropy against training negatives re-drawn every epoch; metric ROC-AUC.

Differences from the authors' released code (https://github.com/Zening-Li/PrivGE, the paper's
footnote 3): full-batch training instead of mini-batches, a PyTorch ``Linear`` (with bias) head,
BCE instead of the pairwise squared loss for links, the exact (converged power-iteration) PPR
instead of backward push. The mechanisms are the paper's mathematics (Sec. 3.1, Alg. 1-2), not
the reference code's ``SquareWave``, which is not LDP (see :mod:`pyg_private.mechanisms.square_wave`).

``seed`` fixes the split, the local randomizers' generator and the head's initialisation:
the runs are reproducible and, for that reason, a *simulation* of the users' randomizers,
not a private deployment. Hyperparameters (``k``, ``alpha``, ``r``) are chosen on the
validation split and not charged (as in the paper, which tunes them with NNI).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Iterable, Literal, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from ..accounting import PrivacyAccountant
from ..metrics import roc_auc
from ..transforms import (HDSFeaturePerturb, LaplaceFeaturePerturb, MultiBitFeaturePerturb,
                          PiecewiseFeaturePerturb)
from ..utils.appr import appr_propagate
from .selection import select_on_validation

__all__ = ["PrivGEConfig", "PrivGEResult", "privge_grid", "perturb_features", "privge_embedding", "link_split",
           "run_privge_node", "run_privge_link", "search_privge", "roc_auc", "MECHANISMS"]

MECHANISMS = ("hds", "laplace", "piecewise", "multibit", "none")
Mechanism = Literal["hds", "laplace", "piecewise", "multibit", "none"]


@dataclass(frozen=True)
class PrivGEConfig:
    """One PrivGE configuration: the mechanism, its ``k``, the propagation and the head.

    ``k`` is the number of coordinates a node perturbs (HDS, PM, MB; ignored by LP and
    ``"none"``); ``None`` means the reference code's default for PM/MB
    (:math:`\\lfloor\\epsilon/2.5\\rfloor`, :math:`\\lfloor\\epsilon/2.18\\rfloor`, at least 1)
    and is not allowed for HDS. ``steps=None`` truncates the PPR series at
    :math:`m = \\lceil\\log(\\mathrm{tol})/\\log(1-\\alpha)\\rceil` steps (the weight left,
    :math:`(1-\\alpha)^m \\le` ``tol``, is ``appr_propagate``'s APPNP tail: 88 steps for
    :math:`\\alpha = 0.1` and ``tol = 1e-4``); an integer fixes :math:`m`; ``math.inf``
    iterates ``appr_propagate`` to convergence (slower; the examples use the finite
    default).
    The head defaults are the Cora node-classification values of the authors' released scripts
    (the paper tunes with NNI at :math:`\\epsilon = 1` and prints no values).
    """

    mechanism: Mechanism = "hds"
    k: Optional[int] = 20
    alpha: float = 0.1
    r: float = 0.1
    steps: Optional[float] = None
    tol: float = 1e-4
    feature_range: tuple = (0.0, 1.0)
    standardize: bool = True
    hidden: int = 128
    layers: int = 2
    dropout: float = 0.5
    lr: float = 1e-2
    weight_decay: float = 5e-4
    epochs: int = 300
    patience: int = 50

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"`mechanism` must be one of {MECHANISMS}; got {self.mechanism!r}")
        if self.mechanism == "hds" and self.k is None:
            raise ValueError("HDS needs an explicit `k` (a free hyperparameter of PrivGE's Alg. 2)")
        if self.layers < 1:
            raise ValueError("`layers` must be >= 1")

    @property
    def private(self) -> bool:
        return self.mechanism != "none"


@dataclass
class PrivGEResult:
    """What one run measured (validation and test accuracy or ROC-AUC).

    **What a result holds.** Only what was released or is public, plus the evaluation the run was asked for: the
    configuration; the cost (``epsilon`` and ``accountant``, public records of the events); and the accuracies
    on your own splits, statistics of the private data that the guarantee does not cover (report them as an
    evaluation, not as a private release). Never the graph, the features, a noise-free propagation, solver
    diagnostics, per-example gradients or a generator: ``pickle``, ``torch.save`` and ``copy.deepcopy`` of a
    result carry nothing else (tested by ``tests/test_saved_state_privacy.py``).
    """

    config: PrivGEConfig
    epsilon: float
    task: str  # "node" (accuracy) or "link" (ROC-AUC)
    val: float
    test: float
    accountant: PrivacyAccountant = field(repr=False)
    k_used: Optional[int] = None  # the k the mechanism used (the resolved default for k=None)


def privge_grid(base: PrivGEConfig = PrivGEConfig(), **choices: Sequence) -> list[PrivGEConfig]:
    """Every combination of ``choices`` applied to ``base``."""
    names = list(choices)
    return [dataclasses.replace(base, **dict(zip(names, values)))
            for values in itertools.product(*(choices[n] for n in names))]


# ----------------------------------------------------------------------------- embedding
def _transform(config: PrivGEConfig, epsilon: float, accountant: PrivacyAccountant,
               generator: Optional[torch.Generator]):
    common = dict(feature_range=config.feature_range, clamp=True, accountant=accountant, generator=generator)
    if config.mechanism == "hds":
        return HDSFeaturePerturb(epsilon, config.k, **common)
    if config.mechanism == "laplace":
        return LaplaceFeaturePerturb(epsilon, **common)
    if config.mechanism == "piecewise":
        return PiecewiseFeaturePerturb(epsilon, config.k, **common)
    return MultiBitFeaturePerturb(epsilon, config.k, **common)


def _releases(config: PrivGEConfig, epsilon: float) -> bool:
    eps = float(epsilon)
    if math.isnan(eps) or eps <= 0:
        raise ValueError(f"`epsilon` must be > 0 (or math.inf); got {epsilon!r}")
    return config.private and not math.isinf(eps)


def perturb_features(data: Data, config: PrivGEConfig, epsilon: float, accountant: PrivacyAccountant,
                     seed: Optional[int] = None) -> tuple[Tensor, Optional[int]]:
    """The released feature matrix (float32) and the ``k`` used: one local-DP release of every
    node, charged once to ``accountant``; the raw features (uncharged) for ``"none"`` or
    :math:`\\epsilon = \\infty`. ``data`` is not modified."""
    x = data.x
    if not _releases(config, epsilon):
        return x.detach().float().clone(), None
    gen = None if seed is None else torch.Generator(device=x.device).manual_seed(int(seed))
    t = _transform(config, float(epsilon), accountant, gen)
    out = t(Data(x=x, num_nodes=x.size(0)))
    k_used = out.ldp.get("k")
    return out.x.float(), k_used


def privge_embedding(x_released: Tensor, edge_index: Tensor, config: PrivGEConfig) -> Tensor:
    """The PPR embedding of released features (post-processing): ``appr_propagate`` with
    ``r``, ``alpha``, ``steps`` and no self-loops, then the optional column standardisation."""
    z = appr_propagate(x_released, edge_index, alpha=config.alpha, steps=propagation_steps(config), r=config.r,
                       self_loops=False, tol=config.tol)
    if config.standardize:
        z = _standardize(z)
    return z


def propagation_steps(config: PrivGEConfig) -> float:
    """The ``steps`` passed to ``appr_propagate`` (see :class:`PrivGEConfig`)."""
    if config.steps is not None:
        return config.steps
    if config.alpha >= 1.0:
        return 0
    return max(1, math.ceil(math.log(config.tol) / math.log1p(-config.alpha)))


def _standardize(z: Tensor) -> Tensor:
    mean = z.mean(0, keepdim=True)
    std = z.std(0, keepdim=True)
    return (z - mean) / torch.where(std > 0, std, torch.ones_like(std))


# ----------------------------------------------------------------------------- heads
def _mlp(in_dim: int, out_dim: int, config: PrivGEConfig) -> nn.Sequential:
    mods: list[nn.Module] = []
    dim = in_dim
    for _ in range(config.layers - 1):
        mods += [nn.Dropout(config.dropout), nn.Linear(dim, config.hidden), nn.ReLU()]
        dim = config.hidden
    mods += [nn.Dropout(config.dropout), nn.Linear(dim, out_dim)]
    return nn.Sequential(*mods)


def _train_early_stopping(model: nn.Module, config: PrivGEConfig, loss_fn, val_fn, test_fn) -> tuple[float, float]:
    """Full-batch Adam on ``loss_fn()``; keeps the weights of the best ``val_fn()`` (patience
    ``config.patience``) and returns (best validation score, ``test_fn()`` with them)."""
    opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    best, since = (-1.0, None), 0
    for _ in range(int(config.epochs)):
        model.train()
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            score = val_fn()
        if score > best[0]:
            best, since = (score, copy.deepcopy(model.state_dict())), 0
        else:
            since += 1
            if since >= config.patience:
                break
    model.load_state_dict(best[1])
    model.eval()
    with torch.no_grad():
        return best[0], test_fn()


def _fit_node_head(z: Tensor, data: Data, config: PrivGEConfig) -> tuple[float, float]:
    y = data.y
    model = _mlp(z.size(1), int(y.max()) + 1, config)
    tr, va, te = data.train_mask, data.val_mask, data.test_mask

    def accuracy(mask: Tensor) -> float:
        return float((model(z[mask]).argmax(-1) == y[mask]).double().mean())

    return _train_early_stopping(model, config, lambda: F.cross_entropy(model(z[tr]), y[tr]),
                                 lambda: accuracy(va), lambda: accuracy(te))


def _embedding(data: Data, edge_index: Tensor, config: PrivGEConfig, epsilon: float, seed: int,
               embedding: Optional[tuple]) -> tuple[Tensor, PrivacyAccountant, Optional[int]]:
    """``(z, accountant, k_used)``: the given ``embedding``, or one release of the features
    (on a fresh accountant) propagated over ``edge_index``."""
    if embedding is not None:
        return embedding
    acct = PrivacyAccountant()
    x_rel, k_used = perturb_features(data, config, epsilon, acct, seed)
    return privge_embedding(x_rel, edge_index, config), acct, k_used


def run_privge_node(data: Data, config: PrivGEConfig, epsilon: float, seed: int = 0, *,
                    embedding: Optional[tuple[Tensor, PrivacyAccountant, Optional[int]]] = None) -> PrivGEResult:
    """PrivGE node classification on ``data`` (``x``, ``edge_index``, ``y`` and the three masks):
    validation and test accuracy.

    One release per call, charged to a fresh accountant (``result.accountant``). ``embedding``
    reuses ``(z, accountant, k_used)`` computed by :func:`privge_embedding` for the same data,
    configuration (mechanism, k, propagation) and seed (the search's cache)."""
    z, acct, k_used = _embedding(data, data.edge_index, config, epsilon, seed, embedding)
    torch.manual_seed(int(seed))
    val, test = _fit_node_head(z, data, config)
    return PrivGEResult(config, float(epsilon), "node", val, test, acct, k_used)


# ----------------------------------------------------------------------------- links
def link_split(data: Data, seed: int = 0, val: float = 0.05, test: float = 0.10) -> tuple[Data, Data, Data]:
    """PyG ``RandomLinkSplit`` (undirected, one sampled non-edge per validation/test edge), seeded.

    Returns ``(train, val, test)``: ``train.edge_index`` holds the training edges only (both
    directions), the graph the propagation may use; ``val``/``test`` carry ``edge_label_index``
    and ``edge_label`` (1 edge, 0 non-edge)."""
    from torch_geometric.transforms import RandomLinkSplit

    with _seeded(seed):
        split = RandomLinkSplit(num_val=val, num_test=test, is_undirected=True, add_negative_train_samples=False,
                                neg_sampling_ratio=1.0)
        base = Data(x=data.x, edge_index=data.edge_index, num_nodes=data.num_nodes)
        return split(base)


@contextlib.contextmanager
def _seeded(seed: int):
    """Seed torch, NumPy and ``random`` (PyG's negative sampling draws from the latter two),
    restoring the caller's states afterwards."""
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    torch.manual_seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    random.seed(int(seed))
    try:
        yield
    finally:
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def _fit_link_head(z: Tensor, train: Data, val: Data, test: Data, config: PrivGEConfig) -> tuple[float, float]:
    from torch_geometric.utils import negative_sampling

    model = _mlp(z.size(1), 1, config)
    pos = train.edge_label_index  # the training edges, one direction each

    def score(pairs: Tensor) -> Tensor:
        return model(z[pairs[0]] * z[pairs[1]]).view(-1)

    def loss() -> Tensor:
        neg = negative_sampling(train.edge_index, num_nodes=z.size(0), num_neg_samples=pos.size(1))
        target = torch.cat([torch.ones(pos.size(1), device=z.device), torch.zeros(neg.size(1), device=z.device)])
        return F.binary_cross_entropy_with_logits(torch.cat([score(pos), score(neg)]), target)

    return _train_early_stopping(model, config, loss,
                                 lambda: roc_auc(score(val.edge_label_index), val.edge_label),
                                 lambda: roc_auc(score(test.edge_label_index), test.edge_label))


def run_privge_link(data: Data, config: PrivGEConfig, epsilon: float, seed: int = 0, *,
                    split: Optional[tuple[Data, Data, Data]] = None,
                    embedding: Optional[tuple[Tensor, PrivacyAccountant, Optional[int]]] = None) -> PrivGEResult:
    """PrivGE link prediction: validation and test ROC-AUC.

    The edges are split by :func:`link_split` (``seed``) unless ``split`` is given; every
    node's features are released once (fresh accountant), propagated over the **training
    edges only**, and pairs are scored by the Hadamard-product MLP. ``embedding`` as in
    :func:`run_privge_node` (computed on ``split[0].edge_index``)."""
    train, val, test = link_split(data, seed) if split is None else split
    z, acct, k_used = _embedding(data, train.edge_index, config, epsilon, seed, embedding)
    with _seeded(seed):
        v, t = _fit_link_head(z, train, val, test, config)
    return PrivGEResult(config, float(epsilon), "link", v, t, acct, k_used)


# ----------------------------------------------------------------------------- search
PROPAGATION_FIELDS = ("alpha", "r", "steps", "tol", "standardize")
RELEASE_FIELDS = ("mechanism", "k", "feature_range")


def search_privge(datasets: Sequence[Data], grid: Iterable[PrivGEConfig], *, epsilon: float, seeds: Sequence[int],
                  task: Literal["node", "link"] = "node", splits: Optional[Sequence] = None,
                  cache: Optional[dict] = None) -> tuple[PrivGEConfig, list[PrivGEResult]]:
    """The configuration with the best mean validation score over ``datasets`` (one per seed),
    and its runs. Not charged (hyperparameter selection on validation, as the paper).

    The releases are cached per (run, mechanism, k, epsilon) and the embeddings per
    propagation setting, in ``cache`` when given: each run's release is drawn once and
    reused by every propagation setting and head, exactly as :func:`run_privge_node` with
    that seed would draw it."""
    cache = {} if cache is None else cache

    def evaluate(config: PrivGEConfig) -> list[PrivGEResult]:
        runs = []
        for i, (d, s) in enumerate(zip(datasets, seeds)):
            emb = embedding_cached(d, config, epsilon, s, cache, key=(task, i),
                                   edge_index=splits[i][0].edge_index if task == "link" else d.edge_index)
            if task == "node":
                runs.append(run_privge_node(d, config, epsilon, s, embedding=emb))
            else:
                runs.append(run_privge_link(d, config, epsilon, s, split=splits[i], embedding=emb))
        return runs

    return select_on_validation(grid, evaluate, lambda r: r.val)


def embedding_cached(data: Data, config: PrivGEConfig, epsilon: float, seed: int, cache: dict, *, key: tuple,
                     edge_index: Tensor) -> tuple[Tensor, PrivacyAccountant, Optional[int]]:
    """``(z, accountant, k_used)`` for one run, the release and the embedding memoised in ``cache``."""
    eps = math.inf if not _releases(config, epsilon) else float(epsilon)
    rkey = ("release",) + key + (seed, eps) + tuple(getattr(config, f) for f in RELEASE_FIELDS) * (eps != math.inf)
    if rkey not in cache:
        acct = PrivacyAccountant()
        x_rel, k_used = perturb_features(data, config, epsilon, acct, seed)
        cache[rkey] = (x_rel, acct, k_used)
    x_rel, acct, k_used = cache[rkey]
    zkey = ("embedding",) + rkey + tuple(getattr(config, f) for f in PROPAGATION_FIELDS)
    if zkey not in cache:
        cache[zkey] = privge_embedding(x_rel, edge_index, config)
    return cache[zkey], acct, k_used
