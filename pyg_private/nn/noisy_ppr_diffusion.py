r"""Edge-private personalized PageRank by noisy graph diffusion (Wei, Chien and Li 2024)."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Literal, NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.typing import Adj

from ..accounting import DEFAULT_ORDERS, PrivacyAccountant, PrivacyEvent, rdp_event
from ..accounting.pabi import lazy_ppr_noise_scale, lazy_ppr_rdp
from ..accounting.validation import check_positive, check_positive_int, check_restart_probability
from ..mechanisms._noise import TwoLaplaceStream
from ..sampling import MIN_SCALE, RoundedNoiseSampler
from ..sampling.grid import (DEFAULT_GRID_TOLERANCE, check_granularity, choose_granularity,
                               validate_granularity)
from ..sampling.words import RandomSource, resolve_secure_mode
from ..mechanisms.sampler_options import check_grid_tolerance, check_sampler_options
from ..utils import project_l1_ball, project_simplex
from ..utils.adjacency import _csr as csr_matrix
from ..utils.csr_product import CsrProduct, clamp_and_scale_rows, unit_values, with_int32_indices
from ..utils.adjacency import inverse_degree
from ..utils.lazy_ppr import check_seed_index, seed_matrix
from ._call_checks import reject_bipartite, reject_channel_counts, reject_edge_weight, reject_grad_input
from ._ppr_release import SeededRelease, inflated_scale, resolve_noise
from ._sparse_propagation import SparsePropagation

__all__ = ["NoisyPPRDiffusion", "PPRGrid"]

Projection = Optional[Literal["l1_ball", "simplex"]]

_MAX_VALUE_STEPS = 2.0 ** 60


class PPRGrid(NamedTuple):
    """The grid of one safe release (see :meth:`NoisyPPRDiffusion.plan_grid`)."""

    #: The power-of-two grid step :math:`g`.
    granularity: float
    #: The Laplace scale :math:`\sigma'` of each of the two draws per step (at least :math:`\sigma\eta'/\eta`).
    noise_scale: float
    #: :math:`\eta' = \eta + (1 + \beta) N g / (2\beta)` (rounded up): the clip threshold whose per-step
    #: shift :math:`2\beta\eta'` covers the rounding.
    eta: float
    #: The number of coordinates per column :math:`N`.
    num_nodes: int


class NoisyPPRDiffusion(SeededRelease, SparsePropagation):
    r"""Edge-level differentially private lazy personalized PageRank, from
    `"Differentially Private Graph Diffusion with Applications in Personalized
    PageRanks" <https://arxiv.org/abs/2407.00077>`_ (NeurIPS 2024), Eq. 4 with the lazy
    walk of Eq. 11:

    .. math::
        \mathbf{s}^{(k)} = \beta\,\mathbf{W} f\big(\mathbf{s}^{(k-1)}\big)
            + (1 - \beta)\,\mathbf{s} + \boldsymbol{\xi}^{(k)}_1 + \boldsymbol{\xi}^{(k)}_2,
        \qquad \mathbf{W} = \tfrac12\big(\mathbf{I} + \mathbf{A}\mathbf{D}^{-1}\big),

    for :math:`k = 1, \dots, K`, with :math:`\beta = 1 - \alpha`, the degree-proportional
    clip :math:`f(\mathbf{x})_i = \min(\max(x_i, 0), \eta\, d_i)` applied before **every**
    propagation, and two independent :math:`\mathrm{Lap}(0, \sigma)` vectors per step.
    :math:`\mathbf{W}` normalises by the **source** degree, so diffusion preserves mass.
    Only :math:`\mathbf{s}^{(K)}` is returned (detached); no intermediate iterate is kept.

    **Privacy.** One forward of :math:`C` columns is one release, registered with the
    accountant (before any noise is drawn) as one event on unit ``"edge"`` whose RDP
    curve is :math:`C` times Theorem 1 (Eq. 5), the exact minimum over :math:`\tau`
    computed by :func:`pyg_private.accounting.lazy_ppr_rdp`. With ``personalized=True``
    (one-hot seeds from ``seed_index`` only) the seed's own entry is not clipped from
    above, and the cost is Theorem 4 in the corrected form of :mod:`pyg_private.accounting.pabi`
    (as printed, Eq. 10 gives :math:`\epsilon = 0` at :math:`\tau = 0`) **per recipient**: each
    column goes only to its seed's owner, who already knows its own edges, so the event
    charges the largest number of columns any one seed receives in the call. This
    personalized guarantee is **invalid** when several columns, or anything computed
    from them, reach a party other than their seed (for example a model trained on the
    PPR vectors and released): then use ``personalized=False``.

    **Floating-point safety.** With ``sampler="safe"`` (the default) every step's noisy iterate is
    released on a power-of-two grid :math:`g` (``layer.granularity`` after a forward), with the
    noise the sum of the two Laplace variables rounded to the grid and sampled exactly from integers
    (:class:`~pyg_private.sampling.RoundedNoiseSampler`, kind
    ``"two_laplace"``): step :math:`k` computes
    :math:`\mathbf{y}^{(k)} = g\,(\mathrm{round}(\phi_G(\mathbf{y}^{(k-1)})/g) + \mathbf{K}^{(k)})`
    with :math:`\phi_G(\mathbf{x}) = \beta\mathbf{W}f(\mathbf{x}) + (1 - \beta)\mathbf{s}` and
    :math:`\mathbf{y}^{(0)} = \mathbf{s}`, so every value (and the returned
    :math:`\mathbf{y}^{(K)}`, before the optional projection and the cast to the output dtype) is a
    multiple of :math:`g`, and every multiple is possible under every graph: no output is impossible
    under a neighbouring graph (Mironov 2012; Jin et al. 2022). *Accounting.* Write :math:`R` for
    the rounding to the grid (its :math:`\pm 2^{61} g` clamp included: a 1-Lipschitz clamp followed
    by a rounding that moves each coordinate by at most :math:`g/2`). With
    :math:`\mathbf{z}^{(k)} = R(\phi_G(\mathbf{y}^{(k-1)})) + \boldsymbol\xi^{(k)}`,
    :math:`\boldsymbol\xi^{(k)}` the *continuous* sum of two :math:`\mathrm{Lap}(0, \sigma')`
    vectors, :math:`\mathbf{y}^{(k)} = R(\mathbf{z}^{(k)})` (the rounding of an integer plus
    :math:`X` is that integer plus the rounding of :math:`X`), so the :math:`\mathbf{z}` chain is
    the paper's noisy iteration :math:`\mathbf{z}^{(k)} = \psi_G(\mathbf{z}^{(k-1)}) +
    \boldsymbol\xi^{(k)}` with the map :math:`\psi_G = R \circ \phi_G \circ R` (the first step
    :math:`R(\phi_G(\mathbf{s}))`) and the release :math:`R(\mathbf{z}^{(K)})` a post-processing of
    :math:`\mathbf{z}^{(K)}`. Per column (:math:`N` coordinates, :math:`\ell_1` norm, the norm of
    the analysis), for all inputs :math:`\mathbf{u}, \mathbf{u}'`,

    .. math::
        \|\psi_G(\mathbf{u}) - \psi_{G'}(\mathbf{u}')\|_1
            \le \tfrac{Ng}{2} + \|\phi_G(R\mathbf{u}) - \phi_{G'}(R\mathbf{u}')\|_1 + \tfrac{Ng}{2}
            \le \beta\|\mathbf{u} - \mathbf{u}'\|_1 + \rho + (1 + \beta) N g,

    using :math:`\|\phi_G(\mathbf{a}) - \phi_{G'}(\mathbf{a}')\|_1 \le \beta\|\mathbf{a} -
    \mathbf{a}'\|_1 + \rho` (:math:`\phi` is a :math:`\beta`-contraction, Lemma B.1 bounds the
    distortion by :math:`\rho = 2\beta\eta`) and :math:`\|R\mathbf{u} - \mathbf{u}\|_1 \le
    Ng/2`. That inequality and data processing through one map are all that the proofs of
    Theorems 1 and 4 use of the iteration (the contraction-reduction and shift-reduction lemmas of
    privacy amplification by iteration), so they hold with :math:`\rho' = \rho + (1 + \beta) N g
    = 2\beta\eta'`, :math:`\eta' = \eta + (1 + \beta) N g/(2\beta)`, :math:`\gamma = \beta`
    unchanged; in personalized mode the first step still has no distortion (the one-hot seed's
    first step, rounding included, is the same on both graphs), and :math:`\rho_k = \rho'` for
    :math:`k \ge 2`. The curve depends on :math:`\rho/\sigma` only and grows with it, so the
    noise scale is raised to :math:`\sigma' \ge \sigma\eta'/\eta` (checked in rational
    arithmetic) and the event's curve is **the same** as the float sampler's. :math:`g` is the
    coarsest power of two with :math:`(1 + \beta) N g \le` ``grid_tolerance`` :math:`\cdot\rho`
    (default :math:`2^{-16}`: :math:`\sigma' \le (1 + 2^{-16})\sigma`) that keeps
    :math:`\sigma'/g` within the exact sampler's :math:`[2^{20}, 2^{46}]` steps; it depends on
    :math:`N` and is chosen per forward from public quantities (and recorded in the event's
    params). ``sampler="float"`` keeps the floating-point :class:`~pyg_private.mechanisms._noise.TwoLaplaceStream`
    (open to floating-point attacks; benchmarks and audits only); ``secure_mode=True`` draws every
    random bit from the operating system's CSPRNG. As for :class:`ContractiveGraphLayer`, the bound
    is that of exact arithmetic for :math:`\phi` itself: the float64 rounding of the propagation
    (relative :math:`\approx 10^{-16}` per operation, including the float64 form of grid values
    beyond :math:`2^{53}g`) is not accounted.

    **Calibration.** Give ``noise_scale`` (the Laplace *scale* :math:`\sigma`, not a
    standard deviation) or ``epsilon`` and ``delta``. ``noise_scale=0`` is the
    non-private reference (the exact clipped diffusion: no noise, nothing charged, no
    accountant accepted), for audits and utility comparisons. The target is met by a release of
    ``epsilon_columns`` columns (default 1: **per column**; a forward with more columns
    costs more and the accountant records the truth). The calibrated scale is
    ``layer.noise_scale``; it is proportional to :math:`\eta` and does not depend on the
    graph.

    **Caching and saving.** With ``cached=True`` (the default) the first forward is released and
    charged, and later forwards with the same graph and inputs return that release at no further cost; a
    different graph or input is a new, charged release. The release is paid data, not a parameter:
    :meth:`reset_parameters` (and ``torch_geometric.nn.inits.reset``) keeps it, ``forget_release()`` drops it;
    ``layer.double()``, ``layer.half()`` or ``layer.to(device)`` with the same inputs in that dtype or on
    that device reuse it (cast or moved: post-processing). It works under ``torch.no_grad()`` and
    ``torch.inference_mode()``.
    ``cached=False`` releases anew, with a new charge, on every call (audits, Monte Carlo studies). The
    cached release is part of ``state_dict()`` (entry ``_extra_state``: the noisy output, its privacy
    event and whether an accountant recorded it, the layer's privacy settings, and a SHA-256 fingerprint
    of the public seeds or signals), so ``load_state_dict`` into a layer built with the same settings
    returns it without a new charge and without touching the accountant (restore the accountant from its
    own ``state_dict``); a state made under other settings raises ``ValueError``. A release restored
    from a state that no accountant recorded is registered with this layer's accountant when it is first
    reused. The state never holds the graph or any function of it but the release: a digest of the graph
    would let anyone holding the file test a guessed edge with certainty. So a loaded release is bound
    to the first graph it is used with (matching public inputs); call ``forget_release()`` before
    using a loaded model on another graph. A **personalized** release (``personalized=True``) is never
    written out (``state_dict``, ``pickle``, ``torch.save`` hold no release): its guarantee is per
    recipient, each column for its seed's owner alone, and a file would hand every column to whoever
    holds it. It is reused in memory only; after a reload the next forward is a new, charged release.

    **Module protocols** (as for every release layer): ``copy.deepcopy`` shares the accountant and the
    generator and keeps the cache (its in-memory key, the graph, shared with the original, not
    duplicated); ``pickle`` and ``torch.save(module)`` keep the release without the
    graph and drop the generator (its state would let the file's holder recompute the noise);
    ``torch.compile`` works, the release running eagerly (``torch.compiler.disable``);
    ``torch.jit.script`` raises on purpose: the release registers with the Python accountant and draws
    exact noise in Python. Script the rest of the model on the cached release instead.

    **Inputs must be public.** The seeds or signals ``x`` are the same on neighbouring
    graphs (the proof protects edges only) and the layer does not propagate gradients.
    So is the node count :math:`N`: it is ``x``'s number of rows, or ``num_nodes``
    (required with ``seed_index`` and an ``edge_index``), or a sparse adjacency's declared
    size; it is never inferred from the largest id in ``edge_index``. Neighbouring graphs
    share their nodes, and a count read off the private edges would change the output's
    shape when an edge at the last node is added or removed. Seeds and edge ids are
    checked against :math:`N` before anything is charged.
    An output projection (``"l1_ball"`` or ``"simplex"``) is applied to the final iterate
    only: post-processing. No in-loop projection is offered, because the contraction
    argument does not survive it: App. F.3 of the paper takes the Euclidean projection onto
    the :math:`\ell_1` ball to be :math:`\ell_1`-nonexpansive, which it is not (the points
    :math:`(1, 1, 1)` and :math:`(1.3, 1, 1)`, at :math:`\ell_1` distance 0.3, project
    to :math:`(\frac13, \frac13, \frac13)` and :math:`(\frac8{15}, \frac7{30}, \frac7{30})`,
    at distance 0.4), so Theorems 1 and 4 cover the diffusion without it.

    Args:
        alpha (float): restart probability, :math:`0 < \alpha < 1`. (default: :obj:`0.2`)
        num_iterations (int): :math:`K`. (default: :obj:`100`)
        eta (float): clipping threshold :math:`\eta > 0`. (default: :obj:`1e-6`)
        noise_scale (float, optional): Laplace scale :math:`\sigma`.
        epsilon (float, optional): target epsilon (with ``delta``) instead of ``noise_scale``.
        delta (float, optional): target delta, e.g. :math:`1/|E|`.
        personalized (bool): Theorem 4 mode, see above. (default: :obj:`False`)
        epsilon_columns (int): columns the ``epsilon`` target covers. (default: :obj:`1`)
        output_projection (str, optional): ``None``, ``"l1_ball"`` or ``"simplex"``.
        accountant (PrivacyAccountant, optional): ledger charged on every release.
        cached (bool): reuse the release for identical graph and inputs; see above.
            (default: :obj:`True`)
        symmetrize (bool): symmetrise a directed ``edge_index`` (and drop self-loops and
            duplicates) instead of raising. (default: :obj:`False`)
        orders (Sequence[float], optional): Rényi orders of the curve (default: the
            library grid up to 1e6 and infinity).
        generator (torch.Generator, optional): reproducibility only; voids the guarantee.
        sampler (str): ``"safe"`` (grid-valued, exact integer noise) or ``"float"`` (see above).
            (default: ``"safe"``)
        secure_mode (bool, optional): every random bit from a CSPRNG keyed from the OS (``None``: the
            process-wide default of :func:`pyg_private.mechanisms.set_secure_mode`); refuses a
            seeded ``generator``.
        granularity (float, optional): the grid (a power of two, no coarser than
            :math:`\rho/((1 + \beta)N)`); chosen per forward when ``None``.
        grid_tolerance (float): bound on :math:`(1 + \beta)Ng/\rho` when the grid is chosen.
            (default: :math:`2^{-16}`)
        column_block (int, optional): diffuse at most this many columns at a time (the columns are
            independent: the same release, the same grid and the same single charge, made before the
            first block). The working memory is then about six float64 :math:`N \times` ``column_block``
            buffers instead of six :math:`N \times C` ones, and the output is written block by block
            in its dtype (into ``out`` when given; e.g. a memory-mapped tensor): for many seeds on a
            large graph (1,000 seeds on 2.45M nodes are 19.6 GB in float64). Needs ``cached=False``.
            With a seeded ``generator`` the noise is drawn in another order than without blocks.
            (default: :obj:`None`, all columns at once)

    **Heterogeneous graphs.** A relation within one node type (``HeteroConv`` and ``to_hetero`` pass
    it as a single ``x``) is a square graph like any other. A bipartite relation (``x = (x_src,
    x_dst)``, or a non-square ``EdgeIndex`` or sparse adjacency) is refused with the reason before
    anything is charged: the guarantee is for hops of one square adjacency iterated on one node set,
    and a second hop of a bipartite relation is not defined. Use :class:`GAPAggregation` per
    bipartite relation.

    Shapes:
        - **input:** signals :math:`(|\mathcal{V}|, C)` (non-negative) or
          ``seed_index`` :math:`(C,)` with ``num_nodes`` :math:`|\mathcal{V}|`;
          ``edge_index`` :math:`(2, |\mathcal{E}|)`, ``SparseTensor`` or ``torch.sparse``
          adjacency
        - **output:** :math:`(|\mathcal{V}|, C)`
    """

    #: ``x`` (signals) gives the public node count as an alternative to ``num_nodes``
    accepts_signals = True

    def __init__(
        self,
        alpha: float = 0.2,
        num_iterations: int = 100,
        eta: float = 1e-6,
        *,
        noise_scale: Optional[float] = None,
        epsilon: Optional[float] = None,
        delta: Optional[float] = None,
        personalized: bool = False,
        epsilon_columns: int = 1,
        output_projection: Projection = None,
        accountant: Optional[PrivacyAccountant] = None,
        cached: bool = True,
        symmetrize: bool = False,
        orders: Sequence[float] = DEFAULT_ORDERS,
        generator: Optional[torch.Generator] = None,
        name: str = "noisy_ppr_diffusion",
        sampler: str = "safe",
        secure_mode: Optional[bool] = None,
        granularity: Optional[float] = None,
        grid_tolerance: float = DEFAULT_GRID_TOLERANCE,
        column_block: Optional[int] = None,
    ) -> None:
        reject_channel_counts("NoisyPPRDiffusion", alpha, num_iterations, parameters="(alpha, num_iterations, eta)",
                              example="NoisyPPRDiffusion(alpha=0.2, num_iterations=100, eta=1e-6, epsilon=1.0, "
                                      "delta=1e-5) called as layer(edge_index=edge_index, seed_index=seeds, "
                                      "num_nodes=N)")
        super().__init__()
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, generator, granularity=granularity)
        self.grid_tolerance = check_grid_tolerance(grid_tolerance)
        self._granularity = None if granularity is None else check_granularity(granularity)
        #: The grid of the last release (``None`` before it, without noise, or with the float sampler).
        self.granularity: Optional[float] = None
        self.alpha = check_restart_probability(alpha)
        self.num_iterations = check_positive_int(num_iterations, "num_iterations")
        self.eta = check_positive(eta, "eta")
        self.personalized = bool(personalized)
        self.epsilon_columns = check_positive_int(epsilon_columns, "epsilon_columns")
        if output_projection not in (None, "l1_ball", "simplex"):
            raise ValueError(f"`output_projection` must be None, 'l1_ball' or 'simplex'; got {output_projection!r}")
        self.output_projection = output_projection
        self.orders = tuple(orders)
        self.noise_scale, self.epsilon, self.delta = resolve_noise(
            noise_scale, epsilon, delta,
            lambda eps, d: lazy_ppr_noise_scale(
                epsilon=eps, delta=d, num_iterations=self.num_iterations, eta=self.eta, alpha=self.alpha,
                personalized=self.personalized, num_columns=self.epsilon_columns, orders=self.orders),
            allow_zero=True, accountant=accountant,
        )
        # noise_scale=0 is the non-private reference: exact diffusion, no curve, nothing charged
        self._column_curve = None if self.noise_scale == 0 else lazy_ppr_rdp(
            self.orders, noise_scale=self.noise_scale, num_iterations=self.num_iterations, eta=self.eta,
            alpha=self.alpha, personalized=self.personalized)
        self.accountant = accountant
        self.cached = cached
        self.symmetrize = symmetrize
        self.generator = generator
        self.name = name
        self.column_block = None if column_block is None else check_positive_int(column_block, "column_block")
        if self.column_block is not None and cached:
            raise ValueError("`column_block` streams a release too large to hold twice, one block of columns at a "
                             "time, and keeps no copy of it: build the layer with cached=False (a cache would hold "
                             "the whole N x C output, and its one-hot key, in the module)")

    # ---------------------------------------------------------------- accounting
    def column_curve(self) -> Tensor:
        """The RDP curve of one column on ``self.orders`` (a copy; infinite without noise)."""
        if self._column_curve is None:
            return torch.full((len(self.orders),), math.inf, dtype=torch.float64)
        return torch.as_tensor(self._column_curve.copy())

    def event(self, num_columns: int, grid: Optional[PPRGrid] = None) -> PrivacyEvent:
        """The event of a release of ``num_columns`` columns (to one party, or per recipient);
        ``grid``: the safe release's grid (:meth:`plan_grid`), recorded in the params. The curve is
        the same with or without it (the noise scale absorbs the rounding, see the class notes)."""
        c = check_positive_int(num_columns, "num_columns")
        if self._column_curve is None:
            raise ValueError("noise_scale=0 is the non-private reference: it has no privacy event")
        params = {"alpha": self.alpha, "num_iterations": self.num_iterations, "eta": self.eta,
                  "noise_scale": self.noise_scale, "columns": c, "personalized": self.personalized,
                  "sampler": self.sampler}
        if grid is not None:
            params.update(granularity=grid.granularity, grid_noise_scale=grid.noise_scale, grid_eta=grid.eta,
                          dim=grid.num_nodes)
        return rdp_event(
            unit="edge", orders=self.orders, rdp=c * self._column_curve, name=self.name,
            mechanism="noisy_ppr_personalized" if self.personalized else "noisy_ppr_diffusion",
            params=params,
        )

    def plan_grid(self, num_nodes: int, max_signal: float = 1.0) -> PPRGrid:
        r"""The grid of a safe release on ``num_nodes`` nodes (public quantities only; raises before
        anything is charged): :math:`g`, :math:`\sigma' \ge \sigma\eta'/\eta` and :math:`\eta'`
        (see the class notes). ``max_signal`` is the largest entry of the public signals (1 for
        one-hot seeds): every :math:`\phi_G` value lies in :math:`[0, \beta\eta(N - 1) + (1 -
        \beta)\max s]` (the clip bounds :math:`(\mathbf{W}f)_i` by :math:`\eta d_i`; the seed's own
        unclipped entry in personalized mode is bounded by ``max_signal`` instead, a heuristic
        only: the clamp at :math:`2^{61}g` is harmless), and the grid must hold that within
        :math:`2^{60}` steps."""
        if self.noise_scale == 0:
            raise ValueError("noise_scale=0 is the non-private reference: it has no grid")
        n = check_positive_int(num_nodes, "num_nodes")
        beta = 1.0 - self.alpha  # the beta of the iteration and of the accounting
        rho = 2.0 * beta * self.eta  # Lemma B.1 for the lazy walk
        base = rho / (1.0 + beta)  # choose g with n g <= tolerance * rho / (1 + beta)
        if self._granularity is None:
            g = choose_granularity(scale=self.noise_scale, sensitivity=base, dim=n, norm="l1",
                                   tolerance=self.grid_tolerance)
        else:
            g = validate_granularity(self._granularity, scale=self.noise_scale, sensitivity=base, dim=n, norm="l1")
        b = Fraction(beta)
        factor = 1 + (1 + b) * n * Fraction(g) / (2 * b * Fraction(self.eta))  # eta' / eta = rho' / rho, exactly
        sigma = inflated_scale(self.noise_scale, factor)
        eta = inflated_scale(self.eta, factor)
        value_bound = beta * self.eta * (n - 1) + (max_signal if self.personalized else (1.0 - beta) * max_signal)
        if value_bound / g > _MAX_VALUE_STEPS:
            # the smallest power-of-two tolerance whose grid (the power of two g with n g <= tolerance * base)
            # holds the values; none helps when the noise scale itself caps g (scale / g >= 2^20)
            g_needed = 2.0 ** math.ceil(math.log2(value_bound / _MAX_VALUE_STEPS))
            needed = 2.0 ** math.ceil(math.log2(g_needed * n / base))
            if g_needed > self.noise_scale / MIN_SCALE:  # no grid the sampler can serve holds the values
                hint = ("the noise scale is too small for a grid release (noise this small protects almost nothing): "
                        "use a larger `noise_scale` (or a smaller `epsilon`)")
            elif needed < 1 and self._granularity is None:
                hint = (f"raise `grid_tolerance` to {needed:g} (2^{int(math.log2(needed))}; the noise then grows by "
                        "at most that fraction, the privacy cost is unchanged), or pass a coarser `granularity`")
            else:
                hint = f"pass a coarser `granularity` (at least {g_needed:g})"
            raise ValueError(
                f"the grid {g:g} cannot hold the diffusion's values (up to {value_bound:g}) within 2^60 steps on "
                f"{n} nodes: {hint} (noise_scale=0 gives the noise-free reference)")
        return PPRGrid(g, sigma, eta, n)

    # ------------------------------------------------------------------- forward
    def _signals(self, x: Optional[Tensor], seed_index: Optional[Tensor], n: int,
                 device: torch.device) -> tuple[Tensor, Optional[Tensor], torch.dtype]:
        if (x is None) == (seed_index is None):
            raise ValueError("give exactly one of `x` (signals [N, C]) or `seed_index` (seeds [C])")
        if seed_index is not None:
            s, seed_index = seed_matrix(seed_index, n, device=device)
            return s, seed_index, torch.get_default_dtype()
        if self.personalized:
            raise ValueError("personalized mode needs one-hot seeds: pass `seed_index`, not `x` (Theorem 4 assumes "
                             "the seed vector is supported on the seed only)")
        if not isinstance(x, Tensor) or x.layout != torch.strided:
            raise TypeError("`x` must be a dense Tensor of non-negative signals")
        out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        s = x.to(device=device, dtype=torch.float64)
        if s.dim() == 1:
            s = s.unsqueeze(-1)
        if s.dim() != 2 or s.size(0) != n:
            raise ValueError(f"`x` must have shape [{n}, C]; got {tuple(x.shape)}")
        if not torch.isfinite(s).all() or bool((s < 0).any()):
            raise ValueError("`x` must be finite and non-negative (PPR signals)")
        return s, None, out_dtype

    @torch.compiler.disable  # the release runs eagerly: see "Module protocols"
    def forward(self, x: Optional[Tensor] = None, edge_index: Optional[Adj] = None, seed_index: Optional[Tensor] = None,
                num_nodes: Optional[int] = None, out: Optional[Tensor] = None) -> Tensor:
        """Diffuse the seeds or signals on the private graph; returns :math:`\\mathbf{s}^{(K)}` [N, C].

        Args:
            x (Tensor, optional): public non-negative signals ``[N, C]`` (or ``[N]``); their
                rows are the node count.
            edge_index: the private graph (``edge_index``, ``SparseTensor`` or
                ``torch.sparse`` adjacency).
            seed_index (Tensor, optional): public seeds ``[C]`` in ``[0, N)``, instead of ``x``.
            num_nodes (int, optional): the public node count :math:`N`; required unless ``x``
                or a sparse adjacency gives it (must agree with them when both are given).
                It is never inferred from the private ``edge_index``.
            out (Tensor, optional): a floating ``[N, C]`` tensor the release is written into and
                returned (``column_block`` only).
        """
        reject_bipartite("NoisyPPRDiffusion", x, edge_index)
        reject_edge_weight("NoisyPPRDiffusion", "seed_index", seed_index, "integer seed node ids")
        reject_grad_input("NoisyPPRDiffusion", x, self.training)
        if out is not None and self.column_block is None:
            raise ValueError("`out` is for releases streamed in column blocks: build the layer with column_block=B "
                             "(and cached=False)")
        graph, n = self._read_csr(edge_index, num_nodes, x)  # a canonical CSR as it is
        if self.column_block is not None:
            return self._forward_in_blocks(x, seed_index, graph, n, out)
        s0, seeds, out_dtype = self._signals(x, seed_index, n, graph[1].device)
        # the cache keys on the signals as given (their dtype too: x.half() of the x released for is the same
        # release, cast), the one-hot seeds as float64
        key = x.detach().to(s0.device).reshape(n, -1) if seeds is None and x.is_floating_point() else s0
        cached = self._from_cache(graph, key)
        if cached is not None:
            return cached.to(out_dtype)
        grid, source, sampler = None, None, None
        if self.noise_scale > 0 and self.sampler == "safe":  # plan the grid: raises before any charge
            grid = self.plan_grid(n, float(s0.detach().max()))
            source = RandomSource(s0.device, generator=self.generator,
                                  secure=resolve_secure_mode(self.secure_mode, self.generator))
            sampler = RoundedNoiseSampler("two_laplace", grid.noise_scale / grid.granularity)
        run = self._diffusion(graph, n, s0, seeds, grid, source, sampler)  # every buffer, before the charge
        event = self._charge(seeds, s0.size(1), grid=grid) if self.noise_scale > 0 else None  # before any noise
        self.granularity = None if grid is None else grid.granularity
        out = self._project(run()).detach()
        self._remember(graph, key, out, event)
        return out.to(out_dtype)

    def _project(self, out: Tensor) -> Tensor:
        """The optional output projection, column by column (post-processing)."""
        if self.output_projection == "l1_ball":
            return project_l1_ball(out)
        if self.output_projection == "simplex":
            return project_simplex(out)
        return out

    def _forward_in_blocks(self, x: Optional[Tensor], seed_index: Optional[Tensor], graph: tuple[Tensor, Tensor],
                           n: int, out: Optional[Tensor]) -> Tensor:
        """The release of :meth:`forward` diffused ``column_block`` columns at a time: every input is
        checked, the grid planned and the one event charged before the first block's noise."""
        device = graph[1].device
        if (x is None) == (seed_index is None):
            raise ValueError("give exactly one of `x` (signals [N, C]) or `seed_index` (seeds [C])")
        seeds = None
        if seed_index is not None:
            seeds = check_seed_index(seed_index, n, device=device)
            num_columns, max_signal, out_dtype = seeds.numel(), 1.0, torch.get_default_dtype()
        else:
            if self.personalized:
                raise ValueError("personalized mode needs one-hot seeds: pass `seed_index`, not `x` (Theorem 4 "
                                 "assumes the seed vector is supported on the seed only)")
            if not isinstance(x, Tensor) or x.layout != torch.strided:
                raise TypeError("`x` must be a dense Tensor of non-negative signals")
            x = x.unsqueeze(-1) if x.dim() == 1 else x
            if x.dim() != 2 or x.size(0) != n:
                raise ValueError(f"`x` must have shape [{n}, C]; got {tuple(x.shape)}")
            num_columns, max_signal = x.size(1), 0.0
            out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
            for start in range(0, num_columns, self.column_block):  # checked block by block: no N x C copy
                part = x[:, start:start + self.column_block]
                if not bool(torch.isfinite(part).all()) or bool((part < 0).any()):
                    raise ValueError("`x` must be finite and non-negative (PPR signals)")
                max_signal = max(max_signal, float(part.max()))
        if out is not None:
            if not isinstance(out, Tensor) or not out.is_floating_point() or tuple(out.shape) != (n, num_columns) \
                    or out.device != device:
                raise ValueError(f"`out` must be a floating tensor of shape [{n}, {num_columns}] on {device}")
        grid, source, sampler = None, None, None
        if self.noise_scale > 0 and self.sampler == "safe":  # plan the grid: raises before any charge
            grid = self.plan_grid(n, max_signal)
            source = RandomSource(device, generator=self.generator,
                                  secure=resolve_secure_mode(self.secure_mode, self.generator))
            sampler = RoundedNoiseSampler("two_laplace", grid.noise_scale / grid.granularity)
        result = out if out is not None else torch.empty(n, num_columns, dtype=out_dtype, device=device)
        if sampler is not None:  # the workspace of the blocks' steps, before the charge
            for width in {min(self.column_block, num_columns), num_columns % self.column_block}:
                if width:
                    sampler.reserve(n * width, device, dtype=torch.float64, granularity=grid.granularity)
        if self.noise_scale > 0:
            self._charge(seeds, num_columns, grid=grid)  # one event for every column, before any noise
        self.granularity = None if grid is None else grid.granularity
        for start in range(0, num_columns, self.column_block):
            cols = slice(start, min(start + self.column_block, num_columns))
            if seeds is not None:
                s0, block_seeds = seed_matrix(seeds[cols], n, device=device)
            else:
                s0, block_seeds = x[:, cols].to(device=device, dtype=torch.float64), None
            result[:, cols] = self._project(self._diffuse(graph, n, s0, block_seeds, grid, source, sampler))
        return result

    def _diffuse(self, graph: tuple[Tensor, Tensor], n: int, s0: Tensor, seeds: Optional[Tensor],
                 grid: Optional[PPRGrid] = None,
                 source: Optional[RandomSource] = None, sampler: Optional[RoundedNoiseSampler] = None) -> Tensor:
        """The release's steps: :meth:`_diffusion`, run at once."""
        return self._diffusion(graph, n, s0, seeds, grid, source, sampler)()

    @torch.no_grad()
    def _diffusion(self, graph: tuple[Tensor, Tensor], n: int, s0: Tensor, seeds: Optional[Tensor],
                   grid: Optional[PPRGrid] = None, source: Optional[RandomSource] = None,
                   sampler: Optional[RoundedNoiseSampler] = None) -> Callable[[], Tensor]:
        r"""The :math:`K` steps of the class notes, in float64, with the same operations in the same
        order (hence the same float64 roundings) as the plain loop, in fewer passes over the
        :math:`N \times C` state and in buffers allocated once: one clamp to :math:`[0, \eta d_i]`; the
        sparse product with 32-bit indices on the CPU (the adjacency's values are 1, so no product is
        rounded: each entry is a sum from 0 in the row's CSR order, the package's order of
        :class:`~pyg_private.utils.csr_product.CsrProduct`, whose AVX2 kernel computes it about twice as
        fast as torch's CSR kernel), written into the state's own buffer; on the grid, one multiplication by
        :math:`\tfrac12\beta/g` instead of :math:`\tfrac12\beta` and then :math:`1/g`, with the restart
        scaled by :math:`1/g`. Both agree exactly: :math:`1/g` is a power of two, and scaling by a power
        of two commutes with float64 rounding (a value small enough to be subnormal rounds to 0 on the
        grid either way). The noise is drawn as before: one call of the sampler (or of the float
        stream) per step, for all :math:`NC` entries, so a seeded release is unchanged.

        Two stages: this call makes every buffer (the operator, the state, the float stream, the
        sampler's workspace), noise-free, and returns the steps as a function to call once the
        release is charged; so an allocation failure raises before the charge."""
        beta = 1.0 - self.alpha
        on_cpu = s0.device.type == "cpu"
        crow, col = graph  # the validated graph's CSR arrays: row i holds i's neighbours
        adj = csr_matrix(crow, col, unit_values(col.numel(), device=col.device))  # ones never stored
        deg = crow.diff().to(torch.float64)
        if on_cpu:
            adj = with_int32_indices(adj)
        deg_inv = inverse_degree(deg).unsqueeze(-1)
        upper = (self.eta * deg).unsqueeze(-1)  # f clips entry i to [0, eta d_i]
        exempt = self.personalized and seeds is not None  # the seed's own entry is not clipped from above
        scale = 1.0 if grid is None else 1.0 / grid.granularity  # exact: a power of two
        factor = 0.5 * beta * scale
        if seeds is not None:
            cols = torch.arange(seeds.numel(), device=seeds.device)
            restart, seed_restart = None, (1.0 - beta) * scale  # one-hot: add (1 - beta) at (seed_c, c) only
        else:
            restart = ((1.0 - beta) * s0).mul_(scale)
        noise = TwoLaplaceStream(s0.shape, self.noise_scale, device=s0.device, generator=self.generator) \
            if self.noise_scale > 0 and grid is None else None
        neighbours = CsrProduct(adj, unit_values=True)  # A (D^-1 f(s)): the C kernel where it runs, the same sums
        state = s0.clone()
        xc = torch.empty_like(state)
        scaled = torch.empty_like(state)
        if grid is not None:
            sampler.reserve(state.numel(), state.device, dtype=state.dtype, granularity=grid.granularity)

        @torch.no_grad()
        def run() -> Tensor:
            s = state
            for _ in range(self.num_iterations):
                if exempt:
                    seed_vals = s[seeds, cols].clamp_(min=0.0)
                clamp_and_scale_rows(s, upper, deg_inv, xc, scaled)  # f(s), and D^-1 f(s) (by the source degree)
                if exempt:
                    xc[seeds, cols] = seed_vals
                    scaled[seeds, cols] = seed_vals * deg_inv[seeds, 0]  # the same product torch.mul forms
                # (beta/2) (I + A D^-1) f(s), over g on the grid, rounded as s.add_(xc).mul_(factor) would round it;
                # s was read into xc above: its buffer takes the result
                s = neighbours(scaled, out=s, add=xc, scale=factor)
                if restart is None:
                    s[seeds, cols] += seed_restart
                else:
                    s.add_(restart)
                if grid is not None:  # s <- g (round(s / g) + K), K = round(xi_1 + xi_2) in grid steps, exact
                    sampler.add_to_grid_(s, grid.granularity, source, on_scale=True)  # float64 (exact below 2^53 g)
                elif noise is not None:
                    s.add_(noise.sample())  # xi_1 + xi_2, fresh at every step
            return s

        return run

    def __repr__(self) -> str:
        target = "" if self.epsilon is None else f", epsilon={self.epsilon:g}, delta={self.delta:g}"
        return (f"{self.__class__.__name__}(alpha={self.alpha:g}, num_iterations={self.num_iterations}, "
                f"eta={self.eta:g}, noise_scale={self.noise_scale:.6g}{target}, personalized={self.personalized}, "
                f"unit={self._release_unit!r}, sampler={self.sampler!r}, cached={self.cached}"
                + ("" if self.column_block is None else f", column_block={self.column_block}") + ")")

    def _release_settings(self) -> dict[str, Any]:
        """The settings a cached release is valid for (a saved one loads only into equal settings)."""
        return {"alpha": self.alpha, "num_iterations": self.num_iterations, "eta": self.eta,
                "noise_scale": self.noise_scale, "epsilon": self.epsilon, "delta": self.delta,
                "personalized": self.personalized, "epsilon_columns": self.epsilon_columns,
                "output_projection": self.output_projection, "sampler": self.sampler,
                "granularity": self._granularity, "grid_tolerance": self.grid_tolerance}
