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

`scheme = "ou"` (opt-in, sf-heu): Okamoto-Uchiyama through HEU (`OUPublicKey`, `OUPrivateKey`; the argument and its
conditions are in docs/he.md "Scheme OU"). HEU makes the primes and G^m·H^r (r of 110 bits at 2048); each row
ciphertext is also multiplied by H^s for a fresh s of 2κ bits from the OS CSPRNG (κ = 112, or 128 from 3072 bits), by
a fixed-base table of H's powers (`_h_power`), since HEU's r alone resists Pollard's kangaroo only to 2^55; the
summing party re-randomises with H^r for r of |n| + 64 bits (`rerandomiser`); decryption is
HEU's, and refuses any value outside the public plaintext bound, which sits 64 bits below the secret prime p (OU's
chosen-ciphertext attack factors n from one decryption of a value above p). Ciphertexts are integers mod n (not N²).

Bulk work is mapped over row chunks with local processes (`concurrent.futures.ProcessPoolExecutor`): the
encryptions of the rows, and the encryptions of the summing party's noise (which also re-randomise the sums).
"""
from __future__ import annotations

import os
import secrets
import weakref
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.progress import step

from . import ops

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
SCHEMES = ("paillier", "ou")
OU_GUARD_BITS = 64    # the OU plaintext bound sits this far below p: a forged ciphertext passes E's range check
                      # with probability <= 2^-64, and the first that fails ends the run (and the key)


def require() -> None:
    if phe is None or gmpy2 is None:
        raise ConfigError("he: encoder 'he' with crypto = 'real' needs python-paillier and gmpy2: "
                          "pip install 'vertisynth[he]' (or use crypto = 'simulated')")


RANDOMNESS = ("auto", "short", "full")


def short_available() -> bool:
    return heu is not None


def resolve(randomness: str, scheme: str = "paillier", strict: bool = True) -> str:
    """What the encrypting parties' keys are: "full" or "short" (Paillier; "auto": "short" when sf-heu is
    installed, else "full"; "short" without sf-heu is refused), or "ou" (scheme = "ou": needs sf-heu)."""
    if scheme not in SCHEMES:
        raise ConfigError(f"he: scheme must be one of {list(SCHEMES)}, got {scheme!r}")
    if randomness not in RANDOMNESS:
        raise ConfigError(f"he: randomness must be one of {list(RANDOMNESS)}, got {randomness!r}")
    if scheme == "ou":
        if randomness != "auto":
            raise ConfigError(f"he: randomness = {randomness!r} is a Paillier setting; scheme = 'ou' draws its own "
                              "(leave randomness out)")
        if heu is None and strict:   # not strict: a simulated run, which encrypts nothing
            raise ConfigError("he: scheme = 'ou' needs SecretFlow's HEU: pip install sf-heu (or scheme = 'paillier')")
        return "ou"
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
    ops.count("key", 1)
    if randomness == "ou":
        return _ou_keypair(bits)
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
    """Bytes of one serialised ciphertext (an integer below N², or n for OU)."""
    return (ct_modulus(public_key).bit_length() + 7) // 8


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
                 label: str = "encrypt", op: str = "enc") -> list[int]:
    """Encrypt every plaintext with fresh randomness (short exponents when the key is a `ShortExponentKey`); chunks
    go to `workers` local processes (0: all cores, 1: in this process)."""
    require()
    plaintexts = [int(m) for m in plaintexts]
    if isinstance(public_key, OUPublicKey):
        job, head = _encrypt_chunk_ou, (public_key.heu_key, public_key.shift, public_key.bound_bits,
                                        public_key.full)
    elif isinstance(public_key, ShortExponentKey):
        job, head = _encrypt_chunk_short, (public_key.n, public_key.heu_key, public_key.montgomery)
    else:
        job, head = _encrypt_chunk, (public_key.n,)
    workers = workers or (os.cpu_count() or 1)
    parts = [plaintexts[i:i + chunk] for i in range(0, len(plaintexts), chunk)]
    out: list[int] = []
    # counted as `op` ("enc": E's rows, whose set bits drive OU's G^m; "noise": S's full-randomness encryptions)
    ops.count(op, len(plaintexts))
    if op == "enc":
        ops.count("enc_bit", sum(m.bit_count() for m in plaintexts))
    if workers > 1 and len(parts) > 1:
        ops.count("setup", min(workers, len(parts)))
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
    ops.count("load", len(flat))
    nsq = ct_modulus(public_key)
    for i, row in enumerate(flat):
        v = int.from_bytes(row.tobytes(), "big")
        if not 0 < v < nsq:
            raise ConfigError("he: a ciphertext lies outside [1, N²) (OU: [1, n)): not encrypted under this key")
        out[i] = gmpy2.mpz(v)
    return out.reshape(raw.shape[:-1])


_LOADED: dict[tuple[int, int], np.ndarray] = {}   # (id of a ciphertext array, N) -> its integers, while it lives


def loaded(public_key, raw: np.ndarray) -> np.ndarray:
    """`from_bytes`, kept while `raw` lives: S sums E's whole rows again for every answer of a run (issue 31), and
    reading 45,222 ciphertexts from bytes each time cost about as much as summing them."""
    key = (id(raw), int(ct_modulus(public_key)))
    if key not in _LOADED:
        _LOADED[key] = from_bytes(public_key, raw)
        weakref.finalize(raw, _LOADED.pop, key, None)
    return _LOADED[key]


def product_mod(cts: np.ndarray, nsquare) -> np.ndarray:
    """Homomorphic sum over axis 0 of an (rows, k) object array: the product mod N², by pairwise tree reduction
    (numpy applies each level elementwise). An empty set sums to the trivial encryption of 0, namely 1."""
    nsq = gmpy2.mpz(nsquare)
    x = np.asarray(cts, dtype=object)
    ops.count("mul", x.size)   # the ciphertexts folded in (what the estimate counts: a sum's rows x columns)
    if len(x) == 0:
        return np.full(x.shape[1:], gmpy2.mpz(1), dtype=object)
    while len(x) > 1:
        half = len(x) // 2
        paired = (x[:half] * x[half:2 * half]) % nsq
        x = np.concatenate([paired, x[2 * half:]]) if len(x) % 2 else paired
    return x[0]


def decrypt_many(private_key, ciphertexts: Sequence[int]) -> list[int]:
    ops.count("dec", len(ciphertexts))
    return [int(private_key.raw_decrypt(int(c))) for c in ciphertexts]


# -- scheme-neutral views of a key (Paillier: plaintexts below N, ciphertexts below N²; OU: below the public bound
#    2^bound_bits, and below n) ---------------------------------------------------------------------------------
def plain_modulus(public_key) -> int:
    """Every plaintext an honest run makes lies below this (packing's slots, S's masks)."""
    return 1 << public_key.bound_bits if isinstance(public_key, OUPublicKey) else public_key.n


def plain_bits(public_key) -> int:
    """The layout's modulus bits (`Layout.build`: its slots fill at most plain_bits - 1 bits)."""
    return plain_modulus(public_key).bit_length()


