"""Tests of the ranking metrics (NDCG@k, Recall@k) of ``pyg_private.metrics``."""
import math

import pytest
import torch

from pyg_private.metrics import ndcg_at_k, recall_at_k, top_k_indices

LOG2_3 = math.log2(3.0)  # 1.584962500721156

# Shared hand-worked example: N = 5, k = 3, no ties.
# true top-3 = [0, 1, 2] with scores 0.4, 0.3, 0.2, so
# IDCG = 0.4/log2(2) + 0.3/log2(3) + 0.2/log2(4) = 0.4 + 0.18927892607 + 0.1 = 0.68927892607.
TRUE = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0], dtype=torch.float64)
IDCG = 0.4 + 0.3 / LOG2_3 + 0.2 / 2.0


# ---------------------------------------------------------------------------
# brute-force reference (plain Python sorting, one column)
# ---------------------------------------------------------------------------
def _ref_column(pred, true, k, exclude=None):
    nodes = [v for v in range(len(true)) if v != exclude]
    top_pred = sorted(nodes, key=lambda v: -pred[v])[:k]
    top_true = sorted(nodes, key=lambda v: -true[v])[:k]
    recall = len(set(top_pred) & set(top_true)) / k
    rel = {v: true[v] for v in top_true}
    dcg = sum(rel.get(v, 0.0) / math.log2(i + 2) for i, v in enumerate(top_pred))
    idcg = sum(true[v] / math.log2(i + 2) for i, v in enumerate(top_true))
    return (dcg / idcg if idcg > 0 else math.nan), recall, top_pred


# ---------------------------------------------------------------------------
# hand-computed examples
# ---------------------------------------------------------------------------
def test_perfect_prediction_is_one():
    assert ndcg_at_k(TRUE, TRUE, 3).tolist() == pytest.approx([1.0], abs=1e-15)
    assert recall_at_k(TRUE, TRUE, 3).tolist() == [1.0]
    # Any strictly increasing transform of true gives the same ranking.
    pred = 10 * TRUE - 3
    assert ndcg_at_k(pred, TRUE, 3).tolist() == pytest.approx([1.0], abs=1e-15)


def test_reversed_ranking_hand_value():
    # pred ranks 4, 3, 2 first; only node 2 is in the true top-3 (rel 0.2) at rank 3:
    # DCG = 0 + 0 + 0.2/log2(4) = 0.1; NDCG = 0.1 / 0.68927892607 = 0.14507914897.
    pred = TRUE.flip(0)
    assert ndcg_at_k(pred, TRUE, 3).item() == pytest.approx(0.14507914897377255, abs=1e-12)
    assert ndcg_at_k(pred, TRUE, 3).item() == pytest.approx(0.1 / IDCG, abs=1e-15)
    # |{4, 3, 2} ∩ {0, 1, 2}| / 3 = 1/3.
    assert recall_at_k(pred, TRUE, 3).item() == pytest.approx(1 / 3, abs=1e-15)


def test_swapped_and_partial_ranking_hand_value():
    # pred top-3 = [1, 0, 3]: rel = 0.3, 0.4, 0 ->
    # DCG = 0.3/1 + 0.4/log2(3) + 0 = 0.3 + 0.25237190143 = 0.55237190143;
    # NDCG = 0.55237190143 / 0.68927892607 = 0.80137645376. Recall = |{1,0,3} ∩ {0,1,2}|/3 = 2/3.
    pred = torch.tensor([0.3, 0.4, 0.0, 0.2, 0.1])
    assert ndcg_at_k(pred, TRUE, 3).item() == pytest.approx(0.8013764537628341, abs=1e-12)
    assert recall_at_k(pred, TRUE, 3).item() == pytest.approx(2 / 3, abs=1e-15)


def test_k_equals_one():
    # k = 1: NDCG = rel(pred top-1)/true max; Recall = 1 iff the argmaxes agree.
    pred = torch.tensor([0.0, 5.0, 0.0, 0.0, 0.0])
    assert ndcg_at_k(pred, TRUE, 1).item() == 0.0  # node 1 not in the true top-1 {0}
    assert recall_at_k(pred, TRUE, 1).item() == 0.0
    assert ndcg_at_k(TRUE, TRUE, 1).item() == 1.0


