"""The vertical oracle: within-party answers are the central oracle's, cross-party answers go through the `he`
measure after the charge, bad queries are refused in one line before anything is spent, selection stays on
released answers for candidates that cross parties."""
import math

from attrs import evolve
import numpy as np
import pytest

from vertisynth.core.capabilities import CrossPartyMeasure
from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.errors import BudgetError, ConfigError, DomainError
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, ZCDP
from vertisynth.pgm.estimation import bin_query
from vertisynth.pgm.oracle import CentralOracle, MarginalOracle, ZCDPFilter
from vertisynth.plugins.encoders.he import paillier
from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
from vertisynth.plugins.encoders.he.noise import GeneratorSource
from vertisynth.vertical import VerticalOracle, party_streams

from tests.synthetic_tables import correlated

PARTS = [["a", "c", "e"], ["b", "d"]]


def _oracle(data, ledger, crypto="simulated", parts=PARTS, seed=0, **kw):
    part = VerticalPartition.from_lists(parts, [f"P{i}" for i in range(len(parts))]).validate(data.domain)
    rngs = {p: np.random.default_rng(seed + i) for i, p in enumerate(part.names)}
    bits = 512 if crypto == "real" else 2048   # tiny keys for tests of real crypto only (monkeypatched floor)
    return VerticalOracle(part.views(data), part, HEEncoder(HEConfig(crypto=crypto, key_bits=bits, workers=1)),
                          ledger, rngs, "he", **kw), rngs


def _ledger(*charges):
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan(charges)
    return led


def test_he_is_a_cross_party_measure_and_the_oracle_a_marginal_oracle():
    enc = HEEncoder(HEConfig(crypto="simulated"))
    assert isinstance(enc, CrossPartyMeasure) and enc.trust == "none"
    assert enc.released_variance(3.0) == 18.0
    o, _ = _oracle(correlated(200), _ledger())
    assert isinstance(o, MarginalOracle)


def test_a_within_party_answer_is_the_central_oracles_under_the_same_stream():
    data = correlated(3000)
    ch, ch2 = Charge("s", "m", ZCDP(0.01)), Charge("s", "m", ZCDP(0.01))
    bins = {"a": np.array([0, 0, 1])}
    for b in (None, bins):
        o, _ = _oracle(data, led := _ledger(ch), seed=7)
        got = o.measure(("c", "a"), ch, np.random.default_rng(123), bins=b)   # P0's stream is default_rng(7)
        want = CentralOracle(data, _ledger(ch2)).measure(("c", "a"), ch2, np.random.default_rng(7), bins=b)
        np.testing.assert_array_equal(got.values, want.values)
        assert got.std == want.std and led.spent == [ch] and led.cross_party == []


def test_a_cross_party_answer_is_exact_counts_plus_two_sided_noise_and_the_ledger_says_so():
    data = correlated(4000)
    chs = [Charge("s", "m", ZCDP(1e4)) for _ in range(3)]
    o, _ = _oracle(data, led := _ledger(*chs))
    sigma = math.sqrt(1 / (2 * 1e4))
    for attrs, ch in zip([("b", "a"), ("d", "c", "a")], chs):
        m = o.measure(attrs, ch, np.random.default_rng(0))
        np.testing.assert_array_equal(m.values, data.counts(attrs).values)   # σ ≈ 0.007: rounds to the count
        assert m.attributes == attrs and m.std == pytest.approx(math.sqrt(2) * sigma)
    bins = {"b": np.array([0, 0, 1, 1, 2, 2, 3, 3])}
    m = o.measure(("a", "b"), chs[2], np.random.default_rng(0), bins=bins)   # coarsened at the party first
    np.testing.assert_array_equal(m.values, bin_query(data.counts(("a", "b")).values, ("a", "b"), bins))
    assert led.spent == chs
    assert [q["attributes"] for q in led.cross_party] == [["b", "a"], ["d", "c", "a"], ["a", "b"]]
    assert {(q["measure"], q["trust"]) for q in led.cross_party} == {("he", "none")}
    assert led.cross_party[0]["released_variance"] == pytest.approx(2 * sigma**2)
    assert led.to_dict()["cross_party"]["through"] == ["he (trust = none)"]


