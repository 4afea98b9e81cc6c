r"""Sensitivities and the convergent GDP bound of CARIBOU's perturbed contractive graph layer.

One hop of the contractive graph layer (CGL) of CARIBOU (Zheng, Li, Li and Wang, "Convergent Privacy
Framework with Contractive GNN Layers for Multi-hop Aggregations", 2025, arXiv:2506.22727; Eq. (4),
perturbed and projected as in Algorithm 1) is

.. math::
    X^{(k+1)} = \Pi_{\mathcal K}\Big(C_L\big(\alpha_1 \hat A X^{(k)} + \alpha_2\,\mathrm{Mean}(X^{(k)})\big)
                + \beta X^{(0)} + Z^{(k)}\Big),
    \qquad Z^{(k)} \sim N(0, (\sigma\Delta)^2 I),

with :math:`\hat A = D^{-1/2}(A + I)D^{-1/2}`, the global mean, rows of :math:`X^{(0)}` in the
unit ball and :math:`\Pi_{\mathcal K}` the row-wise projection onto the unit ball. ``sigma`` is the
noise *multiplier* (std = ``noise_multiplier * Delta``) and :math:`\Delta` the Frobenius
sensitivity of one CGL map, measured **before** the projection (the noise is added there).

If only :math:`X^{(K)}` is released and :math:`C_L < 1`, the K hops are
:math:`\sqrt{\rho_K(C_L)}/\sigma`-GDP (CARIBOU Theorems 5-6, Sec. 5.2, after Bok et al. 2024, Thm C.5 and
Thm 4.2; the paper states the RDP form, its proof in App. C.2 shows this GDP bound) with

.. math::
    \rho_K(c) = \frac{(1 - c^K)(1 + c)}{(1 + c^K)(1 - c)} \le \min\Big(K, \frac{1 + c}{1 - c}\Big),

against :math:`\sqrt K/\sigma` for linear (K-fold GDP) composition. :math:`\Delta` cancels.

Everything here is pure float math (no torch). The degree and node-count arguments are
**public declared bounds** over every graph the user considers; they must never be read off
the private graph: a bound read off the observed graph is data-dependent and can fail (see the
counterexample in :func:`edge_sensitivity`).
"""
from __future__ import annotations

import math
from numbers import Integral
from typing import Literal

from .gdp import gdp_epsilon, gdp_mu
from .validation import (
    check_delta,
    check_epsilon,
    check_non_negative,
    check_positive,
    check_positive_int,
    check_probability,
)

__all__ = [
    "contraction_factor",
    "edge_sensitivity",
    "node_sensitivity",
    "contractive_mu",
    "contractive_epsilon",
    "contractive_noise_multiplier",
]

Accounting = Literal["convergent", "linear"]
Conversion = Literal["gdp", "rdp"]


# --------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------
def _check_contraction(contraction: object) -> float:
    c = check_non_negative(contraction, "contraction")
    if not c < 1.0:
        raise ValueError(
            "`contraction` (C_L) must lie in [0, 1): the convergent bound needs a strict contraction; "
            f"got {contraction!r}"
        )
    return c


def _check_non_negative_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"`{name}` must be an integer; got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"`{name}` must be an integer >= 0; got {value!r}")
    return int(value)


def _check_accounting(accounting: object) -> str:
    if accounting not in ("convergent", "linear"):
        raise ValueError(f"`accounting` must be 'convergent' or 'linear'; got {accounting!r}")
    return str(accounting)


def _check_conversion(conversion: object) -> str:
    if conversion not in ("gdp", "rdp"):
        raise ValueError(f"`conversion` must be 'gdp' or 'rdp'; got {conversion!r}")
    return str(conversion)


# --------------------------------------------------------------------------------------------
# degree functions of the proofs
# --------------------------------------------------------------------------------------------
def _g(d: float) -> float:
    """Shrink of one normalisation factor when a degree grows by one: 1/sqrt(d+1) - 1/sqrt(d+2)."""
    return 1.0 / math.sqrt(d + 1.0) - 1.0 / math.sqrt(d + 2.0)


def _f(d: float) -> float:
    """f(d) = d/sqrt(d+1) - d/sqrt(d+2) = d g(d) (Eq. (7)); increasing on [0, 3], decreasing on [3, inf)."""
    return d * _g(d)


def _h(d: float) -> float:
    """h(d) = sqrt(d) g(d); h(0) = 0, decreasing on [1, inf)."""
    return math.sqrt(d) * _g(d)


