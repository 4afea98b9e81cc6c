r"""Canary-edge audits of edge-level DP graph mechanisms (one-run auditing on graphs).

The one-run audit of :mod:`pyg_private.audit.one_run` (Steinke, Nasr and Jagielski, 2023)
specialised to edge-level DP: the canaries are node pairs that are *not* edges of the
graph; each is inserted as an (undirected) edge independently with probability 1/2, the
mechanism releases once, and a score per canary ("how much does the output look like
this pair is an edge?") is turned into a lower bound on the mechanism's epsilon per edge.

Recipe
------
1. :func:`sample_canary_pairs` draws :math:`m` non-edges :math:`\{u_i, v_i\}`, by default
   a *matching* (no node in two canaries), so that one canary does not change the
   neighbourhood of another's endpoints and the per-canary scores interfere little.
2. Each canary is included with probability 1/2 (:func:`insert_edges` adds the included
   ones in both directions).
3. ``out = release(edge_index_with_canaries)`` is called once per run.
4. ``score(out, pairs)`` gives one float per canary (higher = more likely present), for
   example :func:`linear_canary_score` for (near-)Gaussian or Laplace output perturbation.
5. :func:`~pyg_private.audit.one_run.one_run_audit` turns the scores and the inclusion
   bits into the bound.

**Several runs.** With ``runs = R`` the audit draws fresh canaries and fresh inclusion
bits per run and pools the :math:`R m` canaries. The pooled release
:math:`(M(G_1), \dots, M(G_R))` is still :math:`(\epsilon, \delta)`-DP with respect to
each single canary: flipping the bit of canary :math:`i` of run :math:`k` changes only
:math:`G_k`, the other runs' outputs are independent of it (their randomness and bits are
independent), so the pair of output distributions differs only in the factor
:math:`M(G_k)`, which is :math:`(\epsilon, \delta)`-close by the mechanism's guarantee.
The theorem only needs DP with respect to each canary, so pooling is exact, not a
composition: the bound stays a bound on the per-release epsilon. (The same holds when
the same ``canaries`` are reused in every run: each (run, canary) pair has its own bit.)
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.utils import coalesce, to_undirected

from .one_run import OneRunAudit, one_run_audit

__all__ = [
    "CanaryAudit",
    "sample_canary_pairs",
    "insert_edges",
    "canary_edge_audit",
    "difference_score",
    "linear_canary_score",
]

_ENUMERATE_LIMIT = 4_000_000  # enumerate all pairs below this many (non-disjoint sampling)


@dataclass(frozen=True)
class CanaryAudit(OneRunAudit):
    """The result of :func:`canary_edge_audit`: the :class:`OneRunAudit` of the pooled
    canaries (``canaries`` counts all of them, over every run), and what it came from.

    Attributes:
        runs (int): number of releases.
        scores (Tensor): ``[m]`` float64 scores, run after run.
        included (Tensor): ``[m]`` bool inclusion bits.
        pairs (Tensor): ``[2, m]`` canary pairs (``u < v``), run after run.

    **Ground truth, returned knowingly.** ``included`` are the canaries' inclusion coins and ``pairs`` the
    canaries (pairs that are no edge of the graph you passed): the auditor's own data (the inputs you passed, or
    the audit's own coins), kept because the attack is scored against it. It is **not** released data:
    ``pickle`` / ``torch.save`` of this result keep it as it is, so store a result with the private data and
    publish its summary fields (``epsilon``, ``auc``, the counts) instead.
    """

    runs: int
    scores: Tensor
    included: Tensor
    pairs: Tensor


# --------------------------------------------------------------------------- helpers

def _check_edge_index(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, int]:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, Integral) or int(num_nodes) < 1:
        raise ValueError(f"`num_nodes` must be a positive integer; got {num_nodes!r}")
    n = int(num_nodes)
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError("`edge_index` must be a LongTensor of shape [2, E]")
    if edge_index.dtype != torch.long:
        raise ValueError(f"`edge_index` must have dtype torch.long; got {edge_index.dtype}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
        raise ValueError(f"`edge_index` has node ids outside [0, {n})")
    return edge_index, n


def _pair_keys(edge_index: Tensor, n: int) -> Tensor:
    """Sorted unique ``min * n + max`` of the (undirected) non-self-loop edges."""
    a, b = edge_index[0], edge_index[1]
    mask = a != b
    lo, hi = torch.minimum(a[mask], b[mask]), torch.maximum(a[mask], b[mask])
    return torch.unique(lo * n + hi)


def _check_pairs(pairs: Tensor, n: int, name: str = "pairs") -> Tensor:
    if not isinstance(pairs, Tensor) or pairs.dim() != 2 or pairs.size(0) != 2:
        raise ValueError(f"`{name}` must be a LongTensor of shape [2, m]")
    pairs = pairs.long()
    if pairs.numel() and (int(pairs.min()) < 0 or int(pairs.max()) >= n):
        raise ValueError(f"`{name}` has node ids outside [0, {n})")
    if (pairs[0] == pairs[1]).any():
        raise ValueError(f"`{name}` contains self-loops")
    return pairs


def _randperm(n: int, generator: Optional[torch.Generator], device) -> Tensor:
    gdev = generator.device if generator is not None else device
    return torch.randperm(n, generator=generator, device=gdev).to(device)


def _rand(m: int, generator: Optional[torch.Generator], device) -> Tensor:
    gdev = generator.device if generator is not None else device
    return torch.rand(m, generator=generator, device=gdev, dtype=torch.float64).to(device)


# --------------------------------------------------------------------------- sampling

def sample_canary_pairs(edge_index: Tensor, num_nodes: int, num_canaries: int, *, disjoint: bool = True,
                        generator: Optional[torch.Generator] = None) -> Tensor:
    r"""Draw ``num_canaries`` node pairs that are not edges of the graph.

    The graph is read as undirected (a pair is an edge if either direction is present);
    self-loops are never drawn. Each returned column is ``(u, v)`` with ``u < v``, and
    the pairs are distinct.

    With ``disjoint=True`` the pairs form a *matching* (no node in two canaries), so that
    inserting one canary does not change the neighbourhood of another's endpoints. They
    are drawn greedily: the free nodes are shuffled and paired consecutively, the pairs
    that are edges are discarded and their nodes reshuffled, for up to 100 rounds. This
    needs ``2 * num_canaries <= num_nodes`` and can fail on very dense graphs. With
    ``disjoint=False`` the pairs are uniform among the non-edges (all pairs are
    enumerated for small graphs, rejection sampling otherwise).

    Args:
        edge_index (Tensor): ``[2, E]`` edges.
        num_nodes (int): :math:`n`.
        num_canaries (int): :math:`m \ge 1`.
        disjoint (bool): draw a matching. (default: :obj:`True`)
        generator (torch.Generator, optional): for reproducible draws.

    Returns:
        Tensor: ``[2, m]`` long tensor on ``edge_index``'s device.

    Raises:
        ValueError: when not enough (disjoint) non-edges exist or none could be found.
    """
    edge_index, n = _check_edge_index(edge_index, num_nodes)
    if isinstance(num_canaries, bool) or not isinstance(num_canaries, Integral) or int(num_canaries) < 1:
        raise ValueError(f"`num_canaries` must be a positive integer; got {num_canaries!r}")
    m = int(num_canaries)
    device = edge_index.device
    keys = _pair_keys(edge_index, n)
    n_pairs = n * (n - 1) // 2
    if m > n_pairs - keys.numel():
        raise ValueError(f"cannot draw {m} canaries: the graph has only {n_pairs - keys.numel()} non-edges")
    if disjoint:
        if 2 * m > n:
            raise ValueError(f"cannot draw {m} disjoint canaries on {n} nodes (need 2 * num_canaries <= num_nodes)")
        free = torch.ones(n, dtype=torch.bool, device=device)
        found: list[Tensor] = []
        count = 0
        for _ in range(100):
            nodes = free.nonzero().view(-1)
            nodes = nodes[_randperm(nodes.numel(), generator, device)]
            k = nodes.numel() // 2
            if k == 0:
                break
            cand = nodes[: 2 * k].view(k, 2)
            lo, hi = cand.min(dim=1).values, cand.max(dim=1).values
            good = ~torch.isin(lo * n + hi, keys)
            lo, hi = lo[good][: m - count], hi[good][: m - count]
            found.append(torch.stack([lo, hi]))
            free[lo] = False
            free[hi] = False
            count += lo.numel()
            if count >= m:
                break
        if count < m:
            raise ValueError(f"could not find {m} disjoint non-edges (found {count}); the graph may be too dense "
                             "for a matching of canaries: use fewer canaries or disjoint=False")
        return torch.cat(found, dim=1)
    if n_pairs <= _ENUMERATE_LIMIT:
        iu = torch.triu_indices(n, n, 1, device=device)
        cand = iu[:, ~torch.isin(iu[0] * n + iu[1], keys)]
        return cand[:, _randperm(cand.size(1), generator, device)[:m]]
    chosen = torch.empty(0, dtype=torch.long, device=device)
    for _ in range(1000):
        need = m - chosen.numel()
        gdev = generator.device if generator is not None else device
        uv = torch.randint(0, n, (2, 2 * need + 16), generator=generator, device=gdev).to(device)
        uv = uv[:, uv[0] != uv[1]]
        k = torch.minimum(uv[0], uv[1]) * n + torch.maximum(uv[0], uv[1])
        k = k[~torch.isin(k, keys) & ~torch.isin(k, chosen)]
        # keep first occurrences, in draw order
        uniq, inverse = torch.unique(k, return_inverse=True)
        first = torch.full((uniq.numel(),), k.numel(), dtype=torch.long, device=device)
        first.scatter_reduce_(0, inverse, torch.arange(k.numel(), device=device), reduce="amin")
        chosen = torch.cat([chosen, k[first.sort().values][:need]])
        if chosen.numel() >= m:
            return torch.stack([chosen // n, chosen % n])
    raise ValueError(f"could not find {m} non-edges by rejection sampling")  # pragma: no cover


def insert_edges(edge_index: Tensor, pairs: Tensor, num_nodes: int) -> Tensor:
    """Add each pair of ``pairs`` (``[2, k]``) in both directions.

    Returns the coalesced (sorted, duplicate-free) ``edge_index``; the input's own edges
    are kept as they are (an undirected input stays undirected).
    """
    edge_index, n = _check_edge_index(edge_index, num_nodes)
    pairs = _check_pairs(pairs, n)
    if pairs.size(1) == 0:
        return coalesce(edge_index, num_nodes=n)
    added = to_undirected(pairs.to(edge_index.device), num_nodes=n)
    return coalesce(torch.cat([edge_index, added], dim=1), num_nodes=n)


# --------------------------------------------------------------------------- scores

def difference_score(reference: Tensor, directions: Tensor) -> Callable[[Any, Tensor], Tensor]:
    r"""A linear score :math:`s_i = \langle o - f_0, d_i \rangle / \lVert d_i \rVert`.

    For output perturbation :math:`o = f(G) + Z` with i.i.d. Gaussian :math:`Z`, this is
    (up to a monotone map) the log-likelihood ratio of "canary :math:`i` present" against
    "absent" when the canaries act additively on disjoint coordinates (as disjoint
    canaries do for degree-like queries): :math:`f_0` is the noiseless output on the
    canary-free graph and :math:`d_i = f(G + e_i) - f_0`. For Laplace noise it is a good
    (not optimal) statistic. Canaries with :math:`d_i = 0` score 0.

    Args:
        reference (Tensor): :math:`f_0`, any shape (flattened).
        directions (Tensor): ``[m, dim]`` rows :math:`d_i` (``dim = reference.numel()``).

    Returns:
        A function ``score(out, pairs)`` returning ``[m]`` float64 scores; ``out`` is
        flattened, and ``pairs`` is ignored except for its length (it must be ``m``).
    """
    f0 = reference.detach().reshape(-1).double()
    dirs = directions.detach().double()
    if dirs.dim() != 2 or dirs.size(1) != f0.numel():
        raise ValueError(f"`directions` must have shape [m, {f0.numel()}]; got {tuple(dirs.shape)}")
    norms = dirs.norm(dim=1)
    unit = dirs / torch.where(norms > 0, norms, torch.ones_like(norms)).unsqueeze(1)

    def score(out: Any, pairs: Tensor) -> Tensor:
        if pairs.size(1) != unit.size(0):
            raise ValueError(f"the score was built for {unit.size(0)} canaries; got {pairs.size(1)}")
        o = torch.as_tensor(out).detach().reshape(-1).double().to(f0.device)
        if o.numel() != f0.numel():
            raise ValueError(f"the output has {o.numel()} entries; the reference has {f0.numel()}")
        return unit @ (o - f0)

    return score


def linear_canary_score(noiseless: Callable[[Tensor], Tensor], edge_index: Tensor, num_nodes: int,
                        pairs: Tensor) -> Callable[[Any, Tensor], Tensor]:
    r"""Precompute :func:`difference_score` for fixed canaries from a noiseless query.

    Calls ``noiseless`` once on the canary-free graph (:math:`f_0`) and once per canary
    on the graph with that canary alone (:math:`d_i = f(G + e_i) - f_0`): :math:`m + 1`
    noiseless evaluations, and :math:`O(m \cdot \dim f)` memory for the directions.
    The returned score only accepts these canaries, so pass ``canaries=pairs`` to
    :func:`canary_edge_audit` (it raises otherwise).

    Args:
        noiseless (callable): ``edge_index -> Tensor``, the query without noise.
        edge_index (Tensor): the canary-free graph.
        num_nodes (int): :math:`n`.
        pairs (Tensor): ``[2, m]`` canary pairs.
    """
    edge_index, n = _check_edge_index(edge_index, num_nodes)
    pairs = _check_pairs(pairs, n)
    with torch.no_grad():
        f0 = noiseless(edge_index).detach().reshape(-1).double()
        dirs = torch.empty(pairs.size(1), f0.numel(), dtype=torch.float64, device=f0.device)
        for i in range(pairs.size(1)):
            dirs[i] = noiseless(insert_edges(edge_index, pairs[:, i:i + 1], n)).detach().reshape(-1).double() - f0
    inner = difference_score(f0, dirs)
    fixed = pairs.clone()

    def score(out: Any, p: Tensor) -> Tensor:
        if p.shape != fixed.shape or not torch.equal(p.to(fixed.device), fixed):
            raise ValueError("linear_canary_score was built for other canaries; pass `canaries=` to the audit")
        return inner(out, p)

    return score


# --------------------------------------------------------------------------- the audit

def _default_guesses(m: int) -> tuple[int, ...]:
    out: list[int] = []
    for r in (m // 10, m // 4, m // 2, m):
        r = min(max(r, 2), m)
        if r not in out:
            out.append(r)
    return tuple(out)


def canary_edge_audit(release: Callable[[Tensor], Any], score: Callable[[Any, Tensor], Tensor], edge_index: Tensor,
                      num_nodes: int, *, num_canaries: int, runs: int = 1,
                      guesses: Union[int, Sequence[int], None] = None, delta: float = 0.0,
                      confidence: float = 0.95, canaries: Optional[Tensor] = None,
                      generator: Optional[torch.Generator] = None) -> CanaryAudit:
    r"""One-run (per release) audit of an edge-level DP mechanism with canary edges.

    Per run: draw fresh canaries with :func:`sample_canary_pairs` (``disjoint=True``), or
    use ``canaries``; include each independently with probability 1/2; call
    ``out = release(edge_index_with_included_canaries)`` once; score the canaries with
    ``score(out, pairs)``. The ``runs * num_canaries`` canaries are pooled (valid: see the
    module docstring) and :func:`~pyg_private.audit.one_run.one_run_audit` computes the
    bound :math:`\hat\epsilon` on the mechanism's epsilon *per edge and per release*.

    The mechanism's own accounting is irrelevant here (the audit calls ``release``
    ``runs`` times on different graphs; it audits one release's guarantee).

    Args:
        release (callable): ``edge_index -> output``: the mechanism, with fresh
            randomness at every call.
        score (callable): ``(output, pairs) -> Tensor [m]``: higher = more likely present.
        edge_index (Tensor): the base graph (undirected; canaries are non-edges of it).
        num_nodes (int): :math:`n`.
        num_canaries (int): canaries per run.
        runs (int): number of releases. (default: 1)
        guesses (int or sequence of int, optional): the :math:`r` values to try. Default:
            ``(m // 10, m // 4, m // 2, m)`` for the pooled :math:`m`, each clipped to
            ``[2, m]`` and deduplicated; the confidence is Bonferroni-split over them.
        delta (float): the delta of the guarantee being audited.
        confidence (float): in ``(0, 1)``.
        canaries (Tensor, optional): fixed ``[2, num_canaries]`` non-edges used in every
            run (needed by :func:`linear_canary_score`).
        generator (torch.Generator, optional): for the canaries and inclusion bits (the
            mechanism's own randomness is ``release``'s business).

    Returns:
        :class:`CanaryAudit`.
    """
    edge_index, n = _check_edge_index(edge_index, num_nodes)
    if isinstance(num_canaries, bool) or not isinstance(num_canaries, Integral) or int(num_canaries) < 1:
        raise ValueError(f"`num_canaries` must be a positive integer; got {num_canaries!r}")
    if isinstance(runs, bool) or not isinstance(runs, Integral) or int(runs) < 1:
        raise ValueError(f"`runs` must be a positive integer; got {runs!r}")
    m_run, runs = int(num_canaries), int(runs)
    if runs * m_run < 2:
        raise ValueError("the audit needs at least 2 canaries in all")
    device = edge_index.device
    if canaries is not None:
        canaries = _check_pairs(canaries, n, "canaries").to(device)
        if canaries.size(1) != m_run:
            raise ValueError(f"`canaries` has {canaries.size(1)} pairs; `num_canaries` is {m_run}")
        ckeys = torch.minimum(canaries[0], canaries[1]) * n + torch.maximum(canaries[0], canaries[1])
        if torch.isin(ckeys, _pair_keys(edge_index, n)).any():
            raise ValueError("`canaries` must be non-edges of the graph")
        if torch.unique(ckeys).numel() != ckeys.numel():
            raise ValueError("`canaries` contains duplicate pairs")
        canaries = torch.stack([torch.minimum(canaries[0], canaries[1]), torch.maximum(canaries[0], canaries[1])])

    all_scores, all_inc, all_pairs = [], [], []
    for _ in range(runs):
        pairs = canaries if canaries is not None else sample_canary_pairs(edge_index, n, m_run, generator=generator)
        inc = _rand(m_run, generator, device) < 0.5
        out = release(insert_edges(edge_index, pairs[:, inc], n))
        s = torch.as_tensor(score(out, pairs)).detach().reshape(-1).double().cpu()
        if s.numel() != m_run:
            raise ValueError(f"`score` returned {s.numel()} values for {m_run} canaries")
        all_scores.append(s)
        all_inc.append(inc.cpu())
        all_pairs.append(pairs.cpu())
    scores = torch.cat(all_scores)
    included = torch.cat(all_inc)
    pairs_all = torch.cat(all_pairs, dim=1)
    m = scores.numel()
    if guesses is None:
        guesses = _default_guesses(m)
    res = one_run_audit(scores, included, guesses=guesses, delta=delta, confidence=confidence)
    return CanaryAudit(**vars(res), runs=runs, scores=scores, included=included, pairs=pairs_all)
