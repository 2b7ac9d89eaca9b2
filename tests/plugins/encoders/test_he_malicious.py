"""The `he` encoder against a dishonest party (issue 30, items 1 and 2).

A modified encrypting party E, in process: it packs extra bits into each chosen row's plaintext (outside the
declared slots, or as large weights inside one) and reads the summing party S's column back from the decrypted
sums. And the noise: under secure noise every draw comes from OpenDP over the OS CSPRNG, whatever `crypto` says.
"""
from __future__ import annotations

import attrs
import numpy as np
import pandas as pd
import pytest

from vertisynth.core import noise as core_noise
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.encoders.he import noise as he_noise
from vertisynth.plugins.encoders.he import paillier, protocol
from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
from vertisynth.plugins.encoders.he.noise import SystemSource, support_bound
from vertisynth.plugins.encoders.he.packing import Layout

phe = pytest.importorskip("phe", reason="the he encoder's real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")
pytest.importorskip("gmpy2", reason="the he encoder's real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")

TEST_BITS = 512
SIGMA = 1.0
Q = [(("a1",), ("b1",))]


@pytest.fixture(scope="module")
def keys():
    return phe.generate_paillier_keypair(n_length=TEST_BITS)


@pytest.fixture(autouse=True)
def tiny_keys_allowed(monkeypatch):
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", TEST_BITS)


class ZeroSource:
    def uniform53(self, size):
        return np.full(size, 0.5)


def _views(n=200, seed=0, b_values=8):
    rng = np.random.default_rng(seed)
    a = Dataset.from_frame(pd.DataFrame({"a1": rng.integers(0, 3, n)}), Domain(["a1"], [3]))
    b = Dataset.from_frame(pd.DataFrame({"b1": rng.integers(0, b_values, n)}), Domain(["b1"], [b_values]))
    return a, b


def _dishonest_rows(a: Dataset, pk, extra: dict[int, int], drop_block: bool = False) -> protocol.EncryptedOneHot:
    """E's round 1 with `extra[i]` added to row i's (only) plaintext; the layout it declares is the honest one.
    `drop_block`: E also leaves its honest one-hot out (its declared cells then carry only what it added)."""
    blocks, groups = protocol.block_groups(protocol.unique(Q))
    codes, cells = zip(*(protocol.tuple_codes(a, b) for b in blocks))
    lay = Layout.build(blocks, cells, a.n, support_bound(SIGMA), pk.n.bit_length(), groups)
    plain = lay.pack_rows(codes) * (0 if drop_block else 1)
    for i, x in extra.items():
        plain[i, 0] += x
    cts = np.array(paillier.encrypt_many(pk, plain.ravel().tolist(), workers=1), dtype=object)
    return protocol.EncryptedOneHot("A", "B", format(pk.n, "x"), [list(b) for b in blocks], list(cells), lay.width,
                                    lay.per, list(lay.groups), paillier.to_bytes(pk, cts.reshape(plain.shape))
                                    ).validate()


def _decrypted_sums(keys, m1, b, source) -> list[int]:
    pk, sk = keys
    m2 = protocol.sum_and_noise("B", m1, b, Q, SIGMA, source, workers=1)
    return [sk.raw_decrypt(int(c)) for c in paillier.from_bytes(pk, m2.sums["g0"])[:, 0]]


