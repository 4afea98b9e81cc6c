r"""A plain graph classifier for the graph-level recipes: message passing, a per-graph pooling, a head.

``GraphClassifier(conv="gin")`` is GIN (Xu et al., "How Powerful are Graph Neural Networks?", ICLR
2019): :math:`h_v^{(k)} = \mathrm{MLP}^{(k)}\big((1 + \epsilon) h_v^{(k-1)} + \sum_{u \in N(v)} h_u^{(k-1)}\big)`,
``conv="gcn"`` stacks :class:`~torch_geometric.nn.GCNConv` (Kipf and Welling, ICLR 2017), and
``conv="none"`` is the **edge-free** baseline: the same node MLPs without any message, so the model
reads the node features and the node count, never an edge. The node states of the last layer are
pooled per graph (``pool="add"``: :func:`~torch_geometric.nn.global_add_pool`, ``"mean"``:
:func:`~torch_geometric.nn.global_mean_pool`) and a two-layer MLP head gives the logits.

No normalisation layer and no dropout: batch norm would mix the graphs of a batch (refused by
:class:`~pyg_private.models.GraphDPSGD`). ``forward(x, edge_index, batch)`` returns ``[B, C]``.
"""
from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.nn import MLP, GCNConv, GINConv, global_add_pool, global_mean_pool

from ..accounting.validation import check_positive_int

__all__ = ["GraphClassifier"]


class GraphClassifier(nn.Module):
    """Message passing (``"gin"``, ``"gcn"`` or ``"none"``), per-graph pooling and an MLP head.

    Args:
        in_channels (int): node feature width.
        hidden (int): hidden width.
        num_classes (int): classes.
        conv (str): ``"gin"``, ``"gcn"`` or ``"none"`` (edge-free). (default: ``"gin"``)
        layers (int): message-passing (or node MLP) layers. (default: :obj:`2`)
        pool (str): ``"add"`` or ``"mean"``. (default: ``"add"``)

    Shapes:
        - **input:** node features :math:`(|\\mathcal{V}|, F)`, ``edge_index`` :math:`(2, |\\mathcal{E}|)`,
          ``batch`` :math:`(|\\mathcal{V}|)`
        - **output:** logits :math:`(B, C)`
    """

    def __init__(self, in_channels: int, hidden: int, num_classes: int, *, conv: str = "gin", layers: int = 2,
                 pool: str = "add") -> None:
        super().__init__()
        if conv not in ("gin", "gcn", "none"):
            raise ValueError(f"`conv` must be 'gin', 'gcn' or 'none'; got {conv!r}")
        if pool not in ("add", "mean"):
            raise ValueError(f"`pool` must be 'add' or 'mean'; got {pool!r}")
        in_channels = check_positive_int(in_channels, "in_channels")
        hidden = check_positive_int(hidden, "hidden")
        num_classes = check_positive_int(num_classes, "num_classes")
        layers = check_positive_int(layers, "layers")
        self.conv, self.pool, self.layers = conv, pool, layers
        self.convs = nn.ModuleList()
        for i in range(layers):
            d = in_channels if i == 0 else hidden
            if conv == "gin":
                self.convs.append(GINConv(MLP([d, hidden, hidden], norm=None, act="relu")))
            elif conv == "gcn":
                self.convs.append(GCNConv(d, hidden))
            else:
                self.convs.append(MLP([d, hidden, hidden], norm=None, act="relu"))
        self.head = MLP([hidden, hidden, num_classes], norm=None, act="relu")

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        for layer in self.convs:
            x = (layer(x) if self.conv == "none" else layer(x, edge_index)).relu()
        pooled = global_add_pool(x, batch) if self.pool == "add" else global_mean_pool(x, batch)
        return self.head(pooled)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(conv={self.conv!r}, layers={self.layers}, pool={self.pool!r}, "
                f"hidden={self.head.channel_list[0]}, classes={self.head.channel_list[-1]})")
