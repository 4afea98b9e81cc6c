r"""Poisson sampling of examples for DP-SGD, exact in integer arithmetic, and the public plan of a run.

**Poisson sampling** (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016, Sec. 3.1;
the sampling the subsampled Gaussian analysis of Mironov, Talwar and Zhang, "Rényi Differential
Privacy of the Sampled Gaussian Mechanism", 2019, assumes): at every step each example is in the
batch **independently** with probability :math:`q`, so the batch size is random,
:math:`B \sim \mathrm{Binomial}(N, q)`. A shuffle cut into fixed-size batches is not this mechanism
and gets no Poisson amplification from the analysis.

**Exact trials.** Example :math:`i` is in the batch when its uniform 63-bit word
:math:`W_i \in [0, 2^{63})` (from a :class:`~pyg_private.sampling.RandomSource`) is below
:math:`t = \lfloor q\, 2^{63} \rfloor`, an integer comparison: the trial has probability
:math:`t / 2^{63} \le q` exactly, equal to :math:`q` whenever :math:`q\,2^{63}` is an integer (every
float64 :math:`q \ge 2^{-10}`), and below it by less than :math:`2^{-63}` otherwise. The privacy
loss of the subsampled Gaussian mechanism does not decrease with the rate, so accounting at
:math:`q` covers the rate run. (A float comparison ``torch.rand(N) < q`` has probability
:math:`\lceil q\,2^{24} \rceil / 2^{24}` in float32, which may exceed :math:`q`.)

**The plan** (:func:`dp_sgd_plan`) is computed from public quantities only: a declared number of
examples :math:`N` (never the length of the private dataset, which differs between neighbours under
add/remove) and an expected batch size :math:`b`: :math:`m = \lceil N / b \rceil` steps per epoch,
rate :math:`q = 1/m`, :math:`T = \text{epochs}\cdot m` steps, expected batch :math:`qN`
(the normaliser of the noisy sum).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import torch
from torch import Tensor

from ..accounting.validation import check_positive_int, check_probability
from ..sampling.words import WORD_BITS, RandomSource

__all__ = ["DPSGDPlan", "dp_sgd_plan", "poisson_threshold", "poisson_mask", "poisson_indices"]


class DPSGDPlan(NamedTuple):
    """``(sample_rate, steps, expected_batch)`` of a DP-SGD run (public quantities only)."""

    sample_rate: float
    steps: int
    expected_batch: float


def dp_sgd_plan(*, num_examples: int, batch_size: int, epochs: int) -> DPSGDPlan:
    r"""The plan of a DP-SGD run over ``num_examples`` **declared** examples: ``m = ceil(N / b)``
    steps per epoch (``b = min(batch_size, N)``), rate ``1 / m``, ``epochs * m`` steps, expected batch
    ``N / m`` (see the module notes). Raises ``ValueError``/``TypeError`` on a non-positive count."""
    n = check_positive_int(num_examples, "num_examples")
    b = check_positive_int(batch_size, "batch_size")
    e = check_positive_int(epochs, "epochs")
    per_epoch = math.ceil(n / min(b, n))
    return DPSGDPlan(1.0 / per_epoch, e * per_epoch, n / per_epoch)


def poisson_threshold(rate: float) -> int:
    r""":math:`\lfloor q\,2^{63} \rfloor`, computed exactly from the float ``rate`` (a dyadic rational)."""
    q = check_probability(rate, "sample_rate", low_open=True)
    return min(int(Fraction(q) * (1 << WORD_BITS)), 1 << WORD_BITS)


def poisson_mask(num_items: int, rate: float, source: RandomSource) -> Tensor:
    """A boolean mask of ``num_items`` independent exact Bernoulli(``rate``) trials (see the module
    notes), one 63-bit word of ``source`` per item, on ``source``'s device. ``rate == 1`` selects all."""
    n = int(num_items)
    if n < 0:
        raise ValueError(f"`num_items` must be >= 0; got {num_items!r}")
    t = poisson_threshold(rate)
    words = source.words(n)  # drawn even at rate 1: the stream advances by the same amount
    if t >= (1 << WORD_BITS):
        return torch.ones(n, dtype=torch.bool, device=words.device)
    return words < t


def poisson_indices(num_items: int, rate: float, source: RandomSource) -> Tensor:
    """The indices (``int64``, increasing) of the items :func:`poisson_mask` selects."""
    return poisson_mask(num_items, rate, source).nonzero().view(-1)
