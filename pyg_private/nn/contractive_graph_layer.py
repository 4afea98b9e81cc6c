r"""The contractive graph layer of CARIBOU: K perturbed hops with a convergent privacy bound."""
from __future__ import annotations

import math
from typing import Any, Callable, Literal, Optional

import torch
from torch import Tensor
from torch_geometric.typing import Adj
from torch_geometric.utils import scatter

from ..accounting import PrivacyAccountant, PrivacyEvent, Unit, charge, gdp_event
from ..accounting.contractive import (
    contraction_factor,
    contractive_mu,
    contractive_noise_multiplier,
    edge_sensitivity,
)
from ..accounting.validation import check_non_negative, check_positive_int
from ..utils.adjacency import normalized_adjacency_csr, validated_csr
from ..utils.csr_product import CsrProduct
from ..utils.degree_bounds import (
    check_declared_bounds,
    floored_normalized_adjacency_csr,
    present_nodes,
    universe_node_sensitivity,
)
from ..mechanisms._noise import float_generator
from ..sampling.grid import DEFAULT_GRID_TOLERANCE
from ..sampling.words import RandomSource, resolve_secure_mode
from ..mechanisms.sampler_options import check_grid_tolerance, check_sampler_options
from ._call_checks import reject_bipartite, reject_channel_counts, reject_edge_weight, reject_grad_input
from ._grid_gaussian import add_grid_gaussian_, reserve_grid_gaussian
from ._grid_gaussian import plan_grid as plan_hop_grid
from ._ppr_release import resolve_noise
from ._release_cache import PersistentRelease, _same
from ._sparse_propagation import SparsePropagation

__all__ = ["ContractiveGraphLayer"]

Level = Literal["edge", "node"]
Accounting = Literal["convergent", "linear"]


