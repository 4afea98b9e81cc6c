r"""DP-PushFlowCap: capped push-flow PPR with Laplace output noise (Epasto et al., NeurIPS 2022)."""
from __future__ import annotations

from fractions import Fraction
from typing import Any, NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.typing import Adj

from ..accounting import DEFAULT_ORDERS, PrivacyAccountant, PrivacyEvent, rdp_event
from ..accounting.push_flow import push_flow_noise_scale, push_flow_rdp, push_flow_sensitivity
from ..accounting.validation import check_positive, check_positive_int, check_restart_probability
from ..mechanisms._noise import float_generator, laplace_noise
from ..sampling import RoundedNoiseSampler
from ..sampling.grid import (
    DEFAULT_GRID_TOLERANCE,
    check_granularity,
    choose_granularity,
    from_grid,
    round_to_grid,
    validate_granularity,
)
from ..sampling.words import RandomSource, resolve_secure_mode
from ..mechanisms.sampler_options import check_grid_tolerance, check_sampler_options
from ..utils.push_flow import push_flow_cap_ppr
from ._ppr_release import SeededRelease, inflated_scale, resolve_noise

__all__ = ["DPPushFlowCap", "PushFlowGrid"]


class PushFlowGrid(NamedTuple):
    """The grid of one safe DP-PushFlowCap release (see :meth:`DPPushFlowCap.plan_grid`)."""

    #: The power-of-two grid step :math:`g`.
    granularity: float
    #: The Laplace scale :math:`b' \ge b\,\Delta_1'/\Delta_1` actually used.
    noise_scale: float
    #: :math:`\Delta_1' = \Delta_1 + N g`, the sensitivity of the rounded column.
    sensitivity: float
    #: The number of coordinates per column :math:`N`.
    num_nodes: int


