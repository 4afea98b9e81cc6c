"""The one-run canary audit of the private link predictor on a user-item (bipartite) graph: the
canaries are user-item pairs of one part of the keyed split, never interactions; the split is the
one PrivateLinkSplit makes of the HeteroData; the attack on the non-private pipeline works, the
private runs are not caught; bad input is refused before anything is charged."""
import math

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data, HeteroData

from pyg_private import PrivacyAccountant
from pyg_private.audit import link_prediction_canary_audit, sample_part_canaries
from pyg_private.audit.link_prediction import LinkPredictionAudit
from pyg_private.models import LinkPredictionConfig
from pyg_private.transforms import PrivateLinkSplit
from pyg_private.transforms.private_link_split import bipartite_union
from pyg_private.utils import LinkSplitRule
from pyg_private.utils.pair_sampling import PARTS

DELTA = 1e-5
KEY = 17
SHARES = (0.5, 0.2, 0.15, 0.15)
USERS, ITEMS, GROUPS = 300, 200, 4
N = USERS + ITEMS
M = 120  # a matching across the sides holds at most min(USERS, ITEMS) canaries
# full-batch DP-SGD (a batch above the expected number of examples): fast, exact calibration
CFG = LinkPredictionConfig(epochs=30, selection_pairs=2000, batch_size=512)
EDGE = ("user", "buys", "item")


