"""Land Opacus DP-SGD training in a :class:`PrivacyAccountant` ledger.

:class:`OpacusAccountant` implements Opacus' accountant interface
(:class:`opacus.accountants.IAccountant`), so a real
:class:`opacus.PrivacyEngine` drives it unchanged:

.. code-block:: python

    acct = PrivacyAccountant(budget={"node": (4.0, 1e-5)})
    engine = PrivacyEngine()
    engine.accountant = OpacusAccountant(acct, unit="node", name="encoder")
    model, optimizer, loader = engine.make_private(module=..., optimizer=..., data_loader=...,
                                                   noise_multiplier=1.1, max_grad_norm=1.0)
    # or calibrated from a target, against what the ledger has already spent:
    model, optimizer, loader = make_private_with_epsilon(engine, module=..., optimizer=...,
                                                         data_loader=..., target_epsilon=3.0,
                                                         target_delta=1e-5, epochs=5, max_grad_norm=1.0)

Every optimizer step registers one subsampled-Gaussian event (Opacus' RDP analysis of Mironov,
Talwar and Zhang, "Rényi Differential Privacy of the Sampled Gaussian Mechanism", 2019, and its
privacy loss distribution through ``dp-accounting``) on ``unit``. Opacus calls the accountant
hook after adding noise to the gradients but **before** the parameters are updated; when the
step would exceed the budget the hook clears the noisy gradients and raises
:class:`PrivacyBudgetExceeded`, so the step is never applied and nothing is released.
Consecutive identical steps are stored once with a count (see :class:`PrivacyAccountant`), so
a checkpoint does not grow with the number of steps.

``engine.make_private_with_epsilon(...)`` works too: :meth:`OpacusAccountant.mechanism` is
``"pyg_private"``, registered in Opacus' accountant registry when this module is imported (the
first access to any DP-SGD name of :mod:`pyg_private.accounting` imports it; ``import pyg_private``
alone does not import Opacus), and Opacus' ``get_noise_multiplier``
then asks this library's composition (Rényi/GDP rules, a safe upper bound of the figure the ledger
will report) for the epsilon of each candidate noise multiplier, on top of what the engine's
ledger has already spent on the unit. :func:`make_private_with_epsilon` calibrates tighter (with
the privacy loss distribution as well), also keeps the run within the unit's budget, and checks
the model first.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable

from opacus.accountants.accountant import IAccountant

try:  # Opacus' accountant registry (present in the tested Opacus 1.6)
    from opacus.accountants.registry import register_accountant
except ImportError:  # pragma: no cover - older Opacus: only the make_private_with_epsilon helper below
    register_accountant = None

from .accountant import PrivacyAccountant
from .calibration import calibrate_noise
from .events import PrivacyEvent
from .mechanism_events import subsampled_gaussian_event
from .opacus_checks import (MessagePassingInDPSGDError, ReleaseInsideDPSGDError, check_opacus_model,
                            refuse_message_passing_under_opacus)
from .orders import DEFAULT_ORDERS
from .units import Unit, as_unit
from .validation import check_delta, check_epsilon, check_positive_int

__all__ = ["OpacusAccountant", "make_private", "make_private_with_epsilon", "dp_sgd_noise_multiplier",
           "check_opacus_model", "ReleaseInsideDPSGDError", "MessagePassingInDPSGDError", "MECHANISM"]

#: The name under which this library's accounting is registered in Opacus.
MECHANISM = "pyg_private"
#: Relative margin added to every epsilon handed to Opacus' calibration: it covers the floating-point
#: difference between composing T steps at once (calibration) and one by one (the ledger).
_CALIBRATION_MARGIN = 1e-9
_MAX_SIGMA = 1e6  # Opacus' get_noise_multiplier gives up there too


#: The integer orders of the ledger's grid (and infinity), where Opacus' RDP of the subsampled Gaussian is
#: fast (milliseconds, against about 0.3 s on the full grid): a curve on fewer orders composes with the
#: ledger on the orders it shares and converts to an epsilon at least as large, so every figure computed
#: with it during a search is an upper bound of the ledger's.
_SEARCH_ORDERS = tuple(a for a in DEFAULT_ORDERS if math.isinf(a) or (a == int(a) and a <= 64))


def _step_event(noise_multiplier: float, sample_rate: float, unit: Unit, name: str, steps: int = 1,
                orders: tuple[float, ...] = DEFAULT_ORDERS) -> PrivacyEvent:
    return subsampled_gaussian_event(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps,
                                     unit=unit, name=name, orders=orders)


class OpacusAccountant(IAccountant):
    """Opacus accountant interface backed by a :class:`PrivacyAccountant`.

    Args:
        accountant (PrivacyAccountant): the ledger steps are recorded in.
        unit (str, optional): the unit DP-SGD protects (default ``"node"``: per-node
            gradient clipping of a model whose examples are nodes).
        name (str, optional): event name shown in reports (default ``"dp-sgd"``).

    Consecutive identical steps are stored once with a count (in Opacus' ``history`` and in
    the ledger), so a checkpoint does not grow with the number of steps.
    """

    def __init__(self, accountant: PrivacyAccountant, *, unit: str | Unit = Unit.NODE, name: str = "dp-sgd") -> None:
        super().__init__()
        if not isinstance(accountant, PrivacyAccountant):
            raise TypeError(f"`accountant` must be a PrivacyAccountant; got {type(accountant).__name__}")
        self.accountant = accountant
        self.unit = as_unit(unit)
        if self.unit is Unit.LOCAL:
            raise ValueError("DP-SGD cannot be charged to unit 'local'")
        self.name = name
        self._event_cache: dict[tuple[float, float], PrivacyEvent] = {}

    def _event(self, noise_multiplier: float, sample_rate: float) -> PrivacyEvent:
        key = (float(noise_multiplier), float(sample_rate))
        if key not in self._event_cache:
            self._event_cache[key] = _step_event(noise_multiplier, sample_rate, self.unit, self.name)
        return self._event_cache[key]

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Record one DP-SGD step (raises before recording anything if it cannot be afforded)."""
        self.accountant.register(self._event(noise_multiplier, sample_rate))
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            nm, q, n = self.history.pop()
            self.history.append((nm, q, n + 1))
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def get_optimizer_hook_fn(self, sample_rate: float) -> Callable[[Any], None]:
        """The step hook Opacus' ``make_private`` attaches to the optimizer. Called there, after the
        model is wrapped and before any step: a model holding a PyG message-passing layer (per-node
        per-sample gradients) is refused now (:class:`MessagePassingInDPSGDError`), before anything
        is charged."""
        prepared = _module_being_made_private()
        if prepared is not None:
            refuse_message_passing_under_opacus(prepared)

        def hook_fn(optim: Any) -> None:
            try:
                self.step(noise_multiplier=optim.noise_multiplier,
                          sample_rate=sample_rate * optim.accumulated_iterations)
            except Exception:
                for group in optim.param_groups:  # the noisy gradient must not be used
                    for p in group["params"]:
                        p.grad = None
                raise

        return hook_fn

    def get_epsilon(self, delta: float, *args: Any, **kwargs: Any) -> float:
        """The epsilon of the whole unit's ledger (DP-SGD and every other release on it)."""
        return self.accountant.epsilon(self.unit, delta)

    def __len__(self) -> int:
        return sum(n for _, _, n in self.history)

    @classmethod
    def mechanism(cls) -> str:
        return MECHANISM

    def state_dict(self, destination: Any = None) -> Any:
        """Opacus' history plus the whole :class:`PrivacyAccountant` ledger it feeds.

        ``PrivacyEngine.save_checkpoint`` stores this, so a checkpoint keeps the spend.
        """
        destination = super().state_dict(destination)
        destination["ledger"] = self.accountant.state_dict()
        destination["unit"] = self.unit.value
        destination["name"] = self.name
        return destination

    def load_state_dict(self, state_dict: Any) -> None:
        """Restore the history **and** replace the ledger by the saved one (all or nothing).

        A state without a ledger (for example one saved by Opacus' own accountants) is
        refused: loading it would forget what was spent.
        """
        if state_dict is None or "ledger" not in state_dict:
            raise ValueError("this state_dict holds no pyg_private ledger; refusing to load a history whose "
                             "privacy spend would be lost")
        if state_dict.get("mechanism") != self.mechanism():
            raise ValueError(f"state_dict was saved by a {state_dict.get('mechanism')!r} accountant")
        history = [tuple(h) for h in state_dict["history"]]
        ledger = PrivacyAccountant.from_state_dict(state_dict["ledger"])  # validate before changing anything
        self.accountant._adopt(ledger)
        self.history = history


