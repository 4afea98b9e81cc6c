"""Node-level membership inference (train on the members' subgraph, query the full graph)."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from pyg_private.audit import (
    MembershipResult,
    member_split,
    member_subgraph,
    membership_inference,
    membership_scores,
    shadow_attack,
    threshold_attack,
)


# --------------------------------------------------------------------------- helpers

def lookup_logits(y: torch.Tensor, members: torch.Tensor, num_classes: int, *, confidence: float = 8.0):
    """A memorising "model": a confident correct prediction on members, uniform logits elsewhere."""
    logits = torch.zeros(y.numel(), num_classes)
    logits[members, y[members]] = confidence
    return logits


def random_graph(n: int, *, num_features: int, num_classes: int, avg_degree: float, seed: int) -> Data:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, num_features, generator=g)
    y = torch.randint(0, num_classes, (n,), generator=g)
    e = int(n * avg_degree / 2)
    src = torch.randint(0, n, (e,), generator=g)
    dst = torch.randint(0, n, (e,), generator=g)
    keep = src != dst
    ei = torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])])
    ei = torch.unique(ei, dim=1)
    return Data(x=x, y=y, edge_index=ei)


class GCN(torch.nn.Module):
    def __init__(self, f: int, h: int, c: int):
        super().__init__()
        self.c1, self.c2 = GCNConv(f, h), GCNConv(h, c)

    def forward(self, x, edge_index):
        return self.c2(F.relu(self.c1(x, edge_index)), edge_index)


# --------------------------------------------------------------------------- attacks separate

def test_lookup_model_is_detected():
    n, c = 400, 5
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, c, (n,), generator=g)
    members = member_split(n, generator=g)
    logits = lookup_logits(y, members, c)
    for kind in ("confidence", "loss", "max_prob", "entropy"):
        res = threshold_attack(membership_scores(logits, y, kind), members, ~members)
        assert isinstance(res, MembershipResult)
        assert res.auc == pytest.approx(1.0) and res.advantage == pytest.approx(1.0)
        assert res.best_accuracy == pytest.approx(1.0)
        assert res.tpr_at_1pct_fpr == pytest.approx(1.0) and res.tpr_at_10pct_fpr == pytest.approx(1.0)
        assert res.members == int(members.sum()) and res.nonmembers == n - int(members.sum())
        assert res.scores.shape == (n,) and torch.equal(res.is_member, members)


def test_overfitted_mlp_memorising_random_labels():
    torch.manual_seed(0)
    n, f, c = 200, 16, 4
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, f, generator=g)
    y = torch.randint(0, c, (n,), generator=g)  # random labels: only memorisation fits them
    members = member_split(n, generator=g)
    model = torch.nn.Sequential(torch.nn.Linear(f, 256), torch.nn.ReLU(), torch.nn.Linear(256, c))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        F.cross_entropy(model(x[members]), y[members]).backward()
        opt.step()
    with torch.no_grad():
        logits = model(x)
    res = threshold_attack(membership_scores(logits, y, "confidence"), members, ~members)
    assert res.auc > 0.8, res.auc
    assert res.best_accuracy > 0.7


def test_constant_model_is_exactly_chance():
    n = 300
    y = torch.randint(0, 3, (n,), generator=torch.Generator().manual_seed(2))
    members = member_split(n, generator=torch.Generator().manual_seed(3))
    uniform = torch.zeros(n, 3)  # the same (uniform) output for every node: every kind is constant
    for kind in ("confidence", "loss", "max_prob", "entropy"):
        res = threshold_attack(membership_scores(uniform, y, kind), members, ~members)
        assert res.auc == 0.5 and res.advantage == 0.5
        assert res.best_accuracy == 0.5 and res.tpr_at_1pct_fpr == 0.0 and res.tpr_at_10pct_fpr == 0.0
    # a constant non-uniform output: the label-free scores are constant too
    skewed = torch.zeros(n, 3) + torch.tensor([0.3, -1.0, 2.0])
    for kind in ("max_prob", "entropy"):
        res = threshold_attack(membership_scores(skewed, None, kind), members, ~members)
        assert res.auc == 0.5 and res.advantage == 0.5


def test_advantage_is_symmetric_in_score_orientation():
    g = torch.Generator().manual_seed(4)
    n = 500
    members = member_split(n, generator=g)
    scores = torch.randn(n, generator=g) + 0.6 * members.float()
    a = threshold_attack(scores, members, ~members)
    b = threshold_attack(-scores, members, ~members)
    assert 0.6 < a.auc < 0.9
    assert b.auc == pytest.approx(1.0 - a.auc, abs=1e-12)
    assert a.advantage == pytest.approx(b.advantage, abs=1e-12) == pytest.approx(a.auc)
    assert a.best_accuracy == pytest.approx(b.best_accuracy, abs=1e-12)
    # the TPR at low FPR is for the stated orientation only
    assert a.tpr_at_10pct_fpr > b.tpr_at_10pct_fpr


def test_metrics_on_a_hand_example():
    # members 3, 2, 1 ; non-members 1.5, 0 : pairs won 5 of 6 -> AUC 5/6
    scores = torch.tensor([3.0, 2.0, 1.0, 1.5, 0.0])
    m = torch.tensor([True, True, True, False, False])
    res = threshold_attack(scores, m, ~m)
    assert res.auc == pytest.approx(5 / 6)
    assert res.tpr_at_1pct_fpr == pytest.approx(2 / 3)  # t = 2: TPR 2/3, FPR 0
    # best balanced accuracy: t = 1 gives (1 + 1/2)/2 = 0.75 ; t = 2 gives (2/3 + 1)/2 = 5/6
    assert res.best_accuracy == pytest.approx(5 / 6)
    # nodes outside both masks are ignored, even non-finite
    scores2 = torch.cat([scores, torch.tensor([float("nan")])])
    res2 = threshold_attack(scores2, torch.cat([m, torch.tensor([False])]), torch.cat([~m, torch.tensor([False])]))
    assert res2.auc == pytest.approx(5 / 6) and res2.members == 3 and res2.nonmembers == 2


def test_score_kinds():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    y = torch.tensor([0, 2])
    p = torch.softmax(logits.double(), -1)
    assert torch.allclose(membership_scores(logits, y, "confidence"), p[[0, 1], [0, 2]])
    assert torch.allclose(membership_scores(logits, y, "loss"), p[[0, 1], [0, 2]].log())
    assert torch.allclose(membership_scores(logits, y, "max_prob"), p.max(-1).values)
    assert torch.allclose(membership_scores(logits, None, "entropy"), (p * p.log()).sum(-1))
    assert membership_scores(logits, y).dtype == torch.float64
    # float64 log-softmax: confident predictions stay resolved under "loss"
    big = torch.tensor([[40.0, 0.0], [50.0, 0.0], [0.0, 50.0]])
    s = membership_scores(big, torch.tensor([0, 0, 0]), "loss")
    assert 0 > s[1] > s[0]
    assert s[0] == pytest.approx(-math.exp(-40.0), rel=1e-12) and s[2] == pytest.approx(-50.0, rel=1e-12)
    lp = torch.log_softmax(logits.double(), -1)
    assert torch.allclose(membership_scores(logits, torch.tensor([1, 0]), "loss"), lp[[0, 1], [1, 0]], atol=1e-15)


# --------------------------------------------------------------------------- the split

def test_member_split_is_bernoulli_and_reproducible():
    n = 10_000
    m = member_split(n, fraction=0.5, generator=torch.Generator().manual_seed(5))
    assert m.dtype == torch.bool and m.shape == (n,)
    assert abs(int(m.sum()) - 5000) <= 4 * math.sqrt(n * 0.25)
    again = member_split(n, fraction=0.5, generator=torch.Generator().manual_seed(5))
    other = member_split(n, fraction=0.5, generator=torch.Generator().manual_seed(6))
    assert torch.equal(m, again) and not torch.equal(m, other)
    # the count varies across seeds (not a fixed-size split)
    counts = {int(member_split(100, generator=torch.Generator().manual_seed(s)).sum()) for s in range(20)}
    assert len(counts) > 3
    m2 = member_split(n, fraction=0.2, generator=torch.Generator().manual_seed(7))
    assert abs(int(m2.sum()) - 2000) <= 4 * math.sqrt(n * 0.16)


def test_member_split_respects_candidates():
    n = 2000
    cand = torch.zeros(n, dtype=torch.bool)
    cand[::3] = True
    m = member_split(n, generator=torch.Generator().manual_seed(8), candidates=cand)
    assert not bool((m & ~cand).any())
    k = int(cand.sum())
    assert abs(int(m.sum()) - k / 2) <= 4 * math.sqrt(k / 4)
    idx = cand.nonzero().view(-1)
    m_idx = member_split(n, generator=torch.Generator().manual_seed(8), candidates=idx)
    assert torch.equal(m, m_idx)


# --------------------------------------------------------------------------- the subgraph

def test_member_subgraph_keeps_member_edges_and_relabels():
    # path 0-1-2-3-4 plus edge 0-4 (undirected), members {1, 2, 4}
    und = [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4), (1, 4)]
    ei = torch.tensor([[a for a, b in und] + [b for a, b in und], [b for a, b in und] + [a for a, b in und]])
    x = torch.arange(10, dtype=torch.float).view(5, 2)
    y = torch.tensor([0, 1, 2, 0, 1])
    data = Data(x=x, y=y, edge_index=ei, edge_attr=torch.arange(ei.size(1), dtype=torch.float))
    members = torch.tensor([False, True, True, False, True])
    sub = member_subgraph(data, members)
    assert sub.num_nodes == 3
    assert torch.equal(sub.node_id, torch.tensor([1, 2, 4]))
    assert torch.equal(sub.x, x[[1, 2, 4]]) and torch.equal(sub.y, y[[1, 2, 4]])
    got = {tuple(e) for e in sub.edge_index.t().tolist()}
    # member-member edges (1,2) and (1,4) relabelled: 1->0, 2->1, 4->2
    assert got == {(0, 1), (1, 0), (0, 2), (2, 0)}
    # edges of the original graph map back through node_id
    orig = {tuple(e) for e in ei.t().tolist()}
    for (a, b), w in zip(sub.edge_index.t().tolist(), sub.edge_attr.tolist()):
        assert (int(sub.node_id[a]), int(sub.node_id[b])) in orig
        assert tuple(ei[:, int(w)].tolist()) == (int(sub.node_id[a]), int(sub.node_id[b]))
    assert data.num_nodes == 5 and data.edge_index.size(1) == 12  # input untouched


# --------------------------------------------------------------------------- end to end

def _gcn_trainer(epochs: int = 200, hidden: int = 64):
    def train(sub: Data):
        torch.manual_seed(0)
        model = GCN(sub.num_features, hidden, 4)  # the class count is public
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=0.0)
        model.train()
        for _ in range(epochs):
            opt.zero_grad()
            F.cross_entropy(model(sub.x, sub.edge_index), sub.y).backward()
            opt.step()
        model.eval()
        return lambda d: model(d.x, d.edge_index)
    return train


def test_membership_inference_end_to_end_gcn():
    data = random_graph(200, num_features=32, num_classes=4, avg_degree=3.0, seed=9)  # random labels: overfit
    res = membership_inference(_gcn_trainer(), data, generator=torch.Generator().manual_seed(10))
    assert res.members + res.nonmembers == 200
    assert res.auc > 0.65, res.auc  # 0.777 measured (0.73-0.78 over graph seeds)
    # "loss" is a monotone transform of "confidence": the same split (same seed), the same AUC
    res_l = membership_inference(_gcn_trainer(), data, kind="loss", generator=torch.Generator().manual_seed(10))
    assert torch.equal(res.is_member, res_l.is_member)
    assert res_l.auc == pytest.approx(res.auc, abs=1e-3)


def test_membership_inference_candidates_and_split_passthrough():
    data = random_graph(60, num_features=4, num_classes=4, avg_degree=2.0, seed=11)
    data.y[40:] = -1  # unlabeled nodes are not candidates
    seen = {}

    def train(sub):
        seen["sub"] = sub
        return lambda d: lookup_logits(d.y.clamp_min(0), torch.isin(torch.arange(d.num_nodes), sub.node_id), 4)

    res = membership_inference(train, data, generator=torch.Generator().manual_seed(12),
                               candidates=torch.arange(40))
    sub = seen["sub"]
    assert bool((sub.node_id < 40).all()) and res.members == sub.num_nodes
    assert res.members + res.nonmembers == 40
    assert res.auc == pytest.approx(1.0)


# --------------------------------------------------------------------------- shadow attack

def test_shadow_attack_on_lookup_model():
    c = 5
    g = torch.Generator().manual_seed(13)
    ys, yt = torch.randint(0, c, (300,), generator=g), torch.randint(0, c, (300,), generator=g)
    ms, mt = member_split(300, generator=g), member_split(300, generator=g)
    # a noisy memoriser: members mostly confident, everyone with logit noise
    def logits_of(y, m):
        out = lookup_logits(y, m, c, confidence=3.0) + 0.8 * torch.randn(y.numel(), c, generator=g)
        return out
    res = shadow_attack(logits_of(yt, mt), yt, mt, ~mt, logits_of(ys, ms), ys, ms, ~ms)
    assert res.auc > 0.8, res.auc
    assert res.members == int(mt.sum())


def test_shadow_attack_is_deterministic_and_handles_two_classes():
    g = torch.Generator().manual_seed(14)
    y = torch.randint(0, 2, (200,), generator=g)
    m = member_split(200, generator=g)
    logits = lookup_logits(y, m, 2, confidence=2.0) + 0.5 * torch.randn(200, 2, generator=g)
    a = shadow_attack(logits, y, m, ~m, logits, y, m, ~m)
    b = shadow_attack(logits, y, m, ~m, logits, y, m, ~m)
    assert torch.equal(a.scores, b.scores) and a.auc == b.auc
    assert a.auc > 0.8


# --------------------------------------------------------------------------- validation

def test_validation_errors():
    n = 10
    m = torch.zeros(n, dtype=torch.bool)
    m[:5] = True
    s = torch.randn(n)
    with pytest.raises(TypeError, match="member_mask"):
        threshold_attack(s, m.long(), ~m)
    with pytest.raises(ValueError, match="shape"):
        threshold_attack(s, m[:-1], ~m[:-1])
    with pytest.raises(ValueError, match="disjoint"):
        threshold_attack(s, m, torch.ones(n, dtype=torch.bool))
    with pytest.raises(ValueError, match="no node"):
        threshold_attack(s, m, torch.zeros(n, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN"):
        threshold_attack(torch.full((n,), float("nan")), m, ~m)
    with pytest.raises(ValueError, match="confidence, loss, max_prob, entropy"):
        membership_scores(torch.zeros(n, 3), torch.zeros(n, dtype=torch.long), "bogus")
    with pytest.raises(ValueError, match="shape"):
        membership_scores(torch.zeros(n), torch.zeros(n, dtype=torch.long))
    with pytest.raises(ValueError, match="NaN"):
        membership_scores(torch.full((n, 3), float("inf")), torch.zeros(n, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        membership_scores(torch.zeros(n, 3), torch.full((n,), 3))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        membership_scores(torch.zeros(n, 3), torch.full((n,), -1))
    with pytest.raises(TypeError, match="integer"):
        membership_scores(torch.zeros(n, 3), torch.zeros(n))
    with pytest.raises(ValueError, match="needs the labels"):
        membership_scores(torch.zeros(n, 3), None, "confidence")
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            member_split(n, fraction=bad)
    with pytest.raises(TypeError, match="fraction"):
        member_split(n, fraction=True)
    with pytest.raises(ValueError, match="num_nodes"):
        member_split(0)
    with pytest.raises(ValueError, match="candidates"):
        member_split(n, candidates=torch.tensor([0, n]))
    data = Data(x=torch.zeros(n, 2), y=torch.zeros(n, dtype=torch.long), edge_index=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="no node"):
        member_subgraph(data, torch.zeros(n, dtype=torch.bool))
    with pytest.raises(ValueError, match="shape"):
        member_subgraph(data, torch.ones(n + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="confidence, loss"):
        membership_inference(lambda d: (lambda q: torch.zeros(n, 2)), data, kind="nope")
    with pytest.raises(ValueError, match="one row per node"):
        membership_inference(lambda d: (lambda q: torch.zeros(n - 1, 2)), data,
                             generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="disjoint"):
        shadow_attack(torch.zeros(n, 2), torch.zeros(n, dtype=torch.long), m, m,
                      torch.zeros(n, 2), torch.zeros(n, dtype=torch.long), m, ~m)
    with pytest.raises(ValueError, match="shadow_y"):
        shadow_attack(torch.zeros(n, 2), torch.zeros(n, dtype=torch.long), m, ~m,
                      torch.zeros(n, 2), torch.full((n,), 5), m, ~m)
