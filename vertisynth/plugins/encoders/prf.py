"""A keyed pseudo-random function in bulk: AES-256 over packed (row, record id) blocks.

Both encoders draw their per-record randomness from PRF(key, row, id) instead of a sequential RNG:
  * DPFM needs the *same* geometric value for a record at every party and for every attribute
    (VertiMRF Sec. 4.3: the hash ξ_h maps a record id to one value), so the value must be a
    function of (key_h, id) that every key holder computes alike;
  * chunked and distributed encoding must equal one-shot encoding bit for bit, which a
    counter-based function of the global record id gives for free.

Why the server cannot predict the values: AES is a pseudo-random permutation; without the 256-bit
key (agreed by the parties through X25519 + HKDF, see `core/keys.py`, and never sent to the server)
the outputs on distinct blocks are computationally indistinguishable from independent uniform
128-bit strings. The repetition index sits inside the block (DPFM with γ = 1: repetitions 8k..8k+7 take the eight
16-bit words of block k, see `fm_geometric`), so (key, h) acts as t independent
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
TAG_FM_LOW = 3  # DPFM, γ = 1: the low bits of a 64-bit word whose 16-bit top (its PRF word) is 0
_TWO_M53 = 2.0**-53


def _check_key(key: bytes) -> None:
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        raise ConfigError("the PRF key must be 32 bytes (AES-256)")


class PRFStream:
    """PRF(key, row, id) for many row blocks over one fixed id vector, reusing its buffers: the id
    half of every input block is written once, each call writes the row half and encrypts in place.
    The returned array is a view into the stream's buffer, valid until the next call."""

    def __init__(self, key: bytes, tag: int, ids: np.ndarray, max_rows: int) -> None:
        _check_key(key)
        self._cipher = Cipher(algorithms.AES(bytes(key)), modes.ECB())
        self._tag = np.uint64(tag << 56)
        ids = np.asarray(ids, dtype=np.uint64)
        self._blocks = np.empty((max_rows, ids.size, 2), dtype="<u8")
        self._blocks[..., 1] = ids[None, :]
        self._out = np.empty(self._blocks.nbytes + 16, dtype=np.uint8)

    def words(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.uint64)
        if rows.size > self._blocks.shape[0]:
            raise ConfigError(f"PRFStream holds {self._blocks.shape[0]} rows, asked for {rows.size}")
        if rows.size and int(rows.max()) >= 1 << 56:
            raise ConfigError("PRF row index too large (must be < 2^56)")
        blocks = self._blocks[: rows.size]
        blocks[..., 0] = (rows | self._tag)[:, None]
        if blocks.size == 0:
            return blocks.copy()
        enc = self._cipher.encryptor()  # ECB has no state across calls; a fresh context per call
        written = enc.update_into(memoryview(blocks).cast("B"), self._out)
        return self._out[:written].view("<u8").reshape(blocks.shape)


