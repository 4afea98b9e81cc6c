"""The propagation the private layers share: a sum over neighbours as one sparse-dense product."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import spmm

from ..utils.csr_product import CsrProduct

__all__ = ["SparsePropagation"]


class SparsePropagation(MessagePassing):
    """``MessagePassing`` with sum aggregation that always takes the fused sparse path.

    Layers call ``self.propagate(adj, x=...)`` with a CSR adjacency (see
    :func:`~pyg_private.utils.adjacency_csr`), whose row ``i`` holds ``i``'s neighbours;
    the result is ``adj @ x``, summed in the package's order (:class:`~pyg_private.utils.csr_product.CsrProduct`:
    the same values on every CPU and torch version, and as the layers' own products). A layer's release cache
    lives in ``_cache``; :meth:`reset_parameters` keeps it (a release is paid data, not a parameter, and
    the layers have no learnable parameters), ``forget_release()`` drops it.
    """

    def __init__(self) -> None:
        super().__init__(aggr="add", flow="source_to_target")
        self._cache = None

    def reset_parameters(self) -> None:
        """Nothing to re-initialise: the layer has no learnable parameters, and its cached release is
        paid data, kept (``torch_geometric.nn.inits.reset(model)`` between runs costs nothing). Use
        ``forget_release()`` to drop the release."""
        super().reset_parameters()

    def message(self, x_j: Tensor) -> Tensor:  # pragma: no cover - the sparse path is always taken
        return x_j

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor) -> Tensor:
        if isinstance(adj_t, Tensor) and adj_t.layout == torch.sparse_csr:
            return CsrProduct(adj_t)(x)
        return spmm(adj_t, x, reduce="sum")
