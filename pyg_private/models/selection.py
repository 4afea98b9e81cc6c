"""Hyperparameter selection on the validation split, shared by the recipes.

* :func:`select_on_validation`: every candidate runs; **not charged** (as the papers report).
* :func:`select_privately`: random search with a random number of trials, charged to the
  ledger with the bound of Papernot and Steinke (ICLR 2022), see
  :mod:`pyg_private.accounting.hyperparameter_tuning`.
"""
from __future__ import annotations

import math
import random
import statistics
from typing import Any, Callable, Generic, Iterable, NamedTuple, Optional, Sequence, TypeVar

import numpy as np
import torch

from ..accounting.accountant import PrivacyAccountant
from ..accounting.errors import PrivacyBudgetExceeded
from ..accounting.events import PrivacyEvent
from ..accounting.hyperparameter_tuning import (
    TrialDistribution,
    composition_curve,
    trial_curve,
    tuning_event,
    uniform_index,
)
from ..accounting.units import Unit
from ..sampling.words import get_secure_mode

__all__ = ["check_charged_search", "select_on_validation", "select_privately", "PrivateSelection", "TrialCostExceeded"]

C = TypeVar("C")
R = TypeVar("R")

_COST_RTOL = 1e-9  # floating-point slack when comparing a trial's composed curve with the declared one


def select_on_validation(grid: Iterable[C], evaluate: Callable[[C], list[R]],
                         score: Callable[[R], float]) -> tuple[C, list[R]]:
    """The configuration of ``grid`` whose runs (``evaluate(config)``) have the best mean
    ``score`` (a validation metric; the first of equals wins), and those runs.

    **Not charged:** the recipes spend every candidate's budget on its own accountant and
    report only the selected runs' spend, as the papers do.
    """
    best = None
    for config in grid:
        runs = evaluate(config)
        value = statistics.mean(score(r) for r in runs)
        if best is None or value > best[0]:
            best = (value, config, runs)
    if best is None:
        raise ValueError("`grid` is empty")
    return best[1], best[2]


class TrialCostExceeded(PrivacyBudgetExceeded):
    """A trial of :func:`select_privately` tried to charge more than the declared per-trial cost
    (or on another unit, or an event without an RDP curve). Raised by the trial's scratch ledger
    **before** that release draws noise; the search stops and releases nothing."""


class PrivateSelection(NamedTuple, Generic[C, R]):
    """What :func:`select_privately` returns. Only ``config`` and ``run`` (the selected trial's
    output) are covered by the charged event; ``trials`` (:math:`K`) is **not** (see there)."""

    config: Optional[C]
    run: Optional[R]
    trials: int


class _TrialLedger(PrivacyAccountant):
    """The scratch ledger of one trial: an ordinary accountant that refuses, before the release,
    any event that would take its composed RDP curve above the declared per-trial curve at some
    order (or that is on another unit, or has no curve). Both :meth:`register` and :meth:`check`
    go through ``_prospective``, which is where the library validates a release before noise."""

    def __init__(self, unit: Unit, orders: tuple[float, ...], curve: np.ndarray, label: str) -> None:
        super().__init__(pld=False)
        self._trial_unit = unit
        self._trial_orders = orders
        self._trial_curve = curve
        self._trial_label = label

    def _prospective(self, event: PrivacyEvent, target: Any = None, *, charging: bool = False):  # noqa: D401
        where = f"{self._trial_label}: release {getattr(event, 'name', event)!r} refused"
        if isinstance(event, PrivacyEvent):
            if event.unit is not self._trial_unit:
                raise TrialCostExceeded(f"{where}: it is charged to unit {event.unit.value!r}, but the search is "
                                        f"charged to {self._trial_unit.value!r}. Nothing was released.")
            if event.approx is not None:
                raise TrialCostExceeded(f"{where}: an (epsilon, delta)-only event has no RDP curve, which the "
                                        "tuning theorems need. Nothing was released.")
        change, eps = super()._prospective(event, target, charging=charging)
        for state in change.candidates:
            try:
                actual = composition_curve(state, self._trial_orders)
            except ValueError as err:
                raise TrialCostExceeded(f"{where}: {err}. Nothing was released.") from None
            over = actual > self._trial_curve * (1.0 + _COST_RTOL) + 1e-12
            if over.any():
                i = int(np.argmax(over))
                raise TrialCostExceeded(
                    f"{where}: the trial would cost RDP {actual[i]:.6g} at order {self._trial_orders[i]:g}, over the "
                    f"declared per-trial cost {self._trial_curve[i]:.6g} (the tuning theorems need one bound for "
                    "every candidate: declare the costliest candidate's events). Nothing was released.")
        return change, eps

    def trial_cost(self) -> Optional[np.ndarray]:
        """The trial's composed curve on the declared orders (``None`` when nothing was charged)."""
        if not self.events_of(self._trial_unit):
            return None
        return composition_curve(self.composition(self._trial_unit), self._trial_orders)