def ct_modulus(public_key) -> int:
    """The homomorphic sum is the product mod this."""
    return public_key.n if isinstance(public_key, OUPublicKey) else public_key.nsquare


def plan_bits(key_bits: int, scheme: str = "paillier") -> int:
    """`plain_bits` of every key of `key_bits` bits of `scheme`, from the config alone (plans and estimates):
    Paillier's N has key_bits bits; an OU key's bound is OU_GUARD_BITS below its smallest p (`_ou_keypair`)."""
    if scheme == "ou":
        return (key_bits + 2) // 3 - 2 - OU_GUARD_BITS + 1
    return key_bits


def plan_ct_bytes(key_bits: int, scheme: str = "paillier") -> int:
    """Bytes of one ciphertext of a `key_bits` key (OU: HEU's n has a few bits more than key_bits)."""
    return (key_bits + 8 + 7) // 8 if scheme == "ou" else 2 * key_bits // 8


def key_text(public_key) -> str:
    """The public key as messages carry it (and as rounds.py fingerprints it): N in hex for Paillier (as before),
    "ou:<Montgomery shift>:<bound bits>:<HEU's serialised key in hex>" for OU."""
    if isinstance(public_key, OUPublicKey):
        return f"ou:{public_key.shift}:{public_key.bound_bits}:{public_key.heu_key.hex()}"
    return format(public_key.n, "x")


