"""A cross-party triple as a selection candidate (aim's twin, docs/vertical.md "aim, fifth pass"): no answer holds
it, so `VerticalOracle.select` scores it by the largest estimate among its cross-party sub-marginals that an answer
holds (a lower bound of its L1 error: summing out an attribute never raises an L1 distance), from released answers
only; a triple none of whose cross-party parts was answered is still refused, with nothing spent."""
import numpy as np
import pytest

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.errors import ConfigError
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, ZCDP
from vertisynth.pgm.oracle import ZCDPFilter
from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
from vertisynth.vertical import VerticalOracle

from tests.synthetic_tables import correlated

PARTS = [["a", "c", "e"], ["b", "d"]]


def _oracle(data, *charges, trust="server"):
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan(charges)
    part = VerticalPartition.from_lists(PARTS, ["P0", "P1"]).validate(data.domain)
    rngs = {p: np.random.default_rng(i) for i, p in enumerate(part.names)}
    enc = HEEncoder(HEConfig(crypto="simulated", trust=trust, workers=1))
    return VerticalOracle(part.views(data), part, enc, led, rngs, "he"), led


def _independent(data, c):
    """The model before any pair is measured: the product of the exact 1-ways (raveled in `c`'s order)."""
    e = np.ones(()) * data.n
    for a in c:
        e = np.multiply.outer(e, data.counts((a,)).values / data.n)
    return e.ravel()


def test_a_cross_party_triple_no_answer_holds_has_its_best_cross_party_pair_as_a_lower_bound():
    data = correlated(6000)
    probe, rounds = Charge("s", "probe", ZCDP(100.0)), Charge("s", "rounds", ZCDP(10.0))
    o, led = _oracle(data, probe, rounds)
    probes = ZCDPFilter(probe, led)
    for pair in [("a", "b"), ("c", "b")]:   # the triple's two cross-party pairs, released (σ 1: near exact)
        o.measure(pair, probes, np.random.default_rng(0), 1.0)
    tri = ("a", "c", "b")   # a, c at P0; b at P1: no answer holds it, its pair (a, c) is within P0
    e = _independent(data, tri)
    got = o._noisy_score(tri, None, e)
    e3 = e.reshape(data.domain.project(tri).shape)
    pairs = [o._noisy_score(("a", "b"), None, e3.sum(axis=1).ravel()),
             o._noisy_score(("c", "b"), None, e3.sum(axis=0).ravel())]
    assert got == pytest.approx(max(pairs)) and min(pairs) > 0
    assert got <= np.abs(data.counts(tri).values.ravel() - e).sum()   # a lower bound of the exact L1 error


def test_a_cross_party_triple_is_scored_at_the_party_holding_two_of_its_attributes_and_measured_across():
    """Selection asks P0 (which holds a and c) to score the triple (a, c, b) as the entry w/2 (‖x_ac − e_ac‖₁ − o')
    with o' = 2o − c_ab − c_cb (its cross-party pairs' public estimates): AIM's score with the triple's error taken
    as half its three pairs' errors; chosen, the triple is measured through the cross-party measure, paid first."""
    data = correlated(6000)
    probe, rounds = Charge("s", "probe", ZCDP(100.0)), Charge("s", "rounds", ZCDP(1e6))
    o, led = _oracle(data, probe, rounds)
    probes = ZCDPFilter(probe, led)
    for pair in [("a", "b"), ("c", "b"), ("c", "d")]:
        o.measure(pair, probes, np.random.default_rng(0), 1.0)
    tri = ("a", "c", "b")
    cands = [("a", "b"), tri, ("c", "e"), ("b", "d")]
    est = [_independent(data, c) for c in cands]
    asked = []
    best = o.link.best

    def spy(party, candidates, estimates, weights, offsets, *rest):
        asked.append((party, list(candidates), np.array(weights), np.array(offsets)))
        return best(party, candidates, estimates, weights, offsets, *rest)
    o.link.best = spy
    filt = ZCDPFilter(rounds, led)
    pick = o.select(cands, est, [2.0, 3.0, 2.0, 2.0], [1.0, 5.0, 1.0, 1.0], 2000.0, filt, np.random.default_rng(0))
    e3 = est[1].reshape(data.domain.project(tri).shape)
    c_ab = o._noisy_score(("a", "b"), None, e3.sum(axis=1).ravel())
    c_cb = o._noisy_score(("c", "b"), None, e3.sum(axis=0).ravel())
    (p0, got, w0, off0), = [q for q in asked if q[0] == "P0"]
    assert got == [("c", "e"), ("a", "c")] and w0.tolist() == [2.0, 1.5]
    assert off0[1] == pytest.approx(2 * 5.0 - c_ab - c_cb)
    # at this ε the choice is the best score: the triple's (its pairs' errors halved) beats (a, b), (c, e), (b, d)
    l1 = {c: np.abs(data.counts(c).values.ravel() - e).sum() for c, e in zip(cands, est)}
    e_ac = e3.sum(axis=2).ravel()
    tri_score = 3.0 * ((np.abs(data.counts(("a", "c")).values.ravel() - e_ac).sum() + c_ab + c_cb) / 2 - 5.0)
    assert tri_score > max(2.0 * (l1[c] - 1.0) for c in [("c", "e"), ("b", "d")])
    assert cands[pick] == tri and filt.used == pytest.approx(2000.0 ** 2 / 8)
    # chosen, it is measured through the cross-party measure like any two-party marginal, paid first
    m = o.measure(tri, filt, np.random.default_rng(0), 40.0)
    assert m.attributes == tri and led.cross_party[-1]["attributes"] == list(tri)
    assert led.cross_party[-1]["trust"] == "server" and led.cross_party[-1]["released_variance"] == 1600.0
    # answered, it is scored off its own answer like any cross-party candidate (no longer at the party)
    asked.clear()
    o.select([tri, ("c", "e")], [est[1], est[2]], [3.0, 2.0], [5.0, 1.0], 1.0, filt, np.random.default_rng(0))
    assert [q[1] for q in asked] == [[("c", "e")]]


