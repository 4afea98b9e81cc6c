r"""Graph-level DP-SGD: one whole graph of a graph dataset is one example (unit ``"graph"``).

:class:`GraphDPSGD` trains any PyG graph classifier ``model(x, edge_index, batch) -> [B, C]``
(``GINConv``, ``GCNConv``, ... and a per-graph pooling such as
:func:`~torch_geometric.nn.global_add_pool` or :func:`~torch_geometric.nn.global_mean_pool`) with
DP-SGD (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Alg. 1), the graph as
the example:

1. **Poisson sampling of graphs**: at each of :math:`T` steps every graph is in the batch
   independently with the public rate :math:`q` (:mod:`pyg_private.utils.poisson_sampling`, exact
   integer trials); the batch size is random.
2. **Per-graph clipping**: the gradient :math:`g_i` of each sampled graph's loss, computed on the
   batch's disjoint union (:mod:`~pyg_private.models.per_graph_gradients`), is clipped to
   :math:`\lVert \bar g_i \rVert_2 \le C`.
3. **Gaussian noise on the clipped sum**, floating-point safe: the sum
   :math:`S = \sum_i \bar g_i` is released on a power-of-two grid :math:`\gamma` as
   :math:`\gamma(\mathrm{round}(S/\gamma) + K)`, :math:`K` exact rounded Gaussian noise of standard
   deviation :math:`\sigma C'/\gamma` with :math:`C' = C + \sqrt D\,\gamma` (the rounding's inflation of
   the sensitivity over :math:`D` parameters; :func:`~pyg_private.nn._grid_gaussian.plan_grid`), so no
   floating-point sampler touches the released weights.
4. The noisy sum is divided by the **public** expected batch size :math:`qN` (never the batch
   actually drawn) and handed to the optimizer (Adam or SGD: post-processing).

**Privacy.** Under the unit ``"graph"`` (one whole graph, with its nodes, edges, features and
label, added or removed) the clipped sum of one step changes by one clipped gradient, of norm at
most :math:`C`: the step is the sampled Gaussian mechanism, and the :math:`T` steps are accounted
by the RDP analysis of Mironov, Talwar and Zhang ("Rényi Differential Privacy of the Sampled
Gaussian Mechanism", 2019, Sec. 3.3), through Opacus, and by the privacy loss distribution of the
Poisson-subsampled Gaussian (``dp-accounting``): **one**
:func:`~pyg_private.accounting.subsampled_gaussian_event` of :math:`T` steps (rate :math:`q`,
multiplier :math:`\sigma`), registered **before** the first noise is drawn (a budget it would
exceed raises :class:`~pyg_private.PrivacyBudgetExceeded` and nothing is trained). ``epsilon`` /
``delta`` calibrate :math:`\sigma` by the ledger's own composition of that event, on top of what the
ledger has already spent on the unit (:func:`graph_dp_sgd_noise_multiplier`).

Graph-level DP-SGD is simpler than node-level DP-SGD for GNNs (Daigavane et al., "Node-Level
Differentially Private Graph Neural Networks", 2021), where one node reaches the gradients of all
the nodes within the model's receptive field and the sensitivity needs a degree bound and
subgraph sampling: the graphs of a dataset share no edge, so one graph's loss reads that graph
only and its gradient is the whole contribution of the example.

**Public quantities.** The rate, the number of steps and the normaliser come from the declared
``num_graphs`` (:func:`~pyg_private.utils.poisson_sampling.dp_sgd_plan`), never from the length
of the private dataset: under add/remove neighbours it differs between neighbours. A declared count
that differs from the true one changes the effective batch size, not the guarantee. What leaves the
run: the trained weights (a function of the noisy sums only) and the public settings. The batches
drawn, their sizes, the losses and the per-graph gradients are never stored or returned (the batch
size is not covered by the analysis: the computation's duration depends on it, which this library
does not hide).

**Refused before anything is charged**, with the reason: batch normalisation or running
statistics in the model, a release layer inside it, a model whose output for one graph depends on
the others (a probe on public random graphs), an undeclared or non-positive ``num_graphs``, rates
outside :math:`(0, 1]`, a target that cannot be met, graphs without one label each or with
non-finite features.

``epsilon=math.inf`` is the non-private reference (same sampling and optimizer, no clipping, no
noise, the mean loss of the batch drawn; nothing charged). A seeded ``generator`` makes the sampling
and the noise reproducible and **voids the guarantee**; ``secure_mode=True`` draws every random bit
from the operating system's CSPRNG.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from ..accounting import PrivacyAccountant, PrivacyEvent, subsampled_gaussian_event
from ..accounting.units import Unit
from ..accounting.validation import check_delta, check_epsilon, check_positive, check_positive_int
from ..nn._grid_gaussian import add_grid_gaussian_, plan_grid
from ..sampling.words import RandomSource, resolve_secure_mode
from ..utils.poisson_sampling import DPSGDPlan, dp_sgd_plan, poisson_indices
from .per_graph_gradients import (LossFn, check_graph_model, check_graphs_independent, clipped_gradient_sum,
                                  graph_losses)

__all__ = ["GraphDPSGDConfig", "GraphDPSGDResult", "GraphDPSGD", "graph_dp_sgd_noise_multiplier"]


@dataclass(frozen=True)
class GraphDPSGDConfig:
    """Settings of a per-graph DP-SGD run (all public).

    Args:
        epochs (int): passes over the declared number of graphs; the run has ``epochs * m`` steps,
            ``m = ceil(num_graphs / batch_size)``. (default: :obj:`30`)
        batch_size (int): the expected batch size :math:`b` (Poisson rate ``1 / m``). (default: :obj:`32`)
        max_grad_norm (float): the clipping norm :math:`C` of a graph's gradient. (default: :obj:`1.0`)
        lr (float): learning rate. (default: :obj:`0.01`)
        optimizer (str): ``"adam"`` or ``"sgd"``. (default: ``"adam"``)
        weight_decay (float): the optimizer's weight decay (post-processing). (default: :obj:`0.0`)
        chunk_size (int): graphs per vectorised backward (:func:`~pyg_private.models.per_graph_gradients.
            clipped_gradient_sum`; ``1``: one backward per graph). (default: :obj:`8`)
    """

    epochs: int = 30
    batch_size: int = 32
    max_grad_norm: float = 1.0
    lr: float = 0.01
    optimizer: str = "adam"
    weight_decay: float = 0.0
    chunk_size: int = 8

    def __post_init__(self) -> None:
        check_positive_int(self.epochs, "epochs")
        check_positive_int(self.batch_size, "batch_size")
        check_positive(self.max_grad_norm, "max_grad_norm")
        check_positive(self.lr, "lr")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"`optimizer` must be 'adam' or 'sgd'; got {self.optimizer!r}")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise ValueError(f"`weight_decay` must be >= 0; got {self.weight_decay!r}")
        check_positive_int(self.chunk_size, "chunk_size")


@dataclass
class GraphDPSGDResult:
    """What a run leaves: the trained model (released weights only), the ledger and the public
    settings of the run. Neither the batches, their sizes, the losses nor any gradient."""

    model: nn.Module
    accountant: PrivacyAccountant
    epsilon: float  #: the unit ``"graph"``'s epsilon at ``delta`` after the run (``inf``: not private)
    delta: float
    noise_multiplier: float
    sample_rate: float
    steps: int
    expected_batch: float
    max_grad_norm: Optional[float]
    granularity: Optional[float] = None  #: the grid of the noisy sums (``None`` without noise)
    event: Optional[PrivacyEvent] = None
    seconds: float = 0.0


def graph_dp_sgd_noise_multiplier(*, epsilon: float, delta: float, sample_rate: float, steps: int,
                                  accountant: Optional[PrivacyAccountant] = None,
                                  name: str = "graph_dp_sgd", rtol: float = 1e-4) -> float:
    r"""The smallest noise multiplier (within ``rtol``) such that **one**
    :func:`~pyg_private.accounting.subsampled_gaussian_event` of ``steps`` steps at ``sample_rate`` on
    unit ``"graph"``, charged to ``accountant`` (a fresh ledger when ``None``), leaves the unit at or
    below ``epsilon`` at ``delta`` (and within its budget). The search is
    :func:`~pyg_private.accounting.dp_sgd_noise_multiplier`'s; the last check is the ledger's own
    figure with exactly the event that will be charged (never above the target)."""
    eps = check_epsilon(epsilon, "epsilon")
    delta = check_delta(delta, "delta")
    acct = accountant if accountant is not None else PrivacyAccountant()
    where = acct._resolve_partition(None)
    if where is None and not acct.events_of(Unit.GRAPH) and Unit.GRAPH not in acct.budget:
        # nothing spent, no budget: the answer depends on public numbers only (cached across runs and seeds)
        return _fresh_noise_multiplier(eps, delta, float(sample_rate), int(steps), str(name), float(rtol),
                                       acct.conversion, acct.pld)
    return _noise_multiplier(eps, delta, float(sample_rate), int(steps), acct, where, str(name), float(rtol))


@functools.lru_cache(maxsize=256)
def _fresh_noise_multiplier(eps: float, delta: float, sample_rate: float, steps: int, name: str, rtol: float,
                            conversion: str, pld: bool) -> float:
    acct = PrivacyAccountant(conversion=conversion, pld=pld)
    return _noise_multiplier(eps, delta, sample_rate, steps, acct, None, name, rtol)


def _noise_multiplier(eps: float, delta: float, sample_rate: float, steps: int, acct: PrivacyAccountant,
                      where: Optional[tuple], name: str, rtol: float) -> float:
    from ..accounting.opacus_bridge import dp_sgd_noise_multiplier  # Opacus: loaded on first use

    sigma = dp_sgd_noise_multiplier(acct, target_epsilon=eps, target_delta=delta, sample_rate=sample_rate,
                                    steps=steps, unit=Unit.GRAPH, name=name, rtol=rtol, partition=where)
    limits = [(eps, delta)] + ([acct.budget[Unit.GRAPH]] if Unit.GRAPH in acct.budget else [])

    def over(s: float) -> bool:
        event = subsampled_gaussian_event(noise_multiplier=s, sample_rate=sample_rate, steps=steps, unit=Unit.GRAPH,
                                          name=name)
        return any(acct._planned_epsilon(event, d, partition=where) > e for e, d in limits)

    bump = sigma * 1e-9
    while over(sigma):  # the one event of all steps, exactly as it will be charged
        sigma += bump
        bump *= 2.0
    return sigma


def _check_graphs(graphs: Sequence[Data]) -> int:
    """The feature width of ``graphs`` (a public schema); raises before any charge on bad input."""
    if isinstance(graphs, (Data, Batch)) or not hasattr(graphs, "__len__") or not hasattr(graphs, "__getitem__"):
        raise TypeError("`graphs` must be a sequence of torch_geometric Data (a list or a PyG dataset), one per graph")
    if len(graphs) == 0:
        raise ValueError("`graphs` is empty")
    width = None
    for i in range(len(graphs)):
        g = graphs[i]
        if not isinstance(g, Data) or g.x is None or g.x.dim() != 2 or not g.x.is_floating_point():
            raise ValueError(f"graph {i} must be a Data with floating node features x of shape [n, F]")
        if width is None:
            width = g.x.size(1)
        if g.x.size(1) != width:
            raise ValueError(f"graph {i} has {g.x.size(1)} feature columns; graph 0 has {width}")
        if not bool(torch.isfinite(g.x).all()):
            raise ValueError(f"graph {i} has NaN or infinite features")
        if g.y is None or g.y.numel() != 1:
            raise ValueError(f"graph {i} must carry one label (y with one entry); got "
                             f"{None if g.y is None else tuple(g.y.shape)}")
    return int(width)


class GraphDPSGD:
    r"""Per-graph DP-SGD for a PyG graph classifier (see the module notes).

    .. code-block:: python

        acct = PrivacyAccountant(budget={"graph": (4.0, 1e-5)})
        trainer = GraphDPSGD(model, num_graphs=480, config=GraphDPSGDConfig(epochs=30, batch_size=32),
                             epsilon=4.0, delta=1e-5, accountant=acct)
        result = trainer.fit(train_graphs)          # one event on unit "graph", charged before any noise

    Args:
        model (torch.nn.Module): ``model(x, edge_index, batch) -> [B, C]`` logits, one row per graph
            (or any call through ``forward(model, batch)``). Trained in place.
        num_graphs (int): the **declared** (public) number of training graphs: sets the rate, the
            steps and the normaliser. Required.
        config (GraphDPSGDConfig, optional): the run's settings.
        noise_multiplier (float, optional): :math:`\sigma`; or give ``epsilon`` and ``delta``.
        epsilon, delta (float, optional): the target of the unit ``"graph"`` after the run
            (``epsilon=math.inf``: the non-private reference).
        accountant (PrivacyAccountant, optional): charged with the run's event (a fresh one if ``None``).
        loss_fn (callable, optional): per-graph losses ``(out [B, C], y [B]) -> [B]`` (default:
            cross-entropy). It must not mix rows.
        forward (callable, optional): ``forward(model, batch)`` (default ``model(batch.x,
            batch.edge_index, batch.batch)``).
        name (str): the event's name. (default: ``"graph_dp_sgd"``)
        secure_mode (bool, optional): every random bit from the OS's CSPRNG (``None``: the process default).
    """

    def __init__(self, model: nn.Module, *, num_graphs: Optional[int] = None,
                 config: Optional[GraphDPSGDConfig] = None, noise_multiplier: Optional[float] = None,
                 epsilon: Optional[float] = None, delta: Optional[float] = None,
                 accountant: Optional[PrivacyAccountant] = None, loss_fn: LossFn = graph_losses,
                 forward: Optional[Callable] = None, name: str = "graph_dp_sgd",
                 secure_mode: Optional[bool] = None) -> None:
        self.config = config if config is not None else GraphDPSGDConfig()
        if not isinstance(self.config, GraphDPSGDConfig):
            raise TypeError(f"`config` must be a GraphDPSGDConfig; got {type(self.config).__name__}")
        if num_graphs is None:
            raise ValueError("`num_graphs` (the public, declared number of training graphs) is required: the "
                             "sampling rate, the number of steps and the normaliser must not be read off the private "
                             "dataset, whose size differs between neighbouring datasets (one graph added or removed)")
        self.plan: DPSGDPlan = dp_sgd_plan(num_examples=num_graphs, batch_size=self.config.batch_size,
                                           epochs=self.config.epochs)
        self.num_graphs = int(num_graphs)
        if accountant is not None and not isinstance(accountant, PrivacyAccountant):
            raise TypeError(f"`accountant` must be a PrivacyAccountant; got {type(accountant).__name__}")
        check_graph_model(model)
        self.model = model
        self.loss_fn, self.forward, self.name = loss_fn, forward, str(name)
        self.secure_mode = secure_mode
        self.accountant = accountant if accountant is not None else PrivacyAccountant()
        if (noise_multiplier is None) == (epsilon is None):
            raise ValueError("give exactly one of `noise_multiplier` and `epsilon` (with `delta`)")
        self.private = not (epsilon is not None and math.isinf(float(epsilon)) and float(epsilon) > 0)
        self.delta: Optional[float] = None
        if epsilon is not None and self.private:
            if delta is None:
                raise ValueError("`epsilon` needs `delta`")
            self.epsilon = check_epsilon(epsilon, "epsilon")
            self.delta = check_delta(delta, "delta")
            self.noise_multiplier = graph_dp_sgd_noise_multiplier(
                epsilon=self.epsilon, delta=self.delta, sample_rate=self.plan.sample_rate, steps=self.plan.steps,
                accountant=self.accountant, name=self.name)
        elif epsilon is not None:  # the non-private reference
            self.epsilon, self.noise_multiplier = math.inf, 0.0
            self.delta = None if delta is None else check_delta(delta, "delta")
        else:
            self.noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
            self.epsilon = None
            self.delta = None if delta is None else check_delta(delta, "delta")

    def event(self) -> Optional[PrivacyEvent]:
        """The one event a private run registers (``None`` for the non-private reference)."""
        if not self.private:
            return None
        return subsampled_gaussian_event(
            noise_multiplier=self.noise_multiplier, sample_rate=self.plan.sample_rate, steps=self.plan.steps,
            unit=Unit.GRAPH, name=self.name,
            params={"max_grad_norm": float(self.config.max_grad_norm), "num_graphs": self.num_graphs,
                    "expected_batch": float(self.plan.expected_batch)})

    def __repr__(self) -> str:
        c = self.config
        return (f"GraphDPSGD(num_graphs={self.num_graphs}, noise_multiplier={self.noise_multiplier:.6g}, "
                f"sample_rate={self.plan.sample_rate:.6g}, steps={self.plan.steps}, max_grad_norm={c.max_grad_norm:g}, "
                f"epochs={c.epochs}, batch_size={c.batch_size}, lr={c.lr:g}, optimizer={c.optimizer!r})")

    def fit(self, graphs: Sequence[Data], *, generator: Optional[torch.Generator] = None) -> GraphDPSGDResult:
        """Train the model on ``graphs`` (see the class notes); ``generator`` seeds the sampling and
        the noise (reproducible, **voids the guarantee**). Everything is checked before the run's
        one event is registered, and the event is registered before the first noise. Every call is
        a new run on the same model, charged again."""
        t0 = time.perf_counter()
        width = _check_graphs(graphs)
        check_graph_model(self.model)  # again: the model may have changed since __init__
        check_graphs_independent(self.model, width, forward=self.forward)
        model, cfg, plan = self.model, self.config, self.plan
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no trainable parameter")
        secure = resolve_secure_mode(self.secure_mode, generator)
        source = RandomSource("cpu", generator=generator, secure=secure)
        sampling, noise_source = source.spawn(2) if generator is not None else (source, RandomSource(
            "cpu", secure=secure))
        grid = inflated = None
        event = self.event()
        if self.private:  # the grid from public quantities only, before the charge (it may raise)
            dim = sum(p.numel() for p in params)
            grid, inflated = plan_grid(std_per_sensitivity=self.noise_multiplier,
                                       sensitivity=float(cfg.max_grad_norm), dim=dim,
                                       value_bound=float(cfg.max_grad_norm) * max(self.num_graphs, 1))
            self.accountant.register(event)  # the whole run, before any noise
        opt = (torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay) if cfg.optimizer == "adam"
               else torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay))
        sizes = [p.numel() for p in params]
        model.train()
        try:
            for _ in range(plan.steps):
                chosen = poisson_indices(len(graphs), plan.sample_rate, sampling).tolist()
                picked = [graphs[i] for i in chosen]
                opt.zero_grad(set_to_none=True)
                if self.private:
                    total = clipped_gradient_sum(model, picked, max_grad_norm=float(cfg.max_grad_norm),
                                                 chunk_size=cfg.chunk_size, loss_fn=self.loss_fn,
                                                 forward=self.forward, params=params)
                    flat = total.cpu().view(1, -1)
                    del total
                    add_grid_gaussian_(flat, self.noise_multiplier * inflated, grid, noise_source)
                    flat = flat.view(-1) / plan.expected_batch
                    for p, part in zip(params, flat.split(sizes)):
                        p.grad = part.view_as(p).to(device=p.device, dtype=p.dtype)
                    del flat
                elif picked:  # the non-private reference: the mean loss of the batch drawn
                    batch = Batch.from_data_list(picked).to(params[0].device)
                    out = (self.forward or _call)(model, batch)
                    self.loss_fn(out, batch.y.view(-1)).mean().backward()
                else:
                    continue
                opt.step()
        finally:
            opt.zero_grad(set_to_none=True)
            for p in model.parameters():
                p.grad = None
            model.eval()
        eps = math.inf
        if self.private:
            d = self.delta if self.delta is not None else 1e-5
            eps = self.accountant.epsilon(Unit.GRAPH, d)
        return GraphDPSGDResult(model=model, accountant=self.accountant, epsilon=eps,
                                delta=self.delta if self.delta is not None else (1e-5 if self.private else 0.0),
                                noise_multiplier=self.noise_multiplier, sample_rate=plan.sample_rate, steps=plan.steps,
                                expected_batch=plan.expected_batch,
                                max_grad_norm=float(cfg.max_grad_norm) if self.private else None,
                                granularity=grid, event=event, seconds=time.perf_counter() - t0)


def _call(model: nn.Module, batch: Batch) -> Tensor:
    return model(batch.x, batch.edge_index, batch.batch)
