"""The safe (exact) edge-flipping sampler: exact geometric gaps, and flip_edges / its callers.

Distributions are checked with chi-square tests at level 1e-6 and rates with 5 standard errors, on
seeded generators (deterministic). The float estimates of r^k that decide most gaps are checked
against 320-bit values, and the exact path (forced by widening the margin) against the same law.
"""
import math
from fractions import Fraction

import mpmath
import pytest
import torch
from scipy import stats
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant
from pyg_private.mechanisms import edge_flipping as ef
from pyg_private.mechanisms import flip_edges
from pyg_private.mechanisms.randomness import WORD_BITS, RandomSource, secure_mode
from pyg_private.nn import EdgeFlippingPPR
from pyg_private.transforms import EdgeRandomizedResponse
from sampler_helpers import ScriptedSource as _Scripted
from sampler_helpers import seeded_source as _source


class _NoMoreWords(RandomSource):
    def words(self, n):
        raise AssertionError("a decided candidate must not need further words")


def _chi2(counts, probs, level=1e-6):
    counts = torch.as_tensor(counts, dtype=torch.float64)
    probs = torch.as_tensor(probs, dtype=torch.float64)
    assert abs(float(probs.sum()) - 1.0) < 1e-9
    expected = counts.sum() * probs
    stat = float(((counts - expected) ** 2 / expected).sum())
    crit = stats.chi2.ppf(1 - level, df=len(probs) - 1)
    assert stat < crit, (stat, crit)


def _gap_bins(p):
    """Bin edges over G and their exact probabilities P(a <= G < b) = r^a - r^b (last bin: the tail)."""
    r = 1.0 - p
    if p >= 0.1:
        edges = list(range(0, int(math.log(1e-4) / math.log(r)) + 1))
    else:
        edges = list(range(0, int(math.log(0.02) / math.log(r)), max(1, int(0.05 / p))))
    probs = [r ** a - r ** b for a, b in zip(edges[:-1], edges[1:])] + [r ** edges[-1]]
    return torch.tensor(edges, dtype=torch.int64), probs


def _check_gap_law(sample, p):
    edges, probs = _gap_bins(p)
    bins = torch.bucketize(sample, edges, right=True) - 1
    _chi2(torch.bincount(bins, minlength=len(probs)), probs)


# ------------------------------------------------------------------------------------ the gap law
@pytest.mark.parametrize("p", [0.3, 1e-3])
def test_exact_gaps_follow_the_geometric_law(p):
    law = ef._GeometricGaps(p)
    sample = law.sample(200_000, _source(11))
    assert sample.dtype == torch.int64 and int(sample.min()) >= 0
    _check_gap_law(sample, p)
    mean = (1 - p) / p
    assert abs(sample.double().mean().item() - mean) < 5 * math.sqrt(1 - p) / p / math.sqrt(sample.numel())


@pytest.mark.parametrize("p", [0.5, 0.3, 1e-3, 2.0 ** -20, 2.0 ** -40, 2.0 ** -53])
def test_float_estimates_of_r_to_the_k_are_within_the_proven_margin(p):
    law = ef._GeometricGaps(p)
    top = ef._EXPONENT_LIMIT / -law.log_r  # |k log r| <= 45
    gen = torch.Generator().manual_seed(5)
    ks = torch.cat([torch.arange(0, 200, dtype=torch.float64),
                    torch.floor(torch.logspace(0, math.log10(top), 600, dtype=torch.float64)),
                    torch.floor(torch.rand(600, dtype=torch.float64, generator=gen) * top)])
    ks = torch.unique(ks[ks * -law.log_r <= ef._EXPONENT_LIMIT])
    y, s, t = law.estimates(ks)
    assert bool((y >= -ef._EXPONENT_LIMIT).all())
    ctx = mpmath.MPContext()
    ctx.prec = 320
    r = 1 - ctx.mpf(p)
    worst = 0.0
    for k, sk, tk in zip(ks.tolist(), s.tolist(), t.tolist()):
        exact = ctx.power(r, int(k))
        worst = max(worst, abs(float(sk / exact - 1)), abs(float(tk / (exact * r) - 1)))
    # the bound used in the proof (2^-46), a quarter of the margin
    assert worst <= 2.0 ** -46, worst
    assert ef.GAP_MARGIN == 2.0 ** -44


