"""pure_dp_event: the RDP curve every pure epsilon-DP release satisfies (randomized response
domination), its k-part refinement, per-node composition on unit "local"."""
import json
import math

import numpy as np
import pytest

from pyg_private import PrivacyAccountant
from pyg_private.accounting import DEFAULT_ORDERS, PrivacyEvent, randomized_response_rdp, truth_probability
from pyg_private.accounting.mechanism_events import pure_dp_event
from pyg_private.mechanisms.square_wave import square_wave_params

ORDERS = np.array(DEFAULT_ORDERS)


def _renyi(p: np.ndarray, q: np.ndarray, w: np.ndarray, alpha: float) -> float:
    """D_alpha(P || Q) of piecewise-constant densities p, q on pieces of widths w."""
    if math.isinf(alpha):
        return float(np.log(p / q).max())
    terms = np.log(w) + alpha * np.log(p) + (1 - alpha) * np.log(q)
    return float(np.logaddexp.reduce(terms) / (alpha - 1))


@pytest.mark.parametrize("eps", [0.01, 1.0, 5.0, 20.0])
def test_curve_is_randomized_response_and_pure_at_infinity(eps):
    ev = pure_dp_event(unit="edge", epsilon=eps)
    rr = randomized_response_rdp(ORDERS, q=truth_probability(epsilon=eps))
    np.testing.assert_allclose(ev.rdp, rr, rtol=1e-8, atol=1e-15)
    assert ev.rdp[-1] == eps and math.isinf(ev.orders[-1])
    assert all(0 <= v <= eps for v in ev.rdp)
    assert all(b >= a - 1e-15 for a, b in zip(ev.rdp, ev.rdp[1:]))  # non-decreasing in the order


def test_large_epsilon_is_finite():
    ev = pure_dp_event(unit="edge", epsilon=200.0)  # randomized response itself refuses eps >= 36
    assert all(math.isfinite(v) for v in ev.rdp) and ev.rdp[-1] == 200.0


@pytest.mark.parametrize("eps,k", [(1.0, 5), (0.1, 50), (8.0, 3)])
def test_k_parts_refine_the_curve(eps, k):
    single = np.array(pure_dp_event(unit="edge", epsilon=eps).rdp)
    parts = np.array(pure_dp_event(unit="edge", epsilon=eps, compositions=k).rdp)
    rr_k = k * randomized_response_rdp(ORDERS, q=truth_probability(epsilon=eps / k))
    assert (parts <= single + 1e-15).all() and (parts <= rr_k * (1 + 1e-8) + 1e-15).all()
    assert parts[-1] == eps
    assert parts[0] < single[0]  # the refinement matters at small orders
    if eps <= 1.0:
        assert parts[0] < 0.5 * single[0]


@pytest.mark.parametrize("eps", [0.05, 1.0, 4.0])
def test_curve_dominates_the_square_wave(eps):
    """The exact Renyi divergence between the square wave's outputs for x = -1 and x = +1
    (piecewise constant: p/q on the windows, q/q in the middle) stays under the curve."""
    prm = square_wave_params(eps)
    w = np.array([2 * prm.b, 2 - 2 * prm.b, 2 * prm.b])
    p = np.array([prm.p, prm.q, prm.q])
    q = np.array([prm.q, prm.q, prm.p])
    curve = pure_dp_event(unit="edge", epsilon=eps).rdp
    for a, bound in zip(DEFAULT_ORDERS, curve):
        assert _renyi(p, q, w, a) <= bound * (1 + 1e-9) + 1e-15


def test_local_ledger_sums_per_node_and_round_trips():
    acct = PrivacyAccountant()
    acct.register(pure_dp_event(unit="local", epsilon=1.0, compositions=5, nodes=[0, 1, 2], num_nodes=5))
    acct.register(pure_dp_event(unit="local", epsilon=0.5, nodes=np.array([2, 3]), num_nodes=5, name="second",
                                mechanism="piecewise", params={"k": 1}))
    np.testing.assert_allclose(acct.node_epsilons(), [1.0, 1.0, 1.5, 0.5, 0.0])
    assert acct.pure_epsilon("local") == 1.5
    assert acct.epsilon("local", 1e-5) <= 1.5
    state = json.loads(json.dumps(acct.state_dict()))
    again = PrivacyAccountant.from_state_dict(state)
    assert again.events == acct.events
    np.testing.assert_array_equal(again.node_epsilons(), acct.node_epsilons())
    ev = acct.events[1]
    assert isinstance(ev, PrivacyEvent) and ev.mechanism == "piecewise" and ev.params["epsilon"] == 0.5


def test_validation():
    with pytest.raises(ValueError, match="epsilon"):
        pure_dp_event(unit="edge", epsilon=0.0)
    with pytest.raises(ValueError, match="compositions"):
        pure_dp_event(unit="edge", epsilon=1.0, compositions=0)
    with pytest.raises(ValueError, match="num_nodes"):
        pure_dp_event(unit="local", epsilon=1.0)
    with pytest.raises(ValueError, match="unit"):
        pure_dp_event(unit="users", epsilon=1.0)
