r"""Declared public bounds of CARIBOU's contractive graph layer: checked, or enforced.

The sensitivity of one hop of the contractive graph layer (Zheng et al. 2025,
`arXiv:2506.22727 <https://arxiv.org/abs/2506.22727>`_, Eq. 4) depends on public bounds the
user declares: the minimum degree ``min_degree`` (edge level, Theorem 8, Eq. 6-7) and, at
node level, the maximum degree ``max_degree`` and the number of nodes ``num_nodes``
(Theorem 9, Eq. 8). Degrees are counted **without self-loops**: :math:`d_u` is the number of
neighbours of u in the undirected simple graph, and the normalisation
:math:`\hat A = (D + I)^{-1/2}(A + I)(D + I)^{-1/2}` divides by :math:`d_u + 1`.

This module holds what makes such a declaration safe:

* :func:`check_declared_bounds`: the rule every input must satisfy, checked before anything
  is charged or drawn. A false declaration raises a ``ValueError`` instead of silently
  releasing with too little noise.
* :func:`floored_normalized_adjacency_csr`: the degree floor, normalisation by
  :math:`\max(d_u, D)` instead of :math:`d_u`. It makes a declared minimum degree D hold for
  every graph by construction, as clipping makes a norm bound hold.
* :func:`universe_node_sensitivity`: the node-level sensitivity of one hop when the release
  has one row per node of a fixed public universe (absent nodes are zero rows without edges).

**The check is a data-dependent error.** Whether a graph satisfies the declared bounds is a
property of the private graph, and raising on a violation reveals it. This is acceptable
because the guarantee is *stated over the declared domain*: the set of graphs satisfying the
bounds is public (the user declares it), the guarantee holds between neighbouring graphs of
that set, and a graph outside it is not covered by any claim; the check turns a false
declaration, which would otherwise silently void the guarantee, into a loud failure. It
is not a guarantee about the graphs it rejects, and the error messages name the rule and the
fix but no value of the private graph. Where even that one bit matters, use the degree
floor, whose domain is every graph (no check, no error).
"""
from __future__ import annotations

import math
import warnings
from numbers import Integral
from typing import Optional

import torch
from torch import Tensor

from ..accounting.contractive import _existing_rows_bound
from ..accounting.validation import check_non_negative, check_positive_int, check_probability

__all__ = [
    "max_valid_min_degree",
    "present_nodes",
    "check_declared_bounds",
    "floored_normalized_adjacency_csr",
    "universe_node_sensitivity",
]


def max_valid_min_degree(degree: Tensor, present: Optional[Tensor] = None) -> int:
    r"""The largest ``min_degree`` :func:`check_declared_bounds` accepts for a graph with
    these degrees (counted without self-loops): :math:`\max(\min_u d_u - 1, 0)`, over the
    ``present`` nodes if given. Computing it from a private graph and declaring the result
    is exactly the leak the declaration exists to avoid; this is for public graphs and tests.
    """
    deg = degree if present is None else degree[present]
    if deg.numel() == 0:
        return 0
    return max(int(deg.min()) - 1, 0)


def present_nodes(degree: Tensor, *features: Optional[Tensor]) -> Tensor:
    r"""Node-level presence in a fixed node universe: a node is **absent** when its rows of
    every given feature matrix are zero and it has no edge, and present otherwise.

    A present node with no edge and zero features is indistinguishable from an absent one
    and is treated as such: the release is a function of that encoding, and the node-level
    neighbouring relation (one node added or removed) is defined on it.
    """
    present = degree > 0
    for x in features:
        if x is not None:
            present = present | (x != 0).flatten(1).any(dim=1)
    return present


