r"""Make an existing PyG model private: one private propagation, computed once, then a trainable head."""
from __future__ import annotations

import weakref
from typing import Any, Optional

import torch
from torch import Tensor, nn
from torch_geometric.nn.inits import reset
from torch_geometric.typing import Adj, OptTensor

from ._sparse_propagation import SparsePropagation
from .perturbed_appr_conv import PerturbedAPPRConv

__all__ = ["PrecomputedPropagation", "precompute_propagation"]


class PrecomputedPropagation(nn.Module):
    r"""A drop-in for a GCN-style ``model(x, edge_index)`` whose graph part is private.

    The private propagation runs **once** on the (detached) input, without gradients, and
    only the ``head`` is trained on its output, the decoupled "propagate, then learn"
    design of SGC (`Wu et al. 2019 <https://arxiv.org/abs/1902.07153>`_) and APPNP
    (`Klicpera et al. 2019 <https://arxiv.org/abs/1810.05997>`_), which is how the private
    aggregations of GAP (`Sajadmanesh et al. 2023 <https://arxiv.org/abs/2203.00949>`_)
    and CARIBOU (`Zheng et al. 2025 <https://arxiv.org/abs/2506.22727>`_,
    Sec. 4.5) are used:

    .. math::
        \mathbf{Z} = \mathcal{M}(\mathbf{X}, G) \quad\text{(once)}, \qquad
        \hat{\mathbf{Y}} = h_\theta\big([\mathbf{X} \,\|\, \mathbf{Z}]\big)
        \quad\text{(every epoch; } \mathbf{Z} \text{ alone with } \texttt{include_input=False}).

    .. code-block:: python

        acct = PrivacyAccountant()
        model = PrecomputedPropagation(
            ContractiveGraphLayer(K=2, contraction=0.9, min_degree=0, epsilon=1.0, delta=1e-5, accountant=acct),
            MLP([2 * num_features, 64, num_classes], dropout=0.5, norm=None),
        )
        out = model(data.x, data.edge_index)   # the training loop of the GCN, unchanged

    **Privacy.** :math:`\mathcal{M}` is a private layer (``ContractiveGraphLayer``,
    ``GAPAggregation``, ``NoisyPPRDiffusion``): its first forward registers its one event
    with the layer's accountant before any noise is drawn and caches the release. Every
    later call with the same graph and input reuses the release at no further cost, so the
    epochs of training and evaluation are post-processing of one release: the whole model
    costs exactly the layer's event. (Training *through* the layer, as the GCN does through
    ``GCNConv``, would need a new release for every gradient step.) A call with a different
    graph or input (another graph for inference, another feature matrix) is a **new
    release**, charged by the layer; the release is keyed by the layer on the graph and the
    inputs, so a different graph is never served a stale release in memory.

    What the guarantee covers depends on the layer's unit. At **edge level** the features
    and labels are public, so ``[X || Z]`` and a head trained with any optimiser are
    post-processing. At **node level** the head sees private features and labels: train it
    with DP-SGD (Opacus, with :class:`~pyg_private.accounting.OpacusAccountant` on unit
    ``"node"``) on :meth:`head_input`. The release is then a public input, one node's
    example is its own row of ``[X || Z]`` with its label (removing a node removes one
    example and changes no other), and the two compose adaptively on unit ``"node"``, as in
    GAP's node-level variant; DP-SGD's sampling rate, step count and gradient averaging must
    come from a public count of example slots, not from the number of present nodes (see
    :func:`~pyg_private.models.fit_dp_sgd` and ``examples/pyg_node_private_opacus.py``). An
    encoder in front of the layer must be trained (edge level: freely; node level: with
    DP-SGD) and frozen **before** the release: an input that requires grad is refused in
    training mode, since every update of the encoder would be a new release.

    **Caching, copies and saving.** The release lives in the layer (``cached=True``, the default of the private
    layers; ``cached=False`` is refused here): it survives ``copy.deepcopy`` (the copy shares the accountant),
    ``pickle`` / ``torch.save`` and ``state_dict`` (as the layer's ``_extra_state``), so a reloaded model does
    not spend budget again. A saved state never holds the private graph: a reloaded release is reused for the
    first graph it is called with (see the layer's documentation), so call :meth:`forget_release` before using a
    loaded model on a different graph. On top of the layer's cache this module keeps a reference to the last
    output for the very same tensors (same objects, not modified in place), so a training epoch does not even
    re-check the graph; that reference (and the head input :math:`[\mathbf{X} \| \mathbf{Z}]`, which holds the
    caller's features) lives in memory only: ``copy.deepcopy``, ``pickle``, ``torch.save`` and ``state_dict``
    never carry it (a copy answers from the layer's cache). :meth:`reset_parameters` re-initialises the **head
    only** (so does ``torch_geometric.nn.inits.reset(model)``): the release is paid data, not a parameter;
    :meth:`forget_release` forgets it (the next forward is a new, charged release). ``model.double()``,
    ``model.half()`` or ``model.to(device)`` with the same inputs in that dtype or on that device reuse the
    release (cast or moved: post-processing), never a new charge.

    **Inference mode.** The model runs under ``torch.no_grad()`` and ``torch.inference_mode()`` (Lightning's
    ``trainer.validate/test/predict``): a call under inference mode is answered from the layer's cache (or
    makes the release there, kept as ordinary tensors), and nothing made under inference mode is kept here,
    so training afterwards works on the same release.

    Args:
        propagation (torch.nn.Module): the private propagation, called as
            ``propagation(x, edge_index)``; it must have no trainable parameters. Any module
            of that form works (``torch_geometric.nn.APPNP`` gives the non-private
            reference), but only a private layer makes the model private.
        head (torch.nn.Module): the trainable model on the propagated features, e.g.
            :class:`torch_geometric.nn.MLP` (use ``norm=None`` for DP-SGD: batch norm mixes
            examples).
        include_input (bool, optional): give the head :math:`[\mathbf{X} \| \mathbf{Z}]`
            (width ``F + F'``) instead of :math:`\mathbf{Z}` alone (width ``F'``).
            (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)`, ``edge_index``
          :math:`(2, |\mathcal{E}|)` (or any graph form the layer accepts)
        - **output:** the head's output on :math:`(|\mathcal{V}|, F + F')` (or
          :math:`(|\mathcal{V}|, F')`)
    """

    def __init__(self, propagation: nn.Module, head: nn.Module, *, include_input: bool = True) -> None:
        super().__init__()
        _check_propagation(propagation)
        if not isinstance(head, nn.Module):
            raise TypeError(f"`head` must be a torch.nn.Module (e.g. torch_geometric.nn.MLP); got "
                            f"{type(head).__name__}")
        if not isinstance(include_input, bool):
            raise TypeError(f"`include_input` must be True or False; got {include_input!r}")
        self.propagation = propagation
        self.head = head
        self.include_input = include_input
        self._last: Optional[_LastCall] = None

    @property
    def accountant(self) -> Any:
        """The propagation's accountant (``None`` for a layer without one)."""
        return getattr(self.propagation, "accountant", None)

    def forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        """The head's output on the (cached) head input, see :meth:`head_input`."""
        if edge_weight is not None:
            raise ValueError("PrecomputedPropagation takes no `edge_weight`: the private propagations are analysed "
                             "for an unweighted graph (one edge changes one 0/1 entry). Call model(x, edge_index).")
        return self.head(self.head_input(x, edge_index))

    def head_input(self, x: Tensor, edge_index: Adj) -> Tensor:
        r"""The head's input :math:`[\mathbf{X} \| \mathbf{Z}]` (or :math:`\mathbf{Z}`), with
        :math:`\mathbf{Z}` the cached release: the features to give an Opacus ``DataLoader``
        when the head is trained with DP-SGD."""
        self._check_input(x)
        last = self._last
        if last is not None and last.matches(x, edge_index) and last.head_input is not None \
                and not x.requires_grad:
            return last.head_input
        if self.include_input and not x.is_floating_point():  # before any release
            raise ValueError(f"`include_input=True` concatenates `x` with the release; `x` must be floating-point, "
                             f"got {x.dtype}")
        z = self.released(x, edge_index)
        if not self.include_input:
            return z
        out = torch.cat([x, z.to(device=x.device, dtype=x.dtype)], dim=-1)
        last = self._last
        if last is not None and not x.requires_grad and not out.is_inference():  # the concatenation is reusable
            last.head_input = out
        return out

    def released(self, x: Tensor, edge_index: Adj) -> Tensor:
        r"""The private propagation's output :math:`\mathbf{Z}` for ``(x, edge_index)``: computed
        once on ``x.detach()`` without gradients (the layer's one event), then reused."""
        self._check_input(x)
        last = self._last
        if last is not None and last.matches(x, edge_index):
            return last.z
        with torch.no_grad():
            z = self.propagation(x.detach(), edge_index)
        if not isinstance(z, Tensor) or z.dim() != 2 or z.size(0) != x.size(0):
            raise ValueError(f"the propagation must return a [N, F'] tensor with N = x.size(0) = {x.size(0)}; "
                             f"got {type(z).__name__} {tuple(getattr(z, 'shape', ()))}")
        z = z.detach()
        # inference tensors (made or passed under torch.inference_mode()) track no version counter, and a
        # later ordinary call could not use them: the layer's cache answers those calls instead
        self._last = _LastCall(x, edge_index, z) if _trackable(x, edge_index, z) else None
        return z

    def _check_input(self, x: Any) -> None:
        """Refuse what cannot be released once, before anything is charged."""
        if not isinstance(x, Tensor) or x.dim() != 2:
            raise ValueError("`x` must be a node feature matrix of shape [N, F]")
        if self.training and torch.is_grad_enabled() and x.requires_grad:
            raise ValueError(
                "PrecomputedPropagation got an input that requires grad in training mode: its private propagation "
                "runs once on fixed features and no gradient flows through it, so a trainable encoder in front of "
                "it would change its input at every step, and every step would be a new, charged release. Train the "
                "encoder first (edge level: without the graph, at no cost; node level: with DP-SGD), then pass its "
                "frozen output, encoder(x).detach(), or use precompute_propagation().")

    def reset_parameters(self) -> None:
        """Re-initialise the head. The cached release is kept (it was paid for); see :meth:`forget_release`."""
        reset(self.head)

    def forget_release(self) -> None:
        """Forget the cached release (here and in the layer): the next forward is a new, charged release."""
        self._last = None
        # a private layer drops its release; another propagation (APPNP, the non-private reference) its caches
        forget = getattr(self.propagation, "forget_release", None) or getattr(self.propagation, "reset_parameters",
                                                                              None)
        if callable(forget):
            forget()

    def clear_release(self) -> None:
        """The former name of :meth:`forget_release`."""
        self.forget_release()

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> "PrecomputedPropagation":
        self._last = None  # .to() / .float() / ...: the layer's cache answers on the new device and dtype
        return super()._apply(fn, *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # weak references do not pickle, and the head input holds the caller's x: pickle, torch.save
        # and deepcopy (which goes through here) start without it; the release itself lives in the layer
        state["_last"] = None
        return state

    def extra_repr(self) -> str:
        return f"include_input={self.include_input}"


@torch.no_grad()
def precompute_propagation(propagation: nn.Module, x: Tensor, edge_index: Adj, *,
                           include_input: bool = False) -> Tensor:
    r"""Run a private propagation once on fixed features and return its (detached) release.

    The functional form of :class:`PrecomputedPropagation`, for training loops of your own:
    ``z = precompute_propagation(layer, x, edge_index)`` registers the layer's one event (with
    ``cached=True``, the default, a second call with the same graph and input is free), and
    everything computed from ``z`` afterwards is post-processing.

    Args:
        propagation (torch.nn.Module): the private layer (no trainable parameters).
        x (torch.Tensor): node features :math:`(|\mathcal{V}|, F)`; used detached.
        edge_index (torch.Tensor or SparseTensor): the graph.
        include_input (bool, optional): return :math:`[\mathbf{X} \| \mathbf{Z}]` instead of
            :math:`\mathbf{Z}`. (default: :obj:`False`)
    """
    _check_propagation(propagation)
    if not isinstance(x, Tensor) or x.dim() != 2:
        raise ValueError("`x` must be a node feature matrix of shape [N, F]")
    x = x.detach()
    z = propagation(x, edge_index)
    if not isinstance(z, Tensor) or z.dim() != 2 or z.size(0) != x.size(0):
        raise ValueError(f"the propagation must return a [N, F'] tensor with N = x.size(0) = {x.size(0)}")
    z = z.detach()
    return torch.cat([x, z.to(dtype=x.dtype)], dim=-1) if include_input else z


class _LastCall:
    """The last call's inputs (weak references and in-place version counters) and outputs."""

    __slots__ = ("x", "x_version", "graph", "graph_version", "z", "head_input")

    def __init__(self, x: Tensor, graph: Any, z: Tensor) -> None:
        self.x, self.x_version = weakref.ref(x), x._version
        self.graph, self.graph_version = _weak(graph), getattr(graph, "_version", None)
        self.z: Tensor = z
        self.head_input: Optional[Tensor] = None

    def matches(self, x: Tensor, graph: Any) -> bool:
        return (self.x() is x and x._version == self.x_version and self.graph is not None
                and self.graph() is graph and getattr(graph, "_version", None) == self.graph_version)


def _trackable(*tensors: Any) -> bool:
    """Whether a :class:`_LastCall` may keep these: no inference tensor (no version counter, and unusable
    by a later ordinary call)."""
    return not torch.is_inference_mode_enabled() and not any(
        isinstance(t, Tensor) and t.is_inference() for t in tensors)


def _weak(obj: Any) -> Optional[weakref.ref]:
    try:
        return weakref.ref(obj)
    except TypeError:  # not weak-referenceable: never matched, the layer's cache answers
        return None


def _check_propagation(propagation: Any) -> None:
    """Refuse what cannot be a once-computed private propagation, before anything is charged."""
    if not isinstance(propagation, nn.Module):
        raise TypeError(f"`propagation` must be a torch.nn.Module called as propagation(x, edge_index), e.g. "
                        f"ContractiveGraphLayer(...); got {type(propagation).__name__}")
    if isinstance(propagation, PerturbedAPPRConv):
        raise TypeError("PerturbedAPPRConv is not a propagation to precompute: its privacy comes from training its "
                        "own linear head by objective perturbation (conv.fit(x0, edge_index, y, train_mask)), and "
                        "its propagation is not private on its own. Use it directly, or precompute "
                        "ContractiveGraphLayer / GAPAggregation / NoisyPPRDiffusion here.")
    trainable = [name for name, p in propagation.named_parameters() if p.requires_grad]
    if trainable:
        raise ValueError(f"`propagation` ({type(propagation).__name__}) has trainable parameters ({trainable[0]}, ...) "
                         "that would never be trained: it runs once, without gradients. Pass a parameter-free "
                         "propagation (a private layer, or APPNP for the non-private reference) and put the "
                         "trainable layers into `head`.")
    if isinstance(propagation, SparsePropagation) and getattr(propagation, "cached", True) is False:
        raise ValueError(f"`propagation` ({type(propagation).__name__}) was built with cached=False: every call would "
                         "be a new, charged release. Build it with cached=True (the default) so that the release is "
                         "computed once, reused and saved with the model.")
