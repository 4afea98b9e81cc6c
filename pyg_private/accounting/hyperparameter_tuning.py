r"""Private hyperparameter tuning: the Rényi DP of the best of a random number of trials.

Papernot and Steinke, *Hyperparameter Tuning with Rényi Differential Privacy*, ICLR 2022
(arXiv:2110.03620v2). A trial :math:`Q` draws a configuration uniformly at random from a
finite grid and runs it; the tuner runs :math:`K` independent trials, :math:`K` drawn from a
public distribution independently of the data, and releases **only the best** output (under a
total order of the outputs; ``None``/:math:`\bot` when :math:`K = 0`). Neither :math:`K` nor the
other trials' outputs are released: the bounds below rest on the observer not knowing them
(released, :math:`K = k` costs up to :math:`k` runs).

**Truncated negative binomial** :math:`\mathcal{D}_{\eta,\gamma}` (their Definition 1, p. 5), with
:math:`\eta \in (-1, \infty)`, :math:`\gamma \in (0, 1)`, on :math:`k = 1, 2, \dots`:

.. math::
    P[K = k] = \frac{(1-\gamma)^k}{\gamma^{-\eta} - 1} \prod_{\ell=0}^{k-1} \frac{\ell + \eta}{\ell + 1}
    \quad (\eta \ne 0), \qquad
    P[K = k] = \frac{(1-\gamma)^k}{k \log(1/\gamma)} \quad (\eta = 0,\ \text{logarithmic}),

with :math:`E[K] = \frac{\eta(1-\gamma)}{\gamma(1-\gamma^\eta)}` (:math:`\frac{1/\gamma - 1}{\log(1/\gamma)}`
for :math:`\eta = 0`); :math:`\eta = 1` is the geometric distribution :math:`P[K = k] = \gamma(1-\gamma)^{k-1}`
of Liu and Talwar (STOC 2019).

**Theorem 2** (p. 5). If :math:`Q` is :math:`(\lambda, \epsilon)`- and :math:`(\hat\lambda, \hat\epsilon)`-RDP
(:math:`\lambda \in (1, \infty)`, :math:`\hat\lambda \in [1, \infty)`) and :math:`K \sim \mathcal{D}_{\eta,\gamma}`,
the best of the :math:`K` trials is :math:`(\lambda, \epsilon')`-RDP with

.. math::
    \epsilon' = \epsilon + (1+\eta)\Big(1 - \frac{1}{\hat\lambda}\Big)\hat\epsilon
              + \frac{(1+\eta)\log(1/\gamma)}{\hat\lambda} + \frac{\log E[K]}{\lambda - 1}.

The free order :math:`\hat\lambda` is optimised over the grid (order ``inf`` included: the limit
:math:`(1+\eta)\hat\epsilon(\infty)`), and at :math:`\lambda = \infty` the bound is the limit
:math:`\epsilon(\infty) + (1+\eta)\min_{\hat\lambda}(\cdots)`, so a pure :math:`\epsilon`-DP trial gives
:math:`(2+\eta)\epsilon` (their Corollary 3, p. 6; :math:`3\epsilon` for the geometric case).

**Theorem 6** (p. 7). If :math:`Q` is :math:`(\lambda, \epsilon)`-RDP and :math:`(\hat\epsilon, \hat\delta)`-DP
with :math:`e^{\hat\epsilon} \le 1 + 1/(\lambda - 1)` and :math:`K \sim \mathrm{Poisson}(\mu)`, the best of the
trials is :math:`(\lambda, \epsilon + \mu\hat\delta + \frac{\log\mu}{\lambda - 1})`-RDP. We take
:math:`\hat\epsilon = \log(1 + 1/(\lambda-1))` (the largest allowed, smallest :math:`\hat\delta`) and
:math:`\hat\delta` from the trial's own curve. **We add the mass** :math:`P[K=0] = e^{-\mu}` of the empty
selection (output :math:`\bot`), which that display leaves out:

.. math::
    \epsilon' = \frac{1}{\lambda - 1}\log\Big(e^{-\mu} + \mu\, e^{(\lambda-1)(\epsilon + \mu\hat\delta)}\Big)
    \;\ge\; \epsilon + \mu\hat\delta + \frac{\log\mu}{\lambda - 1}.

(Their Lemma, :math:`e^{(\lambda-1)D_\lambda} \le e^{(\lambda-1)\epsilon}\max f'(q)^\lambda f'(q')^{1-\lambda}` with the
probability generating function :math:`f`, bounds the outputs :math:`y \ne \bot`; the atom :math:`\bot` adds
:math:`f(0)`. Without it the display fails for :math:`\mu < 1`: a brute-force check found
:math:`D_{1.5} = 0.946` against the display's 0.007 at :math:`\mu = 0.3`. For :math:`\mu \ge 1` the two differ by at most
:math:`\log(1 + e^{-\mu}/\mu)/(\lambda-1)`.) At :math:`\lambda = \infty` the limit is
:math:`\epsilon(\infty) + \mu\hat\delta(0)`.

Every bound is an upper bound at its order, and Rényi divergences grow with the order, so the
curve is finally replaced by its running minimum from the right (the value at :math:`\lambda` is the
smallest bound at any order :math:`\ge \lambda`), as ``dp_accounting`` does
(``rdp_privacy_accountant._compute_rdp_repeat_and_select``, which implements the same two theorems).

Sources: the theorems as quoted in a reading of arXiv:2110.03620v2 (Theorem 2 and Definition 1,
p. 5; Corollary 3, p. 6; Theorem 6, p. 7), Definition B.1 and the proof of Theorem 1 of Wang et
al., *DP-HyPO* (NeurIPS 2023), which restate Definition 1 and Theorem 2 (their :math:`C = c = 1`), and
``dp_accounting`` 0.6; the brute-force tests in ``tests/accounting/test_hyperparameter_tuning.py``
check both bounds against exact Rényi divergences.

Pure functions, no torch. Curves follow the library's convention (:mod:`~pyg_private.accounting.orders`):
tabulated on increasing orders that may end with ``inf``; ``inf`` as a value means no bound.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from numbers import Real
from typing import Any, Mapping, Sequence, Union

import numpy as np

from .composition import Composition, compose
from .events import PrivacyEvent
from .gdp import gdp_delta, gdp_rdp
from .orders import DEFAULT_ORDERS, check_orders
from .units import Unit, as_unit
from .validation import check_non_negative, check_positive, check_probability

__all__ = [
    "TruncatedNegativeBinomial",
    "Poisson",
    "TrialDistribution",
    "truncated_negative_binomial_rdp",
    "poisson_rdp",
    "tuning_rdp",
    "expected_trials",
    "sample_trials",
    "uniform_index",
    "trial_curve",
    "composition_curve",
    "tuning_event",
]

_MAX_LOG_MEAN = math.log(1e12)  # E[K] beyond 10^12 trials is refused (a mean solved from it would be meaningless)


# ------------------------------------------------------------------ distributions
def _check_eta(eta: object) -> float:
    if isinstance(eta, bool) or not isinstance(eta, Real):
        raise TypeError(f"`eta` must be a real number; got {type(eta).__name__} {eta!r}")
    value = float(eta)
    if not (-1.0 < value < math.inf):
        raise ValueError(f"`eta` (shape of the truncated negative binomial) must lie in (-1, inf); got {eta!r}")
    return value


def _eta_factor(eta: float, log_gamma: float) -> float:
    r""":math:`\eta / (\gamma^{-\eta} - 1)`, positive for every :math:`\eta > -1`; :math:`1/\log(1/\gamma)` at :math:`\eta = 0`."""
    x = -eta * log_gamma  # gamma^{-eta} = e^x
    if abs(x) < 1e-8:  # eta / expm1(x) = eta / (x (1 + x/2 + ...)) = 1 / (-log gamma (1 + x/2))
        return 1.0 / (-log_gamma * (1.0 + x / 2.0))
    return eta / math.expm1(x)


@dataclass(frozen=True)
class TruncatedNegativeBinomial:
    r"""The number of trials :math:`K \sim \mathcal{D}_{\eta,\gamma}` (Papernot and Steinke, Definition 1).

    Args:
        eta (float): the shape, in :math:`(-1, \infty)`; ``1`` is geometric, ``0`` logarithmic.
        gamma (float): in :math:`(0, 1)`; smaller means more trials.

    Build it from the mean with :meth:`geometric`, :meth:`logarithmic` or :meth:`with_mean`.
    """

    eta: float
    gamma: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", _check_eta(self.eta))
        object.__setattr__(self, "gamma", check_probability(self.gamma, "gamma", low_open=True, high_open=True))
        if not math.isfinite(self.mean) or self.mean > math.exp(_MAX_LOG_MEAN):
            raise ValueError(f"gamma={self.gamma!r} with eta={self.eta!r} gives E[K]={self.mean:.3g} trials; "
                             "keep the expected number of trials below 1e12")

    name = "truncated_negative_binomial"

    @property
    def mean(self) -> float:
        r""":math:`E[K]` (Definition 1): :math:`\eta(1-\gamma) / (\gamma(1-\gamma^\eta))`, or
        :math:`(1/\gamma - 1)/\log(1/\gamma)` for :math:`\eta = 0`."""
        log_gamma = math.log(self.gamma)
        return (1.0 - self.gamma) / self.gamma * _eta_factor(self.eta, log_gamma) * math.exp(-self.eta * log_gamma)

    def log_pmf(self, k: int) -> float:
        r""":math:`\log P[K = k]` (``-inf`` for :math:`k < 1`), from
        :math:`\prod_{\ell<k}(\ell+\eta)/(\ell+1) = \eta\,\Gamma(k+\eta) / (\Gamma(1+\eta)\,\Gamma(k+1))`."""
        k = int(k)
        if k < 1:
            return -math.inf
        log_gamma = math.log(self.gamma)
        return (k * math.log1p(-self.gamma) + math.log(_eta_factor(self.eta, log_gamma))
                + math.lgamma(k + self.eta) - math.lgamma(1.0 + self.eta) - math.lgamma(k + 1.0))

    def pmf(self, k: int) -> float:
        """:math:`P[K = k]`."""
        return math.exp(self.log_pmf(k))

    def sample(self, rng: Any = None) -> int:
        """One draw of :math:`K` (see :func:`sample_trials`)."""
        u = _uniform(rng)
        k, p = 1, math.exp(self.log_pmf(1))
        cdf = p
        ratio = 1.0 - self.gamma
        while cdf <= u and p > 0.0:  # inverse CDF: the smallest k with P[K <= k] > u
            p *= ratio * (k + self.eta) / (k + 1.0)
            k += 1
            cdf += p
        return k

    def params(self) -> dict[str, float | str]:
        return {"distribution": self.name, "eta": self.eta, "gamma": self.gamma, "expected_trials": self.mean}

    @classmethod
    def with_mean(cls, eta: float, mean: float) -> "TruncatedNegativeBinomial":
        r"""The distribution of shape ``eta`` whose :math:`E[K]` is ``mean`` (``> 1``), :math:`\gamma`
        found by bisection (``E[K]`` falls as :math:`\gamma` grows); the mean is met to ~1e-12 relative."""
        eta = _check_eta(eta)
        target = check_positive(mean, "mean")
        if not target > 1.0:
            raise ValueError(f"`mean` (expected number of trials) must be > 1; got {mean!r}")
        if math.log(target) > _MAX_LOG_MEAN:
            raise ValueError(f"`mean` must be at most 1e12 trials; got {mean!r}")

        def log_mean(t: float) -> float:  # t = log gamma < 0
            return math.log1p(-math.exp(t)) - t + math.log(_eta_factor(eta, t)) - eta * t

        lo, hi = -1.0, -1e-12  # log gamma: lo gives a large mean, hi a mean near 1
        while log_mean(lo) < math.log(target):
            lo *= 2.0
            if lo < -1e4:
                raise ValueError(f"no gamma in (0, 1) gives E[K]={mean!r} with eta={eta!r}")
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi):
                break
            if log_mean(mid) > math.log(target):
                lo = mid
            else:
                hi = mid
        return cls(eta=eta, gamma=math.exp(0.5 * (lo + hi)))

    @classmethod
    def geometric(cls, mean: float) -> "TruncatedNegativeBinomial":
        r"""Geometric :math:`K` (:math:`\eta = 1`, Liu and Talwar): :math:`\gamma = 1/E[K]`."""
        target = check_positive(mean, "mean")
        if not target > 1.0:
            raise ValueError(f"`mean` (expected number of trials) must be > 1; got {mean!r}")
        return cls(eta=1.0, gamma=1.0 / target)

    @classmethod
    def logarithmic(cls, mean: float) -> "TruncatedNegativeBinomial":
        r"""Logarithmic :math:`K` (:math:`\eta = 0`) with :math:`E[K] =` ``mean``."""
        return cls.with_mean(0.0, mean)


@dataclass(frozen=True)
class Poisson:
    r"""The number of trials :math:`K \sim \mathrm{Poisson}(\mu)`, :math:`\mu > 0` (Papernot and Steinke,
    Theorem 6). :math:`K = 0` (probability :math:`e^{-\mu}`) selects nothing."""

    mu: float

    def __post_init__(self) -> None:
        mu = check_positive(self.mu, "mu")
        if mu > 1e12:
            raise ValueError(f"`mu` (expected number of trials) must be at most 1e12; got {self.mu!r}")
        object.__setattr__(self, "mu", mu)

    name = "poisson"

    @property
    def mean(self) -> float:
        return self.mu

    def log_pmf(self, k: int) -> float:
        k = int(k)
        if k < 0:
            return -math.inf
        return k * math.log(self.mu) - self.mu - math.lgamma(k + 1.0)

    def pmf(self, k: int) -> float:
        return math.exp(self.log_pmf(k))

    def sample(self, rng: Any = None) -> int:
        """One draw of :math:`K` (see :func:`sample_trials`)."""
        u = _uniform(rng)
        k, cdf = 0, math.exp(self.log_pmf(0))
        while cdf <= u:  # each pmf from its log: e^{-mu} underflows for mu > 745, the sum does not
            k += 1
            p = math.exp(self.log_pmf(k))
            cdf += p
            if p == 0.0 and k > self.mu:
                break
        return k

    def params(self) -> dict[str, float | str]:
        return {"distribution": self.name, "mu": self.mu, "expected_trials": self.mu}


TrialDistribution = Union[TruncatedNegativeBinomial, Poisson]


def _check_distribution(distribution: object) -> TrialDistribution:
    if not isinstance(distribution, (TruncatedNegativeBinomial, Poisson)):
        raise TypeError("`distribution` must be a TruncatedNegativeBinomial (geometric, logarithmic, ...) or a "
                        f"Poisson; got {type(distribution).__name__}")
    return distribution


def expected_trials(distribution: TrialDistribution) -> float:
    r""":math:`E[K]`, the expected number of trials (the compute the search costs)."""
    return _check_distribution(distribution).mean


# ------------------------------------------------------------------ randomness
def _resolve_rng(rng: Any) -> Any:
    if rng is None:
        return random.SystemRandom()  # os.urandom: the operating system's cryptographic generator
    if isinstance(rng, (random.Random, np.random.Generator)):
        return rng
    raise TypeError("`rng` must be None (the OS's cryptographic generator), a random.Random or a "
                    f"numpy.random.Generator; got {type(rng).__name__}")


def _uniform(rng: Any) -> float:
    """A uniform float in [0, 1) with 53 random bits."""
    return float(_resolve_rng(rng).random())


def uniform_index(n: int, rng: Any = None) -> int:
    """A uniform integer in ``[0, n)`` (exact: no modulo bias), from the same sources as :func:`sample_trials`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`n` must be an integer >= 1; got {n!r}")
    rng = _resolve_rng(rng)
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(n))
    return rng.randrange(n)


