"""The device ChaCha20 stream: the keystream of RFC 8439 (the vectors of Sec. 2.3.2 and 2.4.2),
``cryptography``'s ChaCha20 for random keys, nonces and word offsets, and the words of the CPU's
secure stream (``RandomSource(secure=True)``) for the same bytes from ``os.urandom``, re-keying
included; for the torch path here and for the Triton kernel under Triton's interpreter (this module's
``[triton]`` cases, run by :func:`test_triton_kernel_under_the_interpreter` in a fresh interpreter
with ``TRITON_INTERPRET=1``, read when the kernel is defined) and, where a GPU is present, on CUDA."""
from __future__ import annotations

import copy
import os
import pickle
import random
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from pyg_private.sampling.words import chacha20_device as dev
from pyg_private.sampling.words import chacha20_openssl
from pyg_private.mechanisms.randomness import RandomSource

needs_stream = pytest.mark.skipif(not chacha20_openssl.secure_stream_available(), reason="cryptography not installed")

#: the Triton kernel runs on CPU tensors only when this module was imported under the interpreter
KERNELS = ["torch", "triton"] if dev._interpreted() else ["torch"]
MASK = (1 << 63) - 1

RFC_KEY = bytes(range(32))
# RFC 8439, Sec. 2.3.2: nonce and counter 1, and the serialized block
BLOCK_NONCE = bytes.fromhex("000000090000004a00000000")
BLOCK = bytes.fromhex("10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
                      "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e")
# RFC 8439, Sec. 2.4.2: nonce, counter 1, plaintext and ciphertext
SUNSCREEN_NONCE = bytes.fromhex("000000000000004a00000000")
SUNSCREEN = (b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, "
             b"sunscreen would be it.")
SUNSCREEN_CIPHERTEXT = bytes.fromhex(
    "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0bf91b65c5524733ab8f593dabcd62b357"
    "1639d624e65152ab8f530c359f0861d807ca0dbf500d6a6156a38e088a22b65e52bc514d16ccf806818ce91ab7793736"
    "5af90bbf74a35be6b40b8eedf2785e42874d")


def words_of(raw: bytes) -> torch.Tensor:
    """A 32-byte key or 12-byte nonce as its little-endian uint32 words (int64)."""
    return torch.from_numpy(np.frombuffer(raw, dtype="<u4").astype(np.int64))


def kn(key: bytes, nonce: bytes, device="cpu") -> torch.Tensor:
    """The 11 int32 key and nonce words the internal fill functions take."""
    return dev._key_words(words_of(key), words_of(nonce), torch.device(device))


def fill(kernel: str):
    return dev._fill_triton if kernel == "triton" else dev._fill_torch


