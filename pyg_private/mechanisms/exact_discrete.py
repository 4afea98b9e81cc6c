r"""Exact Bernoulli trials and uniform integers from uniform 63-bit words, vectorised.

A float comparison ``torch.rand(n) < p`` realises the probability ``p`` rounded to the uniform's
lattice, not ``p``; for a randomised-response probability :math:`e^\epsilon/(1 + e^\epsilon)` the
realised ratio is then not exactly :math:`e^\epsilon`. Here a trial compares a word with the first
63 bits of :math:`p` (computed in 256-bit arithmetic from the exact, dyadic, float parameters) and,
on a tie (probability :math:`2^{-63}`), keeps comparing further words with further bits of
:math:`p`: the trial is a Bernoulli(:math:`p`) exactly (up to :math:`p`'s 256 bits, i.e. within
:math:`2^{-250}`). Uniform integers use rejection, so every value is exactly equally likely.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Union

import torch
from torch import Tensor

from ..sampling.bernoulli import exact_bernoulli
from ..sampling.tables import mp_context
from ..sampling.words import WORD_BITS, RandomSource

if TYPE_CHECKING:
    import mpmath

__all__ = ["exact_probability", "bernoulli", "uniform_int"]

Probability = Union[float, "mpmath.mpf"]


def exact_probability(formula: Callable[[object], object]) -> "mpmath.mpf":
    """Evaluate ``formula(ctx)`` in a 256-bit ``mpmath`` context, e.g.
    ``exact_probability(lambda m: m.exp(eps) / (1 + m.exp(eps)))``; checks it lies in [0, 1]."""
    ctx = mp_context()
    p = ctx.mpf(formula(ctx))
    if not (0 <= p <= 1):
        raise ValueError(f"a probability must lie in [0, 1]; got {ctx.nstr(p, 10)}")
    return p


def bernoulli(p: Probability, shape: tuple[int, ...] | torch.Size, source: RandomSource) -> Tensor:
    """Independent exact Bernoulli(``p``) trials (``bool``, on ``source.device``). ``p`` is a float
    (taken exactly) or an ``mpmath`` number from :func:`exact_probability`."""
    ctx = mp_context()
    p = ctx.mpf(p)
    if not (0 <= p <= 1):
        raise ValueError(f"`p` must lie in [0, 1]; got {p!r}")
    n = 1
    for s in shape:
        n *= int(s)
    threshold = int(ctx.floor(p * (1 << WORD_BITS)))
    word = source.words(n)
    if threshold >= 1 << WORD_BITS:  # p == 1
        return torch.ones(tuple(shape), dtype=torch.bool, device=word.device)
    out = word < threshold
    tie = word == threshold
    if bool(tie.any()):
        for i in tie.nonzero().squeeze(1).tolist():
            out[i] = exact_bernoulli(p, threshold, WORD_BITS, source, ctx)
    return out.reshape(tuple(shape))


def uniform_int(high: int, shape: tuple[int, ...] | torch.Size, source: RandomSource) -> Tensor:
    """Independent uniform integers in ``[0, high)`` (``int64``), by rejection: exactly uniform."""
    high = int(high)
    if not 1 <= high <= 1 << WORD_BITS:
        raise ValueError(f"`high` must lie in [1, 2^63]; got {high}")
    n = 1
    for s in shape:
        n *= int(s)
    limit = ((1 << WORD_BITS) // high) * high  # words below it map uniformly by the remainder
    out = source.words(n)
    if high & (high - 1) == 0:  # a power of two: the top bits
        shift = WORD_BITS - (high.bit_length() - 1)
        return (out >> shift if shift < WORD_BITS else torch.zeros_like(out)).reshape(tuple(shape))
    bad = (out >= limit).nonzero().squeeze(1) if limit < 1 << WORD_BITS else None
    while bad is not None and bad.numel():
        fresh = source.words(bad.numel())
        out[bad] = fresh
        bad = bad[fresh >= limit]
    return torch.remainder(out, high).reshape(tuple(shape))
