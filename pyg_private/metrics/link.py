r"""Link-prediction metrics: Hits@K and the mean reciprocal rank, as OGB defines them
(Hu et al., "Open Graph Benchmark", NeurIPS 2020; ``ogb.linkproppred.Evaluator``).

Both compare the scores of the positive pairs with those of one shared set of negative pairs.
They read evaluation pairs (possibly private edges): an evaluation, not a release.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["hits_at_k", "mean_reciprocal_rank"]


def _scores(t: Tensor, name: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"`{name}` must be a tensor of scores; got {type(t).__name__}")
    t = t.detach().reshape(-1).to(torch.float64)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"`{name}` contains NaN or infinite scores")
    return t


def hits_at_k(pos: Tensor, neg: Tensor, k: int) -> float:
    r"""Hits@K: the fraction of positives scored strictly above the :math:`K`-th highest negative
    (1.0 when there are fewer than :math:`K` negatives, as OGB; NaN without positives)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be a positive int; got {k!r}")
    pos, neg = _scores(pos, "pos"), _scores(neg, "neg")
    if pos.numel() == 0:
        return math.nan
    if neg.numel() < k:
        return 1.0
    kth = torch.topk(neg, k).values[-1]
    return float((pos > kth).double().mean())


def mean_reciprocal_rank(pos: Tensor, neg: Tensor) -> float:
    r"""MRR: each positive ranked against all the negatives, ties counted half
    (:math:`\mathrm{rank} = 1 + \#\{s_- > s_+\} + \tfrac12 \#\{s_- = s_+\}`, OGB's average of the
    optimistic and pessimistic ranks), and :math:`1/\mathrm{rank}` averaged (NaN without positives)."""
    pos, neg = _scores(pos, "pos"), _scores(neg, "neg")
    if pos.numel() == 0:
        return math.nan
    ordered = torch.sort(neg).values
    above = neg.numel() - torch.searchsorted(ordered, pos, right=True)  # negatives > s_+
    at_least = neg.numel() - torch.searchsorted(ordered, pos, right=False)  # negatives >= s_+
    rank = 1.0 + 0.5 * (above + at_least).double()
    return float((1.0 / rank).mean())
