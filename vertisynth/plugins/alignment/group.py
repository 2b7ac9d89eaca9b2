"""The prime-order group the alignment protocols blind identifiers in: ristretto255 (libsodium via `rbcl`).

Why ristretto255: a prime-order group (no cofactor pitfalls, every encoding canonical), a
hash-to-group map (`from_hash`, Elligator on 64 uniform bytes), constant-time scalar multiplication,
and scalars that multiply and invert mod the group order, so a party can apply several of its
exponents in one multiplication (x^{s1 s3} = x^{(s1·s3 mod ℓ)}). DDH is believed hard in it, which is
what the PSI/PSU security arguments (commutative blinding x -> x^k) rest on.

Elements travel as (n, 32) uint8 arrays. Scalar multiplication is one C call per element (libsodium
has no batch call; the Python loop costs ~1 µs against ~57 µs of curve arithmetic); large batches are
split across a persistent process pool, or, when `workers` is a `distributed.Client`, mapped over a Dask
cluster in chunks of DASK_CHUNK elements (joined in order: the same bytes as one process computes).
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import multiprocessing
import os
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from vertisynth.core.cluster import is_client
from vertisynth.core.errors import DataError, MessageError

try:  # rbcl bundles libsodium with the ristretto255 API (PyNaCl does not expose it)
    import rbcl
except ImportError as exc:  # pragma: no cover - rbcl is a declared dependency
    raise ImportError("the psi/psu aligners need the 'rbcl' package (pip install rbcl)") from exc

ELEMENT_BYTES = 32
SCALAR_BYTES = 32
PARALLEL_MIN = 20_000  # below this, process start-up costs more than it saves
DASK_CHUNK = 50_000    # elements per Dask task: ~3 CPU s of curve arithmetic, 1.6 MB each way


def normalise_ids(ids: Sequence[object], steps: Sequence[str]) -> list[str]:
    """Identifiers as canonical strings: `strip` (spaces), `nfkc` (unicode forms), `casefold` (e-mails...)."""
    unknown = set(steps) - {"strip", "nfkc", "casefold"}
    if unknown:
        raise DataError(f"unknown identifier normalisation step(s) {sorted(unknown)}; valid: strip, nfkc, casefold")
    out = []
    for i, raw in enumerate(ids):
        if raw is None or (isinstance(raw, float) and np.isnan(raw)):
            raise DataError(f"identifier at row {i} is missing")
        s = str(raw)
        if "nfkc" in steps:
            s = unicodedata.normalize("NFKC", s)
        if "strip" in steps:
            s = s.strip()
        if "casefold" in steps:
            s = s.casefold()
        if not s:
            raise DataError(f"identifier at row {i} is empty{' after normalisation' if str(raw) else ''}")
        out.append(s)
    return out


def _hash_chunk(ids: list[str], prefix: bytes) -> bytes:
    return b"".join(rbcl.crypto_core_ristretto255_from_hash(hashlib.sha512(prefix + s.encode("utf-8")).digest())
                    for s in ids)


def hash_to_group(ids: Sequence[str], context: bytes, workers: Any = 1) -> np.ndarray:
    """H(id) in ristretto255: SHA-512 over a domain-separating context and the UTF-8 id, then Elligator."""
    prefix = b"vertisynth/align/v1/" + context + b"/"
    ids = list(ids)
    out = _mapped(_hash_chunk, len(ids), lambda a, b: ids[a:b], prefix, workers)
    return np.frombuffer(out, dtype=np.uint8).reshape(-1, ELEMENT_BYTES).copy()


def _mapped(fn: Callable[[Any, bytes], bytes], n: int, piece: Callable[[int, int], Any], arg: bytes,
            workers: Any) -> bytes:
    """fn(piece(a, b), arg) over consecutive ranges of n elements, joined in order: here, on the process
    pool (`workers` > 1 processes), or on a Dask cluster (`workers` a distributed.Client)."""
    if is_client(workers):
        bounds = list(range(0, n, DASK_CHUNK)) + [n]
        futures = workers.map(fn, [piece(a, b) for a, b in zip(bounds[:-1], bounds[1:])],
                              [arg] * (len(bounds) - 1), pure=False)
        try:
            return b"".join(workers.gather(futures))
        finally:
            for f in futures:
                f.release()
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise DataError(f"alignment workers must be a positive number of processes or a Dask client, got {workers!r}")
    if workers > 1 and n >= PARALLEL_MIN:
        bounds = np.linspace(0, n, workers + 1).astype(int)
        return b"".join(_pool(workers).map(fn, [piece(a, b) for a, b in zip(bounds[:-1], bounds[1:])],
                                           [arg] * workers))
    return fn(piece(0, n), arg)


@functools.lru_cache(maxsize=4)
def _pool(workers: int) -> ProcessPoolExecutor:
    """A process pool kept for the whole session (start-up would otherwise cost more than small batches).
    fork where the platform has it: workers need nothing but this module."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    atexit.register(pool.shutdown, wait=False, cancel_futures=True)
    return pool