def _c_of_min_degree(min_degree: int) -> float:
    r"""Eq. (7): :math:`C(D) = \max_{d \ge D} f(d)`, i.e. f(3) for D <= 3 and f(D) for D > 3.

    f increases up to 3 and decreases after it: d log f/dx times x is
    1 - x/(2(x+1)) - x/(2(x+2)) - x/(2 sqrt((x+1)(x+2))), decreasing in x and negative at 3.
    ``D = 0`` (outside Eq. 7) gets f(3) as well, the maximum over all degrees.
    """
    return _f(max(min_degree, 3))


# --------------------------------------------------------------------------------------------
# rho_K
# --------------------------------------------------------------------------------------------
def contraction_factor(num_hops: int, contraction: float) -> float:
    r""":math:`\rho_K(C_L) = (1 - c^K)(1 + c) / ((1 + c^K)(1 - c))`, the convergent composition factor.

    The K-hop release is :math:`\sqrt{\rho_K}\,\Delta/\text{std}`-GDP. :math:`\rho_1 = 1`,
    :math:`\rho_K` increases with K to :math:`(1 + c)/(1 - c)`, never exceeds K (clipped at K
    against rounding), and :math:`c = 0` gives 1 for every K (the formula's value,
    :math:`0^K = 0`, and its limit as :math:`c \to 0`). ``contraction`` must lie in [0, 1);
    ``c = 1`` (no contraction) is not allowed here: use linear accounting.
    """
    K = check_positive_int(num_hops, "num_hops")
    c = _check_contraction(contraction)
    if c == 0.0 or K == 1:
        return 1.0
    log_cK = K * math.log(c)
    # 1 - c^K via expm1 (no cancellation for c near 1); 1 - c is exact for c >= 1/2 (Sterbenz)
    rho = (-math.expm1(log_cK)) * (1.0 + c) / ((1.0 + math.exp(log_cK)) * (1.0 - c))
    return min(float(K), rho)


# --------------------------------------------------------------------------------------------
# sensitivities
# --------------------------------------------------------------------------------------------
def edge_sensitivity(*, contraction: float, alpha1: float, min_degree: int) -> float:
    r"""Edge-level Frobenius sensitivity of one CGL map, Eq. (6)-(7) of CARIBOU (Thm 8).

    .. math::
        \Delta_e = \sqrt2\,C_L\,\alpha_1\Big(\frac{1}{(D+1)(D+2)} + \frac{C(D)}{\sqrt{D+1}}
                   + \frac{1}{\sqrt{D+2}\sqrt{D+1}}\Big),\qquad
        C(D) = \max_{d \ge D}\Big(\frac{d}{\sqrt{d+1}} - \frac{d}{\sqrt{d+2}}\Big),

    with :math:`D` = ``min_degree``. The mean and :math:`\beta X^{(0)}` terms do not depend on
    the edges and cancel.

    ``min_degree`` is a **public declared bound**: a lower bound on the minimum degree of
    every graph the user considers, taken on the graph **without** the toggled edge (both
    end points of an added edge have degree ``>= min_degree`` before it is added). Declaring
    the minimum degree of an observed graph that contains the edge is wrong: on a 30-cycle,
    removing one edge achieves :math:`\|(\hat A - \hat A')X\|_F = 0.820` against Eq. (6)'s
    0.655 at :math:`D = 2`; the bound of the graph without the edge, :math:`D = 1`, gives
    0.971 and holds (all three per unit :math:`\alpha_1 C_L`). Never compute it from the
    private graph.

    ``min_degree = 0`` (isolated nodes possible) is outside Eq. (7) and uses the fallback
    :math:`\sqrt2\,\alpha_1 C_L`, attained by joining two isolated nodes with
    :math:`x_u = -x_v`.

    Both Eq. (6) and the fallback are certified by a row-wise bound that also counts the
    rows of the neighbours of u and v, which the paper's proof of Theorem 8 (App. C.3) omits
    (with symmetric normalisation :math:`\hat A_{wu}` depends on :math:`d_u`, so those rows
    change too): see :func:`_edge_sensitivity_certificate`; the tests check certificate <= Eq. (6).
    """
    c = _check_contraction(contraction)
    a1 = check_probability(alpha1, "alpha1")
    D = _check_non_negative_int(min_degree, "min_degree")
    if D == 0:
        return math.sqrt(2.0) * a1 * c
    return math.sqrt(2.0) * c * a1 * _edge_row_bound(D)


