r"""The ChaCha20 keystream made on the device: the same 63-bit words as the CPU's secure stream.

:class:`~pyg_private.sampling.words.sources.RandomSource` draws its words on the CPU from
:class:`~pyg_private.sampling.words.chacha20_openssl._ChaCha20Stream`: the ChaCha20 keystream
(OpenSSL, through ``cryptography``) under a 256-bit key and a 96-bit nonce from :func:`os.urandom`,
block counter from 0, read 8 bytes a word (a little-endian ``int64``) with the top bit cleared, and
a fresh key and nonce after ``chacha20_openssl._REKEY_BYTES`` bytes. This module computes the same
keystream on the device, so that a CUDA source needs neither a copy of CPU words nor a
``torch.Generator``.

ChaCha20 is RFC 8439: the quarter round (Sec. 2.1, 2.2), the block function (Sec. 2.3: the state
``"expand 32-byte k"``, 8 key words, the 32-bit block counter, 3 nonce words, all little-endian
``uint32``; 20 rounds, 10 column and 10 diagonal, then the input state added word by word; the 16
words serialised little-endian) and the keystream of Sec. 2.4 (the blocks for counters 0, 1, 2, ...
in order; this library starts at 0). Every block depends only on its counter, so the blocks are
computed independently and in parallel: the 64-bit word at index ``i`` of the keystream is the pair
of ``uint32`` words ``2 (i mod 8)`` (low half) and ``2 (i mod 8) + 1`` (high half) of block
``i // 8``.

Two implementations of the same function:

* :func:`chacha20_words_torch`: vectorised torch (``uint32`` arithmetic in ``int64`` with masks),
  any device; the readable reference and the fallback without Triton.
* :func:`chacha20_words_triton`: a Triton kernel, each program a tile of blocks (``uint32`` adds
  that wrap, rotations from two shifts); CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``
  (read when this module is imported, as for every Triton kernel).

What is guaranteed (and tested: the RFC's vectors of Sec. 2.3.2 and 2.4.2, and ``cryptography``'s
ChaCha20 for random keys and nonces): the words are the keystream's, bit for bit, for any
``word_offset`` and count, and :class:`DeviceChaCha20Stream` with a given key and nonce returns the
same words as ``_ChaCha20Stream`` with that key and nonce, re-keying at the same byte (the first
words of a fill from the old key, the rest from the new one at counter 0), with its keys and nonces
read from :func:`os.urandom` in the same order (12 nonce bytes, then 32 key bytes). What is not:
secrecy against whoever can read the process's or the device's memory (the key lives in a device
tensor, see :class:`DeviceChaCha20Stream`), constant-time execution beyond what the hardware's
integer instructions give (ChaCha20 has no table look-ups or data-dependent branches), and thread
safety (one stream per thread, as for the CPU stream). Little-endian hosts and devices are assumed
(as is the CPU stream's view of its bytes).
"""
from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor

from . import chacha20_openssl

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the installation
    triton = None

__all__ = ["chacha20_words_torch", "chacha20_words_triton", "DeviceChaCha20Stream", "triton_available"]

_M32 = 0xFFFFFFFF
_CONSTANTS = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k" (RFC 8439, Sec. 2.3)
_WORDS_PER_BLOCK = 8  # 64-bit words in a 64-byte block
_MAX_BLOCKS = 1 << 32  # the block counter is 32 bits
#: blocks computed at once by the torch path: on the CPU few enough for the state to stay in the
#: cache (0.5 MiB), elsewhere many (fewer launches; 32 MiB of int64 state)
_TORCH_CHUNK_BLOCKS = {"cpu": 1 << 12}
_TORCH_CHUNK_BLOCKS_DEVICE = 1 << 18
#: blocks per Triton program
_TRITON_BLOCKS = 128


def triton_available() -> bool:
    """Whether the ``triton`` package is installed (a CUDA device is still needed to run the kernel,
    except under ``TRITON_INTERPRET=1``)."""
    return triton is not None