def test_malicious_encryptor_reads_nothing_outside_the_declared_slots(keys):
    """E sets, for one chosen row each, a 1 in every spare slot of its plaintext and one bit each above the slots.
    Without S's masks it read S's exact value for every chosen row (67 of 67 on the old code); with them the spare
    slots and the bits above read as uniform noise, and the declared counts are still exact."""
    pk, _ = keys
    a, b = _views()
    lay = Layout.build([("a1",)], [3], a.n, support_bound(SIGMA), pk.n.bit_length())
    w = lay.width
    spare = list(range(3, lay.per))                    # slots 3..per-1: nothing declared there
    top = pk.n.bit_length() - 1 - lay.per * lay.width  # bits above the slots that stay below N
    rows = np.random.default_rng(1).choice(a.n, len(spare) + top, replace=False)
    extra = {int(r): 1 << (w * s) for r, s in zip(rows, spare)}
    extra |= {int(r): 1 << (lay.per * w + j) for j, r in enumerate(rows[len(spare):])}
    plains = _decrypted_sums(keys, _dishonest_rows(a, pk, extra), b, ZeroSource())
    truth = b.column("b1")
    recovered = 0
    for r, x in extra.items():
        shift = x.bit_length() - 1
        if shift < lay.per * w:
            hits = [v for v, p in enumerate(plains) if (p >> shift) & (2**w - 1) == 1]
        else:
            hits = [v for v, p in enumerate(plains) if (p >> shift) & 1]
        recovered += hits == [truth[r]]
    # P(a masked row reads as an exact hit) <= 2^-8 (spare) or 2^-8 (a top bit among 8 groups): > 5 of 67 is ~1e-7
    assert recovered <= 5, f"the dishonest encryptor recovered S's value for {recovered} of {len(extra)} rows"
    # with bits in the spare slots only (no sum can pass the modulus), the declared counts still decrypt exactly
    spare_only = {r: x for r, x in extra.items() if x.bit_length() <= lay.per * w}
    plains = _decrypted_sums(keys, _dishonest_rows(a, pk, spare_only), b, ZeroSource())
    t = support_bound(SIGMA)
    counts = np.stack([lay.unpack([p], 0) for p in plains], 1) - t
    exact = np.bincount(a.column("a1") * 8 + truth, minlength=24).reshape(3, 8)
    np.testing.assert_array_equal(counts, exact)


def test_what_a_declared_slot_still_carries(keys):
    """The residual, measured (docs/he.md): E drops its honest one-hot and gives chosen rows power-of-two weights
    above S's noise range inside its declared cells. Each declared cell's w-bit reading then shows S's value for
    exactly w - bitlen(2T) chosen rows and no more: with w = 8, T = 13 that is 3 rows per cell, 9 here."""
    pk, _ = keys
    a, b = _views()
    t = support_bound(SIGMA)
    lay = Layout.build([("a1",)], [3], a.n, t, pk.n.bit_length())
    low = (2 * t).bit_length()
    per_cell = lay.width - low
    rows = np.random.default_rng(2).choice(a.n, 3 * per_cell, replace=False)
    weights = [(c, low + k) for c in range(3) for k in range(per_cell)]
    extra = {int(r): 1 << (lay.width * c + j) for r, (c, j) in zip(rows, weights)}
    plains = _decrypted_sums(keys, _dishonest_rows(a, pk, extra, drop_block=True), b, SystemSource())
    truth = b.column("b1")
    got = {int(r): [v for v, p in enumerate(plains) if (p >> (lay.width * c + j)) & 1]
           for r, (c, j) in zip(rows, weights)}
    assert all(got[r] == [truth[r]] for r in got)
    assert per_cell == lay.width - (2 * t).bit_length() == 3


@pytest.mark.parametrize("change, match", [("width", "not the planned one"), ("cells", "not the planned one"),
                                           ("per", "not the planned one"), ("blocks", "not those of the queries")])