def _edge_row_bound(D: int) -> float:
    """The bracket of Eq. (6) (one row of u or v, per alpha1 C_L)."""
    return (1.0 / ((D + 1.0) * (D + 2.0)) + _c_of_min_degree(D) / math.sqrt(D + 1.0)
            + 1.0 / (math.sqrt(D + 2.0) * math.sqrt(D + 1.0)))


def _edge_sensitivity_certificate(min_degree: int) -> float:
    r"""A proven upper bound of :math:`\sup_X \|(\hat A' - \hat A)X\|_F` (rows of X in the unit
    ball) when an edge (u, v) is added to a graph whose degrees are all ``>= min_degree``.

    Write :math:`p_w = (d_w + 1)^{-1/2}` (before) and :math:`q_w` (after: :math:`d_w + 1` for
    u and v), :math:`P, Q` their diagonals, :math:`g(d) = p - q`. Then
    :math:`\hat A - \hat A' = (P^2 - Q^2) + (P - Q)AP + QA(P - Q) - Q E_{uv} Q`. The first,
    second and last terms live in rows u and v:

    .. math::
        \|\Delta_u\| \le a(d_u, d_v) = \frac{1}{(d_u+1)(d_u+2)} + \frac{f(d_u)}{\sqrt{D'+1}}
                      + \frac{1}{\sqrt{(d_u+2)(d_v+2)}},

    with :math:`D' = \max(D, 1)` (a neighbour has degree >= 1). The third lives in the rows of
    the neighbours z of u and v (disjoint from {u, v}): by Cauchy-Schwarz
    :math:`\sum_z \|\Delta_z\|^2 \le \kappa\,(d_u g(d_u)^2 + d_v g(d_v)^2)` with
    :math:`\kappa = \max_{d \ge D'} \min(2, d)/(d + 1)`. Hence

    .. math::
        \sup \|\cdot\|_F^2 \le \max_{d_u, d_v \ge D}\; a(d_u, d_v)^2 + a(d_v, d_u)^2
                           + \kappa\,(h(d_u)^2 + h(d_v)^2).

    For :math:`d_u \ge \max(D, 3)` every term is non-increasing in :math:`d_u` (f decreases
    after 3, h after 1), so the maximum is attained on :math:`\{D, \dots, \max(D, 3)\}^2`.
    At ``D = 0`` the maximum is 2 (two isolated nodes), which proves the sqrt(2) fallback.
    """
    D = _check_non_negative_int(min_degree, "min_degree")
    Dp = max(D, 1)
    kappa = 2.0 / 3.0 if Dp <= 2 else 2.0 / (Dp + 1.0)
    p = 1.0 / math.sqrt(Dp + 1.0)

    def a(du: int, dv: int) -> float:
        return 1.0 / ((du + 1.0) * (du + 2.0)) + _f(du) * p + 1.0 / math.sqrt((du + 2.0) * (dv + 2.0))

    grid = range(D, max(D, 3) + 1)
    best = max(a(du, dv) ** 2 + a(dv, du) ** 2 + kappa * (_h(du) ** 2 + _h(dv) ** 2) for du in grid for dv in grid)
    return math.sqrt(best)


def _paper_node_sensitivity(*, contraction: float, alpha1: float, alpha2: float, min_degree: int,
                            max_degree: int, num_nodes: int) -> float:
    r"""Eq. (8) of CARIBOU **verbatim** (Thm 9); kept for reference only, it is not a valid bound.

    .. math::
        1 + \alpha_2 C_L\frac{2|V|}{|V|+1} + \alpha_1 C_L\Big(\frac{\sqrt{D_{\max}}}{(D_{\min}+1)(D_{\min}+2)}
        + \frac{C(D_{\min})\sqrt{D_{\max}}}{\sqrt{D_{\min}+1}} + \frac{1}{\sqrt{D_{\min}+2}}\Big)

    Reference value, computed from Eq. (8) at (``contraction``, ``alpha1``, ``alpha2``,
    ``min_degree``, ``max_degree``, ``num_nodes``) = (0.9, 0.8, 0.2, 1, 100, 2708): 3.7818.
    The leading "1" assumes the new node's row has norm <= 1; before the projection it does
    not (the row sums of :math:`\hat A'` exceed 1 when the new node has many low-degree
    neighbours, and :math:`\beta X^{(0)}_v` adds :math:`\beta`), and the rows of the
    neighbours' neighbours, whose normalisation changes too, are missing. See
    :func:`node_sensitivity`.
    """
    c = _check_contraction(contraction)
    Dmin = _check_non_negative_int(min_degree, "min_degree")
    Dmax = _check_non_negative_int(max_degree, "max_degree")
    n = check_positive_int(num_nodes, "num_nodes")
    s = math.sqrt(Dmax)
    return (1.0 + alpha2 * c * 2.0 * n / (n + 1.0)
            + alpha1 * c * (s / ((Dmin + 1.0) * (Dmin + 2.0)) + _c_of_min_degree(Dmin) * s / math.sqrt(Dmin + 1.0)
                            + 1.0 / math.sqrt(Dmin + 2.0)))


