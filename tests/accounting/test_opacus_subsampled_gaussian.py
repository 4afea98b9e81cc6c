"""DP-SGD events in a ``PrivacyAccountant`` against Opacus' own accountants.

* Opacus' ``RDPAccountant`` uses a grid that is a subset of ``DEFAULT_ORDERS`` and the same
  conversion, so our epsilon can never be larger, and equals it where Opacus' optimum is interior.
* Opacus' ``PRVAccountant`` estimates the *exact* epsilon (numerical PLD composition) with error
  bars: an RDP bound must never fall below its lower end.
"""
import functools
import math
import warnings

import numpy as np
import pytest
from opacus.accountants import PRVAccountant, RDPAccountant

from pyg_private.accounting import (
    DEFAULT_ORDERS,
    PrivacyAccountant,
    gdp_epsilon,
    subsampled_gaussian_event,
)


def _opacus_rdp(noise_multiplier, sample_rate, steps, delta):
    acc = RDPAccountant()
    acc.history = [(noise_multiplier, sample_rate, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return acc.get_privacy_spent(delta=delta)


def _ours(noise_multiplier, sample_rate, steps, delta, *, one_event_per_step=False, pld=True, event=None):
    """Our ledger's epsilon; ``event`` reuses an already built ``steps``-step event of these parameters
    (building one computes its RDP curve, which two ledgers of one test need not do twice)."""
    acct = PrivacyAccountant(pld=pld)
    if one_event_per_step:  # as the Opacus bridge does: the same one-step record, registered per step
        event = subsampled_gaussian_event(noise_multiplier=noise_multiplier, sample_rate=sample_rate)
        for _ in range(steps):
            acct.register(event)
    else:
        if event is None:
            event = subsampled_gaussian_event(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps)
        assert event.params == {"noise_multiplier": noise_multiplier, "sample_rate": sample_rate, "steps": steps}
        acct.register(event)
    return acct.epsilon("node", delta)


@functools.lru_cache(maxsize=None)
def _dp_accounting_accountant(noise_multiplier, sample_rate, steps):
    """Google dp-accounting's own PLD accountant, composed once per setting: its PLD does not
    depend on delta, which :meth:`get_epsilon` reads off it (without changing it)."""
    import dp_accounting

    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    event = dp_accounting.PoissonSampledDpEvent(sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return acc


def _dp_accounting_pld(noise_multiplier, sample_rate, steps, delta):
    """Google dp-accounting's own PLD accountant on the same DP-SGD steps (add/remove one example)."""
    return _dp_accounting_accountant(noise_multiplier, sample_rate, steps).get_epsilon(delta)


def test_opacus_grid_is_contained_in_ours():
    ours = set(DEFAULT_ORDERS)
    missing = [a for a in RDPAccountant.DEFAULT_ALPHAS if float(a) not in ours]
    assert missing == []


TYPICAL = [
    (1.1, 0.25, 3),
    (1.1, 0.25, 1),
    (1.0, 0.01, 1000),
    (0.8, 0.004, 10000),
    (2.0, 0.1, 50),
    (0.5, 0.02, 100),
]


@pytest.mark.parametrize("nm,q,steps", TYPICAL)
@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_never_looser_than_opacus_and_close_when_its_optimum_is_interior(nm, q, steps, delta):
    theirs, their_order = _opacus_rdp(nm, q, steps, delta)
    event = subsampled_gaussian_event(noise_multiplier=nm, sample_rate=q, steps=steps)
    ours = _ours(nm, q, steps, delta, pld=False, event=event)  # the Rényi rule alone
    assert ours <= theirs * (1 + 1e-12)
    assert 1 < their_order < 63  # interior of Opacus' grid for these settings
    assert ours == pytest.approx(theirs, rel=0.02)
    # the default ledger (of the same event) also composes the PLD: dp-accounting's figure, below the RDP bound
    tight = _ours(nm, q, steps, delta, event=event)
    assert tight <= ours * (1 + 1e-12)
    assert tight == pytest.approx(_dp_accounting_pld(nm, q, steps, delta), rel=1e-3)


@pytest.mark.parametrize("nm,q,steps", [(5.0, 0.001, 100), (10.0, 0.5, 1)])
def test_much_tighter_when_opacus_is_capped_at_order_63(nm, q, steps):
    delta = 1e-5
    theirs, their_order = _opacus_rdp(nm, q, steps, delta)
    ours = _ours(nm, q, steps, delta)
    assert their_order == 63
    assert ours <= theirs


def test_one_event_per_step_equals_one_event_with_steps():
    a = _ours(1.1, 0.05, 40, 1e-5)
    b = _ours(1.1, 0.05, 40, 1e-5, one_event_per_step=True)
    assert b == pytest.approx(a, rel=1e-12)


@pytest.mark.filterwarnings("ignore:Optimal order is the:UserWarning")  # Opacus' PRV domain sizing
@pytest.mark.parametrize("nm,q,steps,delta", [(1.1, 0.25, 3, 1e-5), (5.0, 0.001, 100, 1e-5), (2.0, 0.1, 50, 1e-8)])
def test_never_below_the_exact_epsilon(nm, q, steps, delta):
    prv = PRVAccountant()
    prv.history = [(nm, q, steps)]
    dprv = prv._get_dprv(eps_error=0.01, delta_error=delta / 1000)
    eps_low, eps_est, eps_up = dprv.compute_epsilon(delta, delta / 1000, 0.01)
    ours = _ours(nm, q, steps, delta)
    assert ours >= eps_low


@pytest.mark.parametrize("nm,steps", [(1.0, 1), (0.8, 4), (3.0, 100)])
def test_full_batch_event_is_exact_gdp(nm, steps):
    ev = subsampled_gaussian_event(noise_multiplier=nm, sample_rate=1.0, steps=steps)
    assert ev.mu == pytest.approx(math.sqrt(steps) / nm, rel=1e-15)
    acct = PrivacyAccountant()
    acct.register(ev)
    assert acct.epsilon("node", 1e-5) == pytest.approx(gdp_epsilon(mu=math.sqrt(steps) / nm, delta=1e-5), rel=1e-12)
    # and that exact value beats Opacus' RDP bound for the same full-batch Gaussian steps
    theirs, _ = _opacus_rdp(nm, 1.0, steps, 1e-5)
    assert acct.epsilon("node", 1e-5) < theirs


def test_subsampled_event_carries_no_gdp_parameter():
    ev = subsampled_gaussian_event(noise_multiplier=1.0, sample_rate=0.5, steps=3)
    assert ev.mu is None
    assert ev.rdp[-1] == math.inf  # order inf: not pure DP
    assert np.isfinite(ev.rdp[:10]).all()
