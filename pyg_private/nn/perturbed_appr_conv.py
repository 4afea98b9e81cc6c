r"""GCON: an APPR propagation and a linear head trained by objective perturbation."""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.typing import Adj

from ..accounting import PrivacyAccountant, approximate_dp_event, charge, objective_perturbation_event
from ..accounting.approximate_minimizer import chained_guarantee, chained_profile, split_budget
from ..accounting.objective_perturbation import (
    ObjectivePerturbationCalibration,
    appr_sensitivity,
    calibrate_objective_perturbation,
    loss_constants,
    objective_perturbation_profile,
)
from ..accounting.validation import check_delta, check_epsilon, check_non_negative
from ..mechanisms.coupled_objective_noise import sample_coupled_objective_noise
from ..sampling import RoundedNoiseSampler
from ..sampling.grid import DEFAULT_GRID_TOLERANCE
from ..mechanisms.objective_noise import sample_objective_noise
from ..sampling.words import RandomSource, resolve_secure_mode
from ..mechanisms.sampler_options import Sampler, check_grid_tolerance, check_sampler_options
from ..utils.appr import appr_propagate
from ..utils.newton_solver import gradient_norm_bound, solve_separable_ridge
from ..utils.separable_loss import SeparableLoss
from ._call_checks import reject_bipartite, reject_edge_weight
from ._safe_objective_release import (
    SafeFitPlan,
    certified_distance_ok,
    plan_safe_fit,
    propagation_error_bound,
    release_on_grid,
)
from ._sparse_propagation import SparsePropagation

__all__ = ["PerturbedAPPRConv", "GCONFit"]

Steps = Union[int, float, Sequence[Union[int, float]]]


_DIAGNOSTICS = ("grad_norm", "iterations", "converged")