def text_bits(text: str) -> int:
    """The modulus bits of a key text, without loading it (messages' validate)."""
    try:
        if text.startswith("ou:"):
            n = _ou_parse(bytes.fromhex(text.split(":")[3]))[0]
            return n.bit_length()
        return int(text or "0", 16).bit_length()
    except (ValueError, IndexError):
        return 0


def public_from_text(text: str):
    """The public key a message names (`key_text`): phe's Paillier key on N, or an OU key through HEU."""
    require()
    if not text.startswith("ou:"):
        return phe.PaillierPublicKey(int(text, 16))
    if heu is None:
        raise ConfigError("he: this run's key is OU, which needs SecretFlow's HEU here: pip install sf-heu")
    try:
        _, shift, bound, raw = text.split(":")
        return OUPublicKey(bytes.fromhex(raw), int(shift), int(bound))
    except (ValueError, TypeError):
        raise MessageError("he: an OU public key that does not parse; refused") from None


def rerandomiser(public_key):
    """The key S encrypts its noise under: full-length randomness (Paillier: phe's r^N, r < N; OU:
    H^r, r of |n| + 64 bits), which hides which rows a sum holds even from E, who holds the trapdoor (docs/he.md)."""
    if isinstance(public_key, OUPublicKey):
        return OUPublicKey(public_key.heu_key, public_key.shift, public_key.bound_bits, full=True)
    return phe.PaillierPublicKey(public_key.n)


def scheme_of(public_key) -> str:
    return "ou" if isinstance(public_key, OUPublicKey) else "paillier"


def check_scheme(text: str, scheme: str, what: str) -> None:
    """Refuse a key text of another scheme than the run's (a party configured for one never sums or encrypts
    under the other's key)."""
    got = "ou" if str(text).startswith("ou:") else "paillier"
    if got != scheme:
        raise MessageError(f"{what}: a {got} key, but this run's scheme is {scheme!r}; refused")


# -- OU through HEU --------------------------------------------------------------------------------------------
_OU_TAIL = b"\x01" + b"\x00" * 7   # what HEU 0.5 writes after a ciphertext's integer (checked per key)


_PARSED: dict[bytes, tuple[int, int, int, int]] = {}


def _ou_parse(heu_key: bytes) -> tuple[int, int, int, int]:
    """(n, G, H, log2 of HEU's plaintext bound) of HEU's serialised OU public key (read from its text; loading a
    key builds HEU's tables, about half a second, so once per key and process)."""
    if heu_key in _PARSED:
        return _PARSED[heu_key]
    text = str(heu.PublicKey.load_from(heu_key))
    if not text.startswith("OU PK"):
        raise ValueError("not an OU key")
    n, g, h = (int(text.split(f"{k}=")[1].split("[")[0], 16) for k in ("n", "G", "H"))
    top = int(text.split("max_plaintext=")[1].split("[")[0], 16).bit_length() - 1
    if len(_PARSED) >= 8:
        _PARSED.pop(next(iter(_PARSED)))
    _PARSED[heu_key] = (n, g, h, top)
    return _PARSED[heu_key]


