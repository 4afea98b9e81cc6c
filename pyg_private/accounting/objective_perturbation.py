r"""Calibration of GCON's objective perturbation (Wei et al., "GCON: Differentially Private Graph
Convolutional Network via Objective Perturbation", arXiv:2407.05034; Sec. IV-V, App. F-L).

GCON trains one linear layer :math:`\hat Y = Z\Theta` (:math:`\Theta \in \mathbb R^{d\times c}`, no
bias) on propagated features :math:`Z = \frac1s[R_{m_1}X \,\|\, \dots \,\|\, R_{m_s}X]` whose rows have
:math:`\|z_i\|_2 \le 1`, by minimising once (Alg. 1, Eq. 13)

.. math::
    L_{priv}(\Theta) = \frac1{n_1}\sum_{i \le n_1}\sum_{j \le c}\ell(z_i^\top\theta_j; y_{ij})
        + \frac{\Lambda}{2}\|\Theta\|_F^2 + \frac1{n_1}\langle B, \Theta\rangle
        + \frac{\Lambda'}{2}\|\Theta\|_F^2,

where each column :math:`b_j` of :math:`B` has density :math:`\propto e^{-\beta\|b_j\|_2}` (Alg. 2,
:func:`pyg_private.mechanisms.objective_noise.sample_objective_noise`). The exact minimiser is
:math:`(\epsilon, \delta)`-DP for adding or removing one undirected edge (Theorem 1) when
:math:`\Lambda, \Lambda', \beta` come from Eqs. 17-24, implemented by
:func:`calibrate_objective_perturbation` in the paper's order:

.. math::
    (19)\quad & c_1 = \sup|\ell'|,\ c_2 = \sup|\ell''|,\ c_3 = \sup|\ell'''|
        \qquad \text{(:func:`loss_constants`)} \\
    (20)\quad & \Psi = \Psi(Z) \qquad \text{(Lemma 2, :func:`appr_sensitivity`)} \\
    (21)\quad & c_{sf} = \min\Big\{u > 0: \int_0^u \frac{x^{d-1}e^{-x}}{(d-1)!}\,dx \ge 1 - \frac{\delta}{c}\Big\}
        = P^{-1}(d, 1 - \delta/c) \\
    (22)\quad & \Lambda \leftarrow \max\Big(\Lambda, \frac{c\,c_2\Psi c_{sf}}{n_1\omega\epsilon} + \xi\Big) \\
    (23)\quad & c_\theta = \frac{n_1\omega\epsilon c_1 + c\,c_1\Psi c_{sf}}
        {n_1\omega\epsilon\Lambda - c\,c_2\Psi c_{sf}} \\
    (24)\quad & \epsilon_\Lambda = c\,d\,\ln\Big(1 + \frac{(2c_2 + c_3c_\theta)\Psi}{d\,n_1\Lambda}\Big) \\
    (17)\quad & \Lambda' = 0 \text{ if } \epsilon_\Lambda \le (1-\omega)\epsilon, \text{ else }
        \frac{c(2c_2 + c_3c_\theta)\Psi}{n_1(1-\omega)\epsilon} - \Lambda \\
    (18)\quad & \beta = \frac{\max(\epsilon - \epsilon_\Lambda, \omega\epsilon)}{c(c_1 + c_2c_\theta)\Psi}.

By default :math:`\Lambda'` is not Eq. 17's closed form but the smallest extra ridge the proof
allows (``lambda_prime="tight"``): Eq. 17 evaluates :math:`c_\theta` (Eq. 23) at :math:`\Lambda`
alone, although the bound on :math:`\|\theta_j\|` it stands for holds at the ridge
:math:`\Lambda + \Lambda'` actually used, so for a small or raised :math:`\Lambda` it adds orders of
magnitude too much ridge and spends almost none of the budget (see
:func:`calibrate_objective_perturbation`). ``lambda_prime="paper"`` reproduces Eq. 17 as printed.

The proof (Lemmas 7-9) splits :math:`\epsilon` into a Jacobian part
:math:`\le \min(\epsilon_\Lambda, (1-\omega)\epsilon)` and a noise-density part
:math:`c(c_1 + c_2c_\theta)\Psi\beta`, and charges :math:`\delta` to
:math:`\Pr[\exists j: \|\theta_j\| > c_\theta] \le c\cdot\delta/c`. It needs a per-class separable
loss with bounded first three derivatives (softmax cross-entropy is **not** covered), rows with
:math:`\|z_i\|_2 \le 1`, the row-normalised propagation :math:`\tilde A = D^{-1}(A+I)` and the exact
minimiser. The noise is drawn once; it is a single release, with no per-step composition.

Everything here is pure float64 math (no torch). Worked Theorem 1 values (Eqs. 17-24 with the
soft-margin loss, :math:`d = 16`, :math:`s = 1`, :math:`m = 2`, :math:`\alpha = 0.8`,
:math:`\Lambda = 0.2`, :math:`\omega = 0.9`, :math:`\delta = 1/|E|` on Cora-ML and PubMed; the paper
prints no numbers) are reproduced, to the digits given there, in
``tests/accounting/test_objective_perturbation.py`` (with ``lambda_prime="paper"``; the tight rule
agrees wherever :math:`\Lambda' = 0`, i.e. on every row but PubMed's :math:`n_1 = 60`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from typing import Iterable, Literal

import numpy as np

from .validation import (
    check_delta,
    check_epsilon,
    check_non_negative,
    check_positive,
    check_positive_int,
    check_probability,
)

__all__ = [
    "loss_constants",
    "appr_sensitivity",
    "ObjectivePerturbationCalibration",
    "calibrate_objective_perturbation",
    "objective_perturbation_profile",
    "PROFILE_DELTAS",
    "GCON_LOSSES",
    "LAMBDA_PRIME_RULES",
]

#: The deltas a GCON fit's privacy profile is tabulated on: 8 per decade from 1e-30 to 0.5.
PROFILE_DELTAS: tuple[float, ...] = tuple(float(d) for d in np.geomspace(1e-30, 0.5, 8 * 30 + 3))

GCON_LOSSES = ("soft_margin", "pseudo_huber")
"""Loss names accepted by :func:`loss_constants` (GCON Sec. IV-C4; Eqs. 27-28 of App. F)."""

Loss = Literal["soft_margin", "pseudo_huber"]

_XI_RELATIVE = 1e-6
_XI_ABSOLUTE = 1e-12

LAMBDA_PRIME_RULES = ("tight", "paper")
"""How :func:`calibrate_objective_perturbation` sets :math:`\\Lambda'`: the smallest valid value
(``"tight"``, the default) or GCON's Eq. 17 as printed (``"paper"``)."""