def _interpreted() -> bool:
    """Whether the kernel below was defined under Triton's interpreter (``TRITON_INTERPRET=1`` when
    this module was imported): it then runs on CPU tensors."""
    return triton is not None and type(_chacha20_kernel).__name__ == "InterpretedFunction"


def _use_triton(device: torch.device) -> bool:
    return triton is not None and (torch.device(device).type == "cuda" or _interpreted())


# ------------------------------------------------------------------------------------------------
# arguments


def _check_range(word_offset: int, n: int) -> tuple[int, int]:
    word_offset, n = int(word_offset), int(n)
    if word_offset < 0 or n < 0:
        raise ValueError(f"`word_offset` and `n` must be non-negative; got {word_offset} and {n}")
    if n and (word_offset + n - 1) // _WORDS_PER_BLOCK >= _MAX_BLOCKS:
        raise OverflowError(f"words {word_offset} to {word_offset + n - 1} pass the end of ChaCha20's 32-bit "
                            f"block counter ({_MAX_BLOCKS * _WORDS_PER_BLOCK} words a key and nonce)")
    return word_offset, n


def _key_words(key: Tensor, nonce: Tensor, device: torch.device) -> Tensor:
    """The 8 key and 3 nonce words (``uint32`` values held in any integer dtype: ``int32`` bit
    patterns, ``int64`` in ``[0, 2**32)`` or ``uint32``) as 11 ``int32`` bit patterns on ``device``."""
    parts = []
    for name, t, count in (("key", key, 8), ("nonce", nonce, 3)):
        if not isinstance(t, Tensor) or t.numel() != count or t.dtype not in (torch.int32, torch.int64, torch.uint32):
            raise ValueError(f"`{name}` must be a tensor of {count} uint32 words (int32, int64 or uint32); got "
                             f"{getattr(t, 'dtype', type(t))} of {getattr(t, 'numel', lambda: '?')()} entries")
        if t.dtype == torch.int64 and bool(((t < 0) | (t > _M32)).any()):
            raise ValueError(f"`{name}` as int64 must hold values in [0, 2**32)")
        if t.dtype == torch.uint32:
            t = t.view(torch.int32)
        parts.append(t.reshape(-1).to(device=device, dtype=torch.int32))  # int64 -> int32 keeps the low 32 bits
    return torch.cat(parts)


# ------------------------------------------------------------------------------------------------
# torch: uint32 arithmetic in int64


def _rotl_(v: Tensor, r: int, tmp: Tensor) -> None:
    """``v <- v <<< r`` in place, for ``v`` in ``[0, 2**32)`` (RFC 8439, Sec. 2.1)."""
    torch.bitwise_right_shift(v, 32 - r, out=tmp)
    v.bitwise_left_shift_(r).bitwise_and_(_M32).bitwise_or_(tmp)


def _quarter_round_(a: Tensor, b: Tensor, c: Tensor, d: Tensor, tmp: Tensor) -> None:
    """The quarter round of RFC 8439, Sec. 2.1, in place, on rows of the state side by side."""
    a.add_(b).bitwise_and_(_M32); d.bitwise_xor_(a); _rotl_(d, 16, tmp)  # noqa: E702
    c.add_(d).bitwise_and_(_M32); b.bitwise_xor_(c); _rotl_(b, 12, tmp)  # noqa: E702
    a.add_(b).bitwise_and_(_M32); d.bitwise_xor_(a); _rotl_(d, 8, tmp)  # noqa: E702
    c.add_(d).bitwise_and_(_M32); b.bitwise_xor_(c); _rotl_(b, 7, tmp)  # noqa: E702