def check_declared_bounds(degree: Tensor, *, level: str, min_degree: int, degree_floor: bool = False,
                          max_degree: Optional[int] = None, num_nodes: Optional[int] = None,
                          present: Optional[Tensor] = None) -> None:
    r"""Raise a ``ValueError`` unless the input lies in the domain of the declared bounds.

    ``degree`` holds every node's degree in the undirected simple graph, **without**
    self-loops (the layer's normalisation divides by ``degree + 1``).

    **Edge level** (neighbours: one undirected edge added or removed). Eq. 6 with
    :math:`D` = ``min_degree`` bounds the change of a hop when the edge is toggled in a graph
    whose degrees, *without that edge*, are all :math:`\ge D`. The input may be the graph
    with the edge, so the bound must hold for it with any one edge removed; removing an edge
    at a node of minimum degree lowers that degree by one. Hence the rule

    .. math::
        D \le \min_u d_u - 1, \qquad D = 0 \text{ when a node is isolated}.

    Every graph satisfying it has all its edge-neighbours (with any edge removed, or any edge
    added) within the sensitivity bound. ``degree_floor=True`` needs no check: the
    normalisation by :math:`\max(d_u, D)` makes the bound hold for every graph
    (:func:`floored_normalized_adjacency_csr`).

    **Node level** (neighbours: one node added or removed with its edges and features, in a
    fixed public universe of ``num_nodes`` nodes; absent nodes are zero rows without edges,
    see :func:`present_nodes` and :func:`universe_node_sensitivity`):

    * the input has exactly ``num_nodes`` nodes (so the output's shape is public and
      presence is not revealed by the number of rows);
    * every degree is :math:`\le` ``max_degree`` (a removed node has at most that many edges;
      an added one is limited to it by the neighbouring relation);
    * the minimum-degree rule above over the **present** nodes: removing a node lowers each
      of its neighbours' degrees by one, and a node added next to an isolated present node
      meets a degree 0. Absent nodes cannot be joined (that would add two nodes).

    Raises:
        ValueError: naming the violated bound, the rule and the fix; never a value of the
            private graph. Nothing is charged or drawn before this check.
    """
    D = _check_count(min_degree, "min_degree")
    if level == "node":
        if degree_floor:
            raise ValueError("`degree_floor` is proven for edge-level privacy only; at node level declare "
                             "`min_degree` (0 when nodes of degree one or isolated nodes are possible)")
        if max_degree is None or num_nodes is None:
            raise ValueError("node level needs the public bounds `max_degree` and `num_nodes`")
        if degree.numel() != int(num_nodes):
            raise ValueError(
                f"at node level the release has one row per node of a fixed public universe of `num_nodes`="
                f"{int(num_nodes)} nodes, but the input has {degree.numel()} nodes: pad it to `num_nodes` rows (an "
                "absent node is a zero feature row with no edges), or declare the universe's size as `num_nodes`")
        if degree.numel() and int(degree.max()) > int(max_degree):
            raise ValueError(
                f"the input violates the declared `max_degree`={int(max_degree)}: the node-level sensitivity assumes "
                "that every node has at most `max_degree` edges. Bound the degrees before the release (drop edges "
                "of nodes above the bound) or declare a larger `max_degree`")
    elif level != "edge":
        raise ValueError(f"`level` must be 'edge' or 'node'; got {level!r}")
    if D == 0 or (degree_floor and level == "edge"):
        return
    deg = degree if present is None or level == "edge" else degree[present]
    if deg.numel() and int(deg.min()) < D + 1:
        unit = ("any one edge removed (edge-level neighbours)" if level == "edge" else
                "any one node removed, which lowers its neighbours' degrees by one (node-level neighbours)")
        fix = ("declare `min_degree=0`, or pass `degree_floor=True`, which normalises by max(degree, min_degree) "
               "and makes the bound hold for every graph" if level == "edge" else "declare `min_degree=0`")
        raise ValueError(
            f"the input violates the declared `min_degree`={D}: the bound must hold for the graph with {unit}, so "
            "it may not exceed the smallest degree (counted without self-loops) minus one, and must be 0 when a "
            f"{'node' if level == 'edge' else 'present node'} is isolated. Fix: {fix}")