def _module_being_made_private() -> Any:
    """The module of the ``PrivacyEngine.make_private`` call running in this thread, if any (Opacus
    hands the accountant only the sample rate)."""
    import torch

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "make_private":
            module = frame.f_locals.get("module")
            if isinstance(module, torch.nn.Module):
                return module
        frame = frame.f_back
    return None


# --------------------------------------------------------------------------- calibration
def _opacus_steps(sample_rate: float, steps: int) -> int:
    """Opacus computes ``steps = int(epochs / sample_rate)`` with ``sample_rate = 1 / len(loader)``,
    which truncates one step for some loader lengths (``int(1 / (1 / 93)) == 92``). Count that
    step: planning one step too many is the safe side."""
    ahead = (steps + 1) * sample_rate
    here = steps * sample_rate
    if abs(ahead - round(ahead)) < 1e-9 and abs(here - round(here)) > 1e-9:
        return steps + 1
    return steps


def _calibrating_engine_accountant() -> OpacusAccountant | None:
    """The :class:`OpacusAccountant` of the ``PrivacyEngine`` whose ``make_private_with_epsilon``
    is running in this thread (Opacus hands its calibration only the mechanism's name)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "make_private_with_epsilon":
            acc = getattr(frame.f_locals.get("self"), "accountant", None)
            if isinstance(acc, OpacusAccountant):
                return acc
        frame = frame.f_back
    return None


def _calibration_target() -> float | None:
    """The ``target_epsilon`` of Opacus' ``get_noise_multiplier`` running in this thread, if any."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "get_noise_multiplier":
            target = frame.f_locals.get("target_epsilon")
            return float(target) if isinstance(target, (int, float)) else None
        frame = frame.f_back
    return None


