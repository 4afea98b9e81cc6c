"""Refuse private releases inside a model that Opacus trains with DP-SGD, before anything is charged.

A pyg_private layer (:class:`~pyg_private.nn.ContractiveGraphLayer`,
:class:`~pyg_private.nn.GAPAggregation`, :class:`~pyg_private.nn.NoisyPPRDiffusion`, ...) is a noisy
release with no trainable parameter. Inside the module given to ``PrivacyEngine.make_private`` it
would run, and be charged, on every batch, while DP-SGD's per-example clipping (Abadi et al.,
CCS 2016, Alg. 1) assumes that each example's gradient reads that example only; Opacus then fails
at ``optimizer.step()`` with "Per sample gradient is not initialized" after the release was
already charged. The private propagation belongs *outside* the DP-SGD model, computed once.
"""
from __future__ import annotations

import sys
from typing import Any

import torch
from opacus.validators.errors import UnsupportedModuleError

__all__ = ["ReleaseInsideDPSGDError", "check_opacus_model", "private_release_modules", "refuse_release_inside_opacus"]

#: Opacus (1.x) sets this attribute on the model whose per-sample gradients it computes.
_OPACUS_MARK = "autograd_grad_sample_hooks"
#: Frames searched for a model under Opacus (a release is made a few calls below the model's forward).
_MAX_DEPTH = 64

_ADVICE = ("Compute the private propagation once, outside the DP-SGD model: build the layer with cached=True, "
           "run `with torch.no_grad(): h = layer(x, edge_index)` (one charged release), and give make_private a "
           "model that holds only trainable layers (e.g. torch.nn.Linear), trained on the rows of h (the rows of h "
           "are the examples).")


class ReleaseInsideDPSGDError(UnsupportedModuleError):
    """A pyg_private release layer sits inside a model trained by Opacus' DP-SGD.

    A subclass of Opacus' ``UnsupportedModuleError`` (a ``ValueError``), raised before anything
    is charged or released.
    """


def private_release_modules(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The submodules of ``module`` (itself included) that are pyg_private releases:
    ``(qualified name, module)`` pairs. A release layer is a module of this package that
    charges an accountant (it has an ``accountant`` attribute)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"`module` must be a torch.nn.Module; got {type(module).__name__}")
    found = []
    for name, sub in module.named_modules():
        cls = type(sub)
        if cls.__module__.startswith("pyg_private.") and hasattr(sub, "accountant"):
            found.append((name or "<the module itself>", sub))
    return found


def check_opacus_model(module: torch.nn.Module) -> None:
    """Raise :class:`ReleaseInsideDPSGDError` when ``module`` contains a pyg_private release layer.

    Call it on the module you give ``PrivacyEngine.make_private`` (the helpers
    :func:`~pyg_private.accounting.opacus_bridge.make_private` and
    :func:`~pyg_private.accounting.opacus_bridge.make_private_with_epsilon` do). Nothing is
    charged by the check.
    """
    found = private_release_modules(module)
    if found:
        names = ", ".join(f"{n} ({type(m).__name__})" for n, m in found)
        raise ReleaseInsideDPSGDError(
            f"the module given to DP-SGD contains pyg_private private release layer(s): {names}. DP-SGD clips and "
            "noises per-example gradients of trainable layers; a release inside the model would be run and charged "
            "on every batch and gives Opacus no per-sample gradient (it fails at optimizer.step with 'Per sample "
            f"gradient is not initialized'). {_ADVICE} Nothing was charged."
        )


def refuse_release_inside_opacus(owner: Any) -> None:
    """Raise :class:`ReleaseInsideDPSGDError` when ``owner`` (a layer about to be charged) runs
    inside the forward of a model prepared by Opacus (``make_private``). Called by
    :func:`~pyg_private.accounting.charge` before it registers anything."""
    if not isinstance(owner, torch.nn.Module):
        return
    frame = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return
        candidate = frame.f_locals.get("self") if frame.f_code.co_name == "forward" else None
        if (isinstance(candidate, torch.nn.Module) and getattr(candidate, _OPACUS_MARK, None) is not None
                and any(m is owner for m in candidate.modules())):
            raise ReleaseInsideDPSGDError(
                f"{type(owner).__name__} is a private release and runs inside the forward of a model prepared by "
                "Opacus' make_private (DP-SGD). It would be charged on every batch and gives Opacus no per-sample "
                f"gradient (training fails at optimizer.step with 'Per sample gradient is not initialized'). {_ADVICE} "
                "Nothing was charged or released."
            )
        frame = frame.f_back
