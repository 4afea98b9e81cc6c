"""run_link_prediction: one ledger (three parts of one parallel group, the total equal to one part's),
refusals before any charge, the recipe end to end on a homophilous SBM, reproducibility, and the
report-noisy-max selection."""
import copy
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import RandomLinkSplit
from torch_geometric.utils import stochastic_blockmodel_graph

from pyg_private import PrivacyAccountant
from pyg_private.accounting import compose
from pyg_private.models import LinkPredictionConfig, LinkPredictionResult, run_link_prediction
from pyg_private.models.link_training import LinkDecoder
from pyg_private.models.link_training import report_noisy_max
from pyg_private.transforms import PrivateLinkSplit
from pyg_private.utils import LinkSplitRule

DELTA = 1e-5
# a batch above the expected number of examples: full-batch DP-SGD (rate 1), whose calibration is exact GDP (fast)
CFG = LinkPredictionConfig(epochs=5, selection_pairs=2000, feature_dim=4, hidden=8, batch_size=512)


def _sbm(seed=0, blocks=4, size=60):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    probs = [[0.2 if i == j else 0.01 for j in range(blocks)] for i in range(blocks)]
    edge_index = stochastic_blockmodel_graph([size] * blocks, probs)
    y = torch.arange(blocks).repeat_interleave(size)
    x = 2.0 * torch.nn.functional.one_hot(y, blocks).float() + torch.randn(blocks * size, blocks, generator=gen)
    return Data(x=torch.cat([x, torch.randn(blocks * size, 4, generator=gen)], dim=1), edge_index=edge_index)


DATA = _sbm()
NUM_EDGES = DATA.edge_index.size(1) // 2  # the test's graph is public to the test: the declared count
SPLIT = PrivateLinkSplit(num_val=0.15, num_test=0.15, num_message=0.5, num_train=0.2, key=17,
                         generator=torch.Generator().manual_seed(0))(DATA)


def _run(eps=2.0, splits=SPLIT, config=CFG, **kw):
    kw.setdefault("num_edges", NUM_EDGES)
    kw.setdefault("seed", 0)
    return run_link_prediction(*splits, config, epsilon=eps, delta=DELTA, **kw)


def test_one_ledger_three_parts_and_the_total_is_one_part():
    acct = PrivacyAccountant()
    subsampled = LinkPredictionConfig(epochs=5, selection_pairs=2000, feature_dim=4, hidden=8, batch_size=128)
    result = _run(2.0, accountant=acct, config=subsampled)
    assert result.sample_rate < 1.0 and isinstance(result, LinkPredictionResult) and result.accountant is acct
    events = acct.events
    assert [e.name for e in events] == ["link_encoder", "link_degrees", "link_decoder", "link_selection"]
    assert [e.mechanism for e in events][2:] == ["subsampled_gaussian", "report_noisy_max"]
    assert all(e.unit.value == "edge" for e in events)
    groups = acct.parallel_groups
    assert list(groups) == ["link_prediction"] and groups["link_prediction"]["parts"] == 3
    parts = {e.name: compose([e]).epsilon(DELTA) for e in events[2:]}
    # the message part, the hops and the degrees together: exactly (eps, delta), the degrees a quarter of mu^2
    parts["message"] = compose(events[:2]).epsilon(DELTA)
    assert parts["message"] == pytest.approx(2.0, rel=1e-9) and parts["message"] <= 2.0
    mu_hops, mu_degrees = (math.sqrt(e.params.get("K", 1)) / e.params["noise_multiplier"] for e in events[:2])
    assert mu_degrees ** 2 / (mu_hops ** 2 + mu_degrees ** 2) == pytest.approx(0.25, rel=1e-6)
    assert result.degree_noise_multiplier == events[1].params["noise_multiplier"]
    assert 2.0 * 0.99 < parts["link_decoder"] <= 2.0 and parts["link_selection"] <= 2.0
    total = acct.get_epsilon(DELTA)
    assert total == pytest.approx(max(parts.values()), rel=1e-9) and total == pytest.approx(2.0, rel=1e-9)
    # a second run on the same ledger is another group, composed sequentially with the first
    _run(2.0, accountant=acct)
    assert len(acct.parallel_groups) == 2 and acct.get_epsilon(DELTA) > 2.5


