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
from ._release import OutputPerturbation, Sampler
from ..sampling.grid import DEFAULT_GRID_TOLERANCE

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
        sampler (str): ``"safe"`` (default): the release lies on a power-of-two grid and the noise
            is the Laplace variable rounded to it, sampled exactly from integers (see
            :mod:`pyg_private.sampling.grid`), so no output is impossible under a neighbouring
            input; the sensitivity is inflated by the rounding (at most ``grid_tolerance`` times
            :math:`\Delta_1`) and charged as such. ``"float"``: the floating-point sampler, open to
            the floating-point attacks of Mironov (2012); for benchmarks and audits only.
        secure_mode (bool, optional): draw every random bit from the operating system's CSPRNG
            (``None``: the process-wide default of :func:`pyg_private.mechanisms.set_secure_mode`).
        granularity (float, optional): the grid (a power of two); chosen per call from the
            sensitivity, the scale and the number of coordinates when ``None``. After a call,
            ``mechanism.granularity`` is the grid of that release.
        grid_tolerance (float): bound on the rounding's sensitivity inflation, relative to
            :math:`\Delta_1`, when the grid is chosen. (default: :math:`2^{-16}`)

    Every call is a new release and registers one event, with the sensitivity of the rounded
    query (:math:`\Delta_1 + d g` for :math:`d` coordinates) and the scale calibrated for it.
    """

    norm = "l1"
    noise_kind = "laplace"

    def __init__(self, sensitivity: float, *, scale: float | None = None, epsilon: float | None = None,
                 delta: float | None = None, unit: str | Unit = Unit.EDGE,
                 accountant: PrivacyAccountant | None = None, name: str = "laplace",
                 generator: torch.Generator | None = None, sampler: Sampler = "safe",
                 secure_mode: bool | None = None, granularity: float | None = None,
                 grid_tolerance: float = DEFAULT_GRID_TOLERANCE) -> None:
        super().__init__(sensitivity, unit=unit, accountant=accountant, name=name, generator=generator,
                         sampler=sampler, secure_mode=secure_mode, granularity=granularity,
                         grid_tolerance=grid_tolerance)
        if (scale is None) == (epsilon is None):
            raise ValueError("give exactly one of `scale` or `epsilon`")
        if scale is not None:
            if delta is not None:
                raise ValueError("`delta` is only used with `epsilon`")
            self._fixed_scale = check_positive(scale, "scale")
            self._target = None
        else:
            self._fixed_scale = None
            self._target = (check_epsilon(epsilon), None if delta is None else check_delta(delta))
        self.scale = self._noise_scale(self.sensitivity)

    def _noise_scale(self, sensitivity: float) -> float:
        if self._fixed_scale is not None:
            return self._fixed_scale
        epsilon, delta = self._target
        if delta is None:
            return sensitivity / epsilon
        curve = lambda b: laplace_rdp(DEFAULT_ORDERS, sensitivity=sensitivity, scale=b)  # noqa: E731
        return calibrate_noise(lambda b: rdp_to_dp(orders=DEFAULT_ORDERS, rdp=curve(b), delta=delta)[0], epsilon)

    @property
    def epsilon(self) -> float:
        """The pure epsilon of one release before the grid's inflation, :math:`\\Delta_1 / b`."""
        return self.sensitivity / self.scale

    def _event(self, sensitivity: float, scale: float, params: dict) -> PrivacyEvent:
        return laplace_event(unit=self.unit, sensitivity=sensitivity, scale=scale, name=self.name, params=params)

    def _float_noise(self, shape: torch.Size, device: torch.device) -> Tensor:
        return laplace_noise(shape, self.scale, device=device, generator=self.generator)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(sensitivity={self.sensitivity:g}, scale={self.scale:.6g}, "
                f"epsilon={self.epsilon:.4g}, unit={self.unit.value!r}, sampler={self.sampler!r})")