def keystream(key: bytes, nonce: bytes, first_byte: int, count: int) -> bytes:
    """``count`` bytes of ``cryptography``'s ChaCha20 keystream from byte ``first_byte`` (counter 0)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    block, skip = divmod(first_byte, 64)
    encryptor = Cipher(algorithms.ChaCha20(key, block.to_bytes(4, "little") + nonce), mode=None).encryptor()
    return encryptor.update(bytes(skip + count))[skip:]


def expected_words(key: bytes, nonce: bytes, word_offset: int, n: int) -> torch.Tensor:
    raw = np.frombuffer(keystream(key, nonce, 8 * word_offset, 8 * n), dtype="<i8").astype(np.int64)
    return torch.from_numpy(raw) & MASK


def stream(kernel: str, device="cpu", key: bytes | None = None, nonce: bytes | None = None):
    s = dev.DeviceChaCha20Stream(device) if key is None else dev.DeviceChaCha20Stream._from_key(key, nonce, device)
    s._triton = kernel == "triton"
    return s


class Feeder:
    """``os.urandom`` from a seeded generator: the same bytes for each stream built from one seed."""

    def __init__(self, seed: int) -> None:
        self.rng, self.calls = random.Random(seed), []

    def __call__(self, n: int) -> bytes:
        self.calls.append(n)
        return self.rng.randbytes(n)


# ------------------------------------------------------------------------------------------------
# RFC 8439


@pytest.mark.parametrize("kernel", KERNELS)
def test_rfc8439_block_function(kernel):
    """Sec. 2.3.2: block counter 1, i.e. the 8 words from word 8; raw and masked."""
    raw = fill(kernel)(kn(RFC_KEY, BLOCK_NONCE), 8, torch.empty(8, dtype=torch.int64), mask=False)
    assert raw.numpy().astype("<i8").tobytes() == BLOCK
    masked = fill(kernel)(kn(RFC_KEY, BLOCK_NONCE), 8, torch.empty(8, dtype=torch.int64))
    expected = torch.from_numpy(np.frombuffer(BLOCK, dtype="<i8").astype(np.int64)) & MASK
    assert torch.equal(masked, expected)
    if kernel == "torch":  # the public function, and the block as 16 uint32 words
        assert torch.equal(dev.chacha20_words_torch(words_of(RFC_KEY), words_of(BLOCK_NONCE), 8, 8, "cpu"), expected)
        state = dev._blocks_torch(kn(RFC_KEY, BLOCK_NONCE), 1, 1)[:, 0]
        assert state.tolist() == list(np.frombuffer(BLOCK, dtype="<u4"))
    else:
        assert torch.equal(dev.chacha20_words_triton(words_of(RFC_KEY), words_of(BLOCK_NONCE), 8, 8, "cpu"), expected)


@pytest.mark.parametrize("kernel", KERNELS)
def test_rfc8439_encryption(kernel):
    """Sec. 2.4.2: the keystream from counter 1 (word 8) encrypts the plaintext into the ciphertext."""
    raw = fill(kernel)(kn(RFC_KEY, SUNSCREEN_NONCE), 8, torch.empty(15, dtype=torch.int64), mask=False)
    stream_bytes = raw.numpy().astype("<i8").tobytes()
    assert bytes(p ^ k for p, k in zip(SUNSCREEN, stream_bytes)) == SUNSCREEN_CIPHERTEXT


# ------------------------------------------------------------------------------------------------
# against cryptography's ChaCha20


@needs_stream
@pytest.mark.parametrize("kernel", KERNELS)
def test_words_are_the_keystream_for_random_keys(kernel):
    rng = random.Random(1)
    fn = dev.chacha20_words_triton if kernel == "triton" else dev.chacha20_words_torch
    for offset in (0, 3, 8, 13):
        key, nonce = rng.randbytes(32), rng.randbytes(12)
        for n in (1, 7, 13, 300):  # 300: many blocks, a partial last one
            got = fn(words_of(key), words_of(nonce), offset, n, "cpu")
            assert got.dtype == torch.int64 and bool((got >= 0).all())
            assert torch.equal(got, expected_words(key, nonce, offset, n)), (offset, n)
    key, nonce = rng.randbytes(32), rng.randbytes(12)
    # across the tiles of the Triton kernel (128 blocks a program) and the torch chunks
    for offset, n in ((8 * 127 + 3, 1100), (5, 8 * 4096 + 90) if kernel == "torch" else (0, 1030)):
        assert torch.equal(fn(words_of(key), words_of(nonce), offset, n, "cpu"), expected_words(key, nonce, offset, n))
    # at the end of the 32-bit counter (block counters above 2**31 and 2**32 - 1)
    offset = 8 * ((1 << 32) - 2) + 3
    assert torch.equal(fn(words_of(key), words_of(nonce), offset, 13, "cpu"), expected_words(key, nonce, offset, 13))


def test_key_and_nonce_words_in_any_integer_dtype():
    key, nonce = random.Random(2).randbytes(32), random.Random(3).randbytes(12)
    k64, n64 = words_of(key), words_of(nonce)
    expected = dev.chacha20_words_torch(k64, n64, 3, 20, "cpu")
    k32, n32 = k64.to(torch.int32), n64.to(torch.int32)  # int32 bit patterns
    assert torch.equal(dev.chacha20_words_torch(k32, n32, 3, 20, "cpu"), expected)
    assert torch.equal(dev.chacha20_words_torch(k32.view(torch.uint32), n32.view(torch.uint32), 3, 20, "cpu"), expected)
    assert torch.equal(dev.chacha20_words_torch(k64.view(2, 4), n64, 3, 20, "cpu"), expected)
    with pytest.raises(ValueError, match="key"):
        dev.chacha20_words_torch(k64[:7], n64, 0, 1, "cpu")
    with pytest.raises(ValueError, match="nonce"):
        dev.chacha20_words_torch(k64, n64.float(), 0, 1, "cpu")
    with pytest.raises(ValueError, match="2\\*\\*32"):
        dev.chacha20_words_torch(k64 + (1 << 32), n64, 0, 1, "cpu")
    assert dev.chacha20_words_torch(k64, n64, 5, 0, "cpu").shape == (0,)


@pytest.mark.parametrize("kernel", KERNELS)
def test_counter_overflow_is_refused(kernel):
    k, n = words_of(RFC_KEY), words_of(BLOCK_NONCE)
    fn = dev.chacha20_words_triton if kernel == "triton" else dev.chacha20_words_torch
    last = 8 * (1 << 32) - 1  # the last word of block 2**32 - 1
    assert fn(k, n, last, 1, "cpu").shape == (1,)
    with pytest.raises(OverflowError, match="32-bit block counter"):
        fn(k, n, last, 2, "cpu")
    with pytest.raises(OverflowError):
        fn(k, n, last + 1, 1, "cpu")
    with pytest.raises(ValueError):
        fn(k, n, -1, 1, "cpu")
    s = stream(kernel, key=RFC_KEY, nonce=BLOCK_NONCE)
    s._limit, s._position = 1 << 40, last  # a limit past the counter's end (refused when keyed: below)
    with pytest.raises(OverflowError):
        s.fill(torch.empty(2, dtype=torch.int64))


def test_rekey_limit_past_the_counter_is_refused(monkeypatch):
    monkeypatch.setattr(chacha20_openssl, "_REKEY_BYTES", (1 << 38) + 64)
    with pytest.raises(ValueError, match="block counter"):
        dev.DeviceChaCha20Stream("cpu")
    monkeypatch.setattr(chacha20_openssl, "_REKEY_BYTES", 100)  # not whole words
    with pytest.raises(ValueError, match="multiple of 8"):
        dev.DeviceChaCha20Stream("cpu")


# ------------------------------------------------------------------------------------------------
# the stream


@pytest.mark.parametrize("kernel", KERNELS)
def test_successive_fills_are_one_fill(kernel):
    key, nonce = random.Random(4).randbytes(32), random.Random(5).randbytes(12)
    parts = [torch.empty(k, dtype=torch.int64) for k in (3, 5, 1, 8, 13, 0, 100)]
    s = stream(kernel, key=key, nonce=nonce)
    for p in parts:
        assert s.fill(p) is p
    whole = stream(kernel, key=key, nonce=nonce).fill(torch.empty(130, dtype=torch.int64))
    assert torch.equal(torch.cat(parts), whole)
    assert torch.equal(whole, expected_words(key, nonce, 0, 130))
    two_d = stream(kernel, key=key, nonce=nonce).fill(torch.empty(13, 10, dtype=torch.int64))
    assert torch.equal(two_d.view(-1), whole)


@needs_stream
@pytest.mark.parametrize("kernel", KERNELS)
def test_stream_gives_the_cpu_streams_words(kernel, monkeypatch):
    """The same bytes from os.urandom: the words of RandomSource(secure=True) on the CPU."""
    sizes = (1, 7, 8, 13, 64, 3)
    cpu_feed = Feeder(6)
    monkeypatch.setattr(os, "urandom", cpu_feed)
    cpu = RandomSource(secure=True)
    expected = [cpu.words(k) for k in sizes]
    device_feed = Feeder(6)
    monkeypatch.setattr(os, "urandom", device_feed)
    s = stream(kernel)
    got = [s.fill(torch.empty(k, dtype=torch.int64)) for k in sizes]
    assert all(torch.equal(g, e) for g, e in zip(got, expected))
    assert device_feed.calls == cpu_feed.calls == [12, 32]  # the nonce, then the key


@needs_stream
@pytest.mark.parametrize("limit", [256, 200])  # whole blocks, and 3 blocks and a word
@pytest.mark.parametrize("kernel", KERNELS)
def test_rekeys_as_the_cpu_stream(kernel, limit, monkeypatch):
    monkeypatch.setattr(chacha20_openssl, "_REKEY_BYTES", limit)
    sizes = (10, 30, 1, 25, 60, 7, 32)  # fills that end before, at and past each key's last word
    cpu_feed = Feeder(7)
    monkeypatch.setattr(os, "urandom", cpu_feed)
    cpu = RandomSource(secure=True)
    expected = torch.cat([cpu.words(k) for k in sizes])
    device_feed = Feeder(7)
    monkeypatch.setattr(os, "urandom", device_feed)
    s = stream(kernel)
    got = torch.cat([s.fill(torch.empty(k, dtype=torch.int64)) for k in sizes])
    assert torch.equal(got, expected)
    assert device_feed.calls == cpu_feed.calls and len(cpu_feed.calls) == 2 * (1 + sum(sizes) * 8 // limit)


def test_stream_cannot_be_pickled_or_copied():
    s = dev.DeviceChaCha20Stream("cpu")
    for attempt in (pickle.dumps, copy.copy, copy.deepcopy, lambda s: s.__getstate__(), lambda s: s.__reduce__()):
        with pytest.raises(TypeError, match="cannot be pickled"):
            attempt(s)
    assert "key" not in repr(s) and "words" not in repr(s)


def test_stream_checks_out_and_picks_its_kernel():
    s = dev.DeviceChaCha20Stream("cpu")
    assert s._triton == dev._interpreted()  # Triton on the CPU only under the interpreter
    for bad in (torch.empty(4, dtype=torch.int32), torch.empty(4, 2, dtype=torch.int64).t(),
                torch.empty(4, dtype=torch.float64)):
        with pytest.raises(ValueError, match="contiguous int64"):
            s.fill(bad)
    assert s._words.dtype == torch.int32 and s._words.numel() == 11


def test_triton_kernel_under_the_interpreter():
    """This module's ``[triton]`` cases in a fresh interpreter with ``TRITON_INTERPRET=1``."""
    pytest.importorskip("triton", reason="the optional triton package is not installed")
    if dev._interpreted():
        pytest.skip("already under the interpreter")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           __file__, "-k", "triton and not interpreter"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) >= 8, done.stdout[-3000:]
    assert "failed" not in done.stdout and "error" not in done.stdout.lower(), done.stdout[-3000:]


