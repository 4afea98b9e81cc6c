r"""Floating-point distinguisher audit of edge randomized response (issue 14).

:func:`~pyg_private.mechanisms.flip_edges` (also run by
:class:`~pyg_private.transforms.EdgeRandomizedResponse` and :class:`~pyg_private.nn.EdgeFlippingPPR`)
reports every pair :math:`\{i, j\}` of an undirected graph truthfully with probability :math:`q` and
flipped otherwise. Exact randomized response gives every simple graph on the public node set positive
probability under every input, and the likelihood ratio of a release under neighbours
:math:`G' = G + e` and :math:`G` is :math:`(q/(1-q))^{\pm 1}`, decided by the bit of :math:`e` alone.

**The attacker.** A release is the true edge set XOR the flipped pairs; the flipped pairs are the
positions of a Bernoulli(:math:`p = 1 - q`) sequence over the pairs in row-major order, drawn by jumping
from one flip to the next with geometric gaps. Under the two hypotheses the flip sets differ only at
:math:`e`: one has a gap :math:`a + b` where the other has the gaps :math:`a, b`. The float sampler
(``sampler="float"``) draws a gap as :math:`\lfloor \log u / \log(1-p) \rfloor + 1` with
:math:`u = 1 - \mathtt{torch.rand}` on the lattice :math:`2^{-53}\{1, \dots, 2^{53}\}`, so it can never
produce a gap above :math:`M = g(2^{-53})` (a truncated range) nor the values that the coarse lattice
near :math:`u = 0` skips (holes just below :math:`M`, e.g. 330, 333, ..., 348 for :math:`p = 0.1`); a
release whose flip pattern under one hypothesis needs such a gap identifies the other hypothesis with
certainty (Mironov 2012; Jin et al. 2022). Those gaps lie in the :math:`u`-tail, so under the float
sampler such a release has probability about :math:`k \cdot 2^{-53}` (:math:`k` the number of lattice
points whose gap borders a hole): 6.7e-16 in the layout below. Elsewhere every gap value has about
:math:`2^{53} p (1-p)^{j-1}` lattice points, so its probability is off by a relative 1/(that count),
below 2e-12 for every gap of probability above 1e-4 at :math:`p = 0.1`: no likelihood-ratio or
pattern-frequency test of feasible size can tell the float sampler from exact randomized response, and a
plain Monte Carlo audit of 1e5 (or 1e12) releases expects no identification. The positive control therefore uses importance sampling on the real float code path:
the first uniform of a call is drawn from the tail :math:`u \in 2^{-53}\{1, \dots, 16\}` (probability
:math:`2^{-49}`, exactly), the rest of the call is unchanged; the identification rate conditional on
that tail is large and measured exactly, and times :math:`2^{-49}` it is a lower bound on the float
sampler's :math:`\delta`. The safe sampler, conditioned on the same tail, produces the gap values the
float sampler cannot, with their exact geometric probabilities.

**1e5 releases cheaply.** One call of ``flip_edges`` on ``B`` disjoint copies of a 4-node graph (made by
:func:`brute_force.block_diagonal_edge_index`) gives ``B`` independent releases of that graph: the safe
sampler draws i.i.d. exact geometric gaps (``_GeometricGaps.sample``, fresh words per gap, further words
only for the gaps it decides exactly) and ``_positions_from_gaps`` turns i.i.d. gaps into the positions
of i.i.d. Bernoulli(:math:`1-q`) bits over *all* :math:`N(N-1)/2` pairs (a Bernoulli process is a
renewal process with geometric gaps; unused gaps of a chunk are discarded, and the chunking does not
depend on them); the release is the true bits XOR those bits (no pair is kept here). The bits of the
pairs inside a block are therefore independent of those of every other block and have the law of
``flip_edges`` on the 4-node graph itself; cross-block pairs are flipped as well and only counted. (For
the float sampler the gaps are i.i.d. but not exactly geometric, so its bits are only approximately
independent.) The per-call cost is :math:`O(N + p N^2/2)` (:math:`N = 4B`); :math:`q = 0.9` with ``B = 50`` keeps it
under a millisecond (2,000 calls per input).
"""
import math

import pytest
import torch
from scipy import stats