def _blocks_torch(words: Tensor, counter: int, count: int) -> Tensor:
    """The ChaCha20 blocks for counters ``counter, ..., counter + count - 1`` (RFC 8439, Sec. 2.3)
    under the 11 key and nonce words ``words`` (``int32`` bit patterns): ``[16, count]`` ``int64``
    holding the blocks' ``uint32`` words (word ``j`` of block ``b`` at ``[j, b]``)."""
    device = words.device
    kn = words.to(torch.int64).bitwise_and_(_M32)
    init = torch.empty(16, count, dtype=torch.int64, device=device)
    init[0:4] = torch.tensor(_CONSTANTS, dtype=torch.int64, device=device)[:, None]
    init[4:12] = kn[:8, None]
    torch.arange(counter, counter + count, dtype=torch.int64, device=device, out=init[12])
    init[13:16] = kn[8:, None]
    x = init.clone()
    a, b, c, d = x[0:4], x[4:8], x[8:12], x[12:16]  # the four rows: a column round works on columns
    tmp = torch.empty_like(a)
    for _ in range(10):
        _quarter_round_(a, b, c, d, tmp)  # columns (0,4,8,12), (1,5,9,13), ...
        # diagonals (0,5,10,15), (1,6,11,12), ...: rows b, c, d turned left by 1, 2, 3 lanes
        b2, c2, d2 = b.roll(-1, 0), c.roll(-2, 0), d.roll(-3, 0)
        _quarter_round_(a, b2, c2, d2, tmp)
        b.copy_(b2.roll(1, 0)); c.copy_(c2.roll(2, 0)); d.copy_(d2.roll(3, 0))  # noqa: E702
    return x.add_(init).bitwise_and_(_M32)


