r"""GAP's aggregation perturbation module: the multi-hop baseline CARIBOU is compared with."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor
from torch_geometric.typing import Adj

from ..accounting import PrivacyAccountant, PrivacyEvent, charge, gdp_event, gdp_mu
from ..mechanisms._noise import float_generator
from ..sampling.grid import DEFAULT_GRID_TOLERANCE
from ..sampling.words import RandomSource, resolve_secure_mode
from ..mechanisms.sampler_options import check_grid_tolerance, check_sampler_options
from ._call_checks import reject_grad_input
from ._grid_gaussian import add_grid_gaussian_, reserve_grid_gaussian
from ._grid_gaussian import plan_grid as plan_hop_grid
from ..accounting.validation import check_positive_int
from ..utils.adjacency import _csr as csr_matrix
from ..utils.csr_product import CsrProduct, unit_values
from ..utils.adjacency import bipartite_csr, bipartite_csr_matrix, validated_csr
from ._ppr_release import resolve_noise
from ._release_cache import PersistentRelease
from ._sparse_propagation import SparsePropagation

__all__ = ["GAPAggregation", "bipartite_sensitivity"]

EDGE_SENSITIVITY = math.sqrt(2.0)  # one undirected edge adds x_v to row u and x_u to row v, unit rows


def bipartite_sensitivity(num_src: int, num_dst: int) -> float:
    r"""The :math:`\ell_2` sensitivity of :math:`\mathbf{A}\,\mathrm{normalize}(\mathbf{X}_{src})` on a
    relation passed as a pair ``(x_src, x_dst)`` with ``num_src`` source and ``num_dst`` destination
    rows (public sizes), for one edge of the relation added or removed.

    An edge :math:`(s, d)` is one entry of :math:`\mathbf{A} \in \{0,1\}^{n_{dst} \times n_{src}}`: it
    moves row :math:`d` of the sum by the unit row :math:`\mathbf{x}_s` and no other row, so
    :math:`\Delta = 1`. When the two node sets have the same size the relation may be a **square**
    one passed as a pair (one node type, ``(x, x)``) whose undirected edge :math:`\{u, v\}` is stored
    as the two entries :math:`(u, v)` and :math:`(v, u)`: then two rows move and
    :math:`\Delta = \sqrt2`, GAP's homogeneous bound. The rule reads the public sizes only; with
    equal sizes it is merely conservative for a genuinely bipartite relation."""
    return 1.0 if int(num_src) != int(num_dst) else EDGE_SENSITIVITY


def _normalize_rows_(x: Tensor) -> Tensor:
    """``F.normalize(x, dim=-1)`` in place (the same values: each row over ``max(||row||, 1e-12)``)."""
    return x.div_(torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(1e-12))


class GAPAggregation(PersistentRelease, SparsePropagation):
    r"""Edge-level private multi-hop aggregation of GAP, from `"GAP: Differentially Private
    Graph Neural Networks with Aggregation Perturbation"
    <https://arxiv.org/abs/2203.00949>`_ (Sajadmanesh et al., USENIX Security 2023), the
    baseline of CARIBOU (Zheng et al. 2025, arXiv:2506.22727, Sec. 6):

    .. math::
        \mathbf{X}^{(k)} = \mathrm{normalize}\big(\mathbf{A}\mathbf{X}^{(k-1)} + \mathbf{Z}^{(k)}\big),
        \qquad \mathbf{Z}^{(k)} \sim \mathcal{N}(0, (\sigma\Delta)^2), \qquad k = 1, \dots, K,

    with sum aggregation over the neighbours, :math:`\mathbf{X}^{(0)}` normalised to unit
    rows and every row of every hop renormalised. **All hops are released**:
    the output is :math:`[\mathbf{X}^{(0)} \,\|\, \mathbf{X}^{(1)} \,\|\, \cdots \,\|\, \mathbf{X}^{(K)}]`.

    **Privacy.** With unit rows, adding or removing one undirected edge changes rows
    :math:`u` and :math:`v` of :math:`\mathbf{A}\mathbf{X}` by one unit vector each, so
    :math:`\Delta = \sqrt2` (GAP's sensitivity 1 counts one direction only). Each hop is a
    Gaussian mechanism on already released data, so the K hops compose linearly:
    one forward registers one :math:`\mu = \sqrt{K}/\sigma`-GDP event on unit ``"edge"``
    (the renormalisation is post-processing). Give ``noise_multiplier`` :math:`\sigma` or
    ``epsilon``/``delta`` (exact GDP calibration; ``layer.noise_multiplier``).
    ``noise_multiplier=0`` is the non-private reference (no noise, nothing charged, no
    accountant accepted).

    **Bipartite relations** (heterogeneous graphs: ``HeteroConv`` and ``to_hetero`` call the layer
    with ``x = (x_src, x_dst)`` for an edge type between two node types). One hop, sum aggregation
    of the unit source rows at the destinations, noise at the destinations:

    .. math::
        \mathbf{X}_{dst}^{(1)} = \mathrm{normalize}\big(\mathbf{A}\,\mathrm{normalize}(\mathbf{X}_{src})
        + \mathbf{Z}\big), \qquad \mathbf{A} \in \{0, 1\}^{N_{dst} \times N_{src}},

    returned as :math:`[\mathrm{normalize}(\mathbf{X}_{dst}) \,\|\, \mathbf{X}_{dst}^{(1)}]`. The unit is
    one edge of the relation: an edge :math:`(s, d)` moves row :math:`d` only, by the unit row
    :math:`\mathbf{x}_s`, so :math:`\Delta = 1` (:func:`bipartite_sensitivity`; :math:`\sqrt2` when the
    two node sets have the same public size, which covers a relation within one node type passed as a
    pair), and one forward is a :math:`\mu = 1/\sigma`-GDP event (the noise std is :math:`\sigma\Delta`).
    ``K`` must be 1 (a second hop of a bipartite relation is not defined: stack releases across
    relations instead). The graph is an ``edge_index`` ``[2, E]`` (sources in row 0), an ``EdgeIndex``
    of sparse size ``(N_src, N_dst)``, or the transposed adjacency ``adj_t`` ``[N_dst, N_src]`` as a
    ``SparseTensor`` or ``torch.sparse`` matrix, unweighted, each edge once; the sizes come from
    ``x_src`` and ``x_dst``. How the releases on the relations of one forward compose (sequentially
    within a node-type pair, in parallel across pairs) is :func:`~pyg_private.nn.compose_relations`'s.

    **No declared bound.** :math:`\Delta = \sqrt2` holds for every graph (sum aggregation of
    unit rows), so nothing is declared or checked. The node count, hence the output's shape,
    comes from ``x``: an ``edge_index`` id ``>= x.size(0)`` or a sparse adjacency of another
    size raises before anything is charged.

    **Floating-point safety.** With ``sampler="safe"`` (the default) each hop's noisy sum is
    released on a power-of-two grid :math:`g` (``layer.granularity``) with the Gaussian noise
    rounded to it and sampled exactly from integers (see :mod:`pyg_private.sampling.grid`):
    the Gaussian mechanism on the rounded sum, whose sensitivity
    :math:`\Delta' = \sqrt2 + \sqrt{NF}\,g \le (1 + 2^{-16})\sqrt2` sets the noise std
    :math:`\sigma\Delta'` (:math:`\mu` unchanged); the renormalisation is post-processing.
    ``sampler="float"`` keeps the floating-point sampler (benchmarks and audits only);
    ``secure_mode=True`` draws every random bit from the operating system's CSPRNG.

    **Caching and saving.** With ``cached=True`` (the default) the first forward is released and
    charged, and later forwards with the same graph and inputs return that release at no further cost; a
    different graph or input is a new, charged release. The release is paid data, not a parameter:
    :meth:`reset_parameters` (and ``torch_geometric.nn.inits.reset``) keeps it, ``forget_release()`` drops it;
    ``layer.double()``, ``layer.half()`` or ``layer.to(device)`` with the same inputs in that dtype or on
    that device reuse it (cast or moved: post-processing). It works under ``torch.no_grad()`` and
    ``torch.inference_mode()``.
    ``cached=False`` releases anew, with a new charge, on every call (audits, Monte Carlo studies). The
    cached release is part of ``state_dict()`` (entry ``_extra_state``: the noisy hops
    :math:`\mathbf{X}^{(1)}, \dots, \mathbf{X}^{(K)}`, its privacy event and whether an accountant recorded
    it, the layer's privacy settings, and a SHA-256 fingerprint of the features ``x`` (public under
    edge-level neighbours)); :math:`\mathbf{X}^{(0)} = \mathrm{normalize}(\mathbf{x})` is no release and
    is recomputed from the caller's ``x``, never stored. So ``load_state_dict`` into a layer
    built with the same settings returns it without a new charge and without touching the accountant
    (restore the accountant from its own ``state_dict``); a state made under other settings raises
    ``ValueError``. A release restored from a state that no accountant recorded is registered with this
    layer's accountant when it is first reused. The state never holds the graph or any function of it
    but the release: a digest of the graph would let anyone holding the file test a guessed edge with
    certainty. So a loaded release is bound to the first graph it is used with (matching public inputs);
    call ``forget_release()`` before using a loaded model on another graph.

    **Module protocols** (as for every release layer): ``copy.deepcopy`` shares the accountant and the
    generator and keeps the cache (its in-memory key, the graph, shared with the original, not
    duplicated); ``pickle`` and ``torch.save(module)`` keep the release without the
    graph and drop the generator (its state would let the file's holder recompute the noise);
    ``torch.compile`` works, the release running eagerly (``torch.compiler.disable``);
    ``torch.jit.script`` raises on purpose: the release registers with the Python accountant and draws
    exact noise in Python. Script the rest of the model on the cached release instead.

    Args:
        K (int): number of hops. (default: :obj:`1`)
        noise_multiplier (float, optional): :math:`\sigma` (noise std :math:`\sigma\Delta`).
        epsilon, delta (float, optional): target instead of ``noise_multiplier``.
        accountant (PrivacyAccountant, optional): charged at every new release.
        cached (bool): reuse the release for the same graph and features; see above.
            (default: :obj:`True`)
        symmetrize (bool): symmetrise a directed ``edge_index`` instead of raising.
        generator (torch.Generator, optional): reproducibility only; voids the guarantee.
        sampler (str): ``"safe"`` or ``"float"``. (default: ``"safe"``)
        secure_mode (bool, optional): every random bit from a CSPRNG keyed from the OS (``None``: the
            process-wide default).
        grid_tolerance (float): bound on the grid's sensitivity inflation relative to
            :math:`\Delta`. (default: :math:`2^{-16}`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)`, ``edge_index`` (or sparse adjacency);
          bipartite: :math:`((|\mathcal{V}_{src}|, F_{src}), (|\mathcal{V}_{dst}|, F_{dst}))`
        - **output:** :math:`(|\mathcal{V}|, (K + 1) F)`; bipartite: :math:`(|\mathcal{V}_{dst}|, F_{dst} + F_{src})`
    """

    def __init__(self, K: int = 1, *, noise_multiplier: Optional[float] = None, epsilon: Optional[float] = None,
                 delta: Optional[float] = None, accountant: Optional[PrivacyAccountant] = None, cached: bool = True,
                 symmetrize: bool = False, generator: Optional[torch.Generator] = None,
                 name: str = "gap_aggregation", sampler: str = "safe", secure_mode: Optional[bool] = None,
                 grid_tolerance: float = DEFAULT_GRID_TOLERANCE) -> None:
        super().__init__()
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, generator)
        self.grid_tolerance = check_grid_tolerance(grid_tolerance)
        #: The grid of the last release's hops (``None`` before it, without noise, or with the float sampler).
        self.granularity: Optional[float] = None
        self.K = check_positive_int(K, "K")
        self.noise_multiplier, self.epsilon, self.delta = resolve_noise(
            noise_multiplier, epsilon, delta, lambda eps, d: math.sqrt(self.K) / gdp_mu(epsilon=eps, delta=d),
            scale_name="noise_multiplier", allow_zero=True, accountant=accountant)
        self.sensitivity = EDGE_SENSITIVITY
        self.accountant = accountant
        self.cached = cached
        self.symmetrize = symmetrize
        self.generator = generator
        self.name = name

    @property
    def mu(self) -> float:
        """GDP :math:`\\mu` of one forward: K linearly composed hops."""
        return math.sqrt(self.K) / self.noise_multiplier if self.noise_multiplier > 0 else math.inf

    def event(self, grid: Optional[tuple[float, float]] = None, *, sensitivity: Optional[float] = None,
              bipartite: Optional[tuple[int, int]] = None) -> PrivacyEvent:
        r"""The event one new release registers (``grid``: the forward's granularity and inflated
        sensitivity, recorded in the parameters; :math:`\mu` does not depend on them). For a release
        on a bipartite relation, ``bipartite`` is ``(num_src, num_dst)`` and ``sensitivity`` its
        :func:`bipartite_sensitivity`: the noise std is :math:`\sigma\Delta` there too, so :math:`\mu`
        is the same."""
        extra = {} if grid is None else {"granularity": grid[0], "grid_sensitivity": grid[1]}
        if bipartite is not None:
            extra.update(form="bipartite", num_src=int(bipartite[0]), num_dst=int(bipartite[1]))
        return gdp_event(unit="edge", mu=self.mu, name=self.name, mechanism="gap_aggregation",
                         params={"K": self.K, "noise_multiplier": self.noise_multiplier,
                                 "sensitivity": self.sensitivity if sensitivity is None else float(sensitivity),
                                 "sampler": self.sampler, **extra})

    @torch.compiler.disable  # the release runs eagerly: see "Module protocols"
    def forward(self, x: Union[Tensor, tuple[Tensor, Tensor]], edge_index: Adj) -> Tensor:
        """Return all hops concatenated, ``[N, (K + 1) F]`` (detached, input dtype); on a bipartite
        relation (``x = (x_src, x_dst)``), ``[N_dst, F_dst + F_src]``."""
        if isinstance(x, (tuple, list)):
            return self._bipartite_forward(x, edge_index)
        if not isinstance(x, Tensor) or x.dim() != 2:
            raise ValueError("`x` must be a node feature matrix of shape [N, F]")
        reject_grad_input("GAPAggregation", x, self.training)
        if not torch.isfinite(x).all():
            raise ValueError("`x` contains NaN or infinite values")
        n = x.size(0)
        graph = validated_csr(edge_index, n, symmetrize=self.symmetrize, index_dtype=None)  # a canonical CSR as it is
        out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        key = (x,), graph, (n, x.size(1), str(x.dtype))  # public: the features (edge level); private: the graph
        reused = self._cached_release(*key, device=x.device, dtype=out_dtype)
        if reused is not None:  # the cached release: no new charge, no noise
            return torch.cat([self._own_block(x, out_dtype), reused], dim=-1)
        grid, source = self.plan_grid(n, x.size(1)), None  # before any charge
        if grid is not None:
            source = RandomSource(x.device, generator=self.generator,
                                  secure=resolve_secure_mode(self.secure_mode, self.generator))
        # every buffer (the output, the hops, the sampler's workspace) before the charge: a failure raises first
        run = self._hop_chain(graph, x.detach().to(torch.float64, copy=True), grid, source, out_dtype)
        event = charge(self.accountant, self.event(grid), self) if self.noise_multiplier > 0 else None  # first
        self.granularity = None if grid is None else grid[0]
        out = run()
        # the noisy hops only: X^(0) = normalize(x) is no release (a noise-free function of the caller's
        # input), recomputed on reuse, so it is never kept in the cache nor written into a saved state
        self._keep_release(out[:, x.size(1):], *key, event=event, granularity=self.granularity)
        return out

    # ------------------------------------------------------------------ bipartite relations
    #: Whether the noisy sum of a bipartite release is renormalised (GAP's hops are).
    _renormalize_bipartite = True

    def _bipartite_inputs(self, x: Any) -> tuple[Tensor, Tensor]:
        """``(x_src, x_dst)``, validated (before anything is charged)."""
        name = type(self).__name__
        if len(x) != 2 or not all(isinstance(t, Tensor) and t.dim() == 2 for t in x):
            got = ", ".join("None" if t is None else (f"shape {tuple(t.shape)}" if isinstance(t, Tensor)
                                                      else type(t).__name__) for t in x)
            raise ValueError(f"{name}: a bipartite relation takes `x` = (x_src, x_dst), two node feature matrices "
                             f"[N_src, F_src] and [N_dst, F_dst] (their rows are the public node counts); got "
                             f"({got}). HeteroConv and to_hetero pass None for a node type without features: give "
                             "every node type of the relation a feature matrix")
        x_src, x_dst = x
        for t, what in ((x_src, "x_src"), (x_dst, "x_dst")):
            reject_grad_input(name, t, self.training)
            if t.is_complex():
                raise TypeError(f"{name}: `{what}` must be real; got dtype {t.dtype}")
            if t.size(0) == 0:
                raise ValueError(f"{name}: `{what}` has no rows: a relation needs at least one node on each side")
            if not torch.isfinite(t).all():
                raise ValueError(f"{name}: `{what}` contains NaN or infinite values")
        if x_src.device != x_dst.device:
            raise ValueError(f"{name}: x_src is on {x_src.device} and x_dst on {x_dst.device}; put both on one device")
        return x_src, x_dst

    def _bipartite_forward(self, x: Any, edge_index: Adj) -> Tensor:
        """One hop on a bipartite relation: ``[normalize(x_dst) || normalize(A normalize(x_src) + Z)]``."""
        name = type(self).__name__
        x_src, x_dst = self._bipartite_inputs(x)
        if self.K != 1:
            raise ValueError(
                f"{name}(K={self.K}) on a bipartite relation: a hop maps source rows to destination rows, so a second "
                "hop on the same relation is not defined (its input would be destination rows). Use K=1 per "
                "relation and stack releases across relations (e.g. a to_hetero / HeteroConv release users -> "
                "items, then one on its output); nothing was charged")
        ns, nd = x_src.size(0), x_dst.size(0)
        if isinstance(edge_index, Tensor) and edge_index.device != x_dst.device:
            raise ValueError(f"{name}: edge_index is on {edge_index.device} but x on {x_dst.device}")
        crow, col = bipartite_csr(edge_index, ns, nd)  # against the public sizes; raises before any charge
        sensitivity = bipartite_sensitivity(ns, nd)
        floats = [t.dtype for t in (x_src, x_dst) if t.is_floating_point()]
        out_dtype = (torch.promote_types(*floats) if len(floats) == 2 else
                     floats[0] if floats else torch.get_default_dtype())
        # public: both feature matrices (edge level); private: the relation's CSR
        key = ((x_src, x_dst), (crow, col),
               (nd, x_src.size(1), str(x_src.dtype), "bipartite", ns, x_dst.size(1), str(x_dst.dtype)))
        own = self._own_block(x_dst, out_dtype)  # normalize(x_dst): no release, never stored
        reused = self._cached_release(*key, device=x_dst.device, dtype=out_dtype)
        if reused is not None:  # the cached release: no new charge, no noise
            return torch.cat([own, reused], dim=-1)
        grid, source = None, None
        if self.noise_multiplier > 0 and self.sampler == "safe":  # public sizes only, before any charge
            grid = plan_hop_grid(std_per_sensitivity=self.noise_multiplier, sensitivity=sensitivity,
                                 dim=nd * x_src.size(1), value_bound=float(max(ns, 1)), tolerance=self.grid_tolerance)
            source = RandomSource(x_dst.device, generator=self.generator,
                                  secure=resolve_secure_mode(self.secure_mode, self.generator))
        # the noise-free sum and every buffer before the charge: a failure raises first
        run = self._bipartite_chain(crow, col, ns, x_src.detach().to(torch.float64, copy=True), grid, source,
                                    out_dtype, sensitivity)
        event = (charge(self.accountant, self.event(grid, sensitivity=sensitivity, bipartite=(ns, nd)), self)
                 if self.noise_multiplier > 0 else None)  # first
        self.granularity = None if grid is None else grid[0]
        out = run()
        self._keep_release(out, *key, event=event, granularity=self.granularity)  # the noisy block only
        return torch.cat([own, out], dim=-1)

    @torch.no_grad()
    def _bipartite_chain(self, crow: Tensor, col: Tensor, num_src: int, x_src: Tensor,
                         grid: Optional[tuple[float, float]], source: Optional[RandomSource],
                         out_dtype: torch.dtype, sensitivity: float) -> Callable[[], Tensor]:
        """The noise-free sum ``A normalize(x_src)`` (``[N_dst, F_src]``, float64; ``x_src`` is a copy
        the method may overwrite) and the sampler's workspace now; the noise (and, for GAP, the
        renormalisation) in the returned function, called once the release is charged."""
        adj = bipartite_csr_matrix(crow, col, num_src, unit_values(col.numel(), device=col.device))
        h = CsrProduct(adj, unit_values=True)(_normalize_rows_(x_src))
        std = self.noise_multiplier * sensitivity
        generator = float_generator(self.generator, h.device) if grid is None and std > 0 else None
        if grid is not None:
            reserve_grid_gaussian(h, self.noise_multiplier * grid[1], grid[0])
        renormalize = self._renormalize_bipartite

        @torch.no_grad()
        def run() -> Tensor:
            out = h
            if grid is not None:  # safe: the rounded sum plus exact rounded Gaussian noise
                out = add_grid_gaussian_(out, self.noise_multiplier * grid[1], grid[0], source)
            elif std > 0:
                out.add_(torch.randn(out.shape, dtype=out.dtype, device=out.device, generator=generator).mul_(std))
            if renormalize:
                _normalize_rows_(out)
            return out.to(out_dtype)

        return run

    @staticmethod
    def _own_block(x: Tensor, dtype: torch.dtype) -> Tensor:
        r""":math:`\mathbf{X}^{(0)}`, the block :meth:`_hops` writes first (the same values)."""
        return _normalize_rows_(x.detach().to(torch.float64, copy=True)).to(dtype)

    def set_extra_state(self, state: Any) -> None:
        r""":meth:`PersistentRelease.set_extra_state`; a state saved before the cache dropped
        :math:`\mathbf{X}^{(0)}` (all ``K + 1`` blocks) loads with that block removed."""
        super().set_extra_state(state)
        entry = self._cache
        if entry is not None and len(entry.meta) == 3 and entry.release.size(1) == (self.K + 1) * int(entry.meta[1]):
            entry.release = entry.release[:, int(entry.meta[1]):].clone()

    def plan_grid(self, num_nodes: int, channels: int) -> Optional[tuple[float, float]]:
        """``(granularity, inflated per-hop sensitivity)`` of a safe release on ``num_nodes`` x
        ``channels`` (public sizes only; raises before anything is charged), ``None`` without noise
        or with ``sampler="float"``. The distributed wrapper plans with the same method."""
        if not (self.noise_multiplier > 0 and self.sampler == "safe"):
            return None
        # sum aggregation of unit rows: every entry is at most the largest degree, below N
        return plan_hop_grid(std_per_sensitivity=self.noise_multiplier, sensitivity=self.sensitivity,
                             dim=num_nodes * channels, value_bound=float(max(num_nodes, 1)),
                             tolerance=self.grid_tolerance)

    def _release_settings(self) -> dict[str, Any]:
        """The settings a cached release is valid for (a saved one loads only into equal settings)."""
        return {"K": self.K, "noise_multiplier": self.noise_multiplier, "epsilon": self.epsilon,
                "delta": self.delta, "sampler": self.sampler, "grid_tolerance": self.grid_tolerance}

    def _hops(self, graph: tuple[Tensor, Tensor], x: Tensor, grid: Optional[tuple[float, float]] = None,
              source: Optional[RandomSource] = None, out_dtype: torch.dtype = torch.float64) -> Tensor:
        """All hops: :meth:`_hop_chain`, run at once."""
        return self._hop_chain(graph, x, grid, source, out_dtype)()

    @torch.no_grad()
    def _hop_chain(self, graph: tuple[Tensor, Tensor], x: Tensor, grid: Optional[tuple[float, float]] = None,
                   source: Optional[RandomSource] = None,
                   out_dtype: torch.dtype = torch.float64) -> Callable[[], Tensor]:
        """All hops, written one by one into one ``[N, (K + 1) F]`` output of ``out_dtype`` (the
        float64 hop cast, a post-processing). ``x`` is a float64 copy the method may overwrite: each
        hop is normalised in place, and only the previous hop and the current one are kept in
        float64, in two buffers the products are written into in turn (at 2.45M nodes, 100 channels
        and K = 2: 3.9 GB of float64 and the 2.9 GB float32 output, instead of six float64 copies
        and a 5.9 GB float64 concatenation).

        Two stages: this call makes every buffer (noise-free) and returns the hops as a function to
        call once the release is charged, so an allocation failure raises before the charge."""
        crow, col = graph  # the validated simple undirected graph's CSR arrays
        adj = csr_matrix(crow, col, unit_values(col.numel(), device=col.device))  # ones never stored
        std = self.noise_multiplier * self.sensitivity
        f = x.size(1)
        out = torch.empty(x.size(0), (self.K + 1) * f, dtype=out_dtype, device=x.device)
        first = _normalize_rows_(x)
        out[:, :f] = first
        first_spare = torch.empty_like(first)  # two float64 buffers in turn: no temporary per product
        neighbours = CsrProduct(adj, unit_values=True)  # the C kernel where it runs, the same sums otherwise
        generator = float_generator(self.generator, x.device) if grid is None and std > 0 else None
        if grid is not None:
            reserve_grid_gaussian(first_spare, self.noise_multiplier * grid[1], grid[0])

        @torch.no_grad()
        def run() -> Tensor:
            prev, spare = first, first_spare
            for k in range(1, self.K + 1):
                h = neighbours(prev, out=spare)  # A prev
                spare = prev
                if grid is not None:  # safe: the rounded sum plus exact rounded Gaussian noise
                    h = add_grid_gaussian_(h, self.noise_multiplier * grid[1], grid[0], source)
                elif std > 0:
                    h.add_(torch.randn(h.shape, dtype=h.dtype, device=h.device, generator=generator).mul_(std))
                prev = _normalize_rows_(h)
                out[:, k * f:(k + 1) * f] = prev
            return out

        return run

    def __repr__(self) -> str:
        target = "" if self.epsilon is None else f", epsilon={self.epsilon:g}, delta={self.delta:g}"
        return (f"{self.__class__.__name__}(K={self.K}, noise_multiplier={self.noise_multiplier:.6g}{target}, "
                f"unit={self._release_unit!r}, sampler={self.sampler!r}, cached={self.cached})")
