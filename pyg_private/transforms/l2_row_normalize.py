r"""Put every feature row on the unit :math:`\ell_2` ball."""
from __future__ import annotations

from typing import Any, List, Literal, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

try:  # optional backend
    from torch_sparse import SparseTensor
except ImportError:  # pragma: no cover - exercised when the extra is absent
    SparseTensor = None  # type: ignore[assignment,misc]

__all__ = ["L2RowNormalize", "l2_row_normalize"]

Mode = Literal["normalize", "clip"]


def _factors(sq_norms: Tensor, mode: Mode) -> Tensor:
    norms = sq_norms.sqrt()
    if mode == "normalize":
        return torch.where(norms > 0, 1.0 / norms, torch.ones_like(norms))
    return torch.where(norms > 1, 1.0 / norms, torch.ones_like(norms))


def _check_finite(values: Tensor, name: str) -> None:
    if not torch.isfinite(values).all():
        raise ValueError(f"`{name}` contains NaN or infinite entries; L2 row normalisation needs finite features")


def l2_row_normalize(x: Any, mode: Mode = "normalize", *, name: str = "x") -> Any:
    r"""Map every row of ``x`` onto the unit :math:`\ell_2` ball.

    Args:
        x (Tensor | torch.sparse Tensor | SparseTensor): a 2-D feature matrix, dense,
            ``torch.sparse`` (COO or CSR) or ``torch_sparse.SparseTensor``; the output keeps
            the input's layout, device and (floating) dtype. Integer inputs become the
            default float dtype.
        mode (str): ``"normalize"`` (:math:`x_i \mapsto x_i/\lVert x_i\rVert_2`, zero rows stay
            zero) or ``"clip"`` (:math:`x_i \mapsto x_i/\max(1, \lVert x_i\rVert_2)`: only rows
            outside the ball shrink).
        name (str): the argument name used in error messages.
    """
    if mode not in ("normalize", "clip"):
        raise ValueError(f"`mode` must be 'normalize' or 'clip'; got {mode!r}")
    if SparseTensor is not None and isinstance(x, SparseTensor):
        row, col, value = x.coo()
        if value is None:
            value = torch.ones(row.numel(), device=row.device)
        value = value if value.is_floating_point() else value.to(torch.get_default_dtype())
        _check_finite(value, name)
        sq = torch.zeros(x.size(0), dtype=value.dtype, device=value.device).index_add_(0, row, value * value)
        return x.set_value(value * _factors(sq, mode)[row], layout="coo")
    if not isinstance(x, Tensor):
        raise TypeError(f"`{name}` must be a Tensor or SparseTensor; got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"`{name}` must be a 2-D [num_nodes, num_features] matrix; got shape {tuple(x.shape)}")
    if x.layout == torch.sparse_coo:
        x = x.coalesce()
        idx, value = x.indices(), x.values()
        value = value if value.is_floating_point() else value.to(torch.get_default_dtype())
        _check_finite(value, name)
        sq = torch.zeros(x.size(0), dtype=value.dtype, device=value.device).index_add_(0, idx[0], value * value)
        return torch.sparse_coo_tensor(idx, value * _factors(sq, mode)[idx[0]], x.shape, is_coalesced=True,
                                       check_invariants=False)
    if x.layout == torch.sparse_csr:
        crow, col, value = x.crow_indices(), x.col_indices(), x.values()
        value = value if value.is_floating_point() else value.to(torch.get_default_dtype())
        _check_finite(value, name)
        row = torch.repeat_interleave(torch.arange(x.size(0), device=x.device), crow.diff())
        sq = torch.zeros(x.size(0), dtype=value.dtype, device=value.device).index_add_(0, row, value * value)
        return torch.sparse_csr_tensor(crow, col, value * _factors(sq, mode)[row], x.shape, check_invariants=False)
    if x.layout != torch.strided:
        raise TypeError(f"`{name}` has unsupported layout {x.layout}")
    x = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    _check_finite(x, name)
    return x * _factors((x * x).sum(dim=-1), mode).unsqueeze(-1)


@functional_transform("l2_row_normalize")
class L2RowNormalize(BaseTransform):
    r"""Map every row of ``data.x`` (or the attributes in ``attrs``) onto the unit
    :math:`\ell_2` ball (functional name: :obj:`l2_row_normalize`).

    .. math::
        \mathbf{x}_i \mapsto \frac{\mathbf{x}_i}{\lVert\mathbf{x}_i\rVert_2}
        \quad (\text{"normalize"}), \qquad
        \mathbf{x}_i \mapsto \frac{\mathbf{x}_i}{\max(1, \lVert\mathbf{x}_i\rVert_2)}
        \quad (\text{"clip"}).

    The sensitivity analyses of GCON (rows of the propagated features in the unit
    ball), CARIBOU (:math:`\lVert X_u\rVert \le 1`) and PrivGE (coordinates in
    :math:`[-1, 1]`) assume this pre-condition.

    **Privacy cost: none.** Each row is mapped by a fixed function of that row alone; the
    map uses no other node, no edge and no data-dependent constant. Under node- or
    edge-level DP the mechanisms downstream are analysed on the normalised rows, and
    under local DP each node can apply it to its own row before randomising. It
    therefore registers nothing with an accountant. (Normalising *after* a noisy
    release is post-processing and also free.)

    Args:
        mode (str, optional): ``"normalize"`` (rows to norm 1, zero rows stay zero) or
            ``"clip"`` (only rows with norm > 1 shrink). (default: :obj:`"normalize"`)
        attrs (List[str], optional): attributes to transform. (default: :obj:`["x"]`)

    Dense, ``torch.sparse`` (COO/CSR) and ``torch_sparse.SparseTensor`` features are
    supported on any device; NaN or infinite entries raise ``ValueError``.
    """

    def __init__(self, mode: Mode = "normalize", attrs: Optional[List[str]] = None) -> None:
        if mode not in ("normalize", "clip"):
            raise ValueError(f"`mode` must be 'normalize' or 'clip'; got {mode!r}")
        self.mode = mode
        self.attrs = list(attrs) if attrs is not None else ["x"]

    def forward(self, data: Union[Data, HeteroData]) -> Union[Data, HeteroData]:
        for store in data.stores:
            for key, value in store.items(*self.attrs):
                store[key] = l2_row_normalize(value, self.mode, name=key)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(mode={self.mode!r}, attrs={self.attrs})"