def sample_trials(distribution: TrialDistribution, rng: Any = None) -> int:
    r"""Draw the number of trials :math:`K` by inversion of its CDF.

    Args:
        distribution: :class:`TruncatedNegativeBinomial` or :class:`Poisson`.
        rng (optional): ``None`` (default) draws from :class:`random.SystemRandom`, i.e. the operating
            system's cryptographic generator (``os.urandom``), fresh and unpredictable; a seeded
            :class:`random.Random` or :class:`numpy.random.Generator` is reproducible, for
            experiments, and **voids the guarantee** (whoever knows the seed knows :math:`K`).

    The inversion compares a 53-bit uniform with partial sums of the probabilities, so the law is
    exact to about :math:`2^{-53}` in total variation.
    """
    return _check_distribution(distribution).sample(rng)


# ------------------------------------------------------------------ curves
def _check_curve(orders: Sequence[float], rdp: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    grid = np.asarray(check_orders(orders), dtype=np.float64)
    try:
        values = np.asarray(rdp, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError("`rdp` must be a sequence of numbers") from None
    if values.shape != grid.shape:
        raise ValueError(f"`rdp` has {values.size} values for {grid.size} orders")
    if np.isnan(values).any() or (values < 0).any():
        raise ValueError("`rdp` (the trial's RDP curve) must be non-negative (inf allowed), without NaN")
    return grid, values


def _monotone(values: np.ndarray) -> np.ndarray:
    """Each value replaced by the smallest at its order or any larger one (RDP grows with the order)."""
    return np.minimum.accumulate(values[::-1])[::-1]


def truncated_negative_binomial_rdp(orders: Sequence[float], rdp: Sequence[float] | np.ndarray, *,
                                    eta: float, gamma: float) -> np.ndarray:
    r"""Theorem 2: the RDP curve of the best of :math:`K \sim \mathcal{D}_{\eta,\gamma}` trials, each
    with RDP curve ``rdp`` on ``orders``; :math:`\hat\lambda` minimised over the grid (see the module
    docstring). Returns the curve on ``orders``."""
    dist = TruncatedNegativeBinomial(eta=eta, gamma=gamma)
    a, r = _check_curve(orders, rdp)
    log_inv_gamma = -math.log(dist.gamma)
    fin = np.isfinite(a)
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.where(fin, (1.0 - 1.0 / a) * r + log_inv_gamma / a, r)  # at hat-lambda = inf: hat-epsilon
    terms = np.where(np.isnan(terms), math.inf, terms)
    constant = (1.0 + dist.eta) * float(np.min(terms))
    log_mean = math.log(dist.mean)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = r + constant + np.where(fin, log_mean / (a - 1.0), 0.0)
    return np.maximum(_monotone(out), 0.0)


def _delta_from_curve(a: np.ndarray, r: np.ndarray, epsilon: float) -> float:
    r"""A :math:`\delta` for which an RDP curve is :math:`(\epsilon, \delta)`-DP: the smallest of the
    pure track (order ``inf``), Balle et al. (2020, Thm 21) solved for :math:`\delta`,
    :math:`\log\delta = (\alpha-1)(\rho - \epsilon + \log(1 - 1/\alpha)) - \log\alpha`, and the total variation
    bound :math:`\sqrt{1 - e^{-\rho}}` (Bretagnolle-Huber, :math:`KL \le D_\alpha`)."""
    best = 1.0
    pure = np.isinf(a) & np.isfinite(r)
    if pure.any() and epsilon >= float(r[pure].min()):
        return 0.0
    fin = np.isfinite(a) & np.isfinite(r)
    if fin.any():
        af, rf = a[fin], r[fin]
        log_d = (af - 1.0) * (rf - epsilon + np.log1p(-1.0 / af)) - np.log(af)
        best = min(best, float(np.exp(np.min(log_d))))
        best = min(best, float(np.sqrt(-np.expm1(-np.min(rf)))))
    return best


def poisson_rdp(orders: Sequence[float], rdp: Sequence[float] | np.ndarray, *, mu: float,
                gdp_mu: float | None = None) -> np.ndarray:
    r"""Theorem 6 with the :math:`K = 0` atom (see the module docstring): the RDP curve of the best of
    :math:`K \sim \mathrm{Poisson}(\mu)` trials, each with RDP curve ``rdp``. :math:`\hat\delta` comes from
    the curve, or exactly from the GDP formula when the trial is ``gdp_mu``-GDP (then ``rdp`` must be
    its curve or larger). Returns the curve on ``orders``."""
    mu = Poisson(mu).mu
    a, r = _check_curve(orders, rdp)
    g = None if gdp_mu is None else check_non_negative(gdp_mu, "gdp_mu")
    out = np.empty_like(r)
    for i, (lam, eps) in enumerate(zip(a, r)):
        if math.isinf(eps):
            out[i] = math.inf
            continue
        eps_hat = 0.0 if math.isinf(lam) else math.log1p(1.0 / (lam - 1.0))
        delta_hat = _delta_from_curve(a, r, eps_hat)
        if g is not None:
            delta_hat = min(delta_hat, gdp_delta(mu=g, epsilon=eps_hat))
        x = eps + mu * delta_hat
        if math.isinf(lam):
            out[i] = x
        else:  # log(e^{-mu} + mu e^{(lam-1) x}) / (lam - 1), in log space
            out[i] = float(np.logaddexp(-mu, math.log(mu) + (lam - 1.0) * x)) / (lam - 1.0)
    return np.maximum(_monotone(out), 0.0)


def tuning_rdp(orders: Sequence[float], rdp: Sequence[float] | np.ndarray, distribution: TrialDistribution, *,
               gdp_mu: float | None = None) -> np.ndarray:
    """The selection's RDP curve for either distribution (:func:`truncated_negative_binomial_rdp`,
    :func:`poisson_rdp`)."""
    dist = _check_distribution(distribution)
    if isinstance(dist, Poisson):
        return poisson_rdp(orders, rdp, mu=dist.mu, gdp_mu=gdp_mu)
    return truncated_negative_binomial_rdp(orders, rdp, eta=dist.eta, gamma=dist.gamma)


# ------------------------------------------------------------------ a trial's cost
def composition_curve(composition: Composition, orders: Sequence[float]) -> np.ndarray:
    r"""The RDP curve of a composition of curve events (GDP events as :math:`\alpha\mu^2/2`) at ``orders``.

    Raises ``ValueError`` when it holds approximate-DP events (no curve) or when an order is not
    tabulated by its non-GDP events."""
    if not isinstance(composition, Composition):
        raise TypeError(f"expected a Composition; got {type(composition).__name__}")
    if composition.profiles:
        raise ValueError("a trial with (epsilon, delta)-only events (e.g. GCON's objective perturbation) has no RDP "
                         "curve: the tuning theorems need Rényi DP of every trial")
    grid = check_orders(orders)
    tab = composition.rdp_curve()
    if tab is None:
        return gdp_rdp(composition.mu, grid)
    table = dict(zip(tab[0].tolist(), tab[1].tolist()))
    missing = [x for x in grid if x not in table]
    if missing:
        raise ValueError(f"the trial's events are not tabulated at orders {missing[:3]}...: evaluate their curves on "
                         "the same grid (e.g. DEFAULT_ORDERS)")
    return np.asarray([table[x] for x in grid], dtype=np.float64)


def _trial_events(events: Any) -> tuple[PrivacyEvent, ...]:
    if isinstance(events, PrivacyEvent):
        events = (events,)
    try:
        events = tuple(events)
    except TypeError:
        raise TypeError("the trial's cost must be a PrivacyEvent or a sequence of them") from None
    if not events:
        raise ValueError("the trial's cost is empty: give the events one run registers")
    for e in events:
        if not isinstance(e, PrivacyEvent):
            raise TypeError(f"the trial's cost must hold PrivacyEvents; got {type(e).__name__}")
    units = {e.unit for e in events}
    if len(units) != 1:
        raise ValueError(f"a trial's events must all be on one unit; got {sorted(u.value for u in units)} (tune "
                         "each unit's releases with its own event)")
    if Unit.LOCAL in units:
        raise ValueError("unit 'local' is accounted per node; the tuning theorems are applied to a central unit "
                         "('edge', 'node' or 'graph')")
    approx = [e.name for e in events if e.approx is not None]
    if approx:
        raise ValueError(f"events {approx} are (epsilon, delta)-only (no RDP curve); the tuning theorems need "
                         "Rényi DP of every trial")
    return events


def trial_curve(events: PrivacyEvent | Sequence[PrivacyEvent], *,
                orders: Sequence[float] | None = None) -> tuple[tuple[float, ...], np.ndarray]:
    r"""One trial's RDP curve: its events composed by the accountant's own rule
    (:func:`~pyg_private.accounting.composition.compose`: RDP curves summed order by order, GDP
    events as :math:`\alpha\mu^2/2`), on ``orders`` (default: the events' grid, or ``DEFAULT_ORDERS``
    when every event is GDP). Returns ``(orders, curve)``."""
    comp = compose(list(_trial_events(events)))
    if orders is None:
        tab = comp.rdp_curve()
        orders = DEFAULT_ORDERS if tab is None else tuple(tab[0].tolist())
    grid = check_orders(orders)
    return grid, composition_curve(comp, grid)


def tuning_event(trial: PrivacyEvent | Sequence[PrivacyEvent] | tuple[Sequence[float], Sequence[float]], *,
                 distribution: TrialDistribution, unit: Unit | str | None = None,
                 name: str = "hyperparameter_tuning", orders: Sequence[float] | None = None,
                 params: Mapping[str, Any] | None = None) -> PrivacyEvent:
    r"""The event of a private hyperparameter search: the best of :math:`K` trials, :math:`K` from
    ``distribution``, each trial costing ``trial``.

    Args:
        trial: the events one trial registers (composed by the accountant's rule, see
            :func:`trial_curve`), or its RDP curve ``(orders, rdp)`` (then give ``unit``).
        distribution: :class:`TruncatedNegativeBinomial` (Theorem 2) or :class:`Poisson` (Theorem 6).
        unit: the unit (default: the events').
        name, params: the event's name and extra parameters.
        orders: the grid for the trial's events (default: theirs).

    The returned :class:`~pyg_private.accounting.PrivacyEvent` holds the selection's RDP curve
    (:func:`tuning_rdp`) and composes with the rest of the ledger like any RDP event. It covers
    releasing **only the selected trial's output**; see :func:`pyg_private.models.select_privately`.
    """
    dist = _check_distribution(distribution)
    gdp_mu = None
    if isinstance(trial, tuple) and len(trial) == 2 and not isinstance(trial[0], PrivacyEvent):
        if unit is None:
            raise ValueError("give `unit` with a trial given as an (orders, rdp) curve")
        grid, curve = _check_curve(trial[0], trial[1])
        grid = tuple(grid.tolist())
        info: dict[str, Any] = {"trial_events": 0}
    else:
        events = _trial_events(trial)
        if unit is not None and as_unit(unit) is not events[0].unit:
            raise ValueError(f"`unit` is {as_unit(unit).value!r} but the trial's events are on {events[0].unit.value!r}")
        unit = events[0].unit
        comp = compose(list(events))
        if comp.curve is None:
            gdp_mu = comp.mu
        grid, curve = trial_curve(events, orders=orders)
        info = {"trial_events": len(events), "trial_mechanisms": tuple(sorted({e.mechanism for e in events}))}
    unit = as_unit(unit)
    if unit is Unit.LOCAL:
        raise ValueError("unit 'local' is accounted per node; tune a central unit")
    values = tuning_rdp(grid, curve, dist, gdp_mu=gdp_mu)
    p = {**dist.params(), **info, **dict(params or {})}
    return PrivacyEvent(name=name, unit=unit, mechanism="hyperparameter_tuning", params=p, orders=tuple(grid),
                        rdp=tuple(values.tolist()))
