r"""Node pairs split by a keyed hash, and uniform random pairs drawn without reading the graph.

Under edge-level DP a link-prediction pipeline reads each edge as a message, as a label, or as an
evaluation target. To compose the releases made on these parts in **parallel** (McSherry,
"Privacy Integrated Queries", SIGMOD 2009, Thm. 2) every *possible* edge, present or not, must
belong to one part by a rule fixed without looking at the graph. :class:`LinkSplitRule` is such a
rule: the unordered pair :math:`\{u, v\}` (:math:`u < v`) of a graph on :math:`n` (public) nodes
gets the number

.. math::
    h(u, v) = \mathrm{mix}\big((u n + v) \oplus \mathrm{mix}(\kappa)\big) \,/\, 2^{64}
    \in [0, 1),

with :math:`\mathrm{mix}` the 64-bit finaliser of SplitMix64 (Steele, Lea and Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014), :math:`\kappa` the rule's key, and
lands in the part whose interval of public thresholds holds it: ``message`` :math:`[0, s_m)`,
``train`` :math:`[s_m, s_m + s_t)`, ``val``, ``test``, and no part beyond the sum of the shares
(only the top 53 bits of the hash are compared, exactly, with the thresholds). The part of a pair
depends on :math:`(u, v, n, \kappa)` only, whether the pair is an edge or not. The key need not be
secret; it must not be chosen by looking at the graph.

:func:`sample_pairs` draws uniform random pairs :math:`u \ne v`, optionally restricted to one part
(by rejection on the hash). It never reads the graph, so it does **not** exclude the true edges:
PyG's :func:`~torch_geometric.utils.negative_sampling` does, and so reads the private graph (which
pairs it can return depends on every edge), which no private training or selection may do. A
returned pair is an edge with probability the graph's density; label it 0 anyway.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from torch import Tensor

__all__ = ["LinkSplitRule", "PARTS", "pair_hash", "sample_pairs", "splitmix64"]

#: The parts of a :class:`LinkSplitRule`, in the order of their intervals (index 4: no part).
PARTS = ("message", "train", "val", "test")
_NO_PART = len(PARTS)
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_MAX_NODES = 1 << 31  # pair ids u * n + v stay below 2**62; the accountant names edges with 31-bit ids


def _signed(value: int) -> int:
    """The int64 with the same 64 bits as ``value`` (in ``[0, 2**64)``)."""
    return value - (1 << 64) if value >= (1 << 63) else value


def _shr(x: Tensor, s: int) -> Tensor:
    """Logical right shift of int64 words (torch's ``>>`` is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def splitmix64(x: Tensor) -> Tensor:
    """SplitMix64's finaliser on int64 words read as unsigned 64-bit integers (multiplications wrap
    modulo :math:`2^{64}`, as two's complement arithmetic does); returns the mixed words as int64."""
    z = x + _signed(_GOLDEN)
    z = (z ^ _shr(z, 30)) * _signed(_MUL1)
    z = (z ^ _shr(z, 27)) * _signed(_MUL2)
    return z ^ _shr(z, 31)


def _mix_key(key: int) -> int:
    """``mix(key)`` as an int64 (scalar, computed with Python integers)."""
    z = (key + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK64
    return _signed(z ^ (z >> 31))


def _as_int(value: Any, name: str) -> int:
    """``value`` as an int (``TypeError`` for a bool or a non-integer)."""
    if isinstance(value, bool):
        raise TypeError(f"`{name}` must be an int; got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"`{name}` must be an int; got {type(value).__name__}") from None


def _check_num_nodes(num_nodes: Any) -> int:
    n = _as_int(num_nodes, "num_nodes")
    if not 2 <= n < _MAX_NODES:
        raise ValueError(f"`num_nodes` must lie in [2, 2**31); got {n}")
    return n


def check_key(key: Any) -> int:
    """A split key: an int in ``[0, 2**64)``."""
    if isinstance(key, bool) or not isinstance(key, int):
        raise TypeError(f"`key` must be an int in [0, 2**64); got {type(key).__name__}")
    if not 0 <= key <= _MASK64:
        raise ValueError(f"`key` must be an int in [0, 2**64); got {key!r}")
    return int(key)


def pair_hash(pairs: Tensor, num_nodes: int, key: int) -> Tensor:
    """The top 53 bits of the keyed hash of each unordered pair of ``pairs`` (``[2, P]``, any
    orientation), as int64 in ``[0, 2**53)``; divide by ``2**53`` for :math:`h(u, v) \\in [0, 1)`."""
    n = _check_num_nodes(num_nodes)
    key = check_key(key)
    if not isinstance(pairs, Tensor) or pairs.dim() != 2 or pairs.size(0) != 2:
        raise ValueError(f"`pairs` must be a [2, P] tensor of node ids; got {getattr(pairs, 'shape', pairs)!r}")
    p = pairs.long()
    lo, hi = torch.minimum(p[0], p[1]), torch.maximum(p[0], p[1])
    words = splitmix64((lo * n + hi) ^ _mix_key(key))
    return _shr(words, 11)


def _check_shares(shares: Any) -> tuple[float, float, float, float]:
    try:
        values = tuple(shares)
    except TypeError:
        raise TypeError(f"`shares` must be four numbers (message, train, val, test); got {shares!r}") from None
    if len(values) != len(PARTS):
        raise ValueError(f"`shares` must be four numbers (message, train, val, test); got {shares!r}")
    out = []
    for name, value in zip(PARTS, values):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
            raise ValueError(f"the share of part {name!r} must be a number in (0, 1) (a share of all node pairs, "
                             f"not a count of edges); got {value!r}")
        out.append(float(value))
    if sum(out) > 1.0 + 1e-12:
        raise ValueError(f"the shares must sum to at most 1; got {' + '.join(f'{s:g}' for s in out)} = {sum(out):g}")
    return tuple(out)  # type: ignore[return-value]


@dataclass(frozen=True)
class LinkSplitRule:
    r"""The keyed-hash partition of all unordered node pairs into ``message``, ``train``, ``val``
    and ``test`` (see the module notes). ``key`` is an int in ``[0, 2**64)``; ``shares`` the four
    public shares, each in (0, 1), summing to at most 1 (pairs beyond the sum are in no part)."""

    key: int
    shares: tuple[float, float, float, float]

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", check_key(self.key))
        object.__setattr__(self, "shares", _check_shares(self.shares))

    @property
    def thresholds(self) -> tuple[float, ...]:
        """The upper ends of the parts' intervals, scaled to ``[0, 2**53]`` (exact in float64)."""
        cum, out = 0.0, []
        for share in self.shares:
            cum += share
            out.append(math.ldexp(min(cum, 1.0), 53))
        return tuple(out)

    def index(self, part: Union[str, int]) -> int:
        """The index of ``part`` (a name of :data:`PARTS` or its index)."""
        if isinstance(part, str):
            if part not in PARTS:
                raise ValueError(f"`part` must be one of {PARTS}; got {part!r}")
            return PARTS.index(part)
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < len(PARTS):
            raise ValueError(f"`part` must be one of {PARTS} or its index; got {part!r}")
        return int(part)

    def part_of(self, pairs: Tensor, num_nodes: int) -> Tensor:
        """The part index (0 ``message`` ... 3 ``test``, 4 none) of every pair of ``pairs`` ``[2, P]``."""
        h = pair_hash(pairs, num_nodes, self.key).to(torch.float64)  # < 2**53: exact
        bounds = torch.tensor(self.thresholds, dtype=torch.float64, device=h.device)
        return torch.bucketize(h, bounds, right=True)

    @classmethod
    def of(cls, split: Any) -> "LinkSplitRule":
        """The rule of ``split``: a :class:`LinkSplitRule`, an object with a ``rule`` attribute
        (:class:`~pyg_private.transforms.PrivateLinkSplit`), or a ``Data`` made by it (which
        carries ``split_key`` and ``split_shares``)."""
        if isinstance(split, LinkSplitRule):
            return split
        rule = getattr(split, "rule", None)
        if isinstance(rule, LinkSplitRule):
            return rule
        key, shares = _attr(split, "split_key"), _attr(split, "split_shares")
        if key is None or shares is None:
            raise ValueError("`split` carries no split rule: pass a LinkSplitRule, a PrivateLinkSplit, or data made "
                             "by PrivateLinkSplit (with `split_key` and `split_shares`)")
        return cls(int(key), tuple(float(s) for s in shares))


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except (AttributeError, KeyError, RuntimeError):
        return None


def sample_pairs(num_nodes: int, count: int, *, part: Union[str, int, None] = None, split: Any = None,
                 generator: Optional[torch.Generator] = None, num_src: Optional[int] = None) -> Tensor:
    r"""``count`` independent uniform random unordered pairs :math:`\{u, v\}`, :math:`u \ne v`, of
    ``num_nodes`` nodes, as a ``[2, count]`` LongTensor with ``u < v`` (drawn with replacement).

    **Bipartite graphs** (``num_src``): the nodes ``[0, num_src)`` are one side (e.g. users) and
    ``[num_src, num_nodes)`` the other (items), and the pairs are uniform among the
    ``num_src * (num_nodes - num_src)`` pairs across the sides (``u < num_src <= v``).

    With ``part`` (a name of :data:`PARTS`) and ``split`` (a :class:`LinkSplitRule`, a
    :class:`~pyg_private.transforms.PrivateLinkSplit` or data made by it) the pairs are uniform
    among the pairs of that part: uniform pairs are drawn and those of other parts rejected, in
    batches, keeping the accepted ones in the order drawn.

    The graph is never read: true edges are **not** excluded (unlike PyG's
    :func:`~torch_geometric.utils.negative_sampling`, whose output depends on the private edges).
    ``generator`` makes the draws reproducible (and its device is the output's).
    """
    n = _check_num_nodes(num_nodes)
    count = _as_int(count, "count")
    if count < 0:
        raise ValueError(f"`count` must be >= 0; got {count}")
    rule, index = None, None
    if part is not None:
        if split is None:
            raise ValueError("`part` needs the `split` whose part it is (a LinkSplitRule, a PrivateLinkSplit or its "
                             "output data)")
        rule = LinkSplitRule.of(split)
        index = rule.index(part)
    elif split is not None:
        raise ValueError("`split` is only used with `part`")
    if num_src is not None:
        num_src = _as_int(num_src, "num_src")
        if not 0 < num_src < n:
            raise ValueError(f"`num_src` must lie in [1, num_nodes - 1] = [1, {n - 1}] (both sides non-empty); "
                             f"got {num_src}")
    device = generator.device if generator is not None else torch.device("cpu")
    share = 1.0 if rule is None else rule.shares[index]
    kept: list[Tensor] = []
    got = 0
    while got < count:
        size = int(math.ceil((count - got) / share * 1.1)) + 64
        if num_src is None:
            u = torch.randint(0, n, (size,), generator=generator, device=device)
            v = torch.randint(0, n - 1, (size,), generator=generator, device=device)
            v = v + (v >= u).long()  # uniform over the n - 1 nodes other than u
            pairs = torch.stack([torch.minimum(u, v), torch.maximum(u, v)])
        else:  # one node of each side, independently uniform
            u = torch.randint(0, num_src, (size,), generator=generator, device=device)
            v = torch.randint(num_src, n, (size,), generator=generator, device=device)
            pairs = torch.stack([u, v])
        if rule is not None:
            pairs = pairs[:, rule.part_of(pairs, n) == index]
        kept.append(pairs)
        got += pairs.size(1)
    if not kept:
        return torch.empty(2, 0, dtype=torch.long, device=device)
    return torch.cat(kept, dim=1)[:, :count]
