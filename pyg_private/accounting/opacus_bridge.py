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

Every optimizer step registers one subsampled-Gaussian event (Opacus' RDP analysis)
on ``unit``. Opacus calls the accountant hook after adding noise to the gradients but
**before** the parameters are updated; when the step would exceed the budget the
hook clears the noisy gradients and raises :class:`PrivacyBudgetExceeded`, so the
step is never applied and nothing is released.
"""
from __future__ import annotations

from typing import Any, Callable

from opacus.accountants.accountant import IAccountant

from .accountant import PrivacyAccountant
from .events import PrivacyEvent
from .mechanism_events import subsampled_gaussian_event
from .orders import DEFAULT_ORDERS
from .units import Unit, as_unit

__all__ = ["OpacusAccountant"]


class OpacusAccountant(IAccountant):
    """Opacus accountant interface backed by a :class:`PrivacyAccountant`.

    Args:
        accountant (PrivacyAccountant): the ledger steps are recorded in.
        unit (str, optional): the unit DP-SGD protects (default ``"node"``: per-node
            gradient clipping of a model whose examples are nodes).
        name (str, optional): event name shown in reports (default ``"dp-sgd"``).
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
            self._event_cache[key] = subsampled_gaussian_event(
                noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=1,
                unit=self.unit, name=self.name, orders=DEFAULT_ORDERS,
            )
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
        return "pyg_private"

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
        ledger = PrivacyAccountant.from_state_dict(state_dict["ledger"])  # validate before changing anything
        self.accountant.load_state_dict(ledger.state_dict())
        self.history = [tuple(h) for h in state_dict["history"]]
