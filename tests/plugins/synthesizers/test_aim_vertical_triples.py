"""aim's vertical twin chooses cross-party triples (docs/vertical.md "aim, fifth pass"): a triple over two parties is
a candidate, scored on released answers (its cross-party pairs' probes: a lower bound), and once chosen it is
measured through the cross-party measure, paid from the rounds' filter before it is answered; every cross-party
draw of the filter is one entry of the ledger's `cross_party`, at the same ρ."""
from collections import Counter

import numpy as np
import pytest

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
from vertisynth.plugins.synthesizers.aim import AIMConfig, AIMSynthesizer
from vertisynth.vertical import VerticalConfig, VerticalOracle, party_streams

from tests.synthetic_tables import correlated


def _fit(trust, parties=(("a", "c", "e"), ("b", "d"))):
    data = correlated(6000)
    data = data.project([a for a in data.domain.attributes if any(a in p for p in parties)])
    part = VerticalPartition.from_lists([list(p) for p in parties], ["P0", "P1"]).validate(data.domain)
    syn = AIMSynthesizer(AIMConfig(iters=100, rounds=8, vertical=VerticalConfig(
        trust=trust, params={"crypto": "simulated"})))
    budget = Budget(2.0, 1e-6)
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(data.domain, part, budget)))
    planned = Counter(ledger.planned)
    rng = np.random.default_rng(3)
    oracle = VerticalOracle(part.views(data), part, HEEncoder(HEConfig(crypto="simulated", trust=trust, workers=1)),
                            ledger, party_streams(rng, part.names), "he")
    syn.fit_oracle(oracle, rng)
    return syn, ledger, planned


def test_the_twin_measures_a_cross_party_triple_through_the_measure_and_the_ledger_says_what_was_spent():
    trust = "server"
    syn, ledger, planned = _fit(trust)
    cross = ledger.cross_party
    triples = [q for q in cross if len(q["attributes"]) == 3]
    # chosen and measured at full resolution across the two parties (the probes are binned pairs)
    assert triples and all("binned" not in q and sorted(q["parties"]) == ["P0", "P1"] and q["trust"] == trust
                           for q in triples)
    measured = {tuple(m.attributes) for m in syn._measurements}
    assert {tuple(q["attributes"]) for q in triples} <= measured
    # the charges: the plan spent exactly, and each cross-party answer a draw of the filter at its ρ, in order
    assert ledger.unspent() == [] and Counter(ledger.spent) == planned
    draws = [rho for what, rho in syn._filter_log if " across " in what]
    assert len(draws) == len(cross)
    np.testing.assert_allclose(draws, [q["rho"] for q in cross], rtol=1e-9)
    assert sum(rho for _, rho in syn._filter_log) <= syn._charges["rounds"].cost.rho * (1 + 1e-9)


def test_under_two_sided_noise_the_twin_keeps_to_pairs_across_parties():
    """trust = "none": a cross-party answer carries 2σ² a cell, and two-party triples made the twin worse there
    (docs/vertical.md, "aim, fifth pass"): none is measured, the probes and the chosen pairs are."""
    syn, ledger, planned = _fit("none")
    assert ledger.cross_party and all(len(q["attributes"]) == 2 for q in ledger.cross_party)
    assert ledger.unspent() == [] and Counter(ledger.spent) == planned


