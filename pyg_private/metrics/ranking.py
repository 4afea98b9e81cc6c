r"""Ranking metrics to compare private personalized-PageRank vectors with the
noise-free ones.

The protocol is the one of Epasto et al. (2022), "Differentially Private Graph
Learning via Sensitivity-Bounded Personalized PageRank", and of Wei et al. (2024),
"Differentially Private Graph Diffusion with Applications in Personalized PageRanks":
for every seed (query) the private PPR vector is scored against the exact one with
NDCG@R and Recall@R (:math:`R = 100` there).

All functions are **column-batched**: ``pred`` and ``true`` have shape ``[N, C]``,
one column per seed, and a 1-D input of shape ``[N]`` is read as ``C = 1``. They
return one value per column (shape ``[C]``, ``float64``); the caller averages.

Ties. Rankings are taken with :func:`torch.topk` (``sorted=True``), so ties are
broken by the order :func:`torch.topk` returns. That order is deterministic for a
given input and device, but it is implementation-defined (not necessarily the
lowest index first) and may differ between CPU and CUDA. Ties in ``pred`` only
permute tied nodes in the predicted ranking. A tie in ``true`` at the :math:`k`-th
place makes :math:`\mathrm{TopK}(\mathrm{true})` ambiguous; the set chosen by
:func:`torch.topk` is used, for Recall@k as well as for the relevances of NDCG@k.
"""
from __future__ import annotations

import math
import operator
from typing import Optional, Tuple

import torch
from torch import Tensor

__all__ = ["ndcg_at_k", "recall_at_k", "top_k_indices"]


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------
def _as_matrix(x: Tensor, name: str) -> Tensor:
    """Check dtype, rank and finiteness; return ``x`` as a ``float64`` ``[N, C]`` matrix."""
    if not isinstance(x, Tensor):
        raise TypeError(f"'{name}' must be a torch.Tensor, got {type(x).__name__}")
    if x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"'{name}' must be a real floating-point (or integer) tensor, got dtype {x.dtype}")
    if x.dim() == 1:
        x = x.unsqueeze(-1)
    elif x.dim() != 2:
        raise ValueError(f"'{name}' must have shape [N] or [N, C], got shape {tuple(x.shape)}")
    # float64 conversion is exact and monotone for float16/32 inputs: rankings are unchanged.
    x = x.detach().to(torch.float64)
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"'{name}' contains NaN or infinite values")
    return x


def _check_k(k: int) -> int:
    if isinstance(k, bool):
        raise TypeError(f"'k' must be an int, got {k!r}")
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f"'k' must be an int, got {type(k).__name__}") from None
    if k < 1:
        raise ValueError(f"'k' must be >= 1, got {k}")
    return k


def _check_exclude(exclude: Optional[Tensor], num_nodes: int, num_cols: int, device: torch.device) -> Optional[Tensor]:
    if exclude is None:
        return None
    if not isinstance(exclude, Tensor):
        raise TypeError(f"'exclude' must be a torch.Tensor or None, got {type(exclude).__name__}")
    if exclude.is_floating_point() or exclude.is_complex() or exclude.dtype == torch.bool:
        raise TypeError(f"'exclude' must be an integer (long) tensor, got dtype {exclude.dtype}")
    if exclude.dim() == 0:
        exclude = exclude.reshape(1)
    if exclude.dim() != 1 or exclude.numel() != num_cols:
        raise ValueError(
            f"'exclude' must have shape [C] = [{num_cols}] (one node index per column), "
            f"got shape {tuple(exclude.shape)}"
        )
    if exclude.device != device:
        raise ValueError(f"'exclude' is on {exclude.device} but the scores are on {device}")
    if num_cols > 0 and (int(exclude.min()) < 0 or int(exclude.max()) >= num_nodes):
        raise ValueError(
            f"'exclude' entries must be node indices in [0, {num_nodes - 1}], "
            f"got min {int(exclude.min())}, max {int(exclude.max())}"
        )
    return exclude.to(torch.long)


def _check_k_vs_candidates(k: int, num_nodes: int, excluded: bool) -> None:
    candidates = num_nodes - 1 if excluded else num_nodes
    if k > candidates:
        what = f"N - 1 = {candidates} (N = {num_nodes}, one node excluded per column)" if excluded else f"N = {candidates}"
        raise ValueError(f"'k' = {k} is larger than the number of candidate nodes per column, {what}")