def floored_normalized_adjacency_csr(crow: Tensor, col: Tensor, *, floor: int, weight: float = 1.0,
                                     dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    r"""The symmetric normalisation with a **degree floor** D,
    :math:`w\,\hat A_D = w\,S_D(A + I)S_D` with :math:`S_D = \mathrm{diag}(\max(d_u, D) + 1)^{-1/2}`,
    split like :func:`~pyg_private.utils.adjacency.normalized_adjacency_csr` into the CSR
    matrix :math:`w S_D A S_D` and the diagonal :math:`w S_D^2` (a column ``[N, 1]``). ``floor=0``
    is the plain GCN normalisation of CARIBOU's Eq. 4, bit for bit, and so is any floor on a
    graph whose degrees are all :math:`\ge D`.

    **Why the floor makes Eq. 6 hold for every graph** (proof sketch; ``D >= 1``; the layer
    multiplies by :math:`C_L\alpha_1`, the mean and :math:`\beta X^{(0)}` terms cancel). The
    only place Theorem 8 of Zheng et al. uses the minimum degree is in bounding the change of
    :math:`\hat A X` (rows of X in the unit ball) when an edge (u, v) is added to a graph G
    whose degrees are :math:`\ge D`: with :math:`p_w, q_w` the normalisation factors before
    and after, :math:`P, Q` their diagonals and :math:`E_{uv}` the new edge,

    .. math::
        \hat A - \hat A' = (P^2 - Q^2) + (P - Q)AP + QA(P - Q) - QE_{uv}Q.

    With the floor the factors are :math:`p_w = (e_w + 1)^{-1/2}`, :math:`e_w = \max(d_w, D)`,
    for any G. Removing the edge again lowers :math:`d_u` and :math:`d_v` by one, which is the
    same pair read backwards, so it suffices to add edges to arbitrary graphs. For an end
    point u:

    * if :math:`d_u \ge D` (in G, without the edge), :math:`e_u = d_u` before and
      :math:`d_u + 1` after: exactly the unfloored case with a degree :math:`\ge D`;
    * if :math:`d_u < D`, then :math:`d_u + 1 \le D` and :math:`e_u = D` **on both sides**:
      :math:`p_u = q_u`, so u contributes nothing to the first three terms, and its row only
      receives the new entry :math:`q_u q_v x_v` of norm
      :math:`\le 1/\sqrt{(D+1)(e'_v+1)} \le 1/\sqrt{(D+1)(D+2)}` (a floored node is
      normalised by D, never less).

    Every other factor is floored too, so a neighbour z of u or v has
    :math:`p_z \le (\max(D,1)+1)^{-1/2}`, the bound the unfloored proof takes from
    :math:`d_z \ge D`. Write :math:`B(D) = \frac{1}{(D+1)(D+2)} + \frac{C(D)}{\sqrt{D+1}} +
    \frac{1}{\sqrt{(D+1)(D+2)}}` for Eq. 6's bracket, :math:`b = 1/\sqrt{(D+1)(D+2)}`,
    :math:`r = B - b`, :math:`g(d) = (d+1)^{-1/2} - (d+2)^{-1/2}`, :math:`f(d) = d\,g(d)`
    (:math:`C(D) = \max_{d \ge D} f(d)`). Three cases, each :math:`\le \sqrt2 B(D)`, which is
    Eq. 6 divided by :math:`C_L\alpha_1`:

    1. :math:`d_u, d_v \ge D`: the unfloored analysis verbatim. Rows u and v are each
       :math:`\le r + 1/(D+2)` and the neighbours' rows, changed by :math:`QA(P-Q)`, add
       :math:`\le \kappa\,(d_u g(d_u)^2 + d_v g(d_v)^2) \le 2\kappa C(D) g(D)` to the square,
       with :math:`\kappa = \max_{d \ge D}\min(2, d)/(d+1)` (2/3 for D <= 2, else 2/(D+1));
       since :math:`b - 1/(D+2) = g(D)/\sqrt{D+2}`, this is :math:`\le 2B^2` once
       :math:`\kappa C(D) \le (2r + b + 1/(D+2))/\sqrt{D+2}`, which holds for every
       :math:`D \ge 1` (use :math:`r \ge C/\sqrt{D+1}`, :math:`C \le f(3) < 0.16` and
       :math:`g(D) \le \tfrac12 (D+1)^{-3/2}`; the tests also check it numerically).
    2. :math:`d_u \ge D > d_v`: row u :math:`\le B` term by term
       (:math:`1/((d_u+1)(d_u+2)) \le 1/((D+1)(D+2))`, :math:`f(d_u) \le C(D)`, new entry
       :math:`\le b`), row v :math:`\le b`, and the neighbours of u add
       :math:`\kappa f(d_u) g(d_u) \le \kappa C g(D) \le \kappa\, b\, C/(2\sqrt{D+1}) \le br/3`
       (because :math:`g(D) \le b/(2\sqrt{D+1})`); so the square is
       :math:`\le B^2 + b^2 + 2br \le 2B^2`.
    3. :math:`d_u, d_v < D`: rows u and v are :math:`1/(D+1)` each and nothing else changes;
       :math:`1/(D+1) = b + g(D)/\sqrt{D+1} \le b + f(D)/\sqrt{D+1} \le B` for :math:`D \ge 1`.

    The floored operator stays a contraction: :math:`0 \le \hat A_D \le \hat A` entry-wise and
    both are symmetric and non-negative, so by Perron-Frobenius
    :math:`\|\hat A_D\|_2 = \rho(\hat A_D) \le \rho(\hat A) = 1`, and Proposition 7 (each hop
    after the first is :math:`C_L`-Lipschitz) holds unchanged. The tests check the bound by
    brute force on every graph with up to 5 nodes and every single-edge toggle; a review
    measured up to 0.922 of it on every 6-node graph and 0.9966 on two joined stars or
    cliques at D = 80: the bound holds and is tight as D grows.
    """
    D = _check_count(floor, "floor")
    counts = crow.diff()
    s = (counts.clamp_min(D) + 1).to(dtype).rsqrt()
    values = s.repeat_interleave(counts).mul_(s[col]).mul_(weight)
    n = crow.numel() - 1
    with warnings.catch_warnings():  # torch's "CSR support is in beta" notice
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        adj = torch.sparse_csr_tensor(crow, col, values, (n, n), check_invariants=False)
    return adj, s.square().mul_(weight).unsqueeze(-1)


def universe_node_sensitivity(*, contraction: float, alpha1: float, alpha2: float, beta: float, min_degree: int,
                              max_degree: int, num_nodes: int) -> float:
    r"""Node-level Frobenius sensitivity of one hop of the contractive graph layer over a
    **fixed public node universe** of ``num_nodes`` nodes.

    The release has one row per node of the universe, present or not. An absent node is a
    zero row of :math:`X^{(0)}` with no edges; a node-level neighbour of a graph G' turns one
    present node v (features :math:`x^{(0)}_v` in the unit ball, :math:`d_v \le D_{\max}`
    edges to a set S of present nodes) into an absent one, or the reverse. Both releases have
    the same number of rows and the same :math:`\mathrm{Mean}` over the universe's N rows.

    With the hop :math:`\phi_G(X) = C_L(\alpha_1\hat A_G X + \alpha_2\mathrm{Mean}(X)) + \beta X^{(0)}_G`
    (Eq. 4 of Zheng et al. 2025, before noise and projection), hops :math:`k \ge 2` compare
    :math:`\phi_{G'}(X) - \phi_G(X)` at the same X (the shifted-interpolation argument of
    Bok et al. 2024, Thm C.5, as used in Theorem 6); the mean cancels exactly:

    * row v: :math:`C_L\alpha_1((\hat A'X)_v - x_v) + \beta x^{(0)}_v` (in G, v is isolated:
      :math:`\hat A_{vv} = 1`), of norm :math:`\le C_L\alpha_1 R_2 + \beta` with
      :math:`R_2 = \frac{D_{\max}}{D_{\max}+1} + s`, :math:`s = \frac{D_{\max}}{\sqrt{(D_{\max}+1)(D_{\min}+2)}}`
      (both terms increase with :math:`d_v`; each neighbour w of v has :math:`d_w + 1 \ge D_{\min} + 1`
      once v has joined);
    * rows of S and of their neighbours: the same terms as Eq. 8's (renormalised self-loop
      and neighbours, the new neighbour v, and the neighbours' rows whose normalisation changes,
      which the paper omits), together
      :math:`\le \Delta_S = C_L\alpha_1\big(\sqrt{D_{\max}}\max_{d \ge D_{\min}} a(d)
      + D_{\max} h(D')/\sqrt{\max(D', D_{\max})+1}\big)` with
      :math:`a(d) = \frac{1}{(d+1)(d+2)} + \frac{f(d)}{\sqrt{D'+1}} + \frac{1}{\sqrt{(d+2)(D_{\max}+1)}}`,
      :math:`f(d) = d\,g(d)`, :math:`h(d) = \sqrt d\,g(d)`, :math:`g(d) = (d+1)^{-1/2} - (d+2)^{-1/2}`,
      :math:`D' = \max(D_{\min}, 1)`.

    The first hop starts from different :math:`X^{(0)}` (row v is zero in G); as a constant map
    its difference is :math:`(\hat A' - \hat A_G P)X^{(0)}_{G'}` (times :math:`C_L\alpha_1`, P
    zeroes row v) plus the mean's shift :math:`x^{(0)}_v/N` in every row: row v is then
    :math:`C_L\alpha_1(\hat A'X^{(0)})_v + \beta x^{(0)}_v`, of norm
    :math:`\le C_L\alpha_1 R_1 + \beta` with :math:`R_1 = \max(1, 1/(D_{\max}+1) + s)` (the row sum
    of :math:`\hat A'` at v, quasi-convex in :math:`d_v`; 1 for an isolated v), the other rows
    as above, and the mean adds :math:`C_L\alpha_2/\sqrt N` in Frobenius norm. Hence

    .. math::
        \Delta_U = \max\Big(\sqrt{(C_L\alpha_1 R_2 + \beta)^2 + \Delta_S^2},\;
                   \sqrt{(C_L\alpha_1 R_1 + \beta)^2 + \Delta_S^2} + \frac{C_L\alpha_2}{\sqrt N}\Big).

    The bound is attained by an isolated node at the first hop (:math:`C_L\alpha_1` when
    :math:`\beta = \alpha_2 = 0`); the tests compare it by brute force with every graph on up to
    5 nodes and every node removed.

    Every hop after the first is :math:`C_L`-Lipschitz (:math:`\alpha_1 + \alpha_2 \le 1`), so
    K hops are :math:`\sqrt{\rho_K(C_L)}\,\Delta_U/\text{std}`-GDP (Theorem 6 / Cor. 10).
    ``min_degree`` bounds the degrees of the present nodes of the graph **without** v, and
    ``max_degree`` the degree of v. Unlike Eq. 8 (a graph that grows by one node), no lower
    bound on the node count is involved: N is the universe's exact, public size.
    """
    c = check_non_negative(contraction, "contraction")
    if not c < 1.0:
        raise ValueError(f"`contraction` (C_L) must lie in [0, 1); got {contraction!r}")
    a1 = check_probability(alpha1, "alpha1")
    a2 = check_probability(alpha2, "alpha2")
    if a1 + a2 > 1.0 + 1e-12:
        raise ValueError(f"`alpha1 + alpha2` must be <= 1 (the hop is then C_L-contractive); "
                         f"got {alpha1!r}, {alpha2!r}")
    b = check_non_negative(beta, "beta")
    Dmin = _check_count(min_degree, "min_degree")
    Dmax = _check_count(max_degree, "max_degree")
    if Dmin > Dmax:
        raise ValueError(f"`min_degree` must not exceed `max_degree`; got {min_degree!r} > {max_degree!r}")
    n = check_positive_int(num_nodes, "num_nodes")

    spread = Dmax / math.sqrt((Dmax + 1.0) * (Dmin + 2.0))  # the neighbours' share of row v, increasing in d_v
    later = c * a1 * (Dmax / (Dmax + 1.0) + spread) + b  # row v at hops k >= 2
    first = c * a1 * max(1.0, 1.0 / (Dmax + 1.0) + spread) + b  # row v at the first hop
    rows = c * a1 * _existing_rows_bound(Dmin, Dmax)  # Delta_S, the same terms as Eq. (8)
    return max(math.hypot(later, rows), math.hypot(first, rows) + c * a2 / math.sqrt(n))


def _check_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"`{name}` must be an integer; got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"`{name}` must be an integer >= 0; got {value!r}")
    return int(value)