def test_disjoint_prediction_gives_zero():
    # true top-3 = {0, 1, 2}, pred top-3 = {3, 4, 5}: no overlap, so DCG = 0 and Recall = 0.
    true = torch.tensor([0.5, 0.4, 0.3, 0.2, 0.1, 0.0])
    pred = torch.tensor([-1.0, -2.0, -3.0, 3.0, 2.0, 1.0])  # negative noisy scores are allowed
    assert ndcg_at_k(pred, true, 3).item() == 0.0
    assert recall_at_k(pred, true, 3).item() == 0.0


def test_relevance_zero_outside_true_top_k():
    # Node 3 has true score 0.1 > 0 but is not in the true top-3: it must count as relevance 0.
    # pred top-3 = [3, 4, 0] -> DCG = 0 + 0 + 0.4/log2(4) = 0.2; NDCG = 0.2 / IDCG = 0.2901582979.
    pred = torch.tensor([0.1, 0.0, -1.0, 0.3, 0.2])
    assert ndcg_at_k(pred, TRUE, 3).item() == pytest.approx(0.2 / IDCG, abs=1e-15)
    assert ndcg_at_k(pred, TRUE, 3).item() == pytest.approx(0.29015829794754510, abs=1e-12)


def test_exclude_changes_result_as_expected():
    pred = torch.tensor([0.9, 0.1, 0.3, 0.2, 0.0])
    # Without exclude: pred top-3 = [0, 2, 3], true top-3 = {0, 1, 2}; rel = 0.4, 0.2, 0 ->
    # DCG = 0.4 + 0.2/log2(3) = 0.52618595071; NDCG = 0.52618595071 / 0.68927892607 = 0.76338609932;
    # Recall = 2/3.
    assert ndcg_at_k(pred, TRUE, 3).item() == pytest.approx(0.7633860993158484, abs=1e-12)
    assert recall_at_k(pred, TRUE, 3).item() == pytest.approx(2 / 3, abs=1e-15)
    # Excluding the seed node 0 (highest in both): candidates {1, 2, 3, 4}.
    # pred top-3 = [2, 3, 1], true top-3 = [1, 2, 3] (0.3, 0.2, 0.1);
    # IDCG = 0.3 + 0.2/log2(3) + 0.1/2 = 0.47618595071; DCG = 0.2 + 0.1/log2(3) + 0.3/2 = 0.41309297536;
    # NDCG = 0.86750349257; Recall = 3/3 = 1.
    ex = torch.tensor([0])
    assert ndcg_at_k(pred, TRUE, 3, exclude=ex).item() == pytest.approx(0.8675034925694372, abs=1e-12)
    assert recall_at_k(pred, TRUE, 3, exclude=ex).item() == 1.0
    assert top_k_indices(pred, 3, exclude=ex)[:, 0].tolist() == [2, 3, 1]
    # The excluded node is also dropped from `true`: perfect prediction still gives 1.
    assert ndcg_at_k(TRUE, TRUE, 4, exclude=ex).item() == pytest.approx(1.0, abs=1e-15)


def test_exclude_per_column():
    # Two columns with different excluded seeds; each equals its own single-column call.
    pred = torch.tensor([[0.9, 0.1], [0.1, 0.9], [0.3, 0.3], [0.2, 0.2], [0.0, 0.05]])
    true = torch.stack([TRUE, TRUE.flip(0)], dim=1)
    ex = torch.tensor([0, 4])
    got = ndcg_at_k(pred, true, 3, exclude=ex)
    for c in range(2):
        ref = ndcg_at_k(pred[:, c], true[:, c], 3, exclude=ex[c : c + 1])
        assert got[c].item() == ref.item()
    assert 0 not in top_k_indices(pred, 4, exclude=ex)[:, 0].tolist()
    assert 4 not in top_k_indices(pred, 4, exclude=ex)[:, 1].tolist()


