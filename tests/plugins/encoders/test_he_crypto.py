"""The `he` encoder's crypto core: exact counts, re-randomisation, slot overflow, the two-sided noise."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.privacy import ZCDP
from vertisynth.plugins.encoders.he import paillier, protocol
from vertisynth.plugins.encoders.he.noise import GeneratorSource, SystemSource, discrete_gaussian, support_bound
from vertisynth.plugins.encoders.he.packing import Layout, slot_width
from vertisynth.testing.audit import audit, claimed_profile

phe = pytest.importorskip("phe", reason="the he encoder's real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")
pytest.importorskip("gmpy2", reason="the he encoder's real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")

TEST_BITS = 512   # tiny keys, tests only: production refuses < 2048 (paillier.MIN_KEY_BITS)


@pytest.fixture(scope="module")
def keys():
    return phe.generate_paillier_keypair(n_length=TEST_BITS)


OU_TEST_BITS = 1024   # HEU's smallest OU key (its subgroup prime needs 6·160 - 2 bits); production: >= 2048


@pytest.fixture(scope="module", params=["paillier", "ou"])
def any_keys(request, keys):
    """A key pair of each scheme (OU through sf-heu, where installed)."""
    if request.param == "paillier":
        return keys
    pytest.importorskip("heu", reason="scheme = 'ou' needs sf-heu")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(paillier, "MIN_KEY_BITS", TEST_BITS)
        return paillier.keypair(OU_TEST_BITS, "ou")


@pytest.fixture(autouse=True)
def tiny_keys_allowed(monkeypatch):
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", TEST_BITS)


class ZeroSource:
    """Uniforms at the median: the discrete Gaussian returns 0, so the protocol returns the bare counts."""

    def uniform53(self, size):
        return np.full(size, 0.5)


def table(rng, sizes: dict[str, int], n: int) -> Dataset:
    cols = {a: rng.integers(0, s, n) for a, s in sizes.items()}
    return Dataset.from_frame(pd.DataFrame(cols), Domain(list(sizes), list(sizes.values())))


def plain(a: Dataset, b: Dataset, q) -> np.ndarray:
    joined = a.hstack(b)
    return joined.counts(q[0] + q[1]).values.reshape(-1, int(np.prod([b.domain.size(x) for x in q[1]])))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(2, 6), min_size=2, max_size=5), split=st.integers(1, 4), n=st.integers(1, 40),
       seed=st.integers(0, 2**31), tuples=st.booleans())
def test_exact_counts_against_plaintext(any_keys, sizes, split, n, seed, tuples):
    keys = any_keys
    split = min(split, len(sizes) - 1)
    rng = np.random.default_rng(seed)
    names = [f"x{i}" for i in range(len(sizes))]
    a = table(rng, dict(zip(names[:split], sizes[:split])), n)
    b = table(rng, dict(zip(names[split:], sizes[split:])), n)
    if tuples:  # tuple blocks on both sides, summed by different groupings: one ciphertext group each
        queries = [(tuple(a.attributes), (b.attributes[0],)), ((a.attributes[0],), tuple(b.attributes))]
    else:       # every attribute pair: all blocks in one tight group
        queries = [((x,), (y,)) for x in a.attributes for y in b.attributes]
    out = protocol.run_real("A", "B", a, b, queries, 2.0, ZeroSource(), ZeroSource(), keys, "test", workers=1)
    for q in queries:
        got = out.tables[protocol.key_of(q[0] + q[1])].reshape(-1, plain(a, b, q).shape[1])
        np.testing.assert_array_equal(got, plain(a, b, q))


def test_simulated_equals_real_under_a_fixed_noise_seed(any_keys):
    keys = any_keys
    rng = np.random.default_rng(3)
    a, b = table(rng, {"a1": 3, "a2": 5}, 200), table(rng, {"b1": 4, "b2": 2}, 200)
    for queries in ([((x,), (y,)) for x in ("a1", "a2") for y in ("b1", "b2")],
                    [(("a1", "a2"), ("b2",)), (("a1",), ("b1", "b2"))]):
        src = lambda s: GeneratorSource(np.random.default_rng(s))  # noqa: E731
        real = protocol.run_real("A", "B", a, b, queries, 4.0, src(1), src(2), keys, "t", workers=1)
        sim = protocol.simulate("A", "B", a, b, queries, 4.0, src(1), src(2), "t")
        assert real.tables.keys() == sim.tables.keys()
        for k in real.tables:
            np.testing.assert_array_equal(real.tables[k], sim.tables[k])
        assert real.variance == sim.variance == 2 * 4.0**2
        assert (real.crypto, sim.crypto) == ("real", "simulated")


def test_returned_ciphertexts_are_rerandomised(keys):
    pk, sk = keys
    rng = np.random.default_rng(5)
    a, b = table(rng, {"a1": 3}, 30), table(rng, {"b1": 2}, 30)
    q = [(("a1",), ("b1",))]
    m1 = protocol.encrypt_rows("A", "B", a, q, pk, support_bound(1.0), workers=1)
    sums = [protocol.sum_and_noise("B", m1, b, q, 1.0, ZeroSource(), workers=1) for _ in range(2)]
    cts = paillier.from_bytes(pk, m1.ciphertexts)
    t = support_bound(1.0)
    noise_plain = m1.layout().pack_values([(0, np.full(3, t))])[0]
    for v in range(2):
        bare = int(paillier.product_mod(cts[b.column("b1") == v], pk.nsquare)[0])
        # the plain homomorphic sum with the noise added without fresh randomness (g^m = 1 + mN)
        plain_sum = bare * (1 + noise_plain * pk.n) % pk.nsquare
        got = [int(paillier.from_bytes(pk, s.sums["g0"])[v, 0]) for s in sums]
        assert got[0] != plain_sum and got[1] != plain_sum and got[0] != got[1]
        # the declared slots decrypt alike; the bits outside them carry S's fresh masks (different each time)
        lay = m1.layout()
        plains = [sk.raw_decrypt(g) for g in got]
        assert all(np.array_equal(lay.unpack([p], 0), lay.unpack([sk.raw_decrypt(plain_sum)], 0)) for p in plains)
        assert plains[0] != plains[1]


def test_slot_overflow_refused(any_keys):
    pk, _ = any_keys
    need = slot_width(1000, 50)
    with pytest.raises(ConfigError, match="could overflow"):
        Layout.build([("a",)], [3], 1000, 50, 512, width=need - 1)
    rng = np.random.default_rng(0)
    a, b = table(rng, {"a1": 3}, 20), table(rng, {"b1": 2}, 20)
    q = [(("a1",), ("b1",))]
    m1 = protocol.encrypt_rows("A", "B", a, q, pk, support_bound(1.0), workers=1)
    with pytest.raises(ConfigError, match="could overflow"):   # S's noise is wider than E's slots allow
        protocol.sum_and_noise("B", m1, b, q, 1000.0, ZeroSource(), workers=1)


def test_short_keys_and_foreign_ciphertexts_refused(keys, monkeypatch):
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 2048)
    with pytest.raises(ConfigError, match="key_bits must be >= 2048"):
        paillier.keypair(1024)
    pk, _ = keys
    too_big = np.frombuffer(pk.nsquare.to_bytes(paillier.ciphertext_bytes(pk), "big"), np.uint8)[None, :]
    with pytest.raises(ConfigError, match="outside"):
        paillier.from_bytes(pk, too_big)


def test_unnoised_neighbour_blocks_refused(any_keys):
    """S never returns a ciphertext column holding a block it was not asked to noise."""
    pk, _ = any_keys
    rng = np.random.default_rng(1)
    a, b = table(rng, {"a1": 3, "a2": 3}, 20), table(rng, {"b1": 2}, 20)
    full = [(("a1",), ("b1",)), (("a2",), ("b1",))]
    m1 = protocol.encrypt_rows("A", "B", a, full, pk, support_bound(1.0), workers=1)   # tight: a1, a2 share a column
    # E's layout declares a block S was not asked to noise: refused before any sum (the layout check), and the
    # "without noise" check behind it would refuse the column anyway
    with pytest.raises(MessageError, match="not those of the queries"):
        protocol.sum_and_noise("B", m1, b, full[:1], 1.0, ZeroSource(), workers=1)


def test_noise_is_the_discrete_gaussian():
    z = discrete_gaussian((200_000,), 3.0, GeneratorSource(np.random.default_rng(0)))
    assert z.dtype == np.int64 and abs(z.mean()) < 0.05 and abs(z.var() / 9.0 - 1) < 0.02
    assert np.abs(z).max() <= support_bound(3.0)
    with pytest.raises(ConfigError, match="too large"):
        discrete_gaussian((1,), 1e6, GeneratorSource(np.random.default_rng(0)))


class TwoSided:
    """What the encrypting party sees of a 3-cell count table: counts + the summing party's noise (the weaker
    viewer; the server also gets the encrypting party's noise). `sigma_scale` < 1 under-noises (a planted bug)."""

    def __init__(self, sigma, sigma_scale=1.0, secure=False):
        self.sigma, self.scale, self.secure = sigma, sigma_scale, secure

    def sample(self, dataset, n_samples, rng):
        counts = np.asarray(dataset, np.int64)
        source = SystemSource() if self.secure else GeneratorSource(rng)   # secure: S's bounded OpenDP draws
        z = discrete_gaussian((n_samples, counts.size), self.sigma * self.scale, source)
        return counts[None, :] + z