#: Slack, as a fraction of epsilon, that the tight rule leaves in each of Lemmas 7, 8 and 9 for
#: floating-point rounding (about 9e-13: invisible in the calibration, far above the rounding).
_MARGIN = 2.0 ** -40


# --------------------------------------------------------------------------------------------
# Eq. 19: the loss constants
# --------------------------------------------------------------------------------------------
def loss_constants(loss: str, num_classes: int, huber_delta: float | None = None) -> tuple[float, float, float]:
    r"""The bounds :math:`(c_1, c_2, c_3)` of :math:`|\ell'|, |\ell''|, |\ell'''|` (GCON Eq. 19, App. F).

    Both losses are per element :math:`\ell(x; y)` of the separable loss
    :math:`L(\Theta; z, y) = \sum_{j=1}^c \ell(z^\top\theta_j; y_j)` (Eq. 12), with targets
    :math:`y_j \in \{0, 1\}` (one-hot) and a :math:`1/c` factor:

    * ``"soft_margin"`` (PyTorch's ``MultiLabelSoftMarginLoss``, Eq. 27):
      :math:`\ell(x;y) = -\frac1c[y\log\sigma(x) + (1-y)\log(1-\sigma(x))]`, so
      :math:`\ell' = (\sigma(x) - y)/c`, :math:`\ell'' = \sigma(1-\sigma)/c`,
      :math:`\ell''' = \sigma(1-\sigma)(1-2\sigma)/c` and

      .. math:: c_1 = \frac1c,\quad c_2 = \frac1{4c},\quad c_3 = \frac1{6\sqrt3\,c}

      (:math:`c_1` is a supremum approached as :math:`x \to \mp\infty`; :math:`c_3` is attained
      at :math:`\sigma = 1/2 \pm 1/(2\sqrt3)`).
    * ``"pseudo_huber"`` with parameter :math:`\delta_l` = ``huber_delta`` (Eq. 28):
      :math:`\ell(x;y) = \frac{\delta_l^2}{c}\big(\sqrt{1 + (x-y)^2/\delta_l^2} - 1\big)`, so

      .. math:: c_1 = \frac{\delta_l}{c},\quad c_2 = \frac1c,\quad c_3 = \frac{48\sqrt5}{125\,c\,\delta_l}

      (:math:`c_3` attained at :math:`|x - y| = \delta_l/2`).

    Any other loss raises ``ValueError``: Theorem 1 needs a loss that is separable per class (the
    Jacobian of Lemma 7 is then block-diagonal) and three times differentiable with bounded
    derivatives. Softmax cross-entropy couples the classes and is not covered.
    """
    c = check_positive_int(num_classes, "num_classes")
    if loss == "soft_margin":
        if huber_delta is not None:
            raise ValueError("`huber_delta` is a parameter of the 'pseudo_huber' loss only; "
                             f"got huber_delta={huber_delta!r} with loss='soft_margin'")
        return 1.0 / c, 1.0 / (4.0 * c), 1.0 / (6.0 * math.sqrt(3.0) * c)
    if loss == "pseudo_huber":
        if huber_delta is None:
            raise ValueError("the 'pseudo_huber' loss needs `huber_delta` (delta_l > 0; the paper uses 0.1, 0.2, 0.5)")
        dl = check_positive(huber_delta, "huber_delta")
        return dl / c, 1.0 / c, 48.0 * math.sqrt(5.0) / (125.0 * c * dl)
    raise ValueError(
        f"GCON's privacy proof (Theorem 1) covers only a loss that is separable per class, "
        f"L = sum_j ell(z^T theta_j; y_j), with bounded first three derivatives of ell; supported losses "
        f"are {GCON_LOSSES}; got loss={loss!r} (e.g. softmax cross-entropy couples the classes and is not covered)"
    )


