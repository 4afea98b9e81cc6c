r"""Node-level membership inference against GNNs (train on a subgraph, query the full graph).

This module measures how much a trained node classifier reveals about *which nodes it
was trained on*, in the setting of the node-level membership-inference literature for
graph neural networks (Olatunji, Nejdl and Khosla 2021, "Membership Inference Attack
on Graph Neural Networks"; the node-level DP-GNN evaluation of Daigavane, Madan, Sinha,
Thakurta, Aggarwal and Jain 2021, "Node-Level Differentially Private Graph Neural
Networks"):

1. :func:`member_split` draws the members: every candidate node is, independently, a
   member with probability ``fraction``.
2. The model is trained on :func:`member_subgraph`, the subgraph *induced* by the members
   (non-members are absent with all their edges, features and labels: the node-level
   neighbouring relation of the accountant's ``"node"`` unit).
3. The trained model is queried on the *full* graph (test-on-full), so members and
   non-members are scored in the same graph context; the attacker turns each node's
   output into a score (:func:`membership_scores`, higher = more likely a member).
4. :func:`threshold_attack` summarises how well the scores separate members from
   non-members (AUC, advantage, best balanced accuracy, TPR at low FPR);
   :func:`shadow_attack` instead learns the decision rule from a shadow model.

:func:`membership_inference` runs steps 1-4 end to end with a user-supplied trainer.

Why independent Bernoulli inclusion
-----------------------------------
With independent inclusion, the candidates' membership bits are i.i.d. coin flips that
the mechanism (training) sees only through its input, which is what one-run auditing
(Steinke, Nasr and Jagielski 2023, "Privacy Auditing with One (1) Training Run") needs
to turn the attack's guesses on many candidates of *one* training run into an epsilon
lower bound. A fixed-size split (exactly ``fraction * n`` members, drawn without
replacement) makes the bits dependent and does not satisfy that analysis.
:attr:`MembershipResult.scores` and :attr:`MembershipResult.is_member` keep the per-node
scores and bits for such a later analysis.

Caveats
-------
* The metrics are *empirical* (an attack's success on one split), not a privacy bound:
  a low AUC does not prove privacy, and the best accuracy and the TPR at low FPR pick
  their threshold on the same nodes they are evaluated on (optimistic). For a bound at
  a stated confidence see :mod:`pyg_private.audit.empirical_epsilon`.
* The neighbours of a member in the full graph include non-members, so at query time a
  member's output already differs from the one seen in training; that is the intended
  test-on-full setting, not a bug.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from ..metrics.auc import roc_auc
from .empirical_epsilon import _check_open_unit

__all__ = ["MembershipResult", "member_split", "member_subgraph", "membership_scores", "threshold_attack",
           "shadow_attack", "membership_inference", "SCORE_KINDS"]

#: The score kinds of :func:`membership_scores`.
SCORE_KINDS = ("confidence", "loss", "max_prob", "entropy")


@dataclass(frozen=True, eq=False)
class MembershipResult:
    """The outcome of a membership-inference attack.

    Instances compare by identity (they hold tensors).

    Attributes:
        auc (float): ROC-AUC of the scores, members (positives) against non-members;
            ties count one half. 0.5 means no separation.
        advantage (float): ``max(auc, 1 - auc)``: the AUC of the better of the two
            orientations of the score, in ``[0.5, 1]``.
        best_accuracy (float): the best *balanced* accuracy ``(TPR + TNR) / 2`` over all
            thresholds and both orientations ("member iff score >= t" or "< t"), in
            ``[0.5, 1]``. Chosen on the evaluated nodes themselves (optimistic).
        tpr_at_1pct_fpr (float): the largest TPR of a test "member iff score >= t" whose
            FPR is at most 1% (0 when none is), in the stated orientation (higher =
            member) only.
        tpr_at_10pct_fpr (float): the same at FPR at most 10%.
        members (int): number of members evaluated.
        nonmembers (int): number of non-members evaluated.
        scores (Tensor): float64 scores of the evaluated nodes (members and non-members,
            in node order), shape ``[members + nonmembers]``.
        is_member (Tensor): boolean membership of those nodes, aligned with ``scores``.

    **Ground truth, returned knowingly.** ``is_member`` is the member split (the training set of the attacked
    model): the auditor's own data (the inputs you passed, or the audit's own coins), kept because the attack is
    scored against it. It is **not** released data: ``pickle`` / ``torch.save`` of this result keep it as it is,
    so store a result with the private data and publish its summary fields (``auc``, ``advantage``, the TPRs,
    the counts) instead.
    """

    auc: float
    advantage: float
    best_accuracy: float
    tpr_at_1pct_fpr: float
    tpr_at_10pct_fpr: float
    members: int
    nonmembers: int
    scores: Tensor
    is_member: Tensor


# --------------------------------------------------------------------------- validation

def _check_fraction(fraction: float) -> float:
    return _check_open_unit(fraction, "fraction")


def _check_mask(mask, n: int, name: str, *, nonempty: bool = True) -> Tensor:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"`{name}` must be a boolean tensor; got "
                        f"{mask.dtype if isinstance(mask, Tensor) else type(mask).__name__}")
    if mask.dim() != 1 or mask.numel() != n:
        raise ValueError(f"`{name}` must have shape [{n}]; got {tuple(mask.shape)}")
    if nonempty and not bool(mask.any()):
        raise ValueError(f"`{name}` selects no node")
    return mask


def _check_pair(member_mask, nonmember_mask, n: int, prefix: str = "") -> tuple[Tensor, Tensor]:
    m = _check_mask(member_mask, n, f"{prefix}member_mask")
    o = _check_mask(nonmember_mask, n, f"{prefix}nonmember_mask")
    if m.device != o.device:
        raise ValueError(f"`{prefix}member_mask` and `{prefix}nonmember_mask` are on different devices")
    if bool((m & o).any()):
        raise ValueError(f"`{prefix}member_mask` and `{prefix}nonmember_mask` must be disjoint")
    return m, o


def _check_logits(logits, name: str = "logits") -> Tensor:
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        raise TypeError(f"`{name}` must be a floating-point tensor")
    if logits.dim() != 2 or logits.size(0) < 1 or logits.size(1) < 2:
        raise ValueError(f"`{name}` must have shape [N, C] with N >= 1 and C >= 2; got {tuple(logits.shape)}")
    if not bool(torch.isfinite(logits).all()):
        raise ValueError(f"`{name}` contains NaN or infinite values")
    return logits


def _check_labels(y, logits: Tensor, name: str = "y") -> Tensor:
    if not isinstance(y, Tensor) or y.dtype.is_floating_point or y.dtype == torch.bool or y.is_complex():
        raise TypeError(f"`{name}` must be an integer tensor of class labels")
    if y.dim() != 1 or y.numel() != logits.size(0):
        raise ValueError(f"`{name}` must have shape [{logits.size(0)}]; got {tuple(y.shape)}")
    c = logits.size(1)
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= c):
        raise ValueError(f"`{name}` must lie in [0, {c}) (the number of logit columns); "
                         f"got values in [{int(y.min())}, {int(y.max())}]")
    return y.to(device=logits.device, dtype=torch.long)


def _candidate_mask(candidates, n: int) -> Optional[Tensor]:
    if candidates is None:
        return None
    if not isinstance(candidates, Tensor):
        raise TypeError("`candidates` must be a boolean mask or an index tensor")
    if candidates.dtype == torch.bool:
        return _check_mask(candidates, n, "candidates", nonempty=False)
    if candidates.dtype.is_floating_point or candidates.is_complex() or candidates.dim() != 1:
        raise TypeError("`candidates` must be a boolean mask of shape [num_nodes] or a 1-D integer index tensor")
    if candidates.numel() and (int(candidates.min()) < 0 or int(candidates.max()) >= n):
        raise ValueError(f"`candidates` indices must lie in [0, {n})")
    mask = torch.zeros(n, dtype=torch.bool, device=candidates.device)
    mask[candidates.long()] = True
    return mask


# --------------------------------------------------------------------------- the split

def member_split(num_nodes: int, *, fraction: float = 0.5, generator: Optional[torch.Generator] = None,
                 candidates: Optional[Tensor] = None) -> Tensor:
    r"""Draw the members: each candidate node is a member independently with probability ``fraction``.

    The number of members is therefore :math:`\mathrm{Binomial}(n_{cand}, \text{fraction})`,
    not fixed. Independent inclusion is what lets a one-run audit bound (Steinke et al.
    2023) be applied to the attack's guesses later (see the module docstring). Nodes that
    are not candidates are neither members nor non-members: the caller excludes them from
    both training and evaluation.

    Args:
        num_nodes (int): the number of nodes of the full graph (>= 1).
        fraction (float): the inclusion probability, in ``(0, 1)``. (default: ``0.5``)
        generator (torch.Generator, optional): the randomness of the split (reproducible
            experiments). The coins are drawn on the generator's device.
        candidates (Tensor, optional): the nodes eligible for the split, as a boolean mask
            of shape ``[num_nodes]`` or a 1-D index tensor. (default: all nodes)

    Returns:
        A boolean member mask of shape ``[num_nodes]`` (on the device of ``candidates``
        when given, else on the generator's device); the non-members are
        ``candidates & ~mask``.
    """
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) or int(num_nodes) < 1:
        raise ValueError(f"`num_nodes` must be an integer >= 1; got {num_nodes!r}")
    n = int(num_nodes)
    f = _check_fraction(fraction)
    cand = _candidate_mask(candidates, n)
    device = generator.device if generator is not None else torch.device("cpu")
    coins = torch.rand(n, generator=generator, device=device, dtype=torch.float64) < f
    if cand is not None:
        coins = coins.to(cand.device) & cand
    return coins


def member_subgraph(data: Data, member_mask: Tensor) -> Data:
    """The subgraph induced by the members, with nodes relabelled ``0, ..., members - 1``.

    Every node-level attribute (``x``, ``y``, masks, ...) is restricted to the members and
    ``edge_index`` to the member-member edges (through
    :func:`torch_geometric.utils.subgraph` with ``relabel_nodes=True``, as
    :meth:`torch_geometric.data.Data.subgraph` does), edge-level attributes to the same
    edges. The attribute ``node_id`` maps each subgraph node to its index in ``data``
    (an existing ``node_id`` of ``data`` is replaced). Non-members vanish with all their
    edges, features and labels: the node-level neighbouring relation.

    Args:
        data (torch_geometric.data.Data): the full graph.
        member_mask (Tensor): boolean mask of shape ``[data.num_nodes]``, not empty.
    """
    if not isinstance(data, Data):
        raise TypeError(f"`data` must be a torch_geometric.data.Data; got {type(data).__name__}")
    n = data.num_nodes
    if n is None or n < 1:
        raise ValueError("`data` has no nodes")
    mask = _check_mask(member_mask, int(n), "member_mask")
    edge_index = data.edge_index if "edge_index" in data else None
    if edge_index is not None:
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError("`data.edge_index` must be a LongTensor of shape [2, E]")
        mask = mask.to(edge_index.device)
    sub = data.subgraph(mask)
    sub.node_id = mask.nonzero().view(-1)
    return sub


# --------------------------------------------------------------------------- scores

def _log_prob_of(logits: Tensor, y: Tensor) -> Tensor:
    r""":math:`\log p_y` accurate also when :math:`p_y \approx 1`: with :math:`d_c = l_c - l_y`
    (:math:`d_y` left out) and :math:`m = \max_c d_c`, it is
    :math:`-\operatorname{log1p}(\sum_c e^{d_c})` when :math:`m \le 0`, else
    :math:`-(m + \log(e^{-m} + \sum_c e^{d_c - m}))`. (``log_softmax`` rounds
    :math:`\log(1 - 10^{-18})` to 0, which ties all confident members.)"""
    d = logits - logits.gather(1, y.view(-1, 1))
    d = d.scatter(1, y.view(-1, 1), float("-inf"))
    m = d.max(dim=1).values
    shift = m.clamp_min(0.0)
    rest = (d - shift.view(-1, 1)).exp().sum(dim=1)
    return torch.where(m <= 0, -torch.log1p(rest), -(shift + torch.log(torch.exp(-shift) + rest)))


def membership_scores(logits: Tensor, y: Optional[Tensor] = None, kind: str = "confidence") -> Tensor:
    r"""Per-node membership scores from a model's logits; higher means "more likely a member".

    Computed in float64 (``"loss"`` stays resolved for confident predictions, where
    :math:`p_y` rounds to 1):

    * ``"confidence"``: :math:`p_y`, the softmax probability of the true label;
    * ``"loss"``: :math:`\log p_y`, the negative cross-entropy (a monotone transform of
      ``"confidence"``: the same AUC, better resolved near 1);
    * ``"max_prob"``: :math:`\max_c p_c` (label-free);
    * ``"entropy"``: :math:`\sum_c p_c \log p_c`, the negative prediction entropy
      (label-free).

    Args:
        logits (Tensor): ``[N, C]`` finite logits (``C >= 2``).
        y (Tensor, optional): ``[N]`` integer labels in ``[0, C)``; needed by the
            label-based kinds.
        kind (str): one of :data:`SCORE_KINDS`. (default: ``"confidence"``)

    Returns:
        A float64 tensor of shape ``[N]``.
    """
    if kind not in SCORE_KINDS:
        raise ValueError(f"unknown score kind {kind!r}; expected one of {', '.join(SCORE_KINDS)}")
    logits = _check_logits(logits)
    if kind in ("confidence", "loss"):
        if y is None:
            raise ValueError(f"score kind {kind!r} needs the labels `y`")
        y = _check_labels(y, logits)
        true = _log_prob_of(logits.detach().double(), y)
        return true.exp() if kind == "confidence" else true
    logp = F.log_softmax(logits.detach().double(), dim=-1)
    if kind == "max_prob":
        return logp.max(dim=-1).values.exp()
    return (logp.exp() * logp).sum(dim=-1)


# --------------------------------------------------------------------------- threshold attack

def _roc_points(s_in: np.ndarray, s_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(TPR, FPR) of "member iff score >= t" for t = +inf and every distinct score."""
    thresholds = np.unique(np.concatenate([s_in, s_out]))
    tp = s_in.size - np.searchsorted(np.sort(s_in), thresholds, side="left")
    fp = s_out.size - np.searchsorted(np.sort(s_out), thresholds, side="left")
    tpr = np.concatenate([[0.0], tp / s_in.size])
    fpr = np.concatenate([[0.0], fp / s_out.size])
    return tpr, fpr


def threshold_attack(scores: Tensor, member_mask: Tensor, nonmember_mask: Tensor) -> MembershipResult:
    """Evaluate threshold tests on membership scores, members against non-members.

    Args:
        scores (Tensor): ``[N]`` real scores (higher = member); only the selected nodes
            are used, and they must be finite.
        member_mask (Tensor): boolean ``[N]``, the members to evaluate (not empty).
        nonmember_mask (Tensor): boolean ``[N]``, the non-members (not empty, disjoint
            from ``member_mask``).

    Returns:
        :class:`MembershipResult` (see its attributes for the metrics' definitions).
    """
    if not isinstance(scores, Tensor) or scores.dtype == torch.bool or scores.is_complex():
        raise TypeError("`scores` must be a real tensor")
    if scores.dim() != 1:
        raise ValueError(f"`scores` must have shape [N]; got {tuple(scores.shape)}")
    n = scores.numel()
    m, o = _check_pair(member_mask, nonmember_mask, n)
    sel = (m | o).to(scores.device)
    s = scores.detach()[sel].double().cpu()
    if not bool(torch.isfinite(s).all()):
        raise ValueError("`scores` contains NaN or infinite values on the evaluated nodes")
    is_member = m.to(scores.device)[sel].cpu()
    auc = roc_auc(s, is_member)
    s_np, lab = s.numpy(), is_member.numpy()
    tpr, fpr = _roc_points(s_np[lab], s_np[~lab])
    bal = 0.5 * (tpr + 1.0 - fpr)
    best = float(np.max(np.maximum(bal, 1.0 - bal)))

    def tpr_at(alpha: float) -> float:
        return float(tpr[fpr <= alpha + 1e-12].max())

    return MembershipResult(auc=auc, advantage=max(auc, 1.0 - auc), best_accuracy=best,
                            tpr_at_1pct_fpr=tpr_at(0.01), tpr_at_10pct_fpr=tpr_at(0.10),
                            members=int(lab.sum()), nonmembers=int((~lab).sum()), scores=s, is_member=is_member)


# --------------------------------------------------------------------------- shadow attack

def _shadow_features(logits: Tensor, y: Tensor) -> Tensor:
    """[sorted top-3 softmax probabilities (zero-padded below 3 classes), p_true], float64."""
    p = F.softmax(logits.detach().double(), dim=-1)
    k = min(3, p.size(1))
    top = p.topk(k, dim=-1).values
    if k < 3:
        top = torch.cat([top, top.new_zeros(top.size(0), 3 - k)], dim=1)
    return torch.cat([top, p.gather(1, y.view(-1, 1))], dim=1).cpu()


def _fit_logistic(features: Tensor, labels: Tensor, *, l2: float = 1e-3, steps: int = 200) -> Callable[[Tensor], Tensor]:
    """Class-balanced, L2-regularised logistic regression by full-batch L-BFGS (deterministic,
    convex with a unique optimum); returns the decision function (the logit)."""
    mean = features.mean(dim=0)
    std = features.std(dim=0, unbiased=False).clamp_min(1e-12)
    z = (features - mean) / std
    t = labels.double()
    pos = t.sum()
    weights = torch.where(labels, 0.5 / pos, 0.5 / (t.numel() - pos))  # each class weighs 1/2
    w = torch.zeros(z.size(1), dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=steps, tolerance_grad=1e-10, tolerance_change=1e-12,
                            history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        logit = z @ w + b
        loss = (weights * F.binary_cross_entropy_with_logits(logit, t, reduction="none")).sum() + 0.5 * l2 * (w @ w)
        loss.backward()
        return loss

    opt.step(closure)
    w_, b_ = w.detach(), b.detach()
    return lambda f: ((f - mean) / std) @ w_ + b_


def shadow_attack(target_logits: Tensor, target_y: Tensor, target_member_mask: Tensor,
                  target_nonmember_mask: Tensor, shadow_logits: Tensor, shadow_y: Tensor,
                  shadow_member_mask: Tensor, shadow_nonmember_mask: Tensor) -> MembershipResult:
    """The shadow-model attack (Shokri et al. 2017, as adapted to GNNs by Olatunji et al. 2021).

    The attacker trains a *shadow* model by the same recipe as the target (same
    architecture, hyper-parameters and training procedure) on data drawn from the same
    distribution but disjoint from the target's, so that it knows the shadow's members.
    Each node becomes the feature vector ``[p_(1), p_(2), p_(3), p_y]``: the three largest
    softmax probabilities in decreasing order (zero-padded with fewer than three classes)
    and the probability of the true label. A class-balanced, L2-regularised logistic
    regression (in torch, full-batch L-BFGS, deterministic) learns shadow members (1)
    against shadow non-members (0); its logit is the membership score of the target's
    nodes, evaluated by :func:`threshold_attack`. If the shadow is trained differently
    from the target, or on other data, the learned rule need not transfer.

    Args:
        target_logits (Tensor): ``[N_t, C]`` logits of the target model (queried on the
            full target graph).
        target_y (Tensor): ``[N_t]`` labels.
        target_member_mask (Tensor): boolean ``[N_t]``, the target's members to evaluate.
        target_nonmember_mask (Tensor): boolean ``[N_t]``, the non-members to evaluate.
        shadow_logits (Tensor): ``[N_s, C_s]`` logits of the shadow model on its full graph.
        shadow_y (Tensor): ``[N_s]`` labels.
        shadow_member_mask (Tensor): boolean ``[N_s]``, the shadow's training nodes.
        shadow_nonmember_mask (Tensor): boolean ``[N_s]``, shadow nodes it did not train on.

    Returns:
        :class:`MembershipResult` on the target's nodes; ``scores`` are the regression's logits.
    """
    target_logits = _check_logits(target_logits, "target_logits")
    shadow_logits = _check_logits(shadow_logits, "shadow_logits")
    target_y = _check_labels(target_y, target_logits, "target_y")
    shadow_y = _check_labels(shadow_y, shadow_logits, "shadow_y")
    tm, to = _check_pair(target_member_mask, target_nonmember_mask, target_logits.size(0), "target_")
    sm, so = _check_pair(shadow_member_mask, shadow_nonmember_mask, shadow_logits.size(0), "shadow_")
    sm, so = sm.cpu(), so.cpu()
    feats = _shadow_features(shadow_logits, shadow_y)
    sel = sm | so
    decide = _fit_logistic(feats[sel], sm[sel])
    scores = decide(_shadow_features(target_logits, target_y))
    return threshold_attack(scores, tm.cpu(), to.cpu())


# --------------------------------------------------------------------------- end to end

def membership_inference(train: Callable[[Data], Callable[[Data], Tensor]], data: Data, *, fraction: float = 0.5,
                         kind: str = "confidence", generator: Optional[torch.Generator] = None,
                         candidates: Optional[Tensor] = None) -> MembershipResult:
    """Split, train on the members' subgraph, query the full graph, attack by threshold.

    1. ``members = member_split(data.num_nodes, fraction=fraction, generator=generator,
       candidates=candidates)``; the non-members are the other candidates.
    2. ``predictor = train(member_subgraph(data, members))``: the user's trainer should
       treat every node of the subgraph as a training node (they are exactly the members).
    3. ``logits = predictor(data)`` on the **full** graph (test-on-full), one row per node.
    4. :func:`membership_scores` of kind ``kind`` on the candidates, then
       :func:`threshold_attack`.

    Args:
        train (callable): ``Data -> (Data -> Tensor)``: trains a model on the given graph
            and returns a function mapping a graph to ``[num_nodes, C]`` logits.
        data (torch_geometric.data.Data): the full graph, with ``y`` when ``kind`` uses labels.
        fraction (float): the inclusion probability of each candidate. (default: ``0.5``)
        kind (str): the score, one of :data:`SCORE_KINDS`. (default: ``"confidence"``)
        generator (torch.Generator, optional): randomness of the split (not of training).
        candidates (Tensor, optional): nodes to split (mask or indices); the others are
            neither trained on nor evaluated. (default: all nodes)

    Raises:
        ValueError: when the split leaves no member or no non-member (retry with another
            generator or more candidates), and on invalid inputs.
    """
    if not callable(train):
        raise TypeError("`train` must be callable: Data -> (Data -> logits)")
    if kind not in SCORE_KINDS:
        raise ValueError(f"unknown score kind {kind!r}; expected one of {', '.join(SCORE_KINDS)}")
    if not isinstance(data, Data):
        raise TypeError(f"`data` must be a torch_geometric.data.Data; got {type(data).__name__}")
    n = data.num_nodes
    if n is None or n < 1:
        raise ValueError("`data` has no nodes")
    n = int(n)
    cand = _candidate_mask(candidates, n)
    if cand is None:
        cand = torch.ones(n, dtype=torch.bool)
    if int(cand.sum()) < 2:
        raise ValueError("`candidates` must contain at least 2 nodes")
    members = member_split(n, fraction=fraction, generator=generator, candidates=cand)
    cand = cand.to(members.device)
    nonmembers = cand & ~members
    if not bool(members.any()) or not bool(nonmembers.any()):
        raise ValueError("the split left no member or no non-member; use another generator or more candidates")
    predictor = train(member_subgraph(data, members))
    if not callable(predictor):
        raise TypeError("`train` must return a callable predictor (Data -> logits)")
    with torch.no_grad():
        logits = predictor(data)
    logits = _check_logits(logits, "predictor(data)")
    if logits.size(0) != n:
        raise ValueError(f"the predictor must return one row per node of `data` ({n}); got {logits.size(0)}")
    idx = cand.nonzero().view(-1).to(logits.device)
    y = None
    if kind in ("confidence", "loss"):
        if getattr(data, "y", None) is None:
            raise ValueError(f"score kind {kind!r} needs labels `data.y`")
        y = data.y.view(-1)[idx.to(data.y.device)]
    scores = torch.zeros(n, dtype=torch.float64)
    scores[idx.cpu()] = membership_scores(logits[idx], y, kind).cpu()
    return threshold_attack(scores, members.cpu(), nonmembers.cpu())
