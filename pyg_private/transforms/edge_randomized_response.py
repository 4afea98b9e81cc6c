"""Edge-level randomized response as a transform (the Edge-Flipping baseline)."""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch_geometric.data import Data
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from ..accounting import (
    PrivacyAccountant,
    PrivacyEvent,
    charge,
    randomized_response_event,
    resolve_truth_probability,
)
from ..mechanisms.edge_flipping import flip_edges
from ..utils import simple_undirected

__all__ = ["EdgeRandomizedResponse"]

_MARK = "edge_randomized_response"


@functional_transform("edge_randomized_response")
class EdgeRandomizedResponse(BaseTransform):
    r"""Replace the graph by randomized response on its adjacency matrix
    (functional name: :obj:`edge_randomized_response`).

    Each node pair :math:`\{i, j\}` keeps its true bit :math:`A_{ij}` with probability
    :math:`q` and is flipped otherwise, independently. One edge changes one bit, so the
    release is pure :math:`\epsilon`-edge-DP with :math:`\epsilon = \log(q/(1-q))`, and
    its RDP curve is Mironov's randomized-response curve (Prop. 5); that is the event
    registered on unit ``"edge"`` before sampling. This is the Edge-Flipping baseline of
    ``specs/noisy_diffusion.md`` §4.2 (flip probability :math:`p`: :math:`q = 1 - p/2`).

    **Personalized use.** ``keep_nodes`` (for example a PPR seed) report their own pairs
    truthfully: the output then protects only edges not incident to them, and is meant
    for those nodes alone (spec §4.2: "the seed node already knows its own edges"). The
    event is the same curve; its guarantee is per recipient.

    Edge attributes (``edge_attr``, ``edge_weight``) belong to the true edges and are
    removed. The expected number of edges grows to about :math:`(1-q)\,n^2/2`.

    **Every call is a release.** Used as a dataset's ``transform=`` it runs again at every
    access, each access charged anew; use it as ``pre_transform=`` (or call it once) to
    release one noisy graph. Data it has already randomised are marked, and a second
    application raises unless ``allow_repeat=True``.

    Args:
        epsilon (float, optional): pure epsilon per edge, :math:`q = e^\epsilon/(1+e^\epsilon)`.
        delta (float, optional): with ``epsilon``: the largest :math:`q` whose RR curve
            converts to ``(epsilon, delta)`` (how Wei et al. 2024 account this baseline).
        flip_probability (float, optional): :math:`p`, instead of ``epsilon``.
        keep_nodes (Tensor or list, optional): nodes whose pairs are not randomised.
        accountant (PrivacyAccountant, optional): charged once per call.
        symmetrize (bool): accept a directed/duplicated ``edge_index`` by symmetrising it
            first. (default: :obj:`False`: such input raises ``ValueError``)
        allow_repeat (bool): allow randomising already randomised data (charged again).
        generator (torch.Generator, optional): reproducibility only; voids the guarantee.
    """

    def __init__(self, epsilon: Optional[float] = None, flip_probability: Optional[float] = None, *,
                 delta: Optional[float] = None, keep_nodes: Any = None,
                 accountant: Optional[PrivacyAccountant] = None, symmetrize: bool = False, allow_repeat: bool = False, generator: Optional[torch.Generator] = None,
                 name: str = "edge_randomized_response") -> None:
        self.q = resolve_truth_probability(epsilon=epsilon, delta=delta, flip_probability=flip_probability)
        self.epsilon_arg, self.delta = epsilon, delta
        self.flip_probability = 2.0 * (1.0 - self.q)
        self.keep_nodes = None if keep_nodes is None else torch.as_tensor(keep_nodes).long().view(-1)
        self.accountant = accountant
        self.symmetrize = symmetrize
        self.allow_repeat = allow_repeat
        self.generator = generator
        self.name = name

    def event(self) -> PrivacyEvent:
        """The event one call registers."""
        params = {} if self.keep_nodes is None else {"kept_nodes": self.keep_nodes.numel()}
        return randomized_response_event(unit="edge", flip_probability=self.flip_probability, name=self.name,
                                         params=params)

    def forward(self, data: Data) -> Data:
        if getattr(data, _MARK, None) is not None and not self.allow_repeat:
            raise ValueError(
                "these data were already randomised by EdgeRandomizedResponse; a second application is a "
                "new release (pass allow_repeat=True to do it and be charged again)"
            )
        edge_index, n = simple_undirected(data.edge_index, data.num_nodes, symmetrize=self.symmetrize)
        keep = None
        if self.keep_nodes is not None:
            keep = self.keep_nodes.to(edge_index.device)
            if keep.numel() and (int(keep.min()) < 0 or int(keep.max()) >= n):
                raise ValueError(f"`keep_nodes` must lie in [0, {n}); got range [{int(keep.min())}, {int(keep.max())}]")
        charge(self.accountant, self.event(), self)
        data.edge_index = flip_edges(edge_index, n, self.q, keep_nodes=keep, generator=self.generator)
        for key in ("edge_attr", "edge_weight"):
            if key in data:
                del data[key]
        setattr(data, _MARK, self.name)
        return data

    def __repr__(self) -> str:
        import math

        eps = math.log(self.q / (1.0 - self.q))
        keep = "" if self.keep_nodes is None else f", keep_nodes={self.keep_nodes.numel()}"
        target = f"epsilon={eps:.4g}" if self.delta is None else f"epsilon={self.epsilon_arg:g}, delta={self.delta:g}"
        return f"{self.__class__.__name__}({target}, flip_probability={self.flip_probability:.4g}{keep})"