@pytest.mark.parametrize("p", [0.5, 0.3, 1e-3, 2.0 ** -30])
def test_accepted_float_candidates_are_the_exact_gaps(p):
    law = ef._GeometricGaps(p)
    words = _source(7).words(3000)
    words[:4] = torch.tensor([1, 2, (1 << 63) - 1, 1 << 62])
    g, ok = law.candidates(words)
    assert float(ok.double().mean()) > 0.99  # the fast path decides almost every gap
    for i in ok.nonzero().squeeze(1)[::3].tolist():
        assert law.exact(int(words[i]), _NoMoreWords("cpu")) == int(g[i])


def test_exact_path_forced_gives_the_geometric_law(monkeypatch):
    monkeypatch.setattr(ef, "GAP_MARGIN", 2.0)  # no float candidate can clear it
    for p, n in ((0.3, 3000), (1e-3, 1500)):
        law = ef._GeometricGaps(p)
        calls = []
        exact = law.exact
        monkeypatch.setattr(law, "exact", lambda w, s: calls.append(w) or exact(w, s))
        sample = law.sample(n, _source(13))
        assert len(calls) == n  # every gap took the exact path
        _check_gap_law(sample, p)


def test_exact_path_is_exact_on_boundary_words():
    # p = 1/2: r^k = 2^-k, and G is the number of leading zero bits of U
    law = ef._GeometricGaps(0.5)
    for z in (0, 1, 5, 40, 61):
        w = 1 << (62 - z)  # U in [2^-(z+1), 2^-(z+1) + 2^-63): exactly on the boundary r^(z+1)
        assert law.sample(1, _Scripted([w])).tolist() == [z]
        assert law.sample(1, _Scripted([w - 1])).tolist() == [z + 1]
    assert law.sample(1, _Scripted([0, 1 << 62])).tolist() == [63]  # U in [2^-64, 2^-64 + 2^-126)
    # zeros after a boundary word: U >= r^2 is decided at once (U = r^2 exactly has probability 0)
    assert law.sample(1, _Scripted([1 << 61, 0, 0, 0, 0])).tolist() == [1]
    assert law.sample(1, _Scripted([0, 1])).tolist() == [125]
    # p = 0.3: a word on each side of r^k (the exact boundary) gives k - 1 and k
    law = ef._GeometricGaps(0.3)
    ctx = mpmath.MPContext()
    ctx.prec = 320
    for k in (1, 2, 17, 60):
        b = int(ctx.floor(ctx.ldexp(ctx.power(1 - ctx.mpf(0.3), k), WORD_BITS)))  # U < r^k iff word < b (or tie)
        assert law.sample(2, _Scripted([b - 1, b + 1])).tolist() == [k, k - 1]


@pytest.mark.parametrize("p", [0.0, -0.1, 0.6, 2.0 ** -54])
def test_gap_law_refuses_unsupported_probabilities(p):
    with pytest.raises(ValueError, match="2\\^-53"):
        ef._GeometricGaps(p)


