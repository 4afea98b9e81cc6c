"""Out-of-fold scores: every training node is scored by a model fitted without it, every other node by the
model fitted on all training nodes."""
import pytest
import torch
from torch import nn

from pyg_private.models.stacking import out_of_fold_log_probs


class _Constant(nn.Module):
    """Scores every node with the one-hot of ``label`` (large logits), whatever its input."""

    def __init__(self, label, classes=4):
        super().__init__()
        self.label, self.classes = label, classes

    def forward(self, x):
        return 50.0 * nn.functional.one_hot(torch.full((x.size(0),), self.label), self.classes).float()


def test_every_training_node_is_scored_by_a_model_that_never_saw_it():
    n = 40
    train = torch.zeros(n, dtype=torch.bool)
    train[5:35] = True
    masks = []

    def fit(mask, fold):
        masks.append(mask.clone())
        return _Constant(fold)

    out = out_of_fold_log_probs(fit, torch.randn(n, 3), _Constant(3), train, folds=3, seed=0)
    assert out.shape == (n, 4) and out.dtype == torch.float32
    scorer = out.argmax(-1)
    assert (scorer[~train] == 3).all()  # the full model off the training set
    assert len(masks) == 3
    for fold, mask in enumerate(masks):
        held = train & ~mask
        assert not (mask & ~train).any()  # a fold model sees training nodes only
        assert (scorer[held] == fold).all()  # ... and scores exactly the nodes it did not see
        assert 9 <= int(held.sum()) <= 11
    assert (sum((train & ~m).long() for m in masks) == train.long()).all()  # each training node held out once
    assert torch.allclose(out.exp().sum(-1), torch.ones(n))


def test_the_split_is_reproducible_and_bad_arguments_are_refused():
    n = 20
    train = torch.ones(n, dtype=torch.bool)
    splits = []
    for _ in range(2):
        masks = []
        out_of_fold_log_probs(lambda m, f: masks.append(m.clone()) or _Constant(f), torch.zeros(n, 1), _Constant(0),
                              train, folds=4, seed=7)
        splits.append(torch.stack(masks))
    assert torch.equal(splits[0], splits[1])
    for folds in (1, 2.0, True):
        with pytest.raises(ValueError, match="folds"):
            out_of_fold_log_probs(lambda m, f: _Constant(f), torch.zeros(n, 1), _Constant(0), train, folds=folds)
    few = torch.zeros(n, dtype=torch.bool)
    few[:2] = True
    with pytest.raises(ValueError, match="at least 3 training nodes"):
        out_of_fold_log_probs(lambda m, f: _Constant(f), torch.zeros(n, 1), _Constant(0), few, folds=3)
