"""Exact Bernoulli trials and uniform integers (pyg_private.mechanisms.exact_discrete).

Rates are checked against the stated probabilities with tolerances of 5 standard errors, and
distributions with chi-square tests at level 1e-6, all on seeded generators (deterministic). The
tie path of `bernoulli` is forced with scripted words and checked against the exact comparison of
the scripted uniform with p, computed independently in 600-bit arithmetic.
"""
import math

import mpmath
import pytest
import torch
from scipy import stats

from pyg_private.mechanisms.exact_discrete import bernoulli, exact_probability, uniform_int
from pyg_private.mechanisms.randomness import WORD_BITS
from sampler_helpers import ScriptedSource as _Scripted
from sampler_helpers import seeded_source as _source


def _threshold(p):
    ctx = mpmath.MPContext()
    ctx.prec = 256
    return int(ctx.floor(ctx.mpf(p) * (1 << WORD_BITS)))


def _u_less_than_p(first, rest, p_formula):
    """Whether U = 0.first rest... (63-bit words) < p, with p in 600 bits; None if undecided."""
    ctx = mpmath.MPContext()
    ctx.prec = 600
    p = ctx.mpf(p_formula(ctx))
    bits = WORD_BITS * (1 + len(rest))
    known = first
    for w in rest:
        known = (known << WORD_BITS) | w
    f = int(ctx.floor(ctx.ldexp(p, bits)))
    return None if known == f else known < f


# ------------------------------------------------------------------------------------------ bernoulli
IRRATIONAL = {
    "e/(1+e)": lambda m: m.exp(1) / (1 + m.exp(1)),
    "1/(1+e^4)": lambda m: 1 / (1 + m.exp(4)),
    "1/3": lambda m: m.mpf(1) / 3,
    "1/sqrt(2)": lambda m: 1 / m.sqrt(2),
}


@pytest.mark.parametrize("p", [0.3, 0.5, 1e-3, 0.999] + list(IRRATIONAL))
def test_bernoulli_rate_matches_p(p):
    exact = exact_probability(IRRATIONAL[p]) if isinstance(p, str) else p
    n = 400_000
    out = bernoulli(exact, (n,), _source(1))
    pf = float(exact)
    se = math.sqrt(pf * (1 - pf) / n)
    assert out.dtype == torch.bool
    assert abs(out.double().mean().item() - pf) < 5 * se


def test_bernoulli_zero_and_one_are_certain():
    assert not bool(bernoulli(0.0, (10_000,), _source()).any())
    assert bool(bernoulli(1.0, (10_000,), _source()).all())
    assert bool(bernoulli(exact_probability(lambda m: m.mpf(1)), (100,), _source()).all())


@pytest.mark.parametrize("shape", [(3, 4), (5,), (0,), (2, 0, 3), torch.Size([2, 2])])
def test_bernoulli_shapes(shape):
    out = bernoulli(0.4, shape, _source())
    assert tuple(out.shape) == tuple(shape) and out.dtype == torch.bool


def test_bernoulli_rejects_a_probability_outside_0_1():
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="p"):
            bernoulli(p, (3,), _source())
    with pytest.raises(ValueError, match="probability"):
        exact_probability(lambda m: m.mpf(2))


@pytest.mark.parametrize("name", ["1/3", "e/(1+e)", "1/sqrt(2)"])
@pytest.mark.parametrize("continuation", [0, 1, (1 << 62) + 12345, (1 << 63) - 1])
def test_bernoulli_tie_is_decided_exactly_by_the_continuation(name, continuation):
    formula = IRRATIONAL[name]
    p = exact_probability(formula)
    th = _threshold(p)
    # trial 0 ties with the threshold; trials 1 and 2 are decided by their first word
    src = _Scripted([th, th - 1, th + 1, continuation])
    out = bernoulli(p, (3,), src)
    expected = _u_less_than_p(th, [continuation], formula)
    assert expected is not None
    assert out.tolist() == [expected, True, False]
    assert src.calls == [3, 1]  # one further word, for the tie only