class ContractiveGraphLayer(PersistentRelease, SparsePropagation):
    r"""Perturbed contractive message passing (PCMP) of CARIBOU, from
    `"Convergent Privacy Framework with Contractive GNN Layers for Multi-hop
    Aggregations" <https://arxiv.org/abs/2506.22727>`_ (Zheng et al. 2025), Eq. 4 and
    Algorithm 1 (with its line 17 read as projecting :math:`\mathbf{X}^{(k+1)}` and zero-mean noise):

    .. math::
        \mathbf{X}^{(k+1)} = \Pi\Big(C_L\big(\alpha_1 \hat{\mathbf{A}} \mathbf{X}^{(k)}
            + (1 - \alpha_1)\,\mathrm{Mean}(\mathbf{X}^{(k)})\big) + \beta\,\mathbf{X}^{(0)}
            + \mathbf{Z}^{(k)}\Big), \qquad k = 0, \dots, K-1,

    with :math:`\hat{\mathbf{A}} = \tilde{\mathbf{D}}^{-1/2}(\mathbf{A} + \mathbf{I})\tilde{\mathbf{D}}^{-1/2}`,
    :math:`\tilde{\mathbf{D}} = \mathbf{D} + \mathbf{I}` (:math:`\mathbf{D}` the degrees **without**
    self-loops), the **global** node mean (per graph with ``batch``), fresh Gaussian noise
    :math:`\mathbf{Z}^{(k)} \sim \mathcal{N}(0, (\sigma\Delta)^2)` on every entry and :math:`\Pi` the projection of every row onto the unit ball (a clip, not a
    normalisation). :math:`\mathbf{X}^{(0)}` is clipped into the ball first. Only
    :math:`\mathbf{X}^{(K)}` is returned (detached); no intermediate hop leaves the layer.

    **Privacy.** :math:`\Delta` is the sensitivity of one hop at the layer's ``level``: Eq. 6
    (edge; proven safe, including the neighbour rows the paper's proof of Theorem 8 omits) or,
    at node level, :func:`~pyg_private.utils.degree_bounds.universe_node_sensitivity` (a
    corrected Eq. 8 for a fixed node universe, see below). It is computed from **public bounds
    you declare**, never read off the private graph. With contraction :math:`C_L < 1` the K hops
    are :math:`\mu`-GDP with :math:`\mu = \sqrt{\rho_K(C_L)}/\sigma` (Theorem 6 / Cor. 10,
    :math:`\rho_K \le K`, bounded as :math:`K \to \infty`); each forward registers that one
    event on unit ``level`` before any noise is drawn. ``accounting="linear"`` records the
    K-fold composition :math:`\mu = \sqrt{K}/\sigma` instead, to show the saving. The
    guarantee covers one run: every new forward composes, except cached ones.

    **Domain of the guarantee: the declared bounds, checked.** The guarantee holds between
    neighbouring graphs of the set the declared bounds define, and every forward checks its
    input against them **before** anything is charged or drawn, raising a ``ValueError`` that
    names the bound, the rule and the fix. Degrees :math:`d_u` are counted without self-loops.

    * ``level="edge"`` (one undirected edge added or removed): Eq. 6 with :math:`D` =
      ``min_degree`` needs every degree of the graph *without* the toggled edge to be
      :math:`\ge D`. The input may contain that edge, so the rule is
      :math:`D \le \min_u d_u - 1`, and :math:`D = 0` when a node is isolated (e.g. Cora,
      with 485 nodes of degree 1, admits only 0). ``min_degree=0`` uses the fallback
      :math:`\Delta = \sqrt2\,\alpha_1 C_L` and accepts every graph.
    * ``degree_floor=True`` (edge level) normalises by :math:`\max(d_u, D) + 1` instead of
      :math:`d_u + 1` and needs no check: Eq. 6 with :math:`D` then holds for **every** graph,
      as clipping makes a norm bound hold (proof in
      :func:`~pyg_private.utils.degree_bounds.floored_normalized_adjacency_csr`). On graphs
      whose degrees are all :math:`\ge D` it is the plain normalisation, bit for bit.
    * ``level="node"``: see the node-level paragraph; ``x`` must have exactly ``num_nodes``
      rows, every degree must be :math:`\le` ``max_degree``, and the ``min_degree`` rule
      applies to the present nodes (removing a node lowers its neighbours' degrees by one).

    The rule makes the bound hold *around* every accepted input: each graph one edge (or one
    node) away from it satisfies the hypothesis of the sensitivity bound, so the noise covers
    the difference to all of them. The check is itself data-dependent: raising reveals that
    the private graph lies outside the declared domain, and a neighbour of an accepted graph
    may be refused (that refusal is the bit it reveals). That is acceptable because the domain
    is public (you declared it) and the guarantee is stated over it; the check makes a false
    declaration, which would otherwise silently void the guarantee, fail loudly. The error
    names no value of the graph. ``min_degree=0`` and the degree floor accept every graph and
    avoid even that bit.

    **Node level: a fixed, public node universe.** Under node-level neighbours (one node added
    or removed with its edges and features), one row per node would reveal presence through the
    number of rows. The layer therefore works on a fixed universe of ``num_nodes`` nodes
    (exactly ``x.size(0)``; ``batch`` is refused): an **absent** node is a zero row of ``x``
    and ``x0`` with no edges (a present node with zero features and no edge is the same
    input), and the output always has ``num_nodes`` rows, so presence is only seen through
    the noisy values. Removing a node turns it into such a row; the mean is
    taken over the universe, so it cancels between neighbours, and no lower bound on the node
    count is needed. ``max_degree`` must hold (bound the degrees beforehand), and
    :math:`\Delta` covers the new node's own row, its neighbours and their neighbours, and the
    first hop's different :math:`\mathbf{X}^{(0)}`. Node-level privacy also needs the encoder
    that produced ``x`` and any head trained on the output to be private (DP-SGD over the
    present nodes, registered in the same accountant); the layer only accounts for its own
    release (see :func:`~pyg_private.models.run_caribou`).

    Give ``noise_multiplier`` :math:`\sigma` (noise std :math:`\sigma\Delta`) or
    ``epsilon`` and ``delta`` (calibrated through the exact GDP conversion; the
    multiplier is ``layer.noise_multiplier``). ``noise_multiplier=0`` is the non-private
    reference: the same hops without noise, nothing charged, no accountant accepted (the
    declared bounds are still checked).

    **Floating-point safety.** With ``sampler="safe"`` (the default) every hop's noisy value is
    released on a power-of-two grid :math:`g` (``layer.granularity`` after a forward) with the
    Gaussian noise rounded to it and sampled exactly from integers (see
    :mod:`pyg_private.sampling.grid`), so no value is impossible under a neighbouring graph. A hop
    then reads :math:`\mathbf{Y}^{(k)} = R(T(\mathbf{X}^{(k)})) + \mathbf{Z}^{(k)}` with :math:`R`
    the rounding and :math:`\mathbf{X}^{(k+1)} = \Pi(R(\mathbf{Y}^{(k)}))` a post-processing. Between
    two neighbouring graphs the map :math:`\mathbf{Y}^{(k)} \mapsto R(T(\Pi(R(\mathbf{Y}^{(k)}))))`
    satisfies :math:`\|\phi_G(u) - \phi_{G'}(u')\| \le C_L\|u - u'\| + \Delta + (1 + C_L)\sqrt{NF}\,g`,
    the only property of a hop the shifted-divergence proof of the convergent bound uses (contraction
    and data processing), so the bound holds with :math:`\Delta` replaced by
    :math:`\Delta' = \Delta + (1 + C_L)\sqrt{NF}\,g`, and the noise std is :math:`\sigma\Delta'`:
    :math:`\mu` is unchanged. :math:`g` is chosen per forward from public sizes so that
    :math:`\Delta' \le (1 + 2^{-16})\Delta` (``grid_tolerance``). ``sampler="float"`` keeps the
    floating-point Gaussian sampler (open to floating-point attacks; benchmarks and audits only).
    ``secure_mode=True`` draws every random bit from the operating system's CSPRNG. The sensitivity
    bounds are those of exact arithmetic: the rounding error of the propagation itself (relative
    :math:`\approx 10^{-7}` per hop in float32, :math:`10^{-16}` in float64) is not accounted.

    **Precision and input forms.** The hops (noise included) run in float32 for float32
    features and in float64 otherwise; the projection is onto the ball of radius
    :math:`1/(1 + (F + 4)u)`, so no row ends above norm 1 in either. The fastest graph form is a ``torch.sparse`` CSR
    adjacency (or a ``SparseTensor``) that already is the undirected simple graph with
    sorted columns: it is validated with one sort of its column indices and used as it is;
    ``edge_index`` and every other form are validated and converted on each call. The node
    count always comes from ``x``: an ``edge_index`` id ``>= x.size(0)`` or a sparse
    adjacency of another size raises.

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
    of the public inputs (at edge level the features ``x``, ``x0`` and ``batch``, public under
    edge-level neighbours; at node level only their sizes and dtype)), so ``load_state_dict`` into a
    layer built with the same settings returns it without a new charge and without touching the
    accountant (restore the accountant from its own ``state_dict``); a state made under other settings
    raises ``ValueError``. A release restored from a state that no accountant recorded is registered
    with this layer's accountant when it is first reused. The state never holds the graph or any
    function of it but the release: a digest of the graph would let anyone holding the file test a
    guessed edge with certainty. So a loaded release is bound to the first graph it is used with
    (matching public inputs); call ``forget_release()`` before using a loaded model on another
    graph.

    **Module protocols** (as for every release layer): ``copy.deepcopy`` shares the accountant and the
    generator and keeps the cache (its in-memory key, the graph, shared with the original, not
    duplicated); ``pickle`` and ``torch.save(module)`` keep the release without the
    graph and drop the generator (its state would let the file's holder recompute the noise);
    ``torch.compile`` works, the release running eagerly (``torch.compiler.disable``);
    ``torch.jit.script`` raises on purpose: the release registers with the Python accountant and draws
    exact noise in Python. Script the rest of the model on the cached release instead.

    Args:
        K (int): number of hops. (default: :obj:`1`)
        contraction (float): :math:`C_L \in [0, 1)`.
        alpha1 (float): weight of the graph term :math:`\alpha_1 \in [0, 1]`
            (:math:`\alpha_2 = 1 - \alpha_1` weights the mean). (default: :obj:`1.0`)
        beta (float): weight :math:`\beta \ge 0` of the initial residual. (default: :obj:`0.0`)
        level (str): ``"edge"`` or ``"node"``. (default: ``"edge"``)
        min_degree (int): public lower bound :math:`D` on the degrees (without self-loops) of
            every graph without the toggled edge or node; checked as above.
        max_degree (int, optional): public upper bound on every degree (node level).
        num_nodes (int, optional): the public size of the node universe (node level).
        degree_floor (bool): normalise by :math:`\max(d_u, D)` so that ``min_degree`` holds by
            construction (edge level only). (default: :obj:`False`)
        noise_multiplier (float, optional): :math:`\sigma`.
        epsilon, delta (float, optional): target instead of ``noise_multiplier``.
        accounting (str): ``"convergent"`` or ``"linear"``. (default: ``"convergent"``)
        accountant (PrivacyAccountant, optional): charged at every new release.
        cached (bool): reuse the release for the same graph and inputs (the paper's
            setting: the aggregation is computed once); see above. (default: :obj:`True`)
        symmetrize (bool): symmetrise a directed ``edge_index`` instead of raising.
        generator (torch.Generator, optional): reproducibility only; voids the guarantee.
        sampler (str): ``"safe"`` or ``"float"`` (see above). (default: ``"safe"``)
        secure_mode (bool, optional): every random bit from a CSPRNG keyed from the OS (``None``: the
            process-wide default of :func:`pyg_private.mechanisms.set_secure_mode`).
        grid_tolerance (float): bound on the grid's sensitivity inflation, relative to
            :math:`\Delta`. (default: :math:`2^{-16}`)

    **Heterogeneous graphs.** A relation within one node type (``HeteroConv`` and ``to_hetero`` pass
    it as a single ``x``) is a square graph like any other. A bipartite relation (``x = (x_src,
    x_dst)``, or a non-square ``EdgeIndex`` or sparse adjacency) is refused with the reason before
    anything is charged: the guarantee is for hops of one square adjacency iterated on one node set,
    and a second hop of a bipartite relation is not defined. Use :class:`GAPAggregation` per
    bipartite relation.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)`, ``edge_index``
          :math:`(2, |\mathcal{E}|)` (or ``SparseTensor`` / ``torch.sparse``), optional
          ``x0`` :math:`(|\mathcal{V}|, F)` and ``batch`` :math:`(|\mathcal{V}|)` (edge level)
        - **output:** :math:`(|\mathcal{V}|, F)`; at node level :math:`|\mathcal{V}|` = ``num_nodes``
    """

    def __init__(self, K: int = 1, contraction: float = 0.9, alpha1: float = 1.0, beta: float = 0.0, *,
                 level: Level = "edge", min_degree: Optional[int] = None, max_degree: Optional[int] = None,
                 num_nodes: Optional[int] = None, degree_floor: bool = False, noise_multiplier: Optional[float] = None,
                 epsilon: Optional[float] = None, delta: Optional[float] = None,
                 accounting: Accounting = "convergent", accountant: Optional[PrivacyAccountant] = None,
                 cached: bool = True, symmetrize: bool = False, generator: Optional[torch.Generator] = None,
                 name: str = "contractive_graph_layer", sampler: str = "safe", secure_mode: Optional[bool] = None,
                 grid_tolerance: float = DEFAULT_GRID_TOLERANCE) -> None:
        reject_channel_counts("ContractiveGraphLayer", K, contraction, parameters="(K, contraction, alpha1, beta)",
                              example="ContractiveGraphLayer(K=2, contraction=0.9, min_degree=1, epsilon=1.0, "
                                      "delta=1e-5)")
        super().__init__()
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, generator)
        self.grid_tolerance = check_grid_tolerance(grid_tolerance)
        #: The grid of the last release's hops (``None`` before it, without noise, or with the float sampler).
        self.granularity: Optional[float] = None
        self.K = check_positive_int(K, "K")
        self.contraction = check_non_negative(contraction, "contraction")
        if not self.contraction < 1.0:
            raise ValueError(f"`contraction` (C_L) must lie in [0, 1); got {contraction!r}")
        self.alpha1 = check_non_negative(alpha1, "alpha1")
        if self.alpha1 > 1.0:
            raise ValueError(f"`alpha1` must lie in [0, 1]; got {alpha1!r}")
        self.beta = check_non_negative(beta, "beta")
        if level not in ("edge", "node"):
            raise ValueError(f"`level` must be 'edge' or 'node'; got {level!r}")
        self.level = level
        if accounting not in ("convergent", "linear"):
            raise ValueError(f"`accounting` must be 'convergent' or 'linear'; got {accounting!r}")
        self.accounting = accounting
        if min_degree is None:
            raise ValueError("`min_degree` is required: a public lower bound on every node's degree, at most the "
                             "smallest degree minus one (0 if nodes of degree one or isolated nodes are possible); "
                             "it must not be read off the private graph")
        if not isinstance(degree_floor, bool):
            raise TypeError(f"`degree_floor` must be True or False; got {degree_floor!r}")
        if degree_floor and level == "node":
            raise ValueError("`degree_floor` is proven for edge-level privacy only; at node level declare "
                             "`min_degree` (0 when nodes of degree one or isolated nodes are possible)")
        self.degree_floor = degree_floor
        if level == "edge":
            self.sensitivity = edge_sensitivity(contraction=self.contraction, alpha1=self.alpha1,
                                                min_degree=min_degree)
            self.min_degree = int(min_degree)
            self.max_degree, self.num_nodes = max_degree, num_nodes
        else:
            if max_degree is None or num_nodes is None:
                raise ValueError("node level needs the public bounds `max_degree` (every degree) and `num_nodes` "
                                 "(the size of the fixed node universe)")
            self.sensitivity = universe_node_sensitivity(contraction=self.contraction, alpha1=self.alpha1,
                                                         alpha2=1.0 - self.alpha1, beta=self.beta,
                                                         min_degree=min_degree, max_degree=max_degree,
                                                         num_nodes=num_nodes)
            self.min_degree, self.max_degree, self.num_nodes = int(min_degree), int(max_degree), int(num_nodes)
        self.noise_multiplier, self.epsilon, self.delta = resolve_noise(
            noise_multiplier, epsilon, delta,
            lambda eps, d: contractive_noise_multiplier(epsilon=eps, delta=d, num_hops=self.K,
                                                        contraction=self.contraction, accounting=self.accounting),
            scale_name="noise_multiplier", allow_zero=True, accountant=accountant,
        )
        self.accountant = accountant
        self.cached = cached
        self.symmetrize = symmetrize
        self.generator = generator
        self.name = name

    @property
    def noise_std(self) -> float:
        """Standard deviation of the Gaussian noise of every hop, :math:`\\sigma\\Delta`."""
        return self.noise_multiplier * self.sensitivity

    @property
    def mu(self) -> float:
        """GDP :math:`\\mu` of one forward under the layer's accounting (infinite without noise)."""
        if self.noise_multiplier == 0:
            return math.inf
        return contractive_mu(noise_multiplier=self.noise_multiplier, num_hops=self.K, contraction=self.contraction,
                              accounting=self.accounting)

    def event(self, grid: Optional[tuple[float, float]] = None) -> PrivacyEvent:
        r"""The event one new release registers (``grid``: the forward's granularity and inflated
        sensitivity, recorded in the parameters; :math:`\mu` does not depend on them)."""
        extra = {} if grid is None else {"granularity": grid[0], "grid_sensitivity": grid[1]}
        return gdp_event(
            unit=Unit(self.level), mu=self.mu, name=self.name,
            mechanism="contractive_graph_layer" if self.accounting == "convergent" else "contractive_graph_layer_linear",
            params={"K": self.K, "contraction": self.contraction, "alpha1": self.alpha1, "beta": self.beta,
                    "sensitivity": self.sensitivity, "noise_multiplier": self.noise_multiplier,
                    "rho_K": contraction_factor(self.K, self.contraction), "min_degree": self.min_degree,
                    "degree_floor": self.degree_floor, "max_degree": self.max_degree, "num_nodes": self.num_nodes,
                    "accounting": self.accounting, "sampler": self.sampler, **extra},
        )

    @torch.compiler.disable  # the release runs eagerly: see "Module protocols"
    def forward(self, x: Tensor, edge_index: Adj, x0: Optional[Tensor] = None,
                batch: Optional[Tensor] = None) -> Tensor:
        """Run the K perturbed hops and return :math:`\\mathbf{X}^{(K)}` (detached, input dtype)."""
        reject_bipartite("ContractiveGraphLayer", x, edge_index)
        if not isinstance(x, Tensor) or x.dim() != 2:
            raise ValueError("`x` must be a node feature matrix of shape [N, F]")
        reject_edge_weight("ContractiveGraphLayer", "x0", x0, "the initial features [N, F] of the residual")
        reject_grad_input("ContractiveGraphLayer", x, self.training)
        reject_grad_input("ContractiveGraphLayer", x0, self.training)
        if not _all_finite(x):
            raise ValueError("`x` contains NaN or infinite values")
        n = x.size(0)
        x0 = x if x0 is None else x0
        if not isinstance(x0, Tensor) or x0.shape != x.shape:
            raise ValueError(f"`x0` must have the shape of `x`, {tuple(x.shape)}")
        if x0 is not x and not _all_finite(x0):
            raise ValueError("`x0` contains NaN or infinite values")
        if batch is not None and (batch.dim() != 1 or batch.numel() != n):
            raise ValueError(f"`batch` must have shape [{n}]")
        if batch is not None and self.level == "node":
            raise ValueError("`batch` is not supported at node level: the release is over one fixed node universe "
                             "of `num_nodes` nodes (run one graph per call)")
        graph = self._read_graph(edge_index, n)
        self._check_bounds(graph, x, x0)  # the declared domain, before any charge or noise
        out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        key = self._release_key(graph, x, x0, batch)
        reused = self._cached_release(*key, device=x.device, dtype=out_dtype)
        if reused is not None:  # the cached release: no new charge, no noise
            return reused

        grid, source = self.plan_grid(n, x.size(1)), None  # before any charge
        if grid is not None:
            source = RandomSource(x.device, generator=self.generator,
                                  secure=resolve_secure_mode(self.secure_mode, self.generator))
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float64  # the hops' precision
        h0 = x.detach().to(dtype)
        # every buffer (operator, hops, noise, the sampler's workspace) before the charge: a failure raises first
        run = self._perturbation(*graph, h0, h0 if x0 is x else x0.detach().to(dtype), batch, grid, source)
        event = charge(self.accountant, self.event(grid), self) if self.noise_multiplier > 0 else None  # first
        self.granularity = None if grid is None else grid[0]
        out = run()
        self._keep_release(out, *key, event=event, granularity=self.granularity)
        return out.to(out_dtype)

    def plan_grid(self, num_nodes: int, channels: int) -> Optional[tuple[float, float]]:
        """``(granularity, inflated per-hop sensitivity)`` of a safe release on ``num_nodes`` x
        ``channels`` (public sizes only; raises before anything is charged), ``None`` without noise
        or with ``sampler="float"``. The distributed wrapper plans with the same method."""
        if not (self.noise_std > 0 and self.sampler == "safe"):
            return None
        # entries before noise: |C_L(a1 A_hat h + a2 mean)| + beta |x0| <= C_L (a1 sqrt(N) + a2) + beta
        bound = self.contraction * (self.alpha1 * math.sqrt(num_nodes) + 1.0 - self.alpha1) + self.beta
        return plan_hop_grid(std_per_sensitivity=self.noise_multiplier, sensitivity=self.sensitivity,
                             dim=num_nodes * channels, value_bound=bound, inflation_factor=1.0 + self.contraction,
                             tolerance=self.grid_tolerance)

    @property
    def _release_unit(self) -> str:
        return self.level

    def _release_settings(self) -> dict[str, Any]:
        """The settings a cached release is valid for (a saved one loads only into equal settings)."""
        return {"K": self.K, "contraction": self.contraction, "alpha1": self.alpha1, "beta": self.beta,
                "level": self.level, "min_degree": self.min_degree, "max_degree": self.max_degree,
                "num_nodes": self.num_nodes, "degree_floor": self.degree_floor, "accounting": self.accounting,
                "noise_multiplier": self.noise_multiplier, "epsilon": self.epsilon, "delta": self.delta,
                "sampler": self.sampler, "grid_tolerance": self.grid_tolerance}

    def _release_key(self, graph: tuple[Tensor, Tensor], x: Tensor, x0: Tensor,
                     batch: Optional[Tensor]) -> tuple[tuple, tuple, tuple]:
        """``(public, private, meta)``: what the cache keys on. Only ``public`` and ``meta`` are
        fingerprinted into a saved state; the graph, and at node level the features, never are."""
        n, f = x.shape
        x0_key = None if x0 is x or _same(x0, x) else x0
        meta = (n, f, str(x.dtype), self.level)
        if self.level == "edge":  # the features are public under edge-level neighbours
            return (x, x0_key, batch), graph, meta
        return (), (*graph, x, x0_key), meta  # node level: a node's features are private too

    def _read_graph(self, edge_index: Adj, n: int) -> tuple[Tensor, Tensor]:
        """``(crow, col)`` of the validated undirected simple graph on the ``n`` nodes of ``x``
        (never the largest id of ``edge_index``: an id ``>= n`` raises)."""
        return validated_csr(edge_index, n, symmetrize=self.symmetrize, index_dtype=None)

    def _check_bounds(self, graph: tuple[Tensor, Tensor], x: Tensor, x0: Tensor) -> None:
        """Raise unless the input lies in the domain of the declared bounds (see the class notes)."""
        degree = graph[0].diff()
        present = present_nodes(degree, x, None if x0 is x else x0) if self.level == "node" else None
        check_declared_bounds(degree, level=self.level, min_degree=self.min_degree, degree_floor=self.degree_floor,
                              max_degree=self.max_degree, num_nodes=self.num_nodes, present=present)

    def _normalized_adjacency(self, crow: Tensor, col: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        r""":math:`C_L\alpha_1\hat{\mathbf{A}}` as ``(adj, self_loop)``: ``adj @ h + self_loop * h``,
        with the degree floor when the layer has one."""
        weight = self.contraction * self.alpha1
        if self.degree_floor and self.min_degree > 0:
            return floored_normalized_adjacency_csr(crow, col, floor=self.min_degree, weight=weight, dtype=dtype)
        return normalized_adjacency_csr(crow, col, weight=weight, dtype=dtype)

    def _hop(self, adj: Tensor, self_loop: Tensor, h: Tensor, residual: Optional[Tensor],
             batch: Optional[Tensor], out: Optional[Tensor] = None, product: Optional[CsrProduct] = None) -> Tensor:
        r"""One contractive map before noise and projection,
        :math:`C_L(\alpha_1\hat{\mathbf{A}}h + \alpha_2\mathrm{Mean}(h)) + \beta\mathbf{X}^{(0)}`
        (``residual`` is :math:`\beta\mathbf{X}^{(0)}` or ``None``), into ``out`` (a buffer of
        ``h``'s shape, never ``h``) or a new tensor; ``product`` computes ``adj @ h`` (the same values
        as the message passing's sparse product)."""
        if self.alpha1 > 0:
            if out is None:
                out = self.propagate(adj, x=h)
            else:  # the product written into the spare buffer: no N x F temporary per hop
                (product or CsrProduct(adj))(h, out=out)
            out.addcmul_(h, self_loop)
        else:
            out = torch.zeros_like(h) if out is None else out.zero_()
        if self.alpha1 < 1.0:
            out.add_(_node_mean(h, batch), alpha=self.contraction * (1.0 - self.alpha1))
        if residual is not None:
            out.add_(residual)
        return out

    def _perturbed_hops(self, crow: Tensor, col: Tensor, x: Tensor, x0: Tensor, batch: Optional[Tensor],
                        grid: Optional[tuple[float, float]] = None, source: Optional[RandomSource] = None) -> Tensor:
        """The K perturbed hops: :meth:`_perturbation`, run at once."""
        return self._perturbation(crow, col, x, x0, batch, grid, source)()

    @torch.no_grad()
    def _perturbation(self, crow: Tensor, col: Tensor, x: Tensor, x0: Tensor, batch: Optional[Tensor],
                      grid: Optional[tuple[float, float]] = None,
                      source: Optional[RandomSource] = None) -> Callable[[], Tensor]:
        """Two stages: make every buffer of the hops (the normalised operator, the two hop buffers,
        the noise buffer or the sampler's workspace; noise-free), then return the K perturbed hops as
        a function to call once the release is charged: an allocation failure raises before the charge."""
        # C_L alpha1 A_hat h = adj @ h + self_loop * h, with A_hat = S (A + I) S and S = (D + I)^-1/2
        adj, self_loop = self._normalized_adjacency(crow, col, x.dtype)
        h0 = _clip_rows(x)  # the chain starts inside the ball
        residual = self.beta * (h0 if x0 is x else _clip_rows(x0)) if self.beta > 0 else None
        std = self.noise_std
        noise = torch.empty_like(x) if std > 0 and grid is None else None
        generator = float_generator(self.generator, x.device) if noise is not None else None  # never the global RNG
        project = (lambda v: _clip_rows(v, out=v, slack_dtype=x.dtype))  # noqa: E731
        first_spare = torch.empty_like(h0)  # two N x F buffers in turn: h, and the next hop written over the older one
        product = CsrProduct(adj)  # adj @ h: the C kernel where it runs, the same values otherwise
        if grid is not None:
            reserve_grid_gaussian(first_spare, self.noise_multiplier * grid[1], grid[0])

        @torch.no_grad()
        def run() -> Tensor:
            h, spare = h0, first_spare
            for _ in range(self.K):
                out = self._hop(adj, self_loop, h, residual, batch, out=spare, product=product)
                spare = h
                if grid is not None:  # safe: on the grid, exact noise, projected in float64 row blocks
                    h = add_grid_gaussian_(out, self.noise_multiplier * grid[1], grid[0], source, post=project)
                    continue
                if noise is not None:  # one draw of h's shape per hop, into the same buffer
                    out.add_(torch.randn(h.shape, dtype=h.dtype, device=h.device, generator=generator, out=noise),
                             alpha=std)
                h = _clip_rows(out, out=out)
            return h

        return run

    def __repr__(self) -> str:
        target = "" if self.epsilon is None else f", epsilon={self.epsilon:g}, delta={self.delta:g}"
        bounds = f"min_degree={self.min_degree}" + (", degree_floor=True" if self.degree_floor else "")
        if self.level == "node":
            bounds += f", max_degree={self.max_degree}, num_nodes={self.num_nodes}"
        return (f"{self.__class__.__name__}(K={self.K}, contraction={self.contraction:g}, alpha1={self.alpha1:g}, "
                f"beta={self.beta:g}, level={self.level!r}, {bounds}, noise_multiplier={self.noise_multiplier:.6g}"
                f"{target}, accounting={self.accounting!r}, unit={self._release_unit!r}, sampler={self.sampler!r}, "
                f"cached={self.cached})")


def _clip_rows(x: Tensor, out: Optional[Tensor] = None, slack_dtype: Optional[torch.dtype] = None) -> Tensor:
    """Project every row onto the ball of radius :math:`1/(1 + (F + 4)u)` (``u`` the unit
    roundoff of ``slack_dtype``, default ``x``'s: pass the dtype the rows are cast to next; in place
    with ``out=x``).

    An exact projection onto a slightly smaller ball: still 1-Lipschitz and continuous (the
    privacy analysis needs both), and no rounding can leave a row of norm above 1. Rows whose
    norm overflows are first divided by their largest entry, so they land on the sphere,
    not at 0.
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    if not bool(torch.isfinite(norm).all()):  # finite rows too large to square: rescale first
        x = x / x.abs().amax(dim=-1, keepdim=True).clamp_min(1.0)
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    slack = 1.0 + (x.size(-1) + 4) * torch.finfo(slack_dtype or x.dtype).eps / 2
    return torch.div(x, norm.mul_(slack).clamp_min_(1.0), out=out)


def _all_finite(x: Tensor) -> bool:
    """No NaN or infinity in ``x``: for floats one reduction, whose minimum and maximum carry any."""
    if not x.is_floating_point() or x.numel() == 0:
        return bool(torch.isfinite(x).all())
    return bool(torch.isfinite(torch.stack(torch.aminmax(x))).all())


def _node_mean(x: Tensor, batch: Optional[Tensor]) -> Tensor:
    """The mean node embedding (of each graph with ``batch``), broadcast back to every node."""
    if batch is None:
        return x.mean(dim=0, keepdim=True).expand_as(x)
    return scatter(x, batch, dim=0, reduce="mean")[batch]