class DPPushFlowCap(SeededRelease, torch.nn.Module):
    r"""Edge-private personalized PageRank by output perturbation, the DP-PushFlowCap
    baseline of `"Differentially Private Graph Learning via Sensitivity-Bounded
    Personalized PageRank" <https://arxiv.org/abs/2207.06944>`_ (Epasto et al.,
    NeurIPS 2022), as compared against in Wei, Chien and Li (NeurIPS 2024, §4).

    The capped push-flow estimate :math:`\mathbf{p}` of lazy PPR
    (:func:`pyg_private.utils.push_flow_cap_ppr`: every node :math:`v` pushes a total
    flow of at most :math:`\eta\,d_v`) has :math:`\ell_1` edge sensitivity
    :math:`\Delta_1 = (3 - \alpha)(1 - (1-\alpha)^T)\,\eta` (their Theorem 4.3), so

    .. math::
        \tilde{\mathbf{p}} = \mathrm{clip}_{[0, 1]}\big(\mathbf{p} + \mathrm{Lap}(0, b)^{N}\big)

    is released, the clip being post-processing. One forward of :math:`C` seed columns
    registers one event on unit ``"edge"`` whose RDP curve is :math:`C\,g_\alpha(b,
    \Delta_1)`; with ``personalized=True`` the seed is uncapped, the bound covers only
    edges not incident to the seed, and the charge is per recipient (the most columns
    one seed receives), with the same validity conditions as
    :class:`~pyg_private.nn.NoisyPPRDiffusion`.

    **Floating-point safety.** With ``sampler="safe"`` (the default) the release lies on a
    power-of-two grid :math:`g` (``layer.granularity`` after a forward):
    :math:`g\,(\mathrm{round}(\mathbf{p}/g) + \mathbf{K})` with :math:`\mathbf{K}` the Laplace noise
    rounded to the grid and sampled exactly from integers (see :mod:`pyg_private.sampling.grid`), then
    clipped (post-processing; 0 and 1 are on the grid). It is the Laplace mechanism run on the rounded
    column and rounded again, whose :math:`\ell_1` sensitivity is at most :math:`\Delta_1' = \Delta_1 +
    Ng` (:math:`N` coordinates per column, each moved by at most :math:`g/2` on either graph). The
    Laplace curve depends on :math:`\Delta_1/b` only, so the scale is raised to :math:`b' \ge
    b\Delta_1'/\Delta_1` (checked in rational arithmetic) and the event's curve is **the same** as
    the float sampler's; :math:`g` is the coarsest power of two with :math:`Ng \le` ``grid_tolerance``
    :math:`\cdot\Delta_1` (default :math:`2^{-16}`) that keeps :math:`b'/g` within
    :math:`[2^{20}, 2^{46}]` steps, chosen per forward from public quantities and recorded in the
    event's params. ``sampler="float"`` keeps the floating-point Laplace sampler (open to
    floating-point attacks); ``secure_mode=True`` draws every random bit from the operating system's
    CSPRNG. The bound is that of the exact push-flow output; the float64 rounding of its
    computation is not accounted.

    Give ``noise_scale`` (Laplace scale :math:`b`) or ``epsilon`` with ``delta``
    (calibrated on the RDP curve at ``delta``, as the paper converts this baseline;
    ``delta=0`` gives the pure :math:`b = \Delta_1/\epsilon`). The target is per
    ``epsilon_columns`` columns (default one).

    Caching (``cached=True`` by default), ``state_dict`` persistence of the release and the module
    protocols (``deepcopy``, ``pickle``, ``torch.compile``; no ``torch.jit.script``) are those of
    :class:`~pyg_private.nn.NoisyPPRDiffusion`.

    Args:
        alpha (float): restart probability in :math:`(0, 1)`. (default: :obj:`0.2`)
        num_iterations (int): push iterations :math:`T`. (default: :obj:`100`)
        eta (float): flow cap per unit degree :math:`\eta > 0`. (default: :obj:`1e-6`)
        noise_scale, epsilon, delta, personalized, epsilon_columns, accountant, cached,
        symmetrize, orders, generator, name: as in :class:`~pyg_private.nn.NoisyPPRDiffusion`.
        clip_output (bool): clip the release to :math:`[0, 1]`. (default: :obj:`True`)
        sampler, secure_mode, granularity, grid_tolerance: the safe release, as in
            :class:`~pyg_private.nn.NoisyPPRDiffusion` (the granularity no coarser than
            :math:`\Delta_1/N`; the tolerance bounds :math:`Ng/\Delta_1`).

    Shapes:
        - **input:** ``seed_index`` :math:`(C,)`, ``num_nodes`` :math:`|\mathcal{V}|`;
          ``edge_index`` :math:`(2, |\mathcal{E}|)`, ``SparseTensor`` or ``torch.sparse``
          adjacency
        - **output:** :math:`(|\mathcal{V}|, C)`
    """

    def __init__(self, alpha: float = 0.2, num_iterations: int = 100, eta: float = 1e-6, *,
                 noise_scale: Optional[float] = None, epsilon: Optional[float] = None,
                 delta: Optional[float] = None, personalized: bool = False, epsilon_columns: int = 1,
                 clip_output: bool = True, accountant: Optional[PrivacyAccountant] = None, cached: bool = True,
                 symmetrize: bool = False, orders: Sequence[float] = DEFAULT_ORDERS,
                 generator: Optional[torch.Generator] = None, name: str = "dp_push_flow_cap",
                 sampler: str = "safe", secure_mode: Optional[bool] = None, granularity: Optional[float] = None,
                 grid_tolerance: float = DEFAULT_GRID_TOLERANCE) -> None:
        super().__init__()
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, generator, granularity=granularity)
        self.grid_tolerance = check_grid_tolerance(grid_tolerance)
        self._granularity = None if granularity is None else check_granularity(granularity)
        #: The grid of the last release (``None`` before it and with the float sampler).
        self.granularity: Optional[float] = None
        self.alpha = check_restart_probability(alpha)
        self.num_iterations = check_positive_int(num_iterations, "num_iterations")
        self.eta = check_positive(eta, "eta")
        self.personalized = bool(personalized)
        self.epsilon_columns = check_positive_int(epsilon_columns, "epsilon_columns")
        self.orders = tuple(orders)
        self.sensitivity = push_flow_sensitivity(eta=self.eta, alpha=self.alpha, num_iterations=self.num_iterations)
        self.noise_scale, self.epsilon, self.delta = resolve_noise(
            noise_scale, epsilon, delta,
            lambda eps, d: push_flow_noise_scale(epsilon=eps, delta=d, eta=self.eta, alpha=self.alpha,
                                                 num_iterations=self.num_iterations,
                                                 num_columns=self.epsilon_columns, orders=self.orders),
            allow_pure=True,
        )
        self.clip_output = bool(clip_output)
        self.accountant = accountant
        self.cached = cached
        self.symmetrize = symmetrize
        self.generator = generator
        self.name = name
        self._cache = None

    def event(self, num_columns: int, grid: Optional[PushFlowGrid] = None) -> PrivacyEvent:
        """The event of a release of ``num_columns`` columns (to one party, or per recipient);
        ``grid``: the safe release's grid (:meth:`plan_grid`), recorded in the params. The curve is
        the same with or without it (the scale absorbs the rounding, see the class notes)."""
        c = check_positive_int(num_columns, "num_columns")
        rdp = push_flow_rdp(self.orders, noise_scale=self.noise_scale, eta=self.eta, alpha=self.alpha,
                            num_iterations=self.num_iterations, num_columns=c)
        params = {"alpha": self.alpha, "num_iterations": self.num_iterations, "eta": self.eta,
                  "sensitivity": self.sensitivity, "noise_scale": self.noise_scale, "columns": c,
                  "personalized": self.personalized, "sampler": self.sampler}
        if grid is not None:
            params.update(granularity=grid.granularity, grid_noise_scale=grid.noise_scale,
                          grid_sensitivity=grid.sensitivity, dim=grid.num_nodes)
        return rdp_event(
            unit="edge", orders=self.orders, rdp=rdp, name=self.name,
            mechanism="dp_push_flow_cap_personalized" if self.personalized else "dp_push_flow_cap",
            params=params,
        )

    def plan_grid(self, num_nodes: int) -> PushFlowGrid:
        r"""The grid of a safe release of columns of ``num_nodes`` coordinates (public quantities
        only; raises before anything is charged): :math:`g`, :math:`b' \ge b\Delta_1'/\Delta_1`
        and :math:`\Delta_1' = \Delta_1 + Ng` (see the class notes). The push-flow values lie in
        :math:`[0, 1]`, which the grid must hold within :math:`2^{60}` steps."""
        n = check_positive_int(num_nodes, "num_nodes")
        if self._granularity is None:
            g = choose_granularity(scale=self.noise_scale, sensitivity=self.sensitivity, dim=n, norm="l1",
                                   tolerance=self.grid_tolerance)
        else:
            g = validate_granularity(self._granularity, scale=self.noise_scale, sensitivity=self.sensitivity,
                                     dim=n, norm="l1")
        if 1.0 / g > 2.0 ** 60:
            raise ValueError(f"the noise scale {self.noise_scale:g} is too small for a grid release (the grid {g:g} "
                             "would need more than 2^60 steps for the values in [0, 1]); a noise scale this small "
                             "protects almost nothing: use a larger `noise_scale` (or a smaller `epsilon`)")
        factor = 1 + n * Fraction(g) / Fraction(self.sensitivity)  # Delta' / Delta, exactly
        return PushFlowGrid(g, inflated_scale(self.noise_scale, factor), inflated_scale(self.sensitivity, factor), n)

    @torch.compiler.disable  # the release runs eagerly: see "Module protocols"
    def forward(self, x: None = None, edge_index: Optional[Adj] = None, seed_index: Optional[Tensor] = None,
                num_nodes: Optional[int] = None) -> Tensor:
        """Release the noisy push-flow PPR columns of the seeds ``[N, C]`` (computed in
        float64, returned in the default dtype like :class:`NoisyPPRDiffusion`).

        ``x`` exists for a signature shared with :class:`NoisyPPRDiffusion`; the
        sensitivity bound is for one-hot seeds, so it must be ``None``.

        Args:
            edge_index: the private graph (``edge_index``, ``SparseTensor`` or
                ``torch.sparse`` adjacency).
            seed_index (Tensor): public seeds ``[C]`` in ``[0, N)``.
            num_nodes (int, optional): the public node count :math:`N`, required with an
                ``edge_index`` (a sparse adjacency's declared size may stand in for it). It
                is never inferred from the largest id in ``edge_index``: neighbouring graphs
                share their nodes, and a count read off the private edges would change the
                output's shape when an edge at the last node is added or removed.
        """
        ei, n, s0, seeds = self._seeds_only(x, edge_index, seed_index, num_nodes)
        cached = self._from_cache(ei, s0)
        if cached is not None:
            return cached.to(torch.get_default_dtype())
        grid, source, sampler = None, None, None
        if self.sampler == "safe":  # plan the grid: raises before any charge
            grid = self.plan_grid(n)
            source = RandomSource(s0.device, generator=self.generator,
                                  secure=resolve_secure_mode(self.secure_mode, self.generator))
            sampler = RoundedNoiseSampler("laplace", grid.noise_scale / grid.granularity)
        # everything that may fail (the noise-free push-flow, the buffers, the sampler's workspace) before the charge
        p = push_flow_cap_ppr(ei, n, seeds, alpha=self.alpha, num_iterations=self.num_iterations, eta=self.eta,
                              personalized=self.personalized)
        if grid is None:
            generator = float_generator(self.generator, p.device)  # never torch's global generator
        else:
            steps = round_to_grid(p, grid.granularity)
            noise = torch.empty(steps.numel(), dtype=torch.int64, device=steps.device)
            sampler.reserve(steps.numel(), steps.device)
        event = self._charge(seeds, s0.size(1), grid=grid)  # before any noise is drawn
        self.granularity = None if grid is None else grid.granularity
        if grid is None:
            out = p.add_(laplace_noise(p.shape, self.noise_scale, device=p.device, generator=generator))
        else:  # g (round(p / g) + K), K the rounded Laplace in grid steps, exact
            steps.view(-1).add_(sampler.sample(steps.numel(), source, out=noise))
            out = from_grid(steps, grid.granularity)
        if self.clip_output:
            out.clamp_(0.0, 1.0)
        self._remember(ei, s0, out, event)
        return out.to(torch.get_default_dtype())

    def __repr__(self) -> str:
        target = "" if self.epsilon is None else f", epsilon={self.epsilon:g}, delta={self.delta:g}"
        return (f"{self.__class__.__name__}(alpha={self.alpha:g}, num_iterations={self.num_iterations}, "
                f"eta={self.eta:g}, noise_scale={self.noise_scale:.6g}{target}, personalized={self.personalized}, "
                f"unit={self._release_unit!r}, sampler={self.sampler!r}, cached={self.cached})")

    def _release_settings(self) -> dict[str, Any]:
        """The settings a cached release is valid for (a saved one loads only into equal settings)."""
        return {"alpha": self.alpha, "num_iterations": self.num_iterations, "eta": self.eta,
                "noise_scale": self.noise_scale, "epsilon": self.epsilon, "delta": self.delta,
                "personalized": self.personalized, "epsilon_columns": self.epsilon_columns,
                "clip_output": self.clip_output, "sampler": self.sampler, "granularity": self._granularity,
                "grid_tolerance": self.grid_tolerance}
