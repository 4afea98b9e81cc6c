"""The secure source's ChaCha20 stream: the keystream of RFC 8439 under a key and nonce from the OS
(block counter from 0), re-keyed after its limit, uniform 63-bit words, and the os.urandom fallback."""
from __future__ import annotations

import struct

import pytest
import torch

from pyg_private.sampling.words import chacha20_openssl
from pyg_private.mechanisms.randomness import RandomSource

needs_stream = pytest.mark.skipif(not chacha20_openssl.secure_stream_available(), reason="cryptography not installed")


def _chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    """RFC 8439, Sec. 2.3, in plain Python (the reference the OpenSSL stream is compared with)."""
    def rotl(v, c):
        return ((v << c) & 0xFFFFFFFF) | (v >> (32 - c))

    def quarter(s, a, b, c, d):
        s[a] = (s[a] + s[b]) & 0xFFFFFFFF; s[d] = rotl(s[d] ^ s[a], 16)  # noqa: E702
        s[c] = (s[c] + s[d]) & 0xFFFFFFFF; s[b] = rotl(s[b] ^ s[c], 12)  # noqa: E702
        s[a] = (s[a] + s[b]) & 0xFFFFFFFF; s[d] = rotl(s[d] ^ s[a], 8)  # noqa: E702
        s[c] = (s[c] + s[d]) & 0xFFFFFFFF; s[b] = rotl(s[b] ^ s[c], 7)  # noqa: E702

    state = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574, *struct.unpack("<8I", key), counter,
             *struct.unpack("<3I", nonce)]
    s = list(state)
    for _ in range(10):
        for a, b, c, d in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                           (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
            quarter(s, a, b, c, d)
    return struct.pack("<16I", *((x + y) & 0xFFFFFFFF for x, y in zip(s, state)))


@needs_stream
def test_keystream_is_rfc8439_chacha20_keyed_from_the_os(monkeypatch):
    key, nonce = bytes(range(32)), bytes(range(100, 112))
    order = []

    def urandom(n):
        order.append(n)
        return {12: nonce, 32: key}[n]

    monkeypatch.setattr(chacha20_openssl.os, "urandom", urandom)
    words = RandomSource(secure=True).words(16)  # two 64-byte blocks
    expected = _chacha20_block(key, 0, nonce) + _chacha20_block(key, 1, nonce)
    raw = torch.tensor(struct.unpack("<16q", expected), dtype=torch.int64)
    assert torch.equal(words, raw & ((1 << 63) - 1))
    assert sorted(order) == [12, 32]


@needs_stream
def test_rekeys_after_its_limit(monkeypatch):
    monkeypatch.setattr(chacha20_openssl, "_REKEY_BYTES", 64)
    keys = []
    real = chacha20_openssl.os.urandom

    def urandom(n):
        value = real(n)
        if n == 32:
            keys.append(value)
        return value

    monkeypatch.setattr(chacha20_openssl.os, "urandom", urandom)
    source = RandomSource(secure=True)
    source.words(20)  # 160 bytes: one key for bytes 0-63, one for 64-127, one for 128-159
    assert len(keys) == 3 and len(set(keys)) == 3


@needs_stream
def test_words_are_uniform_63_bit():
    w = RandomSource(secure=True).words(200_000)
    assert w.dtype == torch.int64 and int(w.min()) >= 0
    bits = torch.stack([(w >> b) & 1 for b in range(63)]).double().mean(1)
    assert float((bits - 0.5).abs().max()) < 0.006  # 5.4 sigma at n = 2e5
    assert not torch.equal(w, RandomSource(secure=True).words(200_000))  # a fresh key per source


def test_falls_back_to_os_urandom(monkeypatch):
    monkeypatch.setattr(chacha20_openssl, "Cipher", None)
    calls = []
    real = chacha20_openssl.os.urandom
    monkeypatch.setattr(chacha20_openssl.os, "urandom", lambda n: (calls.append(n), real(n))[1])
    w = RandomSource(secure=True).words(1000)
    assert calls == [8000] and int(w.min()) >= 0


@needs_stream
def test_default_cpu_source_is_the_stream_and_seeded_children_reproducible():
    """The default CPU source uses the same OS-keyed ChaCha20 stream (faster than PCG64 here);
    children of a seeded source stay seeded PCG64 streams, reproducible and without OS keys."""
    assert RandomSource()._stream is not None and RandomSource().kind == "default"
    a = RandomSource(generator=torch.Generator().manual_seed(3)).spawn(3)
    b = RandomSource(generator=torch.Generator().manual_seed(3)).spawn(3)
    for x, y in zip(a, b):
        assert x._stream is None and x.kind == "seeded" and x.generator is None
        assert torch.equal(x.words(100), y.words(100))
    assert all(c._stream is not None for c in RandomSource().spawn(2))
