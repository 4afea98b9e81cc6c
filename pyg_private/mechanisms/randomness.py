"""The random words, under their former module name: the code now lives in
:mod:`pyg_private.sampling.words` (:class:`RandomSource` in :mod:`~pyg_private.sampling.words.sources`,
``secure_mode`` in :mod:`~pyg_private.sampling.words.secure_setting`, the CPU ChaCha20 stream in
:mod:`~pyg_private.sampling.words.chacha20_openssl`) and :mod:`pyg_private.sampling.threads`
(:func:`run_tasks`, :func:`run_staged`).

The names are re-exported unchanged (the same objects). The settings read at run time
(``_REKEY_BYTES``, ``Cipher``) are not: set them in :mod:`~pyg_private.sampling.words.chacha20_openssl`.
"""
from ..sampling.threads import run_staged, run_tasks
from ..sampling.threads import workers as _workers
from ..sampling.words.chacha20_openssl import _ChaCha20Stream, secure_stream_available
from ..sampling.words.secure_setting import get_secure_mode, resolve_secure_mode, secure_mode, set_secure_mode
from ..sampling.words.sources import WORD_BITS, RandomSource

__all__ = ["RandomSource", "set_secure_mode", "get_secure_mode", "secure_mode", "resolve_secure_mode",
           "secure_stream_available", "run_tasks", "run_staged", "WORD_BITS"]
