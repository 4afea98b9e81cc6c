r"""Keep at most ``D`` incoming entries per node, chosen by a keyed order of the pairs."""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from ..accounting.validation import check_positive_int
from ..utils.degree_cap import draw_cap_key, in_degree_cap_mask

__all__ = ["BoundInDegree"]


@functional_transform("bound_in_degree")
class BoundInDegree(BaseTransform):
    r"""Keep, for every node :math:`u`, at most ``max_in_degree`` entries of ``edge_index`` whose
    target is :math:`u`: those first in the order of :math:`(\pi_k(u, w), w)`, a keyed hash of the
    pair (:mod:`pyg_private.utils.degree_cap`). The per-node edge sampling of GAP's and ProGAP's
    code (Sajadmanesh et al., USENIX Security 2023; WSDM 2024), deterministic given the key:
    a node's kept entries depend on its own entries and the key only. The result is directed
    (in-degree at most ``max_in_degree``, out-degree unbounded); edge attributes follow their
    entries.

    **Privacy.** This is not a release and charges nothing. Capping does not by itself bound a
    node-level sensitivity: removing a node changes the kept entries of every neighbour that
    ranked it among its first ``max_in_degree``, each of which promotes its next neighbour. The
    bound that holds, :math:`\sqrt{D_c^2 + 4D}` for graphs of maximum degree :math:`D`, needs
    :math:`D` checked on the graph *before* the cap; so for a node-level release pass the graph
    as it is, with ``degree_cap=`` to :class:`~pyg_private.nn.ProGAPAggregation` or
    :func:`~pyg_private.models.run_progap`, which apply this same map after the check. Use the
    transform to see what a release aggregates over, or for a non-private baseline on the capped
    graph.

    Args:
        max_in_degree (int): :math:`D_c`, the most entries kept per target node.
        key (int, optional): the order's 64-bit key; drawn at construction when ``None`` (seed
            ``generator`` to repeat it).
        generator (torch.Generator, optional): draws the key when ``key`` is ``None``.

    Example:
        >>> import torch
        >>> from torch_geometric.data import Data
        >>> from pyg_private.transforms import BoundInDegree
        >>> star = torch.tensor([[1, 2, 3, 4, 0, 0, 0, 0], [0, 0, 0, 0, 1, 2, 3, 4]])
        >>> data = BoundInDegree(2, key=7)(Data(edge_index=star, num_nodes=5))
        >>> int((data.edge_index[1] == 0).sum())  # node 0 keeps 2 of its 4 incoming entries
        2
    """

    def __init__(self, max_in_degree: int, key: Optional[int] = None,
                 generator: Optional[torch.Generator] = None) -> None:
        self.max_in_degree = check_positive_int(max_in_degree, "max_in_degree")
        if key is not None and (isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < 1 << 64):
            raise ValueError(f"`key` must be an integer in [0, 2**64); got {key!r}")
        self.key = draw_cap_key(generator) if key is None else int(key)

    def forward(self, data: Union[Data, HeteroData]) -> Union[Data, HeteroData]:
        for store in data.edge_stores:
            if "edge_index" not in store:
                continue
            if "adj_t" in store or "adj" in store:
                raise ValueError("BoundInDegree works on `edge_index`; convert a sparse adjacency back first")
            num_nodes = store.size(1) if isinstance(data, HeteroData) else data.num_nodes
            mask = in_degree_cap_mask(store.edge_index, num_nodes, self.max_in_degree, self.key)
            num_edges = store.edge_index.size(1)
            attrs = [name for name, value in store.items() if name != "edge_index" and torch.is_tensor(value)
                     and store.is_edge_attr(name) and value.size(0) == num_edges]
            store.edge_index = store.edge_index[:, mask]
            for name in attrs:
                store[name] = store[name][mask]
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(max_in_degree={self.max_in_degree})"