def node_sensitivity(*, contraction: float, alpha1: float, alpha2: float, beta: float, min_degree: int,
                     max_degree: int, num_nodes: int) -> float:
    r"""Node-level Frobenius sensitivity of one CGL map (Eq. (8) of CARIBOU, corrected).

    Neighbouring graphs: G (n nodes) and G' = G plus a node v with :math:`d_v \le D_{\max}`
    edges to a set S, its features :math:`X^{(0)}_v` and label. The two outputs are compared
    on n + 1 rows, the smaller graph's output padded with a zero row for the absent node (the
    release of G is a post-processing of that padded process, whose row v is pure noise). We
    bound :math:`\sup_{X}\|\mathrm{CGL}_{G'}(X) - \mathrm{CGL}_G(X)\|_F` over all X and
    :math:`X^{(0)}` with rows in the unit ball, **before** the projection (where the noise is
    added), one row block at a time and combine the blocks in Frobenius norm:

    * **The new node's own row** (the leading "1" of Eq. (8), which assumes the row has norm
      :math:`\le 1`; proof of Theorem 9, App. C.3):
      :math:`\|C_L(\alpha_1(\hat A'X)_v + \alpha_2\,\mathrm{Mean}'(X)) + \beta X^{(0)}_v\|
      \le C_L(\alpha_1 R + \alpha_2) + \beta`, where :math:`R` bounds the row sum of
      :math:`\hat A'` at v, :math:`R(d_v) = 1/(d_v+1) + d_v/\sqrt{(d_v+1)(D_{\min}+2)}`.
      R is quasi-convex in :math:`d_v` (its derivative changes sign once), so
      :math:`R \le \max(1, R(D_{\max}))`. R can be far above 1: a new node joined to 100
      nodes of degree 1 has row sum :math:`1/101 + 100/\sqrt{101 \cdot 3} \approx 5.75`, which
      breaks Eq. (8) even with :math:`\beta = 0`. The own-row term is floored at 1, the value
      of Eq. (8), so that the correction never undercuts the paper there (not needed by the
      derivation, which gives :math:`C_L < 1` when :math:`\beta = 0` and R = 1; a deliberate
      conservative choice).
    * **Rows of the existing nodes**, with :math:`p, q` the normalisation factors before and
      after, :math:`g(d) = 1/\sqrt{d+1} - 1/\sqrt{d+2}`, :math:`f(d) = d g(d)`,
      :math:`h(d) = \sqrt d g(d)` and :math:`D' = \max(D_{\min}, 1)`:
      :math:`\hat A'_{VV} - \hat A = (Q^2 - P^2)_S - (P-Q)AP - QA(P-Q)` plus the new column v.

      - rows :math:`w \in S` (self loop, renormalised neighbours, new neighbour v), each
        :math:`\le a(d_w) = \frac{1}{(d_w+1)(d_w+2)} + \frac{f(d_w)}{\sqrt{D'+1}}
        + \frac{1}{\sqrt{(d_w+2)(D_{\max}+1)}}`, so :math:`\le \sqrt{D_{\max}}\max_{d \ge D_{\min}} a(d)`
        (the paper's three terms, with the max taken jointly);
      - :math:`QA(P-Q)X`: the rows of every neighbour z of S (S itself included), whose
        entries change because :math:`d_w` grows; omitted by the paper. By Cauchy-Schwarz
        its squared norm is :math:`\le \kappa \sum_{w \in S} d_w g(d_w)^2` with
        :math:`\kappa = \max_z |N(z)\cap S|/(d_z+1) \le D_{\max}/(\max(D', D_{\max}) + 1)`, so
        :math:`\le D_{\max}\,h(D')/\sqrt{\max(D', D_{\max}) + 1}`;
      - the mean: every existing row changes by :math:`(x_v - \bar x)/(n+1)`, so
        :math:`\|\cdot\|_F \le 2\sqrt n/(n+1)` (Eq. (8)'s :math:`2n/(n+1)` sums the rows
        instead of their squares; it is valid but loose).

      Each piece is non-decreasing in :math:`d_v`, so :math:`d_v = D_{\max}` is the worst case.

    The result is

    .. math::
        \Delta_n = \sqrt{\max\big(1, C_L(\alpha_1 R + \alpha_2) + \beta\big)^2
            + C_L^2\Big(\alpha_1\big(\sqrt{D_{\max}}\max_{d \ge D_{\min}} a(d)
            + \tfrac{D_{\max} h(D')}{\sqrt{\max(D', D_{\max})+1}}\big)
            + \alpha_2\tfrac{2\sqrt{n_0}}{n_0+1}\Big)^2}.

    ``min_degree = 0`` needs no separate fallback: the derivation holds for it (it evaluates
    :math:`1/((d+1)(d+2))` at :math:`\le 1/2`, :math:`1/\sqrt{D_{\min}+2} = 1/\sqrt2`,
    :math:`C` at its maximum f(3), and a neighbour's degree at >= 1).

    Args:
        contraction: :math:`C_L \in [0, 1)`.
        alpha1, alpha2: the weights of :math:`\hat A X` and of the mean, each in [0, 1] with
            :math:`\alpha_1 + \alpha_2 \le 1` (the layer is then :math:`C_L`-contractive).
        beta: the weight of the initial residual :math:`X^{(0)}`, ``>= 0``.
        min_degree: public lower bound on every degree of the graph **without** the node
            (every graph considered). Never computed from the private graph.
        max_degree: public upper bound on the degree of the added or removed node; enforce it
            (degree bounding, e.g. GAP's ``BoundOutDegree``) before the release.
        num_nodes: public number of nodes. The neighbouring graph may have one node fewer and
            the mean term decreases with the node count, so :math:`n_0 = \max(n - 1, 1)` is
            used; if the true count can be smaller than ``num_nodes - 1``, pass a lower bound.

    Returns:
        :math:`\Delta_n`. It can be smaller than Eq. (8) (mainly through the mean term) and is
        larger where Eq. (8) fails (small ``min_degree`` against ``max_degree``). At the
        reference arguments of :func:`_paper_node_sensitivity` (0.9, 0.8, 0.2, beta 0, 1, 100,
        2708) it is 5.3853 against Eq. (8)'s 3.7818; the tests hold a graph with these bounds
        (1354 disjoint edges, the new node joined to both ends of 50 of them) that reaches
        4.758 at constant X, and 5.155 when maximised over X on a 200-node copy.
    """
    c = _check_contraction(contraction)
    a1 = check_probability(alpha1, "alpha1")
    a2 = check_probability(alpha2, "alpha2")
    if a1 + a2 > 1.0 + 1e-12:
        raise ValueError(
            f"`alpha1 + alpha2` must be <= 1 (a convex combination keeps the layer C_L-contractive); "
            f"got alpha1={alpha1!r}, alpha2={alpha2!r}"
        )
    b = check_non_negative(beta, "beta")
    Dmin = _check_non_negative_int(min_degree, "min_degree")
    Dmax = _check_non_negative_int(max_degree, "max_degree")
    if Dmin > Dmax:
        raise ValueError(f"`min_degree` must not exceed `max_degree`; got {min_degree!r} > {max_degree!r}")
    n = check_positive_int(num_nodes, "num_nodes")

    # the new node's own row
    R = max(1.0, 1.0 / (Dmax + 1.0) + Dmax / math.sqrt((Dmax + 1.0) * (Dmin + 2.0)))
    own = max(1.0, c * (a1 * R + a2) + b)

    # the rows of the existing nodes
    n0 = max(n - 1, 1)
    mean_rows = 2.0 * math.sqrt(n0) / (n0 + 1.0)
    rows = c * (a1 * _existing_rows_bound(Dmin, Dmax) + a2 * mean_rows)
    return math.hypot(own, rows)