def random_scalar(rng: np.random.Generator | None = None) -> bytes:
    """A uniform non-zero scalar mod ℓ: from the OS CSPRNG, or from `rng` for reproducible simulations."""
    while True:
        raw = os.urandom(64) if rng is None else rng.bytes(64)
        s = rbcl.crypto_core_ristretto255_scalar_reduce(raw)
        if any(s):
            return s


def scalar_mul(*scalars: bytes) -> bytes:
    out = scalars[0]
    for s in scalars[1:]:
        out = rbcl.crypto_core_ristretto255_scalar_mul(out, s)
    return out


def scalar_invert(s: bytes) -> bytes:
    return rbcl.crypto_core_ristretto255_scalar_invert(s)


def _to_array(points: list[bytes]) -> np.ndarray:
    if not points:
        return np.zeros((0, ELEMENT_BYTES), np.uint8)
    return np.frombuffer(b"".join(points), dtype=np.uint8).reshape(-1, ELEMENT_BYTES).copy()


def _exp_chunk(buf: bytes, scalar: bytes) -> bytes:
    mult = rbcl.crypto_scalarmult_ristretto255
    n = len(buf) // ELEMENT_BYTES
    try:
        return b"".join(mult(scalar, buf[i * ELEMENT_BYTES:(i + 1) * ELEMENT_BYTES]) for i in range(n))
    except RuntimeError:
        raise MessageError("a received element is not a valid ristretto255 encoding (or is the identity): "
                           "the message is malformed or was tampered with") from None


def exp(elements: np.ndarray, scalar: bytes, workers: Any = 1) -> np.ndarray:
    """x -> x^scalar for every row; rejects rows that are not valid group elements (MessageError)."""
    elements = check_elements(elements, "elements")
    n = len(elements)
    if n == 0:
        return elements.copy()
    buf = elements.tobytes()
    out = _mapped(_exp_chunk, n, lambda a, b: buf[a * ELEMENT_BYTES:b * ELEMENT_BYTES], scalar, workers)
    return np.frombuffer(out, dtype=np.uint8).reshape(n, ELEMENT_BYTES).copy()


def check_elements(elements: object, what: str) -> np.ndarray:
    arr = np.asarray(elements)
    if arr.ndim != 2 or arr.shape[1] != ELEMENT_BYTES or arr.dtype != np.uint8:
        raise MessageError(f"{what}: expected an (n, {ELEMENT_BYTES}) uint8 array of group elements, "
                           f"got shape {arr.shape} dtype {arr.dtype}")
    return arr


def as_keys(elements: np.ndarray) -> np.ndarray:
    """A 1-D view (one opaque 32-byte value per row) that numpy can sort, unique and intersect bytewise."""
    return np.ascontiguousarray(elements).view(np.dtype((np.void, ELEMENT_BYTES))).ravel()