def _apply_exclude(x: Tensor, exclude: Optional[Tensor]) -> Tensor:
    """Return a copy of ``x`` with ``x[exclude[c], c] = -inf`` (``x`` itself when nothing is excluded)."""
    if exclude is None:
        return x
    x = x.clone()
    x.scatter_(0, exclude.unsqueeze(0), float("-inf"))
    return x


def _prepare(pred: Tensor, true: Tensor, k: int, exclude: Optional[Tensor]) -> Tuple[Tensor, Tensor, int]:
    """Validate the metric inputs; return ``pred`` and ``true`` as ``float64 [N, C]`` with exclusions applied."""
    k = _check_k(k)
    p = _as_matrix(pred, "pred")
    t = _as_matrix(true, "true")
    if p.shape != t.shape:
        raise ValueError(
            f"'pred' and 'true' must have the same shape, got {tuple(pred.shape)} and {tuple(true.shape)}"
        )
    if p.device != t.device:
        raise ValueError(f"'pred' is on {p.device} but 'true' is on {t.device}")
    if bool((t < 0).any()):
        raise ValueError("'true' must be non-negative (its entries are used as graded relevances)")
    num_nodes, num_cols = t.shape
    ex = _check_exclude(exclude, num_nodes, num_cols, t.device)
    _check_k_vs_candidates(k, num_nodes, ex is not None)
    return _apply_exclude(p, ex), _apply_exclude(t, ex), k