@dataclass
class GCONFit:
    """What one private fit did (the noise ``B`` and its seed are not kept).

    ``calibration`` (Theorem 1's public quantities) and ``num_rows`` (the size of the public
    training mask) are public. ``grad_norm``, ``iterations`` and ``converged`` are solver
    diagnostics computed from the private objective: they are **not** covered by the guarantee
    (each is a function of the private graph without noise).

    **What a copy holds.** The diagnostics exist only on the object :meth:`PerturbedAPPRConv.fit`
    returned, for a local check right after the fit. ``pickle``, ``torch.save`` and
    ``copy.deepcopy`` of a fit (alone, in a :class:`~pyg_private.models.GCONResult`, or as the
    layer's ``last_fit``) keep the public fields and set the three diagnostics to ``None``, so a
    saved model or result never carries them (the released quantity is the weight alone).
    """

    calibration: ObjectivePerturbationCalibration
    grad_norm: Optional[float]
    iterations: Optional[int]
    converged: Optional[bool]
    num_rows: int

    def __getstate__(self) -> dict[str, Any]:  # pickle, torch.save and deepcopy: the public fields only
        state = self.__dict__.copy()
        state.update(dict.fromkeys(_DIAGNOSTICS))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class PerturbedAPPRConv(SparsePropagation):
    r"""Edge-private GCN by objective perturbation (GCON), from `"GCON: Differentially Private
    Graph Convolutional Network via Objective Perturbation"
    <https://arxiv.org/abs/2407.05034>`_ (Wei et al.), Algorithm 1.

    **Propagation** (Eqs. 9-11): with :math:`\tilde{\mathbf{A}} = \mathbf{D}^{-1}(\mathbf{A}+\mathbf{I})`
    (row-stochastic, self-loops; not PyG's symmetric ``gcn_norm``),

    .. math::
        \mathbf{R}_m = \alpha\sum_{i=0}^{m-1}(1-\alpha)^i\tilde{\mathbf{A}}^i + (1-\alpha)^m\tilde{\mathbf{A}}^m,
        \qquad \mathbf{R}_\infty = \alpha\big(\mathbf{I} - (1-\alpha)\tilde{\mathbf{A}}\big)^{-1},
        \qquad \mathbf{Z} = \tfrac1s\big[\mathbf{R}_{m_1}\mathbf{X} \,\|\, \cdots \,\|\, \mathbf{R}_{m_s}\mathbf{X}\big],

    deterministic and cached; input rows must lie in the unit ball (:class:`~pyg_private.transforms.L2RowNormalize`).
    Its edge sensitivity :math:`\Psi(\mathbf{Z})` (Lemma 2) is ``layer.sensitivity``.

    **Head** (Eqs. 13-15): a bias-free :math:`\Theta \in \mathbb{R}^{d\times c}` minimising

    .. math::
        \frac1{n_1}\sum_{i}\sum_j \ell(\mathbf{z}_i^\top\theta_j; y_{ij})
        + \frac{\Lambda + \Lambda'}{2}\lVert\Theta\rVert_F^2 + \frac1{n_1}\langle \mathbf{B}, \Theta\rangle,

    with :math:`\Lambda` raised and :math:`\Lambda'` added as Theorem 1 (Eqs. 17-24) requires,
    and :math:`\mathbf{B}` drawn once per :meth:`fit` (per column: Gamma(:math:`d`, :math:`\beta`)
    radius, uniform direction). :meth:`fit` is one :math:`(\epsilon, \delta)` release on unit
    ``"edge"``, registered before ``B`` is drawn; the strongly convex problem is solved by
    damped Newton in float64 to gradient norm ``tol``. ``B`` and its seed are not stored.

    **Floating-point safety** (``sampler="safe"``, the default). Theorem 1 is about the exact
    minimiser for a continuously distributed ``B``; neither exists in floating point. The safe fit
    releases an *approximate* minimiser through Gaussian noise that covers its distance to the
    exact one (the approximate-minima perturbation of Iyengar et al., IEEE S&P 2019, Theorem 1):
    ``B`` is drawn from exact integer samplers coupled with the continuous law (its distance to it
    bounded), the propagation's float64 error is bounded, the solver's gradient is certified by a
    rounding-error analysis, and strong convexity turns the three into a public radius
    :math:`r \ge \|\hat\Theta - \Theta^*\|_F`. The head is then released as
    :math:`g(\mathrm{round}(\hat\Theta/g) + K)` with exact rounded Gaussian :math:`K`
    (``granularity`` :math:`g`, a power of two). The target :math:`(\epsilon, \delta)` is split:
    :math:`\epsilon/128` twice and :math:`\delta e^{-\epsilon}/128` twice go to the closeness of the
    released head to the exact mechanism, the rest to Theorem 1's calibration, so the event
    charged is at most the target (see :mod:`pyg_private.accounting.approximate_minimizer`). The
    added noise is tiny (its std is about :math:`10^3 r`, with :math:`r` of the order of
    ``tol``/:math:`\Lambda`); its cost is the slightly smaller :math:`\epsilon` Theorem 1 gets.
    When the solver cannot certify its gradient within the public target after refinement, :meth:`fit`
    raises ``RuntimeError`` after the charge and releases nothing. ``sampler="float"`` keeps the
    floating-point sampler and releases :math:`\hat\Theta` as it is (open to floating-point attacks;
    benchmarks and audits only).

    **Inference** (:meth:`forward`): ``mode="public"`` propagates fully (a public graph);
    ``mode="private"`` uses one hop :math:`(1-\alpha_I)\tilde{\mathbf{A}} + \alpha_I\mathbf{I}` per
    block (Eq. 16): each node's prediction then uses only its own edges. That argument is
    **outside formal DP**: releasing many nodes' predictions to one party leaks their
    edges; it holds only when each node sees its own prediction alone.

    **Saving and copying.** ``state_dict()`` holds the released head ``weight`` alone. ``pickle`` and
    ``torch.save(layer)`` keep the head, the settings and ``last_fit`` without its solver diagnostics
    (see :class:`GCONFit`), never the cached propagation: it holds the features, the private graph and
    the noise-free :math:`\mathbf{Z}`, and a reloaded layer recomputes it when ``mode="public"`` needs
    it (deterministic, no charge). ``copy.deepcopy`` (the ``best = copy.deepcopy(model)`` pattern in one
    process) shares the accountant and *shares* the cached propagation with the original instead of
    duplicating it; a pickle of the copy drops it likewise.

    **Heterogeneous graphs.** A relation within one node type is a square graph like any other; a
    bipartite relation (``x = (x_src, x_dst)``, or a non-square ``EdgeIndex`` or sparse adjacency)
    is refused with the reason before anything is charged: the APPR propagation and its sensitivity
    (Theorem 1) are for one square adjacency iterated on one node set.

    Args:
        in_channels (int): width :math:`d_1` of the (encoded, unit-ball) features.
        out_channels (int): number of classes :math:`c`.
        alpha (float): restart probability :math:`\alpha \in (0, 1]`.
        steps (int | inf | sequence): :math:`m` or :math:`(m_1, \dots, m_s)`; ``math.inf`` is PPR.
        epsilon, delta (float): the fit's budget; :math:`0 < \delta < 1` (objective
            perturbation cannot give pure DP).
        regularization (float): :math:`\Lambda` before raising. (default: :obj:`0.2`)
        loss (str): ``"soft_margin"`` or ``"pseudo_huber"`` (with ``huber_delta``).
        omega (float): budget split :math:`\omega`. (default: :obj:`0.9`)
        alpha_inference (float, optional): :math:`\alpha_I` (default :math:`\alpha`).
        tol (float): solver tolerance on the gradient norm; propagation tolerance for ``inf``.
        cached (bool): keep the propagation for the same graph and features. (default: :obj:`True`)
        accountant (PrivacyAccountant, optional): charged at every fit.
        symmetrize (bool): symmetrise a directed ``edge_index`` (adding reverse edges, dropping
            self-loops and duplicates) instead of raising. (default: :obj:`False`)
        sampler (str): ``"safe"`` or ``"float"`` (see above). (default: ``"safe"``)
        secure_mode (bool, optional): every random bit from a CSPRNG keyed from the OS (``None``: the
            process-wide default of :func:`pyg_private.mechanisms.set_secure_mode`).
        granularity (float, optional): the head's output grid (a power of two); chosen from public
            quantities when ``None``. After a safe fit, ``layer.granularity`` holds the grid used.
        grid_tolerance (float): the grid's relative inflation of the closeness radius.
            (default: ``2**-16``)

    ``alpha``, ``epsilon`` and ``delta`` are required keywords: ``PerturbedAPPRConv(1433, 7)`` raises a
    ``TypeError`` that says what the layer is and what to write.
    """

    def __init__(self, in_channels: int, out_channels: int, *, alpha: Optional[float] = None, steps: Steps = 2,
                 epsilon: Optional[float] = None, delta: Optional[float] = None, regularization: float = 0.2,
                 loss: Literal["soft_margin", "pseudo_huber"] = "soft_margin", huber_delta: Optional[float] = None,
                 omega: float = 0.9, alpha_inference: Optional[float] = None, tol: float = 1e-10,
                 cached: bool = True, accountant: Optional[PrivacyAccountant] = None,
                 name: str = "perturbed_appr_conv", symmetrize: bool = False, sampler: Sampler = "safe",
                 secure_mode: Optional[bool] = None, granularity: Optional[float] = None,
                 grid_tolerance: float = DEFAULT_GRID_TOLERANCE) -> None:
        missing = [k for k, v in (("alpha", alpha), ("epsilon", epsilon), ("delta", delta)) if v is None]
        if missing:
            raise TypeError(
                "PerturbedAPPRConv is GCON's whole private model, not a GCNConv: a fixed APPR propagation of "
                "the features followed by a linear head that `fit` trains once by objective perturbation (one "
                f"charged release). It needs the keyword arguments {', '.join(missing)}: the restart probability "
                "`alpha` and the privacy target `epsilon`, `delta`; for example "
                f"PerturbedAPPRConv({in_channels}, {out_channels}, alpha=0.4, epsilon=1.0, delta=1 / num_edges), "
                "then conv.fit(x, edge_index, y, train_mask) and conv(x, edge_index)")
        super().__init__()
        if not (isinstance(in_channels, int) and in_channels > 0 and isinstance(out_channels, int) and out_channels > 1):
            raise ValueError("`in_channels` must be a positive int and `out_channels` (classes) an int >= 2")
        if not 0 < alpha <= 1:
            raise ValueError(f"`alpha` must lie in (0, 1]; got {alpha!r}")
        self.in_channels, self.out_channels, self.alpha = in_channels, out_channels, float(alpha)
        self.steps = tuple(steps) if isinstance(steps, (list, tuple)) else (steps,)
        self.sensitivity = appr_sensitivity(self.alpha, list(self.steps))  # validates the steps
        self.epsilon = check_epsilon(epsilon)
        if delta is None or delta == 0:
            raise ValueError("objective perturbation needs delta > 0 (its tail bound, Lemma 9, spends delta)")
        self.delta = check_delta(delta)
        self.regularization = check_non_negative(regularization, "regularization")
        self.loss = SeparableLoss(loss, out_channels, huber_delta)
        self.constants = loss_constants(loss, out_channels, huber_delta)
        self.omega = float(omega)
        self.alpha_inference = self.alpha if alpha_inference is None else float(alpha_inference)
        if not 0 < self.alpha_inference <= 1:
            raise ValueError(f"`alpha_inference` must lie in (0, 1]; got {alpha_inference!r}")
        self.tol, self.cached, self.accountant, self.name = tol, cached, accountant, name
        self.symmetrize = bool(symmetrize)
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, None, granularity=granularity)
        self.grid_tolerance = check_grid_tolerance(grid_tolerance)
        self._granularity_arg = granularity
        #: The grid of the released head after a safe fit (``None`` before, or with the float sampler).
        self.granularity: Optional[float] = None
        self.register_buffer("weight", None)  # Theta_priv [d, c], float64: the released model (in state_dict)
        self.last_fit: Optional[GCONFit] = None

    @property
    def out_features(self) -> int:
        """Width :math:`d = s\\,d_1` of :math:`\\mathbf{Z}`."""
        return len(self.steps) * self.in_channels

    def reset_parameters(self) -> None:
        """Drop the cached (noise-free, recomputable) propagation. The released head ``weight`` is kept:
        it is paid data, not a parameter to re-initialise (``torch_geometric.nn.inits.reset(model)``
        between runs costs nothing); a new :meth:`fit` replaces it (and is charged). See
        :meth:`forget_release`."""
        super().reset_parameters()
        self._cache = None

    def forget_release(self) -> None:
        """Drop the released head, its fit record and the cached propagation: :meth:`forward` then
        needs a new (charged) :meth:`fit`."""
        self._cache = None
        self.weight, self.last_fit, self.granularity = None, None, None

    @property
    def has_release(self) -> bool:
        """Whether a released head is held."""
        return self.weight is not None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # type: ignore[override]
        # an unfitted layer has no weight buffer yet: make room for a head of this layer's shape, so
        # that torch reports a head of another shape as a size mismatch instead of adopting it
        if self.weight is None and prefix + "weight" in state_dict:
            self.weight = torch.empty(self.out_features, self.out_channels, dtype=torch.float64)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def propagation(self, x: Tensor, edge_index: Adj) -> Tensor:
        """:math:`\\mathbf{Z}` (Eq. 11), deterministic; cached with ``cached=True``."""
        reject_bipartite("PerturbedAPPRConv", x, edge_index)
        x_ball = _check_ball(x, self.in_channels)
        if self.cached and self._cache is not None:
            c_x, c_graph, c_z = self._cache
            same_graph = c_graph is edge_index or (
                isinstance(c_graph, Tensor) and isinstance(edge_index, Tensor) and c_graph.layout == edge_index.layout
                == torch.strided and c_graph.shape == edge_index.shape and torch.equal(c_graph, edge_index))
            if same_graph and c_x.shape == x.shape and torch.equal(c_x, x):
                return c_z.clone()  # a caller's in-place change must not reach the cache
        z = appr_propagate(x_ball, edge_index, alpha=self.alpha, steps=list(self.steps), tol=min(self.tol, 1e-10),
                           symmetrize=self.symmetrize)
        if self.cached:
            self._cache = (x.detach().clone(), edge_index.clone() if isinstance(edge_index, Tensor) else edge_index, z)
        return z

    def calibration(self, num_rows: int) -> ObjectivePerturbationCalibration:
        """Theorem 1's quantities for a fit on ``num_rows`` loss rows (with the safe sampler, at the
        share of the budget the exact mechanism gets)."""
        c1, c2, c3 = self.constants
        eps, delta = self.epsilon, self.delta
        if self.sampler == "safe":
            budget = split_budget(eps, delta)
            eps, delta = budget.epsilon_exact, budget.delta_exact
        return calibrate_objective_perturbation(
            epsilon=eps, delta=delta, dim=self.out_features, num_classes=self.out_channels,
            num_rows=num_rows, sensitivity=self.sensitivity, loss_constants=(c1, c2, c3),
            regularization=self.regularization, omega=self.omega)

    def fit(self, x: Tensor, edge_index: Adj, y: Tensor, mask: Optional[Tensor] = None,
            generator: Optional[torch.Generator] = None) -> GCONFit:
        """Train the head privately on the rows in ``mask`` (all nodes when ``None``).

        ``y`` holds class indices; labels of unlabelled nodes may be pseudo-labels, but
        only from an edge-free encoder (anything that saw edges would leak them).
        ``generator`` makes the noise reproducible, which voids the guarantee; it is used
        for this fit only and not kept with the model.
        """
        reject_bipartite("PerturbedAPPRConv", x, edge_index)
        z = self.propagation(x, edge_index)
        mask = torch.ones(z.size(0), dtype=torch.bool, device=z.device) if mask is None else mask
        if mask.device != z.device or y.device != z.device:
            raise ValueError(f"`mask` and `y` must be on the features' device ({z.device}); got {mask.device} and "
                             f"{y.device}")
        if mask.dtype != torch.bool or mask.numel() != z.size(0) or not bool(mask.any()):
            raise ValueError("`mask` must be a non-empty boolean node mask")
        if y.dim() != 1 or y.numel() != z.size(0) or int(y[mask].min()) < 0 or int(y[mask].max()) >= self.out_channels:
            raise ValueError(f"`y` must hold a class index in [0, {self.out_channels}) for every node")
        rows = int(mask.sum())
        cal = self.calibration(rows)
        targets = torch.nn.functional.one_hot(y[mask], self.out_channels).to(torch.float64)
        params = {k: v for k, v in vars(cal).items() if isinstance(v, (int, float, str))}
        if self.sampler == "float" or math.isinf(cal.beta):  # beta = inf: Psi = 0, no edge is used, no noise
            # one (epsilon, delta) event with its whole privacy profile, before B is drawn
            charge(self.accountant, objective_perturbation_event(cal, unit="edge", name=self.name,
                                                                 mechanism="objective_perturbation", params=params),
                   self)
            noise = sample_objective_noise(self.out_features, self.out_channels, cal.beta, generator=generator,
                                           device=generator.device if generator is not None else z.device)
            sol = solve_separable_ridge(z[mask], targets, self.loss, regularization=cal.Lambda + cal.Lambda_prime,
                                        linear_term=noise, tol=self.tol)
            del noise  # never stored with the model
            theta, converged = sol.theta, sol.converged
        else:
            theta, sol, converged = self._fit_safe(x, edge_index, z, mask, targets, cal, params, generator)
        self.weight = theta
        self.last_fit = GCONFit(calibration=cal, grad_norm=sol.grad_norm, iterations=sol.iterations,
                                converged=converged, num_rows=rows)
        if not converged:  # the released head is not the minimiser the guarantee is about
            warnings.warn(f"{self.name}: the Newton solve stopped after {sol.iterations} iterations with gradient "
                          f"norm {sol.grad_norm:.3g} > tol={self.tol:g}; Theorem 1 covers the exact minimiser, so "
                          "raise `regularization` or `tol`. (A diagnostic of the private objective: keep it private.)",
                          RuntimeWarning, stacklevel=2)
        return self.last_fit

    def _safe_plan(self, x: Tensor, edge_index: Adj, z: Tensor, cal: ObjectivePerturbationCalibration,
                   rows: int) -> SafeFitPlan:
        """Every public quantity of a safe fit; raises before any charge."""
        residual = None
        if any(math.isinf(m) for m in self.steps):  # the returned fixed point's residual must meet the public cap
            residual = max(self.tol, 64 * 2.0 ** -53 * (z.size(0) + 5) / self.alpha)
            if self._inf_residual(x, edge_index, z) > residual:
                raise RuntimeError(f"{self.name}: the steps=inf propagation did not converge to the residual "
                                   f"{residual:.3g} the safe fit's error bound needs; use a finite `steps` (e.g. "
                                   "steps=(0, 20): a truncated series has a bounded error by construction) or a "
                                   "larger `tol`")
        eta = propagation_error_bound(z.size(0), self.alpha, self.steps, self.in_channels, residual)
        return plan_safe_fit(budget=split_budget(self.epsilon, self.delta), beta=cal.beta,
                             regularization=cal.Lambda + cal.Lambda_prime, dim=self.out_features,
                             num_classes=self.out_channels, num_rows=rows, constants=self.constants,
                             propagation_error=eta, tol=self.tol, grid_tolerance=self.grid_tolerance,
                             granularity=self._granularity_arg)

    def _inf_residual(self, x: Tensor, edge_index: Adj, z: Tensor) -> float:
        """Largest residual :math:`|H - (1-\\alpha)\\tilde AH - \\alpha X|` of the ``steps=inf`` blocks of ``z``."""
        x_ball = _check_ball(x, self.in_channels)
        s, d1 = len(self.steps), self.in_channels
        worst = 0.0
        for i, m in enumerate(self.steps):
            if math.isinf(m):
                h = z[:, i * d1:(i + 1) * d1] * s
                step = appr_propagate(h, edge_index, alpha=self.alpha, steps=1, symmetrize=self.symmetrize)
                worst = max(worst, float(((1.0 + self.alpha) * h - step - self.alpha * x_ball).abs().max()))
        return worst

    def _fit_safe(self, x: Tensor, edge_index: Adj, z_all: Tensor, mask: Tensor, targets: Tensor,
                  cal: ObjectivePerturbationCalibration, params: dict, generator: Optional[torch.Generator]):
        """The safe fit (class docstring): plan, charge, coupled noise, certified solve, grid release."""
        check_sampler_options(self.sampler, self.secure_mode, generator, granularity=self._granularity_arg)
        z = z_all[mask]
        plan = self._safe_plan(x, edge_index, z_all, cal, z.size(0))
        eps, delta = chained_guarantee(plan.budget.epsilon_exact, plan.budget.delta_exact, plan.budget.epsilon_close,
                                       plan.budget.delta_close)
        profile = chained_profile(objective_perturbation_profile(cal), mu_gaussian=plan.mu_gaussian,
                                  epsilon_close=plan.budget.epsilon_close, delta_coupling=plan.budget.delta_coupling)
        params = {**params, "sampler": "safe", "granularity": plan.granularity, "release_std": plan.release_std,
                  "radius": plan.radius}
        source = RandomSource("cpu", generator=generator, secure=resolve_secure_mode(self.secure_mode, generator))
        # the samplers' workspace (the d x c draws of B and of the release) before the charge
        RoundedNoiseSampler("gaussian", plan.release_std / plan.granularity).reserve(
            self.out_features * self.out_channels, "cpu")
        charge(self.accountant, approximate_dp_event(unit="edge", epsilon=eps, delta=delta, name=self.name,
                                                     mechanism="objective_perturbation_safe", params=params,
                                                     profile=profile), self)
        noise = sample_coupled_objective_noise(plan.noise, source).to(z.device)  # d x c, drawn on the CPU
        lam = cal.Lambda + cal.Lambda_prime
        c2 = self.constants[1]
        sol, theta, ok = None, None, False
        # the solver stops at a quarter of the certificate's share (its norm is per class; the share
        # includes the float64 floor, so the stop is reachable), then refines from the last iterate
        tol = max(self.tol, plan.solver_target / (4.0 * math.sqrt(self.out_channels)))
        for refine in range(4):
            sol = solve_separable_ridge(z, targets, self.loss, regularization=lam, linear_term=noise,
                                        tol=tol * 4.0 ** -refine, theta0=theta)
            theta = sol.theta
            bound = gradient_norm_bound(z, targets, theta, self.loss, regularization=lam, linear_term=noise,
                                        second_bound=c2)
            if certified_distance_ok(plan, bound, theta, c2):
                ok = True
                break
        del noise  # never stored with the model
        if not ok:
            raise RuntimeError(f"{self.name}: the solver could not certify its head within the public radius "
                               f"{plan.radius:.3g} (charged, nothing released); raise `regularization` or `tol`")
        self.granularity = plan.granularity
        return release_on_grid(theta.cpu(), plan, source).to(z.device), sol, True

    def forward(self, x: Tensor, edge_index: Adj, mode: Literal["private", "public"] = "private") -> Tensor:
        """Class scores :math:`\\hat{\\mathbf{Y}}` (``[N, c]``) with the trained head, computed in float64 and
        returned in ``x``'s floating dtype (float64 for other inputs); the head may have been cast
        (``layer.float()``), which rounds the released values (post-processing)."""
        reject_bipartite("PerturbedAPPRConv", x, edge_index)
        reject_edge_weight("PerturbedAPPRConv", "mode", mode, "'private' or 'public'")
        in_dtype = x.dtype
        if self.weight is None:
            raise RuntimeError("call fit(...) first")
        if mode == "public":
            z = self.propagation(x, edge_index)  # the training propagation, reused when cached
        elif mode == "private":
            x = _check_ball(x, self.in_channels)
            one_hop = appr_propagate(x, edge_index, alpha=self.alpha_inference, steps=1, symmetrize=self.symmetrize)
            z = torch.cat([x.to(one_hop.dtype) if m == 0 else one_hop for m in self.steps], dim=-1)
        else:
            raise ValueError(f"`mode` must be 'private' or 'public'; got {mode!r}")
        scores = z.to(torch.float64) @ self.weight.to(device=z.device, dtype=torch.float64)
        return scores.to(in_dtype) if in_dtype in (torch.float16, torch.bfloat16, torch.float32) else scores

    def __deepcopy__(self, memo: dict) -> "PerturbedAPPRConv":
        # `best = copy.deepcopy(model)`: the copy charges the same ledger (one record of the real data)
        if self.accountant is not None:
            memo.setdefault(id(self.accountant), self.accountant)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        state = torch.nn.Module.__getstate__(self).copy()
        cache = state.pop("_cache", None)  # (x, graph, Z): shared with the copy, never duplicated
        new.__setstate__(copy.deepcopy(state, memo))
        new._cache = cache
        return new

    def __getstate__(self) -> dict[str, Any]:
        # pickle / torch.save(module): the released head and the public settings only. The cached
        # propagation holds the features, the private graph and the noise-free Z (recomputed when
        # needed, at no privacy cost); `last_fit` pickles without its diagnostics (see GCONFit)
        state = super().__getstate__().copy()
        state["_cache"] = None
        return state

    def __prepare_scriptable__(self) -> Any:
        raise RuntimeError(
            "PerturbedAPPRConv cannot be compiled by TorchScript (torch.jit.script): `fit` is the private release "
            "(it registers with the Python accountant and draws exact integer noise in Python), and `forward` "
            "validates and normalises the graph in Python (edge_index, SparseTensor or torch.sparse). Use "
            "torch.compile, or script a module that multiplies the propagated features by `layer.weight`.")

    def __repr__(self) -> str:
        steps = ",".join("inf" if math.isinf(m) else str(m) for m in self.steps)
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, alpha={self.alpha:g}, "
                f"steps=({steps}), epsilon={self.epsilon:g}, delta={self.delta:g}, "
                f"regularization={self.regularization:g}, loss={self.loss.name!r}, unit='edge', "
                f"sampler={self.sampler!r})")