def test_summing_party_refuses_a_layout_other_than_the_planned_one(keys, change, match):
    """A wider slot, more cells or more slots per plaintext than the plan gives would widen what E's declared slots
    carry: S refuses before any sum."""
    pk, _ = keys
    a, b = _views(n=40)
    m1 = protocol.encrypt_rows("A", "B", a, Q, pk, support_bound(SIGMA), workers=1)
    lay = m1.layout()
    bad = {"width": dict(width=lay.width + 4, per=(TEST_BITS - 1) // (lay.width + 4)), "cells": dict(cells=[6]),
           "per": dict(per=lay.per - 1), "blocks": dict(blocks=[["a2"]])}[change]
    forged = attrs.evolve(m1, **bad)
    with pytest.raises(MessageError, match=match):
        protocol.sum_and_noise("B", forged, b, Q, SIGMA, ZeroSource(), workers=1, size=lambda blk: 3)


# -- item 2: the noise --------------------------------------------------------------------------------------------
def _measure(noise: str, crypto: str = "simulated", seed: int = 4):
    rng = np.random.default_rng(0)
    dom = Domain(["a", "b", "c"], [3, 4, 2])
    data = Dataset(np.column_stack([rng.integers(0, s, 300) for s in dom.shape]), dom)
    part = VerticalPartition.from_lists([["a"], ["b", "c"]])
    budget = Budget(1.0, 1e-5)
    enc = HEEncoder(HEConfig(crypto=crypto))
    ledger = PrivacyLedger(budget, noise=noise)
    ledger.plan(enc.plan(PlanContext(dom, part, budget)))
    rngs = {p: np.random.default_rng(seed) for p in part.names}
    [msg] = enc.measure(part.views(data), enc.selection_queries(), "selection", ledger, rngs)
    return np.concatenate([np.ravel(v) for v in msg.tables.values()])


def test_secure_noise_never_reads_the_seeded_stream_whatever_crypto(monkeypatch):
    """crypto = "simulated" under secure noise: two runs with the same seeds differ (on the old code they were
    identical: the noise came from the run's numpy streams), and the draws go through OpenDP's sampler. Simulation
    noise stays reproducible."""
    calls = []
    real = core_noise.discrete_gaussian
    monkeypatch.setattr(core_noise, "discrete_gaussian", lambda *a, **k: calls.append(1) or real(*a, **k))
    first, second = _measure("secure"), _measure("secure")
    assert not np.array_equal(first, second)
    assert len(calls) >= 4          # both parties, both runs
    calls.clear()
    np.testing.assert_array_equal(_measure("simulation"), _measure("simulation"))
    assert not calls


def test_secure_summing_noise_is_bounded_by_redrawing(monkeypatch):
    """S's secure draws beyond T are redrawn (its noise is added under the offset T); E's are not bounded."""
    t = support_bound(2.0)
    batches = iter([np.array([0, t + 5, -t - 1, 3]), np.array([t + 9, 1]), np.array([-2])])
    monkeypatch.setattr(SystemSource, "gaussian", lambda self, size, sigma: next(batches)[:size].copy())
    z = he_noise.discrete_gaussian((4,), 2.0, SystemSource())
    assert list(z) == [0, -2, 1, 3]
    monkeypatch.setattr(SystemSource, "gaussian", lambda self, size, sigma: np.full(size, t + 1))
    assert list(he_noise.discrete_gaussian((2,), 2.0, SystemSource(), bounded=False)) == [t + 1, t + 1]
    with pytest.raises(ConfigError, match="kept drawing beyond"):
        he_noise.discrete_gaussian((2,), 2.0, SystemSource())


def test_shared_layout_masks_the_other_blocks_counts(keys, monkeypatch):
    """A wide shared layout (two blocks summed by different groupings in one ciphertext, packing.py) puts the plain
    counts of the block S was not asked about in the same returned ciphertext. S's mask must hide them: every such
    slot reads far above any count (uniform over [0, 2^w - 2^k]), while each declared slot, read mod 2^k, is its
    count plus S's noise plus T. Without the shared mask (the old mask: uniform w-bit values on bits assumed zero) S
    refuses such a column; sharing is chosen only where it saves ciphertexts. (Guarded layouts, which need fewer
    ciphertexts here, are switched off: the next test covers them.)"""
    from vertisynth.plugins.encoders.he import packing
    monkeypatch.setattr(packing, "GUARDED", False)
    pk, sk = keys
    rng = np.random.default_rng(3)
    n = 300
    a = Dataset.from_frame(pd.DataFrame({"a1": rng.integers(0, 3, n), "a2": rng.integers(0, 4, n)}),
                           Domain(["a1", "a2"], [3, 4]))
    b = Dataset.from_frame(pd.DataFrame({"b1": rng.integers(0, 5, n), "b2": rng.integers(0, 2, n)}),
                           Domain(["b1", "b2"], [5, 2]))
    q = [(("a1",), ("b1",)), (("a2",), ("b2",))]
    t = support_bound(SIGMA)
    m1 = protocol.encrypt_rows("A", "B", a, q, pk, t, workers=1)
    lay = m1.layout()
    assert lay.shared and lay.plaintexts == 1 and lay.count_bits < lay.width
    # sharing off (the server-trust path): two ciphertexts per row, and S refuses the shared layout it did not plan
    assert protocol.row_ciphertexts(q, lambda blk: a.domain.project(blk).size(), n, t, TEST_BITS, share=False) == 2
    with pytest.raises(MessageError, match="planned"):
        protocol.sum_and_noise("B", m1, b, q, SIGMA, ZeroSource(), workers=1, share=False)
    m2 = protocol.sum_and_noise("B", m1, b, q, SIGMA, ZeroSource(), workers=1)
    k, w = lay.count_bits, lay.width
    for gi, (sb, other, blk) in enumerate([(("b1",), ("a2",), 0), (("b2",), ("a1",), 1)]):
        plains = [sk.raw_decrypt(int(c)) for c in paillier.from_bytes(pk, m2.sums[f"g{gi}"])[:, 0]]
        sbc, groups = protocol.tuple_codes(b, sb)
        for v, p in enumerate(plains):
            rows = sbc == v
            other_b = 1 - blk
            true_other = np.bincount(protocol.tuple_codes(a, other)[0][rows], minlength=lay.cells[other_b])
            true_mine = np.bincount(protocol.tuple_codes(a, lay.blocks[blk])[0][rows], minlength=lay.cells[blk])
            slot = lambda s: (p >> (w * s)) & ((1 << w) - 1)   # noqa: E731
            undeclared = [slot(lay.starts[other_b] + j) for j in range(lay.cells[other_b])]
            assert all(u >= 1 << k for u in undeclared)   # P(a uniform draw below 2^k) = 2^-(w-k) per slot
            assert not np.array_equal(np.array(undeclared) % (1 << k), true_other)
            np.testing.assert_array_equal(lay.unpack([p], blk), true_mine + t)   # ZeroSource: S's noise is 0
            assert any(slot(lay.starts[blk] + j) >> k for j in range(lay.cells[blk]))   # guard bits masked
    got = protocol.open_sums(sk, lay, m2, protocol.unique(q), t)
    for (sa, sb), table in got.items():
        ca, na = protocol.tuple_codes(a, sa)
        cb, nb = protocol.tuple_codes(b, sb)
        np.testing.assert_array_equal(table, np.bincount(ca * nb + cb, minlength=na * nb).reshape(na, nb))


def test_guarded_layout_masks_the_other_blocks_counts_and_saves_ciphertexts(keys):
    """A guarded shared layout (packing.py): two blocks summed by different groupings share one ciphertext of k-bit
    slots, with a gap of empty slots (>= MASK_BITS + 1 bits) between them and at the plaintext's top. In the column
    S returns for one grouping, the other block's plain counts form a run of undeclared slots that S masks as one
    integer: the run reads far above any honest value, E's declared slots read exactly count + S's noise + T, and
    nothing carries. Unguarded, the same blocks need two ciphertexts per row (one per group) or wide slots."""
    from vertisynth.plugins.encoders.he import packing
    pk, sk = keys
    rng = np.random.default_rng(4)
    n = 300
    a = Dataset.from_frame(pd.DataFrame({"a1": rng.integers(0, 10, n), "a2": rng.integers(0, 12, n)}),
                           Domain(["a1", "a2"], [10, 12]))
    b = Dataset.from_frame(pd.DataFrame({"b1": rng.integers(0, 5, n), "b2": rng.integers(0, 2, n)}),
                           Domain(["b1", "b2"], [5, 2]))
    q = [(("a1",), ("b1",)), (("a2",), ("b2",))]
    t = support_bound(SIGMA)
    size = lambda blk: a.domain.project(blk).size()  # noqa: E731
    m1 = protocol.encrypt_rows("A", "B", a, q, pk, t, workers=1)
    lay = m1.layout()
    assert lay.guard > 0 and lay.count_bits == 0 and lay.plaintexts == 1 and lay.width == packing.slot_width(n, t)
    assert lay.starts[1] - lay.cells[0] == lay.guard and lay.guard * lay.width >= packing.MASK_BITS + 1
    # 22 cells: two ciphertexts per row with one group per ciphertext, and with wide slots (12 per 511-bit plaintext)
    assert protocol.row_ciphertexts(q, size, n, t, TEST_BITS, share=False) == 2
    old = packing.GUARDED
    try:
        packing.GUARDED = False
        assert protocol.row_ciphertexts(q, size, n, t, TEST_BITS) == 2
    finally:
        packing.GUARDED = old
    with pytest.raises(MessageError, match="planned"):   # S checks the guard as part of the planned layout
        protocol.sum_and_noise("B", attrs.evolve(m1, guard=lay.guard - 1), b, q, SIGMA, ZeroSource(), workers=1)
    m2 = protocol.sum_and_noise("B", m1, b, q, SIGMA, ZeroSource(), workers=1)
    w = lay.width
    for gi, (sb, blk) in enumerate([(("b1",), 0), (("b2",), 1)]):
        other = 1 - blk
        plains = [sk.raw_decrypt(int(c)) for c in paillier.from_bytes(pk, m2.sums[f"g{gi}"])[:, 0]]
        sbc, _ = protocol.tuple_codes(b, sb)
        for v, p in enumerate(plains):
            rows = sbc == v
            true_other = np.bincount(protocol.tuple_codes(a, lay.blocks[other])[0][rows], minlength=lay.cells[other])
            true_mine = np.bincount(protocol.tuple_codes(a, lay.blocks[blk])[0][rows], minlength=lay.cells[blk])
            np.testing.assert_array_equal(lay.unpack([p], blk), true_mine + t)   # ZeroSource: S's noise is 0
            lo = lay.starts[other] * w
            if blk == 1:   # the other block below: its run ends in the gap under the declared block
                run = (p >> lo) & ((1 << (lay.starts[blk] * w - lo)) - 1)
            else:          # the other block above: its run goes up to the modulus
                run = p >> lo
            honest = sum(int(c) << (w * j) for j, c in enumerate(true_other))
            assert run != honest and run >> (lay.cells[other] * w) > 0   # P(fail) <= 2^-(MASK_BITS + 1)
    got = protocol.open_sums(sk, lay, m2, protocol.unique(q), t)
    for (sa, sb), table in got.items():
        ca, na = protocol.tuple_codes(a, sa)
        cb, nb = protocol.tuple_codes(b, sb)
        np.testing.assert_array_equal(table, np.bincount(ca * nb + cb, minlength=na * nb).reshape(na, nb))


def test_guarded_layouts_cut_adult_ciphertexts_per_row():
    """Adult at all 45,222 rows (2048-bit keys, clique-stage σ): party2's three largest attributes, each summed by
    its own grouping, fill 72 16-bit slots: one guarded ciphertext per row, against three unshared (a group per
    ciphertext) and two wide (49 41-bit slots per plaintext)."""
    from vertisynth.plugins.encoders.he import packing
    dom = Domain(["capital-loss", "hours-per-week", "native-country", "age", "education", "occupation"],
                 [15, 16, 41, 16, 16, 14])
    size = lambda blk: dom.project(blk).size()  # noqa: E731
    q = [(("native-country",), ("age",)), (("hours-per-week",), ("education",)), (("capital-loss",), ("occupation",))]
    t = support_bound(13.2)
    assert protocol.row_ciphertexts(q, size, 45_222, t, 2048) == 1
    assert protocol.row_ciphertexts(q, size, 45_222, t, 2048, share=False) == 3
    old = packing.GUARDED
    try:
        packing.GUARDED = False
        assert protocol.row_ciphertexts(q, size, 45_222, t, 2048) == 2
    finally:
        packing.GUARDED = old


def test_guarded_mask_covers_the_bits_above_the_slots_when_the_last_slot_is_declared(keys):
    """A guarded layout whose declared block fills the plaintext's last slot has no undeclared run at the top; the
    bits above the slots (honestly zero) must still come back masked, or a dishonest E that writes one bit there per
    chosen row reads S's grouping of those rows exactly (as without any mask)."""
    pk, _ = keys
    w = 9
    guard = -(-41 // w)
    per = (pk.n.bit_length() - 1) // w - guard
    lay = Layout((("x",), ("y",)), (20, per - 20 - guard), w, per, (0, 1), 0, guard)
    assert lay.starts[1] + lay.cells[1] == per   # the declared block ends at the last slot
    declared = lay.declared_bits([1], 0)
    masks = [lay.mask(declared, pk.n, 0) for _ in range(4)]
    assert all(m & declared == 0 for m in masks)                      # declared slots decrypt unchanged
    assert all(m >> (per * w) for m in masks)                          # P(fail) ~ 2^-40 each
    assert all(m < pk.n for m in masks)