def prf_words(key: bytes, tag: int, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """128 pseudo-random bits per (row, id) as a (len(rows), len(ids), 2) uint64 array."""
    rows = np.asarray(rows, dtype=np.uint64)
    return PRFStream(key, tag, ids, max(rows.size, 1)).words(rows).copy()


def uniform_open0(words: np.ndarray) -> np.ndarray:
    """Uniform doubles in (0, 1] from the top 53 bits of uint64 words."""
    return ((words >> np.uint64(11)).astype(np.float64) + 1.0) * _TWO_M53


def geometric_from_words(words: np.ndarray, gamma: float) -> np.ndarray:
    """Geometric values from uint64 words. For γ = 1 without logarithms: with x = words >> 11 (53 bits),
    U = (x + 1) 2^-53 and floor(-log2 U) = 53 - bitlength(x), the bit length read off the float64
    exponent of x (exact for x < 2^53). Other γ go through `geometric_from_uniform`."""
    if gamma != 1.0:
        return geometric_from_uniform(uniform_open0(words), gamma)
    exponent = ((words >> np.uint64(11)).astype(np.float64).view(np.uint64) >> np.uint64(52)).astype(np.int16)
    return (53 - np.maximum(exponent - 1022, 0)).astype(np.int16)


def geometric_from_uniform(u: np.ndarray, gamma: float) -> np.ndarray:
    """Y = floor(log_{1/(1+γ)} U): P(Y >= k) = (1+γ)^-k, the FM sketch's Geometric(γ/(1+γ)) on {0,1,...}."""
    if gamma == 1.0:
        y = np.floor(-np.log2(u))  # exact at powers of two
    else:
        y = np.floor(np.log(u) / -np.log1p(gamma))
    return y.astype(np.int16)


def prf_pairs(key: bytes, tag: int, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """128 pseudo-random bits per (rows[k], ids[k]) pair as a (k, 2) uint64 array (PRF(key, row, id) on
    paired rather than crossed rows and ids)."""
    _check_key(key)
    rows = np.asarray(rows, dtype=np.uint64).ravel()
    ids = np.asarray(ids, dtype=np.uint64).ravel()
    if rows.size and int(rows.max()) >= 1 << 56:
        raise ConfigError("PRF row index too large (must be < 2^56)")
    blocks = np.empty((rows.size, 2), dtype="<u8")
    blocks[:, 0] = rows | np.uint64(tag << 56)
    blocks[:, 1] = ids
    if rows.size == 0:
        return blocks
    enc = Cipher(algorithms.AES(bytes(key)), modes.ECB()).encryptor()
    return np.frombuffer(enc.update(blocks.tobytes()), dtype="<u8").reshape(rows.size, 2).copy()


def geometric_from_prefix(key: bytes, words: np.ndarray, reps: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """γ = 1 values from short words (uint16 or uint32: the top bits of a 64-bit word W): min(clz64(W), 53), where
    W's low bits are the top bits of the extension PRF(key, TAG_FM_LOW, h, id), computed only where the word is 0
    (probability 2^-16 or 2^-32); elsewhere they cannot change the leading-zero count. W is uniform on 64
    bits, so the law is exactly `geometric_from_words`'s (geometric, capped at 53).
    `reps`, `ids`: the repetition and record id of every word (same shape as `words`)."""
    w = np.asarray(words)
    if w.dtype not in (np.uint16, np.uint32):
        raise ConfigError(f"geometric_from_prefix takes uint16 or uint32 words, got {w.dtype}")
    bits = np.uint64(8 * w.dtype.itemsize)
    full = w.astype(np.uint64) << (np.uint64(64) - bits)
    zero = np.flatnonzero(w.ravel() == 0)
    if zero.size:
        low = prf_pairs(key, TAG_FM_LOW, np.asarray(reps).ravel()[zero], np.asarray(ids).ravel()[zero])[:, 0]
        full.reshape(-1)[zero] = low >> bits
    return geometric_from_words(full, 1.0)


def fm_geometric(key: bytes, reps: np.ndarray, ids: np.ndarray, gamma: float) -> np.ndarray:
    """The hashed geometric value H_{ξ_h}(id) for every repetition h in `reps` and record id: (len(reps), len(ids)) int16.
    γ = 1 (layout FM_LAYOUT "aes256-ecb/8x16"): repetition h reads the 16-bit word h % 8 (little-endian) of
    the PRF block (h // 8, id), extended to 64 bits by `geometric_from_prefix` in the rare case it is 0
    (probability 2^-16); t repetitions cost t/8 AES blocks per record. Other γ need a finer uniform: repetition h reads the
    64-bit word h % 2 of the PRF block (h // 2, id)."""
    reps = np.asarray(reps, dtype=np.uint64)
    ids = np.asarray(ids, dtype=np.uint64)
    if gamma == 1.0:
        words = prf_words(key, TAG_FM, reps // np.uint64(FM_PER_BLOCK), ids).view("<u2")  # (len(reps), len(ids), 8)
        eighth = (reps % np.uint64(FM_PER_BLOCK)).astype(np.intp)
        w16 = np.take_along_axis(words, eighth[:, None, None], axis=2)[..., 0]
        return geometric_from_prefix(key, w16, np.broadcast_to(reps[:, None], w16.shape),
                                     np.broadcast_to(ids[None, :], w16.shape))
    words = prf_words(key, TAG_FM, reps // np.uint64(2), ids)  # (len(reps), len(ids), 2)
    half = (reps % np.uint64(2)).astype(np.intp)
    return geometric_from_words(np.take_along_axis(words, half[:, None, None], axis=2)[..., 0], gamma)


def _leading_zeros16() -> np.ndarray:
    """clz of every 16-bit value (16 for 0) as uint8."""
    bits = np.zeros(1 << 16, dtype=np.uint8)
    for k in range(16):
        bits[1 << k:] = k + 1
    return (16 - bits).astype(np.uint8)


LZ16 = _leading_zeros16()

# how FM hash values are drawn from the PRF; sketches drawn otherwise cannot be combined, so DPFM messages
# carry it (before issue 21 "aes256-ecb/low64"; then "aes256-ecb/2x64", both 64-bit halves of each block;
# then "aes256-ecb/4x32", four 32-bit words per block; now, issue 33, eight 16-bit words per block for γ = 1,
# half the AES work: a word only has to tell whether the value reaches the floor b <= 16, see `fm_geometric`)
FM_LAYOUT = "aes256-ecb/8x16"
FM_PER_BLOCK = 8   # γ = 1 repetitions per AES block


class FMRecordStream:
    """H_ξh(id) record-major, (ids, reps), for a block of ids and a block of repetitions: the PRF of
    `fm_geometric` laid out id by id (γ = 1: repetitions h0..h0+7 from the eight 16-bit words of block
    h0 // 8; other γ: h0, h0+1 from the two 64-bit words of block h0 // 2), so the ids' rows are
    contiguous for the group max.

    For γ = 1 the value is min(clz64(W), 53) (`geometric_from_prefix`), a decreasing function of the
    16-bit word w (the top bits of W): the stream returns the words, the caller takes the group MIN of
    those and converts only the minima with the leading-zero table LZ16; a minimum of 0 (probability 2^-16
    per record) is refined with `exact` on the records whose word is zero.
    Other γ: the values themselves, `geometric_from_words` on the 64-bit words (group max).
    Returns views valid until the next call."""

    def __init__(self, key: bytes, gamma: float, max_ids: int, reps: int) -> None:
        _check_key(key)
        self._key = bytes(key)
        # one ECB context for every call: whole 16-byte blocks in, whole blocks out, nothing carried between calls
        self._enc = Cipher(algorithms.AES(self._key), modes.ECB()).encryptor()
        self._gamma = float(gamma)
        self.per_block = FM_PER_BLOCK if self._gamma == 1.0 else 2  # repetitions per AES block
        self._blocks = np.empty((max_ids, -(-reps // self.per_block), 2), dtype="<u8")
        self._out = np.empty(self._blocks.nbytes + 16, dtype=np.uint8)
        self._vals = np.empty((max_ids, reps), dtype=np.uint16 if gamma == 1.0 else np.int16)
        self._ids = np.empty(max_ids, dtype=np.uint64)
        self._n = 0
        self._h0 = 0

    def set_ids(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.uint64)
        if ids.size > self._blocks.shape[0]:
            raise ConfigError(f"FMRecordStream holds {self._blocks.shape[0]} ids, given {ids.size}")
        self._n = ids.size
        self._ids[: ids.size] = ids
        self._blocks[: ids.size, :, 1] = ids[:, None]

    def _encrypt(self, h0: int, nreps: int) -> tuple[int, int]:
        """AES of the blocks of repetitions h0..h0+nreps-1 for every id into `_out`: (bytes written, blocks per id)."""
        per = self.per_block
        nblk = -(-nreps // per)
        if h0 % per or nreps > self._vals.shape[1] or h0 + nreps > 1 << 56:
            raise ConfigError(f"FMRecordStream: bad repetition block {h0}+{nreps} (must start at a multiple of {per})")
        n = self._n
        self._h0 = h0
        blocks = self._blocks[:n, :nblk]
        blocks[..., 0] = np.arange(h0 // per, h0 // per + nblk, dtype=np.uint64) | np.uint64(TAG_FM << 56)
        flat = self._blocks[:n] if nblk == self._blocks.shape[1] else np.ascontiguousarray(blocks)
        return self._enc.update_into(memoryview(flat).cast("B"), self._out), nblk

    def words16(self, h0: int, nreps: int) -> np.ndarray:
        """γ = 1: the raw 16-bit words, (n_ids, 8 × blocks) contiguous; column j is repetition h0 + j (the
        columns from nreps on are padding of the last block). A view valid until the next call."""
        if self._gamma != 1.0:
            raise ConfigError("FMRecordStream.words16 is for γ = 1 (eight 16-bit words per AES block)")
        written, nblk = self._encrypt(h0, nreps)
        return self._out[:written].view("<u2").reshape(self._n, FM_PER_BLOCK * nblk)

    def values(self, h0: int, nreps: int) -> tuple[np.ndarray, np.ndarray]:
        """(16-bit words (γ = 1) or values; words), both (n_ids, nreps), for repetitions h0..h0+nreps-1."""
        written, nblk = self._encrypt(h0, nreps)
        n = self._n
        vals = self._vals.reshape(-1)[: n * nreps].reshape(n, nreps)  # contiguous
        if self._gamma != 1.0:
            words = self._out[:written].view("<u8").reshape(n, 2 * nblk)[:, :nreps]  # word j: repetition h0 + j
            vals[...] = geometric_from_words(words, self._gamma)
            return vals, words
        words = self._out[:written].view("<u2").reshape(n, FM_PER_BLOCK * nblk)[:, :nreps]
        np.copyto(vals, words)   # contiguous (the last block's padding dropped)
        return vals, words

    def exact(self, words: np.ndarray, i: np.ndarray, r: np.ndarray) -> np.ndarray:
        """The exact γ = 1 values of entries (i, r) of the last `values` call's words (where the word is 0)."""
        r = np.asarray(r, dtype=np.uint64)
        return geometric_from_prefix(self._key, words[i, r.astype(np.intp)], self._h0 + r, self._ids[i]).astype(np.uint8)