def test_bernoulli_tie_continues_while_the_continuation_ties_too():
    formula = IRRATIONAL["1/3"]
    p = exact_probability(formula)
    th = _threshold(p)
    ctx = mpmath.MPContext()
    ctx.prec = 600
    second = int(ctx.floor(ctx.ldexp(ctx.mpf(1) / 3, 2 * WORD_BITS))) - (th << WORD_BITS)  # the next 63 bits
    for third, expected in ((0, True), ((1 << 63) - 1, False)):
        src = _Scripted([th, second, third])
        assert bool(bernoulli(p, (1,), src)[0]) is expected
        assert src.calls == [1, 1, 1]
        assert _u_less_than_p(th, [second, third], formula) is expected


def test_bernoulli_tie_with_a_dyadic_p():
    # p = 1/2: the threshold word 2^62 means U >= 1/2 whatever follows (U = 1/2 has probability 0)
    src = _Scripted([1 << 62, 5])
    assert not bool(bernoulli(0.5, (1,), src)[0])
    src = _Scripted([(1 << 62) - 1])
    assert bool(bernoulli(0.5, (1,), src)[0])


def test_bernoulli_ties_are_exact_in_distribution():
    # every first word ties: the decision then rests on the continuation alone, and the rate must be
    # P(U < p | first 63 bits = threshold) = frac(p 2^63)
    p = exact_probability(IRRATIONAL["e/(1+e)"])
    th = _threshold(p)
    ctx = mpmath.MPContext()
    ctx.prec = 256
    frac = float(ctx.ldexp(p, WORD_BITS) - th)
    n = 4000
    src = _Scripted([th] * n, seed=3)
    out = bernoulli(p, (n,), src)
    assert src.calls[0] == n and len(src.calls) == n + 1  # one further word per tie
    assert abs(out.double().mean().item() - frac) < 5 * math.sqrt(frac * (1 - frac) / n)


# ---------------------------------------------------------------------------------------- uniform_int
def _chi2_ok(counts, probs, level=1e-6):
    counts = torch.as_tensor(counts, dtype=torch.float64)
    expected = counts.sum() * torch.as_tensor(probs, dtype=torch.float64)
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat < stats.chi2.ppf(1 - level, df=len(probs) - 1), stat


@pytest.mark.parametrize("high", [6, 7, 16, 1000])
def test_uniform_int_is_uniform(high):
    n = 200_000
    out = uniform_int(high, (n,), _source(2))
    assert out.dtype == torch.int64 and int(out.min()) >= 0 and int(out.max()) < high
    ok, stat = _chi2_ok(torch.bincount(out, minlength=high), [1.0 / high] * high)
    assert ok, stat


def test_uniform_int_rejection_path_is_uniform():
    # high = 3 * 2^61: the words >= 3 * 2^61 (a quarter) are rejected and redrawn
    high = 3 << 61
    n = 100_000
    src = _Scripted([], seed=4)
    out = uniform_int(high, (n,), src)
    assert len(src.calls) > 1 and src.calls[1] > 0.2 * n  # the redraws happened
    assert int(out.min()) >= 0 and int(out.max()) < high
    third = out // (1 << 61)  # each third of the range equally likely
    ok, stat = _chi2_ok(torch.bincount(third, minlength=3), [1 / 3] * 3)
    assert ok, stat


def test_uniform_int_rejects_and_redraws_a_word_above_the_limit():
    high = (1 << 62) + 1  # limit = high: a word >= high is rejected
    src = _Scripted([high + 7, (1 << 63) - 1, 5, 11])
    out = uniform_int(high, (2,), src)
    assert out.tolist() == [5, 11]  # both first words rejected, then 5 and 11 kept as they are
    assert src.calls == [2, 2]


def test_uniform_int_power_of_two_takes_the_top_bits_and_edge_cases():
    src = _Scripted([(5 << 60) | 123])
    assert uniform_int(8, (1,), src).tolist() == [5]
    assert uniform_int(1, (4,), _source()).tolist() == [0, 0, 0, 0]
    assert tuple(uniform_int(1 << 63, (2, 3), _source()).shape) == (2, 3)
    assert tuple(uniform_int(10, (0,), _source()).shape) == (0,)


@pytest.mark.parametrize("high", [0, -3, (1 << 63) + 1])
def test_uniform_int_rejects_a_bad_high(high):
    with pytest.raises(ValueError, match="high"):
        uniform_int(high, (3,), _source())
