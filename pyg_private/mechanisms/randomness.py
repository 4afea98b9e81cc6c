r"""Where the library's random bits come from: a seeded generator, a fast OS-seeded stream, or the
operating system's cryptographically secure generator (``secure_mode``).

Every safe sampler in :mod:`pyg_private.mechanisms` consumes **uniform 63-bit words** (``int64``
values in :math:`[0, 2^{63})`) from a :class:`RandomSource` and turns them into exact samples with
integer arithmetic, so the guarantee rests on two things only: the exactness of the samplers and the
unpredictability of the words. Three sources, chosen per component:

* ``generator=`` a seeded :class:`torch.Generator`: reproducible, for tests and experiments. Whoever
  knows the seed can subtract the noise: **it voids the privacy guarantee**.
* the default (``secure_mode=False``, no generator): NumPy's PCG64 on the CPU (a private
  ``torch.Generator`` on other devices), seeded from :func:`os.urandom` afresh for every release,
  never from ``torch.manual_seed``.
  Statistically excellent and fast, but not a cryptographic generator: an attacker who observes
  enough of its raw output could in principle predict the rest.
* ``secure_mode=True``: every word from :func:`os.urandom` (the kernel's ChaCha20-based CSPRNG on
  Linux), never from a seedable generator; a seeded ``generator`` is then refused. Slower (about
  20 ns a word here). Set it per component, or process-wide with :func:`set_secure_mode` /
  :func:`secure_mode` (the process-wide default is off, as in Opacus).
"""
from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Optional

import numpy as np
import torch
from torch import Tensor

__all__ = ["RandomSource", "set_secure_mode", "get_secure_mode", "secure_mode", "resolve_secure_mode",
           "run_tasks", "WORD_BITS"]

#: Bits in every word a :class:`RandomSource` returns (``int64`` in ``[0, 2**WORD_BITS)``).
WORD_BITS = 63
_WORD_MASK = (1 << WORD_BITS) - 1

_lock = threading.Lock()
_secure_default = False


def set_secure_mode(enabled: bool) -> None:
    """Set the process-wide default of ``secure_mode`` for components that are given ``None``."""
    global _secure_default
    if not isinstance(enabled, bool):
        raise TypeError(f"`enabled` must be True or False; got {enabled!r}")
    with _lock:
        _secure_default = enabled


def get_secure_mode() -> bool:
    """The process-wide default of ``secure_mode``."""
    return _secure_default


@contextlib.contextmanager
def secure_mode(enabled: bool = True) -> Iterator[None]:
    """Context manager: ``with secure_mode(): ...`` runs with the process-wide default set."""
    previous = get_secure_mode()
    set_secure_mode(enabled)
    try:
        yield
    finally:
        set_secure_mode(previous)


def resolve_secure_mode(secure: Optional[bool], generator: Optional[torch.Generator]) -> bool:
    """A component's effective ``secure_mode``: its own setting, else the process default; a seeded
    ``generator`` cannot be combined with it (``ValueError``)."""
    if secure is not None and not isinstance(secure, bool):
        raise TypeError(f"`secure_mode` must be True, False or None; got {secure!r}")
    effective = get_secure_mode() if secure is None else secure
    if effective and generator is not None:
        raise ValueError("`secure_mode` draws every random bit from the operating system; a seeded `generator` "
                         "would make the noise predictable: pass one or the other (secure_mode=False with a "
                         "generator is for reproducible experiments and voids the guarantee)")
    return effective


def run_tasks(task: Callable[[int], None], count: int, device: torch.device) -> None:
    """Run ``task(0), ..., task(count - 1)`` on ``torch.get_num_threads()`` threads on the CPU (in
    order, in this thread, elsewhere). The tasks must be independent; give each its own
    :meth:`RandomSource.spawn` child so that the results do not depend on the thread count."""
    workers = min(torch.get_num_threads(), count) if torch.device(device).type == "cpu" else 1
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(task, range(count)))  # list(): re-raise a task's exception here
    else:
        for i in range(count):
            task(i)


class RandomSource:
    """Uniform 63-bit words on a device, from one of the three sources above.

    Args:
        device: where the words are returned.
        generator (torch.Generator, optional): a seeded generator (reproducible; voids the guarantee).
        secure (bool): draw every word from :func:`os.urandom`.

    Create one per release: the default source seeds a fresh PCG64 stream from the OS.
    """

    def __init__(self, device: torch.device | str = "cpu", *, generator: Optional[torch.Generator] = None,
                 secure: bool = False) -> None:
        self.device = torch.device(device)
        if generator is not None and secure:
            raise ValueError("a seeded `generator` cannot be secure")
        if generator is not None and generator.device.type != self.device.type:
            raise ValueError(f"`generator` lives on {generator.device} but the noise is drawn on {self.device}; "
                             "create the generator on the input's device")
        self.generator = generator
        self.secure = bool(secure)
        self._numpy = None
        if generator is None and not secure:
            if self.device.type == "cpu":
                self._numpy = np.random.Generator(np.random.PCG64(int.from_bytes(os.urandom(32), "little")))
            else:  # a private generator on the device, seeded from the OS (never torch.manual_seed's)
                self._device_generator = torch.Generator(self.device)
                self._device_generator.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)

    @property
    def kind(self) -> str:
        """``"secure"``, ``"seeded"`` or ``"default"``."""
        if self.secure:
            return "secure"
        return "seeded" if self.generator is not None or getattr(self, "_seeded", False) else "default"

    def spawn(self, count: int) -> list["RandomSource"]:
        """``count`` independent child sources of the same kind (for parallel work): secure children
        read the OS; seeded children are PCG64 streams seeded from this source's words (so the
        children, hence the results, are reproducible); default children are fresh OS-seeded streams."""
        if self.secure:
            return [RandomSource(self.device, secure=True) for _ in range(count)]
        if self.generator is None:
            return [RandomSource(self.device) for _ in range(count)]
        seeds = self.words(2 * count).tolist()
        children = []
        for i in range(count):
            child = RandomSource(self.device)
            if child._numpy is not None:
                child._numpy = np.random.Generator(np.random.PCG64((seeds[2 * i] << 63) | seeds[2 * i + 1]))
                child._seeded = True
            else:
                gen = torch.Generator(self.device).manual_seed(seeds[2 * i])
                child = RandomSource(self.device, generator=gen)
            children.append(child)
        return children

    def words(self, n: int) -> Tensor:
        """``n`` independent uniform integers in ``[0, 2**63)`` (``int64``, on the source's device)."""
        n = int(n)
        if self.secure:
            raw = np.frombuffer(os.urandom(8 * n), dtype=np.int64)
            out = torch.from_numpy(raw & np.int64(_WORD_MASK))
            return out if self.device.type == "cpu" else out.to(self.device)
        if self._numpy is not None:
            raw = self._numpy.bit_generator.random_raw(n)  # uint64
            np.right_shift(raw, np.uint64(1), out=raw)
            return torch.from_numpy(raw.view(np.int64))
        generator = self.generator if self.generator is not None else getattr(self, "_device_generator", None)
        return torch.empty(n, dtype=torch.int64, device=self.device).random_(generator=generator)

    def __repr__(self) -> str:
        return f"RandomSource(kind={self.kind!r}, device={str(self.device)!r})"
