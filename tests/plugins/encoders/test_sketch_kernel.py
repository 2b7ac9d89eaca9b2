"""The record-major DPFM kernel (issue 21) equals the reference path bit for bit: `fm_geometric` (rep-major
PRF, seven-pass geometric values) then `group_max` per attribute, for any block shape, down to 1 row."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
import vertisynth.plugins.encoders.dpfm as dpfm
from vertisynth.plugins.encoders.dpfm import _passes, sketch_maxima
from vertisynth.plugins.encoders.fm_sketch import BLOCK_BYTES, group_max
from vertisynth.plugins.encoders.prf import LZ16, fm_geometric

KEY = bytes(range(32))


def reference(key, view, ids, t, gamma):
    values = fm_geometric(key, np.arange(t), ids, gamma)  # (t, n) int16
    return {a: group_max(values, view.column(a), view.domain.size(a)) for a in view.attributes}


def table(n, sizes, seed):
    rng = np.random.default_rng(seed)
    dom = Domain(tuple(f"a{i}" for i in range(len(sizes))), tuple(sizes))
    return Dataset(np.stack([rng.integers(0, s, n) for s in sizes], 1).reshape(n, len(sizes)), dom)


def test_leading_zero_table():
    x = np.arange(1, 1 << 16)
    assert LZ16[0] == 16
    assert np.array_equal(LZ16[1:], 16 - np.floor(np.log2(x)).astype(int) - 1)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), t=st.integers(1, 70), rep_block=st.integers(1, 80),
       rows=st.integers(1, 301), gamma=st.sampled_from([1.0, 1.0, 0.5, 2.0]), seed=st.integers(0, 2**16),
       pair_min_rows=st.sampled_from([1, 4, dpfm.PAIR_MIN_ROWS]))
def test_kernel_equals_reference_for_any_block(n, t, rep_block, rows, gamma, seed, pair_min_rows):
    view = table(n, [3, 1, 6, 2, 9], seed)
    ids = np.random.default_rng(seed).permutation(10 * n)[:n]  # global ids need not be 0..n-1
    block_mb = rows * BLOCK_BYTES * min(rep_block, t) / 2**20  # about `rows` rows per block
    saved = dpfm.PAIR_MIN_ROWS
    dpfm.PAIR_MIN_ROWS = pair_min_rows  # pairs of attributes share a pass even in small blocks
    try:
        got = sketch_maxima(KEY, view, ids, t, gamma, rep_block, block_mb)
    finally:
        dpfm.PAIR_MIN_ROWS = saved
    want = reference(KEY, view, ids, t, gamma)
    for a in view.attributes:
        assert got[a].dtype == np.int16 and np.array_equal(got[a], want[a]), a


def test_rare_entries_beyond_the_table_are_exact(monkeypatch):
    """Records whose PRF word has 16 leading zero bits (probability 2^-16) get their exact value."""
    t = 64
    vals = fm_geometric(KEY, np.arange(t), np.arange(60_000), 1.0)
    deep = np.unique(np.nonzero(vals > 16)[1])  # ids with a value the 16-bit table cannot give
    assert deep.size >= 5
    ids = np.concatenate([deep, np.arange(60_000, 60_200)])
    view = table(ids.size, [2, 4], 3)
    monkeypatch.setattr(dpfm, "PAIR_MIN_ROWS", 1)
    for rows in (1, 7, ids.size):
        got = sketch_maxima(KEY, view, ids, t, 1.0, 32, rows * BLOCK_BYTES * 32 / 2**20)
        want = reference(KEY, view, ids, t, 1.0)
        assert all(np.array_equal(got[a], want[a]) for a in view.attributes)
        assert max(int(got[a].max()) for a in view.attributes) > 16


def test_attributes_pair_up_when_their_joint_table_is_small():
    dom = Domain(("a", "b", "c", "d", "e"), (2, 8, 5, 40, 8))
    assert _passes(dom, 10_000) == [("a", "e"), ("c", "b"), ("d",)]
    assert _passes(dom, 100) == [("a",), ("c",), ("b",), ("e",), ("d",)]  # too few rows per joint cell


def test_empty_view_and_block_memory_bound(monkeypatch):
    view = table(0, [3], 0)
    assert np.array_equal(sketch_maxima(KEY, view, np.zeros(0, np.int64), 5, 1.0, 4)["a0"], np.full((5, 3), -1))
    made = []  # the block buffers stay within block_mb whatever n is

    class Spy(dpfm.FMRecordStream):
        def __init__(self, key, gamma, max_ids, reps):
            made.append(max_ids * reps)
            super().__init__(key, gamma, max_ids, reps)

    monkeypatch.setattr(dpfm, "FMRecordStream", Spy)
    view = table(5000, [4], 1)
    got = sketch_maxima(KEY, view, np.arange(5000), 100, 1.0, 50, block_mb=0.5)
    assert made and made[0] * BLOCK_BYTES <= 0.5 * 2**20 and made[0] < 5000 * 50
    assert np.array_equal(got["a0"], reference(KEY, view, np.arange(5000), 100, 1.0)["a0"])


def test_messages_carry_the_prf_layout(tmp_path):
    """Sketches hashed with another PRF layout (e.g. a party on an older version) are refused, not mixed."""
    import attrs

    from vertisynth.core.errors import MessageError
    from vertisynth.plugins.encoders.dpfm import DPFMMessage
    from vertisynth.plugins.encoders.fm_sketch import fm_parameters
    from vertisynth.plugins.encoders.prf import FM_LAYOUT

    k_p, floor = fm_parameters(0.5, 1.0)
    dom = Domain(("a",), (2,))
    msg = DPFMMessage(party="p", domain=dom, t=3, gamma=1.0, eps_prime=0.5, k_p=k_p, floor=floor,
                      n_hat=10.0, n_hat_variance=1.0, sketches={"a": np.full((3, 2), floor + 1, np.int16)})
    assert msg.validate().prf == FM_LAYOUT
    assert DPFMMessage.load(msg.save(tmp_path / "m.npz")).prf == FM_LAYOUT
    with pytest.raises(MessageError, match="PRF layout 'aes256-ecb/low64'"):
        attrs.evolve(msg, prf="aes256-ecb/low64").validate()


def _clz(x, bits):
    x = np.asarray(x, dtype=np.uint64)
    return np.where(x == 0, bits, bits - 1 - np.floor(np.log2(np.maximum(x, 1).astype(float))).astype(int))


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_short_words_extend_to_64_bits_when_zero(dtype):
    """γ = 1 reads 16-bit words (the layout's; 32-bit ones too); a zero word (probability 2^-16) continues counting
    in the extension PRF, so the value is min(clz64, 53) of a uniform 64-bit word: the same capped geometric law."""
    from vertisynth.plugins.encoders.prf import TAG_FM_LOW, geometric_from_prefix, prf_pairs

    bits = 8 * np.dtype(dtype).itemsize
    rng = np.random.default_rng(0)
    w = rng.integers(1, 2**bits, 1000, dtype=np.uint64).astype(dtype)
    reps, ids = rng.integers(0, 5000, 1000), rng.integers(0, 10**6, 1000)
    assert np.array_equal(geometric_from_prefix(KEY, w, reps, ids), _clz(w, bits))
    zero = np.zeros(50_000, dtype)
    reps, ids = np.arange(50_000) % 7, np.arange(50_000)
    got = geometric_from_prefix(KEY, zero, reps, ids).astype(int)
    low = prf_pairs(KEY, TAG_FM_LOW, reps, ids)[:, 0] >> np.uint64(bits)
    assert np.array_equal(got, bits + np.minimum(_clz(low, 64 - bits), 53 - bits))
    for k in range(1, 6):  # given a zero word, value − bits is again geometric
        p = 2.0**-k
        assert abs(((got - bits) >= k).mean() - p) < 5 * np.sqrt(p * (1 - p) / got.size)
    assert geometric_from_prefix(KEY, zero[:1], [0], [0]).dtype == np.int16
    with pytest.raises(ConfigError, match="uint16 or uint32"):
        geometric_from_prefix(KEY, w.astype(np.int64), reps, ids)


def test_an_all_zero_64_bit_word_gives_the_cap(monkeypatch):
    import vertisynth.plugins.encoders.prf as prf

    monkeypatch.setattr(prf, "prf_pairs", lambda key, tag, rows, ids: np.zeros((np.size(rows), 2), np.uint64))
    assert prf.geometric_from_prefix(KEY, np.zeros(3, np.uint16), [0, 1, 2], [5, 5, 5]).tolist() == [53] * 3


def test_the_stream_extends_zero_words_with_their_own_repetition_and_id():
    stream = dpfm.FMRecordStream(KEY, 1.0, 50, 16)
    ids = np.arange(1000, 1050)
    stream.set_ids(ids)
    _, words = stream.values(8, 12)
    zeroed = np.zeros_like(words)
    i, r = np.array([0, 3, 49, 7]), np.array([0, 5, 11, 2])
    from vertisynth.plugins.encoders.prf import geometric_from_prefix
    want = geometric_from_prefix(KEY, np.zeros(4, np.uint16), 8 + r, ids[i])
    assert np.array_equal(stream.exact(zeroed, i, r), want)
    assert not np.array_equal(want, geometric_from_prefix(KEY, np.zeros(4, np.uint16), r, ids[i]))


def test_the_layout_reads_eight_16_bit_words_per_aes_block():
    """FM_LAYOUT "aes256-ecb/8x16": repetition h of record id is word h % 8 of AES-256(key, (TAG_FM, h // 8), id),
    checked against the cipher itself (so the layout cannot drift from what messages claim)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from vertisynth.plugins.encoders.prf import FM_LAYOUT, TAG_FM

    assert FM_LAYOUT == "aes256-ecb/8x16"
    ids = np.array([3, 70_000, 12], dtype=np.uint64)
    block = np.empty((ids.size, 2), "<u8")
    block[:, 0], block[:, 1] = np.uint64(2) | np.uint64(TAG_FM << 56), ids   # repetitions 16..23
    enc = Cipher(algorithms.AES(KEY), modes.ECB()).encryptor()
    words = np.frombuffer(enc.update(block.tobytes()), "<u2").reshape(ids.size, 8).T
    nonzero = words != 0
    assert nonzero.all()   # (these words: no extension needed)
    assert np.array_equal(fm_geometric(KEY, np.arange(16, 24), ids, 1.0), _clz(words, 16))


# -- the sparse kernel (issue 33): only hash values >= the floor b are looked for ----------------------
def clipped(maxima, floor):
    return {a: np.where(m < floor, np.int16(-1), m).astype(np.int16) for a, m in maxima.items()}


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 400), t=st.integers(1, 90), floor=st.integers(1, 12), sparse_floor=st.sampled_from([1, 3, 6]),
       rows=st.integers(1, 401), reps=st.sampled_from([4, 8, 12, 64, 512]), seed=st.integers(0, 2**16))
def test_sparse_kernel_equals_the_reference_above_the_floor(n, t, floor, sparse_floor, rows, reps, seed):
    """The sparse kernel (forced at low floors, so that many values reach them) against `fm_geometric` +
    `group_max` clipped at the floor, and the dense kernel given the same floor, for any block shape."""
    view = table(n, [3, 1, 6, 2, 9], seed)
    ids = np.random.default_rng(seed).permutation(10 * n)[:n]
    want = clipped(reference(KEY, view, ids, t, 1.0), floor)
    called = []
    real = dpfm._sparse_maxima
    block_mb = rows * 8 * min(reps, -(-t // 4) * 4) / 2**20   # about `rows` rows per block
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dpfm, "SPARSE_FLOOR", sparse_floor)
        mp.setattr(dpfm, "SPARSE_REPS", reps)
        mp.setattr(dpfm, "_sparse_maxima", lambda *a: called.append(1) or real(*a))
        got = sketch_maxima(KEY, view, ids, t, 1.0, 16, block_mb, floor=floor)
        assert bool(called) == (floor >= sparse_floor)
        dense = sketch_maxima(KEY, view, ids, t, 1.0, 16, block_mb, floor=None)
    for a in view.attributes:
        assert got[a].dtype == np.int16 and np.array_equal(got[a], want[a]), a
        assert np.array_equal(clipped(dense, floor)[a], want[a])


def test_sparse_kernel_finds_the_extension_values(monkeypatch):
    """Words of 16+ leading zero bits (the records of `test_rare_entries_beyond_the_table_are_exact`) reach a
    high floor; the sparse kernel gives their exact values, floors above 32 leave everything EMPTY."""
    t = 64
    vals = fm_geometric(KEY, np.arange(t), np.arange(60_000), 1.0)
    deep = np.unique(np.nonzero(vals > 16)[1])
    ids = np.concatenate([deep, np.arange(60_000, 60_200)])
    view = table(ids.size, [2, 4], 3)
    for floor in (6, 12, 17):
        got = sketch_maxima(KEY, view, ids, t, 1.0, 32, floor=floor)
        want = clipped(reference(KEY, view, ids, t, 1.0), floor)
        assert all(np.array_equal(got[a], want[a]) for a in view.attributes)
        assert max(int(got[a].max()) for a in view.attributes) > 16
    got = sketch_maxima(KEY, view, ids, t, 1.0, 32, floor=40)
    assert all((got[a] == -1).all() for a in view.attributes)


def test_sparse_and_dense_encoders_publish_the_same_sketches():
    """The encoder's default (sparse) kernel and the dense one give the same finished sketches bit for bit
    (same keys, same phantom draws), one-shot and in chunks: clipping below the floor cannot change
    max(raw, phantoms, b)."""
    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.core.interfaces import PlanContext
    from vertisynth.core.privacy import Budget, PrivacyLedger
    from vertisynth.plugins.encoders.dpfm import DPFMConfig, DPFMEncoder

    dom = Domain(("a", "b", "c", "d"), (4, 3, 5, 2))
    rng = np.random.default_rng(0)
    view = Dataset(np.stack([rng.integers(0, s, 3000) for s in dom.shape], 1), dom)
    part = VerticalPartition.from_lists([["a", "b", "c", "d"]])
    sketches = {}
    for kernel in ("sparse", "dense"):
        enc = DPFMEncoder(DPFMConfig(t=400, kernel=kernel))
        ledger = PrivacyLedger(Budget(1.0, 1e-5))
        ledger.plan(enc.plan(PlanContext(dom, part, Budget(1.0, 1e-5))))
        assert enc.params.floor >= dpfm.SPARSE_FLOOR
        enc.agree_keys(np.random.default_rng(9))   # the same keys for every run
        party = part.names[0]
        sketches[kernel] = enc.encode(party, view, ledger, np.random.default_rng(5)).sketches
        ledger = PrivacyLedger(Budget(1.0, 1e-5))
        ledger.plan(enc.plan(PlanContext(dom, part, Budget(1.0, 1e-5))))
        chunks = [(np.arange(s, e), view.take(np.arange(s, e))) for s, e in ((0, 999), (999, 1000), (1000, 3000))]
        sketches[kernel + " chunks"] = enc.encode_chunks(party, dom, chunks, ledger, np.random.default_rng(5)).sketches
    for kernel in ("sparse chunks", "dense", "dense chunks"):
        assert all(np.array_equal(sketches["sparse"][a], sketches[kernel][a]) for a in dom.attributes), kernel
    with pytest.raises(ConfigError, match="kernel"):
        DPFMConfig(kernel="fast")


# -- the pair estimator from the joint histogram of sketch values (issue 33) ---------------------------
@settings(max_examples=40, deadline=None)
@given(u1=st.integers(1, 9), u2=st.integers(1, 9), t=st.integers(1, 700), floor=st.integers(0, 14),
       spread=st.integers(0, 25), gamma=st.sampled_from([1.0, 0.5]), step=st.sampled_from([1, 7, 1 << 16]),
       seed=st.integers(0, 2**16))
def test_pair_histogram_estimator_equals_the_per_repetition_one(u1, u2, t, floor, spread, gamma, step, seed):
    """`_pair_inclusion_exclusion` (counts of (α_1, α_2) per cell) against the general per-repetition path on
    random sketches at and above the floor: the same estimates and variances up to rounding."""
    rng = np.random.default_rng(seed)
    sk = [(floor + np.minimum(rng.geometric(0.5, (t, u)) - 1, spread)).astype(np.int16) for u in (u1, u2)]
    sk[0][rng.random((t, u1)) < 0.1] = floor - 1   # below the floor (the general path reads max(α, b))
    k_p = 7
    got = dpfm._inclusion_exclusion(sk, t, gamma, floor, k_p)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dpfm, "PAIR_HISTOGRAM_STEP", step)
        stepped = dpfm._inclusion_exclusion(sk, t, gamma, floor, k_p)
        mp.setattr(dpfm, "PAIR_HISTOGRAM_BINS", 0)   # the general path
        want = dpfm._inclusion_exclusion(sk, t, gamma, floor, k_p)
    for g in (got, stepped):
        assert g[0].shape == g[1].shape == (u1, u2)
        np.testing.assert_allclose(g[0], want[0], rtol=1e-9, atol=1e-6 * (1 + np.abs(want[0]).max()))
        np.testing.assert_allclose(g[1], want[1], rtol=1e-7, atol=1e-9 * (1 + want[1].max()))


def test_pair_histogram_is_used_for_binned_pairs_only(monkeypatch):
    calls = []
    real = dpfm._pair_inclusion_exclusion
    monkeypatch.setattr(dpfm, "_pair_inclusion_exclusion", lambda *a: calls.append(a[0][0].shape) or real(*a))
    rng = np.random.default_rng(0)
    small = [(12 + rng.geometric(0.5, (50, u)) - 1).astype(np.int16) for u in (8, 8)]
    dpfm._inclusion_exclusion(small, 50, 1.0, 12, 3)
    assert calls == [(50, 8)]
    monkeypatch.setattr(dpfm, "PAIR_HISTOGRAM_BINS", 8 * 8 * 10)   # too many (value, level) bins: the general path
    dpfm._inclusion_exclusion(small, 50, 1.0, 12, 3)
    dpfm._inclusion_exclusion(small + small[:1], 50, 1.0, 12, 3)   # three sets: the general path
    assert calls == [(50, 8)]


def test_pair_codes_are_made_once_per_sketch_and_dropped_with_it():
    """The server estimates every cross pair: each sketch's codes are made once (`SketchCodes`), the estimates are
    those of a fresh computation bit for bit, and an entry goes when its sketch does (no stale codes on a reused id)."""
    import gc
    rng = np.random.default_rng(3)
    sk = [(12 + np.minimum(rng.geometric(0.5, (300, u)) - 1, 9)).astype(np.int16) for u in (5, 3, 4)]
    codes = dpfm.SketchCodes()
    for pair in ([0, 1], [0, 2], [2, 1]):
        got = dpfm._inclusion_exclusion([sk[i] for i in pair], 300, 1.0, 12, 3, codes)
        want = dpfm._inclusion_exclusion([sk[i].copy() for i in pair], 300, 1.0, 12, 3)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert codes.codes(sk[0], 12) is codes.codes(sk[0], 12)
    assert len(codes._by_id) == 3
    del sk[0]
    gc.collect()
    assert len(codes._by_id) == 2