class OUPublicKey:
    """An OU public key: HEU's serialised key (`heu_key`) and what this module reads off it: n, H, HEU's
    Montgomery shift (its ciphertexts are c·2^shift mod n) and the public plaintext bound 2^bound_bits.
    `full`: encryptions re-randomised with a full-length H^r (S's noise) instead of H^s (E's rows)."""

    def __init__(self, heu_key: bytes, shift: int, bound_bits: int, full: bool = False) -> None:
        self.heu_key, self.shift, self.bound_bits, self.full = bytes(heu_key), int(shift), int(bound_bits), full
        try:
            self.n, _, self.h, top = _ou_parse(self.heu_key)
        except Exception:   # HEU raises its own types on a malformed key
            raise MessageError("he: an OU public key that does not parse; refused") from None
        if not 0 < self.bound_bits <= top - OU_GUARD_BITS:
            raise MessageError(f"he: an OU key whose plaintext bound 2^{self.bound_bits} is not at least "
                               f"{OU_GUARD_BITS} bits below its prime; refused")
        if not 0 < self.shift < 4 * self.n.bit_length():
            raise MessageError("he: an OU key with an implausible Montgomery shift; refused")
        self.montgomery = pow(pow(2, self.shift, self.n), -1, self.n)
        self.kappa = 128 if self.n.bit_length() >= 3072 else 112   # the key's security level in bits

    def __eq__(self, other) -> bool:
        return isinstance(other, OUPublicKey) and (self.heu_key, self.shift, self.bound_bits) == (
            other.heu_key, other.shift, other.bound_bits)

    def __hash__(self) -> int:
        return hash((self.heu_key, self.shift, self.bound_bits))


class OUPrivateKey:
    """HEU's OU decryptor for `public_key`, with the range check that keeps OU's chosen-ciphertext attack out."""

    def __init__(self, public_key: OUPublicKey, decryptor) -> None:
        self.public_key, self._dec = public_key, decryptor

    def raw_decrypt(self, c: int) -> int:
        pk = self.public_key
        m = _ou_decrypt(self._dec, pk, c)
        if not 0 <= m < 1 << pk.bound_bits:
            raise MessageError("he: a returned ciphertext decrypts outside what an honest sum can make; refusing it "
                               "and ending the run (OU's chosen-ciphertext guard, docs/he.md)")
        return m


def _ou_decrypt(dec, pk: OUPublicKey, c: int) -> int:
    """HEU's decryption of the standard-form ciphertext c (a signed value in (-p/2, p/2]), no range check."""
    v = int(c) * pow(2, pk.shift, pk.n) % pk.n            # back to HEU's Montgomery form
    size = v.bit_length() // 8 + 1   # HEU writes a sign bit: a zero byte above a full top byte
    head = b"\x91\xd9" + bytes([size]) if size < 256 else b"\x91\xda" + size.to_bytes(2, "big")   # msgpack str8/16
    return int(dec.decrypt_raw(heu.Ciphertext.load_from(head + v.to_bytes(size, "little") + _OU_TAIL)))


def _ou_value(ct, check: bool = False) -> int:
    raw = ct.serialize()   # a one-element msgpack array: str8 or str16 of the little-endian integer, then a tail
    at, size = (3, raw[2]) if raw[1:2] == b"\xd9" else (4, int.from_bytes(raw[2:4], "big"))
    value = int.from_bytes(raw[at:at + size], "little")
    if raw[:1] != b"\x91" or raw[1] not in (0xD9, 0xDA) or raw[at + size:] != _OU_TAIL or (check and value !=
                                                                                           int(str(ct))):
        raise ConfigError("he: this sf-heu version serialises OU ciphertexts differently; use scheme = 'paillier'")
    return value