@pytest.mark.parametrize("scale,ok", [(1.0, True), (0.25, False)])
def test_two_sided_noise_audit(scale, ok):
    rho = 0.5
    sigma = 1.0 / np.sqrt(2 * rho)   # one count per person per table: sensitivity 1
    pairs = [([5, 2, 0], [5, 3, 0]), ([0, 0, 0], [1, 0, 0])]
    report = audit(TwoSided(sigma, scale), pairs, claims=claimed_profile([ZCDP(rho)], 1e-5), n_samples=20_000,
                   seed=7, name="he two-sided noise")
    assert report.passed is ok


@pytest.mark.slow
@pytest.mark.parametrize("scale,ok", [pytest.param(1.0, True, marks=pytest.mark.audit_cost(12)),   # CPU s, alone
                                      pytest.param(0.25, False, marks=pytest.mark.audit_cost(14))])
def test_two_sided_noise_secure_audit(scale, ok):
    """The same audit on the secure sampler (OpenDP over the OS CSPRNG, conditioned on |z| <= T): what E sees."""
    rho = 0.5
    sigma = 1.0 / np.sqrt(2 * rho)
    pairs = [([5, 2, 0], [5, 3, 0]), ([0, 0, 0], [1, 0, 0])]
    report = audit(TwoSided(sigma, scale, secure=True), pairs, claims=claimed_profile([ZCDP(rho)], 1e-5),
                   n_samples=20_000, seed=7, name="he two-sided noise (secure)")
    assert report.passed is ok