# --------------------------------------------------------------------------------------------
# Lemma 2 (Eq. 25-26): the sensitivity of the propagated features
# --------------------------------------------------------------------------------------------
def _check_steps(m: object) -> float:
    if isinstance(m, float) and math.isinf(m) and m > 0:
        return math.inf
    if isinstance(m, bool) or not isinstance(m, Integral):
        raise TypeError(f"a propagation step count must be an integer >= 0 or math.inf; got {type(m).__name__} {m!r}")
    if m < 0:
        raise ValueError(f"a propagation step count must be an integer >= 0 or math.inf; got {m!r}")
    return int(m)


def _psi_one(alpha: float, m: float) -> float:
    if m == 0 or alpha == 1.0:
        return 0.0
    scale = 2.0 * (1.0 - alpha) / alpha
    if math.isinf(m):
        return scale
    # 1 - (1 - alpha)^m without cancellation for small alpha
    return scale * -math.expm1(m * math.log1p(-alpha))


def appr_sensitivity(alpha: float, steps: int | float | Iterable[int | float]) -> float:
    r""":math:`\Psi(Z)`, the edge sensitivity of GCON's propagated features (Lemma 2, Eqs. 25-26).

    With the row-normalised :math:`\tilde A = D^{-1}(A + I)` and
    :math:`R_m = (1-\alpha)\tilde A R_{m-1} + \alpha I` (:math:`R_0 = I`,
    :math:`R_\infty = \alpha(I - (1-\alpha)\tilde A)^{-1}`, Eq. 9), rows :math:`\|x_i\|_2 \le 1`
    and :math:`\psi(Z) = \sum_{i=1}^n\|z'_i - z_i\|_2` over neighbouring graphs (one undirected
    edge added or removed, Def. 3):

    .. math::
        \Psi(Z_m) = \frac{2(1-\alpha)}{\alpha}\big(1 - (1-\alpha)^m\big),\qquad
        \Psi(Z_\infty) = \frac{2(1-\alpha)}{\alpha},\qquad \Psi(Z_0) = 0,

    independent of the degrees, of n and of d. ``steps`` may be one step count (an ``int >= 0``
    or ``math.inf``) or a sequence :math:`m_1, \dots, m_s` for the concatenation
    :math:`Z = \frac1s[Z_{m_1}\|\dots\|Z_{m_s}]` (Eq. 11), whose sensitivity is the average
    :math:`\frac1s\sum_i\Psi(Z_{m_i})` (Eq. 20/26). ``alpha`` lies in (0, 1]; ``alpha = 1``
    (no propagation) gives 0. The bound is attained for m = 1 (two nodes, :math:`x_1 = -x_2`).
    """
    a = check_probability(alpha, "alpha", low_open=True)
    if isinstance(steps, (str, bytes)):
        raise TypeError(f"`steps` must be an integer, math.inf or a sequence of them; got {steps!r}")
    if isinstance(steps, Iterable):
        ms = [_check_steps(m) for m in steps]
        if not ms:
            raise ValueError("`steps` must hold at least one step count")
        return math.fsum(_psi_one(a, m) for m in ms) / len(ms)
    return _psi_one(a, _check_steps(steps))


# --------------------------------------------------------------------------------------------
# Theorem 1 (Eqs. 17-24)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectivePerturbationCalibration:
    r"""The result of :func:`calibrate_objective_perturbation` (GCON Theorem 1, Eqs. 17-24).

    Outputs: ``c_sf`` (Eq. 21), ``Lambda`` (the **raised** regulariser of Eq. 22), ``Lambda_prime``
    (the extra ridge: Eq. 17, or the smallest valid value with ``lambda_prime_rule="tight"``; the
    objective's ridge is ``Lambda + Lambda_prime``), ``c_theta`` (the bound on every
    :math:`\|\theta_j\|_2` outside the probability-:math:`\delta` event of Lemma 9: Eq. 23 at
    :math:`\Lambda` with the paper's rule, Eq. 23 at :math:`\Lambda + \Lambda'` with the tight rule),
    ``eps_Lambda`` (Eq. 24: the Jacobian bound at :math:`\Lambda` alone, which decides whether
    :math:`\Lambda' > 0`) and ``beta`` (Eq. 18 with this ``c_theta``; ``math.inf`` means no noise,
    B = 0, which happens when ``Psi = 0``).
    Inputs: ``epsilon``, ``delta``, ``omega``, ``d`` (width of Z), ``c`` (classes), ``n1`` (loss
    rows), ``Psi``, ``c1, c2, c3``, ``xi`` (the one used), ``Lambda_user`` (the regulariser asked for),
    ``lambda_prime_rule`` (``"tight"`` or ``"paper"``, see :func:`calibrate_objective_perturbation`).
    """

    epsilon: float
    delta: float
    omega: float
    d: int
    c: int
    n1: int
    Psi: float
    c1: float
    c2: float
    c3: float
    xi: float
    Lambda_user: float
    c_sf: float
    Lambda: float
    c_theta: float
    eps_Lambda: float
    Lambda_prime: float
    beta: float
    lambda_prime_rule: str = "paper"

    @property
    def Lambda_bound(self) -> float:
        r""":math:`c\,c_2\Psi c_{sf}/(n_1\omega\epsilon)`, the threshold of Eq. 22.

        The returned ``Lambda`` exceeds it by at least ``xi``."""
        return self.c * self.c2 * self.Psi * self.c_sf / (self.n1 * self.omega * self.epsilon)

    @property
    def lambda_raised(self) -> bool:
        """Whether Eq. 22 raised the user's regulariser (then ``c_theta`` is huge and the model is mostly noise)."""
        return self.Lambda > self.Lambda_user

    @property
    def total_regularization(self) -> float:
        r""":math:`\Lambda + \Lambda'`, the ridge coefficient of the private objective (Eq. 13)."""
        return self.Lambda + self.Lambda_prime

    @property
    def eps_jacobian(self) -> float:
        r"""The Jacobian part of the privacy loss (Lemma 7):
        :math:`c\,d\ln(1 + (2c_2 + c_3c_\theta)\Psi/(d\,n_1(\Lambda + \Lambda')))`, at most
        :math:`\min(\epsilon_\Lambda, (1-\omega)\epsilon)` when :math:`\Lambda' > 0` (and
        :math:`\epsilon_\Lambda` otherwise)."""
        return _jacobian_epsilon(self.c, self.d, self.n1, self.c2, self.c3, self.c_theta, self.Psi,
                                 self.Lambda + self.Lambda_prime)

    @property
    def eps_noise(self) -> float:
        r"""The noise-density part of the privacy loss (Lemma 8): :math:`c(c_1 + c_2c_\theta)\Psi\beta`
        (0 when ``beta`` is infinite: no noise because nothing private is used)."""
        if math.isinf(self.beta):
            return 0.0
        return self.c * (self.c1 + self.c2 * self.c_theta) * self.Psi * self.beta

    @property
    def expected_noise_norm(self) -> float:
        r""":math:`E\|b_j\|_2 = d/\beta` (0 when ``beta`` is infinite)."""
        return 0.0 if math.isinf(self.beta) else self.d / self.beta


