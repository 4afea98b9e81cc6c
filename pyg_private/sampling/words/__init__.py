"""Uniform random 63-bit words, the only randomness the exact samplers consume.

* :mod:`~pyg_private.sampling.words.sources`: :class:`RandomSource`, the three kinds of source (seeded,
  default, secure) and how they are chosen per device;
* :mod:`~pyg_private.sampling.words.secure_setting`: ``secure_mode``, per component or process-wide;
* :mod:`~pyg_private.sampling.words.chacha20_openssl`: the ChaCha20 keystream on the CPU (OpenSSL);
* :mod:`~pyg_private.sampling.words.chacha20_device`: the same keystream computed on a device (Triton,
  or torch operations), bit for bit.
"""
from .chacha20_openssl import secure_stream_available
from .secure_setting import get_secure_mode, resolve_secure_mode, secure_mode, set_secure_mode
from .sources import WORD_BITS, RandomSource

__all__ = ["RandomSource", "WORD_BITS", "set_secure_mode", "get_secure_mode", "secure_mode", "resolve_secure_mode",
           "secure_stream_available"]
