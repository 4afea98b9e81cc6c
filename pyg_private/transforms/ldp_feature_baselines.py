r"""PrivGE's local-DP baselines as transforms: Laplace (LP), Piecewise (PM), Multi-bit (MB).

They share :class:`HDSFeaturePerturb`'s bookkeeping (public ``feature_range``, per-node
accounting on unit ``"local"``, marks and re-release guards, chunking) through
:class:`~pyg_private.transforms._local_feature_release.LocalFeatureRelease`; only the
randomizer differs (PrivGE, Li et al., CIKM 2024, Sec. 3.1, Eqs. 3-4;
:mod:`pyg_private.mechanisms.ldp_baselines`).
Unlike HDS, all three are **unbiased**: PM and MB rescale the sampled coordinates.

All three sample floating-point-safe laws by default (``sampler="safe"``,
:mod:`pyg_private.mechanisms.ldp_baselines`): LP releases the rounded input plus exactly sampled
rounded Laplace noise on a power-of-two grid (same event), PM an exactly sampled two-level law on a
grid, MB an exact mixture of two exact Bernoulli trials; in each the likelihood ratio bound of the
event holds exactly and no output is impossible under another input. ``granularity`` (after a
call) is the grid of the released values, after the rescaling of PM and MB (which rounds them onto
a grid :math:`2^{20}` times finer than their spacing unless the factor is a power of two).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data.datapipes import functional_transform

from ..accounting import PrivacyAccountant, PrivacyEvent, laplace_event
from ..accounting.mechanism_events import pure_dp_event
from ..mechanisms.ldp_baselines import (
    _laplace_ldp_grid,
    _multibit_grid,
    laplace_ldp_granularity,
    laplace_ldp_scale,
    multibit_default_k,
    multibit_scale,
    piecewise_default_k,
    piecewise_grid,
    piecewise_params,
    sample_laplace_ldp,
    sample_multibit,
    sample_piecewise,
)
from ..sampling.words import RandomSource
from ..mechanisms.square_wave import _check_coordinate_epsilon, rescale_on_grid, rescaled_granularity
from ._local_feature_release import FeatureRange, LocalFeatureRelease
from .hds_feature_perturb import _check_k

__all__ = ["LaplaceFeaturePerturb", "PiecewiseFeaturePerturb", "MultiBitFeaturePerturb"]

_COMMON_ARGS = r"""
    The shared arguments (``feature_range``, ``clamp``, ``attr``, ``node_mask``,
    ``allow_recompose``, ``chunk_size``, ``accountant``, ``generator``, ``name``, ``sampler``,
    ``secure_mode``) and the
    shared rules (the range is public and never computed from the data; values outside it
    raise unless ``clamp=True``; one call is one release, charged per node on unit
    ``"local"`` before any noise is drawn; marked data and raw inputs this instance already
    released are refused unless ``allow_recompose=True``; as a dataset's ``transform=`` it
    would re-draw at every access, so use ``pre_transform=``; a seeded ``generator`` voids
    the guarantee; the transform *simulates* the users' local randomizers; on a ``HeteroData``
    every node type with the features is perturbed, ``epsilon``, ``k``, ``feature_range``,
    ``node_mask`` and ``clamp`` may be dicts keyed by node type, one event per type) are those of
    :class:`HDSFeaturePerturb`.