def _discounts(k: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``1 / log2(i + 1)`` for ranks ``i = 1..k`` as a ``[k, 1]`` column."""
    ranks = torch.arange(1, k + 1, dtype=dtype, device=device)
    return (1.0 / torch.log2(ranks + 1.0)).unsqueeze(-1)


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------
def top_k_indices(scores: Tensor, k: int, exclude: Optional[Tensor] = None) -> Tensor:
    r"""Indices of the :math:`k` highest scores of every column, best first.

    Args:
        scores (torch.Tensor): Scores of shape :obj:`[N, C]` (one column per seed),
            or :obj:`[N]` (read as :obj:`C = 1`). Must be finite.
        k (int): Number of nodes to keep (:math:`k \ge 1`, at most the number of
            candidates, :math:`N`, or :math:`N - 1` with :obj:`exclude`).
        exclude (torch.Tensor, optional): Long tensor of shape :obj:`[C]`:
            the node :obj:`exclude[c]` is never returned for column :obj:`c`
            (e.g. the seed itself). (default: :obj:`None`)

    Returns:
        torch.Tensor: Long tensor of shape :obj:`[k, C]` (also for a 1-D input,
        then :obj:`[k, 1]`); row :obj:`i` holds the node ranked :obj:`i + 1`.
        Ties are broken in the order returned by
        :obj:`torch.topk(..., sorted=True)`.

    Raises:
        ValueError: On a wrong shape, non-finite scores, an out-of-range
            :obj:`exclude` or :obj:`k` larger than the number of candidates.
    """
    k = _check_k(k)
    s = _as_matrix(scores, "scores")
    num_nodes, num_cols = s.shape
    ex = _check_exclude(exclude, num_nodes, num_cols, s.device)
    _check_k_vs_candidates(k, num_nodes, ex is not None)
    return torch.topk(_apply_exclude(s, ex), k, dim=0, largest=True, sorted=True).indices


def recall_at_k(pred: Tensor, true: Tensor, k: int, exclude: Optional[Tensor] = None) -> Tensor:
    r"""Recall@k of a private ranking against the exact one, per column.

    .. math::
        \mathrm{Recall@}k = \frac{|\mathrm{TopK}(\mathrm{pred}) \cap
        \mathrm{TopK}(\mathrm{true})|}{k},

    the definition of Epasto et al. (2022) used by Wei et al. (2024) with
    :math:`k = R = 100`.

    Args:
        pred (torch.Tensor): Predicted (e.g. private, noisy) scores of shape
            :obj:`[N, C]` or :obj:`[N]`. May be negative; must be finite.
        true (torch.Tensor): Reference (noise-free) scores, same shape as
            :obj:`pred`, finite and non-negative.
        k (int): Cut-off :math:`k \ge 1` (:math:`R` in the paper).
        exclude (torch.Tensor, optional): Long tensor of shape :obj:`[C]`;
            node :obj:`exclude[c]` is dropped from both rankings of column
            :obj:`c` before anything else (e.g. to not rank the seed).
            (default: :obj:`None`)

    Returns:
        torch.Tensor: :obj:`float64` tensor of shape :obj:`[C]` with values in
        :math:`[0, 1]`. A tie in :obj:`true` at the :math:`k`-th place is resolved
        by :obj:`torch.topk`'s choice (see the module docstring).

    Raises:
        ValueError: On mismatched shapes, non-finite inputs, negative
            :obj:`true`, an out-of-range :obj:`exclude` or :obj:`k` larger than
            the number of candidates (:math:`N`, or :math:`N - 1` with
            :obj:`exclude`).
    """
    p, t, k = _prepare(pred, true, k, exclude)
    pred_idx = torch.topk(p, k, dim=0, sorted=True).indices
    true_idx = torch.topk(t, k, dim=0, sorted=True).indices
    in_true = torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    in_true.scatter_(0, true_idx, True)
    hits = in_true.gather(0, pred_idx).sum(dim=0)
    return hits.to(torch.float64) / k


def ndcg_at_k(pred: Tensor, true: Tensor, k: int, exclude: Optional[Tensor] = None) -> Tensor:
    r"""NDCG@k of a private ranking with graded relevances, per column.

    With :math:`\hat v_i` the node ranked :math:`i`-th by :obj:`pred` and the
    graded relevance :math:`\mathrm{rel}(v) = \mathrm{true}_v` if
    :math:`v \in \mathrm{TopK}(\mathrm{true})`, else :math:`0`,

    .. math::
        \mathrm{DCG@}k = \sum_{i=1}^{k} \frac{\mathrm{rel}(\hat v_i)}{\log_2(i + 1)},
        \qquad
        \mathrm{NDCG@}k = \frac{\mathrm{DCG@}k}{\mathrm{IDCG@}k},

    where :math:`\mathrm{IDCG@}k` is the same sum for the ideal ranking (the true
    top-:math:`k` sorted by true score, descending). This is the protocol of
    Wei et al. (2024) (NDCG@R, :math:`R = 100`, relevances = exact PPR scores of the
    true top-:math:`R`), following Epasto et al. (2022).

    Args:
        pred (torch.Tensor): Predicted (e.g. private, noisy) scores of shape
            :obj:`[N, C]` or :obj:`[N]`. May be negative; must be finite.
        true (torch.Tensor): Reference (noise-free) scores, same shape as
            :obj:`pred`, finite and non-negative (they are the relevances).
        k (int): Cut-off :math:`k \ge 1` (:math:`R` in the paper).
        exclude (torch.Tensor, optional): Long tensor of shape :obj:`[C]`;
            node :obj:`exclude[c]` is dropped from both rankings of column
            :obj:`c` before anything else (e.g. to not rank the seed).
            (default: :obj:`None`)

    Returns:
        torch.Tensor: :obj:`float64` tensor of shape :obj:`[C]` with values in
        :math:`[0, 1]`, or **NaN** for a column whose :math:`\mathrm{IDCG@}k = 0`
        (all candidate true scores are zero), where NDCG is undefined. Use
        :func:`torch.nanmean` to average over columns if that can happen. A tie
        in :obj:`true` at the :math:`k`-th place is resolved by
        :obj:`torch.topk`'s choice (see the module docstring).

    Raises:
        ValueError: On mismatched shapes, non-finite inputs, negative
            :obj:`true`, an out-of-range :obj:`exclude` or :obj:`k` larger than
            the number of candidates (:math:`N`, or :math:`N - 1` with
            :obj:`exclude`).
    """
    p, t, k = _prepare(pred, true, k, exclude)
    pred_idx = torch.topk(p, k, dim=0, sorted=True).indices
    true_val, true_idx = torch.topk(t, k, dim=0, sorted=True)
    # rel[v, c] = true[v, c] on the true top-k of column c, else 0.
    rel = torch.zeros_like(t)
    rel.scatter_(0, true_idx, true_val)
    disc = _discounts(k, t.dtype, t.device)
    dcg = (rel.gather(0, pred_idx) * disc).sum(dim=0)
    idcg = (true_val * disc).sum(dim=0)
    nan = torch.full_like(idcg, math.nan)
    return torch.where(idcg > 0, dcg / torch.where(idcg > 0, idcg, torch.ones_like(idcg)), nan)