def test_under_trust_server_a_full_resolution_probe_is_paid_probe_full_times_a_coarse_one():
    """docs/vertical.md "aim, seventh pass": under trust = "server" (default `probe`) a probe with no attribute
    coarsened is measured at σ_p / √PROBE_FULL, drawn from the filter at PROBE_FULL times a coarse probe's ρ, which
    keeps PROBE · ρ_rounds / K; under trust = "none" every probe is paid as before. b (8 values) is coarsened, so
    the pairs with b are coarse probes, those with d (4 values) full ones: under trust none the full ones get more
    only where every probe is full (the next test)."""
    from vertisynth.plugins.synthesizers import aim
    for trust, ratio in (("server", 3.0), ("none", 1.0)):   # 3.0: aim.PROBE_FULL (checked last)
        syn, ledger, _ = _fit(trust)
        probes = ledger.cross_party[:6]   # a, c, e (P0) x b, d (P1): measured before any round
        assert sorted(tuple(sorted(q["attributes"])) for q in probes) == sorted(
            tuple(sorted((x, y))) for x in "ace" for y in "bd")
        coarse = [q["rho"] for q in probes if "b" in q["attributes"]]
        full = [q["rho"] for q in probes if "d" in q["attributes"]]
        assert all("binned" in q for q in probes if "b" in q["attributes"])
        assert all("binned" not in q for q in probes if "d" in q["attributes"])
        np.testing.assert_allclose(coarse, aim.PROBE * syn._charges["rounds"].cost.rho / 6, rtol=1e-9)
        np.testing.assert_allclose(full, ratio * np.array(coarse), rtol=1e-9)
        # the filter's draws are these very charges, in order
        draws = [rho for what, rho in syn._filter_log if " across " in what][:6]
        np.testing.assert_allclose(draws, [q["rho"] for q in probes], rtol=1e-9)
    assert aim.PROBE_FULL == 3.0


def test_under_trust_none_the_probes_get_probe_full_none_where_every_probe_is_full_resolution():
    """docs/vertical.md "aim under trust = none, eleventh pass": under trust = "none" (default `probe`), where no
    probe coarsens an attribute (a, c, e | d: 3, 2, 2 against 4 values, probe_bins 4), each probe is drawn at
    PROBE_FULL_NONE times PROBE · ρ_rounds / K (σ_p / √PROBE_FULL_NONE); the draws equal the ledger's entries. On
    main every probe was paid PROBE · ρ_rounds / K under trust none (this test failed there); where some probe is
    coarse they still are (the test above)."""
    from vertisynth.plugins.synthesizers import aim
    syn, ledger, planned = _fit("none", (("a", "c", "e"), ("d",)))
    probes = ledger.cross_party[:3]
    assert sorted(tuple(sorted(q["attributes"])) for q in probes) == [("a", "d"), ("c", "d"), ("d", "e")]
    assert all("binned" not in q for q in probes)
    np.testing.assert_allclose([q["rho"] for q in probes],   # 2.0: aim.PROBE_FULL_NONE (checked last)
                               2.0 * aim.PROBE * syn._charges["rounds"].cost.rho / 3, rtol=1e-9)
    draws = [rho for what, rho in syn._filter_log if " across " in what]
    np.testing.assert_allclose(draws, [q["rho"] for q in ledger.cross_party], rtol=1e-9)
    assert ledger.unspent() == [] and Counter(ledger.spent) == planned
    assert sum(rho for _, rho in syn._filter_log) <= syn._charges["rounds"].cost.rho * (1 + 1e-9)
    assert aim.PROBE_FULL_NONE == 2.0


def _server_release(synth, data, ledger, rng):
    """The released model of aim's twin under trust = "server" (simulated crypto: the same released tables)."""
    oracle = VerticalOracle(data.views, data.partition, HEEncoder(HEConfig(crypto="simulated", trust="server")),
                            ledger, party_streams(rng, data.partition.names), "he")
    synth.fit_oracle(oracle, rng)
    return synth._model.marginal(synth._domain.attributes).values.ravel()


@pytest.mark.slow
@pytest.mark.audit_cost(15)
def test_vertical_twin_aim_trust_server_audit_slow():
    """Under trust = "server" the triple (a0, a1, a2) over two parties is a candidate scored at the party holding
    a1, a2 (its pair's exact error joins that party's noisy best and exponential mechanism at sensitivity w/2) and
    measured across parties: the released model audited against the planned ρ on adversarial neighbours."""
    from vertisynth.core.domain import Domain
    from vertisynth.testing.checks import Subject, check_privacy_audit

    three = Domain(("a0", "a1", "a2"), (2, 2, 2))
    params = {"iters": 30, "rounds": 4,
              "vertical": {"measure": "he", "trust": "server", "params": {"crypto": "simulated"}}}
    check_privacy_audit(Subject("synthesizer", "aim (vertical, trust server)", AIMSynthesizer, AIMConfig, params,
                                domain=three, parties=(("a0",), ("a1", "a2")), measure=_server_release,
                                audit_samples=2000, audit_pairs=1, audit_sequential=True))