class _OpacusCalibration(IAccountant):
    """What Opacus' ``get_noise_multiplier(accountant="pyg_private")`` instantiates: the epsilon of
    its trial ``history`` on top of the calling engine's ledger (none found: an empty ledger), by
    the Rényi/GDP rules on the integer orders (an upper bound of the ledger's figure, PLD or not),
    plus a margin of :data:`_CALIBRATION_MARGIN`; inside a part of a parallel group, the group's
    figure (this part with the trial run, or the group's other parts). Meant for calibration: to train, set
    ``engine.accountant = OpacusAccountant(ledger)``, which records every step in the ledger."""

    def __init__(self) -> None:
        super().__init__()
        found = _calibrating_engine_accountant()
        self._ledger = found.accountant if found is not None else PrivacyAccountant()
        self._unit = found.unit if found is not None else Unit.NODE
        self._name = found.name if found is not None else "dp-sgd"
        # without the ledger, cover both conversions: the figure must not exceed either
        self._conversions = (found.accountant.conversion,) if found is not None else ("balle", "standard")
        # inside a part of a parallel group the steps will be charged there: calibrate on the group's figure
        self._partition = self._ledger._resolve_partition(None) if found is not None else None
        self._floor: dict[float, float] = {}

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            nm, q, n = self.history.pop()
            self.history.append((nm, q, n + 1))
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def get_epsilon(self, delta: float, **kwargs: Any) -> float:
        if not self.history:
            return self._ledger.epsilon(self._unit, check_delta(delta))
        planned = [(_step_event(sigma, q, self._unit, self._name, steps=_opacus_steps(q, int(steps)),
                                orders=_SEARCH_ORDERS), 1) for sigma, q, steps in self.history]
        delta = check_delta(delta)
        where = self._partition
        eps = max(self._ledger._planned_epsilon(planned, delta, use_pld=False, conversion=c, partition=where,
                                                part_only=where is not None) for c in self._conversions)
        if where is not None:  # the group's other parts, by the ledger's own figure (they do not change)
            if delta not in self._floor:
                self._floor[delta] = self._ledger._partition_floor(self._unit, delta, where)
            floor, target = self._floor[delta], _calibration_target()
            # the group's figure is max(this part's, floor): below a target the other parts meet, it fits
            # exactly when this part's does, so Opacus' search is given this part's figure (else it would stop
            # at the first trial under the target, far from it); otherwise the floor, and the search fails
            if target is None or floor > target:
                eps = max(eps, floor)
        return eps * (1.0 + _CALIBRATION_MARGIN)

    def __len__(self) -> int:
        return sum(int(n) for _, _, n in self.history)

    @classmethod
    def mechanism(cls) -> str:
        return MECHANISM


