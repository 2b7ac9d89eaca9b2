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
    assert led.cross_party[-1]["trust"] == "server" and led.cross_party[-1]["released_variance"] == 2400.0   # 1.5σ²
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