def test_a_cross_party_triple_with_no_answered_cross_party_part_is_refused_with_nothing_spent():
    data = correlated(2000)
    probe, rounds = Charge("s", "probe", ZCDP(100.0)), Charge("s", "rounds", ZCDP(10.0))
    o, led = _oracle(data, probe, rounds)
    probes = ZCDPFilter(probe, led)
    o.measure(("a", "b"), probes, np.random.default_rng(0), 1.0)
    filt = ZCDPFilter(rounds, led)
    spent, answered = list(led.spent), len(led.cross_party)
    tri = ("c", "e", "d")   # its cross-party pairs (c, d), (e, d) were never answered
    with pytest.raises(ConfigError, match="no noisy answer holds it") as exc:
        o.select([tri], [_independent(data, tri)], [1.0], [0.0], 1.0, filt, np.random.default_rng(0))
    assert "\n" not in str(exc.value) and filt.used == 0 and led.spent == spent
    assert len(led.cross_party) == answered


def test_a_triple_scored_at_a_party_counts_a_fitted_cross_pair_at_its_noise_not_at_zero():
    """Once the model is fitted to a cross-party pair's answer y, y − e is about 0 while x − e is about y's noise:
    the pair's released estimate read 0.1-0.3 of its true error, and a triple holding it half its own (docs/vertical.md,
    "aim, sixth pass"). The party's entry now counts such a pair at its noise level, √(2/π) σ |Ω| of the centred noise,
    which tracks the true error; a pair the model is not fitted to keeps its estimate."""
    data = correlated(6000)
    probe, rounds = Charge("s", "probe", ZCDP(100.0)), Charge("s", "rounds", ZCDP(1e6))
    o, led = _oracle(data, probe, rounds)
    probes = ZCDPFilter(probe, led)
    sigma = 20.0
    y_ab = o.measure(("a", "b"), probes, np.random.default_rng(0), sigma).values   # a (3) at P0, b (8) at P1
    o.measure(("c", "b"), probes, np.random.default_rng(1), 1.0)
    tri = ("a", "c", "b")
    x3 = data.counts(tri).values.astype(float)
    # a model fitted to the (a, b) answer: its (a, b) margin is y_ab, c given a as in the data
    c_given_a = x3.sum(axis=2) / x3.sum(axis=(1, 2))[:, None]
    e3 = c_given_a[:, :, None] * np.asarray(y_ab, float).reshape(3, 8)[:, None, :]
    e_ab, e_cb = e3.sum(axis=1), e3.sum(axis=0)
    true_ab = np.abs(data.counts(("a", "b")).values.reshape(3, 8) - e_ab).sum()
    assert o._noisy_score(("a", "b"), None, e_ab.ravel()) < 0.05 * true_ab   # what the score read before: ~0
    # the party's entry: o' = 2o − c_ab − c_cb with c_ab near the pair's true error (before: o' = 2o − 0 − c_cb)
    c_cb_old = o._noisy_score(("c", "b"), None, e_cb.ravel())
    p, pair, _, w, off, _ = o._party_triple(tri, None, e3.ravel(), 3.0, 5.0)
    assert (p, pair, w) == ("P0", ("a", "c"), 1.5) and off < 2 * 5.0 - c_cb_old - 0.7 * true_ab
    c_ab = o._pair_error(("a", "b"), None, e_ab.ravel())
    floor = np.sqrt(2 / np.pi) * sigma * np.sqrt((1 - 1 / 3) * (1 - 1 / 8)) * 24
    assert c_ab == pytest.approx(floor) and 0.7 * true_ab < c_ab < 1.3 * true_ab
    # the pair the model is not fitted to keeps its estimate
    c_cb = o._pair_error(("c", "b"), None, e_cb.ravel())
    assert c_cb == pytest.approx(c_cb_old) and c_cb > 0
    assert off == pytest.approx(2 * 5.0 - c_ab - c_cb)