from brute_force import block_diagonal_edge_index
from pyg_private.accounting import randomized_response_rdp
from pyg_private.audit import clopper_pearson, empirical_epsilon_lower_bound, floating_point_audit
from pyg_private.mechanisms import edge_flipping as ef
from pyg_private.mechanisms import flip_edges
from pyg_private.mechanisms.randomness import WORD_BITS, RandomSource

Q = 0.9  # probability of the true bit; the flip probability is exactly 1 - Q
P = 1.0 - Q
LEVEL = 1e-6  # level of every statistical test (seeded generators: the outcomes are deterministic)

# --------------------------------------------------------------------------- helpers (proposed audit API)


def rr_possible(y: torch.Tensor, truth: torch.Tensor, q: float, kept: torch.Tensor | None = None) -> torch.Tensor:
    """The support of exact randomized response: bit ``k`` of a release is possible under ``truth`` when it
    equals the true bit or the pair is randomised (flip probability ``1 - q > 0`` and not at a kept node)."""
    free = torch.full_like(truth, q < 1.0) if kept is None else (~kept & (q < 1.0))
    return (y == truth) | free


def float_gap_support(p: float, tail: int = 64) -> torch.Tensor:
    r"""``support[j]``: whether the float sampler can draw the gap ``j`` (index 0 unused; the last index
    is the largest gap :math:`M`, drawn from :math:`u = 2^{-53}`).

    The sampler's gap is :math:`\lfloor \log u / \log(1-p) \rfloor + 1` with :math:`u = m 2^{-53}`,
    :math:`m \in [1, 2^{53}]`. The gaps of :math:`m \le` ``tail`` are computed with the sampler's own
    operations; every gap up to that of ``tail + 1`` is called possible (true where the lattice is finer
    than the gaps; calling possible what is not only weakens the attacker). Larger :math:`m` give smaller
    ratios, so the values above it that no enumerated :math:`m` produces are impossible. Each computed
    ratio is checked to lie at least 1e-9 from an integer, so that any implementation of ``log`` within a
    few ulps gives the same floors.
    """
    m = torch.arange(1, tail + 2, dtype=torch.float64)
    u = 1.0 - (1.0 - m * 2.0 ** -53)  # as the sampler forms u = 1 - rand, rand = 1 - m 2^-53 (exact)
    ratio = torch.log(u) / math.log1p(-p)
    assert float((ratio - ratio.round()).abs().min()) > 1e-9, "a ratio too close to an integer: pick another p"
    g = torch.floor(ratio).long() + 1
    assert float(ratio[tail - 1] - ratio[tail]) < 1.0  # below gap(tail + 1) the lattice is finer than the gaps
    support = torch.zeros(int(g[0]) + 1, dtype=torch.bool)
    support[1:int(g[tail]) + 1] = True
    support[g[:tail]] = True
    return support


def float_gap(m: torch.Tensor, p: float) -> torch.Tensor:
    """The float sampler's gap for ``u = m 2^-53``."""
    u = 1.0 - (1.0 - m.to(torch.float64) * 2.0 ** -53)
    return torch.floor(torch.log(u) / math.log1p(-p)).long() + 1


