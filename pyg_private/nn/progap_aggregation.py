r"""ProGAP's perturbed aggregation: one noisy sum of unit rows per stage, at edge or node level."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ..accounting import PrivacyAccountant, PrivacyEvent, charge, gdp_event
from ..accounting.validation import check_positive_int
from ..mechanisms._noise import float_generator
from ..sampling.grid import DEFAULT_GRID_TOLERANCE
from ..sampling.words import RandomSource, resolve_secure_mode
from ..utils.adjacency import _csr as csr_matrix
from ..utils.adjacency import validated_csr
from ..utils.degree_bounds import check_declared_bounds
from ..utils.degree_cap import cap_in_degree_csr, capped_sum_aggregation_node_sensitivity, draw_cap_key
from . import gap_aggregation as _gap
from ._call_checks import reject_grad_input
from .gap_aggregation import EDGE_SENSITIVITY, GAPAggregation

__all__ = ["ProGAPAggregation", "sum_aggregation_node_sensitivity"]


def sum_aggregation_node_sensitivity(max_degree: int) -> float:
    r"""Node-level :math:`\ell_2` (Frobenius) sensitivity of :math:`\mathbf{A}\mathbf{H}` (sum
    aggregation, no self-loops) over a **fixed node universe**, for rows of :math:`\mathbf{H}`
    in the unit ball: :math:`\sqrt{D(D + 1)}` with :math:`D` = ``max_degree``.

    Removing node :math:`v` (its :math:`d_v \le D` edges; its row of the release stays, without
    edges) changes row :math:`w` of each neighbour by :math:`\mathbf{h}_v` (norm :math:`\le 1`) and
    row :math:`v` from :math:`\sum_{u \in N(v)} \mathbf{h}_u` (norm :math:`\le d_v`) to zero, so
    :math:`\|\Delta\|_F^2 \le d_v + d_v^2`; equal unit rows attain it. The other rows of
    :math:`\mathbf{H}` are the same on both sides when each is a function of its own node's data
    and of earlier releases (ProGAP's stages). GAP and ProGAP (Sajadmanesh et al. 2023, 2024)
    state :math:`\sqrt D`, which leaves out row :math:`v`: in their analysis the removed node's
    output row disappears with it; here the output has one row per node of the universe, so it
    is released and counted.
    """
    d = check_positive_int(max_degree, "max_degree")
    return math.sqrt(d * (d + 1.0))


class ProGAPAggregation(GAPAggregation):
    r"""One perturbed aggregation of ProGAP, from `"ProGAP: Progressive Graph Neural Networks with
    Differential Privacy Guarantees" <https://arxiv.org/abs/2304.08928>`_ (Sajadmanesh and
    Gatica-Perez, WSDM 2024, Sec. 4), the one-hop aggregation perturbation of GAP (Sajadmanesh et
    al., USENIX Security 2023) run once per stage:

    .. math::
        \tilde{\mathbf{A}} = \mathbf{A}\,\mathrm{normalize}(\mathbf{H}) + \mathbf{Z}, \qquad
        \mathbf{Z} \sim \mathcal{N}(0, (\sigma\Delta)^2 \mathbf{I}),

    sum aggregation over the neighbours (no self-loop, no degree normalisation) of the rows of
    :math:`\mathbf{H}` put on the unit sphere, as the authors' code (``core/nn/nap.py`` of
    github.com/sisaman/ProGAP): the noisy sum is released as it is. ``normalize_output=True``
    renormalises its rows to unit length after the noise (GAP's aggregation; post-processing, no
    privacy effect). The output is :math:`[\mathrm{normalize}(\mathbf{H}) \,\|\, \tilde{\mathbf{A}}]`
    (:class:`GAPAggregation` with ``K=1``). One forward is one Gaussian mechanism, a
    :math:`\mu = 1/\sigma`-GDP event on unit ``level``, registered before any noise is drawn.

    **Edge level** (``level="edge"``): :math:`\Delta = \sqrt2` (one undirected edge adds a unit
    row to two rows of the sum); nothing is declared.

    **Node level** (``level="node"``): :math:`\Delta = \sqrt{D(D+1)}` with :math:`D` =
    ``max_degree`` (:func:`sum_aggregation_node_sensitivity`), over the fixed universe of the
    ``x.size(0)`` nodes (an absent node is a row without edges; ``num_nodes``, if given, is
    checked against it). ``max_degree`` is a **public** declared bound, checked against the
    input before anything is charged (bound the degrees first); the guarantee is stated over the
    graphs that satisfy it. The bound holds when every row of ``x`` other than the removed
    node's is the same in both neighbouring datasets, i.e. ``x`` is computed row by row from each
    node's own data and earlier releases, as in ProGAP: the caller's responsibility.

    **Degree cap** (``degree_cap=D_c``, node level): every node sums only its :math:`D_c` first
    neighbours in a fixed keyed order of the pairs (:mod:`pyg_private.utils.degree_cap`, the
    per-node edge sampling of GAP's and ProGAP's code made deterministic), and
    :math:`\Delta = \sqrt{D_c^2 + 4D}` (:func:`~pyg_private.utils.degree_cap.capped_sum_aggregation_node_sensitivity`,
    :math:`D` still the declared ``max_degree``: the rows that rank the removed node among their
    first :math:`D_c` replace it with their next neighbour). At :math:`D = 1000`, :math:`D_c = 50`
    that is 80.6 instead of 1000.5. The key is drawn once per layer (from ``generator`` if given).
    Features are private at node level, so a cached release is keyed on them in memory only, and
    the saved state holds neither a fingerprint of them (only their shape and dtype) nor the block
    :math:`\mathrm{normalize}(\mathbf{H})`, which is recomputed from the caller's ``x``: only the noisy
    aggregation :math:`\tilde{\mathbf{A}}` is stored.

    **Bipartite relations** (edge level only): ``x = (x_src, x_dst)`` releases
    :math:`[\mathrm{normalize}(\mathbf{X}_{dst}) \,\|\, \mathbf{A}\,\mathrm{normalize}(\mathbf{X}_{src}) + \mathbf{Z}]`
    with :math:`\Delta = 1` per edge of the relation, as :class:`GAPAggregation` does (its notes).
    At node level a bipartite relation is refused before any charge: a node removed from a
    heterogeneous graph takes its edges of every relation with it.

    Noise, caching, saving and the module protocols are those of :class:`GAPAggregation`
    (``sampler="safe"``: the rounded sum plus exact rounded Gaussian noise on a power-of-two grid,
    the inflated sensitivity charged).

    Args:
        level (str): ``"edge"`` or ``"node"``. (default: ``"edge"``)
        normalize_output (bool): renormalise the rows of the noisy sum (GAP's); ``False`` releases
            the noisy sum as ProGAP's code does. (default: :obj:`False`)
        max_degree (int, optional): public bound on every degree (node level).
        num_nodes (int, optional): the universe's size (node level; default: ``x.size(0)``).
        degree_cap (int, optional): sum at most this many neighbours per node (node level).
        noise_multiplier, epsilon, delta, accountant, cached, symmetrize, generator, name, sampler,
            secure_mode, grid_tolerance: as in :class:`GAPAggregation`.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)`, ``edge_index`` (or sparse adjacency)
        - **output:** :math:`(|\mathcal{V}|, 2F)`; bipartite (edge level):
          :math:`(|\mathcal{V}_{dst}|, F_{dst} + F_{src})`
    """

    def __init__(self, *, level: str = "edge", max_degree: Optional[int] = None, num_nodes: Optional[int] = None,
                 noise_multiplier: Optional[float] = None, epsilon: Optional[float] = None,
                 delta: Optional[float] = None, accountant: Optional[PrivacyAccountant] = None, cached: bool = True,
                 symmetrize: bool = False, generator: Optional[torch.Generator] = None,
                 name: str = "progap_aggregation", sampler: str = "safe", secure_mode: Optional[bool] = None,
                 grid_tolerance: float = DEFAULT_GRID_TOLERANCE, normalize_output: bool = False,
                 degree_cap: Optional[int] = None) -> None:
        if level not in ("edge", "node"):
            raise ValueError(f"`level` must be 'edge' or 'node'; got {level!r}")
        if level == "node":
            if max_degree is None:
                raise ValueError("node level needs `max_degree`, a public bound on every node's degree, declared "
                                 "before seeing the graph (add `degree_cap=D` to sum at most D neighbours per node)")
            sensitivity = capped_sum_aggregation_node_sensitivity(max_degree, degree_cap)
            if num_nodes is not None:
                check_positive_int(num_nodes, "num_nodes")
        else:
            if max_degree is not None or num_nodes is not None or degree_cap is not None:
                raise ValueError("`max_degree`, `num_nodes` and `degree_cap` are node-level settings; the edge-level "
                                 "release uses no declared bound")
            sensitivity = EDGE_SENSITIVITY
        super().__init__(1, noise_multiplier=noise_multiplier, epsilon=epsilon, delta=delta, accountant=accountant,
                         cached=cached, symmetrize=symmetrize, generator=generator, name=name, sampler=sampler,
                         secure_mode=secure_mode, grid_tolerance=grid_tolerance)
        self.level = level
        self.max_degree = None if max_degree is None else int(max_degree)
        self.num_nodes = None if num_nodes is None else int(num_nodes)
        self.degree_cap = None if degree_cap is None else int(degree_cap)
        # the order of the pairs the cap keeps by: public (the bound holds for every key), one per layer
        self.cap_key = None if degree_cap is None else draw_cap_key(generator)
        self.sensitivity = sensitivity
        self.normalize_output = bool(normalize_output)

    @property
    def _release_unit(self) -> str:
        return self.level

    def event(self, grid: Optional[tuple[float, float]] = None, *, sensitivity: Optional[float] = None,
              bipartite: Optional[tuple[int, int]] = None) -> PrivacyEvent:
        """The :math:`\\mu = 1/\\sigma`-GDP event one new release registers on unit ``level``
        (``sensitivity`` and ``bipartite``: as :meth:`GAPAggregation.event`)."""
        extra = {} if grid is None else {"granularity": grid[0], "grid_sensitivity": grid[1]}
        if bipartite is not None:
            extra.update(form="bipartite", num_src=int(bipartite[0]), num_dst=int(bipartite[1]))
        bounds = {} if self.level == "edge" else {"max_degree": self.max_degree}
        return gdp_event(unit=self.level, mu=self.mu, name=self.name, mechanism="progap_aggregation",
                         params={"noise_multiplier": self.noise_multiplier,
                                 "sensitivity": self.sensitivity if sensitivity is None else float(sensitivity),
                                 "sampler": self.sampler, **bounds, **extra})

    @property
    def _renormalize_bipartite(self) -> bool:  # type: ignore[override]
        return self.normalize_output

    @torch.compiler.disable  # the release runs eagerly, as GAPAggregation's
    def forward(self, x: Tensor, edge_index: Any) -> Tensor:
        """Return ``[normalize(x) || A normalize(x) + Z]``, ``[N, 2F]`` (detached, input dtype; the second
        block renormalised with ``normalize_output``)."""
        if self.level == "edge":
            return super().forward(x, edge_index)
        if isinstance(x, (tuple, list)):
            raise ValueError(
                "ProGAPAggregation(level='node') on a bipartite relation: the node-level bound sqrt(D(D+1)) is for one "
                "node set, where the removed node's own row is counted; a node of one type removed from a "
                "heterogeneous graph also changes every relation it belongs to. Node-level releases on relations are "
                "not supported; nothing was charged")
        if not isinstance(x, Tensor) or x.dim() != 2:
            raise ValueError("`x` must be a node feature matrix of shape [N, F]")
        reject_grad_input(type(self).__name__, x, self.training)
        if not torch.isfinite(x).all():
            raise ValueError("`x` contains NaN or infinite values")
        n = x.size(0)
        graph = validated_csr(edge_index, n, symmetrize=self.symmetrize)  # a canonical CSR as it is
        degree = graph[0].diff()
        check_declared_bounds(degree, level="node", min_degree=0, max_degree=self.max_degree,
                              num_nodes=n if self.num_nodes is None else self.num_nodes)  # before any charge
        if self.degree_cap is not None:  # the D first neighbours of every row in the key's order of the pairs
            graph = cap_in_degree_csr(*graph, self.degree_cap, self.cap_key)
        out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        key = (), (*graph, x), (n, x.size(1), str(x.dtype), "node")  # node level: the features are private too
        own = F.normalize(x.detach().to(torch.float64), dim=-1)  # the caller's own input, never stored
        reused = self._cached_release(*key, device=x.device, dtype=torch.float64)
        if reused is not None:
            return torch.cat([own, reused], dim=-1).to(out_dtype)
        grid, source = self.plan_grid(n, x.size(1)), None  # GAPAggregation's plan, before any charge
        if grid is not None:
            source = RandomSource(x.device, generator=self.generator,
                                  secure=resolve_secure_mode(self.secure_mode, self.generator))
        run = self._hop_chain(graph, x.detach().to(torch.float64), grid, source)  # every buffer, before the charge
        event = charge(self.accountant, self.event(grid), self) if self.noise_multiplier > 0 else None  # first
        self.granularity = None if grid is None else grid[0]
        out = run()[:, x.size(1):]
        self._keep_release(out, *key, event=event, granularity=self.granularity)  # the noisy block only
        return torch.cat([own, out], dim=-1).to(out_dtype)

    def _release_settings(self) -> dict[str, Any]:
        return {**super()._release_settings(), "level": self.level, "max_degree": self.max_degree,
                "num_nodes": self.num_nodes, "normalize_output": self.normalize_output, "degree_cap": self.degree_cap}

    @torch.no_grad()
    def _hop_chain(self, graph: tuple[Tensor, Tensor], x: Tensor, grid: Optional[tuple[float, float]] = None,
                   source: Optional[RandomSource] = None,
                   out_dtype: torch.dtype = torch.float64) -> Callable[[], Tensor]:
        """``[normalize(x) || A normalize(x) + Z]`` in ``out_dtype``, the second block renormalised only
        with ``normalize_output`` (then GAPAggregation's one hop). Two stages, as GAPAggregation's: the
        noise-free sum and every buffer now, the noise in the returned function (after the charge)."""
        if self.normalize_output:
            return super()._hop_chain(graph, x, grid, source, out_dtype)
        crow, col = graph
        adj = csr_matrix(crow, col, torch.ones(col.numel(), dtype=torch.float64, device=col.device))
        own = F.normalize(x, dim=-1)  # unit rows: the sensitivity's premise
        total = self.propagate(adj, x=own)
        std = self.noise_multiplier * self.sensitivity
        generator = float_generator(self.generator, x.device) if grid is None and std > 0 else None
        if grid is not None:
            _gap.reserve_grid_gaussian(total, self.noise_multiplier * grid[1], grid[0])

        @torch.no_grad()
        def run() -> Tensor:
            h = total
            if grid is not None:  # safe: the rounded sum plus exact rounded Gaussian noise (GAP's sampler)
                h = _gap.add_grid_gaussian_(h, self.noise_multiplier * grid[1], grid[0], source)
            elif std > 0:
                h = h + std * torch.randn(h.shape, dtype=h.dtype, device=h.device, generator=generator)
            return torch.cat([own, h], dim=-1).to(out_dtype)

        return run

    def __repr__(self) -> str:
        target = "" if self.epsilon is None else f", epsilon={self.epsilon:g}, delta={self.delta:g}"
        bound = "" if self.level == "edge" else f", max_degree={self.max_degree}"
        bound += "" if self.degree_cap is None else f", degree_cap={self.degree_cap}"
        renorm = ", normalize_output=True" if self.normalize_output else ""
        return (f"{self.__class__.__name__}(level={self.level!r}{bound}, noise_multiplier={self.noise_multiplier:.6g}"
                f"{target}, sampler={self.sampler!r}, cached={self.cached}{renorm})")