def test_the_private_predictor_beats_random_at_a_large_epsilon():
    result = _run(50.0)
    assert result.candidate in result.candidates
    assert set(result.candidates) == {"private", "release cosine", "feature cosine"}
    assert result.candidates["private"]["test"]["auc"] > 0.6
    assert result.candidates["release cosine"]["test"]["auc"] > 0.6
    assert set(result.test) == {"auc", "hits@20", "hits@50", "hits@100", "mrr"}
    assert result.val == result.candidates[result.candidate]["val"]
    assert result.noise_multiplier > 0 and result.steps > 0


def test_seed_reproduces_the_run():
    a, b = _run(4.0), _run(4.0)
    assert a.candidate == b.candidate and a.test == b.test and a.val == b.val
    for p, q in zip(a.model.decoders["private"].parameters(), b.model.decoders["private"].parameters()):
        assert torch.equal(p, q)


def test_the_non_private_reference_charges_nothing_and_the_encoder_free_candidate():
    acct = PrivacyAccountant()
    cfg = LinkPredictionConfig(epochs=5, selection_pairs=2000, feature_dim=4, hidden=8, batch_size=512,
                               encoder_free_candidate=True)
    result = _run(math.inf, accountant=acct, config=cfg, num_edges=None)
    assert len(acct) == 0 and result.noise_multiplier == 0.0 and result.encoder_noise_multiplier == 0.0
    assert set(result.candidates) == {"private", "release cosine", "encoder-free", "feature cosine"}
    assert result.candidates["release cosine"]["test"]["auc"] > 0.7
    private = _run(8.0, config=cfg)  # the two decoders in one DP-SGD run: still one event of DP-SGD
    assert len(private.accountant) == 4 and "encoder-free" in private.model.decoders


def test_the_model_scores_pairs_from_its_cached_release():
    result = _run(4.0)
    acct, model = result.accountant, result.model
    train = SPLIT[0]
    pairs = SPLIT[2].edge_label_index
    scores = model.score(train.x, train.edge_index, pairs, "private")
    assert scores.shape == (pairs.size(1),) and len(acct) == 4  # the releases reused: no new charge
    for name in result.candidates:
        assert model.score(train.x, train.edge_index, pairs, name).shape == scores.shape
    u, v = train.edge_index[:, 0].tolist()
    other = train.edge_index[:, ~(((train.edge_index[0] == u) & (train.edge_index[1] == v))
                                  | ((train.edge_index[0] == v) & (train.edge_index[1] == u)))]
    model.score(train.x, other, pairs, "private")  # another graph (one edge less): new releases
    assert len(acct) == 6 and [e.name for e in acct.events[4:]] == ["link_encoder", "link_degrees"]


def _tamper(fn):
    splits = [copy.copy(d) for d in SPLIT]
    fn(*splits)
    return splits


def _no_rule(tr, va, te):
    for d in (tr, va, te):
        del d.split_key


def _other_key(tr, va, te):
    va.split_key = 18


def _overlap(tr, va, te):
    msg = tr.edge_index[:, tr.edge_index[0] < tr.edge_index[1]][:, :1]
    tr.edge_label_index = torch.cat([tr.edge_label_index, msg], dim=1)
    tr.edge_label = torch.ones(tr.edge_label_index.size(1))


def _negatives(tr, va, te):
    tr.edge_label = tr.edge_label.clone()
    tr.edge_label[0] = 0


def _both_directions(tr, va, te):
    tr.edge_label_index = torch.cat([tr.edge_label_index, tr.edge_label_index[:, :1].flip(0)], dim=1)
    tr.edge_label = torch.ones(tr.edge_label_index.size(1))


def _test_edge_in_val(tr, va, te):
    extra = te.edge_label_index[:, te.edge_label.bool()][:, :1]
    va.edge_label_index = torch.cat([va.edge_label_index, extra], dim=1)
    va.edge_label = torch.cat([va.edge_label, torch.ones(1)])


def _val_duplicate(tr, va, te):
    va.edge_label_index = torch.cat([va.edge_label_index, va.edge_label_index[:, :1]], dim=1)
    va.edge_label = torch.cat([va.edge_label, va.edge_label[:1]])


def _filtered_negative(tr, va, te):  # a negative from another part (as a graph-filtered sampler would give)
    rule = LinkSplitRule.of(va)
    n = va.num_nodes
    cand = torch.triu_indices(n, n, 1)
    outside = cand[:, rule.part_of(cand, n) == 0][:, :1]
    va.edge_label_index = torch.cat([va.edge_label_index, outside], dim=1)
    va.edge_label = torch.cat([va.edge_label, torch.zeros(1)])


