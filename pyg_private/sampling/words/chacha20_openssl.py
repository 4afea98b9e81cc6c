r"""The ChaCha20 keystream on the CPU, through OpenSSL: the words of the default CPU source and of
``secure_mode``.

ChaCha20 is the stream cipher of RFC 8439 (Bernstein, "ChaCha, a variant of Salsa20", 2008); its
keystream under a secret key is indistinguishable from uniform bytes, the construction of the
operating system's own generator (Linux's ``getrandom`` is a ChaCha20 stream keyed from the entropy
pool), at about 1 ns a 63-bit word here against 13 to 20 ns for :func:`os.urandom` itself.
:class:`_ChaCha20Stream` draws a 256-bit key and a 96-bit nonce from :func:`os.urandom` (the nonce
first), starts the block counter at 0, and draws a new key and nonce after :data:`_REKEY_BYTES`
bytes, long before the 32-bit block counter wraps. The cipher comes from the ``cryptography``
package's OpenSSL binding, imported on the first stream or availability check, not with this
module (:data:`Cipher` is ``None`` without it; the sources then read :func:`os.urandom`).
:mod:`~pyg_private.sampling.words.chacha20_device` computes the same keystream on a device, bit for
bit, re-keying at the same byte.
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["secure_stream_available"]


def _cipher() -> tuple:
    """``(Cipher, algorithms)``: the module attributes, set from ``cryptography`` on the first call
    (``None`` without it); later calls, and a test that patches them, read the attributes."""
    namespace = globals()
    if "Cipher" not in namespace:
        try:  # ChaCha20 from OpenSSL: the fast secure stream (optional; os.urandom otherwise)
            from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
        except ImportError:  # pragma: no cover - depends on the installation
            Cipher = algorithms = None
        namespace.setdefault("algorithms", algorithms)
        namespace.setdefault("Cipher", Cipher)
    return namespace["Cipher"], namespace["algorithms"]


def __getattr__(name: str):
    # ``Cipher`` and ``algorithms`` are resolved on first access (PEP 562)
    if name in ("Cipher", "algorithms"):
        return _cipher()[name == "algorithms"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_ZEROS = bytes(1 << 20)  # the plaintext of the keystream, fed in pieces of at most 1 MiB
#: Bytes of keystream under one key: a fresh key long before ChaCha20's 32-bit block counter (2^38
#: bytes) wraps. Read when a key is drawn, by this stream and by the device stream.
_REKEY_BYTES = 1 << 37


class _ChaCha20Stream:
    """The keystream of ChaCha20 under a key and nonce from :func:`os.urandom` (block counter from 0),
    re-keyed from :func:`os.urandom` after :data:`_REKEY_BYTES` bytes. The key lives only inside the
    cipher context, which OpenSSL wipes when it is freed."""

    def __init__(self) -> None:
        self._rekey()

    def _rekey(self) -> None:
        cipher, algorithms = _cipher()
        nonce = bytes(4) + os.urandom(12)  # 32-bit block counter 0, then the 96-bit nonce (RFC 8439)
        self._encryptor = cipher(algorithms.ChaCha20(os.urandom(32), nonce), mode=None).encryptor()
        self._left = _REKEY_BYTES

    def fill(self, out: np.ndarray) -> None:
        """Overwrite the bytes of the contiguous array ``out`` with keystream."""
        view = memoryview(out).cast("B")
        pos, zeros = 0, memoryview(_ZEROS)
        while pos < len(view):
            k = min(len(zeros), len(view) - pos, self._left)
            self._encryptor.update_into(zeros[:k], view[pos:pos + k])
            pos += k
            self._left -= k
            if self._left == 0:
                self._rekey()


def secure_stream_available() -> bool:
    """Whether ``secure_mode`` uses the ChaCha20 stream (the ``cryptography`` package is installed);
    otherwise it reads every word from :func:`os.urandom` (secure too, 10-20x slower)."""
    return _cipher()[0] is not None
