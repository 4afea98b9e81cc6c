"""The one-run canary audit of the private link predictor: canaries inside one part of the keyed
split, never edges; the attack on the non-private pipeline works, the private run at epsilon 1 is
not caught; the run's ledger holds its four events (the hops, the degrees, the decoder, the
selection) and nothing else."""
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import stochastic_blockmodel_graph

from pyg_private.audit import insert_edges, link_prediction_canary_audit, sample_part_canaries
from pyg_private.audit.link_prediction import LinkPredictionAudit
from pyg_private.models import LinkPredictionConfig
from pyg_private.transforms import PrivateLinkSplit
from pyg_private.utils import LinkSplitRule
from pyg_private.utils.pair_sampling import PARTS

DELTA = 1e-5
KEY = 17
SHARES = (0.5, 0.2, 0.15, 0.15)
M = 200
# full-batch DP-SGD (a batch above the expected number of examples): fast, exact calibration
CFG = LinkPredictionConfig(epochs=30, selection_pairs=2000, batch_size=512)


def _sbm(seed=0, blocks=4, size=125):
    """A homophilous SBM (average degree about 5) whose features carry the block and a per-node
    part (so that a node's features are recognisable in its neighbours' aggregate)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    probs = [[0.04 if i == j else 0.0016 for j in range(blocks)] for i in range(blocks)]
    edge_index = stochastic_blockmodel_graph([size] * blocks, probs)
    y = torch.arange(blocks).repeat_interleave(size)
    x = torch.cat([1.5 * torch.nn.functional.one_hot(y, blocks).float(),
                   torch.randn(blocks * size, 16, generator=gen)], dim=1)
    return Data(x=x, edge_index=edge_index)


DATA = _sbm()
N = DATA.num_nodes


def _edge_keys(edge_index, n):
    lo, hi = torch.minimum(edge_index[0], edge_index[1]), torch.maximum(edge_index[0], edge_index[1])
    return set((lo * n + hi).tolist())


def _audit(eps, part="message", config=CFG, seed=0, **kw):
    return link_prediction_canary_audit(DATA, config, epsilon=eps, delta=DELTA, num_canaries=M, part=part, key=KEY,
                                        seed=seed, shares=SHARES, **kw)


def _check_canaries(audit, part):
    rule = LinkSplitRule(KEY, SHARES)
    assert audit.pairs.shape == (2, M) and bool((audit.pairs[0] < audit.pairs[1]).all())
    assert bool((rule.part_of(audit.pairs, N) == PARTS.index(part)).all())  # all in the chosen part
    keys = (audit.pairs[0] * N + audit.pairs[1]).tolist()
    assert len(set(keys)) == M and not set(keys) & _edge_keys(DATA.edge_index, N)  # never true edges
    assert audit.pairs.flatten().unique().numel() == 2 * M  # a matching
    assert 0 < int(audit.included.sum()) < M


def test_the_non_private_pipeline_is_caught_through_its_message_part():
    audit = _audit(math.inf)
    assert isinstance(audit, LinkPredictionAudit) and audit.part == "message"
    _check_canaries(audit, "message")
    assert math.isinf(audit.claimed_epsilon) and not audit.contradicts_claim
    assert len(audit.result.accountant) == 0  # the non-private reference charges nothing
    assert audit.private.auc > 0.9
    assert audit.epsilon > 1.5 and audit.epsilon == max(audit.selected.epsilon, audit.private.epsilon)
    # the two attacks share the confidence: each at 1 - (1 - c) / 2
    assert audit.confidence == 0.95 and audit.selected.confidence == audit.private.confidence == pytest.approx(0.975)
    assert audit.selected.canaries == audit.private.canaries == M
    assert audit.selected_scores.shape == audit.private_scores.shape == (M,)


@pytest.mark.parametrize("part", ["message", "train"])
def test_the_private_run_at_epsilon_one_is_not_caught_and_its_ledger_holds_its_four_events(part):
    audit = _audit(1.0, part=part)
    _check_canaries(audit, part)
    assert audit.epsilon < 1.0 and not audit.contradicts_claim
    acct = audit.result.accountant
    assert [e.mechanism for e in acct.events] == ["gap_aggregation", "progap_aggregation", "subsampled_gaussian",
                                                 "report_noisy_max"]
    assert [e.name for e in acct.events] == ["link_encoder", "link_degrees", "link_decoder", "link_selection"]
    groups = acct.parallel_groups
    assert list(groups) == ["link_prediction"] and groups["link_prediction"]["parts"] == 3
    assert acct.get_epsilon(DELTA) == pytest.approx(1.0, rel=1e-9)


def test_the_train_part_is_seen_only_by_a_decoder_that_can_memorise():
    # the default decoder (8 parameters) cannot memorise one supervision pair, even without privacy
    small = _audit(math.inf, part="train")
    assert small.private.epsilon < 1.0
    # a wide node MLP trained long without privacy does; at epsilon 1 (DP-SGD) it does not
    wide = LinkPredictionConfig(decoder="dot", hidden=64, layers=2, epochs=200, lr=0.01, selection_pairs=2000,
                                batch_size=512, feature_dim=None)
    assert _audit(math.inf, part="train", config=wide).private.epsilon > 1.5
    assert _audit(1.0, part="train", config=wide).epsilon < 1.0


def test_seed_reproduces_the_audit_and_the_canaries_stay_in_their_part_when_inserted():
    a, b = _audit(4.0, seed=3), _audit(4.0, seed=3)
    assert torch.equal(a.pairs, b.pairs) and torch.equal(a.included, b.included)
    assert torch.equal(a.private_scores, b.private_scores) and a.candidate == b.candidate
    # the split of the graph with the inserted canaries, under the same key, puts them in the message part
    graph = Data(x=DATA.x, edge_index=insert_edges(DATA.edge_index, a.pairs[:, a.included], N))
    train, _, _ = PrivateLinkSplit(num_val=SHARES[2], num_test=SHARES[3], num_message=SHARES[0],
                                   num_train=SHARES[1], key=KEY)(graph)
    message = _edge_keys(train.edge_index, N)
    keys = (a.pairs[0] * N + a.pairs[1]).tolist()
    assert [k in message for k in keys] == a.included.tolist()


def test_sample_part_canaries():
    rule = LinkSplitRule(KEY, SHARES)
    edges = _edge_keys(DATA.edge_index, N)
    for part in PARTS:
        for disjoint in (True, False):
            pairs = sample_part_canaries(DATA.edge_index, N, 100, part=part, split=rule, disjoint=disjoint,
                                         generator=torch.Generator().manual_seed(1))
            keys = (pairs[0] * N + pairs[1]).tolist()
            assert pairs.shape == (2, 100) and bool((pairs[0] < pairs[1]).all())
            assert len(set(keys)) == 100 and not set(keys) & edges
            assert bool((rule.part_of(pairs, N) == PARTS.index(part)).all())
            if disjoint:
                assert pairs.flatten().unique().numel() == 200
            again = sample_part_canaries(DATA.edge_index, N, 100, part=part, split=rule, disjoint=disjoint,
                                         generator=torch.Generator().manual_seed(1))
            assert torch.equal(pairs, again)
    with pytest.raises(ValueError, match="disjoint"):
        sample_part_canaries(DATA.edge_index, N, N // 2 + 1, part="message", split=rule)
    with pytest.raises(ValueError, match="part"):
        sample_part_canaries(DATA.edge_index, N, 10, part="nowhere", split=rule)


def test_refusals():
    with pytest.raises(ValueError, match="part"):
        _audit(1.0, part="val")
    with pytest.raises(ValueError, match="num_canaries"):
        link_prediction_canary_audit(DATA, CFG, epsilon=1.0, delta=DELTA, num_canaries=0, key=KEY)
    with pytest.raises(ValueError, match="shares"):
        link_prediction_canary_audit(DATA, CFG, epsilon=1.0, delta=DELTA, num_canaries=M, key=KEY, shares=(0.5, 0.5))
    with pytest.raises(TypeError, match="config"):
        link_prediction_canary_audit(DATA, None, epsilon=1.0, delta=DELTA, num_canaries=M, key=KEY)