def float_flip_possible(y: torch.Tensor, truth: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    r"""Whether releases ``y`` (``[m, T]`` bool, the pairs in row-major order) can come from the float
    sampler on the graph with bits ``truth``: every gap between consecutive flipped pairs (the first from
    position -1) must be a drawable gap, and the gap that leaves the last flip must be able to reach past
    the end (at most :math:`M` long). An impossible gap marks the flip that ends it; a tail that is too
    long marks the last pair."""
    flips = y ^ truth
    m, T = flips.shape
    idx = torch.arange(T).expand(m, T)
    last_incl = torch.cummax(torch.where(flips, idx, torch.full_like(idx, -1)), dim=1).values
    previous = torch.cat([torch.full((m, 1), -1, dtype=torch.long), last_incl[:, :-1]], dim=1)
    drawable = torch.zeros(T + 2, dtype=torch.bool)
    top = min(T + 2, support.numel())
    drawable[:top] = support[:top]
    possible = ~flips | drawable[idx - previous]
    possible[:, -1] &= (T - last_incl[:, -1]) < support.numel()  # needs a gap >= T - last <= M
    return possible


def _check_simple_graph(out: torch.Tensor, n: int) -> None:
    """A release must be a coalesced, symmetric simple graph on the ``n`` public nodes."""
    assert out.dtype == torch.long and out.dim() == 2 and out.size(0) == 2
    row, col = out
    if out.numel():
        assert int(out.min()) >= 0 and int(out.max()) < n
    assert bool((row != col).all())
    key = row * n + col
    assert bool((key[1:] > key[:-1]).all())  # sorted, no duplicates
    a = torch.zeros(n, n, dtype=torch.bool)
    a[row, col] = True
    assert torch.equal(a, a.t())  # both directions


def _upper_bits(out: torch.Tensor, n: int) -> torch.Tensor:
    """The release's pairs i < j in row-major order (flip_edges' order), as bools."""
    a = torch.zeros(n, n, dtype=torch.bool)
    a[out[0], out[1]] = True
    iu = torch.triu_indices(n, n, 1)
    return a[iu[0], iu[1]]


def _chi2(counts, probs) -> tuple[float, float]:
    """Chi-square statistic and critical value at LEVEL, bins with expected count < 20 pooled."""
    counts = torch.as_tensor(counts, dtype=torch.float64)
    probs = torch.as_tensor(probs, dtype=torch.float64)
    assert abs(float(probs.sum()) - 1.0) < 1e-9
    expected = counts.sum() * probs
    small = expected < 20
    c = torch.cat([counts[~small], counts[small].sum().view(1)]) if small.any() else counts
    e = torch.cat([expected[~small], expected[small].sum().view(1)]) if small.any() else expected
    stat = float(((c - e) ** 2 / e).sum())
    return stat, float(stats.chi2.ppf(1 - LEVEL, df=len(c) - 1))


# --------------------------------------------------------------------------- the safe audit, 1e5 releases

PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]  # a 4-node block's pairs in row-major order
E = 2  # the pair {0, 3}: G is the path 0-1-2-3, G' = G + {0, 3} (a 4-cycle)
TRUTH = {"G": torch.tensor([1, 0, 0, 1, 0, 1], dtype=torch.bool),
         "G+e": torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.bool)}
_PAIR_INDEX = torch.full((16,), -1, dtype=torch.long)
for _k, (_i, _j) in enumerate(PAIRS):
    _PAIR_INDEX[_i * 4 + _j] = _k