def _ou_keypair(bits: int, tries: int = 8):
    """A fresh OU key pair from HEU (its primes from its CSPRNG); the bound is `plan_bits(bits, "ou")`, and a key
    whose p is too short for it (HEU's p varies by a bit or two) is drawn again."""
    want = plan_bits(bits, "ou") - 1
    for _ in range(tries):
        kit = heu.setup(heu.SchemaType.OU, bits)
        heu_key = kit.public_key().serialize()
        n, _, _, top = _ou_parse(heu_key)
        if top - OU_GUARD_BITS < want:
            continue
        enc, dec = kit.encryptor(), kit.decryptor()
        a, b = (enc.encrypt_raw(m) for m in (11, 20))
        va, vb = _ou_value(a, check=True), _ou_value(b, check=True)
        for k in range(n.bit_length(), n.bit_length() + 200):   # HEU's R = 2^k: its digit count of n x digit bits
            inv = pow(pow(2, k, n), -1, n)
            probe = attrs_probe(n, k)
            if _ou_decrypt(dec, probe, va * inv % n * vb * inv % n) == 31:   # the product of the standard forms
                pk = OUPublicKey(heu_key, k, want)
                _keep_encryptor(heu_key, enc)
                return pk, OUPrivateKey(pk, dec)
        raise ConfigError("he: sf-heu's OU ciphertexts did not decrypt under its own key; use scheme = 'paillier'")
    raise ConfigError(f"he: sf-heu made no OU key of {bits} bits with room for the plaintext bound; use a larger key")


def attrs_probe(n: int, shift: int):
    """The two fields `_ou_decrypt` reads, for trying a Montgomery shift before the key exists."""
    return type("Probe", (), {"n": n, "shift": shift})()


_H_TABLES: dict[tuple[int, int], np.ndarray] = {}   # (n, H) -> H^(d·256^i) mod n: one table per key and process


def _h_power(pk: OUPublicKey, count: int) -> np.ndarray:
    """`count` values H^s mod n, each s uniform of 2κ bits from the OS CSPRNG: a fixed-base product of table
    entries (byte i of s picks H^(s_i·256^i)), vectorised over the values."""
    rows = 2 * pk.kappa // 8
    key = (pk.n, pk.h)
    if key not in _H_TABLES:
        n, base = gmpy2.mpz(pk.n), gmpy2.mpz(pk.h)
        table = np.empty((rows, 256), dtype=object)
        for i in range(rows):
            table[i, 0] = gmpy2.mpz(1)
            for d in range(1, 256):
                table[i, d] = table[i, d - 1] * base % n
            base = table[i, 255] * base % n
        if len(_H_TABLES) >= 4:
            _H_TABLES.pop(next(iter(_H_TABLES)))
        _H_TABLES[key] = table
    table, n = _H_TABLES[key], gmpy2.mpz(pk.n)
    digits = np.frombuffer(os.urandom(count * rows), np.uint8).reshape(count, rows)
    acc = table[0, digits[:, 0]]
    for i in range(1, rows):
        acc = acc * table[i, digits[:, i]] % n
    return acc


def _encrypt_chunk_ou(heu_key: bytes, shift: int, bound_bits: int, full: bool, plaintexts: list[int]) -> list[int]:
    pk = OUPublicKey(heu_key, shift, bound_bits, full)
    enc = _short_encryptor(heu_key)
    if any(not 0 <= m < 1 << bound_bits for m in plaintexts):
        raise ConfigError(f"he: a packed plaintext does not fit the OU key's {bound_bits}-bit bound")
    n = gmpy2.mpz(pk.n)
    std = np.array([gmpy2.mpz(_ou_value(enc.encrypt_raw(m), i % CHECK_EVERY == 0)) for i, m in enumerate(plaintexts)],
                   dtype=object) * gmpy2.mpz(pk.montgomery) % n
    if full:   # H^r for r of |n| + 64 bits: within 2^-64 of uniform on <H>, whatever E recorded of its own rows
        bits, h = pk.n.bit_length() + 64, gmpy2.mpz(pk.h)
        extra = np.array([gmpy2.powmod(h, gmpy2.mpz(secrets.randbits(bits)), n) for _ in plaintexts], dtype=object)
    else:
        extra = _h_power(pk, len(plaintexts))
    return [int(v) for v in std * extra % n]
