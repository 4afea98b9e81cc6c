r"""Randomized response on the adjacency matrix (edge flipping), sampled in O(|E| + flips).

Every unordered pair :math:`\{i, j\}`, :math:`i < j`, of an undirected simple graph is
one bit. Each bit is reported truthfully with probability :math:`q` and flipped
otherwise: a true edge survives with probability :math:`q`, a non-edge appears with
probability :math:`1 - q`. Instead of visiting all :math:`n(n-1)/2` pairs we walk the
pairs in row-major order and jump from one flipped pair to the next by geometric gaps
(the gaps of a Bernoulli(:math:`p`) process, :math:`p = 1 - q`, are i.i.d. geometric),
which has exactly the same distribution; the released edge set is the symmetric
difference of the true edges and the flipped pairs, found by binary search.

**Exact gaps (the default, ``sampler="safe"``).** The floating-point inverse CDF
:math:`\lfloor \log u / \log(1-p) \rfloor` of a float uniform :math:`u` does not realise the
geometric law: :math:`u` lives on a lattice, so some gap values are impossible and the
others have slightly wrong probabilities. Since the release is (true edges XOR flips), an
impossible flip pattern can rule an input out with certainty, the failure described for
continuous noise by Mironov ("On significance of the least significant bits for
differential privacy", CCS 2012) and Jin et al. ("Are we there yet? Timing and
floating-point attacks on differential privacy systems", S&P 2022). Here a gap is
:math:`G + 1` with

.. math::
    G = \max\{k \ge 0 : U < r^k\}, \qquad r = 1 - p, \qquad P(G \ge k) = P(U < r^k) = r^k,

for a uniform :math:`U \in [0, 1)` whose binary expansion is read lazily from uniform 63-bit
words (:class:`~pyg_private.sampling.RandomSource`). The first word :math:`w` puts
:math:`U` in :math:`[w\,2^{-63}, (w+1)\,2^{-63})`; a float64 candidate :math:`g` (the inverse CDF)
is **accepted only when that whole interval provably lies in** :math:`[r^{g+1}, r^g)`: the
float64 estimates of :math:`r^g` and :math:`r^{g+1}` are within a relative :math:`2^{-46}` of the
exact values (see :data:`GAP_MARGIN`) and the interval must clear them by a relative margin
:math:`2^{-44}`. Otherwise (about :math:`2^{-43}/p` of the gaps, plus the
:math:`2^{-63}`-wide word intervals that straddle a boundary) :math:`G` is found by comparing
:math:`U`, with as many further words as needed, against :math:`r^k` in 320-bit arithmetic
(``mpmath``). Both paths compute the same function of the bit stream, so :math:`G` follows the
geometric law exactly, up to the 320-bit evaluation of :math:`r^k` (a deviation below
:math:`2^{-180}` in total variation per gap). Every flip pattern of the free pairs has positive
probability, as randomized response requires.

**What is exact.** ``q`` is a float, i.e. a dyadic rational, and the flip probability used is
exactly :math:`p = 1 - q` (exact in float64 for :math:`q \in [1/2, 1]`). The accounting events of
:class:`~pyg_private.transforms.EdgeRandomizedResponse` and
:class:`~pyg_private.nn.EdgeFlippingPPR` are computed from that same float ``q``, so the charged
curve is the one of the mechanism sampled. Every float ``q`` in :math:`[1/2, 1]` is supported
(:math:`p \ge 2^{-53}` or :math:`p = 0`); the exact path is used for most gaps when
:math:`p < 2^{-43}`, but there are few of them (about :math:`n^2 p / 2`).

``sampler="float"`` keeps the floating-point inverse CDF on ``torch.rand`` for benchmarks and
audits; it is open to the attacks above.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import torch
from torch import Tensor

from ..utils.graph_validation import check_edge_index
from ._noise import float_generator
from ..sampling.tables import mp_context
from ..sampling.words import WORD_BITS, RandomSource, resolve_secure_mode
from .sampler_options import Sampler, check_sampler_options

__all__ = ["flip_edges", "flip_bipartite_edges", "GAP_MARGIN", "MIN_FLIP_PROBABILITY"]

#: Relative margin by which the word interval of :math:`U` must clear the float64 estimates of
#: :math:`r^g` and :math:`r^{g+1}` for the float candidate to be accepted. The estimates
#: :math:`\hat s = \exp(\mathrm{fl}(g\,\hat L))` and :math:`\hat t = \hat s\,\hat r` (with
#: :math:`\hat L = \log r` and :math:`\hat r = r` rounded to float64, :math:`|g \hat L| \le 45`)
#: err by at most :math:`45 \cdot 2^{-52}(1 + 2^{-50})` from :math:`\hat L` and the product, plus
#: :math:`2^{-50}` from ``exp`` (1 ulp on CPU (SLEEF u10, glibc) and CUDA; 4 ulp budgeted) and
#: :math:`2^{-52}` from :math:`\hat r` and the last product: below :math:`2^{-46}` relatively; the
#: interval's float64 end points and the margin products add :math:`2^{-51}`. :math:`2^{-44}` leaves
#: a factor 3 to spare.
GAP_MARGIN = 2.0 ** -44
#: Smallest non-zero flip probability of the safe sampler (every ``1 - q`` for a float ``q < 1``).
MIN_FLIP_PROBABILITY = 2.0 ** -53
_EXPONENT_LIMIT = 45.0  # |g log r| up to which the float estimate's error bound is proven
_EXACT_PREC = 320  # bits of r^k in the exact path
_EXACT_BITS = 4 * WORD_BITS  # bits of U the exact path may read (the first word and three more)


def check_truth_probability(q: object) -> float:
    """``q`` as a float in ``[1/2, 1]`` (then the flip probability ``1 - q`` is exact in float64)."""
    try:
        if isinstance(q, bool):
            raise TypeError
        q = float(q)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"`q` must be a float; got {type(q).__name__}") from None
    if not 0.5 <= q <= 1.0:
        raise ValueError(f"`q` (the probability of reporting a pair's true bit) must lie in [1/2, 1]; got {q!r}")
    return q


class _LazyUniform:
    r"""A uniform :math:`U \in [0, 1)` of which the first ``bits`` bits (the integer ``known``) have
    been drawn; further 63-bit words are drawn only when a comparison needs them."""

    def __init__(self, word: int, source: RandomSource) -> None:
        self.known, self.bits, self.source = int(word), WORD_BITS, source

    def extend(self) -> None:
        if self.bits + WORD_BITS > _EXACT_BITS:
            raise RuntimeError("exact comparison exhausted its precision (probability below 2^-189)")
        self.known = (self.known << WORD_BITS) | int(self.source.words(1)[0])
        self.bits += WORD_BITS

    def less_than(self, t, ctx) -> bool:
        """Whether ``U < t`` (``t`` in [0, 1], an mpmath number)."""
        while True:
            scaled = ctx.ldexp(t, self.bits)
            f = int(ctx.floor(scaled))
            if self.known != f:
                return self.known < f
            if scaled == f:  # U >= known / 2^bits = t
                return False
            self.extend()


class _GeometricGaps:
    r"""Exact samples of :math:`G` with :math:`P(G \ge k) = (1 - p)^k`, :math:`k \ge 0`, for a float
    ``p`` in :math:`[2^{-53}, 1/2]` (taken exactly)."""

    def __init__(self, p: float) -> None:
        p = float(p)
        if not (MIN_FLIP_PROBABILITY <= p <= 0.5):
            raise ValueError(f"the exact geometric sampler needs a probability in [2^-53, 1/2]; got {p!r}")
        self.p = p
        ctx = mp_context(_EXACT_PREC)
        self.ctx = ctx
        self.r = 1 - ctx.mpf(p)  # exact: p is dyadic with at most 53 significant bits
        self.log_r_mp = ctx.log(self.r)
        self.log_r = float(self.log_r_mp)  # within 2^-53 relatively
        self.r_float = float(self.r)  # within 2^-53 relatively

    def power(self, k: int):
        """:math:`r^k` in 320-bit arithmetic."""
        return self.ctx.power(self.r, k)

    def estimates(self, g: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(g log r, r^g, r^(g+1))`` in float64 for integer-valued float64 ``g``: the last two
        within a relative 2^-46 of the exact values where ``|g log r| <= 45``."""
        y = g * self.log_r
        s = torch.exp(y)
        return y, s, s * self.r_float

    def candidates(self, words: Tensor) -> tuple[Tensor, Tensor]:
        """The float64 candidate of every word and whether it is proven right (see :data:`GAP_MARGIN`)."""
        margin = GAP_MARGIN
        wf = words.to(torch.float64)
        low = wf * 2.0 ** -WORD_BITS  # U >= low (up to 2^-53 relatively)
        high = (wf + 1.0) * 2.0 ** -WORD_BITS  # U < high (up to 2^-52 relatively)
        g = torch.floor(torch.log((wf + 0.5) * 2.0 ** -WORD_BITS) / self.log_r).clamp_(min=0.0)
        y, s, t = self.estimates(g)
        ok = (y >= -_EXPONENT_LIMIT) & (t * (1.0 + margin) <= low)  # U >= r^(g+1): G <= g
        ok &= (g == 0) | (high <= s * (1.0 - margin))  # U < r^g: G >= g (always when g = 0)
        return g.long(), ok

    def exact(self, word: int, source: RandomSource) -> int:
        """:math:`G` for the uniform whose first 63 bits are ``word``, by exact comparisons."""
        ctx = self.ctx
        u = _LazyUniform(word, source)
        while u.known == 0:  # U < 2^-bits: read on until a one bit
            u.extend()
        estimate = ctx.log(ctx.ldexp(ctx.mpf(u.known) + ctx.mpf(0.5), -u.bits)) / self.log_r_mp
        hint = max(0, int(ctx.floor(estimate)))

        def below(k: int) -> bool:  # U < r^k, i.e. G >= k
            return k <= 0 or u.less_than(self.power(k), ctx)

        if below(hint):  # G >= hint: search upwards
            lo, step = hint, 1
            while below(lo + step):
                lo, step = lo + step, 2 * step
            hi = lo + step
        else:  # G < hint: search downwards
            hi, step = hint, 1
            while True:
                k = hi - step
                if below(k):
                    lo = max(k, 0)
                    break
                hi, step = k, 2 * step
        while hi - lo > 1:  # U < r^lo and U >= r^hi
            mid = (lo + hi) // 2
            if below(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def sample(self, n: int, source: RandomSource) -> Tensor:
        """``n`` exact samples (``int64`` on ``source.device``)."""
        words = source.words(n)
        g, ok = self.candidates(words)
        if not bool(ok.all()):
            undecided = (~ok).nonzero().squeeze(1)
            values = [self.exact(int(w), source) for w in words[undecided].tolist()]
            g[undecided] = torch.tensor(values, dtype=torch.int64, device=g.device)
        return g


def _pair_ids(edge_index: Tensor, num_nodes: int) -> Tensor:
    row, col = edge_index
    keep = row < col
    return row[keep] * num_nodes + col[keep]


def _positions_from_gaps(total: int, prob: float, draw_gaps, device: torch.device) -> Tensor:
    """Sorted positions in ``[0, total)`` of the 1s of an i.i.d. Bernoulli(``prob``) sequence, from
    ``draw_gaps(m)``: ``m`` i.i.d. gaps (>= 1) between consecutive 1s, drawn in chunks of about the
    expected count plus six standard deviations."""
    if prob <= 0.0 or total <= 0:
        return torch.empty(0, dtype=torch.long, device=device)
    chunks = []
    last = -1
    while last < total - 1:
        expected = (total - 1 - last) * prob
        pos = torch.cumsum(draw_gaps(int(expected + 6.0 * math.sqrt(expected) + 16)), 0).add_(last)
        if int(pos[-1]) >= total:
            chunks.append(pos[pos < total])
            break
        chunks.append(pos)
        last = int(pos[-1])
    return torch.cat(chunks)


def _bernoulli_positions(total: int, prob: float, *, generator: torch.Generator | None,
                         device: torch.device) -> Tensor:
    """The float sampler's positions: geometric gaps by the floating-point inverse CDF."""
    log_stay = math.log1p(-prob) if prob < 1.0 else -math.inf
    generator = float_generator(generator, device)  # never torch's global generator

    def gaps(m: int) -> Tensor:
        u = 1.0 - torch.rand(m, dtype=torch.float64, generator=generator, device=device)  # (0, 1]
        # P(floor(log u / log(1-p)) >= k) = (1-p)^k: a Geometric gap on {1, 2, ...}
        return torch.floor(torch.log(u) / log_stay).long() + 1

    return _positions_from_gaps(total, prob, gaps, device)


@functools.lru_cache(maxsize=64)
def _gap_law(prob: float) -> _GeometricGaps:
    return _GeometricGaps(prob)  # immutable; its 320-bit context costs about 0.3 ms to build


def _exact_bernoulli_positions(total: int, prob: float, source: RandomSource) -> Tensor:
    """Sorted positions in ``[0, total)`` where an i.i.d. Bernoulli(``prob``) sequence is 1, from
    exact geometric gaps (``prob`` a float in ``{0} | [2^-53, 1/2]``, taken exactly)."""
    if prob <= 0.0 or total <= 0:
        return torch.empty(0, dtype=torch.long, device=source.device)
    law = _gap_law(float(prob))
    # a gap is G + 1, G failures before the next success; gaps past the end are cut at `total`
    return _positions_from_gaps(total, prob, lambda m: law.sample(m, source).clamp_(max=total).add_(1),
                                source.device)


def _in_sorted(values: Tensor, sorted_set: Tensor) -> Tensor:
    """Membership of ``values`` in the sorted 1-D ``sorted_set``, by binary search."""
    if sorted_set.numel() == 0:
        return torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    idx = torch.searchsorted(sorted_set, values).clamp_(max=sorted_set.numel() - 1)
    return sorted_set[idx] == values


def flip_edges(edge_index: Tensor, num_nodes: int, q: float, *, keep_nodes: Tensor | None = None,
               generator: torch.Generator | None = None, sampler: Sampler = "safe",
               secure_mode: Optional[bool] = None) -> Tensor:
    r"""Randomized response on every pair of nodes.

    Args:
        edge_index (Tensor): undirected simple graph, each edge in both directions, ids
            in :math:`[0, n)`.
        num_nodes (int): :math:`n`, the public number of nodes (every pair of them is
            randomised). Required: a count inferred from the largest id of the private
            ``edge_index`` would randomise different pairs for a graph with an isolated
            last node and for the same graph plus an edge at that node.
        q (float): probability of reporting a pair's true bit, in :math:`[1/2, 1)` (``1`` is
            accepted and flips nothing). The flip probability is exactly :math:`1 - q`.
        keep_nodes (Tensor, optional): nodes whose pairs are reported truthfully (not
            randomised): the personalized setting, where a seed already knows its own
            edges (the personalized Edge-Flipping baseline of Wei, Chien and Li, NeurIPS 2024,
            arXiv:2407.00077, Sec. 4 "Baselines", which excludes the seed's edges from flipping).
        generator (torch.Generator, optional): reproducibility only; a known seed voids the
            guarantee.
        sampler (str): ``"safe"`` (default): exact geometric gaps drawn from uniform integer
            words (see the module documentation), so every flip pattern has exactly its
            randomized-response probability and none is impossible. ``"float"``: the
            floating-point inverse CDF on ``torch.rand``, open to the floating-point attacks of
            Mironov (2012); for benchmarks and audits only.
        secure_mode (bool, optional): draw every random bit from the operating system's CSPRNG
            (``None``: the process-wide default of :func:`pyg_private.mechanisms.set_secure_mode`;
            ignored by the float sampler, which refuses ``True``). A seeded ``generator`` is
            refused in secure mode.

    Returns:
        The randomised graph's ``edge_index`` (both directions, sorted, no self-loops).
    """
    sampler, secure_mode = check_sampler_options(sampler, secure_mode, generator)
    secure = resolve_secure_mode(secure_mode, generator) if sampler == "safe" else False
    q = check_truth_probability(q)
    if num_nodes is None:
        raise ValueError("`num_nodes` is required: the number of nodes is public input and is never inferred from "
                         "the private edges")
    n = check_edge_index(edge_index, num_nodes)  # every id in [0, n), before any bit is drawn
    device = edge_index.device
    edge_index = edge_index.long()
    true_ids = torch.unique(_pair_ids(edge_index, n))  # i * n + j, i < j, sorted
    kept_node = torch.zeros(n, dtype=torch.bool, device=device)
    if keep_nodes is not None:
        keep = torch.as_tensor(keep_nodes, device=device).long().view(-1)
        if keep.numel() and (int(keep.min()) < 0 or int(keep.max()) >= n):
            raise ValueError(f"`keep_nodes` must lie in [0, {n}); got range [{int(keep.min())}, {int(keep.max())}]")
        kept_node[keep] = True

    # flipped pairs, row-major over the upper triangle: row i holds pairs (i, i+1..n-1)
    row_len = torch.arange(n - 1, -1, -1, dtype=torch.long, device=device)
    offsets = torch.zeros(n + 1, dtype=torch.long, device=device)
    torch.cumsum(row_len, 0, out=offsets[1:])
    if sampler == "safe":  # 1 - q is exact for q in [1/2, 1]
        source = RandomSource(device, generator=generator, secure=secure)
        pos = _exact_bernoulli_positions(n * (n - 1) // 2, 1.0 - q, source)
    else:
        pos = _bernoulli_positions(n * (n - 1) // 2, 1.0 - q, generator=generator, device=device)
    i = torch.searchsorted(offsets, pos, right=True) - 1
    j = pos - offsets[i] + i + 1
    del pos
    free = ~(kept_node[i] | kept_node[j])  # pairs at a kept node are reported as they are
    flipped = (i * n + j)[free]
    del i, j, free

    surviving = true_ids[~_in_sorted(true_ids, flipped)]
    appearing = flipped[~_in_sorted(flipped, true_ids)]
    del flipped
    return _symmetric_edge_index(_merge_sorted(surviving, appearing), n)


def _merge_sorted(a: Tensor, b: Tensor) -> Tensor:
    """The sorted union of two sorted, disjoint 1-D tensors (no global sort)."""
    out = torch.empty(a.numel() + b.numel(), dtype=a.dtype, device=a.device)
    out[torch.arange(a.numel(), device=a.device) + torch.searchsorted(b, a)] = a
    out[torch.arange(b.numel(), device=b.device) + torch.searchsorted(a, b)] = b
    return out


def _symmetric_edge_index(upper_ids: Tensor, n: int) -> Tensor:
    """Both directions of the sorted upper-triangle pairs ``i * n + j``, coalesced.

    Row ``r`` of the result lists its smaller neighbours (the pairs ``(i, r)``, sorted by
    ``i``) and then its larger ones (the pairs ``(r, j)``, already sorted): one sort of
    the pairs by column instead of a sort of both directions.
    """
    device = upper_ids.device
    up_row, up_col = upper_ids // n, upper_ids % n
    by_col = torch.argsort(up_col * n + up_row)  # the transpose, in (col, row) order
    low_row, low_col = up_col[by_col], up_row[by_col]
    del by_col
    n_low = torch.bincount(low_row, minlength=n)
    n_up = torch.bincount(up_row, minlength=n)
    ptr = torch.zeros(n + 1, dtype=torch.long, device=device)
    torch.cumsum(n_low + n_up, 0, out=ptr[1:])
    low_start = torch.zeros(n + 1, dtype=torch.long, device=device)
    torch.cumsum(n_low, 0, out=low_start[1:])
    up_start = torch.zeros(n + 1, dtype=torch.long, device=device)
    torch.cumsum(n_up, 0, out=up_start[1:])
    out = torch.empty(2, 2 * upper_ids.numel(), dtype=torch.long, device=device)
    rank = torch.arange(low_row.numel(), device=device) - low_start[low_row]
    where = ptr[low_row] + rank
    out[0, where], out[1, where] = low_row, low_col
    rank = torch.arange(up_row.numel(), device=device) - up_start[up_row]
    where = ptr[up_row] + n_low[up_row] + rank
    out[0, where], out[1, where] = up_row, up_col
    return out


def flip_bipartite_edges(edge_index: Tensor, num_src: int, num_dst: int, q: float, *,
                         generator: torch.Generator | None = None, sampler: Sampler = "safe",
                         secure_mode: Optional[bool] = None) -> Tensor:
    r"""Randomized response on every pair :math:`(s, d) \in [0, n_{src}) \times [0, n_{dst})` of a
    bipartite (directed) relation: each pair keeps its bit with probability :math:`q` and is flipped
    otherwise, independently, with the same exact sampler as :func:`flip_edges` (geometric gaps
    over the :math:`n_{src} n_{dst}` pairs in row-major order). One edge is one pair, so the release
    is pure :math:`\log(q/(1-q))`-DP for one edge of the relation.

    Args:
        edge_index (Tensor): ``[2, E]``, row 0 the sources in :math:`[0, n_{src})`, row 1 the
            destinations in :math:`[0, n_{dst})`, no pair twice.
        num_src, num_dst (int): the public sizes of the two node sets (never read off the edges).
        q, generator, sampler, secure_mode: as in :func:`flip_edges`.

    Returns:
        The randomised relation's ``edge_index`` ``[2, E']``, sorted by source, then destination.
    """
    sampler, secure_mode = check_sampler_options(sampler, secure_mode, generator)
    secure = resolve_secure_mode(secure_mode, generator) if sampler == "safe" else False
    q = check_truth_probability(q)
    ns, nd = int(num_src), int(num_dst)
    if ns <= 0 or nd <= 0:
        raise ValueError(f"a bipartite relation needs at least one node on each side; got {ns} x {nd}")
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError("`edge_index` must be a [2, E] tensor")
    device = edge_index.device
    src, dst = edge_index.long()
    if src.numel() and (int(src.min()) < 0 or int(dst.min()) < 0 or int(src.max()) >= ns or int(dst.max()) >= nd):
        raise ValueError(f"`edge_index` has ids outside [0, {ns}) x [0, {nd})")
    true_ids = src * nd + dst
    true_ids = torch.unique(true_ids)  # sorted
    if true_ids.numel() != src.numel():
        raise ValueError("`edge_index` lists a pair more than once: one edge must be one entry")
    if sampler == "safe":
        source = RandomSource(device, generator=generator, secure=secure)
        flipped = _exact_bernoulli_positions(ns * nd, 1.0 - q, source)
    else:
        flipped = _bernoulli_positions(ns * nd, 1.0 - q, generator=generator, device=device)
    surviving = true_ids[~_in_sorted(true_ids, flipped)]
    appearing = flipped[~_in_sorted(flipped, true_ids)]
    del flipped
    ids = _merge_sorted(surviving, appearing)
    return torch.stack([ids // nd, ids % nd])
