r"""Per-class separable losses :math:`\ell(x; y)` with their first two derivatives.

GCON's objective perturbation (Wei et al., arXiv:2407.05034, Eqs. 12, 27, 28) needs a
loss :math:`L(\Theta; z, y) = \sum_j \ell(z^\top\theta_j; y_j)` that separates over the
classes and whose first three derivatives are bounded; both losses carry the paper's
:math:`1/c` factor. The bounds themselves live in
:func:`pyg_private.accounting.loss_constants`.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["SeparableLoss"]


class SeparableLoss:
    r"""``"soft_margin"`` (PyTorch's ``MultiLabelSoftMarginLoss`` per entry, Eq. 27) or
    ``"pseudo_huber"`` with width :math:`\delta_l` (Eq. 28), divided by ``num_classes``.

    Every method takes the margins :math:`x = Z\Theta` (``[n, c]``) and the 0/1 targets
    ``y`` of the same shape and works entry-wise.
    """

    def __init__(self, name: str, num_classes: int, huber_delta: Optional[float] = None) -> None:
        if name not in ("soft_margin", "pseudo_huber"):
            raise ValueError(f"unknown loss {name!r}: the objective-perturbation proof covers 'soft_margin' and "
                             "'pseudo_huber' (separable per class, bounded first three derivatives); softmax "
                             "cross-entropy is not separable and is not covered")
        if name == "pseudo_huber" and (huber_delta is None or not huber_delta > 0):
            raise ValueError(f"'pseudo_huber' needs `huber_delta` > 0; got {huber_delta!r}")
        self.name, self.c, self.delta = name, float(num_classes), huber_delta

    def value(self, x: Tensor, y: Tensor) -> Tensor:
        if self.name == "soft_margin":
            return (y * F.softplus(-x) + (1 - y) * F.softplus(x)) / self.c
        d = self.delta
        return d * d * (torch.sqrt(1 + ((x - y) / d) ** 2) - 1) / self.c

    def first(self, x: Tensor, y: Tensor) -> Tensor:
        if self.name == "soft_margin":
            return (torch.sigmoid(x) - y) / self.c
        return (x - y) / (self.c * torch.sqrt(1 + ((x - y) / self.delta) ** 2))

    def second(self, x: Tensor, y: Tensor) -> Tensor:
        if self.name == "soft_margin":
            s = torch.sigmoid(x)
            return s * (1 - s) / self.c
        return 1.0 / (self.c * (1 + ((x - y) / self.delta) ** 2) ** 1.5)