@pytest.mark.parametrize("ask, error, match", [
    (lambda o, ch: o.measure(("a", "zz"), ch, None), DomainError, "unknown attribute 'zz'"),
    (lambda o, ch: o.measure_cross((), ch), ConfigError, "at least one attribute"),
    (lambda o, ch: o.measure(("a", "b", "f"), ch, None), ConfigError, "spans 3 parties"),
    (lambda o, ch: o.measure_cross(("a", "c"), ch), ConfigError, "held by one party"),
    (lambda o, ch: o.measure(("a", "b"), ch, None, bins={"c": np.array([0, 0])}), ConfigError, "not measured"),
    (lambda o, ch: o.measure(("a", "b"), ch, None, sigma=2.0), BudgetError, "not what this answer costs"),
    (lambda o, ch: o.select([("a", "b")], [np.zeros(24)], [1.0], [0.0], 0.1, ch, None), ConfigError,
     "no noisy answer holds it"),
])
def test_a_bad_query_is_refused_in_one_line_with_nothing_spent(ask, error, match):
    data = correlated(500)
    dom = data.domain
    from vertisynth.core.dataset import Dataset
    from vertisynth.core.domain import Domain
    wide = Dataset(np.column_stack([data.codes, data.codes[:, 0]]), Domain(dom.attributes + ("f",), dom.shape + (3,)))
    ch = Charge("s", "m", ZCDP(0.05))
    o, _ = _oracle(wide, led := _ledger(ch), parts=[["a", "c", "e"], ["b", "d"], ["f"]])
    with pytest.raises(error, match=match) as exc:
        ask(o, ch)
    assert "\n" not in str(exc.value)
    assert led.spent == [] and led.cross_party == [] and o.answered == []


def test_the_measure_refuses_a_one_party_table_and_an_empty_side():
    data = correlated(300)
    part = VerticalPartition.from_lists(PARTS).validate(data.domain)
    enc = HEEncoder(HEConfig(crypto="simulated"))
    rngs = {p: np.random.default_rng(0) for p in part.names}
    for q, match in [((("a",), ("c",)), "two parties"), ((("a",), ()), "both sides")]:
        with pytest.raises(ConfigError, match=match):
            enc.answer(part.views(data), [q], 1.0, "simulation", rngs)


@pytest.mark.parametrize("scheme", ["paillier", pytest.param("ou", marks=pytest.mark.skipif(
    not paillier.short_available(), reason="scheme = 'ou' needs sf-heu"))])
def test_real_crypto_answers_what_the_simulation_answers(monkeypatch, scheme):
    """The oracle's cross-party route through real Paillier or OU (small test keys) equals the plaintext
    simulation under the same fixed noise sources."""
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    data = correlated(150, seed=3)
    out = {}
    for crypto in ("simulated", "real"):
        ch = Charge("s", "m", ZCDP(0.5))
        o, _ = _oracle(data, _ledger(ch), crypto=crypto)
        if scheme == "ou":
            o.cross_measure.config = evolve(o.cross_measure.config, scheme="ou", key_bits=1024)
        o.cross_measure.test_sources = {p: GeneratorSource(np.random.default_rng(11 + i))
                                        for i, p in enumerate(["P0", "P1"])}
        out[crypto] = o.measure(("d", "a", "b"), ch, np.random.default_rng(0)).values
    np.testing.assert_array_equal(out["real"], out["simulated"])
    assert not np.array_equal(out["real"], data.counts(("d", "a", "b")).values)   # noise was added


def test_select_pays_its_round_and_picks_the_worst_fitted_candidate_across_and_within_parties():
    data = correlated(5000)
    rng = np.random.default_rng(0)

    def independent(c):   # what AIM/MST's model says before it measures a pair: the product of the 1-ways
        x = data.counts(c).values
        return np.outer(x.sum(1), x.sum(0)).ravel() / data.n

    probe = Charge("s", "probe", ZCDP(50.0))
    rounds = Charge("s", "rounds", ZCDP(10.0))
    o, _ = _oracle(data, led := _ledger(probe, rounds))
    o.measure(("a", "b"), probe, rng)            # a released cross-party answer
    filt = ZCDPFilter(rounds, led)
    # L1 from independence: (a, b) 5171 across parties; (a, c) 3521 in P0; (c, d) 2253, (e, b) 2072 across
    cands = [("a", "c"), ("a", "b"), ("c", "d")]
    est = [independent(c) for c in cands]
    with pytest.raises(ConfigError, match="no noisy answer holds it"):   # (c, d) was never answered
        o.select(cands, est, [1.0] * 3, [0.0] * 3, 2.0, filt, rng)
    assert filt.used == 0
    cands, est = cands[:2], est[:2]
    pick = o.select(cands, est, [1.0] * 2, [0.0] * 2, 2.0, filt, rng)
    assert filt.used == pytest.approx(0.5) and cands[pick] == ("a", "b")
    # with a model that fits (a, b) exactly, the choice moves to the worst fitted one inside a party
    est[1] = data.counts(("a", "b")).values.ravel()
    pick = o.select(cands + [("c", "e")], est + [independent(("c", "e"))], [1.0] * 3, [0.0] * 3, 2.0, filt, rng)
    assert cands[pick] == ("a", "c") and filt.used == pytest.approx(1.0)