"""


@functional_transform("laplace_feature_perturb")
class LaplaceFeaturePerturb(LocalFeatureRelease):
    r"""LP: every node adds Laplace noise of scale :math:`2d/\epsilon` to each of its
    :math:`d` normalised coordinates (functional name: :obj:`laplace_feature_perturb`).

    .. math::
        \tilde x_{v,j} = x_{v,j} + \mathrm{Lap}(2d/\epsilon), \qquad j = 1, \dots, d,

    with :math:`x_v \in [-1, 1]^d` after the public ``feature_range`` map
    (PrivGE Sec. 3.1). Replacing :math:`x_v` changes it by at most
    :math:`2d` in :math:`\ell_1`, so the row is :math:`\epsilon`-LDP; the event is the
    Laplace RDP curve of scale :math:`2d/\epsilon` and :math:`\ell_1` sensitivity
    :math:`2d` (pure :math:`\epsilon` at order :math:`\infty`). Unbiased, variance
    :math:`8d^2/\epsilon^2` per coordinate (Thm 3.4 bounds the propagated error). The
    output is dense (no ``sparse_output``). Safe sampler (default): the normalised input rounded
    to a multiple of :math:`g` in :math:`[-1, 1]` plus exactly sampled
    :math:`g\,\mathrm{round}(\mathrm{Lap}(2d/(\epsilon g)))`,
    :math:`g = 2^{\lfloor\log_2(2d/\epsilon)\rfloor - 40}` (clipped to :math:`[2^{-60}, 2^{-20}]`):
    post-processing of the Laplace mechanism on the rounded input, so the same event, and every
    value a multiple of :attr:`granularity` :math:`= g` (float32 output rounds to coarser floats,
    still multiples of it).
    """ + _COMMON_ARGS

    mechanism = "laplace"
    samples_coordinates = False

    def __init__(self, epsilon: float, feature_range: FeatureRange = None, *, clamp: bool = False,
                 attr: str = "x", node_mask: Any = None, allow_recompose: bool = False,
                 chunk_size: Optional[int] = None, accountant: Optional[PrivacyAccountant] = None,
                 generator: Optional[torch.Generator] = None, name: Optional[str] = None, sampler: str = "safe",
                 secure_mode: Optional[bool] = None) -> None:
        super().__init__(epsilon, feature_range=feature_range, clamp=clamp, attr=attr, node_mask=node_mask,
                         allow_recompose=allow_recompose, chunk_size=chunk_size, accountant=accountant,
                         generator=generator, name=name or "laplace-ldp", sampler=sampler, secure_mode=secure_mode)

    def _num_coordinates(self, d: int) -> int:
        return d

    def _output_granularity(self, d: int) -> float:
        return laplace_ldp_granularity(self.epsilon, d)

    def _sample(self, z: Tensor, d: int, source: Optional[RandomSource]) -> Tensor:
        if source is None:
            return sample_laplace_ldp(z, self.epsilon, generator=self.generator, sampler="float")
        return _laplace_ldp_grid(z, laplace_ldp_scale(self.epsilon, d), self._output_granularity(d), source)

    def _event(self, num_nodes: int, d: int, nodes: Optional[np.ndarray]) -> PrivacyEvent:
        return laplace_event(unit="local", sensitivity=2.0 * d, scale=laplace_ldp_scale(self.epsilon, d),
                             name=self.name,
                             params={"d": d, "feature_range": self._range_text(), **self._sampler_params(d)},
                             nodes=nodes, num_nodes=num_nodes)

    def _summary(self, d: int) -> dict[str, Any]:
        return {"k": d, "d": d, "unbiased": True, "scale": laplace_ldp_scale(self.epsilon, d)}

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self._base_repr()}{self._sampler_repr()})"


class _SampledBaseline(LocalFeatureRelease):
    """PM and MB: k sampled coordinates at epsilon/k, rescaled to be unbiased."""

    def __init__(self, epsilon: float, k: Optional[int] = None, feature_range: FeatureRange = None, *,
                 clamp: bool = False, attr: str = "x", node_mask: Any = None, sparse_output: bool = False,
                 allow_recompose: bool = False, chunk_size: Optional[int] = None,
                 accountant: Optional[PrivacyAccountant] = None, generator: Optional[torch.Generator] = None,
                 name: Optional[str] = None, sampler: str = "safe", secure_mode: Optional[bool] = None) -> None:
        super().__init__(epsilon, feature_range=feature_range, clamp=clamp, attr=attr, node_mask=node_mask,
                         sparse_output=sparse_output, allow_recompose=allow_recompose, chunk_size=chunk_size,
                         accountant=accountant, generator=generator, name=name, sampler=sampler,
                         secure_mode=secure_mode)
        self.k = None if k is None else _check_k(k)
        if self.k is not None:
            _check_coordinate_epsilon(self.epsilon / self.k, "epsilon / k")

    def _default_k(self, d: int) -> int:
        raise NotImplementedError

    def _num_coordinates(self, d: int) -> int:
        if self.k is None:
            k = self._default_k(d)
        elif self.k > d:
            raise ValueError(f"`k` = {self.k} exceeds the number of features d = {d}")
        else:
            k = self.k
        _check_coordinate_epsilon(self.epsilon / k, "epsilon / k")
        return k

    def _event(self, num_nodes: int, d: int, nodes: Optional[np.ndarray]) -> PrivacyEvent:
        k = self._num_coordinates(d)
        params = {"k": k, "d": d, "eps_per_coord": self.epsilon / k, "feature_range": self._range_text(),
                  **self._sampler_params(d)}
        return pure_dp_event(unit="local", epsilon=self.epsilon, compositions=k, name=self.name,
                             mechanism=self.mechanism, params=params, nodes=nodes, num_nodes=num_nodes)

    def _bound(self, d: int) -> float:
        raise NotImplementedError

    def _summary(self, d: int) -> dict[str, Any]:
        b = self._bound(d)
        return {"k": self._num_coordinates(d), "d": d, "unbiased": True, "output_range": (-b, b)}

    def __repr__(self) -> str:
        k = "k=auto" if self.k is None else f"k={self.k}"
        return f"{self.__class__.__name__}({self._base_repr(k)}{self._sampler_repr()})"


@functional_transform("piecewise_feature_perturb")
class PiecewiseFeaturePerturb(_SampledBaseline):
    r"""PM: the piecewise mechanism (Wang et al., ICDE 2019) on :math:`k` sampled
    coordinates per node (functional name: :obj:`piecewise_feature_perturb`).

    Each node samples :math:`k` of its :math:`d` normalised coordinates without
    replacement and perturbs each at :math:`\epsilon' = \epsilon/k`: with
    :math:`s = (e^{\epsilon'/2}+1)/(e^{\epsilon'/2}-1)`, the output density on
    :math:`[-s, s]` is :math:`p = (e^{\epsilon'} - e^{\epsilon'/2})/(2e^{\epsilon'/2}+2)` on
    :math:`[\ell(x), r(x)]` and :math:`p/e^{\epsilon'}` elsewhere (PrivGE Eq. 3). Sampled values
    are multiplied by :math:`d/k`, the others are 0, so :math:`\mathbb E[\tilde x] = x` and

    .. math::
        \mathrm{Var} = \frac{d(e^{\epsilon/2k}+3)}{3k(e^{\epsilon/2k}-1)^2}
            + \Big[\frac{d e^{\epsilon/2k}}{k(e^{\epsilon/2k}-1)} - 1\Big]x^2.

    :math:`\epsilon`-LDP per node (:math:`k` parts of :math:`\epsilon/k`). ``k=None`` uses
    :math:`\max(1, \min(d, \lfloor\epsilon/2.5\rfloor))`, as the reference code does. Safe
    sampler (default): the exactly sampled grid law of
    :func:`~pyg_private.mechanisms.ldp_baselines.piecewise_grid` (window and far probabilities in
    the ratio :math:`E < e^{\epsilon/k}` exactly, the same support for every input), unbiased up
    to the rounding of the window's position (at most half a grid step); the moments are
    :func:`~pyg_private.mechanisms.ldp_baselines.piecewise_moments`'s.
    """ + _COMMON_ARGS

    mechanism = "piecewise"

    def __init__(self, epsilon: float, k: Optional[int] = None, feature_range: FeatureRange = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("name", "piecewise-ldp")
        super().__init__(epsilon, k, feature_range, **kwargs)

    def _default_k(self, d: int) -> int:
        return piecewise_default_k(self.epsilon, d)

    def _grid(self, d: int):
        return piecewise_grid(self.epsilon, self._num_coordinates(d))

    def _output_granularity(self, d: int) -> float:
        k = self._num_coordinates(d)
        return rescaled_granularity(self._grid(d).granularity, d / k)

    def _sample(self, z: Tensor, d: int, source: Optional[RandomSource]) -> Tensor:
        k = self._num_coordinates(d)
        if source is None:
            return sample_piecewise(z, self.epsilon / k, generator=self.generator, sampler="float").mul_(d / k)
        grid = self._grid(d)
        return rescale_on_grid(grid.sample(z, source), d / k, grid.granularity)[0]

    def _bound(self, d: int) -> float:
        k = self._num_coordinates(d)
        if self.sampler == "safe":  # the grid's largest output (within g/2 of s), rescaled and rounded
            grid = self._grid(d)
            high = torch.tensor([grid.high], dtype=torch.float64)
            return float(rescale_on_grid(high, d / k, grid.granularity)[0][0])
        return piecewise_params(self.epsilon / k).s * d / k


@functional_transform("multibit_feature_perturb")
class MultiBitFeaturePerturb(_SampledBaseline):
    r"""MB: LPGNN's multi-bit mechanism (Sajadmanesh & Gatica-Perez, CCS 2021) on
    :math:`k` sampled coordinates per node (functional name: :obj:`multibit_feature_perturb`).

    Each node samples :math:`k` of its :math:`d` normalised coordinates without
    replacement and reports, for each, :math:`\pm 1` with

    .. math::
        \Pr[+1] = \frac{1}{e^{\epsilon/k}+1} + \frac{x+1}{2}\cdot\frac{e^{\epsilon/k}-1}{e^{\epsilon/k}+1},

    rescaled by :math:`d(e^{\epsilon/k}+1)/(k(e^{\epsilon/k}-1))`; the others are 0
    (PrivGE Eq. 4 and Sec. 3.1). Unbiased,
    :math:`\mathrm{Var} = (d/k)((e^{\epsilon/k}+1)/(e^{\epsilon/k}-1))^2 - x^2`;
    :math:`\epsilon`-LDP per node. ``k=None`` uses
    :math:`\max(1, \min(d, \lfloor\epsilon/2.18\rfloor))`, as the reference code does. Only
    the mechanism is reproduced (no KProp, no label perturbation). Safe sampler (default):
    :math:`\Pr[+1]` is realised exactly, as a mixture with the dyadic weight :math:`(x+1)/2` (the
    input rounded to :math:`2^{-60}`) of two exact Bernoulli trials of probabilities
    :math:`E/(E+1)` and :math:`1/(E+1)`, :math:`E < e^{\epsilon/k}`; the rescaled :math:`\pm`
    factor is rounded onto the grid :attr:`granularity`.
    """ + _COMMON_ARGS

    mechanism = "multi-bit"

    def __init__(self, epsilon: float, k: Optional[int] = None, feature_range: FeatureRange = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("name", "multi-bit-ldp")
        super().__init__(epsilon, k, feature_range, **kwargs)

    def _default_k(self, d: int) -> int:
        return multibit_default_k(self.epsilon, d)

    def _output_granularity(self, d: int) -> float:
        k = self._num_coordinates(d)
        return rescaled_granularity(1.0, multibit_scale(self.epsilon, k, d))

    def _sample(self, z: Tensor, d: int, source: Optional[RandomSource]) -> Tensor:
        k = self._num_coordinates(d)
        if source is None:
            return sample_multibit(z, self.epsilon / k, generator=self.generator,
                                   sampler="float").mul_(multibit_scale(self.epsilon, k, d))
        return rescale_on_grid(_multibit_grid(z, self.epsilon, k, source), multibit_scale(self.epsilon, k, d), 1.0)[0]

    def _bound(self, d: int) -> float:
        k = self._num_coordinates(d)
        c = multibit_scale(self.epsilon, k, d)
        if self.sampler == "safe":  # the rescaled +-1, rounded onto the output grid
            return float(rescale_on_grid(torch.ones(1, dtype=torch.float64), c, 1.0)[0][0])
        return c
