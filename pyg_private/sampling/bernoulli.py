"""Exact Bernoulli trials of any probability given in 256-bit arithmetic, from uniform random words:
the comparison ``U < p`` read one 63-bit word of ``U`` at a time, until the words differ from ``p``'s
bits (the sampler's ties and undecided acceptances, and the exact trials of the mechanisms)."""
from __future__ import annotations

from .tables import mp_context
from .words import WORD_BITS, RandomSource

__all__ = ["exact_bernoulli"]


def exact_bernoulli(p, known: int, known_bits: int, source: RandomSource, ctx=None) -> bool:
    """Whether ``U < p`` for a uniform ``U`` whose first ``known_bits`` bits are the integer ``known``,
    drawing further 63-bit words from ``source`` until the comparison is decided (``p`` an mpmath
    number in [0, 1]: a dyadic rational, so the loop ends once its bits are exhausted)."""
    ctx = ctx or mp_context()
    t = ctx.mpf(p) * (1 << known_bits)
    while True:
        f = int(ctx.floor(t))
        if known != f:
            return known < f
        t = t - f  # exact: the fraction of a dyadic number
        if t == 0:  # U >= p; equality has probability 0
            return False
        t = t * (1 << WORD_BITS)
        known = int(source.words(1)[0])