def _resolve_generator(generator: Any) -> Any:
    if generator is None:
        return None  # the tuning module draws from the OS's cryptographic generator
    if get_secure_mode():
        raise ValueError("`secure_mode` is on: the number of trials and the candidates are drawn from the operating "
                         "system; a seeded `generator` would make them predictable")
    if isinstance(generator, torch.Generator):
        words = torch.randint(0, 2 ** 62, (2,), generator=generator, device=generator.device).tolist()
        seed = (words[0] << 62) | words[1]
        return random.Random(seed)
    if isinstance(generator, (random.Random, np.random.Generator)):
        return generator
    raise TypeError("`generator` must be None, a torch.Generator, a random.Random or a numpy.random.Generator; "
                    f"got {type(generator).__name__}")


def select_privately(grid: Iterable[C], run_one: Callable[[C, PrivacyAccountant], R],
                     score: Callable[[R], float], *, distribution: TrialDistribution,
                     trial_cost: PrivacyEvent | Sequence[PrivacyEvent], accountant: PrivacyAccountant,
                     unit: Unit | str | None = None, generator: Any = None,
                     name: str = "hyperparameter_tuning") -> PrivateSelection:
    r"""Random search with a random number of trials, charged to ``accountant``.

    Papernot and Steinke, *Hyperparameter Tuning with Rényi Differential Privacy*, ICLR 2022: draw
    :math:`K` from ``distribution`` (:class:`~pyg_private.accounting.hyperparameter_tuning.TruncatedNegativeBinomial`,
    Theorem 2, including the geometric and logarithmic cases; or
    :class:`~pyg_private.accounting.hyperparameter_tuning.Poisson`, Theorem 6), run :math:`K` trials, each
    ``run_one(config, ledger)`` on a configuration drawn **uniformly at random, with replacement**
    from ``grid``, and return the trial with the highest ``score``. Ties go to the configuration
    earlier in ``grid``, then to the earlier trial: outputs ordered by (score, grid position), which
    is a total order up to trials of the same configuration and score, and among those the earlier
    trial is a uniformly random one (the trials are exchangeable), so the theorems' total order holds.

    **Charging.** One event (:func:`~pyg_private.accounting.hyperparameter_tuning.tuning_event` of
    ``trial_cost`` and ``distribution``) is registered on ``accountant`` **before** anything is
    drawn or run: a budget that cannot fit it raises
    :class:`~pyg_private.accounting.PrivacyBudgetExceeded` and nothing runs. The charge stands
    whatever happens next (a trial may already have run when a later one fails).

    **One bound for every trial.** ``trial_cost`` declares what one trial may cost: the events of
    the costliest candidate's run (composed by the accountant's own rule). Each trial is charged to
    its own scratch ledger (the ``ledger`` passed to ``run_one``), which refuses, **before** the
    release, anything that would take the trial's composed RDP curve over the declared one at some
    order, a release on another unit, or an event without an RDP curve: :class:`TrialCostExceeded`
    (a :class:`~pyg_private.accounting.PrivacyBudgetExceeded`), and the search stops. A trial that
    charges nothing to its ledger raises ``RuntimeError`` (``run_one`` must charge ``ledger``,
    not an accountant of its own).

    What the guarantee covers, and what the caller must ensure:

    * Only the selected trial's output (``config``, ``run``) is released. The other trials' runs
      are dropped here and must not leak otherwise (logs, files, shared state). ``trials``
      (:math:`K`) is **not covered**: the bounds rest on :math:`K` staying secret (knowing
      :math:`K = k` costs up to :math:`k` runs); nor is the search's running time, which grows with
      :math:`K`. Use ``trials`` for diagnostics only.
    * ``score(run)`` must be computed from what the trial released **privately**: any private data
      it reads (validation labels, say) must be read inside ``run_one`` by a mechanism charged to
      ``ledger``, and ``score`` is then post-processing. A non-private validation accuracy (as the
      recipes' uncharged search uses) is not covered. A NaN score counts as ``-inf``.
    * Trials are independent: ``run_one`` builds fresh noisy components for every call (no cache,
      generator or state shared between trials), and its noise is fresh (a seeded generator voids
      the guarantee). Exceptions it raises propagate and are observable.
    * ``distribution`` and ``grid`` do not depend on the private data.

    Args:
        grid (Iterable): the candidate configurations (at least one; drawn uniformly).
        run_one (Callable[[config, PrivacyAccountant], run]): one training run of ``config``,
            charging every release to the given ledger.
        score (Callable[[run], float]): the selection score (higher is better).
        distribution: the law of the number of trials :math:`K`.
        trial_cost (PrivacyEvent or sequence of them): the events of one (the costliest) trial.
        accountant (PrivacyAccountant): the ledger charged with the search.
        unit (str, optional): the unit (default: ``trial_cost``'s); one unit per search.
        generator (optional): ``None`` (default) draws :math:`K` and the candidates from the
            operating system's cryptographic generator; a seeded ``torch.Generator``,
            ``random.Random`` or ``numpy.random.Generator`` is reproducible and **voids the guarantee**.
        name (str, optional): the event's name.

    Returns:
        :class:`PrivateSelection` ``(config, run, trials)``; ``(None, None, 0)`` when :math:`K = 0`
        (Poisson only).
    """
    candidates = list(grid)
    if not candidates:
        raise ValueError("`grid` is empty")
    if not callable(run_one) or not callable(score):
        raise TypeError("`run_one` and `score` must be callables")
    if not isinstance(accountant, PrivacyAccountant):
        raise TypeError(f"`accountant` must be a PrivacyAccountant; got {type(accountant).__name__}")
    event = tuning_event(trial_cost, distribution=distribution, unit=unit, name=name,
                         params={"candidates": len(candidates)})
    orders, declared = trial_curve(trial_cost, orders=event.orders)
    rng = _resolve_generator(generator)
    accountant.register(event)  # before anything is drawn or run; a refusal leaves nothing done
    k = distribution.sample(rng)
    best: Optional[tuple[float, int, Any]] = None
    for t in range(k):
        index = uniform_index(len(candidates), rng)
        ledger = _TrialLedger(event.unit, orders, declared, f"trial {t + 1} of the search {name!r}")
        run = run_one(candidates[index], ledger)
        if ledger.trial_cost() is None:
            raise RuntimeError(f"trial {t + 1} charged nothing to its ledger: `run_one(config, ledger)` must charge "
                               "every release to `ledger` (not to an accountant of its own)")
        value = float(score(run))
        if math.isnan(value):
            value = -math.inf
        if best is None or value > best[0] or (value == best[0] and index < best[1]):
            best = (value, index, run)
    if best is None:
        return PrivateSelection(None, None, 0)
    return PrivateSelection(candidates[best[1]], best[2], k)


def check_charged_search(datasets: Sequence[Any], seeds: Sequence[Any], kwargs: dict,
                         accountant: Any) -> None:
    """The recipes' rules for a charged search (``search_*(tuning=...)``), checked before anything
    runs: one graph and no seed (every further run on the same graph is a further release), edge
    level (the validation score is post-processing only there), and the accountant that pays."""
    if len(datasets) != 1 or list(seeds) != [None] or kwargs.get("level", "edge") != "edge":
        raise ValueError("a charged search runs on one graph (`datasets=[data]`, `seeds=[None]`) at edge level: "
                         "every further run on the same graph is a further release")
    if accountant is None or not isinstance(accountant, PrivacyAccountant):
        raise ValueError("a charged search needs the `accountant` that pays for it")

