r"""LinkTeller: recovering private edges from a GNN's inference API by influence analysis.

An edge-inference attack in the style of Wu, Yang, Zhang and Li (2022, "LinkTeller:
Recovering Private Edges from Graph Neural Networks via Influence Analysis", IEEE S&P).
Our own implementation, written for auditing this library's layers.

Threat model
------------
The graph is secret; the attacker may query the **inference API** of a trained model (or
of one graph layer) with a node feature matrix of its choice and sees the outputs of all
nodes. In a message-passing model the output of node :math:`v` depends on the features of
node :math:`u` only when :math:`u` lies within the model's receptive field of :math:`v`,
and the dependence is strongest for direct neighbours. The attack measures it:

.. math::
    I(u, v) = \frac{\lVert f(\mathbf{X}')_v - f(\mathbf{X})_v \rVert_2}{\gamma},
    \qquad \mathbf{X}' = \mathbf{X} \text{ with row } u \text{ replaced by }
    (1 + \gamma)\,\mathbf{x}_u,

a finite-difference estimate of the influence of :math:`\mathbf{x}_u` on
:math:`f(\mathbf{X})_v` along :math:`\mathbf{x}_u` (LinkTeller's scaling perturbation;
a zero row therefore has no influence at all). Pairs with a large (symmetrised)
influence are predicted to be edges; the attack is scored by ROC-AUC and by
precision at the true number of edges among the attacked pairs (LinkTeller's headline
metric when the attacker knows the graph density).

Cost and interpretation
-----------------------
* The influence of every node in a set ``nodes`` needs :math:`1 + |\text{nodes}|` queries:
  one unperturbed baseline and one per perturbed node.
* Against a layer whose inference step reuses the graph **without noise** (for example
  GCON's inference, :meth:`pyg_private.nn.PerturbedAPPRConv.forward`, or any layer run
  with ``noise_multiplier=0``), a high AUC does **not** contradict the layer's
  training-time guarantee: that guarantee covers the training release, not an unlimited
  noiseless inference API over the private graph.
* Against a layer where each query is a new charged release (for example
  :class:`pyg_private.nn.ContractiveGraphLayer` with noise and ``cached=False``), each of
  the :math:`1 + |\text{nodes}|` queries composes: the accountant's total **after** the
  attack is the epsilon the attack's success should be compared with, not the epsilon of
  a single forward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Callable, Optional

import torch
from torch import Tensor

from ..metrics.auc import roc_auc

__all__ = [
    "LinkTellerResult",
    "influence_matrix",
    "linkteller_scores",
    "sample_attack_nodes",
    "linkteller_attack",
]


@dataclass(frozen=True)
class LinkTellerResult:
    """Outcome of :func:`linkteller_attack`.

    Attributes:
        auc (float): ROC-AUC of the pair scores against the edge labels (ties averaged).
        advantage (float): ``max(auc, 1 - auc)``.
        precision_at_k (float): precision of the ``k = positives`` highest-scoring pairs,
            ties at the ``k``-th score averaged (the expected precision under random
            tie-breaking), so a constant score gives the edge density.
        positives (int): attacked pairs that are edges.
        negatives (int): attacked pairs that are not edges.
        queries (int): calls made to ``query`` (``1 + len(nodes)``).
        scores (Tensor): score of every attacked pair, shape ``[P]`` (float64).
        labels (Tensor): whether every attacked pair is an edge, shape ``[P]`` (bool).
        pairs (Tensor): the attacked pairs as node ids, shape ``[2, P]``; pair ``p`` is
            ``(nodes[i], nodes[j])`` for the ``p``-th ``i < j`` in row-major order.

    **Ground truth, returned knowingly.** ``labels`` with ``pairs`` are the private graph's edges among the
    attacked nodes (read off the ``edge_index`` you passed): the auditor's own data (the inputs you passed, or
    the audit's own coins), kept because the attack is scored against it. It is **not** released data:
    ``pickle`` / ``torch.save`` of this result keep it as it is, so store a result with the private data and
    publish its summary fields (``auc``, ``advantage``, ``precision_at_k``, the counts) instead.
    """

    auc: float
    advantage: float
    precision_at_k: float
    positives: int
    negatives: int
    queries: int
    scores: Tensor
    labels: Tensor
    pairs: Tensor


# --------------------------------------------------------------------------- validation

def _check_features(x) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"`x` must be a torch.Tensor; got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"`x` must be a node feature matrix of shape [N, F]; got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"`x` must be a floating-point tensor; got dtype {x.dtype}")
    if x.size(0) < 1:
        raise ValueError("`x` has no rows")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("`x` contains NaN or infinite values")
    return x


def _check_perturbation(perturbation) -> float:
    if isinstance(perturbation, bool) or not isinstance(perturbation, Real):
        raise TypeError(f"`perturbation` must be a real number; got {type(perturbation).__name__}")
    p = float(perturbation)
    if not (math.isfinite(p) and p > 0.0):
        raise ValueError(f"`perturbation` must be positive and finite; got {perturbation!r}")
    return p


def _check_index(index, name: str, num_nodes: int, *, min_size: int, unique: bool) -> Tensor:
    if not isinstance(index, Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor of node ids; got {type(index).__name__}")
    if index.dtype == torch.bool or index.is_floating_point() or index.is_complex():
        raise ValueError(f"`{name}` must be an integer tensor of node ids; got dtype {index.dtype}")
    if index.dim() != 1:
        raise ValueError(f"`{name}` must be 1-D; got shape {tuple(index.shape)}")
    if index.numel() < min_size:
        raise ValueError(f"`{name}` must hold at least {min_size} node(s); got {index.numel()}")
    index = index.long()
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= num_nodes):
        raise ValueError(f"`{name}` must lie in [0, {num_nodes}); got values in "
                         f"[{int(index.min())}, {int(index.max())}]")
    if unique and torch.unique(index).numel() != index.numel():
        raise ValueError(f"`{name}` must not repeat a node")
    return index


def _check_edge_index(edge_index, num_nodes: int) -> Tensor:
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"`edge_index` must be a torch.Tensor; got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"`edge_index` must have shape [2, E]; got {tuple(edge_index.shape)}")
    if edge_index.dtype == torch.bool or edge_index.is_floating_point() or edge_index.is_complex():
        raise ValueError(f"`edge_index` must be an integer tensor; got dtype {edge_index.dtype}")
    edge_index = edge_index.long()
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"`edge_index` must lie in [0, {num_nodes})")
    return edge_index


def _check_num_nodes(num_nodes, name: str = "num_nodes") -> int:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, Integral):
        raise TypeError(f"`{name}` must be an integer; got {type(num_nodes).__name__}")
    if int(num_nodes) < 1:
        raise ValueError(f"`{name}` must be >= 1; got {num_nodes}")
    return int(num_nodes)


def _run_query(query: Callable[[Tensor], Tensor], x: Tensor, shape: Optional[torch.Size], call: str) -> Tensor:
    out = query(x)
    if not isinstance(out, Tensor):
        raise ValueError(f"`query` must return a Tensor of shape [N, C]; the {call} returned "
                         f"{type(out).__name__}")
    if out.dim() != 2 or out.size(0) != x.size(0):
        raise ValueError(f"`query` must return a Tensor of shape [N, C] with N = {x.size(0)}; the {call} "
                         f"returned shape {tuple(out.shape)}")
    if shape is not None and out.shape != shape:
        raise ValueError(f"`query` returned shape {tuple(out.shape)} for the {call}, but "
                         f"{tuple(shape)} for the baseline")
    if not (out.is_floating_point() or out.is_complex()):
        out = out.double()
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"`query` returned NaN or infinite values for the {call}")
    return out.detach()


# --------------------------------------------------------------------------- the attack

@torch.no_grad()
def influence_matrix(query: Callable[[Tensor], Tensor], x: Tensor, nodes: Tensor, *,
                     perturbation: float = 1e-2, targets: Optional[Tensor] = None) -> Tensor:
    r"""Finite-difference influence of every node in ``nodes`` on every node in ``targets``.

    ``base = query(x)``; then for every ``u = nodes[i]``, ``x'`` is ``x`` with row ``u``
    replaced by ``(1 + perturbation) * x[u]`` and

    .. math::
        I[i, j] = \lVert \mathrm{query}(x')[t_j] - \mathrm{base}[t_j] \rVert_2 / \gamma,
        \qquad t = \text{targets}, \ \gamma = \text{perturbation}.

    Makes **exactly** ``1 + len(nodes)`` calls to ``query``, in order (the baseline first).
    When ``query`` is a noisy layer that charges an accountant at every forward, every
    call is a new release and is charged: the attack's privacy cost is the composition of
    ``1 + len(nodes)`` releases. A node whose feature row is zero has zero influence
    (LinkTeller's scaling perturbation leaves it unchanged).

    Runs under :func:`torch.no_grad`.

    Args:
        query (Callable[[Tensor], Tensor]): the inference API: a feature matrix ``[N, F]``
            in, the outputs of all ``N`` nodes ``[N, C]`` out (finite).
        x (Tensor): the base feature matrix ``[N, F]`` (floating point, finite).
        nodes (Tensor): distinct node ids to perturb, shape ``[m]``.
        perturbation (float, optional): the relative scaling :math:`\gamma > 0`.
            (default: ``1e-2``)
        targets (Tensor, optional): node ids whose outputs are compared, shape ``[t]``
            (default: ``nodes``).

    Returns:
        Tensor: the influence matrix, shape ``[m, t]``, float64; row ``i`` is the
        perturbed node ``nodes[i]``, column ``j`` the target ``targets[j]``.

    Raises:
        TypeError: a non-tensor ``x``/``nodes``/``targets`` or a non-real ``perturbation``.
        ValueError: ``x`` not 2-D floating point and finite, ``nodes`` empty, repeated or
            out of range, ``targets`` out of range, a non-positive or infinite
            ``perturbation``, or a query output that is not a finite ``[N, C]`` tensor of
            the baseline's shape.
    """
    x = _check_features(x)
    n = x.size(0)
    nodes = _check_index(nodes, "nodes", n, min_size=1, unique=True)
    targets = nodes if targets is None else _check_index(targets, "targets", n, min_size=1, unique=False)
    gamma = _check_perturbation(perturbation)

    base = _run_query(query, x, None, "baseline query")
    base_t = base[targets.to(base.device)].to(torch.float64 if not base.is_complex() else torch.complex128)
    influence = torch.empty(nodes.numel(), targets.numel(), dtype=torch.float64)
    x = x.detach()
    for i, u in enumerate(nodes.tolist()):
        x_pert = x.clone()  # a fresh tensor per query: a query may keep a reference to its input
        x_pert[u] = x[u] * (1.0 + gamma)
        out = _run_query(query, x_pert, base.shape, f"query perturbing node {u}")
        diff = out[targets.to(out.device)].to(base_t.dtype) - base_t
        influence[i] = torch.linalg.vector_norm(diff, dim=-1).cpu() / gamma
    return influence


def linkteller_scores(influence: Tensor, symmetric: bool = True) -> Tensor:
    r"""Pair scores from an influence matrix over one node set (``targets = nodes``).

    Args:
        influence (Tensor): square influence matrix ``[m, m]`` from :func:`influence_matrix`.
        symmetric (bool, optional): score pair :math:`(i, j)` by
            :math:`(I[i, j] + I[j, i]) / 2` (an edge is undirected, so both directions are
            evidence); otherwise by :math:`I[i, j]`. (default: :obj:`True`)

    Returns:
        Tensor: the score matrix ``[m, m]`` (symmetric when ``symmetric``).
    """
    if not isinstance(influence, Tensor):
        raise TypeError(f"`influence` must be a torch.Tensor; got {type(influence).__name__}")
    if influence.dim() != 2 or influence.size(0) != influence.size(1):
        raise ValueError(f"`influence` must be a square matrix [m, m]; got shape {tuple(influence.shape)}")
    if symmetric:
        return (influence + influence.transpose(0, 1)) / 2
    return influence.clone()


def sample_attack_nodes(edge_index: Tensor, num_nodes: int, num_edges: int, *,
                        generator: Optional[torch.Generator] = None) -> Tensor:
    """Nodes to attack: the endpoints of ``num_edges`` edges drawn uniformly.

    The edges are drawn without replacement from the distinct undirected non-loop edges
    of ``edge_index`` (so a pair stored in both directions is not drawn twice as often),
    which guarantees that the pairs induced by the returned nodes contain at least
    ``num_edges`` positives.

    Args:
        edge_index (Tensor): the graph, shape ``[2, E]``.
        num_nodes (int): number of nodes.
        num_edges (int): edges to draw, ``1 <= num_edges <=`` number of distinct edges.
        generator (torch.Generator, optional): for reproducibility.

    Returns:
        Tensor: the distinct endpoints, sorted, ``long``.
    """
    num_nodes = _check_num_nodes(num_nodes)
    edge_index = _check_edge_index(edge_index, num_nodes)
    if isinstance(num_edges, bool) or not isinstance(num_edges, Integral):
        raise TypeError(f"`num_edges` must be an integer; got {type(num_edges).__name__}")
    edges = _undirected_edges(edge_index.cpu(), num_nodes)
    if not 1 <= int(num_edges) <= edges.size(1):
        raise ValueError(f"`num_edges` must lie in [1, {edges.size(1)}] (the distinct undirected edges); "
                         f"got {num_edges}")
    chosen = torch.randperm(edges.size(1), generator=generator)[: int(num_edges)]
    return torch.unique(edges[:, chosen])  # sorted


def _undirected_edges(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The distinct undirected non-loop edges as ``[2, E']`` with row 0 < row 1."""
    lo = torch.minimum(edge_index[0], edge_index[1])
    hi = torch.maximum(edge_index[0], edge_index[1])
    keep = lo != hi
    key = torch.unique(lo[keep] * num_nodes + hi[keep])
    return torch.stack([key // num_nodes, key % num_nodes])


def _precision_at_k(scores: Tensor, labels: Tensor, k: int) -> float:
    """Precision of the top ``k`` scores, ties at the ``k``-th score shared in proportion."""
    order = torch.sort(scores, descending=True).values
    threshold = order[k - 1]
    above = scores > threshold
    tier = scores == threshold
    n_above = int(above.sum())
    tier_pos = int((tier & labels).sum())
    expected = int((above & labels).sum()) + (k - n_above) * tier_pos / int(tier.sum())
    return float(expected / k)


def linkteller_attack(query: Callable[[Tensor], Tensor], x: Tensor, edge_index: Tensor, nodes: Tensor, *,
                      perturbation: float = 1e-2, num_nodes: Optional[int] = None,
                      symmetric: bool = True) -> LinkTellerResult:
    r"""Run LinkTeller on every unordered pair of ``nodes`` and score it against the truth.

    The attack targets the **inference API**: ``query`` maps a feature matrix of the
    attacker's choice to the outputs of all nodes on the secret graph. It computes
    :func:`influence_matrix` over ``nodes`` (exactly ``1 + len(nodes)`` queries), scores
    every pair ``i < j`` with :func:`linkteller_scores`, labels it by whether
    ``(nodes[i], nodes[j])`` is an edge of ``edge_index`` (either direction; self-loops
    are never pairs), and reports the ROC-AUC (:func:`pyg_private.metrics.roc_auc`) and
    the precision at ``k``, the number of positive pairs.

    ``edge_index`` is the ground truth the attacker does not see; it is only used to label
    the pairs. Against a layer whose inference reuses the graph without noise (for example
    GCON's inference step, :meth:`pyg_private.nn.PerturbedAPPRConv.forward`), a high AUC
    does not contradict the layer's training-time guarantee. Against a layer where each
    query is a charged release, the accountant's total after the attack (all
    ``1 + len(nodes)`` releases composed) is the epsilon to compare the attack with.

    Args:
        query (Callable[[Tensor], Tensor]): the inference API, ``[N, F] -> [N, C]``.
        x (Tensor): base features ``[N, F]``.
        edge_index (Tensor): the true graph ``[2, E]`` (labels only).
        nodes (Tensor): at least two distinct node ids to attack (for example from
            :func:`sample_attack_nodes`).
        perturbation (float, optional): relative scaling of a perturbed row.
            (default: ``1e-2``)
        num_nodes (int, optional): number of nodes; must equal ``x.size(0)``
            (default: ``x.size(0)``).
        symmetric (bool, optional): average both directions' influence.
            (default: :obj:`True`)

    Returns:
        LinkTellerResult: the metrics, the pair scores, labels and pairs.

    Raises:
        ValueError: invalid inputs (see :func:`influence_matrix`), fewer than two nodes, or
            no positive or no negative pair among ``nodes``.
    """
    x = _check_features(x)
    n = x.size(0)
    if num_nodes is not None and _check_num_nodes(num_nodes) != n:
        raise ValueError(f"`num_nodes` ({num_nodes}) must equal the number of rows of `x` ({n})")
    edge_index = _check_edge_index(edge_index, n)
    nodes = _check_index(nodes, "nodes", n, min_size=2, unique=True)
    _check_perturbation(perturbation)

    # the labels first: a pair set with one class only is rejected before any query is made
    m = nodes.numel()
    pos = torch.full((n,), -1, dtype=torch.long)
    pos[nodes.cpu()] = torch.arange(m)
    ei = edge_index.cpu()
    a, b = pos[ei[0]], pos[ei[1]]
    inside = (a >= 0) & (b >= 0)
    adj = torch.zeros(m, m, dtype=torch.bool)
    adj[a[inside], b[inside]] = True
    adj[b[inside], a[inside]] = True
    iu, ju = torch.triu_indices(m, m, offset=1)
    labels = adj[iu, ju]
    positives = int(labels.sum())
    negatives = labels.numel() - positives
    if positives == 0:
        raise ValueError("no attacked pair is an edge: choose `nodes` that contain edges (see sample_attack_nodes)")
    if negatives == 0:
        raise ValueError("every attacked pair is an edge: the AUC is undefined without non-edges")

    calls = 0

    def counted(features: Tensor) -> Tensor:
        nonlocal calls
        calls += 1
        return query(features)

    influence = influence_matrix(counted, x, nodes, perturbation=perturbation)
    scores = linkteller_scores(influence, symmetric=symmetric)[iu, ju]
    auc = roc_auc(scores, labels)
    nodes_cpu = nodes.cpu()
    return LinkTellerResult(
        auc=auc,
        advantage=max(auc, 1.0 - auc),
        precision_at_k=_precision_at_k(scores, labels, positives),
        positives=positives,
        negatives=negatives,
        queries=calls,
        scores=scores,
        labels=labels,
        pairs=torch.stack([nodes_cpu[iu], nodes_cpu[ju]]),
    )