# --------------------------------------------------------------------------------------------
# GDP accounting and calibration
# --------------------------------------------------------------------------------------------
def _existing_rows_bound(Dmin: int, Dmax: int) -> float:
    r"""Per unit :math:`C_L\alpha_1`, the Frobenius change of the rows of the existing nodes when a
    node with at most ``Dmax`` edges joins nodes of degree at least ``Dmin`` (before it joins): the
    neighbours' renormalised rows, their new neighbour, and the second-order rows of their own
    neighbours (the terms of Eq. (8), with the neighbours' neighbours the paper omits)."""
    Dp = max(Dmin, 1)
    p = 1.0 / math.sqrt(Dp + 1.0)

    def a(d: int) -> float:
        return 1.0 / ((d + 1.0) * (d + 2.0)) + _f(d) * p + 1.0 / math.sqrt((d + 2.0) * (Dmax + 1.0))

    # every term of a(d) is non-increasing for d >= 3 (f decreases after 3)
    neighbour_rows = math.sqrt(Dmax) * max(a(d) for d in range(Dmin, max(Dmin, 3) + 1))
    second_order = Dmax * _h(Dp) / math.sqrt(max(Dp, Dmax) + 1.0)
    return neighbour_rows + second_order


def _rho(num_hops: int, contraction: float, accounting: str) -> float:
    K = check_positive_int(num_hops, "num_hops")
    c = _check_contraction(contraction)
    if _check_accounting(accounting) == "linear":
        return float(K)
    return contraction_factor(K, c)