def _jacobian_epsilon(c: int, d: int, n1: int, c2: float, c3: float, c_theta: float, Psi: float,
                      Lam: float) -> float:
    return c * d * math.log1p((2.0 * c2 + c3 * c_theta) * Psi / (d * n1 * Lam))


def _check_loss_constants(constants: object) -> tuple[float, float, float]:
    try:
        c1, c2, c3 = constants  # type: ignore[misc]
    except (TypeError, ValueError):
        raise TypeError(f"`loss_constants` must be a triple (c1, c2, c3); got {constants!r}") from None
    return (check_non_negative(c1, "loss_constants[0] (c1)"), check_non_negative(c2, "loss_constants[1] (c2)"),
            check_non_negative(c3, "loss_constants[2] (c3)"))


def _eq23(noise_rows: float, ridge: float, c: int, c1: float, c2: float, Psi: float, c_sf: float) -> float:
    r"""Eq. 23 with the noise share :math:`s` (``noise_rows`` :math:`= n_1 s`) and the ridge ``ridge``:
    the smallest :math:`c_\theta` with :math:`\beta n_1(\mathrm{ridge}\,c_\theta - c_1) \ge c_{sf}` at
    :math:`\beta = s/(c(c_1 + c_2c_\theta)\Psi)` (Lemma 9); ``math.inf`` where no such bound exists."""
    den = noise_rows * ridge - c * c2 * Psi * c_sf
    if not den > 0:
        return math.inf
    return (noise_rows * c1 + c * c1 * Psi * c_sf) / den


def _tight_lambda_prime(*, eps: float, w: float, d: int, c: int, n1: int, Psi: float, c1: float, c2: float,
                        c3: float, c_sf: float, Lam: float, c_theta_paper: float) -> tuple[float, float, float]:
    r"""The smallest :math:`\Lambda' \ge 0` of the tight rule, with its :math:`c_\theta` and Jacobian
    bound: ``(Lambda_prime, c_theta, eps_jacobian)`` (see :func:`calibrate_objective_perturbation`).

    :math:`\epsilon_J(L) = c\,d\ln(1 + (2c_2 + c_3c_\theta(L))\Psi/(d\,n_1L))` with
    :math:`c_\theta(L)` = Eq. 23 at ridge :math:`L` is decreasing in :math:`L`; the root of
    :math:`\epsilon_J(\Lambda + \Lambda') = (1-\omega)\epsilon` is found by bisection on a bracket
    checked in floating point: :math:`\Lambda' = 0` fails (else it is returned), and Eq. 17's closed
    form (doubled until it passes) passes. Every test evaluates the ridge as the float
    ``Lam + Lambda_prime`` that the objective will use, so the returned value passes it exactly."""
    budget = (1.0 - w) * eps - _MARGIN * eps  # Lemma 7 (log1p's rounding)
    noise_rows = n1 * (w * eps - 2.0 * _MARGIN * eps)  # Lemma 9 (beta uses a share >= (w - _MARGIN) eps)

    def at(lp: float) -> tuple[float, float]:
        ridge = Lam + lp
        c_theta = _eq23(noise_rows, ridge, c, c1, c2, Psi, c_sf)
        if math.isinf(c_theta):
            return c_theta, math.inf
        return c_theta, _jacobian_epsilon(c, d, n1, c2, c3, c_theta, Psi, ridge)

    c_theta, eps_j = at(0.0)
    if eps_j <= budget:  # Eq. 17's first case: no extra ridge
        return 0.0, c_theta, eps_j
    # upper bracket: Eq. 17's closed form (valid in exact arithmetic since c_theta(L) <= c_theta(Lambda)
    # and ln(1 + x) < x), doubled until the test holds in floating point
    hi = c * (2.0 * c2 + c3 * c_theta_paper) * Psi / (n1 * budget) - Lam
    hi = hi if math.isfinite(hi) and hi > 0 else max(Lam, 1e-300)
    while not at(hi)[1] <= budget:
        hi *= 2.0
        if math.isinf(hi):  # eps_J(L) -> 0 as L -> inf: only for omega within ~1e-12 of 0 or 1
            raise ValueError(f"no finite Lambda' meets the Jacobian share (1 - omega) * epsilon with "
                             f"omega={w!r}; use an `omega` well inside (0, 1) (the paper uses 0.9)")
    lo = 0.0  # at(lo) fails, at(hi) passes
    for _ in range(400):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi or hi - lo <= 2.0 ** -52 * (Lam + hi):
            break
        if at(mid)[1] <= budget:
            hi = mid
        else:
            lo = mid
    c_theta, eps_j = at(hi)
    return hi, c_theta, eps_j


