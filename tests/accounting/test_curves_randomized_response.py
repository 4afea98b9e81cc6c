"""Independent checks of binary randomized response: ``randomized_response_rdp`` and ``truth_probability``.

The reference is the Rényi divergence of Bernoulli(q) from Bernoulli(1 - q), summed over the two
outcomes in mpmath at 50 digits: sum_x P(x)^a Q(x)^(1 - a).
"""
import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyg_private.accounting import DEFAULT_ORDERS, randomized_response_event, randomized_response_rdp, truth_probability


def _renyi_bernoulli(alpha: float, q: float) -> mp.mpf:
    with mp.workdps(50):
        a, q = mp.mpf(alpha), mp.mpf(q)
        p_dist = {1: q, 0: 1 - q}        # the true bit is 1
        q_dist = {1: 1 - q, 0: q}        # the neighbour's true bit is 0
        total = mp.fsum(p_dist[x] ** a * q_dist[x] ** (1 - a) for x in (0, 1))
        return mp.log(total) / (a - 1)


@pytest.mark.parametrize("q", [0.5000001, 0.51, 0.6, 0.75, 0.9, 0.99, 0.999999])
@pytest.mark.parametrize("alpha", [1.01, 1.5, 2.0, 10.0, 100.0, 1e4, 1e6])
def test_matches_two_term_renyi_sum(q, alpha):
    ref = float(_renyi_bernoulli(alpha, q))
    ours = float(randomized_response_rdp([alpha], q=q)[0])
    assert abs(ours - ref) <= 1e-10 * ref + 1e-15 * (1 + 1 / (alpha - 1)), (q, alpha, ours, ref)


def test_fair_coin_is_free():
    assert (randomized_response_rdp(DEFAULT_ORDERS, q=0.5) == 0.0).all()


@pytest.mark.parametrize("q", [0.51, 0.75, 0.9, 0.999999])
def test_order_infinity_is_log_odds(q):
    out = randomized_response_rdp([math.inf], q=q)[0]
    with mp.workdps(50):
        ref = float(mp.log(mp.mpf(q) / (1 - mp.mpf(q))))
    assert out == pytest.approx(ref, rel=1e-13)
    curve = randomized_response_rdp(DEFAULT_ORDERS, q=q)
    assert curve[-1] == out
    # monotone in the order and bounded by the pure epsilon
    assert (np.diff(curve) >= -4 * np.spacing(curve[1:])).all()
    assert (curve <= out).all() and (curve >= 0).all()


@pytest.mark.parametrize("epsilon", [1e-6, 0.01, 0.5, 1.0, 3.0, 10.0])
def test_truth_probability_from_epsilon(epsilon):
    with mp.workdps(50):
        e = mp.exp(mp.mpf(epsilon))
        ref = float(e / (1 + e))
    assert truth_probability(epsilon=epsilon) == pytest.approx(ref, rel=1e-15)


@pytest.mark.parametrize("epsilon", [1e-3, 0.5, 1.0, 3.0, 10.0])
def test_event_from_epsilon_is_pure_epsilon(epsilon):
    # End to end: an event made from `epsilon` reports that epsilon at order infinity.
    ev = randomized_response_event(unit="edge", epsilon=epsilon)
    assert ev.orders[-1] == math.inf
    assert ev.rdp[-1] == pytest.approx(epsilon, rel=1e-10)


@pytest.mark.parametrize("p", [1e-6, 0.01, 0.3, 0.5, 1.0])
def test_truth_probability_from_flip_probability(p):
    # replace the bit by a uniform bit with probability p: reported truthfully w.p. (1 - p) + p/2
    assert truth_probability(flip_probability=p) == pytest.approx(1.0 - p / 2.0, rel=1e-15)


def test_flip_probability_one_is_a_fair_coin():
    q = truth_probability(flip_probability=1.0)
    assert q == 0.5
    assert (randomized_response_rdp(DEFAULT_ORDERS, q=q) == 0).all()


@settings(max_examples=50, deadline=None)
@given(q=st.floats(0.5, 0.999999), alpha=st.floats(1.0 + 1e-6, 1e6))
def test_bounded_by_pure_epsilon(q, alpha):
    g = float(randomized_response_rdp([alpha], q=q)[0])
    assert 0.0 <= g <= math.log(q) - math.log1p(-q) + 1e-15


@pytest.mark.parametrize(
    "call",
    [
        lambda: truth_probability(),
        lambda: truth_probability(epsilon=1.0, flip_probability=0.5),
        lambda: truth_probability(epsilon=0.0),
        lambda: truth_probability(epsilon=-1.0),
        lambda: truth_probability(flip_probability=0.0),
        lambda: truth_probability(flip_probability=1.5),
        lambda: randomized_response_rdp([2.0], q=0.4),
        lambda: randomized_response_rdp([2.0], q=1.0),
        lambda: randomized_response_rdp([1.0], q=0.7),
        lambda: randomized_response_rdp([float("nan")], q=0.7),
    ],
)
def test_invalid_arguments_raise(call):
    with pytest.raises(ValueError):
        call()


def test_truth_probability_is_never_above_epsilon_exactly():
    """The samplers use the float q exactly: q / (1 - q) <= e^epsilon must hold in exact arithmetic
    (the float of 1 / (1 + e^-eps) rounds up for about half of the epsilons)."""
    import mpmath

    from pyg_private.accounting.randomized_response import truth_probability

    with mpmath.workprec(256):
        for eps in [0.1 * i for i in range(1, 300)]:
            q = mpmath.mpf(truth_probability(epsilon=eps))
            assert mpmath.log(q / (1 - q)) <= eps
            # rounded down by an ulp or two of q: the ratio moves by about ulp(q) / (1 - q)
            assert mpmath.log(q / (1 - q)) > eps - 4 * 2.0 ** -53 / (1 - q)