def _block_bits(out: torch.Tensor, blocks: int) -> tuple[torch.Tensor, int]:
    """The bits of every block's 6 pairs (``[blocks, 6]``) and the number of released cross-block pairs."""
    row, col = out
    up = row < col
    inside = up & (row // 4 == col // 4)
    r, c = row[inside], col[inside]
    bits = torch.zeros(blocks, len(PAIRS), dtype=torch.bool)
    bits[r // 4, _PAIR_INDEX[(r % 4) * 4 + c % 4]] = True
    return bits, int(up.sum()) - int(inside.sum())


def _pattern_probs(truth: torch.Tensor, q: float) -> torch.Tensor:
    """Exact randomized-response probability of each of the 64 block patterns (bit k = pair k)."""
    pats = (torch.arange(64).unsqueeze(1) >> torch.arange(6)) & 1
    keep = pats.bool() == truth
    return torch.where(keep, torch.tensor(q, dtype=torch.float64),
                       torch.tensor(1.0 - q, dtype=torch.float64)).prod(dim=1)


def test_safe_flip_edges_audit_with_1e5_releases_per_input():
    """1e5 safe releases of G and of G' (50 blocks a call): none is impossible under the other input;
    the patterns follow exact randomized response; the bit of e gives the charged likelihood ratio
    (q/(1-q))^(+-1) and nothing more; blocks are independent."""
    blocks, releases = 50, 100_000
    gen = torch.Generator().manual_seed(2024)
    graph = {side: block_diagonal_edge_index([sum(1 << k for k in range(6) if bits[k]) for _ in range(blocks)],
                                             PAIRS, 4)
             for side, bits in TRUTH.items()}
    n = 4 * blocks
    drawn = {"G": [], "G+e": []}
    cross = {"G": 0, "G+e": 0}

    def sampler(side):
        def sample(m):
            assert m % blocks == 0
            chunks = []
            for _ in range(m // blocks):
                out = flip_edges(graph[side], n, Q, generator=gen)
                _check_simple_graph(out, n)
                bits, c = _block_bits(out, blocks)
                chunks.append(bits)
                cross[side] += c
            y = torch.cat(chunks)
            drawn[side].append(y)
            return y
        return sample

    res = floating_point_audit(sampler("G"), sampler("G+e"), lambda y: rr_possible(y, TRUTH["G"], Q),
                               lambda y: rr_possible(y, TRUTH["G+e"], Q), num_releases=releases,
                               batch_size=blocks * 200)
    assert res.num_releases == releases and res.identified == 0 and res.delta_lower == 0.0
    assert res.upper < 1.6e-5  # rule of three over 2e5 releases
    ys = {side: torch.cat(v) for side, v in drawn.items()}
    assert all(y.shape == (releases, 6) for y in ys.values())
    weights = 1 << torch.arange(6)

    # every pattern has its exact randomized-response frequency, under each input
    for side, y in ys.items():
        counts = torch.bincount((y.long() * weights).sum(1), minlength=64)
        stat, crit = _chi2(counts, _pattern_probs(TRUTH[side], Q))
        assert stat < crit, (side, stat, crit)
    # the control: the same statistic rejects the patterns of G' judged by G's law
    counts = torch.bincount((ys["G+e"].long() * weights).sum(1), minlength=64)
    stat, crit = _chi2(counts, _pattern_probs(TRUTH["G"], Q))
    assert stat > 100 * crit

    # the likelihood ratio: only e's bit differs in law, by exactly the charged factor
    charged = float(randomized_response_rdp(math.inf, q=Q)[0])
    assert charged == pytest.approx(math.log(Q / P), rel=1e-12)
    tp, fp = int(ys["G+e"][:, E].sum()), int(ys["G"][:, E].sum())  # "e is present" iff its bit is 1
    for k, prob in ((tp, Q), (fp, P)):
        lo = clopper_pearson(k, releases, 1 - LEVEL / 2, "lower")
        hi = clopper_pearson(k, releases, 1 - LEVEL / 2, "upper")
        assert lo <= prob <= hi, (k, prob, lo, hi)
    bound = empirical_epsilon_lower_bound(tp, fp, releases, releases, confidence=0.95)
    assert 0.9 * charged < bound.epsilon <= charged, (bound.epsilon, charged)
    for k in range(6):
        if k != E:  # the other pairs: the same law under both inputs
            table = [[int(ys[s][:, k].sum()), releases - int(ys[s][:, k].sum())] for s in ys]
            assert stats.chi2_contingency(table)[1] > LEVEL, (k, table)

    # independence of blocks: e's bit in blocks 2i and 2i + 1 of a call (the claim of the docstring)
    for side, y in ys.items():
        e_bits = y[:, E].view(-1, 2).long()
        joint = torch.bincount(e_bits[:, 0] * 2 + e_bits[:, 1], minlength=4)
        pe = Q if TRUTH[side][E] else P
        stat, crit = _chi2(joint, [(1 - pe) ** 2, (1 - pe) * pe, pe * (1 - pe), pe ** 2])
        assert stat < crit, (side, joint)
    # the cross-block pairs (true bit 0) are flipped at rate 1 - q as well
    calls = 2 * releases // blocks
    pairs = calls * (n * (n - 1) // 2 - 6 * blocks)
    observed = cross["G"] + cross["G+e"]
    assert abs(observed - pairs * P) < 5 * math.sqrt(pairs * P * Q), (observed, pairs * P)


# --------------------------------------------------------------------------- the float sampler's tail

TAIL = 16  # the conditioned first uniform: u = m 2^-53, m uniform in [1, TAIL] (probability 2^-49)


def _control_pair(n: int) -> dict:
    """G (a path on nodes 1..n-1 and the edge {0, 5}) and G + e, e = {0, 1}: the first pair (position 0),
    as ``(edge_index, upper-triangle bits)``."""
    edges = [(i, i + 1) for i in range(1, n - 1)] + [(0, 5)]
    out = {}
    for side, es in (("G", edges), ("G+e", edges + [(0, 1)])):
        t = torch.tensor(es).t()
        ei = torch.cat([t, t.flip(0)], 1)
        out[side] = (ei, _upper_bits(ei, n))
    return out


class _TailFirstTorch:
    """Stands in for the module ``torch`` inside ``edge_flipping``: identical, except that after
    :meth:`arm` the first value of the next ``torch.rand`` call is :math:`1 - m 2^{-53}` with ``m``
    uniform in ``[1, TAIL]``, i.e. the float sampler's first uniform ``u = 1 - rand`` drawn from its
    lattice conditioned on ``u <= TAIL 2^-53``. The rest of the call is the real float code path."""

    def __init__(self, generator: torch.Generator) -> None:
        self._generator, self._armed, self.picks = generator, False, []

    def arm(self) -> None:
        self._armed = True

    def rand(self, *args, **kwargs):
        out = torch.rand(*args, **kwargs)
        if self._armed:
            m = int(torch.randint(1, TAIL + 1, (1,), generator=self._generator))
            out[0] = 1.0 - m * 2.0 ** -53
            self.picks.append(m)
            self._armed = False
        return out

    def __getattr__(self, name):
        return getattr(torch, name)


def test_float_sampler_is_caught_in_its_gap_tail(monkeypatch):
    """The positive control: releases of ``sampler="float"`` whose flip pattern under the other input
    needs a gap the float sampler cannot draw; counted on the real code path, conditioned on the tail."""
    support = float_gap_support(P)
    M = support.numel() - 1
    holes = (~support[1:]).nonzero().squeeze(1) + 1
    assert M == 349 and holes.tolist() == [330, 333, 335, 337, 338, 340, 341, 342, 344, 345, 346, 347, 348]
    # every gap u = m 2^-53 can produce, m in [1, 64]: identification needs gap(m) - 1 to be a hole
    m_all = torch.arange(1, 65)
    identifying = ~support[float_gap(m_all, P) - 1]
    assert identifying.nonzero().squeeze(1).add(1).tolist() == [1, 2, 3, 4, 5, 7]
    delta_float = int(identifying.sum()) * 2.0 ** -53  # P(identify) >= this, per release, on each side
    assert 6e-16 < delta_float < 7e-16

    proxy = _TailFirstTorch(torch.Generator().manual_seed(7))
    monkeypatch.setattr(ef, "torch", proxy)
    gen = torch.Generator().manual_seed(8)
    n = 27  # 351 pairs: every conditioned first gap (at most M = 349) lands on a pair
    T = n * (n - 1) // 2
    pair = _control_pair(n)
    graphs, truth = {s: v[0] for s, v in pair.items()}, {s: v[1] for s, v in pair.items()}
    picks = {"G": [], "G+e": []}
    drawn = {"G": [], "G+e": []}

    def sampler(side):
        def sample(m):
            rows = []
            for _ in range(m):
                proxy.arm()
                before = len(proxy.picks)
                out = flip_edges(graphs[side], n, Q, generator=gen, sampler="float")
                assert len(proxy.picks) == before + 1, "the float sampler drew no uniform from torch.rand"
                _check_simple_graph(out, n)
                rows.append(_upper_bits(out, n))
                picks[side].append(proxy.picks[-1])
            y = torch.stack(rows)
            drawn[side].append(y)
            return y
        return sample

    releases = 1000
    res = floating_point_audit(sampler("G"), sampler("G+e"), lambda y: float_flip_possible(y, truth["G"], support),
                               lambda y: float_flip_possible(y, truth["G+e"], support), num_releases=releases,
                               batch_size=releases)  # check_own: the model allows every release on its own input
    for side, other in (("G", "G+e"), ("G+e", "G")):
        y, m = torch.cat(drawn[side]), torch.tensor(picks[side])
        assert y.shape == (releases, T)
        # the first flip is where the conditioned gap puts it: the enumeration is the sampler's arithmetic
        first = (y ^ truth[side]).long().argmax(dim=1)
        assert torch.equal(first, float_gap(m, P) - 1)
        # identified exactly when gap(m) - 1 is a hole (then e flipped at position 0 is impossible)
        caught = ~float_flip_possible(y, truth[other], support).all(dim=1)
        assert torch.equal(caught, identifying[m - 1])
    assert res.identified_a == int(identifying[torch.tensor(picks["G"]) - 1].sum()) > 0
    assert res.identified_b == int(identifying[torch.tensor(picks["G+e"]) - 1].sum()) > 0
    assert 0.25 < res.rate < 0.5  # 6 of the 16 tail points: 37.5%
    # unconditionally: P(tail) = 2^-49, so the float sampler's delta >= 2^-49 * 6/16 = 6.7e-16 > 0 at any epsilon


class _TailFirstSource(RandomSource):
    """A seeded source whose first word is uniform in ``[0, TAIL 2^10)``: the safe sampler's first uniform
    :math:`U` conditioned on :math:`U < \\mathrm{TAIL}\\, 2^{-53}` (the float control's tail)."""

    def __init__(self, picker: torch.Generator, generator: torch.Generator) -> None:
        super().__init__("cpu", generator=generator)
        self._picker, self._armed = picker, True

    def words(self, n):
        w = super().words(n)
        if self._armed and int(n) > 0:
            w = w.clone()
            w[0] = int(torch.randint(0, TAIL << (WORD_BITS - 53), (1,), generator=self._picker))
            self._armed = False
        return w


def test_safe_sampler_draws_the_gaps_the_float_sampler_cannot(monkeypatch):
    """The same tail for the safe sampler: every first gap has its exact conditional geometric
    probability, the float sampler's holes included, and no release is impossible under the other input."""
    picker, gen = torch.Generator().manual_seed(9), torch.Generator().manual_seed(10)
    monkeypatch.setattr(ef, "RandomSource", lambda device, generator=None, secure=False:
                        _TailFirstSource(picker, generator))
    n = 40  # 780 pairs: the conditioned first gap (322 to about 500) always lands on a pair
    pair = _control_pair(n)
    graphs, truth = {s: v[0] for s, v in pair.items()}, {s: v[1] for s, v in pair.items()}
    drawn = {"G": [], "G+e": []}

    def sampler(side):
        def sample(m):
            y = torch.stack([_upper_bits(flip_edges(graphs[side], n, Q, generator=gen), n) for _ in range(m)])
            drawn[side].append(y)
            return y
        return sample

    releases = 1000
    res = floating_point_audit(sampler("G"), sampler("G+e"), lambda y: rr_possible(y, truth["G"], Q),
                               lambda y: rr_possible(y, truth["G+e"], Q), num_releases=releases, batch_size=releases)
    assert res.identified == 0
    first = torch.cat([(torch.cat(drawn[s]) ^ truth[s]).long().argmax(dim=1) for s in drawn])  # G = first position
    # P(G = j | U < c) = (min(r^j, c) - min(r^(j+1), c)) / c, r = q exactly, c = TAIL 2^-53
    c = TAIL * 2.0 ** -53
    j0 = int(math.floor(math.log(c) / math.log(Q)))
    assert Q ** j0 >= c > Q ** (j0 + 1)
    js = torch.arange(j0, j0 + 150)
    law = (torch.clamp(Q ** js.double(), max=c) - torch.clamp(Q ** (js + 1).double(), max=c)) / c
    assert int(first.min()) >= j0 and int(first.max()) < j0 + 150 and float(law.sum()) > 1 - 1e-6
    counts = torch.bincount(first - j0, minlength=150)
    stat, crit = _chi2(counts, law / law.sum())
    assert stat < crit, (stat, crit)
    # the gaps the float sampler cannot draw (first gap = G + 1): drawn here at their exact rate
    support = float_gap_support(P)
    hole = torch.ones(j0 + 151, dtype=torch.bool)
    hole[:support.numel()] = ~support
    in_hole = hole[first + 1]
    mass = float(law[hole[js + 1]].sum())
    beyond = float(law[js + 1 >= support.numel()].sum())  # gaps above M = 349
    assert 0.25 < mass - beyond < 0.26 and 0.06 < beyond < 0.061
    k = int(in_hole.sum())
    assert abs(k - 2 * releases * mass) < 5 * math.sqrt(2 * releases * mass * (1 - mass)), (k, mass)
    # which the float model calls impossible on the releases' own inputs: it does not model this sampler
    ys = {s: torch.cat(drawn[s]) for s in drawn}
    own = torch.cat([float_flip_possible(ys[s], truth[s], support).all(dim=1) for s in ys])
    assert torch.equal(~own, in_hole)
