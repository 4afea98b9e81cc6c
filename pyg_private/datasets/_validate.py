"""Argument checks shared by the dataset loaders, splits and generators.

Every check raises a ``ValueError`` (or ``TypeError`` for a wrong type) that names
the argument, the allowed range and the value received; never an ``assert``.
"""
from __future__ import annotations

from numbers import Integral

import torch

from ..accounting.validation import check_probability

__all__ = ["check_count", "check_fraction", "make_generator"]


def check_count(value: object, name: str, *, minimum: int = 0) -> int:
    r"""Checks that :obj:`value` is an integer :obj:`>= minimum`.

    Args:
        value (object): The value to check.
        name (str): The argument name used in the error message.
        minimum (int, optional): The smallest allowed value. (default: :obj:`0`)

    Returns:
        int: :obj:`value` as a Python :obj:`int`.
    """
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"`{name}` must be an integer >= {minimum}; "
                        f"got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}; got {value!r}")
    return int(value)


def check_fraction(value: object, name: str) -> float:
    r"""Checks that :obj:`value` is a real number in :math:`[0, 1]` (the library's
    shared probability check)."""
    return check_probability(value, name)


def make_generator(seed: int | torch.Generator) -> torch.Generator:
    r"""Returns the random number generator that a seeded function draws from.

    Args:
        seed (int or torch.Generator): An integer in :math:`[0, 2^{64})` seeds a
            fresh CPU :class:`torch.Generator`, so that the result depends on
            :obj:`seed` only. A :class:`torch.Generator` is used as given (and
            advanced by the draws).

    Returns:
        torch.Generator: The generator to draw from.
    """
    if isinstance(seed, torch.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, Integral):
        raise TypeError("`seed` must be an integer in [0, 2**64) or a torch.Generator; "
                        f"got {type(seed).__name__} {seed!r}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"`seed` must lie in [0, 2**64); got {seed!r}")
    generator = torch.Generator(device="cpu")
    generator.manual_seed(int(seed))
    return generator
