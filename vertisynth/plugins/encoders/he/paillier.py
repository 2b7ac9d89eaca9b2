"""Paillier from python-paillier (`phe`, with gmpy2), used on raw ciphertext integers for speed.

Only the library's primitives are used: key generation (`phe.generate_paillier_keypair`, OS CSPRNG primes),
`PaillierPublicKey.raw_encrypt` (fresh full-length randomness r < N from `random.SystemRandom`, obfuscator r^N mod N²)
and `PaillierPrivateKey.raw_decrypt` (CRT). The homomorphic addition of raw ciphertexts is their product mod N² (what
`phe.EncryptedNumber` does inside). phe has no short-exponent randomness, so every encryption pays a full 2048-bit
exponentiation (about 4x the short-exponent cost; docs/he.md has the numbers).

Bulk work is mapped over row chunks with local processes (`concurrent.futures.ProcessPoolExecutor`): the
encryptions of the rows, and the encryptions of the summing party's noise (which also re-randomise the sums).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from vertisynth.core.errors import ConfigError

try:
    import gmpy2
    import phe
    from phe.util import powmod  # noqa: F401  (imported so a missing gmpy2 backend shows at import)
except ImportError:  # pragma: no cover - the optional extra is absent
    phe = None
    gmpy2 = None

MIN_KEY_BITS = 2048   # production floor; tests lower it (monkeypatch) for speed


def require() -> None:
    if phe is None or gmpy2 is None:
        raise ConfigError("he: encoder 'he' with crypto = 'real' needs python-paillier and gmpy2: "
                          "pip install 'vertisynth[he]' (or use crypto = 'simulated')")


def keypair(bits: int):
    """A fresh Paillier key pair of `bits` bits (>= MIN_KEY_BITS)."""
    require()
    if bits < MIN_KEY_BITS:
        raise ConfigError(f"he: key_bits must be >= {MIN_KEY_BITS}, got {bits}")
    return phe.generate_paillier_keypair(n_length=bits)


def ciphertext_bytes(public_key) -> int:
    """Bytes of one serialised ciphertext (an integer below N²)."""
    return (public_key.nsquare.bit_length() + 7) // 8


def _encrypt_chunk(n: int, plaintexts: list[int]) -> list[int]:
    pk = phe.PaillierPublicKey(n)
    return [int(pk.raw_encrypt(int(m))) for m in plaintexts]


def encrypt_many(public_key, plaintexts: Sequence[int], workers: int = 0, chunk: int = 2048) -> list[int]:
    """Encrypt every plaintext with fresh randomness; chunks go to `workers` local processes (0: all cores,
    1: in this process)."""
    require()
    plaintexts = [int(m) for m in plaintexts]
    workers = workers or (os.cpu_count() or 1)
    if workers == 1 or len(plaintexts) <= chunk:
        return _encrypt_chunk(public_key.n, plaintexts)
    parts = [plaintexts[i:i + chunk] for i in range(0, len(plaintexts), chunk)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = pool.map(_encrypt_chunk, [public_key.n] * len(parts), parts)
        return [c for part in done for c in part]


def to_bytes(public_key, ciphertexts: np.ndarray) -> np.ndarray:
    """Ciphertexts (an object array of ints) as a uint8 array with a trailing axis of fixed-width big-endian bytes."""
    width = ciphertext_bytes(public_key)
    flat = b"".join(int(c).to_bytes(width, "big") for c in np.asarray(ciphertexts, dtype=object).ravel())
    return np.frombuffer(flat, dtype=np.uint8).reshape(np.shape(ciphertexts) + (width,))


def from_bytes(public_key, raw: np.ndarray) -> np.ndarray:
    """The inverse of `to_bytes`, as gmpy2 integers (fast products); refuses values outside [1, N²)."""
    raw = np.asarray(raw, dtype=np.uint8)
    width = raw.shape[-1]
    flat = raw.reshape(-1, width)
    out = np.empty(len(flat), dtype=object)
    nsq = public_key.nsquare
    for i, row in enumerate(flat):
        v = int.from_bytes(row.tobytes(), "big")
        if not 0 < v < nsq:
            raise ConfigError("he: a ciphertext lies outside [1, N²): not encrypted under this key")
        out[i] = gmpy2.mpz(v)
    return out.reshape(raw.shape[:-1])


def product_mod(cts: np.ndarray, nsquare) -> np.ndarray:
    """Homomorphic sum over axis 0 of an (rows, k) object array: the product mod N², by pairwise tree reduction
    (numpy applies each level elementwise). An empty set sums to the trivial encryption of 0, namely 1."""
    nsq = gmpy2.mpz(nsquare)
    x = np.asarray(cts, dtype=object)
    if len(x) == 0:
        return np.full(x.shape[1:], gmpy2.mpz(1), dtype=object)
    while len(x) > 1:
        half = len(x) // 2
        paired = (x[:half] * x[half:2 * half]) % nsq
        x = np.concatenate([paired, x[2 * half:]]) if len(x) % 2 else paired
    return x[0]


def decrypt_many(private_key, ciphertexts: Sequence[int]) -> list[int]:
    return [int(private_key.raw_decrypt(int(c))) for c in ciphertexts]
