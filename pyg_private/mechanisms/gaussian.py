r"""The Gaussian mechanism with exact GDP accounting."""
from __future__ import annotations

import torch
from torch import Tensor

from ..accounting import PrivacyAccountant, PrivacyEvent, Unit, gaussian_event, gdp_mu
from ..accounting.validation import check_delta, check_epsilon, check_positive
from ._noise import gaussian_noise
from ._release import OutputPerturbation, Sampler
from ..sampling.grid import DEFAULT_GRID_TOLERANCE

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
        sampler (str): ``"safe"`` (default): the release lies on a power-of-two grid and the
            noise is the Gaussian variable rounded to it, sampled exactly from integers (see
            :mod:`pyg_private.sampling.grid`): a post-processing of the Gaussian mechanism on
            the rounded query, whose sensitivity :math:`\Delta_2 + \sqrt d\, g` is charged.
            ``"float"``: the floating-point sampler, open to floating-point attacks; for
            benchmarks and audits only.
        secure_mode (bool, optional): every random bit from the operating system's CSPRNG
            (``None``: the process-wide default).
        granularity (float, optional): the grid (a power of two); chosen per call when ``None``
            (then ``mechanism.granularity`` is the grid of the last release).
        grid_tolerance (float): bound on the rounding's sensitivity inflation relative to
            :math:`\Delta_2`. (default: :math:`2^{-16}`)
    """

    norm = "l2"
    noise_kind = "gaussian"

    def __init__(self, sensitivity: float, *, noise_std: float | None = None, epsilon: float | None = None,
                 delta: float | None = None, unit: str | Unit = Unit.EDGE,
                 accountant: PrivacyAccountant | None = None, name: str = "gaussian",
                 generator: torch.Generator | None = None, sampler: Sampler = "safe",
                 secure_mode: bool | None = None, granularity: float | None = None,
                 grid_tolerance: float = DEFAULT_GRID_TOLERANCE) -> None:
        super().__init__(sensitivity, unit=unit, accountant=accountant, name=name, generator=generator,
                         sampler=sampler, secure_mode=secure_mode, granularity=granularity,
                         grid_tolerance=grid_tolerance)
        if (noise_std is None) == (epsilon is None):
            raise ValueError("give exactly one of `noise_std` or `epsilon` (with `delta`)")
        if noise_std is not None:
            if delta is not None:
                raise ValueError("`delta` is only used with `epsilon`")
            self._fixed_std, self._mu = check_positive(noise_std, "noise_std"), None
        else:
            if delta is None:
                raise ValueError("the Gaussian mechanism is not pure DP: give `delta` with `epsilon`")
            self._fixed_std, self._mu = None, gdp_mu(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        self.noise_std = self._noise_scale(self.sensitivity)

    def _noise_scale(self, sensitivity: float) -> float:
        return self._fixed_std if self._fixed_std is not None else sensitivity / self._mu

    @property
    def mu(self) -> float:
        """The GDP parameter of one release, :math:`\\Delta_2/\\sigma`."""
        return self.sensitivity / self.noise_std

    def _event(self, sensitivity: float, scale: float, params: dict) -> PrivacyEvent:
        return gaussian_event(unit=self.unit, sensitivity=sensitivity, noise_std=scale, name=self.name, params=params)

    def _float_noise(self, shape: torch.Size, device: torch.device) -> Tensor:
        return gaussian_noise(shape, self.noise_std, device=device, generator=self.generator)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(sensitivity={self.sensitivity:g}, noise_std={self.noise_std:.6g}, "
                f"mu={self.mu:.4g}, unit={self.unit.value!r}, sampler={self.sampler!r})")