def _directed(tr, va, te):
    for d in (tr, va, te):
        d.edge_index = tr.edge_index[:, tr.edge_index[0] < tr.edge_index[1]]


def _features(tr, va, te):
    te.x = te.x + 1.0


@pytest.mark.parametrize("tamper, match", [
    (_no_rule, "PrivateLinkSplit"), (_other_key, "different split rules"), (_overlap, "overlap"),
    (_negatives, "negative"), (_both_directions, "twice"), (_test_edge_in_val, "'val' part"),
    (_val_duplicate, "twice"), (_filtered_negative, "negatives of `val_data`"), (_directed, "directed"),
    (_features, "x"),
])
def test_refusals_come_before_any_charge(tamper, match):
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match=match):
        _run(2.0, splits=_tamper(tamper), accountant=acct)
    assert len(acct) == 0 and not acct.parallel_groups


def test_refusals_of_splits_and_settings_not_made_for_this_path():
    acct = PrivacyAccountant()
    torch.manual_seed(0)
    pyg = RandomLinkSplit(is_undirected=True, add_negative_train_samples=False)(copy.copy(DATA))
    with pytest.raises(ValueError, match="PrivateLinkSplit"):
        _run(2.0, splits=pyg, accountant=acct)
    with pytest.raises(ValueError, match="num_edges"):
        _run(2.0, accountant=acct, num_edges=None)
    with pytest.raises(ValueError, match="epsilon"):
        _run(0.0, accountant=acct)
    with pytest.raises(ValueError):
        LinkPredictionConfig(decoder="mlp")
    assert len(acct) == 0


def test_report_noisy_max_is_exact_and_epsilon_dp():
    gen = torch.Generator().manual_seed(0)
    assert report_noisy_max(torch.tensor([3, 90, 5]), 10.0, generator=gen) == 1
    assert report_noisy_max(torch.tensor([7, 7]), 1e6, generator=gen) == 0  # a tie goes to the first
    # neighbouring counts (one edge added raises one count by 1): P(index 1) moves by at most e^eps
    eps, trials = 1.0, 3000
    freq = []
    for counts in ([5, 5], [5, 6]):
        wins = sum(report_noisy_max(torch.tensor(counts), eps, generator=gen) for _ in range(trials))
        freq.append(wins / trials)
    # exact values for the continuous Laplace: 0.5 and 1 - e^-1 (1 + 1/2) / 2 = 0.7241
    assert freq[0] == pytest.approx(0.5, abs=0.04) and freq[1] == pytest.approx(0.7241, abs=0.04)
    assert freq[1] / freq[0] <= math.exp(eps) and (1 - freq[0]) / (1 - freq[1]) <= math.exp(eps)


def test_the_channels_decoder_is_a_symmetric_logistic_model_on_cosines():

    torch.manual_seed(0)
    dec = LinkDecoder(12, 8, 1, "channels", columns=(0, 12), blocks=3, raw=(12, 17))
    assert sum(p.numel() for p in dec.parameters()) == 6 + 1 + 1  # 6 block pairs + the raw cosine + a bias
    with torch.no_grad():
        dec.score.weight.copy_(torch.randn(1, 7))
        dec.score.bias.fill_(0.3)
    zu, zv = torch.randn(5, 17), torch.randn(5, 17)
    assert torch.allclose(dec(zu, zv), dec(zv, zu))  # symmetric in the pair
    assert torch.allclose(dec(2.5 * zu, zv), dec(zu, zv))  # cosines: the scale of each block is irrelevant
    blocks_u, blocks_v = zu[:, :12].view(5, 3, 4), zv[:, :12].view(5, 3, 4)
    cos = torch.nn.functional.cosine_similarity
    want = [0.5 * (cos(blocks_u[:, i], blocks_v[:, j], dim=-1) + cos(blocks_u[:, j], blocks_v[:, i], dim=-1))
            for i in range(3) for j in range(i, 3)] + [cos(zu[:, 12:], zv[:, 12:], dim=-1)]
    expected = torch.stack(want, dim=-1) @ dec.score.weight.view(-1) + 0.3
    assert torch.allclose(dec(zu, zv), expected, atol=1e-6)


