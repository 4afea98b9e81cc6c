r"""Where the library's random bits come from: a seeded generator, a fast OS-seeded stream, or a
cryptographically secure one (``secure_mode``).

Every safe sampler of the package (:mod:`pyg_private.sampling` and the mechanisms built on it)
consumes **uniform 63-bit words** (``int64`` values in :math:`[0, 2^{63})`) from a
:class:`RandomSource` and turns them into exact samples with integer arithmetic, so the guarantee
rests on two things only: the exactness of the samplers and the unpredictability of the words.
Three sources, chosen per component:

* ``generator=`` a seeded :class:`torch.Generator`: reproducible, for tests and experiments. Whoever
  knows the seed can subtract the noise: **it voids the privacy guarantee**.
* the default (``secure_mode=False``, no generator): on the CPU the same ChaCha20 stream as
  ``secure_mode`` below (it is also the fastest source here: 1.3 ns a word against 1.9 ns for
  NumPy's PCG64), or PCG64 seeded from :func:`os.urandom` without the ``cryptography`` package; on
  CUDA the same ChaCha20 stream computed on the device
  (:class:`~pyg_private.sampling.words.chacha20_device.DeviceChaCha20Stream`); on other devices a
  private ``torch.Generator`` seeded from :func:`os.urandom`. Fresh for every release, never seeded
  from ``torch.manual_seed``. PCG64 and torch's generators are statistically
  excellent but not cryptographic: an attacker who observes enough of their raw output could in
  principle predict the rest.
* ``secure_mode=True``: the ChaCha20 stream cipher's keystream (RFC 8439, through the
  ``cryptography`` package's OpenSSL binding: :mod:`~pyg_private.sampling.words.chacha20_openssl`)
  under a 256-bit key and a 96-bit nonce drawn from :func:`os.urandom` for every source, a new key
  after every 2^37 bytes; the same construction as the operating system's own generator (Linux's
  ``getrandom`` is a ChaCha20 stream keyed from the entropy pool), about 1 ns a word here against
  13 to 20 ns for :func:`os.urandom` itself, which is used when ``cryptography`` is not installed.
  What ``secure_mode`` adds to the default: never a seedable generator on any device (a seeded
  ``generator`` is refused, and there is no fallback to PCG64; on CUDA the keystream is computed on
  the device, bit for bit the CPU stream's for the same key, with or without ``cryptography``; on
  other devices the words are drawn on the CPU and copied). Set it per component, or process-wide
  with :func:`set_secure_mode` / :func:`secure_mode`
  (:mod:`~pyg_private.sampling.words.secure_setting`; the process-wide default is off, as in
  Opacus).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from . import chacha20_openssl

__all__ = ["RandomSource", "WORD_BITS"]

#: Bits in every word a :class:`RandomSource` returns (``int64`` in ``[0, 2**WORD_BITS)``).
WORD_BITS = 63
_WORD_MASK = (1 << WORD_BITS) - 1


class RandomSource:
    """Uniform 63-bit words on a device, from one of the three sources above.

    Args:
        device: where the words are returned.
        generator (torch.Generator, optional): a seeded generator (reproducible; voids the guarantee).
        secure (bool): draw every word from a ChaCha20 stream keyed from :func:`os.urandom` (or from
            :func:`os.urandom` itself without the ``cryptography`` package).

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
        self._numpy = self._stream = self._device_stream = None
        if generator is not None:
            return
        if self.device.type == "cuda":  # the ChaCha20 keystream made on the device (Triton, else torch)
            # imported here, not at the top: it imports triton, on the first CUDA source only
            from .chacha20_device import DeviceChaCha20Stream
            self._device_stream = DeviceChaCha20Stream(self.device)
        elif chacha20_openssl.Cipher is not None and (self.secure or self.device.type == "cpu"):
            self._stream = chacha20_openssl._ChaCha20Stream()  # words made on the CPU (and copied to another device)
        elif not self.secure:
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
        have their own keys from the OS; seeded children are PCG64 streams seeded from this source's words (so the
        children, hence the results, are reproducible); default children are fresh OS-seeded streams."""
        if self.secure:
            return [RandomSource(self.device, secure=True) for _ in range(count)]
        if self.generator is None:
            return [RandomSource(self.device) for _ in range(count)]
        seeds = self.words(2 * count).tolist()
        children = []
        for i in range(count):
            if self.device.type == "cpu":
                child = RandomSource(self.device, generator=torch.Generator())  # no OS-keyed stream made
                child.generator = None
                child._numpy = np.random.Generator(np.random.PCG64((seeds[2 * i] << 63) | seeds[2 * i + 1]))
                child._seeded = True
            else:
                gen = torch.Generator(self.device).manual_seed(seeds[2 * i])
                child = RandomSource(self.device, generator=gen)
            children.append(child)
        return children

    def words(self, n: int, out: Optional[Tensor] = None) -> Tensor:
        """``n`` independent uniform integers in ``[0, 2**63)`` (``int64``, on the source's device),
        written into ``out`` (a contiguous ``int64`` tensor of ``n`` entries on that device) when
        given: the same words as without it."""
        n = int(n)
        if out is not None:
            if (out.dtype != torch.int64 or out.numel() != n or not out.is_contiguous()
                    or out.device.type != self.device.type):
                raise ValueError(f"`out` must be a contiguous int64 tensor of {n} entries on {self.device}")
            if self._device_stream is not None:
                return self._device_stream.fill(out)
            if self._stream is not None and self.device.type == "cpu":  # the keystream straight into `out`
                self._stream.fill(out.numpy())
                return out.bitwise_and_(_WORD_MASK)
            return out.copy_(self.words(n))
        if self._device_stream is not None:
            return self._device_stream.fill(torch.empty(n, dtype=torch.int64, device=self.device))
        if self._numpy is not None:
            raw = self._numpy.bit_generator.random_raw(n)  # uint64
            np.right_shift(raw, np.uint64(1), out=raw)
            return torch.from_numpy(raw.view(np.int64))
        if self._stream is not None or self.secure:
            if self._stream is not None:
                out = torch.empty(n, dtype=torch.int64)
                self._stream.fill(out.numpy())
                out.bitwise_and_(_WORD_MASK)
            else:
                out = torch.from_numpy(np.frombuffer(os.urandom(8 * n), dtype=np.int64) & np.int64(_WORD_MASK))
            return out if self.device.type == "cpu" else out.to(self.device)
        generator = self.generator if self.generator is not None else getattr(self, "_device_generator", None)
        return torch.empty(n, dtype=torch.int64, device=self.device).random_(generator=generator)

    def __repr__(self) -> str:
        return f"RandomSource(kind={self.kind!r}, device={str(self.device)!r})"