if register_accountant is not None:
    try:
        register_accountant(MECHANISM, _OpacusCalibration)
    except ValueError:  # registered already (the module was reloaded)
        register_accountant(MECHANISM, _OpacusCalibration, force=True)


def dp_sgd_noise_multiplier(
    accountant: PrivacyAccountant,
    *,
    target_epsilon: float,
    target_delta: float,
    sample_rate: float,
    steps: int,
    unit: str | Unit = Unit.NODE,
    name: str = "dp-sgd",
    rtol: float = 1e-3,
    partition: tuple[str, Any] | None = None,
) -> float:
    r"""The smallest noise multiplier (within ``rtol``) such that ``steps`` DP-SGD steps at
    ``sample_rate``, charged on top of what ``accountant`` has already spent on ``unit``, end at or
    below ``target_epsilon`` at ``target_delta``, and within the unit's budget when it has one.

    **Inside a part of a parallel group** (``with part(i):``, or ``partition=(group, i)``) the steps
    will be charged to that part, and the run is calibrated against the figure the ledger will then
    report: the group's worst part (this part with the run, or another part already charged), with
    the releases outside the group. A target that the other parts already exceed cannot be met;
    any other can (before, the run was calibrated as if sequential, on top of the group's maximum).

    The check is the accountant's own: the ledger with the ``steps`` events added one by one,
    exactly as training will charge them (nothing is recorded). The search first brackets the
    answer with the Rényi/GDP rules (fast, an upper bound), then refines it with the full
    composition, and always returns a multiplier that meets the target (compare Opacus'
    ``get_noise_multiplier``, which starts from zero spend).

    Args:
        accountant (PrivacyAccountant): the ledger the steps will be charged to.
        target_epsilon (float): the unit's total epsilon after the run.
        target_delta (float): the delta it is measured at.
        sample_rate (float): Poisson sampling rate, ``1 / len(data_loader)`` in Opacus.
        steps (int): optimizer steps of the run (``epochs * len(data_loader)``).
        unit (str, optional): the unit DP-SGD protects (default ``"node"``).
        name (str, optional): the steps' event name (default ``"dp-sgd"``).
        rtol (float, optional): relative precision of the multiplier (default ``1e-3``).
        partition (tuple, optional): ``(group name, part)`` the steps will be charged to (default:
            the part entered in this thread, if any).

    Raises:
        ValueError: the target (or the budget) cannot be met, e.g. the ledger already spends it.
    """
    if not isinstance(accountant, PrivacyAccountant):
        raise TypeError(f"`accountant` must be a PrivacyAccountant; got {type(accountant).__name__}")
    target = check_epsilon(target_epsilon, "target_epsilon")
    delta = check_delta(target_delta, "target_delta")
    steps = check_positive_int(steps, "steps")
    q = float(sample_rate)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"`sample_rate` must lie in (0, 1]; got {sample_rate!r}")
    unit = as_unit(unit)
    if unit is Unit.LOCAL:
        raise ValueError("DP-SGD cannot be charged to unit 'local'")
    if not 0.0 < rtol < 1.0:
        raise ValueError(f"`rtol` must lie in (0, 1); got {rtol!r}")
    budget = accountant.budget.get(unit.value)
    if budget is not None and budget[1] == 0.0:
        raise ValueError(f"unit {unit.value!r} has a pure-DP budget (delta 0): DP-SGD (Gaussian noise) cannot fit it")
    limits = [(target, delta)] + ([budget] if budget is not None else [])
    where = accountant._resolve_partition(partition)
    if where is not None:
        accountant._check_group_open(where[0])
    # inside a part, the unit's figure is max(F_part(sigma), floor): the selections through the part grow with
    # the run, the others (the group's other parts) do not. The floor is the ledger's own figure, computed once
    # and checked against the limits; the search bounds only F_part (by the Renyi rules first: the other parts'
    # Renyi figure may exceed a target that their PLD figure meets), and the last check is the ledger's whole
    # figure, exactly as training will charge it
    floor = {d: accountant._partition_floor(unit, d, where) if where is not None else 0.0 for _, d in limits}
    blocked = [(e, d) for e, d in limits if floor[d] > e * (1.0 + 1e-12)]
    if blocked:
        e, d = blocked[0]
        raise ValueError(
            f"epsilon={e:g} at delta={d:g} cannot be met by a run in part {where[1]!r} of parallel group "
            f"{where[0]!r}: the group's other parts (with the releases outside the group) already spend "
            f"epsilon {floor[d]:.4g} on unit {unit.value!r}, and a group costs its worst part")

    def ratio(sigma: float, *, use_pld: bool | None, orders: tuple[float, ...] = _SEARCH_ORDERS,
              exact: bool = False) -> float:
        """max over the limits of epsilon / allowed epsilon: the run fits when it is <= 1."""
        if exact:  # the steps added one by one, as training charges them: the ledger's own figure
            event = _step_event(sigma, q, unit, name, orders=orders)
            return max(accountant._planned_epsilon(event, d, repeat=steps, use_pld=use_pld, partition=where) / e
                       for e, d in limits)
        # below limits that the floor meets, max(F_part, floor) fits exactly when F_part does: search on F_part
        event = _step_event(sigma, q, unit, name, steps=steps, orders=orders)
        return max(accountant._planned_epsilon(event, d, use_pld=use_pld, partition=where,
                                               part_only=where is not None) / e for e, d in limits)

    def spent() -> str:
        if where is None:
            return f"on top of what the ledger already spends on unit {unit.value!r} " \
                   f"(epsilon {accountant.epsilon(unit, delta):.4g})"
        return (f"in part {where[1]!r} of parallel group {where[0]!r} (the unit's figure now: epsilon "
                f"{accountant.epsilon(unit, delta):.4g}; the group's other parts: {floor[delta]:.4g})")

    def margin(r: float) -> float:
        return r * (1.0 + _CALIBRATION_MARGIN)

    # 1. the Rényi/GDP rules on the integer orders: an upper bound of the figure, milliseconds per evaluation
    try:
        upper = calibrate_noise(lambda s: margin(ratio(s, use_pld=False)), 1.0, min_scale=1e-3,
                                max_scale=_MAX_SIGMA, rtol=1e-6)
    except ValueError as err:
        if "already met" not in str(err):
            what = f"target_epsilon={target:g} at target_delta={delta:g}" + (
                f" within the unit's budget {budget}" if budget is not None else "")
            raise ValueError(f"{what} cannot be met by {steps} DP-SGD steps at sample_rate={q:g} {spent()}: even "
                             f"noise_multiplier={_MAX_SIGMA:g} exceeds it") from None
        upper = 1e-3

    # 2. the ledger's own figure (PLD, or the Rényi rules on the whole grid) is tighter: refine below the
    # upper bound by regula falsi (Illinois) on log(sigma); every accepted point fits
    if accountant.pld:
        def excess(s: float) -> float:
            return margin(ratio(s, use_pld=True)) - 1.0
    else:
        def excess(s: float) -> float:
            return margin(ratio(s, use_pld=False, orders=DEFAULT_ORDERS)) - 1.0
    hi, f_hi = upper, excess(upper)
    lo, f_lo = hi / 1.25, None
    while lo > 1e-3:
        f_lo = excess(lo)
        if f_lo > 0:
            break
        hi, f_hi, lo, f_lo = lo, f_lo, lo / 1.25, None
    if f_lo is not None and f_lo > 0 and f_hi <= 0:
        a, b, fa, fb, side = math.log(lo), math.log(hi), f_lo, f_hi, 0
        for _ in range(40):
            if -fb <= rtol or b - a <= 1e-9:
                break
            c = b - fb * (b - a) / (fb - fa)
            c = min(max(c, a + 0.01 * (b - a)), b - 0.01 * (b - a))  # stay strictly inside the bracket
            fc = excess(math.exp(c))
            if fc <= 0:
                b, fb = c, fc
                if side == 1:
                    fa /= 2.0
                side = 1
            else:
                a, fa = c, fc
                if side == -1:
                    fb /= 2.0
                side = -1
        hi = math.exp(b)
        while excess(hi) > 0:  # exp(log(s)) is not always s
            hi *= 1.0 + 1e-12
    sigma = hi
    # 3. the exact run, on the full grid, as the ledger will see it
    bump = sigma * 1e-9
    while ratio(sigma, use_pld=None, orders=DEFAULT_ORDERS, exact=True) > 1.0:
        sigma += bump
        bump *= 2.0
        if sigma > 2 * _MAX_SIGMA:  # the ledger's figure (a bounded group) stays above the target
            raise ValueError(f"target_epsilon={target:g} at target_delta={delta:g} cannot be met by {steps} DP-SGD "
                             f"steps at sample_rate={q:g} {spent()}")
    return sigma