def _user_item(seed=0, per_user=5):
    """Users and items in 4 groups; a user interacts mostly (90%) with items of its group (about 5
    interactions per user); each side's features carry its group and a per-node part (so that a
    node's features are recognisable in its neighbours' aggregate)."""
    g = torch.Generator().manual_seed(seed)
    user_group, item_group = torch.arange(USERS) % GROUPS, torch.arange(ITEMS) % GROUPS
    k = USERS * per_user
    u = torch.randint(0, USERS, (k,), generator=g)
    same = torch.rand(k, generator=g) < 0.9
    pick = torch.randint(0, ITEMS // GROUPS, (k,), generator=g) * GROUPS + user_group[u]
    i = torch.where(same, pick, torch.randint(0, ITEMS, (k,), generator=g))
    keys = torch.unique(u * ITEMS + i)
    data = HeteroData()
    data["user"].x = torch.cat([1.5 * torch.nn.functional.one_hot(user_group, GROUPS).float(),
                                torch.randn(USERS, 16, generator=g)], dim=1)
    data["item"].x = torch.cat([1.5 * torch.nn.functional.one_hot(item_group, GROUPS).float(),
                                torch.randn(ITEMS, 12, generator=g)], dim=1)
    data[EDGE].edge_index = torch.stack([keys // ITEMS, keys % ITEMS])
    return data


DATA = _user_item()
UNION, _ = bipartite_union(DATA)  # user i is node i, item j is node USERS + j


def _edge_keys(edge_index, n=N):
    lo, hi = torch.minimum(edge_index[0], edge_index[1]), torch.maximum(edge_index[0], edge_index[1])
    return set((lo * n + hi).tolist())


INTERACTIONS = _edge_keys(UNION.edge_index)


def _audit(eps, part="message", data=DATA, config=CFG, seed=0, **kw):
    return link_prediction_canary_audit(data, config, epsilon=eps, delta=DELTA, num_canaries=M, part=part, key=KEY,
                                        seed=seed, shares=SHARES, **kw)


def _check_across(pairs, part, m):
    rule = LinkSplitRule(KEY, SHARES)
    assert pairs.shape == (2, m)
    assert bool((pairs[0] < USERS).all()) and bool((pairs[1] >= USERS).all())  # user-item pairs only
    assert bool((rule.part_of(pairs, N) == PARTS.index(part)).all())  # all in the chosen part
    keys = (pairs[0] * N + pairs[1]).tolist()
    assert len(set(keys)) == m and not set(keys) & INTERACTIONS  # distinct, never interactions


def _check_canaries(audit, part):
    assert audit.num_src == USERS
    _check_across(audit.pairs, part, M)
    assert audit.pairs.flatten().unique().numel() == 2 * M  # a matching
    assert 0 < int(audit.included.sum()) < M


def test_sample_part_canaries_across_the_sides():
    rule = LinkSplitRule(KEY, SHARES)
    for part in PARTS:
        for disjoint in (True, False):
            pairs = sample_part_canaries(UNION.edge_index, N, 150, part=part, split=rule, disjoint=disjoint,
                                         generator=torch.Generator().manual_seed(1), num_src=USERS)
            _check_across(pairs, part, 150)
            if disjoint:
                assert pairs.flatten().unique().numel() == 300
            again = sample_part_canaries(UNION.edge_index, N, 150, part=part, split=rule, disjoint=disjoint,
                                         generator=torch.Generator().manual_seed(1), num_src=USERS)
            assert torch.equal(pairs, again)
    # without num_src the same draw has pairs within one side (the test above can fail)
    free = sample_part_canaries(UNION.edge_index, N, 150, part="message", split=rule,
                                generator=torch.Generator().manual_seed(1))
    assert bool(((free[0] < USERS) == (free[1] < USERS)).any())


def test_the_non_private_pipeline_is_caught_through_its_message_part_on_a_user_item_graph():
    audit = _audit(math.inf)
    assert isinstance(audit, LinkPredictionAudit) and audit.part == "message"
    _check_canaries(audit, "message")
    assert math.isinf(audit.claimed_epsilon) and not audit.contradicts_claim
    assert len(audit.result.accountant) == 0  # the non-private reference charges nothing
    assert audit.private.auc > 0.9
    assert audit.epsilon > 1.5 and audit.epsilon == max(audit.selected.epsilon, audit.private.epsilon)
    assert audit.confidence == 0.95 and audit.selected.confidence == audit.private.confidence == pytest.approx(0.975)
    assert audit.selected.canaries == audit.private.canaries == M
    assert audit.selected_scores.shape == audit.private_scores.shape == (M,)


@pytest.mark.parametrize("eps,part", [(1.0, "message"), (1.0, "train"), (4.0, "message")])
def test_the_private_run_on_a_user_item_graph_is_not_caught(eps, part):
    audit = _audit(eps, part=part)
    _check_canaries(audit, part)
    assert audit.epsilon < eps and not audit.contradicts_claim
    acct = audit.result.accountant
    assert [e.name for e in acct.events] == ["link_encoder", "link_degrees", "link_decoder", "link_selection"]
    assert acct.get_epsilon(DELTA) == pytest.approx(eps, rel=1e-9)


def test_the_split_is_the_one_private_link_split_makes_of_the_hetero_data():
    a = _audit(4.0, seed=3)
    # the union with split_num_src (or num_src=), and the HeteroData with its ToUndirected reverse,
    # are the same audit: same canaries, coins and scores
    union = Data(x=UNION.x, edge_index=UNION.edge_index, num_nodes=N)
    for b in (_audit(4.0, seed=3, data=union, num_src=USERS), _audit(4.0, seed=3, data=T.ToUndirected()(DATA.clone()))):
        assert torch.equal(a.pairs, b.pairs) and torch.equal(a.included, b.included)
        assert torch.equal(a.private_scores, b.private_scores) and a.candidate == b.candidate
    # the canaries inserted as interactions of the HeteroData and split by PrivateLinkSplit under
    # the same key: exactly the included ones are message edges
    hetero = DATA.clone()
    added = a.pairs[:, a.included]
    hetero[EDGE].edge_index = torch.cat([DATA[EDGE].edge_index, torch.stack([added[0], added[1] - USERS])], dim=1)
    train, _, _ = PrivateLinkSplit(num_val=SHARES[2], num_test=SHARES[3], num_message=SHARES[0],
                                   num_train=SHARES[1], key=KEY)(hetero)
    assert train.split_num_src == USERS and torch.equal(train.x, UNION.x)
    message = _edge_keys(train.edge_index)
    assert [k in message for k in (a.pairs[0] * N + a.pairs[1]).tolist()] == a.included.tolist()


def test_refusals_on_user_item_graphs_before_anything_is_charged():
    acct = PrivacyAccountant()

    def refused(data, match, num_canaries=M, **kw):
        with pytest.raises(ValueError, match=match):
            link_prediction_canary_audit(data, CFG, epsilon=1.0, delta=DELTA, num_canaries=num_canaries, key=KEY,
                                         shares=SHARES, accountant=acct, seed=0, **kw)

    two = DATA.clone()
    two["user", "likes", "item"].edge_index = DATA[EDGE].edge_index[:, :10]
    refused(two, "one edge type")
    union = Data(x=UNION.x, edge_index=UNION.edge_index, num_nodes=N)
    for bad in (0, N, -1, True, 2.5):
        refused(union, "num_src", num_src=bad)
    carried = union.clone()
    carried.split_num_src = N + 3
    refused(carried, "num_src")
    refused(carried, "differs", num_src=USERS)
    refused(DATA, "differs", num_src=USERS + 1)
    # an edge within one side is no interaction
    refused(union, "same side", num_src=USERS + 1)
    # a matching across the sides holds at most min(USERS, ITEMS) canaries
    refused(DATA, "disjoint", num_canaries=ITEMS + 1)
    refused(union, "disjoint", num_canaries=ITEMS + 1, num_src=USERS)
    assert len(acct) == 0
    rule = LinkSplitRule(KEY, SHARES)
    for bad in (0, N):
        with pytest.raises(ValueError, match="num_src"):
            sample_part_canaries(UNION.edge_index, N, 10, part="message", split=rule, num_src=bad)
    with pytest.raises(ValueError, match="pairs across"):
        sample_part_canaries(UNION.edge_index[:, :0], 5, 7, part="message", split=rule, num_src=2, disjoint=False)
