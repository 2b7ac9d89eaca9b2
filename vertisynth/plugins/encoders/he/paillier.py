"""Paillier from maintained libraries, used on raw ciphertext integers for speed.

Two ways to make the encrypting party's keys and bulk encryptions (`randomness`):
  * "full": python-paillier (`phe`, gmpy2): `phe.generate_paillier_keypair` (OS CSPRNG primes) and
    `PaillierPublicKey.raw_encrypt` (fresh full-length r < N, obfuscator r^N mod N²): a full exponentiation each.
  * "short": SecretFlow's HEU (`sf-heu`), scheme ZPaillier: the DJN short-exponent variant, c = (1 + mN)·h_s^r mod N²
    with h_s = (−x²)^N mod N² in the public key and r of only |N|/2 bits, a fixed-base exponentiation (about 15x
    cheaper here). HEU returns ciphertexts in its Montgomery form c·R mod N²; R = 2^k depends on HEU's big-integer
    digit size, so `keypair` finds k once per key and proves it by decrypting known plaintexts with phe (a wrong k
    cannot pass). The assumption it adds, and why it is used in production: docs/he.md.
Either way the ciphertexts are standard Paillier ciphertexts under g = N + 1, so everything else is the same: phe's
`raw_decrypt` (CRT, with the primes HEU made), the homomorphic sum as the product mod N² (what `phe.EncryptedNumber`
does inside), and the summing party's noise encryptions (phe, full-length randomness: few, and they re-randomise).

Bulk work is mapped over row chunks with local processes (`concurrent.futures.ProcessPoolExecutor`): the
encryptions of the rows, and the encryptions of the summing party's noise (which also re-randomise the sums).
"""
from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from vertisynth.core.errors import ConfigError
from vertisynth.core.progress import step

try:
    import gmpy2
    import phe
    from phe.util import powmod  # noqa: F401  (imported so a missing gmpy2 backend shows at import)
except ImportError:  # pragma: no cover - the optional extra is absent
    phe = None
    gmpy2 = None
try:
    from heu import phe as heu
except ImportError:  # pragma: no cover - the optional short-exponent backend is absent
    heu = None

MIN_KEY_BITS = 2048   # production floor; tests lower it (monkeypatch) for speed


def require() -> None:
    if phe is None or gmpy2 is None:
        raise ConfigError("he: encoder 'he' with crypto = 'real' needs python-paillier and gmpy2: "
                          "pip install 'vertisynth[he]' (or use crypto = 'simulated')")


RANDOMNESS = ("auto", "short", "full")


def short_available() -> bool:
    return heu is not None


def resolve(randomness: str) -> str:
    """"auto": "short" when sf-heu is installed, else "full"; "short" without sf-heu is refused."""
    if randomness not in RANDOMNESS:
        raise ConfigError(f"he: randomness must be one of {list(RANDOMNESS)}, got {randomness!r}")
    if randomness == "auto":
        return "short" if heu is not None else "full"
    if randomness == "short" and heu is None:
        raise ConfigError("he: randomness = 'short' needs SecretFlow's HEU: pip install sf-heu (or randomness = 'full')")
    return randomness


class ShortExponentKey(phe.PaillierPublicKey if phe is not None else object):   # type: ignore[misc]
    """A phe public key whose owner encrypts with HEU's short exponents: `heu_key` (HEU's serialised public key, for
    the encrypting processes) and `montgomery` (R⁻¹ mod N², HEU's ciphertext form to the standard one)."""

    def __init__(self, n: int, heu_key: bytes, montgomery: int) -> None:
        super().__init__(n)
        self.heu_key, self.montgomery = heu_key, montgomery