@pytest.mark.cuda
@needs_stream
def test_cuda_stream_gives_the_cpu_streams_words(monkeypatch):
    """On CUDA (Triton kernel, and the torch path): the CPU stream's words, large fills and re-keying."""
    pytest.importorskip("triton", reason="the optional triton package is not installed")
    rng = random.Random(8)
    key, nonce = rng.randbytes(32), rng.randbytes(12)
    for offset, n in ((0, 1), (13, 1 << 20), (8 * ((1 << 32) - 300) + 5, 2395)):
        expected = expected_words(key, nonce, offset, n)
        for fn in (dev.chacha20_words_triton, dev.chacha20_words_torch):
            assert torch.equal(fn(words_of(key), words_of(nonce), offset, n, "cuda").cpu(), expected), (fn, offset)
    sizes = (1, 1000, 3, (1 << 20) + 5, 77)
    for limit in (chacha20_openssl._REKEY_BYTES, 4096, 200):
        monkeypatch.setattr(chacha20_openssl, "_REKEY_BYTES", limit)
        cpu_feed = Feeder(limit)
        monkeypatch.setattr(os, "urandom", cpu_feed)
        cpu = RandomSource(secure=True)
        expected = [cpu.words(k) for k in sizes]
        for kernel in ("triton", "torch"):
            device_feed = Feeder(limit)
            monkeypatch.setattr(os, "urandom", device_feed)
            s = stream(kernel, "cuda")
            assert s.device.type == "cuda" and s._words.device == s.device
            for k, e in zip(sizes, expected):
                got = s.fill(torch.empty(k, dtype=torch.int64, device="cuda"))
                assert torch.equal(got.cpu(), e), (kernel, limit, k)
            assert device_feed.calls == cpu_feed.calls
    assert dev.DeviceChaCha20Stream("cuda")._triton
