r"""The noise of GCON's objective perturbation (Wei et al., "GCON", arXiv:2407.05034, Alg. 2, Lemma 6).

Each of the c columns :math:`b_j \in \mathbb R^d` of :math:`B` is drawn independently with density

.. math:: p(b) \propto e^{-\beta\|b\|_2},

as a radius :math:`a \sim \mathrm{Gamma}(\text{shape} = d, \text{rate} = \beta)` (density
:math:`a^{d-1}e^{-\beta a}\beta^d/(d-1)!`, mean :math:`d/\beta`, variance :math:`d/\beta^2`) times a
direction uniform on the unit sphere (a normalised standard Gaussian, Lemma 6). :math:`\beta` comes
from :func:`pyg_private.accounting.objective_perturbation.calibrate_objective_perturbation` (Eq. 18).

B is drawn **once**, before the optimisation, and enters the loss as :math:`\frac1{n_1}\langle B,
\Theta\rangle` (Eq. 13); it is never added to features, messages or gradients. Never persist or log
B (or the seed of a generator that drew it) next to the released model: knowing B undoes the
perturbation. A seeded generator makes experiments reproducible and voids the guarantee.

**Not floating-point safe.** This is the floating-point sampler of
``PerturbedAPPRConv(sampler="float")`` (``exponential_`` sums and ``randn``), kept for benchmarks
and audits. The guarantee of objective perturbation rests on a change of variables over B's
continuous density, which rounding B to a grid would break; the safe default instead draws B from
exact integer samplers coupled with the continuous law
(:mod:`pyg_private.mechanisms.coupled_objective_noise`) and releases the head through a certified
approximate-minimiser argument (:mod:`pyg_private.accounting.approximate_minimizer`).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..accounting.validation import check_positive, check_positive_int
from ._noise import check_generator, float_generator

__all__ = ["sample_objective_noise"]


def sample_objective_noise(dim: int, num_classes: int, beta: float, generator: torch.Generator | None = None,
                           dtype: torch.dtype = torch.float64, *, device: torch.device | str | None = None) -> Tensor:
    r"""Draw :math:`B \in \mathbb R^{d \times c}` of GCON's Alg. 2: independent columns with density
    :math:`\propto e^{-\beta\|b_j\|_2}`.

    The radius of each column is :math:`\mathrm{Gamma}(d, \text{rate}=\beta)`, drawn exactly as the
    sum of :math:`d` independent :math:`\mathrm{Exp}(\beta)` variables (an Erlang variable; ``d``
    is an integer), so that ``generator`` is honoured (``torch._standard_gamma`` takes no
    generator). The direction is :math:`u/\|u\|_2` with :math:`u \sim N(0, I_d)`. The draws are in
    float64 and cast to ``dtype`` at the end.

    Args:
        dim: :math:`d`, the width of the features Z (``>= 1``).
        num_classes: :math:`c`, the number of columns (``>= 1``).
        beta: the rate :math:`\beta > 0` (Eq. 18). ``math.inf`` (no privacy noise needed,
            :math:`\Psi = 0`) returns zeros.
        generator: optional ``torch.Generator`` (reproducible; see the module's warning).
        dtype: floating dtype of the result (default float64).
        device: device of the result; defaults to the generator's device, else the CPU.

    Returns:
        A ``[dim, num_classes]`` tensor whose column j is :math:`b_j`.
    """
    d = check_positive_int(dim, "dim")
    c = check_positive_int(num_classes, "num_classes")
    b = check_positive(beta, "beta", allow_inf=True)
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"`dtype` must be a floating torch dtype; got {dtype!r}")
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    device = torch.device(device)
    check_generator(generator, device)
    if math.isinf(b):
        return torch.zeros((d, c), dtype=dtype, device=device)
    generator = float_generator(generator, device)  # never torch's global generator

    f64 = torch.float64
    radius = torch.empty((d, c), dtype=f64, device=device).exponential_(1.0, generator=generator).sum(dim=0)
    u = torch.randn((d, c), dtype=f64, device=device, generator=generator)
    norm = u.norm(dim=0)
    while bool((norm == 0).any()):  # probability ~0; redraw such columns so the direction is defined
        bad = norm == 0
        u[:, bad] = torch.randn((d, int(bad.sum())), dtype=f64, device=device, generator=generator)
        norm = u.norm(dim=0)
    return (u * (radius / (b * norm))).to(dtype)
