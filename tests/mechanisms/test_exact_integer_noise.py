"""The exact integer samplers: distribution, the exact fallback paths, the float fast path's margin."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from pyg_private.mechanisms import exact_integer_noise as E
from pyg_private.sampling import sampler as sampler_module
from sampler_helpers import fast_path_cases as _cases
from sampler_helpers import force_exact_paths as _force
from sampler_helpers import ScriptedSource
from sampler_helpers import seeded_source as _source

SCALES = {"gaussian": [2.0 ** 20, 2.0 ** 20 * 1.7, 2.0 ** 37 * 1.3], "laplace": [2.0 ** 20, 2.0 ** 29 * 1.45]}


def _chi_square_p(sampler: E.RoundedNoiseSampler, values: torch.Tensor, edges_in_scale) -> float:
    """Goodness of fit of |K| binned at ``edges * scale`` against the exact (256-bit) probabilities."""
    t = sampler._t
    edges = [0] + [int(round(e * sampler.scale)) for e in edges_in_scale]
    survival = [t.tail_mass(e) if e > 0 else mpmath.mpf(1) for e in edges] + [mpmath.mpf(0)]
    expected = np.array([float(survival[i] - survival[i + 1]) for i in range(len(edges))])
    m = values.abs().numpy()
    counts = np.bincount(np.searchsorted(np.array(edges[1:]), m, side="right"), minlength=len(edges))
    expected = expected / expected.sum() * len(m)
    keep = expected > 5
    rest = (~keep).sum()
    obs = np.append(counts[keep], counts[~keep].sum()) if rest else counts[keep]
    exp = np.append(expected[keep], expected[~keep].sum()) if rest else expected[keep]
    return float(chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_distribution_matches_the_rounded_continuous_law(kind):
    edges = [0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0] if kind == "gaussian" else \
        [0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0]
    for i, scale in enumerate(SCALES[kind]):
        s = E.RoundedNoiseSampler(kind, scale)
        x = s.sample(200_000, _source(i))
        assert x.dtype == torch.int64
        assert _chi_square_p(s, x, edges) > 1e-4
        # sign symmetric, mean zero, scale right
        assert abs(float((x > 0).double().mean()) - 0.5) < 0.005
        std = x.double().std().item() / scale
        assert std == pytest.approx(1.0 if kind == "gaussian" else math.sqrt(2), rel=0.02)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_float_fast_path_stays_inside_its_margin(kind):
    """The float64 acceptance ratio is within the proven margin of the exact (256-bit) one, for
    values across every part of the table, cell 0 and value 0 included."""
    for scale in SCALES[kind]:
        s = E.RoundedNoiseSampler(kind, scale)
        t = s._t
        values, cells = _cases(s)
        assert set(cells.tolist()) >= {0, t.num_cells, t.num_cells - 1, 2 * t.num_cells - 1}  # both signs
        ratio = s._ratio(values, cells)
        for v, r in zip(values.tolist(), ratio.tolist()):
            exact = float(t.accept_probability(v))
            assert 0 < exact <= 1
            assert abs(r - exact) <= exact * t.margin, (v, r, exact)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_exact_paths_give_the_same_law(kind, monkeypatch):
    """Forcing alias ties (3 split bits) and the 256-bit acceptance test (margin 0.3): still the law."""
    s = E.RoundedNoiseSampler(kind, SCALES[kind][1])
    calls = {"n": 0}
    real = E.exact_bernoulli

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(sampler_module, "exact_bernoulli", counting)
    forced = _force(s, split_bits=3, margin=0.3)
    x = forced.sample(6_000, _source(3))
    assert calls["n"] > 1_000  # the exact comparisons did run
    edges = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0] if kind == "gaussian" else [0.25, 0.5, 1.0, 2.0, 3.0, 5.0]
    assert _chi_square_p(s, x, edges) > 1e-4


def test_exact_bernoulli_decides_exactly():
    src = _source(1)
    third = mpmath.mpf(1) / 3
    # 1/3 = 0.010101...b: the first 4 bits 0101 (=5) tie, 0100 (=4) is below, 0110 above
    assert E.exact_bernoulli(third, 4, 4, src) is True
    assert E.exact_bernoulli(third, 6, 4, src) is False
    draws = [E.exact_bernoulli(third, 5, 4, _source(i)) for i in range(400)]
    # given the prefix 0101, U < 1/3 has probability (1/3 - 5/16) * 16 = 1/3
    assert abs(sum(draws) / 400 - 1 / 3) < 0.08


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_tail_path(kind):
    """The tail beyond the table (probability ~1e-22) is sampled exactly from the conditional law."""
    s = E.RoundedNoiseSampler(kind, SCALES[kind][0])
    t = s._t
    start = t.num_cells * t.w
    draws = [s._tail_sample(_source(i), negative=i % 2 == 1) for i in range(200 if kind == "gaussian" else 60)]
    mags = np.abs(draws)
    assert (mags >= start).all()
    excess = (mags - start) / s.scale
    if kind == "laplace":  # memoryless: the excess is Exp(1)-like with mean 1
        assert 0.6 < excess.mean() < 1.5
    else:  # Gaussian tail beyond z = 10: the excess is about 1/z = 0.1 on average
        assert 0.05 < excess.mean() < 0.15
    assert {np.sign(d) for d in draws} == {-1, 1}


def test_tail_cell_is_replaced(monkeypatch):
    s = E.RoundedNoiseSampler("laplace", SCALES["laplace"][0])
    t = s._t
    forced = _force(s)
    forced._t.split = [0] * len(t.split)  # every slot goes to its alias ...
    forced._t.alias = [t.pos_tail + 1] * len(t.split)  # ... the positive tail (slot c + 1 holds cell c)
    forced._t._build_fast()
    monkeypatch.setattr(E.RoundedNoiseSampler, "_tail_sample", lambda self, src, negative: -1 if negative else 12345)
    x = forced.sample(10, _source())
    assert (x == 12345).all()


def test_scale_range_and_kind_are_checked():
    with pytest.raises(ValueError, match="2\\^20"):
        E.RoundedNoiseSampler("gaussian", 1000.0)
    with pytest.raises(ValueError, match="2\\^46"):
        E.RoundedNoiseSampler("laplace", 2.0 ** 50)
    with pytest.raises(ValueError, match="kind"):
        E.RoundedNoiseSampler("uniform", 2.0 ** 21)


def test_seeded_source_is_reproducible_and_out_is_filled():
    s = E.RoundedNoiseSampler("gaussian", 2.0 ** 22)
    a = s.sample(5000, _source(7))
    out = torch.empty(5000, dtype=torch.int64)
    b = s.sample(5000, _source(7), out=out)
    assert b is out and torch.equal(a, b)
    assert not torch.equal(a, s.sample(5000, _source(8)))


# -- the accounting claim: a grid release is a post-processing of the continuous mechanism --------------
def test_rounded_laplace_is_no_less_private_than_the_laplace_mechanism():
    """The rounded Laplace pmf, shifted by an integer s (the rounded query's change in grid steps),
    has privacy loss at most s / b everywhere: the pure epsilon the Laplace event charges."""
    for b in (0.7, 2.5, 40.0):
        k = np.arange(-4000, 4001)
        x = 0.5 / b
        logp = np.where(k == 0, np.log(-np.expm1(-x)), np.log(np.sinh(x)) - np.abs(k) / b)  # no underflow
        assert np.exp(logp).sum() == pytest.approx(1.0, abs=1e-12)
        for s in (1, 2, 5):
            loss = np.abs(logp[s:] - logp[:-s])
            assert loss.max() <= s / b * (1 + 1e-12)
            assert loss.max() >= s / b * 0.99  # tight: the tails attain it


def test_rounded_gaussian_is_dominated_by_the_gaussian_mechanism():
    """Hockey-stick divergence of the rounded Gaussian shifted by s, computed exactly over the
    integers, never exceeds the GDP curve of mu = s / sigma that the Gaussian event charges."""
    from scipy.stats import norm

    from pyg_private.accounting import gdp_delta

    for sigma in (0.8, 2.5, 9.0):
        k = np.arange(-400, 401)
        pmf = norm.cdf((k + 0.5) / sigma) - norm.cdf((k - 0.5) / sigma)
        for s in (1, 2, 4):
            p, q = pmf[s:], pmf[:-s]  # P(K + s = k) against P(K = k)
            for eps in (0.0, 0.1, 0.5, 1.0, 2.0, 4.0):
                delta = np.clip(p - np.exp(eps) * q, 0, None).sum()
                assert delta <= gdp_delta(mu=s / sigma, epsilon=eps) + 1e-12, (sigma, s, eps)


# -- the word that extends an undecided comparison ----------------------------------------------------
@pytest.mark.parametrize("kind,scale", [("gaussian", 2.0 ** 22), ("laplace", SCALES["laplace"][1]),
                                        ("gaussian", 2.0 ** 37 * 1.3)])
def test_extension_word_decides_exactly(kind, scale, monkeypatch):
    """Acceptance bits equal to the first bits of p (the float test cannot decide them): one more
    word decides, in the right direction, when it lies beyond the float margin from p's next
    bits; a word equal to them goes on to the 256-bit comparison."""
    s = E.RoundedNoiseSampler(kind, scale)
    t = s._t
    a = t.accept_bits
    assert a <= sampler_module._EXTEND_LIMIT
    exact_calls = []
    real = E.exact_bernoulli
    monkeypatch.setattr(sampler_module, "exact_bernoulli", lambda *args, **kw: exact_calls.append(args[1:3]) or real(*args, **kw))
    values, cells = _cases(s, count=10)
    window = 4 * t.margin * 2 ** a  # beyond the float margin (relative to p <= 1), in units of the last bit
    gap = min(int(window * 2 ** 63) + 1, 2 ** 61)  # the same in units of the extension word
    checked = 0
    for v, c in zip(values.tolist(), cells.tolist()):
        scaled = t.accept_probability(v) * 2 ** a
        bits = int(mpmath.floor(scaled))
        frac = scaled - bits
        if not (window < frac < 1 - window):  # the float test may decide these already
            continue
        following = int(mpmath.floor(frac * 2 ** 63))
        for word, expected in ((following - gap, True), (following + gap, False), (following, None)):
            if not 0 <= word < 2 ** 63:
                continue
            src = ScriptedSource([word], seed=checked)
            accept = torch.zeros(1, dtype=torch.bool)
            exact_calls.clear()
            s._slow_accept(accept, torch.ones(1, dtype=torch.bool), torch.tensor([v]), torch.tensor([c]),
                           torch.tensor([bits]), src)
            if expected is None:  # undecided by the word: the exact comparison, with all bits known so far
                assert exact_calls == [((bits << 63) | word, a + 63)]
            else:
                assert bool(accept[0]) is expected and src.calls == [1] and not exact_calls, (v, word)
            checked += 1
    assert checked > 40


def test_alias_ties_read_the_split_s_next_bits():
    s = E.RoundedNoiseSampler("gaussian", 2.0 ** 22)
    t = s._t
    slots = [i for i in range(len(t.split)) if 0 < int(t.split_next[i]) < 2 ** 63 - 2][:20]
    assert len(slots) == 20
    for i in slots:
        following = int(t.split_next[i])
        for word, keep in ((following - 1, True), (following + 1, False)):
            src = ScriptedSource([word])
            got = s._break_ties(torch.tensor([i]), t.split_int[i:i + 1], src)
            assert bool(got[0]) is keep and src.calls == [1]
    # equal next bits: the 256-bit comparison decides U < split from there
    i = slots[0]
    draws = [bool(s._break_ties(torch.tensor([i]), t.split_int[i:i + 1], ScriptedSource([int(t.split_next[i])],
                                                                                        seed=k))[0])
             for k in range(200)]
    scaled = t.split[i] * 2 ** (t.split_bits + 63)
    rest = float(scaled - t.ctx.floor(scaled))  # P(U < split | its first split_bits + 63 bits)
    assert abs(sum(draws) / 200 - rest) < 5 * math.sqrt(rest * (1 - rest) / 200) + 0.01, (sum(draws), rest)


def test_scratch_pool_keeps_no_noise_after_a_release():
    """The reused scratch buffers (the sampler's chunks, a grid release's integer noise) are zeroed
    when returned: after a ContractiveGraphLayer release, nothing in the pool can be subtracted from
    the output."""
    from pyg_private.sampling import workspace as _workspace
    from pyg_private.nn import ContractiveGraphLayer

    g = torch.Generator().manual_seed(0)
    pairs = torch.randint(50, (2, 200), generator=g)
    pairs = pairs[:, pairs[0] != pairs[1]]
    ei = torch.cat([pairs, pairs.flip(0)], 1).unique(dim=1)
    layer = ContractiveGraphLayer(3, 0.9, min_degree=0, noise_multiplier=1.0, cached=False)
    out = layer(torch.randn(50, 4, generator=g), ei)
    assert layer.granularity is not None and bool(out.abs().sum() > 0)
    pooled = [t for sets in _workspace._free.values() for item in sets
              for t in (item if isinstance(item, (list, tuple)) else (item,))]
    assert pooled and all(not bool(t.any()) for t in pooled)