def test_party_streams_are_reproducible_and_distinct():
    a = party_streams(np.random.default_rng(5), ["P", "Q"])
    b = party_streams(np.random.default_rng(5), ["P", "Q"])
    assert a["P"].random() == b["P"].random() and a["Q"].random() != a["P"].random()


def test_coarse_bins_split_the_noisy_mass_and_a_coarse_answer_scores_a_finer_candidate():
    from vertisynth.vertical import coarse_bins

    b = coarse_bins(np.array([10.0, 10, 10, 10, 40, 5, 5, 10]), 3)
    assert b.tolist() == sorted(b.tolist()) and set(b.tolist()) == {0, 1, 2}
    assert coarse_bins(np.array([3.0, 4.0]), 4) is None
    within = np.array([0, 0, 1, 2, 3])   # an earlier binning (5 values -> 4 bins)
    assert coarse_bins(np.array([1.0, 1, 1, 1]), 2, within).tolist() == [0, 0, 0, 1, 1]
    data = correlated(6000)
    probe, rounds = Charge("s", "probe", ZCDP(1e4)), Charge("s", "rounds", ZCDP(10.0))
    o, _ = _oracle(data, led := _ledger(probe, rounds))
    coarse = {"b": coarse_bins(data.counts(("b",)).values, 2)}
    o.measure(("a", "b"), probe, np.random.default_rng(0), bins=coarse)   # a, b on 3 x 2 cells
    x = data.counts(("a", "b")).values
    e = np.outer(x.sum(1), x.sum(0)) / data.n
    filt = ZCDPFilter(rounds, led)
    # the candidate on full domains is scored by the coarse answer: its estimate summed into the answer's bins
    pick = o.select([("a", "b")], [e.ravel()], [1.0], [0.0], 1.0, filt, np.random.default_rng(0))
    assert pick == 0
    want = np.abs(bin_query(x, ("a", "b"), coarse) - bin_query(e, ("a", "b"), coarse)).sum()
    got = o._noisy_score(("a", "b"), None, e.ravel())
    assert got == pytest.approx(want, rel=1e-3) and got < np.abs(x - e).sum()


def test_the_record_count_and_the_score_vectors_are_answered_at_the_parties():
    """What PrivMRF and DPSyn ask besides marginals: the 0-way count (any party: every party holds every row), the
    InDif vector and the l1 errors, each entry computed and noised at the party that holds it (one charge, the
    central σ per entry); a pair or candidate across parties is refused before anything is spent."""
    data = correlated(3000)
    count, vec, err = Charge("s", "n", ZCDP(1e6)), Charge("s", "i", ZCDP(1e8)), Charge("s", "l", ZCDP(1e8))
    o, _ = _oracle(data, led := _ledger(count, vec, err))
    assert o.measure((), count, None).values.sum() == pytest.approx(3000, abs=0.1)
    from vertisynth.pgm.scores import indif
    got = o.indif([("a", "c"), ("b", "d")], vec, None)
    np.testing.assert_allclose(got, [indif(data, "a", "c"), indif(data, "b", "d")], atol=0.05)
    est = [np.full(data.domain.project(c).shape, 10.0) for c in (("a", "e"), ("d",))]
    want = [np.abs(data.counts(c).values - e).sum() for c, e in zip((("a", "e"), ("d",)), est)]
    np.testing.assert_allclose(o.l1_errors([("a", "e"), ("d",)], est, err, None), want, atol=0.05)
    assert led.spent == [count, vec, err]
    before = list(led.spent)
    extra = Charge("s", "x", ZCDP(1.0))
    led.plan([extra])
    with pytest.raises(ConfigError, match="cross parties") as e1:
        o.indif([("a", "c"), ("a", "b")], extra, None)
    with pytest.raises(ConfigError, match="cross parties") as e2:
        o.l1_errors([("a", "b")], [np.zeros(data.domain.project(("a", "b")).shape)], extra, None)
    assert led.spent == before and "\n" not in str(e1.value) + str(e2.value)