def _check_ball(x: Tensor, channels: int) -> Tensor:
    r"""``x`` with every row in the unit L2 ball, which the sensitivity analysis assumes.

    Rows whose norm exceeds 1 by at most :math:`\max(10^{-6}, (F + 4)\,u)` (``u`` the machine
    epsilon of ``x``'s dtype: the rounding of a normalisation such as ``F.normalize`` in that dtype)
    are projected onto the ball (in float64), so the bound holds exactly; any larger row raises (the
    data were not normalised)."""
    if not isinstance(x, Tensor) or x.dim() != 2 or x.size(1) != channels:
        raise ValueError(f"`x` must be a [N, {channels}] feature matrix")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("`x` contains NaN or infinite values")
    rows = max(1, (1 << 22) // max(channels, 1))  # float64 norms in row blocks: no float64 copy of all of x
    norms = torch.cat([x[i:i + rows].to(torch.float64).norm(dim=1, keepdim=True) for i in range(0, x.size(0), rows)]) \
        if x.size(0) else x.new_zeros((0, 1), dtype=torch.float64)
    eps = torch.finfo(x.dtype).eps if x.is_floating_point() else torch.finfo(torch.float64).eps
    tolerance = max(1e-6, (channels + 4) * eps)
    if bool((norms > 1 + tolerance).any()):
        raise ValueError(f"rows of `x` must lie in the unit L2 ball (largest norm {float(norms.max()):.4g}, allowed "
                         f"1 + {tolerance:.2g} for rounding); apply L2RowNormalize first")
    if bool((norms > 1).any()):  # onto the ball of radius 1 / (1 + (F + 4) 2^-53): no float64 row ends above 1
        slack = 1.0 + (channels + 4) * torch.finfo(torch.float64).eps
        return x.to(torch.float64) / (norms * slack).clamp(min=1.0)
    return x