def calibrate_objective_perturbation(*, epsilon: float, delta: float, dim: int, num_classes: int, num_rows: int,
                                     sensitivity: float, loss_constants: tuple[float, float, float],
                                     regularization: float, omega: float = 0.9, xi: float | None = None,
                                     lambda_prime: Literal["tight", "paper"] = "tight"
                                     ) -> ObjectivePerturbationCalibration:
    r"""Noise and regularisation of GCON's objective perturbation: Theorem 1, Eqs. 17-24.

    Computes, in the order of Theorem 1 (:math:`d` = ``dim``, :math:`c` =
    ``num_classes``, :math:`n_1` = ``num_rows``, :math:`\Psi` = ``sensitivity``,
    :math:`\omega` = ``omega``):

    .. math::
        c_{sf} &= \mathrm{gammaincinv}(d, 1 - \delta/c) & (21)\\
        \Lambda &\leftarrow \max\Big(\Lambda, \frac{c\,c_2\Psi c_{sf}}{n_1\omega\epsilon} + \xi\Big) & (22)\\
        c_\theta &= \frac{n_1\omega\epsilon c_1 + c\,c_1\Psi c_{sf}}
                         {n_1\omega\epsilon\Lambda - c\,c_2\Psi c_{sf}} & (23)\\
        \epsilon_\Lambda &= c\,d\,\mathrm{log1p}\Big(\frac{(2c_2 + c_3c_\theta)\Psi}{d\,n_1\Lambda}\Big) & (24)\\
        \Lambda' &= 0 \text{ if } \epsilon_\Lambda \le (1-\omega)\epsilon \text{ else }
                    \frac{c(2c_2 + c_3c_\theta)\Psi}{n_1(1-\omega)\epsilon} - \Lambda & (17)\\
        \beta &= \frac{\max(\epsilon - \epsilon_\Lambda, \omega\epsilon)}{c(c_1 + c_2c_\theta)\Psi} & (18)

    Then the exact minimiser of :math:`\frac1{n_1}\sum_i L(\Theta; z_i, y_i) + \frac{\Lambda +
    \Lambda'}{2}\|\Theta\|_F^2 + \frac1{n_1}\langle B, \Theta\rangle` with the columns of B drawn
    by Alg. 2 at rate :math:`\beta` (:func:`~pyg_private.mechanisms.objective_noise.sample_objective_noise`)
    is :math:`(\epsilon, \delta)`-DP at the edge level. Use the returned (raised) ``Lambda`` plus
    ``Lambda_prime``, not the regulariser passed in.

    **The extra ridge** :math:`\Lambda'` (``lambda_prime``). With ``"paper"``, Eq. 17 as printed.
    With ``"tight"`` (the default), the smallest :math:`\Lambda' \ge 0` the proof allows; both
    coincide when :math:`\epsilon_\Lambda \le (1-\omega)\epsilon` (:math:`\Lambda' = 0`). Eq. 17
    evaluates :math:`c_\theta` at :math:`\Lambda` although the proof only needs it at the ridge
    :math:`L = \Lambda + \Lambda'` actually used; where Eq. 22 raised :math:`\Lambda` to the bound,
    :math:`c_\theta(\Lambda)` is huge and Eq. 17 adds orders of magnitude too much ridge. Cora-ML,
    soft-margin, :math:`c = d = 7`, :math:`n_1 = 140`, :math:`\alpha = 0.6`, :math:`m = 2`
    (:math:`\Psi = 1.12`), :math:`\delta = 1/16316`, :math:`\epsilon = 0.984`,
    :math:`\Lambda = 0.01`: Eq. 17 gives :math:`c_\theta = 6.6\cdot10^6`,
    :math:`\Lambda' = 5.1\cdot10^4`, :math:`\beta = 4.8\cdot10^{-7}` and the mechanism's exact privacy
    loss (:func:`objective_perturbation_profile`) is :math:`1.7\cdot10^{-6}`, not 0.984; the tight rule
    gives :math:`\Lambda' = 0.046`, :math:`c_\theta = 7.8`, :math:`\beta = 0.27` and spends 0.984.

    *Proof sketch (tight rule).* Write :math:`L = \Lambda + \Lambda'` and, for :math:`L` above the
    bound of Eq. 22, :math:`c_\theta(L)` = Eq. 23 with :math:`L` in place of :math:`\Lambda`,
    :math:`\epsilon_J(L) = c\,d\ln(1 + (2c_2 + c_3c_\theta(L))\Psi/(d\,n_1L))` and
    :math:`\beta = \max(\epsilon - \epsilon_J(L), \omega\epsilon)/(c(c_1 + c_2c_\theta(L))\Psi)`.
    (i) Lemma 9: where :math:`\|\theta_j\| > c_\theta(L)`, the first-order condition
    :math:`b_j = -\sum_i z_i\ell'(z_i^\top\theta_j; y_{ij}) - n_1L\theta_j` (Eq. 47) and
    :math:`\|z_i\| \le 1`, :math:`|\ell'| \le c_1` give :math:`\|b_j\| \ge n_1(Lc_\theta(L) - c_1)`
    (the paper weakens :math:`L` to :math:`\Lambda` there; nothing needs it), and by the definition of
    :math:`c_\theta(L)`, :math:`\beta n_1(Lc_\theta(L) - c_1) = c_{sf}\max(\epsilon - \epsilon_J, \omega
    \epsilon)/(\omega\epsilon) \ge c_{sf}`, so :math:`\Pr[\|\theta_j\| > c_\theta(L)] \le \delta/c` and
    the union over the c columns is at most :math:`\delta`. (ii) Lemma 7 holds for any
    :math:`c_\theta` bounding every :math:`\|\theta_j\|` off that event, with the eigenvalues of
    :math:`B_1` at least :math:`n_1L` (Eqs. 48, 52): the Jacobian ratio is at most
    :math:`e^{\epsilon_J(L)}`. (iii) Lemma 8: the noise ratio is at most
    :math:`e^{c(c_1 + c_2c_\theta(L))\Psi\beta} = e^{\max(\epsilon - \epsilon_J, \omega\epsilon)}`.
    (iv) If :math:`\epsilon_J(L) \le (1-\omega)\epsilon` the two exponents sum to :math:`\epsilon`
    (Eq. 45), and pDP with :math:`\delta` gives :math:`(\epsilon, \delta)`-DP (Lemma 10). Lemma 5
    (bijection) needs only :math:`L > 0`. So every :math:`L \ge \Lambda` with
    :math:`\epsilon_J(L) \le (1-\omega)\epsilon` is valid. :math:`c_\theta(L)` and hence
    :math:`\epsilon_J(L)` are strictly decreasing in :math:`L`, so the valid set is
    :math:`[L^*, \infty)`: :math:`L^* = \Lambda` if :math:`\epsilon_\Lambda \le (1-\omega)\epsilon`
    (Eq. 17's first case, unchanged), else the root of :math:`\epsilon_J(L) = (1-\omega)\epsilon`.
    Eq. 17's closed form :math:`L_{17} = c(2c_2 + c_3c_\theta(\Lambda))\Psi/(n_1(1-\omega)\epsilon)`
    passes (:math:`c_\theta(L_{17}) \le c_\theta(\Lambda)` and :math:`\ln(1 + x) < x`), so
    :math:`\Lambda \le L^* \le L_{17}`: a certified bracket for bisection. *Minimality:* with the
    paper's split (Jacobian part :math:`\le (1-\omega)\epsilon`, noise rate
    :math:`\beta \ge \omega\epsilon/(c(c_1 + c_2c_\theta)\Psi)`), Lemma 9's inequality at ridge
    :math:`L` is equivalent to :math:`c_\theta \ge c_\theta(L)`, and Lemma 7's bound increases with
    :math:`c_\theta`; so no :math:`L < L^*` can be certified by this proof. Consequences:
    :math:`\Lambda' \le` Eq. 17's, :math:`c_\theta \le` Eq. 23's and :math:`\beta \ge` Eq. 18's
    (less ridge and less noise for the same :math:`(\epsilon, \delta)`). In floating point the rule
    tests Lemma 7 on the float ridge ``Lambda + Lambda_prime`` itself; it leaves :math:`2^{-40}\epsilon` unused in each of
    Lemmas 7, 8 and 9 for rounding (so ``omega`` must lie well inside (0, 1)).

    **Choose** ``regularization`` **above the bound** :math:`c\,c_2\Psi c_{sf}/(n_1\omega\epsilon)`
    (``result.Lambda_bound``) anyway: at the bound, Eq. 23's :math:`c_\theta(\Lambda)` is infinite
    in the limit, and with ``lambda_prime="paper"`` :math:`\Lambda'` and the noise blow up: e.g.
    Cora-ML (c = 7, n_1 = 140, d = 16, :math:`\Psi = 0.48`, :math:`\epsilon = 0.5`,
    :math:`\Lambda = 0.01`, :math:`\xi = 10^{-6}`) gives :math:`c_\theta \approx 4.4\cdot10^5`,
    :math:`\Lambda' \approx 2.9\cdot10^3`, :math:`\beta \approx 8.5\cdot10^{-6}`: private but useless.
    ``result.lambda_raised`` flags it. The tight rule's total ridge does not depend on :math:`\xi`.

    With ``"paper"``, when :math:`\Lambda' > 0`, the Jacobian bound of Lemma 7 at
    :math:`\Lambda + \Lambda'` must not exceed :math:`(1-\omega)\epsilon`. The closed form
    guarantees it in exact arithmetic (:math:`\ln(1+x) < x`); if rounding breaks it, ``Lambda_prime``
    is nudged up by a few ulps until it holds (never triggered by the worked values in the tests).

    Args:
        epsilon: target :math:`\epsilon > 0`, finite.
        delta: target :math:`0 < \delta < 1`. :math:`\delta = 0` is impossible: the proof charges
            :math:`\delta/c` per class column to :math:`\Pr[\|b_j\| > c_{sf}/\beta]`, and
            :math:`c_{sf} = \infty` at :math:`\delta = 0`. The paper uses :math:`\delta = 1/|E|`.
        dim: :math:`d = s\,d_1`, the width of the concatenated propagated features Z (after the
            encoder), not the raw feature count.
        num_classes: :math:`c`.
        num_rows: :math:`n_1`, the number of rows in the loss (labelled, or all pseudo-labelled
            nodes); the loss is a mean over exactly these rows.
        sensitivity: :math:`\Psi(Z) \ge 0` (:func:`appr_sensitivity`). :math:`\Psi = 0`
            (:math:`\alpha = 1` or all :math:`m_i = 0`: the graph is not used) needs no noise: then
            :math:`\epsilon_\Lambda = 0`, :math:`\Lambda' = 0` and ``beta = math.inf``
            (B = 0, see :func:`~pyg_private.mechanisms.objective_noise.sample_objective_noise`).
        loss_constants: :math:`(c_1, c_2, c_3)` from :func:`loss_constants`.
        regularization: the user's :math:`\Lambda \ge 0` (the paper tunes it in {0.01, 0.2, 1, 2}).
        omega: the budget split :math:`\omega \in (0, 1)` (0.9 in all the paper's experiments).
        xi: the margin :math:`\xi > 0` of Eq. 22, unspecified by the paper. Default
            :math:`10^{-6}\cdot\text{bound} + 10^{-12}`: the smallest safe relative margin (it keeps
            the denominator of Eq. 23 positive despite rounding). It only matters when
            ``regularization`` is at or below the bound.
        lambda_prime: ``"tight"`` (default), the smallest valid :math:`\Lambda'` (above), or
            ``"paper"``, Eq. 17 as printed (to reproduce the paper's calibration).
    """
    if lambda_prime not in LAMBDA_PRIME_RULES:
        raise ValueError(f"`lambda_prime` must be one of {LAMBDA_PRIME_RULES}: 'tight' (the smallest extra ridge "
                         f"Theorem 1's proof allows) or 'paper' (Eq. 17 as printed); got {lambda_prime!r}")
    eps = check_epsilon(epsilon)
    if isinstance(delta, (int, float)) and not isinstance(delta, bool) and delta == 0:
        raise ValueError(
            "`delta` must lie in (0, 1): GCON's objective perturbation cannot give pure DP (delta = 0 makes "
            "c_sf = gammaincinv(d, 1 - delta/c) infinite); the paper uses delta = 1/|E|"
        )
    dlt = check_delta(delta)
    w = check_probability(omega, "omega", low_open=True, high_open=True)
    d = check_positive_int(dim, "dim")
    c = check_positive_int(num_classes, "num_classes")
    n1 = check_positive_int(num_rows, "num_rows")
    Psi = check_non_negative(sensitivity, "sensitivity")
    c1, c2, c3 = _check_loss_constants(loss_constants)
    lam_user = check_non_negative(regularization, "regularization")

    from scipy.special import gammaincinv  # imported on first use, not with the package

    # (21)
    c_sf = float(gammaincinv(d, 1.0 - dlt / c))
    if not (math.isfinite(c_sf) and c_sf > 0):
        raise ValueError(f"c_sf = gammaincinv({d}, 1 - {dlt}/{c}) is not a positive finite number ({c_sf!r})")
    # (22)
    nwe = n1 * w * eps
    bound = c * c2 * Psi * c_sf / nwe
    xi_ = _XI_RELATIVE * bound + _XI_ABSOLUTE if xi is None else check_positive(xi, "xi")
    Lam = max(lam_user, bound + xi_)
    # (23)
    den = nwe * Lam - c * c2 * Psi * c_sf
    if not den > 0:
        raise ValueError(f"the denominator of Eq. 23 is not positive ({den!r}); increase `xi` (got {xi_!r})")
    c_theta = (nwe * c1 + c * c1 * Psi * c_sf) / den
    # (24)
    eps_Lambda = _jacobian_epsilon(c, d, n1, c2, c3, c_theta, Psi, Lam)
    slack = 0.0
    if lambda_prime == "tight":
        Lambda_prime, c_theta, eps_j = _tight_lambda_prime(eps=eps, w=w, d=d, c=c, n1=n1, Psi=Psi, c1=c1, c2=c2,
                                                           c3=c3, c_sf=c_sf, Lam=Lam, c_theta_paper=c_theta)
        slack = _MARGIN * eps  # Lemma 8 (the noise part) keeps a slack for rounding
    # (17)
    elif eps_Lambda <= (1.0 - w) * eps:
        Lambda_prime, eps_j = 0.0, eps_Lambda
    else:
        Lambda_prime = c * (2.0 * c2 + c3 * c_theta) * Psi / (n1 * (1.0 - w) * eps) - Lam
        step = max(Lam + Lambda_prime, 1e-300) * 2.0 ** -52
        budget = (1.0 - w) * eps
        while Lambda_prime <= 0 or _jacobian_epsilon(c, d, n1, c2, c3, c_theta, Psi, Lam + Lambda_prime) > budget:
            Lambda_prime = max(Lambda_prime, 0.0) + step
            step *= 2.0
        eps_j = eps_Lambda  # Eq. 18 as printed: max(eps - eps_Lambda, omega eps) = omega eps here
    # (18)
    noise_den = c * (c1 + c2 * c_theta) * Psi
    beta = math.inf if noise_den == 0 else (max(eps - eps_j, w * eps) - slack) / noise_den

    return ObjectivePerturbationCalibration(
        epsilon=eps, delta=dlt, omega=w, d=d, c=c, n1=n1, Psi=Psi, c1=c1, c2=c2, c3=c3, xi=xi_,
        Lambda_user=lam_user, c_sf=c_sf, Lambda=Lam, c_theta=c_theta, eps_Lambda=eps_Lambda,
        Lambda_prime=Lambda_prime, beta=beta, lambda_prime_rule=lambda_prime,
    )