def _bridge(engine: Any) -> OpacusAccountant:
    acc = getattr(engine, "accountant", None)
    if not isinstance(acc, OpacusAccountant):
        raise TypeError("`engine.accountant` must be an OpacusAccountant: set engine.accountant = "
                        f"OpacusAccountant(accountant, unit='node') before make_private; got {type(acc).__name__}")
    return acc


def make_private(engine: Any, *, module: Any, **kwargs: Any) -> Any:
    """``engine.make_private(module=module, **kwargs)`` after :func:`check_opacus_model` has made
    sure ``module`` holds no private release layer (nothing is charged when it does)."""
    _bridge(engine)
    check_opacus_model(module)
    return engine.make_private(module=module, **kwargs)


def make_private_with_epsilon(
    engine: Any,
    *,
    module: Any,
    optimizer: Any,
    data_loader: Any,
    target_epsilon: float,
    target_delta: float,
    epochs: int | None = None,
    steps: int | None = None,
    max_grad_norm: Any,
    rtol: float = 1e-3,
    **kwargs: Any,
) -> Any:
    """Opacus' ``make_private_with_epsilon`` calibrated against the engine's ledger.

    The noise multiplier is :func:`dp_sgd_noise_multiplier` for ``epochs * len(data_loader)``
    steps (or ``steps``) at Opacus' sample rate ``1 / len(data_loader)``, on top of what the
    ledger has already spent on the bridge's unit, within its budget; the run ends at or below
    ``target_epsilon``. Called inside ``with part(i):`` of a parallel group (where the steps will
    be charged), it calibrates against the group's figure: the unit ends at or below
    ``target_epsilon`` with the group costing its worst part. ``module`` is checked first
    (:func:`check_opacus_model`). The other arguments go to ``engine.make_private``; the chosen
    multiplier is ``optimizer.noise_multiplier``.

    Args:
        engine (opacus.PrivacyEngine): with ``engine.accountant`` an :class:`OpacusAccountant`.
        epochs (int, optional): epochs of the run; exactly one of ``epochs`` and ``steps``.
        steps (int, optional): optimizer steps of the run.
        rtol (float, optional): relative precision of the multiplier (default ``1e-3``).
    """
    bridge = _bridge(engine)
    check_opacus_model(module)
    if (epochs is None) == (steps is None):
        raise ValueError("give exactly one of `epochs` and `steps`")
    batches = len(data_loader)
    if batches == 0:
        raise ValueError("`data_loader` has no batches")
    total = steps if steps is not None else check_positive_int(epochs, "epochs") * batches
    sigma = dp_sgd_noise_multiplier(bridge.accountant, target_epsilon=target_epsilon, target_delta=target_delta,
                                    sample_rate=1.0 / batches, steps=total, unit=bridge.unit, name=bridge.name,
                                    rtol=rtol)
    return engine.make_private(module=module, optimizer=optimizer, data_loader=data_loader, noise_multiplier=sigma,
                               max_grad_norm=max_grad_norm, **kwargs)
