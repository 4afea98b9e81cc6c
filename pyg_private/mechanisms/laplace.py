r"""The Laplace mechanism with accounting."""
from __future__ import annotations



import torch
from torch import Tensor

from ..accounting import (
    DEFAULT_ORDERS,
    PrivacyAccountant,
    PrivacyEvent,
    Unit,
    calibrate_noise,
    laplace_event,
    laplace_rdp,
    rdp_to_dp,
)
from ..accounting.validation import check_delta, check_epsilon, check_positive
from ._noise import laplace_noise
from ._release import OutputPerturbation

__all__ = ["LaplaceMechanism"]


class LaplaceMechanism(OutputPerturbation):
    r"""Release :math:`f(G) + \mathrm{Lap}(0, b)^d` for a query of declared :math:`\ell_1`
    sensitivity :math:`\Delta_1`.

    Pure :math:`\epsilon`-DP with :math:`\epsilon = \Delta_1 / b`; its RDP curve is
    Mironov's :math:`g_\alpha(b, \Delta_1)` (see :func:`pyg_private.accounting.laplace_rdp`),
    so composing many Laplace releases in RDP is tighter than adding epsilons.

    Args:
        sensitivity (float): the query's :math:`\ell_1` sensitivity under ``unit``, a public
            bound you derive (e.g. 1 for an edge count under edge-level DP).
        scale (float, optional): the Laplace scale :math:`b` (not the standard deviation).
        epsilon (float, optional): target epsilon instead of ``scale``. Alone, it is a pure
            DP target (:math:`b = \Delta_1/\epsilon`); with ``delta``, the scale is calibrated
            on the RDP curve at that delta, by the same code the accountant charges with.
        delta (float, optional): see ``epsilon``.
        unit (str): the unit the sensitivity refers to. (default: ``"edge"``)
        accountant (PrivacyAccountant, optional): where every call is charged, before
            noise is drawn.
        name (str, optional): the event name in reports.
        generator (torch.Generator, optional): for reproducible experiments only; a known
            seed voids the guarantee.

    Every call is a new release and registers one event.
    """

    def __init__(self, sensitivity: float, *, scale: float | None = None, epsilon: float | None = None,
                 delta: float | None = None, unit: str | Unit = Unit.EDGE,
                 accountant: PrivacyAccountant | None = None, name: str = "laplace",
                 generator: torch.Generator | None = None) -> None:
        super().__init__(sensitivity, unit=unit, accountant=accountant, name=name, generator=generator)
        if (scale is None) == (epsilon is None):
            raise ValueError("give exactly one of `scale` or `epsilon`")
        if scale is not None:
            if delta is not None:
                raise ValueError("`delta` is only used with `epsilon`")
            self.scale = check_positive(scale, "scale")
        else:
            epsilon = check_epsilon(epsilon)
            if delta is None:
                self.scale = self.sensitivity / epsilon
            else:
                delta = check_delta(delta)
                curve = lambda b: laplace_rdp(DEFAULT_ORDERS, sensitivity=self.sensitivity, scale=b)  # noqa: E731
                self.scale = calibrate_noise(lambda b: rdp_to_dp(orders=DEFAULT_ORDERS, rdp=curve(b), delta=delta)[0],
                                             epsilon)

    @property
    def epsilon(self) -> float:
        """The pure epsilon of one release, :math:`\\Delta_1 / b`."""
        return self.sensitivity / self.scale

    def event(self) -> PrivacyEvent:
        """The event one call registers."""
        return laplace_event(unit=self.unit, sensitivity=self.sensitivity, scale=self.scale, name=self.name)

    def _noise(self, shape: torch.Size, device: torch.device) -> Tensor:
        return laplace_noise(shape, self.scale, device=device, generator=self.generator)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(sensitivity={self.sensitivity:g}, scale={self.scale:.6g}, "
                f"epsilon={self.epsilon:.4g}, unit={self.unit.value!r})")


