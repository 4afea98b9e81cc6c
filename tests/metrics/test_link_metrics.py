"""Hits@K and MRR as OGB defines them, on hand-computed scores."""
import math

import pytest
import torch

from pyg_private.metrics import hits_at_k, mean_reciprocal_rank


def test_hits_at_k_counts_positives_above_the_kth_negative():
    pos = torch.tensor([0.9, 0.5, 0.3, 0.75])
    neg = torch.tensor([0.8, 0.4, 0.6, 0.1, 0.75])
    assert hits_at_k(pos, neg, 1) == 0.25  # above 0.8: 0.9
    assert hits_at_k(pos, neg, 2) == 0.25  # above 0.75 (strictly): 0.9
    assert hits_at_k(pos, neg, 3) == 0.5  # above 0.6: 0.9, 0.75
    assert hits_at_k(pos, neg, 6) == 1.0  # fewer negatives than K: OGB's convention
    assert math.isnan(hits_at_k(torch.empty(0), neg, 1))
    with pytest.raises(ValueError):
        hits_at_k(pos, neg, 0)


def test_mrr_ranks_each_positive_against_the_negatives_ties_half():
    pos = torch.tensor([0.9, 0.5, 0.75])
    neg = torch.tensor([0.8, 0.4, 0.75])
    # ranks: 0.9 -> 1; 0.5 -> 1 + 2 = 3; 0.75 -> 1 + 1 + 0.5 (one tie) = 2.5
    assert mean_reciprocal_rank(pos, neg) == pytest.approx((1 + 1 / 3 + 1 / 2.5) / 3)
    with pytest.raises(ValueError):
        mean_reciprocal_rank(torch.tensor([float("nan")]), neg)