def objective_perturbation_profile(calibration: ObjectivePerturbationCalibration,
                                   deltas: Iterable[float] | None = None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    r"""The privacy profile :math:`\delta' \mapsto \epsilon(\delta')` of one calibrated GCON fit.

    The mechanism is fixed by the calibration (:math:`\Lambda + \Lambda'`, :math:`\beta`); Theorem 1's
    proof holds for every :math:`\delta' \in (0, 1)`, not only the one it was calibrated at. Its
    :math:`\delta'` is the probability that some noise column is long,
    :math:`\Pr[\exists j: \|b_j\| > c_{sf}(\delta')/\beta] \le c \cdot \delta'/c` with
    :math:`c_{sf}(\delta') = Q^{-1}(d, \delta'/c)` (the upper regularised incomplete gamma: the norm
    of a column is :math:`\Gamma(d, \beta)`, Eq. 21). Outside that event the first-order condition of
    the exact minimiser bounds every column,
    :math:`(\Lambda + \Lambda')\|\theta_j\| \le c_1 + \|b_j\|/n_1`, so

    .. math::
        c_\theta(\delta') = \frac{c_1 + c_{sf}(\delta')/(\beta n_1)}{\Lambda + \Lambda'},\qquad
        \epsilon(\delta') = \underbrace{c\,d\ln\Big(1 + \frac{(2c_2 + c_3c_\theta)\Psi}
            {d\,n_1(\Lambda + \Lambda')}\Big)}_{\text{Lemma 7}}
            + \underbrace{c\,(c_1 + c_2c_\theta)\Psi\beta}_{\text{Lemma 8}}.

    At the calibrated :math:`\delta` this is at most the calibrated :math:`\epsilon`: the calibration's
    :math:`c_\theta` satisfies Lemma 9 at its :math:`\beta`, so it is at least the one above. With
    ``lambda_prime="tight"`` the two agree up to rounding and the fit spends its whole
    :math:`\epsilon`; with Eq. 17 as printed (``"paper"``) and a raised :math:`\Lambda`, the
    profile can lie orders of magnitude below it (the surplus ridge and noise are wasted).
    The profile lets the accountant compose the fit with other releases by sharing the total
    delta optimally instead of charging the calibrated pair at face value.

    Args:
        calibration: the result of :func:`calibrate_objective_perturbation`.
        deltas: the deltas to tabulate, increasing, in (0, 1) (default :data:`PROFILE_DELTAS`,
            plus the calibrated delta).

    Returns:
        ``(deltas, epsilons)`` as tuples, epsilons non-increasing.
    """
    if not isinstance(calibration, ObjectivePerturbationCalibration):
        raise TypeError(f"`calibration` must be an ObjectivePerturbationCalibration; got {type(calibration).__name__}")
    cal = calibration
    grid = set(PROFILE_DELTAS if deltas is None else (check_delta(d, "deltas") for d in deltas))
    if deltas is None:
        grid.add(cal.delta)
    d_arr = np.array(sorted(grid), dtype=np.float64)
    if math.isinf(cal.beta) or cal.Psi == 0.0:
        return tuple(d_arr.tolist()), tuple(0.0 for _ in d_arr)
    lam = cal.Lambda + cal.Lambda_prime
    from scipy.special import gammainccinv

    c_sf = gammainccinv(cal.d, d_arr / cal.c)
    c_theta = (cal.c1 + c_sf / (cal.beta * cal.n1)) / lam
    eps_jac = cal.c * cal.d * np.log1p((2.0 * cal.c2 + cal.c3 * c_theta) * cal.Psi / (cal.d * cal.n1 * lam))
    eps_noise = cal.c * (cal.c1 + cal.c2 * c_theta) * cal.Psi * cal.beta
    eps = eps_jac + eps_noise
    eps = np.where(np.isfinite(eps), eps, math.inf)
    eps = np.minimum.accumulate(eps)  # (eps1, delta1)-DP implies (eps1, delta2)-DP for delta2 >= delta1
    return tuple(d_arr.tolist()), tuple(float(e) for e in eps)