def test_inputs_not_modified_by_exclude():
    pred = torch.tensor([0.9, 0.1, 0.3, 0.2, 0.0], dtype=torch.float64)
    true = TRUE.clone()
    ndcg_at_k(pred, true, 2, exclude=torch.tensor([0]))
    recall_at_k(pred, true, 2, exclude=torch.tensor([0]))
    assert torch.isfinite(pred).all() and torch.equal(true, TRUE)


def test_all_zero_true_gives_nan():
    true = torch.zeros(5, 2)
    true[1, 1] = 1.0  # column 1 is fine
    pred = torch.rand(5, 2, generator=torch.Generator().manual_seed(0))
    out = ndcg_at_k(pred, true, 2)
    assert math.isnan(out[0].item())
    assert not math.isnan(out[1].item())


def test_ties_in_true_use_topk_choice():
    # true has a tie at the k-th place (nodes 1 and 2, score 0.3); TopK(true) is the set topk picks.
    true = torch.tensor([0.5, 0.3, 0.3, 0.0], dtype=torch.float64)
    chosen = torch.topk(true, 2, sorted=True).indices.tolist()
    other = ({1, 2} - set(chosen)).pop()
    pred = torch.zeros(4, dtype=torch.float64)
    pred[0], pred[other] = 2.0, 1.0
    # pred top-2 = [0, other]; `other` is not in TopK(true) -> rel 0: NDCG = 0.5 / (0.5 + 0.3/log2(3)).
    assert recall_at_k(pred, true, 2).item() == 0.5
    assert ndcg_at_k(pred, true, 2).item() == pytest.approx(0.5 / (0.5 + 0.3 / LOG2_3), abs=1e-15)


# ---------------------------------------------------------------------------
# shapes, batching, dtypes, reference
# ---------------------------------------------------------------------------
def test_output_shapes_and_dtype():
    pred = torch.rand(7, 3, dtype=torch.float32)
    true = torch.rand(7, 3, dtype=torch.float32)
    for fn in (ndcg_at_k, recall_at_k):
        out = fn(pred, true, 4)
        assert out.shape == (3,) and out.dtype == torch.float64
        out1 = fn(pred[:, 0], true[:, 0], 4)
        assert out1.shape == (1,) and out1.dtype == torch.float64
    idx = top_k_indices(pred, 4)
    assert idx.shape == (4, 3) and idx.dtype == torch.long
    assert top_k_indices(pred[:, 0], 4).shape == (4, 1)
    # integer scores are accepted
    assert ndcg_at_k(torch.tensor([3, 2, 1]), torch.tensor([3, 2, 1]), 2).item() == 1.0


def test_batched_equals_per_column():
    gen = torch.Generator().manual_seed(1)
    n, c, k = 50, 6, 10
    true = torch.rand(n, c, generator=gen, dtype=torch.float64)
    pred = true + 0.3 * torch.randn(n, c, generator=gen, dtype=torch.float64)
    ex = torch.randint(0, n, (c,), generator=gen)
    for exclude in (None, ex):
        nd = ndcg_at_k(pred, true, k, exclude=exclude)
        rc = recall_at_k(pred, true, k, exclude=exclude)
        idx = top_k_indices(pred, k, exclude=exclude)
        for j in range(c):
            e = None if exclude is None else exclude[j : j + 1]
            assert nd[j].item() == ndcg_at_k(pred[:, j], true[:, j], k, exclude=e).item()
            assert rc[j].item() == recall_at_k(pred[:, j], true[:, j], k, exclude=e).item()
            assert torch.equal(idx[:, j], top_k_indices(pred[:, j], k, exclude=e)[:, 0])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("use_exclude", [False, True])
