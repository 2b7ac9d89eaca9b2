"""A keyed pseudo-random function in bulk: AES-256 over packed (row, record id) blocks.

Both encoders draw their per-record randomness from PRF(key, row, id) instead of a sequential RNG:
  * DPFM needs the *same* geometric value for a record at every party and for every attribute
    (VertiMRF Sec. 4.3: the hash ξ_h maps a record id to one value), so the value must be a
    function of (key_h, id) that every key holder computes alike;
  * chunked and distributed encoding must equal one-shot encoding bit for bit, which a
    counter-based function of the global record id gives for free.

Why the server cannot predict the values: AES is a pseudo-random permutation; without the 256-bit
key (agreed by the parties through X25519 + HKDF, see `keys.py`, and never sent to the server)
the outputs on distinct blocks are computationally indistinguishable from independent uniform
128-bit strings. The repetition index h sits inside the block, so (key, h) acts as t independent
hash keys ξ_1..ξ_t. ECB mode is the right mode here: it *is* the PRF applied to each distinct
block (no block repeats, so no pattern leaks); OpenSSL runs it with AES-NI at GB/s.
"""
from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from vertisynth.core.errors import ConfigError

# Domain-separation tags in the top byte of the row word, so one key never serves two purposes.
TAG_FM = 1
TAG_GRR = 2
_TWO_M53 = 2.0**-53


def prf_words(key: bytes, tag: int, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """128 pseudo-random bits per (row, id) as a (len(rows), len(ids), 2) uint64 array."""
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        raise ConfigError("the PRF key must be 32 bytes (AES-256)")
    rows = np.asarray(rows, dtype=np.uint64)
    ids = np.asarray(ids, dtype=np.uint64)
    if rows.size and int(rows.max()) >= 1 << 56:
        raise ConfigError("PRF row index too large (must be < 2^56)")
    blocks = np.empty((rows.size, ids.size, 2), dtype="<u8")
    blocks[..., 0] = (rows | np.uint64(tag << 56))[:, None]
    blocks[..., 1] = ids[None, :]
    enc = Cipher(algorithms.AES(bytes(key)), modes.ECB()).encryptor()
    out = enc.update(blocks.tobytes()) + enc.finalize()
    return np.frombuffer(out, dtype="<u8").reshape(rows.size, ids.size, 2)


def uniform_open0(words: np.ndarray) -> np.ndarray:
    """Uniform doubles in (0, 1] from the top 53 bits of uint64 words."""
    return ((words >> np.uint64(11)).astype(np.float64) + 1.0) * _TWO_M53


def geometric_from_uniform(u: np.ndarray, gamma: float) -> np.ndarray:
    """Y = floor(log_{1/(1+γ)} U): P(Y >= k) = (1+γ)^-k, the FM sketch's Geometric(γ/(1+γ)) on {0,1,...}."""
    if gamma == 1.0:
        y = np.floor(-np.log2(u))  # exact at powers of two
    else:
        y = np.floor(np.log(u) / -np.log1p(gamma))
    return y.astype(np.int16)


def fm_geometric(key: bytes, reps: np.ndarray, ids: np.ndarray, gamma: float) -> np.ndarray:
    """The hashed geometric value H_{ξ_h}(id) for every repetition h in `reps` and record id: (len(reps), len(ids)) int16."""
    words = prf_words(key, TAG_FM, reps, ids)[..., 0]
    return geometric_from_uniform(uniform_open0(words), gamma)