def test_short_exponent_keys_give_standard_ciphertexts(monkeypatch):
    """sf-heu's DJN short-exponent encryptions, converted from its Montgomery form, decrypt with phe, add up
    homomorphically with phe's, and differ between two encryptions of the same value (fresh randomness)."""
    pytest.importorskip("heu", reason="short-exponent randomness needs sf-heu")
    # a 1024-bit key: the same HEU setup and conversion at any size; 2048 bits' prime search cost ~1.2 CPU s more
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", TEST_BITS)
    pk, sk = paillier.keypair(1024, "short")
    assert isinstance(pk, paillier.ShortExponentKey) and pk.n.bit_length() >= 1024
    values = [0, 1, 12345, pk.n // 2, pk.n // 2 + 1, pk.n - 1, (1 << 1016) + 7]
    cts = paillier.encrypt_many(pk, values * 10, workers=1)
    assert [sk.raw_decrypt(c) for c in cts] == values * 10
    assert len(set(cts)) == len(cts)
    full = phe.PaillierPublicKey(pk.n).raw_encrypt(5)
    assert sk.raw_decrypt(cts[2] * full % pk.nsquare) == 12350
    with pytest.raises(ConfigError, match="randomness must be one of"):
        paillier.resolve("fast")


# -- scheme = "ou" (Okamoto-Uchiyama through sf-heu) -------------------------------------------------------------
@pytest.fixture(scope="module")
def ou_keys():
    pytest.importorskip("heu", reason="scheme = 'ou' needs sf-heu")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(paillier, "MIN_KEY_BITS", TEST_BITS)
        return paillier.keypair(OU_TEST_BITS, "ou")


def test_ou_ciphertexts_add_up_are_fresh_and_cross_as_text(ou_keys):
    """HEU's OU encryptions in standard form decrypt exactly, add up as the product mod n, differ between two
    encryptions of one value; the key crosses as text; the row randomness H^s (the fixed-base table) is H^s."""
    pk, sk = ou_keys
    top = paillier.plain_modulus(pk)
    assert top == 1 << pk.bound_bits and paillier.plain_bits(pk) == paillier.plan_bits(OU_TEST_BITS, "ou")
    values = [0, 1, 12345, top - 1, (top >> 1) + 7]
    cts = paillier.encrypt_many(pk, values * 8, workers=1)
    assert [sk.raw_decrypt(c) for c in cts] == values * 8 and len(set(cts)) == len(cts)
    assert sk.raw_decrypt(cts[1] * cts[2] % pk.n) == 12346
    assert paillier.ciphertext_bytes(pk) == (pk.n.bit_length() + 7) // 8 <= paillier.plan_ct_bytes(OU_TEST_BITS, "ou")
    again = paillier.public_from_text(paillier.key_text(pk))
    assert again == pk and sk.raw_decrypt(paillier.encrypt_many(again, [77], workers=1)[0]) == 77
    full = paillier.encrypt_many(paillier.rerandomiser(pk), [5, 5], workers=1)   # S's noise: full-length H^r
    assert [sk.raw_decrypt(c) for c in full] == [5, 5] and full[0] != full[1]
    table = paillier._H_TABLES[(pk.n, pk.h)]
    digits = np.random.default_rng(0).integers(0, 256, table.shape[0])
    product = 1
    for i, d in enumerate(digits):
        product = product * int(table[i, d]) % pk.n
    assert product == pow(pk.h, sum(int(d) << (8 * i) for i, d in enumerate(digits)), pk.n)
    with pytest.raises(ConfigError, match="does not fit"):
        paillier.encrypt_many(pk, [top], workers=1)


def test_ou_refuses_what_an_honest_sum_cannot_decrypt_to(ou_keys):
    """OU's chosen-ciphertext attack factors n from the decryption of a value at or above p: E (or the server)
    refuses every decryption outside the public bound, which lies 64 bits below p."""
    pk, sk = ou_keys
    heu_enc = paillier._short_encryptor(pk.heu_key)
    above = paillier._ou_value(heu_enc.encrypt_raw(1 << pk.bound_bits)) * pk.montgomery % pk.n
    forged = [above, int(np.random.default_rng(1).integers(2, 2**62)) * 2**600 % pk.n + 1]
    for c in forged:
        with pytest.raises(MessageError, match="outside what an honest sum can make"):
            sk.raw_decrypt(c)


def test_schemes_refused_in_one_line(ou_keys, monkeypatch):
    """An unknown scheme, a Paillier setting with OU, a key of the other scheme, a key below the floor, and OU
    without sf-heu: each a one-line error."""
    from vertisynth.plugins.encoders.he.encoder import HEConfig
    from vertisynth.plugins.encoders.he.rounds import check_rows, modulus_fingerprint

    with pytest.raises(ConfigError, match="scheme must be one of"):
        HEConfig(scheme="elgamal")
    with pytest.raises(ConfigError, match="scheme must be one of"):
        paillier.resolve("auto", "dgk")
    with pytest.raises(ConfigError, match="is a Paillier setting"):
        HEConfig(scheme="ou", randomness="short")
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 2048)
    with pytest.raises(ConfigError, match="key_bits must be >= 2048"):
        paillier.keypair(1024, "ou")
    pk, _ = ou_keys
    rng = np.random.default_rng(2)
    a = table(rng, {"a1": 3}, 10)
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", TEST_BITS)
    m1 = protocol.encrypt_rows("A", "B", a, [(("a1",), ("b1",))], pk, 3, workers=1)
    key = {"modulus": m1.modulus, "fingerprint": modulus_fingerprint(m1.modulus)}
    check_rows("B", m1, "A", key, "ou")
    with pytest.raises(MessageError, match="a ou key, but this run's scheme is 'paillier'"):
        check_rows("B", m1, "A", key)
    phe_text = format(phe.generate_paillier_keypair(n_length=TEST_BITS)[0].n, "x")
    with pytest.raises(MessageError, match="a paillier key, but this run's scheme is 'ou'"):
        paillier.check_scheme(phe_text, "ou", "he-key from 'A'")
    monkeypatch.setattr(paillier, "heu", None)
    with pytest.raises(ConfigError, match="scheme = 'ou' needs SecretFlow's HEU: pip install sf-heu"):
        HEConfig(scheme="ou")
    HEConfig(scheme="ou", crypto="simulated")   # simulation needs no crypto library
    assert paillier.resolve("auto", "ou", strict=False) == "ou"