def _fill_torch(words: Tensor, word_offset: int, out: Tensor, mask: bool = True) -> Tensor:
    """Keystream words ``word_offset, ..., word_offset + out.numel() - 1`` into the contiguous
    ``int64`` tensor ``out`` (masked to 63 bits unless ``mask`` is false)."""
    word_offset, n = _check_range(word_offset, out.numel())
    flat = out.view(-1)
    chunk_blocks = _TORCH_CHUNK_BLOCKS.get(out.device.type, _TORCH_CHUNK_BLOCKS_DEVICE)
    done = 0
    while done < n:
        block, skip = divmod(word_offset + done, _WORDS_PER_BLOCK)
        count = min(chunk_blocks, -(-(skip + n - done) // _WORDS_PER_BLOCK))
        x = _blocks_torch(words, block, count)
        lo, hi = x[0::2], x[1::2]  # [8, count]: the low and high halves of each block's 8 words
        if mask:
            hi = hi.bitwise_and_(0x7FFFFFFF)
        else:
            hi = hi - (hi >> 31 << 32)  # as a signed 32-bit value: hi * 2**32 + lo cannot overflow
        chunk = hi.mul_(1 << 32).add_(lo).t().reshape(-1)  # block by block, word by word
        k = min(n - done, chunk.numel() - skip)
        flat[done:done + k] = chunk[skip:skip + k]
        done += k
    return out


def chacha20_words_torch(key: Tensor, nonce: Tensor, word_offset: int, n: int, device) -> Tensor:
    """The ``n`` 63-bit words from 64-bit word ``word_offset`` of the ChaCha20 keystream (RFC 8439)
    under ``key`` (8 ``uint32`` words, the little-endian reading of the 32 key bytes) and ``nonce``
    (3 words), block counter ``word_index // 8`` from 0: ``int64`` on ``device``, each word the
    keystream's 8 bytes read little-endian with bit 63 cleared. Pure torch, any device."""
    device = torch.device(device)
    word_offset, n = _check_range(word_offset, n)
    out = torch.empty(n, dtype=torch.int64, device=device)
    return _fill_torch(_key_words(key, nonce, device), word_offset, out)


# ------------------------------------------------------------------------------------------------
# Triton

if triton is not None:

    @triton.jit
    def _quarter_round(a, b, c, d):
        # RFC 8439, Sec. 2.1, on uint32 (adds wrap, >> is a logical shift)
        a = a + b
        d = d ^ a
        d = (d << 16) | (d >> 16)
        c = c + d
        b = b ^ c
        b = (b << 12) | (b >> 20)
        a = a + b
        d = d ^ a
        d = (d << 8) | (d >> 24)
        c = c + d
        b = b ^ c
        b = (b << 7) | (b >> 25)
        return a, b, c, d

    @triton.jit
    def _word(lo, hi, MASK: tl.constexpr):
        hi = hi.to(tl.uint64)
        if MASK:
            hi = hi & 0x7FFFFFFF
        return (lo.to(tl.uint64) | (hi << 32)).to(tl.int64, bitcast=True)

    @triton.jit(do_not_specialize=["block0", "skip", "n"])  # one compilation for every position and size
    def _chacha20_kernel(words, out, block0, skip, n, BLOCK: tl.constexpr, MASK: tl.constexpr):
        # program p: blocks block0 + p * BLOCK + [0, BLOCK); output word q is keystream word
        # 8 * block0 + skip + q
        pid = tl.program_id(0).to(tl.int64)
        rel = pid * BLOCK + tl.arange(0, BLOCK)
        zero = tl.zeros([BLOCK], dtype=tl.uint32)
        i0 = zero + 0x61707865
        i1 = zero + 0x3320646E
        i2 = zero + 0x79622D32
        i3 = zero + 0x6B206574
        i4 = zero + tl.load(words + 0).to(tl.uint32, bitcast=True)
        i5 = zero + tl.load(words + 1).to(tl.uint32, bitcast=True)
        i6 = zero + tl.load(words + 2).to(tl.uint32, bitcast=True)
        i7 = zero + tl.load(words + 3).to(tl.uint32, bitcast=True)
        i8 = zero + tl.load(words + 4).to(tl.uint32, bitcast=True)
        i9 = zero + tl.load(words + 5).to(tl.uint32, bitcast=True)
        i10 = zero + tl.load(words + 6).to(tl.uint32, bitcast=True)
        i11 = zero + tl.load(words + 7).to(tl.uint32, bitcast=True)
        i12 = (rel + block0).to(tl.uint32)  # the block counter (checked on the host: < 2**32)
        i13 = zero + tl.load(words + 8).to(tl.uint32, bitcast=True)
        i14 = zero + tl.load(words + 9).to(tl.uint32, bitcast=True)
        i15 = zero + tl.load(words + 10).to(tl.uint32, bitcast=True)
        x0, x1, x2, x3, x4, x5, x6, x7 = i0, i1, i2, i3, i4, i5, i6, i7
        x8, x9, x10, x11, x12, x13, x14, x15 = i8, i9, i10, i11, i12, i13, i14, i15
        for _ in range(10):  # RFC 8439, Sec. 2.3: 10 column rounds and 10 diagonal rounds
            x0, x4, x8, x12 = _quarter_round(x0, x4, x8, x12)
            x1, x5, x9, x13 = _quarter_round(x1, x5, x9, x13)
            x2, x6, x10, x14 = _quarter_round(x2, x6, x10, x14)
            x3, x7, x11, x15 = _quarter_round(x3, x7, x11, x15)
            x0, x5, x10, x15 = _quarter_round(x0, x5, x10, x15)
            x1, x6, x11, x12 = _quarter_round(x1, x6, x11, x12)
            x2, x7, x8, x13 = _quarter_round(x2, x7, x8, x13)
            x3, x4, x9, x14 = _quarter_round(x3, x4, x9, x14)
        w0 = _word(x0 + i0, x1 + i1, MASK)
        w1 = _word(x2 + i2, x3 + i3, MASK)
        w2 = _word(x4 + i4, x5 + i5, MASK)
        w3 = _word(x6 + i6, x7 + i7, MASK)
        w4 = _word(x8 + i8, x9 + i9, MASK)
        w5 = _word(x10 + i10, x11 + i11, MASK)
        w6 = _word(x12 + i12, x13 + i13, MASK)
        w7 = _word(x14 + i14, x15 + i15, MASK)
        # [8 * BLOCK] in memory order, word j of block b at 8 b + j: one contiguous store
        ws = tl.interleave(tl.interleave(tl.interleave(w0, w4), tl.interleave(w2, w6)),
                           tl.interleave(tl.interleave(w1, w5), tl.interleave(w3, w7)))
        q = pid * (8 * BLOCK) + tl.arange(0, 8 * BLOCK) - skip
        tl.store(out + q, ws, mask=(q >= 0) & (q < n))


def _fill_triton(words: Tensor, word_offset: int, out: Tensor, mask: bool = True) -> Tensor:
    """:func:`_fill_torch` with the Triton kernel (``words``: 11 ``int32`` on ``out``'s device)."""
    if triton is None:
        raise RuntimeError("the triton package is not installed")
    word_offset, n = _check_range(word_offset, out.numel())
    if n == 0:
        return out
    block0, skip = divmod(word_offset, _WORDS_PER_BLOCK)
    blocks = -(-(skip + n) // _WORDS_PER_BLOCK)
    grid = (triton.cdiv(blocks, _TRITON_BLOCKS),)
    if out.device.type == "cuda":
        with torch.cuda.device(out.device):
            _chacha20_kernel[grid](words, out, block0, skip, n, BLOCK=_TRITON_BLOCKS, MASK=bool(mask), num_warps=4,
                                   enable_fp_fusion=False)  # no float arithmetic: said only to silence Triton 3.9
    else:
        _chacha20_kernel[grid](words, out, block0, skip, n, BLOCK=_TRITON_BLOCKS, MASK=bool(mask))
    return out


def chacha20_words_triton(key: Tensor, nonce: Tensor, word_offset: int, n: int, device) -> Tensor:
    """:func:`chacha20_words_torch` computed by a Triton kernel: a CUDA ``device``, or the CPU under
    ``TRITON_INTERPRET=1``. The same words, bit for bit."""
    device = torch.device(device)
    word_offset, n = _check_range(word_offset, n)
    out = torch.empty(n, dtype=torch.int64, device=device)
    return _fill_triton(_key_words(key, nonce, device), word_offset, out)


# ------------------------------------------------------------------------------------------------
# the stream


def _resolve_device(device) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


class DeviceChaCha20Stream:
    """The secure stream of ``chacha20_openssl._ChaCha20Stream`` computed on ``device``.

    The ChaCha20 keystream (RFC 8439) under a 256-bit key and a 96-bit nonce from
    :func:`os.urandom` (read exactly as the CPU stream reads them: 12 nonce bytes, then 32 key
    bytes), block counter from 0, a fresh key and nonce after ``chacha20_openssl._REKEY_BYTES`` bytes
    (read when a key is drawn, as the CPU stream does); :meth:`fill` continues the stream. With the
    same key and nonce (and the same bytes from :func:`os.urandom` afterwards) its words are those
    of the CPU stream read 8 bytes a word and masked to 63 bits, whatever the sizes of the fills.
    The Triton kernel computes them where Triton is installed and the device is CUDA (or under
    ``TRITON_INTERPRET=1``), vectorised torch otherwise.

    Where the key lives: to continue the stream it must be kept, in an ``int32`` tensor of 11 words
    (key, then nonce) on the device, and nowhere else once the stream is made (the bytes from
    :func:`os.urandom` and a host staging array, zeroed after the copy, are transient; on CUDA the
    key goes through a pinned buffer that an asynchronous copy from the device zeroes right after
    the upload, in stream order, so that making a stream does not wait for the device). A new key
    overwrites the old one in place. The tensor's memory is not wiped when the stream is freed
    (PyTorch's caching allocator reuses it), and whoever can read the process's or the device's
    memory can read the key: the same exposure as OpenSSL's cipher context on the CPU. A stream
    cannot be pickled or copied (``TypeError``): a copy would repeat its words.

    Not thread-safe: one stream per thread (``RandomSource.spawn``).
    """

    def __init__(self, device: torch.device | str = "cuda") -> None:
        self.device = _resolve_device(device)
        self._triton = _use_triton(self.device)
        self._words = self._zeros = None
        self._rekey()

    @classmethod
    def _from_key(cls, key: bytes, nonce: bytes, device: torch.device | str = "cuda") -> "DeviceChaCha20Stream":
        """A stream at counter 0 under ``key`` (32 bytes) and ``nonce`` (12 bytes, the nonce part
        of the CPU stream's 16-byte ``nonce`` argument) instead of :func:`os.urandom`'s (for tests:
        it re-keys from :func:`os.urandom` as usual)."""
        stream = cls.__new__(cls)
        stream.device = _resolve_device(device)
        stream._triton = _use_triton(stream.device)
        stream._words = stream._zeros = None
        stream._install(key, nonce)
        return stream

    def _rekey(self) -> None:
        nonce = os.urandom(12)  # first the nonce, then the key: the order of _ChaCha20Stream._rekey
        self._install(os.urandom(32), nonce)

    def _install(self, key: bytes, nonce: bytes) -> None:
        if len(key) != 32 or len(nonce) != 12:
            raise ValueError("ChaCha20 takes a 32-byte key and a 12-byte nonce")
        limit = chacha20_openssl._REKEY_BYTES
        if limit <= 0 or limit % 8 or limit > _MAX_BLOCKS * 64:
            raise ValueError("the re-keying limit must be a positive multiple of 8 bytes, at most the 2**38 bytes "
                             f"of ChaCha20's 32-bit block counter; got {limit}")
        host = np.empty(11, dtype=np.uint32)
        host[:8] = np.frombuffer(key, dtype="<u4")
        host[8:] = np.frombuffer(nonce, dtype="<u4")
        staged = torch.from_numpy(host.view(np.int32))
        if self._words is None:
            self._words = torch.empty(11, dtype=torch.int32, device=self.device)
        if self.device.type == "cuda":  # no synchronisation: a pinned buffer, copied and then wiped in order
            pinned = torch.empty(11, dtype=torch.int32, pin_memory=True)
            pinned.copy_(staged)
            host.fill(0)
            # the new key overwrites the old one after the kernels that read it (stream order), and the
            # pinned copy is zeroed from the device after the upload; the caching host allocator keeps
            # its block until both copies have run
            self._words.copy_(pinned, non_blocking=True)
            if self._zeros is None:
                self._zeros = torch.zeros(11, dtype=torch.int32, device=self.device)
            pinned.copy_(self._zeros, non_blocking=True)
        else:
            self._words.copy_(staged)  # overwrites the old key (ordered after the kernels that read it)
        host.fill(0)
        self._position = 0  # words drawn under this key
        self._limit = limit // 8  # words allowed under this key

    def fill(self, out: Tensor) -> Tensor:
        """Overwrite the contiguous ``int64`` tensor ``out`` (on the stream's device) with the next
        ``out.numel()`` words of the stream (63 bits each); returns ``out``."""
        if out.dtype != torch.int64 or not out.is_contiguous() or out.device != self.device:
            raise ValueError(f"`out` must be a contiguous int64 tensor on {self.device}; got {out.dtype} on "
                             f"{out.device}{'' if out.is_contiguous() else ' (not contiguous)'}")
        flat = out.view(-1)
        n, done = flat.numel(), 0
        generate = _fill_triton if self._triton else _fill_torch
        while done < n:
            k = min(n - done, self._limit - self._position)
            generate(self._words, self._position, flat[done:done + k])
            done += k
            self._position += k
            if self._position == self._limit:  # at the limit, as the CPU stream: a new key at once
                self._rekey()
        return out

    def __reduce_ex__(self, protocol):
        raise TypeError("a DeviceChaCha20Stream cannot be pickled or copied: that would expose its key and "
                        "repeat its words")

    def __reduce__(self):
        return self.__reduce_ex__(2)

    def __getstate__(self):
        return self.__reduce_ex__(2)

    def __repr__(self) -> str:
        return f"DeviceChaCha20Stream(device={str(self.device)!r}, kernel={'triton' if self._triton else 'torch'!r})"
