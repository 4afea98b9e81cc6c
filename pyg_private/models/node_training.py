"""Training an edge-free node classifier: full-batch Adam, or DP-SGD through Opacus.

Both take the node features ``x`` (no edges), labels ``y`` and a training mask; the
examples are the training nodes. :func:`fit_dp_sgd` runs Opacus' DP-SGD (per-node
gradient clipping, Gaussian noise, Poisson sampling) and records every step in a
:class:`~pyg_private.PrivacyAccountant` through
:class:`~pyg_private.accounting.OpacusAccountant`: that is node-level DP for a model
that sees no edges, because each node is one example.
"""
from __future__ import annotations

import copy
import math
import warnings
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import trange

from ..accounting import PrivacyAccountant, Unit

__all__ = ["fit_full_batch", "fit_dp_sgd", "release_opacus_state", "predict", "accuracy"]


def _check(x: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    if x.dim() != 2 or y.dim() != 1 or y.numel() != x.size(0):
        raise ValueError(f"`x` must be [N, F] and `y` [N]; got {tuple(x.shape)} and {tuple(y.shape)}")
    if mask.dtype != torch.bool or mask.shape != y.shape:
        raise ValueError("`mask` must be a boolean node mask of shape [N]")
    if not bool(mask.any()):
        raise ValueError("`mask` selects no node")
    return mask


def fit_full_batch(model: nn.Module, x: Tensor, y: Tensor, mask: Tensor, *, epochs: int = 100,
                   lr: float = 1e-3, weight_decay: float = 0.0, val_mask: Optional[Tensor] = None) -> nn.Module:
    """Train ``model`` on the masked nodes with full-batch Adam and cross-entropy (not private).

    ``val_mask``, if given, restores the epoch of best accuracy on those nodes (measured after
    every epoch's step, the first of equals kept) instead of keeping the last: it reads their
    features and labels, so use it only where they are public.
    """
    mask = _check(x, y, mask)
    if val_mask is not None:
        val_mask = _check(x, y, val_mask)
        xv, yv = x[val_mask], y[val_mask]
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    xs, ys = x[mask], y[mask]
    best, state = -1.0, None
    for _ in trange(int(epochs), desc="training", disable=None, leave=False):
        opt.zero_grad()
        F.cross_entropy(model(xs), ys).backward()
        opt.step()
        if val_mask is not None:
            score = float((predict(model, xv) == yv).float().mean())  # evaluation mode
            if score > best:
                best, state = score, copy.deepcopy(model.state_dict())
            model.train()
    if state is not None:
        model.load_state_dict(state)
    model.eval()
    return model


def fit_dp_sgd(model: nn.Module, x: Tensor, y: Tensor, mask: Tensor, *, noise_multiplier: float,
               accountant: PrivacyAccountant, epochs: int = 100, lr: float = 1e-3, batch_size: int = 256,
               max_grad_norm: float = 1.0, unit: str | Unit = Unit.NODE, name: str = "dp-sgd",
               generator: Optional[torch.Generator] = None, num_examples: Optional[int] = None) -> nn.Module:
    """Train ``model`` on the masked nodes with Opacus' DP-SGD, every step charged to ``accountant``.

    Poisson sampling at rate ``1 / m`` with ``m = ceil(n / min(batch_size, n))`` steps per
    epoch, per-example clipping at ``max_grad_norm``, gradients averaged over the expected
    batch ``int(n / m)``. ``n`` is ``num_examples`` when given, else the number of masked
    nodes. Under add/remove-one-example neighbours the rate, the step count and the averaging
    must not depend on the private number of examples: pass ``num_examples``, a **public**
    count of example slots (e.g. the size of a public training split over a fixed node
    universe, of which only the present nodes are in ``mask``), ``>=`` the masked count.
    ``model`` is trained in place; the function returns it with its (released) weights only:
    Opacus' wrapper and hooks are removed, and so are the per-example gradients, their clipped sum
    (noise-free functions of the private examples) and the captured inputs that Opacus leaves on the
    parameters and modules (:func:`release_opacus_state`), so the model pickles and saves clean.
    ``generator`` seeds the noise (the Poisson sampling uses the global RNG, as in Opacus).
    """
    from opacus import PrivacyEngine  # imported here: Opacus is heavy and only DP-SGD needs it
    from opacus.data_loader import DPDataLoader
    from torch.utils.data import TensorDataset

    from ..accounting.opacus_bridge import OpacusAccountant

    mask = _check(x, y, mask)
    present = int(mask.sum())
    n = present if num_examples is None else int(num_examples)
    if n < present:
        raise ValueError(f"`num_examples` (the public number of example slots) must be >= the number of examples "
                         f"in `mask`; got {num_examples!r}")
    steps = math.ceil(n / min(int(batch_size), n))
    dataset = TensorDataset(x[mask].detach(), y[mask])
    loader = DPDataLoader(dataset, sample_rate=1.0 / steps)  # Poisson sampling at a public rate
    loader.batch_sampler.steps = steps  # not int(1 / rate), which rounding could lower
    engine = PrivacyEngine(secure_mode=False)
    engine.accountant = OpacusAccountant(accountant, unit=unit, name=name)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    with warnings.catch_warnings():  # Opacus warns about the non-secure RNG, which `generator` asks for
        warnings.simplefilter("ignore", UserWarning)
        private_model, private_opt, private_loader = engine.make_private(
            module=model, optimizer=opt, data_loader=loader, noise_multiplier=float(noise_multiplier),
            max_grad_norm=float(max_grad_norm), poisson_sampling=False, noise_generator=generator)
        try:
            private_opt.expected_batch_size = int(n * (1.0 / steps))  # Opacus' value, from the public count
            private_model.train()
            # a progress bar on interactive terminals only (tqdm's `disable=None`), on stderr
            for _ in trange(int(epochs), desc=f"DP-SGD ({name})", disable=None, leave=False):
                for xb, yb in private_loader:
                    private_opt.zero_grad()
                    out = private_model(xb)
                    # an empty Poisson batch still takes a step (noise only), with a zero loss
                    loss = F.cross_entropy(out, yb) if len(yb) else out.sum() * 0.0
                    loss.backward()
                    private_opt.step()
        finally:  # also after a refused step: the model leaves with its weights only
            release_opacus_state(model, private_model)
    model.eval()
    return model


#: What Opacus leaves on the parameters (per-example gradients and their clipped sum, both without
#: noise) and on the modules (the hooks' captured inputs, private examples) of a model it trained.
_OPACUS_PARAMETER_STATE = ("grad_sample", "summed_grad", "_forward_counter", "_current_grad_sample", "_norm_sample")
_OPACUS_MODULE_STATE = ("activations", "max_batch_len", "ft_compute_sample_grad", "autograd_grad_sample_hooks")


def release_opacus_state(model: nn.Module, wrapper: Optional[nn.Module] = None) -> None:
    """Remove from ``model`` what DP-SGD left on it besides its weights: Opacus' hooks (which would
    keep capturing the inputs of every later forward), the per-example gradients and their clipped sum
    on every parameter (``grad_sample``, ``summed_grad``: computed from the private examples **without
    noise**), the captured activations (private inputs), and the last step's gradient. Without this a
    ``pickle`` or ``torch.save`` of the trained model would write the per-example gradients out (a
    parameter pickles its attributes). Only the noisy, released weights are kept."""
    close = getattr(wrapper, "_close", None)
    if callable(close):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            close()  # removes the hooks (and the attributes Opacus knows of)
    for p in model.parameters():
        for attr in _OPACUS_PARAMETER_STATE:
            p.__dict__.pop(attr, None)
        p.grad = None
    for module in model.modules():
        for attr in _OPACUS_MODULE_STATE:
            module.__dict__.pop(attr, None)
        if wrapper is not None:  # any hook of the wrapper that `_close` left (another Opacus version)
            for hooks in (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
                          module._backward_pre_hooks):
                for key in [k for k, hook in hooks.items() if _bound_to(hook, wrapper)]:
                    del hooks[key]


def _bound_to(hook: object, owner: object) -> bool:
    func = getattr(hook, "func", hook)  # functools.partial
    return getattr(func, "__self__", None) is owner


@torch.no_grad()
def predict(model: nn.Module, x: Tensor) -> Tensor:
    """Class predictions of ``model`` (evaluation mode)."""
    model.eval()
    return model(x).argmax(dim=-1)


@torch.no_grad()
def accuracy(model: nn.Module, x: Tensor, y: Tensor, mask: Tensor) -> float:
    """Accuracy of ``model`` on the masked nodes."""
    mask = _check(x, y, mask)
    return float((predict(model, x[mask]) == y[mask]).float().mean())