def test_the_channels_decoder_runs_end_to_end_and_scores_from_the_model():
    cfg = LinkPredictionConfig(epochs=5, selection_pairs=2000, feature_dim=4, batch_size=512, decoder="channels",
                               lr=0.1)
    result = _run(50.0, config=cfg)
    assert result.candidates["private"]["test"]["auc"] > 0.6 and len(result.accountant) == 4
    pairs = SPLIT[2].edge_label_index
    scores = result.model.score(SPLIT[0].x, SPLIT[0].edge_index, pairs, "private")
    assert scores.shape == (pairs.size(1),) and len(result.accountant) == 4
    assert torch.allclose(scores, result.model.decoders["private"](*_decoder_rows(result.model, pairs)))


def _decoder_rows(model, pairs):
    x, ei = SPLIT[0].x, SPLIT[0].edge_index
    z = torch.cat([model.embed(x, ei), torch.nn.functional.normalize(x.float(), dim=-1)], dim=-1)
    root = model.degrees(x, ei).clamp(min=0).sqrt()
    zd = torch.cat([z, (root / root.mean()).unsqueeze(-1)], dim=-1)
    return zd[pairs[0]], zd[pairs[1]]


def test_the_channels_decoder_reads_the_degree_column_as_a_sum_and_a_product():
    torch.manual_seed(0)
    dec = LinkDecoder(12, 8, 1, "channels", columns=(0, 12), blocks=3, raw=(12, 17), degree=17)
    assert sum(p.numel() for p in dec.parameters()) == 6 + 1 + 2 + 1  # + the degrees' sum and product
    with torch.no_grad():
        dec.score.weight.zero_()
        dec.score.weight[0, 7:9] = torch.tensor([2.0, -1.0])
    zu, zv = torch.randn(5, 18), torch.randn(5, 18)
    assert torch.allclose(dec(zu, zv), 2.0 * (zu[:, 17] + zv[:, 17]) - zu[:, 17] * zv[:, 17], atol=1e-6)
    assert torch.allclose(dec(zu, zv), dec(zv, zu))
    with pytest.raises(ValueError, match="only the 'channels' decoder"):
        LinkDecoder(12, 8, 1, "dot", columns=(0, 12), degree=12)


def test_the_degree_share_is_resolved_checked_and_zero_turns_the_release_off():
    assert LinkPredictionConfig().degree_fraction() == 0.25
    assert LinkPredictionConfig(decoder="dot").degree_fraction() == 0.0
    for bad in (-0.1, 1.0, True, "0.2"):
        with pytest.raises(ValueError, match="degree_share"):
            LinkPredictionConfig(degree_share=bad)
    with pytest.raises(ValueError, match="only the 'channels' decoder reads"):
        LinkPredictionConfig(decoder="dot", degree_share=0.2)
    cfg = LinkPredictionConfig(epochs=2, selection_pairs=500, feature_dim=4, degree_share=0.0)
    result = _run(2.0, config=cfg)
    assert [e.name for e in result.accountant.events][0] == "link_encoder" and len(result.accountant) == 3
    assert result.model.degree_layer is None and result.degree_noise_multiplier == 0.0
    assert compose(result.accountant.events[:1]).epsilon(DELTA) == pytest.approx(2.0, rel=1e-9)


def test_the_degree_release_moves_by_at_most_its_charged_sensitivity_on_every_one_edge_neighbour():
    from itertools import combinations
    from pyg_private.nn import ProGAPAggregation
    n = 6
    layer = ProGAPAggregation(noise_multiplier=0.0, cached=False)
    ones = torch.ones(n, 1, dtype=torch.float64)
    pairs = list(combinations(range(n), 2))
    for mask in range(0, 1 << len(pairs), 97):  # 338 graphs on 6 nodes, every edge removed in turn
        edges = [p for i, p in enumerate(pairs) if mask >> i & 1]
        if not edges:
            continue
        ei = torch.tensor(edges).t()
        full = layer(ones, torch.cat([ei, ei.flip(0)], 1))[:, 1]
        for drop in range(len(edges)):
            rest = ei[:, [i for i in range(len(edges)) if i != drop]]
            less = layer(ones, torch.cat([rest, rest.flip(0)], 1))[:, 1]
            assert float((full - less).norm()) == pytest.approx(math.sqrt(2))  # attained: two ends, one each
    assert layer.sensitivity == pytest.approx(math.sqrt(2))
