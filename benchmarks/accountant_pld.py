"""How tight the accountant is against Google dp-accounting's PLD, and what a release costs to register.

    python benchmarks/accountant_pld.py [--delta 1e-5]

For each ledger it prints the epsilon of ``PrivacyAccountant()`` (all rules, the default),
of ``PrivacyAccountant(pld=False)`` (the Rényi/GDP rules alone) and dp-accounting's own
``PLDAccountant`` on the same mechanisms (pessimistic estimate, the field's reference), and
the two ratios. Ledgers with an event that has no PLD (PABI, GCON) have no reference; for
them the table shows the improvement over the Rényi rules. Then it times ``register`` under a
budget, one DP-SGD step at a time, far from and near the budget (where the cheap Rényi check
no longer suffices and the PLD is composed), and ``report()``.
"""
from __future__ import annotations

import argparse
import time

import dp_accounting

from pyg_private import PrivacyAccountant
from pyg_private.accounting import (
    DEFAULT_ORDERS,
    appr_sensitivity,
    calibrate_objective_perturbation,
    gaussian_event,
    gdp_event,
    laplace_event,
    loss_constants,
    randomized_response_event,
    rdp_event,
    subsampled_gaussian_event,
)
from pyg_private.accounting.mechanism_events import objective_perturbation_event
from pyg_private.accounting.pabi import lazy_ppr_rdp


def _ours(events, delta, pld=True):
    acct = PrivacyAccountant(pld=pld)
    for ev, n in events:
        for _ in range(n):
            acct.register(ev)
    unit = acct.events[0].unit
    return acct.epsilon(unit, delta), acct.report(delta=delta)[unit.value].get("conversion", "")


def _reference(dp_events, delta):
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    for ev, n in dp_events:
        acc.compose(ev, n)
    return acc.get_epsilon(delta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delta", type=float, default=1e-5)
    delta = parser.parse_args().delta
    gauss = dp_accounting.GaussianDpEvent
    sampled = dp_accounting.PoissonSampledDpEvent
    cal = calibrate_objective_perturbation(
        epsilon=1.0, delta=1e-4, dim=16, num_classes=7, num_rows=140, sensitivity=appr_sensitivity(0.2, [2, 10]),
        loss_constants=loss_constants("soft_margin", 7), regularization=1.0)
    pabi = rdp_event(unit="edge", orders=DEFAULT_ORDERS, name="pabi", rdp=lazy_ppr_rdp(
        DEFAULT_ORDERS, noise_scale=2.0, num_iterations=20, eta=0.5, alpha=0.2))
    ledgers = [
        ("100 x Laplace (scale 20)", [(laplace_event(unit="edge", sensitivity=1.0, scale=20.0), 100)],
         [(dp_accounting.LaplaceDpEvent(20.0), 100)]),
        ("20 x Laplace (10) + 10 x Gaussian (8)",
         [(laplace_event(unit="edge", sensitivity=1.0, scale=10.0), 20),
          (gaussian_event(unit="edge", sensitivity=1.0, noise_std=8.0), 10)],
         [(dp_accounting.LaplaceDpEvent(10.0), 20), (gauss(8.0), 10)]),
        ("30 x randomized response (eps 0.5)", [(randomized_response_event(unit="edge", epsilon=0.5), 30)],
         None),
        ("DP-SGD 1000 steps (sigma 1, q 0.01)",
         [(subsampled_gaussian_event(noise_multiplier=1.0, sample_rate=0.01, steps=1000), 1)],
         [(sampled(0.01, gauss(1.0)), 1000)]),
        ("DP-SGD 200 steps (sigma 0.8, q 0.05)",
         [(subsampled_gaussian_event(noise_multiplier=0.8, sample_rate=0.05, steps=200), 1)],
         [(sampled(0.05, gauss(0.8)), 200)]),
        ("5 x GDP chains (mu 0.3)", [(gdp_event(unit="edge", mu=0.3, name="chain"), 5)],
         [(gauss(1.0 / 0.3), 5)]),
        ("PABI + 100 x Laplace (20)", [(pabi, 1), (laplace_event(unit="edge", sensitivity=1.0, scale=20.0), 100)],
         None),
        ("GCON fit (1, 1e-4) + GDP chain (mu 0.3)",
         [(objective_perturbation_event(cal), 1), (gdp_event(unit="edge", mu=0.3, name="chain"), 1)], None),
    ]
    print(f"delta = {delta:g}")
    print(f"{'ledger':42s} {'ours':>8s} {'RDP/GDP':>8s} {'PLD ref':>8s} {'ours/ref':>9s} {'RDP/ref':>8s}  rule")
    for name, ours_events, ref_events in ledgers:
        eps, rule = _ours(ours_events, delta)
        eps_rdp, _ = _ours(ours_events, delta, pld=False)
        if ref_events is None and "randomized" in name:
            from dp_accounting.pld import privacy_loss_distribution as pld_lib
            from dp_accounting.pld.common import DifferentialPrivacyParameters
            ref = pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(0.5, 0.0)).self_compose(30) \
                .get_epsilon_for_delta(delta)
        else:
            ref = None if ref_events is None else _reference(ref_events, delta)
        r1 = "-" if ref is None else f"{eps / ref:.4f}"
        r2 = "-" if ref is None else f"{eps_rdp / ref:.4f}"
        print(f"{name:42s} {eps:8.4f} {eps_rdp:8.4f} {'-' if ref is None else format(ref, '8.4f'):>8s} "
              f"{r1:>9s} {r2:>8s}  {rule}")

    # cost of registering DP-SGD steps one at a time under a budget
    ev = subsampled_gaussian_event(noise_multiplier=1.0, sample_rate=0.01)
    for label, budget in (("far from the budget", 100.0), ("near the budget", None)):
        acct = PrivacyAccountant(budget={"node": (budget or 1e9, delta)})
        if budget is None:  # fill the ledger to just below where the Rényi rule stops accepting
            for _ in range(2000):
                acct.register(ev)
            rdp_eps = PrivacyAccountant.from_state_dict({**acct.state_dict(), "pld": False}).epsilon("node", delta)
            acct.set_budget("node", (rdp_eps * 0.999, delta))
        t0 = time.perf_counter()
        for _ in range(50):
            acct.register(ev)
        dt = (time.perf_counter() - t0) / 50
        print(f"register one DP-SGD step, {label}: {dt * 1e3:.2f} ms (ledger of {len(acct)} steps)")
    t0 = time.perf_counter()
    acct.report()
    print(f"report() of that ledger: {(time.perf_counter() - t0) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
