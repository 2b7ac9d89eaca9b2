"""aim's vertical twin pays for a probe of every cross-party pair; under trust none the last fit takes the pending
ones (never chosen by a round) whose released table shows signal against the model, while the model stays under
aim's size cap (`last_probes`; docs/vertical.md, "aim, twelfth pass" and "thirteenth pass"). Before, they were
dropped: on a small run the release did not depend on any cross-party answer. Trust server keeps dropping them."""
from collections import Counter

import numpy as np

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.pgm import estimate
from vertisynth.pgm.estimation import Measurement
from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
from vertisynth.plugins.synthesizers.aim import AIMConfig, AIMSynthesizer, last_probes, model_cells
from vertisynth.vertical import VerticalConfig, VerticalOracle, party_streams

from tests.synthetic_tables import correlated


def _model():
    """Three attributes, 1-ways measured exactly: the model is independent columns."""
    dom = Domain(["x", "y", "z"], [4, 4, 3])
    meas = [Measurement(("x",), np.full(4, 250.0), 1.0), Measurement(("y",), np.full(4, 250.0), 1.0),
            Measurement(("z",), np.array([400.0, 300.0, 300.0]), 1.0)]
    return dom, meas, estimate(dom, meas, iters=200).model


def test_a_pending_probe_with_signal_joins_the_last_fit_and_one_without_does_not():
    dom, meas, model = _model()
    flat = Measurement(("x", "z"), model.marginal(("x", "z")).values + np.array([[1.0, -1, 0], [-1, 1, 0]] * 2), 2.0)
    strong = Measurement(("x", "y"), np.diag([250.0] * 4), 2.0)                   # x = y: far from independence
    taken = last_probes(dom, model, meas, {("x", "z"): flat, ("x", "y"): strong}, float("inf"))
    assert taken == [("x", "y")]   # x-z differs from the model by less than its noise: it would add more error


def test_the_last_probes_are_taken_strongest_first_while_the_model_stays_under_the_cap():
    dom, meas, model = _model()
    strong = Measurement(("x", "y"), np.diag([250.0] * 4), 2.0)
    weaker = Measurement(("y", "z"), model.marginal(("y", "z")).values + np.array([[40.0, -40, 0], [-40, 40, 0]] * 2),
                         2.0)
    pending = {("y", "z"): weaker, ("x", "y"): strong}
    assert last_probes(dom, model, meas, pending, float("inf")) == [("x", "y"), ("y", "z")]
    # room for x-y (16 + 3 cells) but not for y-z on top of it (16 + 12)
    cap = model_cells(dom, [("x", "y"), ("z",)])
    assert last_probes(dom, model, meas, pending, cap) == [("x", "y")]
    # a binned probe is compared with the model's marginal on its bins
    binned = Measurement(("x", "y"), np.diag([500.0, 500.0]), 2.0, bins={"x": np.array([0, 0, 1, 1]),
                                                                         "y": np.array([0, 0, 1, 1])})
    assert last_probes(dom, model, meas, {("x", "y"): binned}, float("inf")) == [("x", "y")]
    even = Measurement(("x", "y"), np.full((2, 2), 250.0), 2.0, bins=binned.bins)
    assert last_probes(dom, model, meas, {("x", "y"): even}, float("inf")) == []


def _short_run(trust: str, seed: int):
    """6 rounds of aim's twin on `correlated` split (a, c, e) | (b, d), simulated crypto: the synthesizer, its oracle
    and ledger, the plan the ledger took, the cross-party tables in the release. `seed`: one whose round chooses a-c-e
    (within P0)."""
    data = correlated(2000)
    part = VerticalPartition.from_lists([["a", "c", "e"], ["b", "d"]], ["P0", "P1"]).validate(data.domain)
    syn = AIMSynthesizer(AIMConfig(iters=100, rounds=6, vertical=VerticalConfig(
        trust=trust, params={"crypto": "simulated"})))
    budget = Budget(1.0, 1e-6)
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(data.domain, part, budget)))
    planned = Counter(ledger.planned)
    rng = np.random.default_rng(seed)
    oracle = VerticalOracle(part.views(data), part, HEEncoder(HEConfig(crypto="simulated", trust=trust, workers=1)),
                            ledger, party_streams(rng, part.names), "he")
    syn.fit_oracle(oracle, rng)
    assert syn._rounds_run == 1
    chosen = [m for m in syn._measurements[len(data.domain):] if m.bins is None and m.attributes == ("a", "c", "e")]
    assert chosen   # the round's choice: within P0
    across = {tuple(m.attributes) for m in syn._measurements if {"a", "c", "e"} & set(m.attributes)
              and {"b", "d"} & set(m.attributes)}
    return data, syn, oracle, ledger, planned, across


def test_a_short_run_that_chooses_no_cross_party_pair_releases_one_from_its_probes():
    """trust none: the one round chooses a within-party marginal, so before this the release depended on no
    cross-party answer though every cross-party pair was paid for; now the strong a-b (b = 2a + noise) joins the
    last fit, and the ledger is what was planned (post-processing)."""
    data, syn, oracle, ledger, planned, across = _short_run("none", 3)
    assert ("a", "b") in across
    # every cross-party table in the release is one of the paid probes (nothing new measured for them)
    answered = {tuple(m.attributes) for m in oracle.answered}
    assert across <= answered and len(ledger.cross_party) == len(answered)
    assert Counter(ledger.spent) == planned and ledger.unspent() == []
    assert syn._model is not None and model_cells(data.domain, [tuple(m.attributes) for m in syn._measurements]) \
        <= syn.config.max_model_mb * 2**20 / 8


def test_under_trust_server_the_last_fit_keeps_no_pending_probe():
    """trust server: the same run leaves its pending probes out (measured there, the variant gave no direction:
    docs/vertical.md, "aim, twelfth pass"), so its release is main's: no cross-party table, a-b's probe paid."""
    data, syn, oracle, ledger, planned, across = _short_run("server", 5)
    assert across == set()
    assert ("a", "b") in {tuple(m.attributes) for m in oracle.answered}
    assert Counter(ledger.spent) == planned and ledger.unspent() == []
