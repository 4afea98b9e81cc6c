r"""PrivGE's HDS feature perturbation (local DP on node features) as a transform."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data.datapipes import functional_transform

from ..accounting import PrivacyAccountant, PrivacyEvent
from ..accounting.mechanism_events import pure_dp_event
from ..sampling.words import RandomSource
from ..mechanisms.square_wave import (
    _check_coordinate_epsilon,
    rescale_on_grid,
    rescaled_granularity,
    sample_square_wave,
    square_wave_grid,
    square_wave_params,
)
from ._local_feature_release import FeatureRange, LocalFeatureRelease

__all__ = ["HDSFeaturePerturb"]


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"`k` must be a positive integer; got {k!r}")
    if k < 1:
        raise ValueError(f"`k` must be a positive integer (at most the number of features); got {k!r}")
    return int(k)


@functional_transform("hds_feature_perturb")
class HDSFeaturePerturb(LocalFeatureRelease):
    r"""PrivGE's high-dimensional square wave (HDS): every node perturbs its own feature
    vector under :math:`\epsilon`-local DP (functional name: :obj:`hds_feature_perturb`).

    From Li et al., *PrivGE: Privacy-Preserving Graph Embedding based on Local
    Differential Privacy* (CIKM 2024), Sec. 3.1, Alg. 1-2. For each node
    :math:`v` with features mapped into :math:`[-1, 1]^d` by the public ``feature_range``:

    1. draw :math:`S_v`, :math:`k` of the :math:`d` coordinates uniformly without
       replacement (independently per node);
    2. for :math:`j \in S_v`, draw :math:`\tilde x_{v,j}` from the extended square wave
       at :math:`\epsilon' = \epsilon/k` (Eq. 5): density :math:`p` on
       :math:`[x_{v,j}-b, x_{v,j}+b]`, :math:`q` on the rest of :math:`[-1-b, 1+b]`, with

       .. math::
           b = \frac{\epsilon' e^{\epsilon'} - e^{\epsilon'} + 1}{e^{\epsilon'}(e^{\epsilon'} - \epsilon' - 1)},
           \quad p = \frac{e^{\epsilon'}}{2be^{\epsilon'} + 2}, \quad q = \frac{1}{2be^{\epsilon'} + 2};

    3. for :math:`j \notin S_v`, :math:`\tilde x_{v,j} = 0` **in the normalised domain**
       (the paper's choice; the authors' released code maps the output back to the
       original scale before masking, so it puts 0 in the original scale instead, which is
       :math:`-1` in the normalised domain for 0/1 features).

    Each row has exactly :math:`k` non-zeros (almost surely) and values in
    :math:`[-1-b, 1+b]`. **Privacy** (Thm 3.1): :math:`p/q = e^{\epsilon/k}` per sampled
    coordinate, :math:`S_v` is data-independent, so the row is :math:`\epsilon`-LDP.
    **Bias** (Lemma 3.2, with the denominator corrected to :math:`d(be^{\epsilon/k}+1)`; the
    printed lemma and Eq. 8 have :math:`dbe^{\epsilon/k}+1`, but Eqs. 6-7 give the former):
    :math:`\mathbb E[\tilde x_{v,j}] = C x_{v,j}`,
    :math:`C = \frac{k}{d}\frac{b(e^{\epsilon/k}-1)}{be^{\epsilon/k}+1}`, and
    :math:`\mathrm{Var} = \frac{k(b^3e^{\epsilon/k}+3b^2+3b+1)}{3d(be^{\epsilon/k}+1)} + (C - C^2)x^2`
    (:func:`pyg_private.mechanisms.square_wave.hds_moments`). The output is *not*
    rescaled by default, as in the paper; ``unbiased=True`` divides by :math:`C`
    (mean :math:`x`, variance / :math:`C^2`, where :math:`C \approx \epsilon/(2d)` for
    small :math:`\epsilon`). The constants are float64 and stable down to
    :math:`\epsilon/k = 10^{-8}`. This implements the paper's mathematics; the authors'
    ``SquareWave`` is not LDP (see :mod:`pyg_private.mechanisms.square_wave`).

    **The feature range is public.** ``feature_range`` declares bounds that hold for
    *every possible* user, e.g. ``(0, 1)`` for binary bag-of-words; it is never computed
    from the data (a per-column min/max over users, as in the reference code, leaks). Each
    node maps :math:`x \mapsto 2(x - \mathrm{low})/(\mathrm{high} - \mathrm{low}) - 1`.
    Values outside the bounds raise ``ValueError`` unless ``clamp=True`` (values a few
    ulps outside are rounding and are clamped silently); NaN/inf always raise.
    :class:`L2RowNormalize` before this transform is another valid, per-node way into
    :math:`[-1, 1]`.

    **Accounting.** One call registers one event on unit ``"local"`` with the perturbed
    node ids (:func:`~pyg_private.accounting.mechanism_events.pure_dp_event`, pure
    :math:`\epsilon` per node, composed of :math:`k` parts of :math:`\epsilon/k`), **before**
    any noise is drawn: a budget that would be exceeded raises
    :class:`~pyg_private.PrivacyBudgetExceeded` and nothing is released. The ledger is per
    node (:meth:`PrivacyAccountant.node_epsilons`): by row position, or by the data's
    global node ids when it has them, ``n_id`` (attached by PyG's ``NeighborLoader``) or
    ``node_id`` (they must agree when both are present), so that a user released in two
    batches at different positions is charged twice to the same entry. Everything
    computed from the output (propagation, training) is post-processing.

    **Every call is a release.** Used as a dataset's ``transform=``, it would run again at
    every access, each access a fresh :math:`\epsilon`-LDP release of the same users
    (averaging the accesses removes the noise). Use it as ``pre_transform=`` or call it
    once. Two guards: the output is marked (``data.ldp``, and the per-node
    ``data.ldp_mask``; for another ``attr``, ``data[attr + '_ldp']`` and
    ``data[attr + '_ldp_mask']``), and perturbing marked nodes again raises; and this
    instance remembers a fingerprint (CRC-32) of every raw input it released, so the
    second access through ``transform=`` raises too. ``allow_recompose=True`` allows both
    and charges every call. (DataLoader workers hold copies of the transform: the
    fingerprint guard is per process.)

    **Floating-point-safe sampling** (``sampler="safe"``, the default). A floating-point
    sampler of the continuous window law does not realise it: with float arithmetic a large
    share of the releases (about half at :math:`\epsilon/k = 1`) are outputs that are impossible
    under some other input, which identifies the input with certainty (Mironov, CCS 2012; Jin et
    al., S&P 2022). The safe
    sampler releases an exactly sampled law on a power-of-two grid instead
    (:func:`~pyg_private.mechanisms.square_wave.square_wave_grid`): the normalised input is
    rounded to a multiple of the step :math:`g` (:math:`2^{-22}` for :math:`b \ge 2^{-2}`, finer
    for smaller :math:`b`), the window holds :math:`W = 2\max(1, \mathrm{round}(b/g))` grid points, the
    rest of the support :math:`F = 2/g` points, with probabilities :math:`E/(WE+F)` and
    :math:`1/(WE+F)`, :math:`E < e^{\epsilon/k}`: the ratio bound :math:`e^{\epsilon/k}` per
    coordinate holds exactly, and every output has positive probability under every input. The
    coordinates are an exactly uniform :math:`k`-subset. The event is unchanged (pure
    :math:`\epsilon` per node, :math:`k` parts). The moments are Lemma 3.2's with :math:`C_1`
    and the second moment of the grid law (they differ from the paper's by :math:`O(g)`;
    :func:`~pyg_private.mechanisms.square_wave.hds_moments`), and :meth:`coefficient` is the grid
    law's :math:`C`. Every released value is an odd multiple of :attr:`granularity` (half the
    step; never 0, so a row keeps exactly :math:`k` non-zeros); with ``unbiased=True`` the
    values divided by :math:`C` are rounded onto a grid :math:`2^{20}` times finer than their
    spacing (:func:`~pyg_private.mechanisms.square_wave.rescale_on_grid`, post-processing) and
    :attr:`granularity` is that grid. The output's dtype (float32 for float32 features) keeps
    every value a multiple of :attr:`granularity`. ``sampler="float"`` keeps the
    floating-point sampler (benchmarks, audits). ``secure_mode=True`` draws every random bit
    from the operating system's CSPRNG (slower; ``None``: the process-wide default of
    :func:`~pyg_private.mechanisms.set_secure_mode`).

    **Output buffer.** ``transform(data, out=buf)`` writes the dense output into ``buf`` (the
    output's shape, dtype and device; every entry is overwritten) instead of a fresh tensor, and
    ``out=data.x`` perturbs the features in place. At 1M x 500 a fresh 1.9 GB output costs more
    in page faults than the whole release; a buffer reused across releases avoids that.

    **Simulation.** In a deployment each user runs the randomizer on their own device;
    this transform *simulates* all users at once. A seeded ``generator`` makes runs
    reproducible and voids the guarantee.

    **Heterogeneous graphs.** On a ``HeteroData`` every node type that has ``attr`` is perturbed
    (a node type is a different population of users, each its own randomizer). ``epsilon``, ``k``,
    ``feature_range``, ``node_mask`` and ``clamp`` may each be one value for all types or a dict
    keyed by node type, which must then name every node type that has the features (leaving one
    raw is refused). Each type is one release, charged once as its own event on the per-node
    ledger of unit ``"local"``, with the node types numbered one after the other in sorted order
    (every node type needs a declared count: ``x`` or ``num_nodes``); the events of all types are
    checked against the budget and registered before any noise is drawn (they charge disjoint
    nodes, so each fitting alone means all fit). Batches that carry global ids (``n_id``) are
    refused on a ``HeteroData``.

    Args:
        epsilon (float or dict): the per-node LDP budget :math:`\epsilon` (per node type: a dict).
        k (int or dict): coordinates perturbed per node, :math:`1 \le k \le d` (a free
            hyperparameter; the paper's grid is 1-50).
        feature_range (tuple, optional): public ``(low, high)``, numbers or per-column
            1-D sequences. :obj:`None`: the features must already lie in :math:`[-1, 1]`.
            (default: :obj:`None`)
        clamp (bool, optional): clamp values outside ``feature_range`` instead of raising.
            (default: :obj:`False`)
        unbiased (bool, optional): divide the output by :math:`C`. (default: :obj:`False`,
            as in the paper)
        attr (str, optional): the node feature attribute. (default: :obj:`"x"`)
        node_mask (Tensor or str, optional): perturb only these nodes (boolean mask, ids, or
            the name of a data attribute). The other rows stay raw, in their original
            scale, and **unprotected**; a warning says so. The event lists the perturbed
            ids. Perturb every node that reaches the server: in PrivGE every user perturbs
            its own features (Sec. 3.1), validation and test nodes included.
        sparse_output (bool, optional): return a coalesced ``torch.sparse_coo_tensor``
            with exactly :math:`k` stored entries per perturbed row. (default: :obj:`False`)
        allow_recompose (bool, optional): allow perturbing nodes again (charged again).
        chunk_size (int, optional): rows per chunk (default: :math:`\max(256, 2^{22}/d)`).
        accountant (PrivacyAccountant, optional): charged once per call.
        generator (torch.Generator, optional): on the features' device; reproducibility only.
        name (str, optional): the event name. (default: :obj:`"hds-square-wave"`)
        sampler (str, optional): ``"safe"`` (exact grid law) or ``"float"`` (the floating-point
            sampler, open to floating-point attacks). (default: :obj:`"safe"`)
        secure_mode (bool, optional): draw every random bit from a CSPRNG keyed from the OS (safe
            sampler only; cannot be combined with a seeded ``generator``). (default: :obj:`None`, the
            process-wide setting)

    Shapes:
        - **input:** ``data[attr]`` dense :math:`(|\mathcal{V}|, d)`, any real dtype.
        - **output:** the same shape, in the input's floating dtype (the default float
          dtype for integer input), dense or sparse COO.
    """

    mechanism = "hds-square-wave"

    def __init__(self, epsilon: float, k: int, feature_range: FeatureRange = None, *, clamp: bool = False,
                 unbiased: bool = False, attr: str = "x", node_mask: Any = None, sparse_output: bool = False,
                 allow_recompose: bool = False, chunk_size: Optional[int] = None,
                 accountant: Optional[PrivacyAccountant] = None, generator: Optional[torch.Generator] = None,
                 name: Optional[str] = None, sampler: str = "safe", secure_mode: Optional[bool] = None) -> None:
        super().__init__(epsilon, feature_range=feature_range, clamp=clamp, attr=attr, node_mask=node_mask,
                         sparse_output=sparse_output, allow_recompose=allow_recompose, chunk_size=chunk_size,
                         accountant=accountant, generator=generator, name=name, sampler=sampler,
                         secure_mode=secure_mode)
        self.k = _check_k(k)
        if not isinstance(unbiased, bool):
            raise TypeError(f"`unbiased` must be True or False; got {unbiased!r}")
        self.unbiased = unbiased
        self.params = square_wave_params(_check_coordinate_epsilon(self.epsilon / self.k, "epsilon / k"))
        if self.sampler == "safe":
            square_wave_grid(self.epsilon, self.k)  # build (and check) the grid law now

    @property
    def grid(self):
        """The safe sampler's grid law (:func:`~pyg_private.mechanisms.square_wave.square_wave_grid`;
        ``None`` for the float sampler)."""
        return square_wave_grid(self.epsilon, self.k) if self.sampler == "safe" else None

    def coefficient(self, d: int) -> float:
        r""":math:`C = (k/d) C_1(\epsilon/k)`, the mean's shrinkage for ``d`` features (the grid
        law's :math:`(k/d)\kappa` for the safe sampler)."""
        self._num_coordinates(d)
        return (self.k / d) * (self.params.c1 if self.grid is None else self.grid.kappa)

    def _output_granularity(self, d: int) -> float:
        g = self.grid.granularity
        return rescaled_granularity(g, 1.0 / self.coefficient(d)) if self.unbiased else g

    def _num_coordinates(self, d: int) -> int:
        if self.k > d:
            raise ValueError(f"`k` = {self.k} exceeds the number of features d = {d}")
        return self.k

    def _sample(self, z: Tensor, d: int, source: Optional[RandomSource]) -> Tensor:
        if source is None:
            vals = sample_square_wave(z, self.params.epsilon, generator=self.generator, sampler="float")
            if self.unbiased:
                vals.div_(self.coefficient(d))
            return vals
        vals = self.grid.sample(z, source)
        if self.unbiased:
            vals, _ = rescale_on_grid(vals, 1.0 / self.coefficient(d), self.grid.granularity)
        return vals

    def _event(self, num_nodes: int, d: int, nodes: Optional[np.ndarray]) -> PrivacyEvent:
        self._num_coordinates(d)
        params = {"k": self.k, "d": d, "eps_per_coord": self.params.epsilon, "b": self.params.b,
                  "C": self.coefficient(d), "unbiased": self.unbiased, "domain": (-1.0, 1.0),
                  "feature_range": self._range_text(), **self._sampler_params(d)}
        return pure_dp_event(unit="local", epsilon=self.epsilon, compositions=self.k, name=self.name,
                             mechanism=self.mechanism, params=params, nodes=nodes, num_nodes=num_nodes)

    def output_range(self, d: int) -> tuple[float, float]:
        """Bounds of the perturbed values: :math:`\\pm(1+b)`, divided by :math:`C` if unbiased; for
        the safe sampler the grid's largest output :math:`1 + (B - 1/2)g \\le 1 + b + g/2`, divided
        by :math:`C` and rounded as the values are if unbiased."""
        grid = self.grid
        if grid is None:
            high = self.params.high / (self.coefficient(d) if self.unbiased else 1.0)
        elif self.unbiased:
            top = torch.tensor([grid.high], dtype=torch.float64)
            high = float(rescale_on_grid(top, 1.0 / self.coefficient(d), grid.granularity)[0][0])
        else:
            high = grid.high
        return -high, high

    def _summary(self, d: int) -> dict[str, Any]:
        return {"k": self.k, "d": d, "unbiased": self.unbiased, "b": self.params.b, "C": self.coefficient(d),
                "output_range": self.output_range(d)}

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self._base_repr(f'k={self.k}')}, unbiased={self.unbiased}"
                f"{self._sampler_repr()})")