def test_matches_bruteforce_reference(seed, use_exclude):
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(3, 40, (1,), generator=gen))
    c = int(torch.randint(1, 5, (1,), generator=gen))
    k = int(torch.randint(1, n - 1, (1,), generator=gen))  # <= n - 2 < number of candidates
    # continuous random values: no ties (almost surely)
    true = torch.rand(n, c, generator=gen, dtype=torch.float64)
    pred = true + 0.5 * torch.randn(n, c, generator=gen, dtype=torch.float64)
    ex = torch.randint(0, n, (c,), generator=gen) if use_exclude else None
    nd = ndcg_at_k(pred, true, k, exclude=ex)
    rc = recall_at_k(pred, true, k, exclude=ex)
    idx = top_k_indices(pred, k, exclude=ex)
    for j in range(c):
        e = None if ex is None else int(ex[j])
        ref_nd, ref_rc, ref_idx = _ref_column(pred[:, j].tolist(), true[:, j].tolist(), k, e)
        assert nd[j].item() == pytest.approx(ref_nd, rel=1e-12, abs=1e-14)
        assert rc[j].item() == pytest.approx(ref_rc, abs=1e-15)
        assert idx[:, j].tolist() == ref_idx
        assert 0.0 <= nd[j].item() <= 1.0 + 1e-12


def test_k_equals_number_of_candidates():
    # k = N: recall is always 1; k = N - 1 with exclude: same.
    gen = torch.Generator().manual_seed(2)
    pred, true = torch.rand(6, 2, generator=gen), torch.rand(6, 2, generator=gen)
    assert recall_at_k(pred, true, 6).tolist() == [1.0, 1.0]
    assert recall_at_k(pred, true, 5, exclude=torch.tensor([1, 2])).tolist() == [1.0, 1.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    gen = torch.Generator().manual_seed(3)
    true = torch.rand(200, 8, generator=gen, dtype=torch.float64)
    pred = true + 0.2 * torch.randn(200, 8, generator=gen, dtype=torch.float64)
    ex = torch.randint(0, 200, (8,), generator=gen)
    for fn in (ndcg_at_k, recall_at_k):
        cpu = fn(pred, true, 20, exclude=ex)
        gpu = fn(pred.cuda(), true.cuda(), 20, exclude=ex.cuda())
        assert gpu.device.type == "cuda"
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [ndcg_at_k, recall_at_k])
def test_validation_errors(fn):
    pred, true = torch.rand(5, 2), torch.rand(5, 2)
    with pytest.raises(ValueError, match="same shape"):
        fn(pred, true[:4], 2)
    with pytest.raises(ValueError, match="shape"):
        fn(torch.rand(2, 2, 2), torch.rand(2, 2, 2), 1)
    for bad in (float("nan"), float("inf"), float("-inf")):
        p = pred.clone()
        p[0, 0] = bad
        with pytest.raises(ValueError, match="'pred'"):
            fn(p, true, 2)
        t = true.clone()
        t[0, 0] = bad
        with pytest.raises(ValueError, match="'true'"):
            fn(pred, t, 2)
    t = true.clone()
    t[3, 1] = -1e-3
    with pytest.raises(ValueError, match="non-negative"):
        fn(pred, t, 2)
    with pytest.raises(ValueError, match="k"):
        fn(pred, true, 0)
    with pytest.raises(ValueError, match="larger than the number of candidate"):
        fn(pred, true, 6)
    with pytest.raises(ValueError, match="larger than the number of candidate"):
        fn(pred, true, 5, exclude=torch.tensor([0, 1]))
    with pytest.raises(TypeError):
        fn(pred, true, 2.0)
    with pytest.raises(TypeError):
        fn(pred, true, True)
    with pytest.raises(ValueError, match="exclude"):
        fn(pred, true, 2, exclude=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="exclude"):
        fn(pred, true, 2, exclude=torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match="exclude"):
        fn(pred, true, 2, exclude=torch.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="exclude"):
        fn(pred, true, 2, exclude=torch.tensor([0.0, 1.0]))
    with pytest.raises(TypeError):
        fn(pred.numpy(), true, 2)


def test_top_k_indices_validation():
    with pytest.raises(ValueError, match="larger than the number of candidate"):
        top_k_indices(torch.rand(3), 4)
    with pytest.raises(ValueError, match="larger than the number of candidate"):
        top_k_indices(torch.rand(3), 3, exclude=torch.tensor([0]))
    with pytest.raises(ValueError, match="'scores'"):
        top_k_indices(torch.tensor([1.0, float("nan")]), 1)
    # negative scores are fine
    assert top_k_indices(torch.tensor([-3.0, -1.0, -2.0]), 2)[:, 0].tolist() == [1, 2]
