r"""The Gaussian mechanism with exact GDP accounting."""
from __future__ import annotations

import torch
from torch import Tensor

from ..accounting import PrivacyAccountant, PrivacyEvent, Unit, gaussian_event, gdp_mu
from ..accounting.validation import check_delta, check_epsilon, check_positive
from ._noise import gaussian_noise
from ._release import OutputPerturbation

__all__ = ["GaussianMechanism"]


class GaussianMechanism(OutputPerturbation):
    r"""Release :math:`f(G) + N(0, \sigma^2 I)` for a query of declared :math:`\ell_2`
    sensitivity :math:`\Delta_2`.

    Exactly :math:`\mu`-GDP with :math:`\mu = \Delta_2/\sigma` (Dong, Roth and Su 2022);
    the accountant converts it exactly, and with ``epsilon``/``delta`` the noise is the
    inverse of that same conversion (:func:`pyg_private.accounting.gdp_mu`).

    Args:
        sensitivity (float): the query's :math:`\ell_2` sensitivity under ``unit``.
        noise_std (float, optional): :math:`\sigma`.
        epsilon, delta (float, optional): a target instead of ``noise_std``.
        unit (str): the unit the sensitivity refers to. (default: ``"edge"``)
        accountant (PrivacyAccountant, optional): where every call is charged, before
            noise is drawn.
        name (str, optional): the event name in reports.
        generator (torch.Generator, optional): reproducibility only; a known seed voids
            the guarantee.
    """

    def __init__(self, sensitivity: float, *, noise_std: float | None = None, epsilon: float | None = None,
                 delta: float | None = None, unit: str | Unit = Unit.EDGE,
                 accountant: PrivacyAccountant | None = None, name: str = "gaussian",
                 generator: torch.Generator | None = None) -> None:
        super().__init__(sensitivity, unit=unit, accountant=accountant, name=name, generator=generator)
        if (noise_std is None) == (epsilon is None):
            raise ValueError("give exactly one of `noise_std` or `epsilon` (with `delta`)")
        if noise_std is not None:
            if delta is not None:
                raise ValueError("`delta` is only used with `epsilon`")
            self.noise_std = check_positive(noise_std, "noise_std")
        else:
            if delta is None:
                raise ValueError("the Gaussian mechanism is not pure DP: give `delta` with `epsilon`")
            self.noise_std = self.sensitivity / gdp_mu(epsilon=check_epsilon(epsilon), delta=check_delta(delta))

    @property
    def mu(self) -> float:
        """The GDP parameter of one release, :math:`\\Delta_2/\\sigma`."""
        return self.sensitivity / self.noise_std

    def event(self) -> PrivacyEvent:
        """The event one call registers."""
        return gaussian_event(unit=self.unit, sensitivity=self.sensitivity, noise_std=self.noise_std, name=self.name)

    def _noise(self, shape: torch.Size, device: torch.device) -> Tensor:
        return gaussian_noise(shape, self.noise_std, device=device, generator=self.generator)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(sensitivity={self.sensitivity:g}, noise_std={self.noise_std:.6g}, "
                f"mu={self.mu:.4g}, unit={self.unit.value!r})")