def contractive_mu(*, noise_multiplier: float, num_hops: int, contraction: float,
                   accounting: Accounting = "convergent") -> float:
    r"""GDP :math:`\mu` of K perturbed CGL hops whose noise std is ``noise_multiplier * Delta``.

    ``"convergent"``: :math:`\sqrt{\rho_K(C_L)}/\sigma` (only :math:`X^{(K)}` is released);
    ``"linear"``: :math:`\sqrt K/\sigma` (K-fold GDP composition, e.g. when intermediate hops
    are exposed).
    """
    sigma = check_positive(noise_multiplier, "noise_multiplier")
    return math.sqrt(_rho(num_hops, contraction, accounting)) / sigma


def _rdp_epsilon(mu: float, log_inv_delta: float) -> float:
    return mu * mu / 2.0 + mu * math.sqrt(2.0 * log_inv_delta)


def contractive_epsilon(*, noise_multiplier: float, num_hops: int, contraction: float, delta: float,
                        accounting: Accounting = "convergent", conversion: Conversion = "gdp") -> float:
    r"""Epsilon at ``delta`` of K perturbed CGL hops.

    ``conversion="gdp"``: the exact :math:`\mu`-GDP conversion (:func:`gdp_epsilon`).
    ``conversion="rdp"``: the paper's route, :math:`\mu`-GDP as the RDP curve
    :math:`\alpha\mu^2/2` converted with Mironov's bound at the optimal order
    :math:`\alpha^* = 1 + \sqrt{2\log(1/\delta)}/\mu`:
    :math:`\epsilon = \mu^2/2 + \mu\sqrt{2\log(1/\delta)}` (looser).
    """
    d = check_delta(delta)
    conv = _check_conversion(conversion)
    mu = contractive_mu(noise_multiplier=noise_multiplier, num_hops=num_hops, contraction=contraction,
                        accounting=accounting)
    if conv == "rdp":
        return _rdp_epsilon(mu, -math.log(d))
    return gdp_epsilon(mu=mu, delta=d)


def contractive_noise_multiplier(*, epsilon: float, delta: float, num_hops: int, contraction: float,
                                 accounting: Accounting = "convergent", conversion: Conversion = "gdp") -> float:
    r"""Smallest noise multiplier whose K-hop release is ``(epsilon, delta)``-DP.

    The inverse of :func:`contractive_epsilon`: the largest admissible :math:`\mu` (exact:
    :func:`gdp_mu`; RDP: :math:`\sqrt{2L + 2\epsilon} - \sqrt{2L}`, :math:`L = \log(1/\delta)`)
    gives :math:`\sigma = \sqrt{\rho}/\mu`, nudged upwards until
    ``contractive_epsilon(sigma) <= epsilon`` holds for the returned float itself.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    conv = _check_conversion(conversion)
    rho = _rho(num_hops, contraction, accounting)
    if conv == "rdp":
        two_L = 2.0 * -math.log(d)
        mu = 2.0 * eps / (math.sqrt(two_L + 2.0 * eps) + math.sqrt(two_L))  # = sqrt(2L+2eps) - sqrt(2L)
    else:
        mu = gdp_mu(epsilon=eps, delta=d)
    sigma = math.sqrt(rho) / mu
    kw = dict(num_hops=num_hops, contraction=contraction, delta=d, accounting=accounting, conversion=conv)
    step = sigma * 1e-15
    while contractive_epsilon(noise_multiplier=sigma, **kw) > eps:
        sigma += step
        step *= 2.0
    return sigma
