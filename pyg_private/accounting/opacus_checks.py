"""Refuse private releases inside a model that Opacus trains with DP-SGD, before anything is charged.

A pyg_private layer (:class:`~pyg_private.nn.ContractiveGraphLayer`,
:class:`~pyg_private.nn.GAPAggregation`, :class:`~pyg_private.nn.NoisyPPRDiffusion`, ...) is a noisy
release with no trainable parameter. Inside the module given to ``PrivacyEngine.make_private`` it
would run, and be charged, on every batch, while DP-SGD's per-example clipping (Abadi et al.,
CCS 2016, Alg. 1) assumes that each example's gradient reads that example only; Opacus then fails
at ``optimizer.step()`` with "Per sample gradient is not initialized" after the release was
already charged. The private propagation belongs *outside* the DP-SGD model, computed once.

A PyG message-passing layer (any :class:`torch_geometric.nn.MessagePassing`, e.g. ``GINConv``,
``GCNConv``) is refused too: Opacus' per-sample gradients are per **row** of each layer's input.
In a message-passing layer the rows are nodes, and a node's row gradient collects what its
neighbours' losses send back through the messages, so clipping it bounds the contribution of no
example; after a per-graph pooling the rows are graphs. With a pooled head Opacus fails at the
first ``optimizer.step()`` ("stack expects each tensor to be equal size"); without one it would
train with a guarantee that does not hold. When the examples are the graphs of a graph dataset,
the unit is ``"graph"`` and the per-graph DP-SGD of :class:`~pyg_private.models.GraphDPSGD` is the
fix (it clips each graph's whole gradient).
"""
from __future__ import annotations

import sys
from typing import Any

import torch
from opacus.validators.errors import UnsupportedModuleError

__all__ = ["ReleaseInsideDPSGDError", "MessagePassingInDPSGDError", "check_opacus_model", "private_release_modules",
           "message_passing_modules", "refuse_message_passing_under_opacus", "refuse_release_inside_opacus"]

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


class MessagePassingInDPSGDError(UnsupportedModuleError):
    """A PyG message-passing layer sits inside a model trained by Opacus' per-sample DP-SGD, whose
    per-row gradients are per node there, not per example (see the module notes). A subclass of
    Opacus' ``UnsupportedModuleError`` (a ``ValueError``), raised before anything is charged."""


_MP_ADVICE = (
    "Opacus clips per-sample gradients per row of each layer's input: in a message-passing layer the rows are "
    "nodes (per-node gradients, each mixing what the node's neighbours send back through the messages), after a "
    "per-graph pooling they are graphs (per-graph gradients), so no clipping bounds what one example changes (with "
    "a pooled head Opacus fails at optimizer.step with 'stack expects each tensor to be equal size'; without one it "
    "would train with a guarantee that does not hold). When each example is a whole graph of a graph dataset, the "
    "unit is 'graph' (one graph added or removed): train the model with per-graph DP-SGD, "
    "pyg_private.models.GraphDPSGD(model, num_graphs=..., epsilon=..., delta=...).fit(graphs), which clips each "
    "graph's whole gradient and charges one event on unit 'graph'. For node classification, compute the "
    "propagation once outside the model (a private release, or PrecomputedPropagation) and give Opacus only a "
    "trainable head on its rows.")


def message_passing_modules(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The submodules of ``module`` (itself included) that are ``torch_geometric.nn.MessagePassing``
    layers and not pyg_private releases: ``(qualified name, module)`` pairs."""
    from torch_geometric.nn import MessagePassing

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"`module` must be a torch.nn.Module; got {type(module).__name__}")
    releases = {id(m) for _, m in private_release_modules(module)}
    return [(name or "<the module itself>", sub) for name, sub in module.named_modules()
            if isinstance(sub, MessagePassing) and id(sub) not in releases]


def refuse_message_passing_under_opacus(module: torch.nn.Module) -> None:
    """Raise :class:`MessagePassingInDPSGDError` when ``module`` holds a message-passing layer (see
    :func:`check_opacus_model`). Nothing is charged."""
    found = message_passing_modules(module)
    if found:
        names = ", ".join(f"{n.removeprefix('_module.')} ({type(m).__name__})" for n, m in found[:6])
        more = f" and {len(found) - 6} more" if len(found) > 6 else ""
        raise MessagePassingInDPSGDError(
            f"the module given to Opacus' DP-SGD contains PyG message-passing layer(s): {names}{more}. {_MP_ADVICE} "
            "Nothing was charged.")


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
    """Raise :class:`ReleaseInsideDPSGDError` when ``module`` contains a pyg_private release layer,
    and :class:`MessagePassingInDPSGDError` when it contains a PyG message-passing layer (per-node
    per-sample gradients; see the module notes): a model of trainable layers on given rows
    (``torch.nn.Linear``, PyG's ``MLP``) passes.

    Call it on the module you give ``PrivacyEngine.make_private`` (the helpers
    :func:`~pyg_private.accounting.opacus_bridge.make_private` and
    :func:`~pyg_private.accounting.opacus_bridge.make_private_with_epsilon` do, and so does
    ``engine.make_private`` itself for message-passing layers when ``engine.accountant`` is an
    :class:`~pyg_private.accounting.OpacusAccountant`). Nothing is charged by the check.
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
    refuse_message_passing_under_opacus(module)


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
