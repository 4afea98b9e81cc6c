"""The device ChaCha20 keystream, under its former module name: the code now lives in
:mod:`pyg_private.sampling.words.chacha20_device` (the names are re-exported unchanged, the same
objects; importing it imports ``triton`` where installed, as before)."""
from ..sampling.words.chacha20_device import (
    DeviceChaCha20Stream,
    chacha20_words_torch,
    chacha20_words_triton,
    triton_available,
)

__all__ = ["chacha20_words_torch", "chacha20_words_triton", "DeviceChaCha20Stream", "triton_available"]