# ---------------------------------------------------------------------------------------- the pattern law
def test_flip_patterns_of_a_block_of_15_pairs_are_exactly_uniform_at_q_one_half():
    # the positions of one long Bernoulli(1/2) sequence, cut in blocks of 15 bits: every one of the
    # 2^15 flip patterns of a 6-node graph must be equally likely (and all must occur)
    blocks = 20 * 2 ** 15
    pos = ef._exact_bernoulli_positions(15 * blocks, 0.5, _source(17))
    pattern = torch.zeros(blocks, dtype=torch.int64).index_add_(0, pos // 15, 2 ** (pos % 15))
    counts = torch.bincount(pattern, minlength=2 ** 15)
    assert int(counts.min()) > 0
    _chi2(counts, [2.0 ** -15] * 2 ** 15)


def test_flip_patterns_at_q_three_quarters():
    blocks = 100_000
    p = 0.25
    pos = ef._exact_bernoulli_positions(15 * blocks, p, _source(19))
    pattern = torch.zeros(blocks, dtype=torch.int64).index_add_(0, pos // 15, 2 ** (pos % 15))
    flips = torch.bincount(pos // 15, minlength=blocks)
    _chi2(torch.bincount(flips, minlength=16), [math.comb(15, k) * p ** k * (1 - p) ** (15 - k) for k in range(16)])
    low = pattern % 16  # the joint law of the first four bits
    probs = [p ** bin(v).count("1") * (1 - p) ** (4 - bin(v).count("1")) for v in range(16)]
    _chi2(torch.bincount(low, minlength=16), probs)


G6 = torch.tensor([[0, 1, 0, 2, 1, 3, 3, 4, 2, 5], [1, 0, 2, 0, 3, 1, 4, 3, 5, 2]])  # 5 edges on 6 nodes
G6_PRIME = torch.tensor([[0, 1, 0, 2, 1, 3, 3, 4], [1, 0, 2, 0, 3, 1, 4, 3]])  # without {2, 5}


def _upper(out, n):
    a = torch.zeros(n, n, dtype=torch.long)
    a[out[0], out[1]] = 1
    iu = torch.triu_indices(n, n, 1)
    return a, a[iu[0], iu[1]]


def test_safe_flip_edges_pair_rates_and_neighbouring_inputs():
    """Every safe release is a possible output under both neighbouring graphs: its flip patterns
    with respect to G and G' are valid sets of pairs, differing in exactly the pair {2, 5}, so its
    likelihood ratio is exactly (q / (1 - q))^(+-1)."""
    n, q = 6, 0.75
    gen = torch.Generator().manual_seed(23)
    _, truth = _upper(G6, n)
    _, truth_prime = _upper(G6_PRIME, n)
    differ = (truth != truth_prime).nonzero().squeeze(1)
    assert differ.numel() == 1
    draws = 3000
    counts = torch.zeros(15, dtype=torch.long)
    flip_counts = torch.zeros(16, dtype=torch.long)
    for graph, bits in ((G6, truth), (G6_PRIME, truth_prime)):
        for _ in range(draws):
            out = flip_edges(graph, n, q, generator=gen)
            assert out.numel() == 0 or (int(out.min()) >= 0 and int(out.max()) < n)
            assert bool((out[0] != out[1]).all())
            a, upper = _upper(out, n)
            assert torch.equal(a, a.t()) and out.size(1) == 2 * int(upper.sum())
            flips, flips_prime = upper ^ truth, upper ^ truth_prime
            assert int((flips ^ flips_prime).sum()) == 1 and bool((flips ^ flips_prime)[differ])
            assert abs(int(flips.sum()) - int(flips_prime.sum())) == 1
            if graph is G6:
                counts += upper
                flip_counts[int(flips.sum())] += 1
    rate = counts.double() / draws
    expected = torch.where(truth.bool(), torch.tensor(q), torch.tensor(1 - q)).double()
    assert bool(((rate - expected).abs() < 5 * math.sqrt(q * (1 - q) / draws)).all()), (rate, expected)
    _chi2(flip_counts[:9].tolist() + [int(flip_counts[9:].sum())],
          [math.comb(15, k) * (1 - q) ** k * q ** (15 - k) for k in range(9)]
          + [sum(math.comb(15, k) * (1 - q) ** k * q ** (15 - k) for k in range(9, 16))])


def test_safe_flip_edges_is_reproducible_with_a_seed_and_valid():
    torch.manual_seed(0)
    n = 40
    ei = torch.randint(0, n, (2, 120))
    from pyg_private.utils import simple_undirected

    ei, _ = simple_undirected(ei, n, symmetrize=True)
    a = flip_edges(ei, n, 0.8, generator=torch.Generator().manual_seed(3))
    b = flip_edges(ei, n, 0.8, generator=torch.Generator().manual_seed(3))
    c = flip_edges(ei, n, 0.8, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(flip_edges(ei, n, 1.0), ei)  # q = 1 flips nothing
    out = flip_edges(ei, n, 0.5, secure_mode=True)  # the operating system's generator
    assert int(out.max()) < n and bool((out[0] != out[1]).all())


def test_secure_mode_refuses_a_seeded_generator_and_bad_arguments():
    ei = G6
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="secure_mode"):
        flip_edges(ei, 6, 0.7, generator=gen, secure_mode=True)
    with secure_mode():
        with pytest.raises(ValueError, match="secure_mode"):
            flip_edges(ei, 6, 0.7, generator=gen)
        assert flip_edges(ei, 6, 0.7).size(0) == 2  # the process default, no generator: fine
        assert flip_edges(ei, 6, 0.7, generator=gen, sampler="float").size(0) == 2  # float ignores the default
    with pytest.raises(ValueError, match="safe sampler"):
        flip_edges(ei, 6, 0.7, sampler="float", secure_mode=True)
    with pytest.raises(ValueError, match="sampler"):
        flip_edges(ei, 6, 0.7, sampler="exact")
    with pytest.raises(TypeError, match="secure_mode"):
        flip_edges(ei, 6, 0.7, secure_mode=1)
    for q in (0.4, 1.2, float("nan")):
        with pytest.raises(ValueError, match="q"):
            flip_edges(ei, 6, q)


def _spy(monkeypatch):
    calls = []
    for name in ("_bernoulli_positions", "_exact_bernoulli_positions"):
        original = getattr(ef, name)

        def wrapper(total, prob, *args, _name=name, _f=original, **kwargs):
            calls.append((_name, prob))
            return _f(total, prob, *args, **kwargs)

        monkeypatch.setattr(ef, name, wrapper)
    return calls


def test_float_sampler_still_reaches_the_old_path(monkeypatch):
    calls = _spy(monkeypatch)
    gen = torch.Generator().manual_seed(1)
    flip_edges(G6, 6, 0.7, generator=gen, sampler="float")
    flip_edges(G6, 6, 0.7, generator=gen)
    assert [c[0] for c in calls] == ["_bernoulli_positions", "_exact_bernoulli_positions"]
    EdgeRandomizedResponse(epsilon=1.0, sampler="float")(Data(edge_index=G6, num_nodes=6))
    EdgeFlippingPPR(epsilon=1.0, num_iterations=3, sampler="float")(edge_index=G6, seed_index=[0], num_nodes=6)
    assert [c[0] for c in calls[2:]] == ["_bernoulli_positions"] * 2


@pytest.mark.parametrize("kwargs", [dict(epsilon=1.0), dict(epsilon=8.0), dict(epsilon=30.0),
                                    dict(flip_probability=1e-12), dict(epsilon=1.0, delta=1e-5)])
def test_the_sampled_flip_probability_is_exactly_the_charged_one(monkeypatch, kwargs):
    calls = _spy(monkeypatch)
    for make in (lambda acct: EdgeRandomizedResponse(accountant=acct, **kwargs),
                 lambda acct: EdgeFlippingPPR(num_iterations=3, accountant=acct, **kwargs)):
        acct = PrivacyAccountant()
        module = make(acct)
        if isinstance(module, EdgeRandomizedResponse):
            module(Data(edge_index=G6, num_nodes=6))
        else:
            module(edge_index=G6, seed_index=[0], num_nodes=6)
        (event,) = acct.events
        q = event.params["truth_probability"]
        assert event.params["sampler"] == "safe"
        name, prob = calls.pop()
        assert name == "_exact_bernoulli_positions"
        assert q == module.q and Fraction(prob) + Fraction(q) == 1  # the flips happen w.p. exactly 1 - q


@pytest.mark.parametrize("make", [
    lambda acct, gen, **kw: EdgeRandomizedResponse(epsilon=1.0, accountant=acct, generator=gen, **kw),
    lambda acct, gen, **kw: EdgeFlippingPPR(epsilon=1.0, num_iterations=3, accountant=acct, generator=gen, **kw),
])
def test_callers_refuse_secure_mode_with_a_seed_before_charging(make):
    run = (lambda m: m(Data(edge_index=G6, num_nodes=6))) if make(None, None).__class__ is EdgeRandomizedResponse \
        else (lambda m: m(edge_index=G6, seed_index=[0], num_nodes=6))
    acct = PrivacyAccountant()
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="secure_mode"):
        make(acct, gen, secure_mode=True)
    with pytest.raises(ValueError, match="safe sampler"):
        make(acct, None, secure_mode=True, sampler="float")
    with pytest.raises(ValueError, match="sampler"):
        make(acct, None, sampler="fast")
    module = make(acct, gen)
    with secure_mode():  # the process-wide default turned on after construction
        with pytest.raises(ValueError, match="secure_mode"):
            run(module)
    assert len(acct) == 0  # nothing charged
    secure = make(acct, None, secure_mode=True)
    assert secure.secure_mode is True and "sampler='safe'" in repr(secure)
    run(secure)
    assert len(acct) == 1
