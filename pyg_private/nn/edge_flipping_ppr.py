r"""The Edge-Flipping PPR baseline: randomized response on the graph, then exact lazy PPR."""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.typing import Adj

from ..accounting import (
    PrivacyAccountant,
    PrivacyEvent,
    randomized_response_event,
    resolve_truth_probability,
)
from ..accounting.validation import check_positive_int, check_restart_probability
from ..mechanisms.edge_flipping import flip_edges
from ..mechanisms.sampler_options import Sampler, check_sampler_options
from ..sampling.words import resolve_secure_mode
from ..utils.seed_restored_ppr import lazy_ppr_restoring_seed_edges
from ._ppr_release import SeededRelease

__all__ = ["EdgeFlippingPPR"]


class EdgeFlippingPPR(SeededRelease, torch.nn.Module):
    r"""Edge-private personalized PageRank by randomising the graph first, the
    Edge-Flipping baseline of Wei, Chien and Li (NeurIPS 2024, arXiv:2407.00077, Sec. 4
    "Baselines" and App. E).

    Every node pair keeps its true bit with probability :math:`q` and is flipped
    otherwise (:func:`pyg_private.mechanisms.flip_edges`, sampled in time proportional
    to the edges plus the flips), then the noise-free lazy PPR of Eq. 11,

    .. math::
        \mathbf{s}^{(k)} = \beta\,\tfrac12\big(\mathbf{I} + \tilde{\mathbf{A}}\tilde{\mathbf{D}}^{-1}\big)
            \mathbf{s}^{(k-1)} + (1 - \beta)\,\mathbf{e}_v,

    runs on the released graph :math:`\tilde{\mathbf{A}}`. With ``personalized=True`` the
    seed's own pairs keep their true bits in its column (the seed knows its edges); all
    seeds share one released graph and each column restores its seed's row exactly
    (:func:`pyg_private.utils.lazy_ppr_restoring_seed_edges`).

    **Privacy.** One forward is one randomized-response release of the graph: one event
    on unit ``"edge"`` (Mironov's RR curve) whatever the number of columns, since every
    column is post-processing of the released graph (plus, personalized, of the
    recipient's own edges; the same validity conditions as
    :class:`~pyg_private.nn.NoisyPPRDiffusion` apply).

    **Exact sampling.** By default (``sampler="safe"``) every pair is flipped with probability
    exactly :math:`1 - q` (exact geometric gaps from uniform integer words, see
    :func:`~pyg_private.mechanisms.flip_edges`), :math:`q` being the float64 number ``self.q``
    from which the event is computed: the charged curve is the one of the mechanism sampled,
    and no released graph is impossible under a neighbouring input (which a floating-point
    sampler cannot promise: Mironov, CCS 2012).

    Give ``epsilon`` (pure, :math:`q = e^\epsilon/(1+e^\epsilon)`, the reference code's
    choice), ``epsilon`` with ``delta`` (the largest :math:`q` whose RR curve converts to
    ``(epsilon, delta)``, as the paper accounts) or ``flip_probability`` :math:`p`
    (:math:`q = 1 - p/2`).

    **Cost.** The released graph has about :math:`(1-q)\,N^2/2` edges: on BlogCatalog
    (10,312 nodes) about 14 million at :math:`\epsilon = 1` and 26 million at
    :math:`\epsilon = 0.01`, so each step is a product with that many non-zeros.

    Caching (``cached=True`` by default), ``state_dict`` persistence of the release and the module
    protocols (``deepcopy``, ``pickle``, ``torch.compile``; no ``torch.jit.script``) are those of
    :class:`~pyg_private.nn.NoisyPPRDiffusion`.

    Args:
        alpha (float): restart probability in :math:`(0, 1)`. (default: :obj:`0.2`)
        num_iterations (int): :math:`K`. (default: :obj:`100`)
        epsilon (float, optional): target epsilon.
        delta (float, optional): target delta with ``epsilon``.
        flip_probability (float, optional): :math:`p` instead of ``epsilon``.
        personalized (bool): restore each seed's own edges in its column. (default: :obj:`False`)
        accountant, cached, symmetrize, generator, name: as in
            :class:`~pyg_private.nn.NoisyPPRDiffusion`.
        sampler (str): ``"safe"`` (default): exact sampling, as above. ``"float"``: the
            floating-point sampler (``torch.rand``), open to floating-point attacks; for
            benchmarks and audits only. The event is the same.
        secure_mode (bool, optional): draw every random bit from the operating system's CSPRNG
            (``None``: the process-wide default of :func:`pyg_private.mechanisms.set_secure_mode`);
            a seeded ``generator`` is then refused (``ValueError``, before anything is charged).

    Shapes:
        - **input:** ``seed_index`` :math:`(C,)`, ``num_nodes`` :math:`|\mathcal{V}|`;
          ``edge_index`` :math:`(2, |\mathcal{E}|)`, ``SparseTensor`` or ``torch.sparse``
          adjacency
        - **output:** :math:`(|\mathcal{V}|, C)`
    """

    def __init__(self, alpha: float = 0.2, num_iterations: int = 100, *, epsilon: Optional[float] = None,
                 delta: Optional[float] = None, flip_probability: Optional[float] = None,
                 personalized: bool = False, accountant: Optional[PrivacyAccountant] = None, cached: bool = True,
                 symmetrize: bool = False, generator: Optional[torch.Generator] = None,
                 name: str = "edge_flipping_ppr", sampler: Sampler = "safe",
                 secure_mode: Optional[bool] = None) -> None:
        super().__init__()
        self.alpha = check_restart_probability(alpha)
        self.num_iterations = check_positive_int(num_iterations, "num_iterations")
        self.q = resolve_truth_probability(epsilon=epsilon, delta=delta, flip_probability=flip_probability)
        self.epsilon, self.delta = epsilon, delta
        self.personalized = bool(personalized)
        self.accountant = accountant
        self.cached = cached
        self.symmetrize = symmetrize
        self.generator = generator
        self.name = name
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, generator)
        self._cache = None

    @property
    def flip_probability(self) -> float:
        """:math:`p = 2(1 - q)`: the probability that a pair's bit is replaced by a uniform bit."""
        return 2.0 * (1.0 - self.q)

    def event(self, num_columns: int = 1) -> PrivacyEvent:
        """The event of one release; independent of ``num_columns`` (one randomised graph)."""
        return randomized_response_event(unit="edge", flip_probability=self.flip_probability, name=self.name,
                                         params={"alpha": self.alpha, "num_iterations": self.num_iterations,
                                                 "personalized": self.personalized, "sampler": self.sampler})

    def _charge(self, seeds: Optional[Tensor], num_columns: int) -> PrivacyEvent:
        return super()._charge(None, 1)  # one randomised graph, whatever the columns

    @torch.compiler.disable  # the release runs eagerly: see "Module protocols"
    def forward(self, x: None = None, edge_index: Optional[Adj] = None, seed_index: Optional[Tensor] = None,
                num_nodes: Optional[int] = None) -> Tensor:
        """PPR columns ``[N, C]`` of the seeds on the randomised graph (default dtype).

        Args:
            edge_index: the private graph (``edge_index``, ``SparseTensor`` or
                ``torch.sparse`` adjacency).
            seed_index (Tensor): public seeds ``[C]`` in ``[0, N)``.
            num_nodes (int, optional): the public node count :math:`N`, required with an
                ``edge_index`` (a sparse adjacency's declared size may stand in for it).
                Randomized response runs over every pair of these :math:`N` nodes; a count
                inferred from the largest id in the private ``edge_index`` would change
                both the pairs randomised and the output's shape when an edge at the last
                node is added or removed.
        """
        ei, n, s0, seeds = self._seeds_only(x, edge_index, seed_index, num_nodes)
        cached = self._from_cache(ei, s0)
        if cached is not None:
            return cached.to(torch.get_default_dtype())
        # the process-wide secure mode may have changed since construction: refuse before charging
        secure = resolve_secure_mode(self.secure_mode, self.generator) if self.sampler == "safe" else None
        event = self._charge(seeds, s0.size(1))  # before any bit is flipped
        released = flip_edges(ei, n, self.q, generator=self.generator, sampler=self.sampler, secure_mode=secure)
        truth = ei if self.personalized else released  # non-personalized: nothing is restored
        out = lazy_ppr_restoring_seed_edges(released, truth, n, seeds, alpha=self.alpha,
                                            num_iterations=self.num_iterations)
        self._remember(ei, s0, out, event)
        return out.to(torch.get_default_dtype())

    def _release_settings(self) -> dict[str, Any]:
        """The settings a cached release is valid for (a saved one loads only into equal settings)."""
        return {"alpha": self.alpha, "num_iterations": self.num_iterations, "q": self.q, "epsilon": self.epsilon,
                "delta": self.delta, "personalized": self.personalized, "sampler": self.sampler}

    def __repr__(self) -> str:
        target = "" if self.epsilon is None else f", epsilon={self.epsilon:g}" + (
            "" if self.delta is None else f", delta={self.delta:g}")
        return (f"{self.__class__.__name__}(alpha={self.alpha:g}, num_iterations={self.num_iterations}, "
                f"flip_probability={self.flip_probability:.6g}{target}, personalized={self.personalized}, "
                f"unit={self._release_unit!r}, sampler={self.sampler!r}, cached={self.cached})")
