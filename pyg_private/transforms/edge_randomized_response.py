"""Edge-level randomized response as a transform (the Edge-Flipping baseline)."""
from __future__ import annotations

import math
import warnings
from typing import Any, Optional

import numpy as np
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from ._shared_ledger import SharedLedgerCopy
from ..accounting import (
    PrivacyAccountant,
    PrivacyEvent,
    Unit,
    charge,
    randomized_response_event,
    resolve_truth_probability,
)
from ..mechanisms.edge_flipping import flip_bipartite_edges, flip_edges
from ..mechanisms.sampler_options import Sampler, check_sampler_options
from ..sampling.words import resolve_secure_mode
from ..nn._call_checks import reject_sampled_batch
from ..utils import simple_undirected
from ..utils.graph_validation import check_edge_index, declared_num_nodes, declared_type_num_nodes
from ._fingerprint import ReleaseFingerprints, crc32_rows

__all__ = ["EdgeRandomizedResponse"]

_MARK = "edge_randomized_response"


@functional_transform("edge_randomized_response")
class EdgeRandomizedResponse(SharedLedgerCopy, BaseTransform):
    r"""Replace the graph by randomized response on its adjacency matrix
    (functional name: :obj:`edge_randomized_response`).

    Each node pair :math:`\{i, j\}` keeps its true bit :math:`A_{ij}` with probability
    :math:`q` and is flipped otherwise, independently. One edge changes one bit, so the
    release is pure :math:`\epsilon`-edge-DP with :math:`\epsilon = \log(q/(1-q))`, and
    its RDP curve is Mironov's randomized-response curve (Prop. 5); that is the event
    registered on unit ``"edge"`` before sampling. This is the Edge-Flipping baseline of
    Wei, Chien and Li (NeurIPS 2024, arXiv:2407.00077, Sec. 4.1 and App. E), which replaces
    each bit by a uniform bit with probability :math:`p`: :math:`q = 1 - p/2`.

    **Exact sampling.** By default (``sampler="safe"``) the flips are drawn with exact
    geometric gaps from uniform integer words (:func:`pyg_private.mechanisms.flip_edges`):
    every pair is flipped with probability exactly :math:`1 - q`, where :math:`q` is the
    float64 number stored as ``self.q`` (from ``epsilon``: :math:`e^\epsilon/(1+e^\epsilon)`
    rounded to float64), and the event is computed from that same :math:`q`; its pure epsilon
    :math:`\log(q/(1-q))` is therefore the one of the mechanism sampled (it may differ from the
    requested ``epsilon`` in the last bits of :math:`q`). No released graph is impossible under
    a neighbouring input, which a floating-point sampler cannot promise (Mironov, CCS 2012).

    **Personalized use.** ``keep_nodes`` (for example a PPR seed) report their own pairs
    truthfully: the output then protects only edges not incident to them, and is meant
    for those nodes alone (the personalized edge-level privacy of Wei et al., Sec. 2, Def. 2:
    the seed "is already aware of their direct connections"). The event is the same curve;
    its guarantee is per recipient.

    **The node set is public.** Randomized response runs over every pair of the
    ``data.num_nodes`` nodes, so that count must be *declared*: an explicit
    ``num_nodes`` attribute, the rows of a node-level tensor such as ``x``, or the size of
    an ``EdgeIndex``/``adj_t``. PyG's fallback, the largest id in ``edge_index`` plus one,
    reads the private edges: a graph with an isolated last node and the same graph plus
    one edge at that node would randomise different pairs and return different node
    counts. Data without a declared count raise ``ValueError`` before anything is charged.

    **Not on a sampled batch.** Data that carry a sampler's metadata (``n_id``, ``e_id``,
    ``input_id``, ``num_sampled_nodes``, ...: a ``NeighborLoader`` batch) are refused with the
    reason, whatever ``symmetrize`` says: the sampled pairs depend on the other private edges.
    Randomise the whole graph once and sample from the released graph.

    Edge attributes (every attribute whose name contains ``edge``, such as ``edge_attr`` and
    ``edge_weight``) belong to the true edges and are removed, as is a
    sparse ``adj``/``adj_t`` (the true graph). The expected number of
    edges grows to about :math:`(1-q)\,n^2/2`.

    **Every call is a release.** Used as a dataset's ``transform=`` it would run again at
    every access, on a fresh copy of the raw graph, each access a new release charged
    anew; use it as ``pre_transform=`` (or call it once) to release one noisy graph. Two
    guards: data it has randomised are marked, and randomising them again raises; and
    this instance remembers a keyed fingerprint of every graph it released (a secret-keyed
    BLAKE2b digest, never pickled or copied), so the second access through ``transform=``
    raises too. ``allow_recompose=True`` allows
    both and charges every call. (DataLoader workers hold copies of the transform: the
    fingerprint guard is per process.)

    **Heterogeneous graphs.** On a ``HeteroData`` every edge type is randomised: a relation within
    one node type over its :math:`n(n-1)/2` undirected pairs as above, a relation between two node
    types over its :math:`n_{src} n_{dst}` (directed) pairs (:func:`~pyg_private.mechanisms.flip_bipartite_edges`),
    each node type's count declared (``x`` or ``num_nodes``). The unit is one edge of one relation.
    Relations between the same unordered pair of node types may hold the same edge (a relation and
    the reverse ``T.ToUndirected`` adds), so they compose sequentially; relations of different pairs
    hold disjoint edges and compose in parallel (:func:`~pyg_private.nn.relation_parts`). One call
    registers **one** event before any bit is drawn: randomized response composed :math:`m` times,
    :math:`m` the most relations of one node-type pair (pure :math:`m\epsilon`). Randomise before
    ``T.ToUndirected`` (the reverses are then post-processing, :math:`m = 1`). ``max_edges`` bounds
    the expected flipped-in edges summed over the relations; ``keep_nodes`` and data carrying
    derived relations (``T.AddMetaPaths``' ``metapath_dict``) are refused.

    Args:
        epsilon (float, optional): pure epsilon per edge, :math:`q = e^\epsilon/(1+e^\epsilon)`.
        delta (float, optional): with ``epsilon``: the largest :math:`q` whose RR curve
            converts to ``(epsilon, delta)`` (how Wei et al. 2024 account this baseline).
        flip_probability (float, optional): :math:`p`, instead of ``epsilon``.
        keep_nodes (Tensor or list, optional): nodes whose pairs are not randomised.
        accountant (PrivacyAccountant, optional): charged once per call.
        symmetrize (bool): accept a directed/duplicated ``edge_index`` by symmetrising it
            first. (default: :obj:`False`: such input raises ``ValueError``)
        allow_recompose (bool): allow randomising already randomised data, or a graph this
            instance already released, again (charged again). (default: :obj:`False`)
        allow_repeat (bool, optional): deprecated name of ``allow_recompose``.
        generator (torch.Generator, optional): reproducibility only; voids the guarantee.
        sampler (str): ``"safe"`` (default): exact sampling, as above. ``"float"``: the
            floating-point sampler (``torch.rand``), open to floating-point attacks; for
            benchmarks and audits only. The event is the same.
        secure_mode (bool, optional): draw every random bit from the operating system's CSPRNG
            (``None``: the process-wide default of :func:`pyg_private.mechanisms.set_secure_mode`);
            a seeded ``generator`` is then refused (``ValueError``, before anything is charged).
        max_edges (int, optional): refuse (``ValueError``, before anything is charged, with the
            expected count in the message) a release whose expected number of flipped-in edges,
            :math:`(1 - q)\,n(n-1)/2` (public: it reads ``n`` and ``q`` only), exceeds it; the output
            costs 32 bytes an undirected edge. ``None``: no limit. (default: :obj:`200_000_000`)

    Shapes:
        - **input:** ``data.edge_index`` :math:`(2, |\mathcal{E}|)` of an undirected simple
          graph on ``data.num_nodes`` (declared) nodes
        - **output:** the randomised ``edge_index`` :math:`(2, |\tilde{\mathcal{E}}|)` on the
          same nodes
    """

    def __init__(self, epsilon: Optional[float] = None, flip_probability: Optional[float] = None, *,
                 delta: Optional[float] = None, keep_nodes: Any = None,
                 accountant: Optional[PrivacyAccountant] = None, symmetrize: bool = False,
                 allow_recompose: bool = False, allow_repeat: Optional[bool] = None,
                 generator: Optional[torch.Generator] = None, name: str = "edge_randomized_response",
                 sampler: Sampler = "safe", secure_mode: Optional[bool] = None,
                 max_edges: Optional[int] = 200_000_000) -> None:
        self.q = resolve_truth_probability(epsilon=epsilon, delta=delta, flip_probability=flip_probability)
        self.sampler, self.secure_mode = check_sampler_options(sampler, secure_mode, generator)
        self.epsilon_arg, self.delta = epsilon, delta
        self.flip_probability = 2.0 * (1.0 - self.q)
        self.keep_nodes = None if keep_nodes is None else torch.as_tensor(keep_nodes).long().view(-1)
        self.accountant = accountant
        self.symmetrize = symmetrize
        if not isinstance(allow_recompose, bool):
            raise TypeError(f"`allow_recompose` must be True or False; got {allow_recompose!r}")
        if allow_repeat is not None:
            warnings.warn("`allow_repeat` is deprecated; use `allow_recompose` (the name the feature transforms use)",
                          DeprecationWarning, stacklevel=2)
            if not isinstance(allow_repeat, bool):
                raise TypeError(f"`allow_repeat` must be True or False; got {allow_repeat!r}")
            allow_recompose = allow_recompose or allow_repeat
        self.allow_recompose = allow_recompose
        self.generator = generator
        self.name = name
        if max_edges is not None and (isinstance(max_edges, bool) or not isinstance(max_edges, int) or max_edges < 1):
            raise ValueError(f"`max_edges` must be a positive int or None; got {max_edges!r}")
        self.max_edges = max_edges
        # keyed digests of (num_nodes, edges, CRC-32 of the canonical edge_index) of the graphs released
        self._released = ReleaseFingerprints()

    @property
    def allow_repeat(self) -> bool:
        """Deprecated alias of :attr:`allow_recompose`."""
        return self.allow_recompose

    def event(self) -> PrivacyEvent:
        """The event one call registers."""
        params = {} if self.keep_nodes is None else {"kept_nodes": self.keep_nodes.numel()}
        params["sampler"] = self.sampler
        return randomized_response_event(unit="edge", flip_probability=self.flip_probability, name=self.name,
                                         params=params)

    def forward(self, data: Data) -> Data:
        reject_sampled_batch("EdgeRandomizedResponse", data)  # whatever `symmetrize`: before anything else
        if isinstance(data, HeteroData):
            return self._forward_hetero(data)
        if getattr(data, _MARK, None) is not None and not self.allow_recompose:
            raise ValueError(
                "these data were already randomised by EdgeRandomizedResponse; a second application is a "
                "new release (pass allow_recompose=True to do it and be charged again)"
            )
        if getattr(data, "edge_index", None) is None:
            raise ValueError("EdgeRandomizedResponse randomises `data.edge_index`, which these data do not have")
        n = declared_num_nodes(data)
        if n is None:
            raise ValueError(
                "EdgeRandomizedResponse needs the public number of nodes: set `data.num_nodes` (or give node features "
                "`x`). It is never inferred from the private edges (the largest id in `edge_index` changes when an "
                "edge at the last node is added or removed)"
            )
        edge_index, n = simple_undirected(data.edge_index, n, symmetrize=self.symmetrize)
        keep = None
        if self.keep_nodes is not None:
            keep = self.keep_nodes.to(edge_index.device)
            if keep.numel() and (int(keep.min()) < 0 or int(keep.max()) >= n):
                raise ValueError(f"`keep_nodes` must lie in [0, {n}); got range [{int(keep.min())}, {int(keep.max())}]")
        flipped = (1.0 - self.q) * n * (n - 1) / 2  # expected non-edges turned into edges: public (n and q)
        if self.max_edges is not None and flipped > self.max_edges:
            raise ValueError(
                f"EdgeRandomizedResponse on {n:,} nodes at flip probability {self.flip_probability:.3g} releases about "
                f"{flipped:,.0f} edges (every pair flips: (1 - q) n (n - 1) / 2, plus the kept true edges), about "
                f"{32 * flipped / 2 ** 30:,.1f} GiB as an edge_index: above max_edges={self.max_edges:,}. Randomized "
                "response suits small graphs or large epsilon; on this graph use a private aggregation "
                "(GAPAggregation) or the link-prediction recipe, or raise `max_edges` if the memory is there"
            )
        if not self.allow_recompose:
            self._check_release_process()  # a copy in another process cannot see what was released
        parts = (n, edge_index.size(1), crc32_rows(edge_index.t()))
        key = self._released.digest(*parts)
        refusal = (
            "EdgeRandomizedResponse has already released this exact graph (same nodes and edges). A second "
            "release flips fresh bits and costs epsilon again; combining the releases removes the noise. This is "
            "what happens when a noisy transform is a dataset's `transform=` (it runs at every access): use it as "
            "`pre_transform=` or call it once. Pass allow_recompose=True to release again and be charged again."
        )
        if key in self._released and not self.allow_recompose:
            raise ValueError(refusal)
        # the process-wide secure mode may have changed since construction: refuse before charging
        secure = resolve_secure_mode(self.secure_mode, self.generator) if self.sampler == "safe" else None
        # with a shared ledger the guard's fingerprint is checked and recorded in the charge's transaction
        claim = self._release_claim(parts, np.ones(1, dtype=bool), refusal)
        charge(self.accountant, self.event(), self, claim=claim)
        data.edge_index = flip_edges(edge_index, n, self.q, keep_nodes=keep, generator=self.generator,
                                     sampler=self.sampler, secure_mode=secure)
        self._released[key] = True
        for attr in list(data.keys()):  # everything aligned with (or built from) the true edges
            if attr != "edge_index" and ("edge" in attr or attr in ("e_id", "adj", "adj_t")):
                del data[attr]
        if declared_num_nodes(data) != n:
            data.num_nodes = n
        setattr(data, _MARK, self.name)
        return data

    # ------------------------------------------------------------------ heterogeneous graphs
    def hetero_event(self, compositions: int, relations: int = 1) -> PrivacyEvent:
        r"""The event one call on a ``HeteroData`` registers: randomized response composed
        ``compositions`` times (the most relations of one node-type pair; see the class notes),
        exactly: RDP curve and pure epsilon times ``compositions``."""
        base = self.event()
        if isinstance(compositions, bool) or not isinstance(compositions, int) or compositions < 1:
            raise ValueError(f"`compositions` must be a positive int; got {compositions!r}")
        params = {**dict(base.params), "relations": int(relations), "compositions": int(compositions)}
        eps = math.log(self.q) - math.log1p(-self.q)
        return PrivacyEvent(name=self.name, unit=Unit.EDGE, mechanism="randomized_response", params=params,
                            orders=base.orders, rdp=tuple(compositions * v for v in base.rdp),
                            pld=("pure", eps, int(compositions)))

    def _forward_hetero(self, data: HeteroData) -> HeteroData:
        """Randomised response on every edge type of ``data`` under one event (see the class notes)."""
        from ..nn.hetero import relation_parts

        name = type(self).__name__
        if _MARK in data._global_store and not self.allow_recompose:
            raise ValueError(f"these data were already randomised by {name}; a second application is a new release "
                             "(pass allow_recompose=True to do it and be charged again)")
        if self.keep_nodes is not None:
            raise ValueError(f"{name}(keep_nodes=...) is for one node set; on a HeteroData the kept nodes' type is "
                             "ambiguous. Nothing was charged")
        if "metapath_dict" in data._global_store:
            raise ValueError(
                f"{name}: these data carry relations derived from paths of others (T.AddMetaPaths: metapath_dict). One "
                "edge of a source relation changes many entries of a derived one, which the per-relation analysis "
                "does not cover: randomise the data before adding metapaths (then they are post-processing). "
                "Nothing was charged")
        if not data.edge_types:
            raise ValueError(f"{name}: the HeteroData has no edge type to randomise")
        plan = []
        for et in data.edge_types:
            src, _, dst = et
            store = data[et]
            if "edge_index" not in store or store["edge_index"] is None:
                raise ValueError(f"{name} randomises `edge_index` of every edge type; {et} has none (a sparse adj_t "
                                 "must be turned into an edge_index first). Nothing was charged")
            counts = []
            for t in (src, dst):
                c = declared_type_num_nodes(data[t])
                if c is None:
                    raise ValueError(
                        f"{name} needs the public number of nodes of type {t!r}: set data[{t!r}].num_nodes (or give "
                        f"its features x). It is never inferred from the private edges (the largest id in an "
                        "edge_index changes when an edge at the last node is added or removed). Nothing was charged")
                counts.append(c)
            ns, nd = counts
            ei = store["edge_index"]
            if src == dst:  # one node set: undirected pairs, as on a homogeneous graph
                canon, _ = simple_undirected(ei, ns, symmetrize=self.symmetrize, name=f"data[{et}].edge_index")
                pairs = ns * (ns - 1) / 2
            else:
                check_edge_index(ei, max(ns, nd), name=f"data[{et}].edge_index")
                ei = (ei.as_tensor() if hasattr(ei, "as_tensor") else ei).long()
                if ei.numel() and (int(ei[0].max()) >= ns or int(ei[1].max()) >= nd):
                    raise ValueError(f"data[{et}].edge_index has ids outside the node sets: sources must lie in "
                                     f"[0, {ns}) and destinations in [0, {nd}). Nothing was charged")
                keys = torch.unique(ei[0] * nd + ei[1])
                if keys.numel() != ei.size(1) and not self.symmetrize:
                    raise ValueError(f"data[{et}].edge_index lists {ei.size(1) - keys.numel()} edges more than once "
                                     "(or pass symmetrize=True to merge them). Nothing was charged")
                canon = torch.stack([keys // nd, keys % nd])
                pairs = ns * nd
            plan.append((et, ns, nd, canon, pairs))
        flipped = sum((1.0 - self.q) * p for *_, p in plan)  # public: the sizes and q
        if self.max_edges is not None and flipped > self.max_edges:
            raise ValueError(
                f"{name} on this HeteroData at flip probability {self.flip_probability:.3g} releases about "
                f"{flipped:,.0f} edges over its {len(plan)} edge types ((1 - q) times the pairs of each: n (n - 1) / 2 "
                f"for a relation within one node type, n_src n_dst between two), about {32 * flipped / 2 ** 30:,.1f} "
                f"GiB: above max_edges={self.max_edges:,}. Randomized response suits small graphs or large epsilon; "
                "use GAPAggregation per relation (to_hetero / HeteroConv), or raise `max_edges` if the memory is there")
        if not self.allow_recompose:
            self._check_release_process()
        parts = tuple((et, ns, nd, canon.size(1), crc32_rows(canon.t())) for et, ns, nd, canon, _ in plan)
        key = self._released.digest("hetero", *parts)
        refusal = (f"{name} has already released these exact relations (same node sets and edges). A second release "
                   "flips fresh bits and costs epsilon again; combining the releases removes the noise. Use it as "
                   "`pre_transform=` or call it once, or pass allow_recompose=True to release again and be charged "
                   "again.")
        if key in self._released and not self.allow_recompose:
            raise ValueError(refusal)
        groups = relation_parts(et for et, *_ in plan)
        worst = max(len(v) for v in groups.values())
        secure = resolve_secure_mode(self.secure_mode, self.generator) if self.sampler == "safe" else None
        claim = self._release_claim(("hetero",) + parts, np.ones(1, dtype=bool), refusal)
        charge(self.accountant, self.hetero_event(worst, len(plan)), self, claim=claim)  # one event, before any noise
        for et, ns, nd, canon, _ in plan:
            store = data[et]
            if et[0] == et[2]:
                out = flip_edges(canon, ns, self.q, generator=self.generator, sampler=self.sampler, secure_mode=secure)
            else:
                out = flip_bipartite_edges(canon, ns, nd, self.q, generator=self.generator, sampler=self.sampler,
                                           secure_mode=secure)
            for attr in list(store.keys()):  # everything else of the relation belongs to its true edges
                if attr != "edge_index":
                    del store[attr]
            store.edge_index = out
        self._released[key] = True
        data._global_store[_MARK] = self.name
        return data

    def __repr__(self) -> str:
        eps = math.log(self.q / (1.0 - self.q))
        keep = "" if self.keep_nodes is None else f", keep_nodes={self.keep_nodes.numel()}"
        target = f"epsilon={eps:.4g}" if self.delta is None else f"epsilon={self.epsilon_arg:g}, delta={self.delta:g}"
        again = ", allow_recompose=True" if self.allow_recompose else ""
        return (f"{self.__class__.__name__}({target}, flip_probability={self.flip_probability:.4g}{keep}{again}, "
                f"sampler={self.sampler!r})")