def test_trust_server_answers_at_three_shares_and_spends_its_distributed_noise_cost():
    """trust = "server" through the oracle: the encoder dispatches to server_trust.py, the answer's variance is 1.5σ²
    (three shares of σ²/2: any one role is left σ²; not trust none's 2σ²), and the oracle spends ρ = 1/(2σ²) + τ
    (Kairouz–Liu–Steinke) per table, derived from the charge."""
    from vertisynth.plugins.encoders.he import server_trust
    data = correlated(3000)
    rho = server_trust.rho_per_table(1.0)   # σ = 1: τ = 0.072 is 14% of 1/(2σ²), so a charge without it is wrong
    ch = Charge("s", "m", ZCDP(rho))
    part = VerticalPartition.from_lists(PARTS, ["P0", "P1"]).validate(data.domain)
    enc = HEEncoder(HEConfig(crypto="simulated", trust="server"))
    assert enc.trust == "server" and isinstance(enc, CrossPartyMeasure)
    o = VerticalOracle(part.views(data), part, enc, led := _ledger(ch), party_streams(np.random.default_rng(0),
                       part.names), "he")
    m = o.measure(("a", "b"), ch, None)
    sigma = server_trust.sigma_for_rho(rho)
    assert server_trust.rho_per_table(sigma) == pytest.approx(rho, rel=1e-9)
    assert sigma == pytest.approx(1.0) and sigma > 1.05 * math.sqrt(1 / (2 * rho))   # τ: more noise than one Gaussian
    assert m.std == pytest.approx(math.sqrt(1.5) * sigma) and led.spent == [ch]
    assert led.cross_party[0]["trust"] == "server"
    assert led.cross_party[0]["released_variance"] == pytest.approx(1.5 * sigma**2)
    resid = m.values - data.counts(("a", "b")).values
    assert abs(resid.mean()) < 5 * sigma / math.sqrt(resid.size) + 1e-9
    # a charge sized for one Gaussian (no τ) is not what a trust = server table costs: refused, nothing spent
    wrong = Charge("s", "w", ZCDP(1 / (2 * sigma**2)))
    led.plan([wrong])
    with pytest.raises(BudgetError, match="not what this answer costs"):
        o.measure(("a", "b"), wrong, None, sigma=sigma)
    assert led.spent == [ch]


def test_answers_encrypt_each_partys_rows_once_and_equal_the_simulation(monkeypatch):
    """Issue 31: every cross-party answer used to encrypt all of E's rows again. Now an answer whose every table
    has a side that is a block of that party's whole rows (one unbinned attribute, or a joint pair in the rows'
    spare slots) is summed from them (one layout, encrypted once per run), and other answers from E's blocks kept
    from earlier answers; S's sums and both parties' noise stay fresh per answer. Five answers cost P0 one pass over
    its rows and P1 none (the old code: one pass per answer; before the joint pairs, P1's whole rows a pass of their
    own for the (a, c) x b answer), and every answer equals the plaintext simulation's under the same fixed noise
    sources."""
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    data = correlated(120, seed=5)
    asks = [(("a", "b"), None), (("d", "a"), None), (("a", "b"), None), (("a", "c", "b"), None),
            (("a", "b"), {"b": np.array([0, 0, 1, 1, 2, 2, 3, 3])})]
    out, costs, enc = {}, {}, None
    for crypto in ("simulated", "real"):
        chs = [Charge("s", "m", ZCDP(0.5)) for _ in asks]
        o, _ = _oracle(data, _ledger(*chs), crypto=crypto)
        enc = o.cross_measure
        enc.test_sources = {p: GeneratorSource(np.random.default_rng(11 + i)) for i, p in enumerate(["P0", "P1"])}
        out[crypto] = [o.measure(q, ch, np.random.default_rng(0), bins=b).values for (q, b), ch in zip(asks, chs)]
        costs[crypto] = enc.costs["oracle"]
    for x, y in zip(out["real"], out["simulated"]):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(out["real"][0], out["real"][2])   # the same table asked twice: fresh noise each time
    # a pass over the rows is n ciphertexts (one per row here); the rest are the sums S returned, fewer than n
    # (each answer encrypting its own rows: P0 or P1 five passes in all); (a, c) is a joint block of P0's whole
    # rows, so P1 only sums (the old code: P1's whole rows encrypted for the (a, c) x b answer)
    assert {p: k // data.n for p, k in costs["real"].ciphertexts.items()} == {"P0": 1, "P1": 0}, costs["real"]
    stores = {k[:3]: v for k, v in enc.__dict__["_blocks"].items()}
    # P0's whole rows at P1 (a, c, e and the joint (a, c): one ciphertext per row, 2·key_bits/8 bytes each)
    assert [list(v.items) for v in stores.values()] == [["whole|8"]]
    assert all(v.bytes == data.n * 2 * 512 // 8 for v in stores.values())