def keypair(bits: int, randomness: str = "full"):
    """A fresh Paillier key pair (phe public and private key objects) of `bits` bits (>= MIN_KEY_BITS)."""
    require()
    if bits < MIN_KEY_BITS:
        raise ConfigError(f"he: key_bits must be >= {MIN_KEY_BITS}, got {bits}")
    if resolve(randomness) == "full":
        return phe.generate_paillier_keypair(n_length=bits)
    kit = heu.setup(heu.SchemaType.ZPaillier, bits)
    text = str(kit.secret_key())   # "Z-paillier SK: p=<hex>[1024bits], q=<hex>[...]": HEU's primes
    try:
        p, q = (int(text.split(f"{k}=")[1].split("[")[0], 16) for k in ("p", "q"))
    except (IndexError, ValueError):
        raise ConfigError("he: cannot read the primes of this sf-heu version's key; use randomness = 'full'") from None
    n, nsq = p * q, (p * q) ** 2
    if n.bit_length() < bits or not (gmpy2.is_prime(p) and gmpy2.is_prime(q)):
        raise ConfigError("he: sf-heu returned an unexpected key; use randomness = 'full'")
    enc = kit.encryptor()
    probes = [int.from_bytes(os.urandom(bits // 8 - 2), "big") for _ in range(2)]
    raw = [int(_heu_value(enc.encrypt_raw(m), check=True)) for m in probes]
    pub = phe.PaillierPublicKey(n)
    priv = phe.PaillierPrivateKey(pub, p, q)
    nsq_digits = nsq.bit_length()
    for k in range(nsq_digits, nsq_digits + 200):   # R = 2^k: HEU's digit count of N² times its digit bits
        inv = pow(pow(2, k, nsq), -1, nsq)
        if all(priv.raw_decrypt(c * inv % nsq) == m for c, m in zip(raw, probes)):
            key = ShortExponentKey(n, kit.public_key().serialize(), inv)
            _keep_encryptor(key.heu_key, enc)
            return key, phe.PaillierPrivateKey(key, p, q)
    raise ConfigError("he: sf-heu's ciphertexts did not decrypt under its own key; use randomness = 'full'")


def ciphertext_bytes(public_key) -> int:
    """Bytes of one serialised ciphertext (an integer below N²)."""
    return (public_key.nsquare.bit_length() + 7) // 8


def _encrypt_chunk(n: int, plaintexts: list[int]) -> list[int]:
    pk = phe.PaillierPublicKey(n)
    return [int(pk.raw_encrypt(int(m))) for m in plaintexts]


CHECK_EVERY = 64   # one HEU ciphertext in this many is also read through its decimal text (slow) and compared


def _heu_value(ct, check: bool = False):
    """The integer of an HEU ciphertext (still in its Montgomery form). Its serialisation is a one-element msgpack
    array holding the little-endian bytes (0x91 0xda <u16 size> <bytes> ...); read that (microseconds) rather than the
    decimal text (0.3 ms); anything else, and every CHECK_EVERY-th value, goes through the text."""
    raw = ct.serialize()
    if len(raw) > 4 and raw[0] == 0x91 and raw[1] == 0xDA:
        size = int.from_bytes(raw[2:4], "big")
        value = gmpy2.mpz(int.from_bytes(raw[4:4 + size], "little"))
        if check and value != gmpy2.mpz(str(ct)):
            raise ConfigError("he: this sf-heu version serialises ciphertexts differently; use randomness = 'full'")
        return value
    return gmpy2.mpz(str(ct))


_ENCRYPTORS: dict[bytes, object] = {}   # HEU encryptor per public key and process: its setup (the fixed-base
                                        # table of h_s) costs about half a second, an encryption 0.7 ms


def _keep_encryptor(heu_key: bytes, enc) -> None:
    # a few keys (one per encrypting party of a one-process run), so that parties taking turns, and the pool
    # workers forked from this process, do not rebuild each other's tables
    if len(_ENCRYPTORS) >= 4 and heu_key not in _ENCRYPTORS:
        _ENCRYPTORS.pop(next(iter(_ENCRYPTORS)))
    _ENCRYPTORS[heu_key] = enc


def _short_encryptor(heu_key: bytes):
    if heu_key not in _ENCRYPTORS:
        _keep_encryptor(heu_key, heu.setup(heu.PublicKey.load_from(heu_key)).encryptor())
    return _ENCRYPTORS[heu_key]


def _encrypt_chunk_short(n: int, heu_key: bytes, montgomery: int, plaintexts: list[int]) -> list[int]:
    enc = _short_encryptor(heu_key)
    nsq, inv, half = gmpy2.mpz(n) ** 2, gmpy2.mpz(montgomery), (n - 1) // 2
    # HEU bounds |m| by (N-1)/2; m - N encrypts to the same (1 + mN) mod N²
    return [int(_heu_value(enc.encrypt_raw(m if m <= half else m - n), i % CHECK_EVERY == 0) * inv % nsq)
            for i, m in enumerate(plaintexts)]


def encrypt_many(public_key, plaintexts: Sequence[int], workers: int = 0, chunk: int = 2048,
                 label: str = "encrypt") -> list[int]:
    """Encrypt every plaintext with fresh randomness (short exponents when the key is a `ShortExponentKey`); chunks
    go to `workers` local processes (0: all cores, 1: in this process)."""
    require()
    plaintexts = [int(m) for m in plaintexts]
    if isinstance(public_key, ShortExponentKey):
        job, head = _encrypt_chunk_short, (public_key.n, public_key.heu_key, public_key.montgomery)
    else:
        job, head = _encrypt_chunk, (public_key.n,)
    workers = workers or (os.cpu_count() or 1)
    parts = [plaintexts[i:i + chunk] for i in range(0, len(plaintexts), chunk)]
    out: list[int] = []
    if workers == 1 or len(parts) <= 1:
        for part in parts:
            out += job(*head, part)
            step(label, len(out), len(plaintexts))
        return out
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(job, *([h] * len(parts) for h in head), parts):
            out += part
            step(label, len(out), len(plaintexts))
    return out


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


_LOADED: dict[tuple[int, int], np.ndarray] = {}   # (id of a ciphertext array, N) -> its integers, while it lives


def loaded(public_key, raw: np.ndarray) -> np.ndarray:
    """`from_bytes`, kept while `raw` lives: S sums E's whole rows again for every answer of a run (issue 31), and
    reading 45,222 ciphertexts from bytes each time cost about as much as summing them."""
    key = (id(raw), int(public_key.n))
    if key not in _LOADED:
        _LOADED[key] = from_bytes(public_key, raw)
        weakref.finalize(raw, _LOADED.pop, key, None)
    return _LOADED[key]


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
