"""Two-stage probes under trust "none" (vertisynth/vertical/probes.py, `reprobes`, `measure_probes_twice`;
docs/vertical.md, "trust = none, the worst cells"): a plan decision from public counts and the trust, charged as
planned, each attribute's strongest pair re-probed first, a contender's two answers pooled by inverse variance."""
import math
from collections import Counter

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, ZCDP
from vertisynth.core.registry import default_registry
from vertisynth.pgm.estimation import Measurement
from vertisynth.pgm.oracle import CentralOracle
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import build_component, cross_party_measure, make_plan, run
from vertisynth.vertical import VerticalOracle, party_streams
from vertisynth.vertical.probes import dependence, width_bins


def test_two_stages_only_under_trust_none_where_many_pairs_share_the_probes():
    from vertisynth.vertical.probes import reprobes
    assert reprobes(600, 40, "none") == 150            # zoo wide: 15 cross-party pairs per attribute
    assert reprobes(600, 40, "server") == 0            # one-sided noise: one stage, as before
    assert reprobes(48, 12, "none") == 0               # zoo small-domains: 4 per attribute, one stage
    assert reprobes(600, 40, None) == 0


def test_each_attribute_s_strongest_pair_is_probed_again_before_stronger_pairs_of_others():
    from vertisynth.vertical.probes import measure_probes_twice
    rng = np.random.default_rng(0)
    n = 6000
    a = rng.integers(0, 3, n)
    b = (a + (rng.random(n) < 0.1)) % 3          # a-b strong
    c = (a + rng.integers(0, 2, n)) % 3          # a-c medium
    d = np.where(rng.random(n) < 0.3, b, rng.integers(0, 3, n))   # d: weak, its best pair is b-d
    data = Dataset(np.column_stack([a, b, c, d]), Domain(("a", "b", "c", "d"), (3, 3, 3, 3)))
    pairs = [("a", "b"), ("a", "c"), ("b", "c"), ("a", "d"), ("b", "d"), ("c", "d")]
    first = [Charge("synthesizer", "gaussian_cross_probe", ZCDP(0.5)) for _ in pairs]
    again = [Charge("synthesizer", "gaussian_cross_reprobe", ZCDP(1.0)) for _ in range(3)]
    ledger = PrivacyLedger(Budget(20.0, 1e-6))
    ledger.plan(first + again)
    got = measure_probes_twice(CentralOracle(data, ledger), pairs, first, again, rng, width_bins(data.domain, 3))
    assert Counter(ledger.spent) == Counter(first + again)
    strongest = sorted(range(len(pairs)), key=lambda i: -dependence(got[i]))[:3]
    assert not any("d" in pairs[i] for i in strongest)   # by dependence alone d's pairs would wait
    again_pairs = [m.attributes for m in got[len(pairs):]]
    assert len(again_pairs) == 3 and {x for p in again_pairs for x in p} == {"a", "b", "c", "d"}
    assert ("a", "b") in again_pairs and ("b", "d") in again_pairs   # d's strongest pair


def _wide(trust, seed=0):
    cfg = parse_config({"seed": seed, "budget": {"epsilon": 0.4, "delta": 1e-9},
                        "dataset": {"name": "zoo", "params": {"preset": "wide", "n": 3000}},
                        "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
    return run(cfg).real_codes, make_plan(cfg).partition


def _narrow(real, partition, per=6):
    """The wide table cut to each party's first `per` attributes: 4 × 6 = 24 attributes, 216 cross-party pairs, still
    at least REPROBE_PER_ATTRIBUTE (8) per attribute, so the plan asks two stages as on the whole table (600 pairs),
    at a fifth of the fit's CPU (its selection scores every pair in every round)."""
    lists = [p.attributes[:per] for p in partition]
    keep = [a for a in real.domain.attributes if any(a in x for x in lists)]
    narrow = real.project(keep)
    return narrow, VerticalPartition.from_lists(lists, partition.names).validate(narrow.domain)


@pytest.mark.parametrize("method", ["mst", "private_pgm"])
def test_the_twin_plans_the_second_stage_spends_exactly_it_and_pools_each_contender(method):
    real, partition = _narrow(*_wide(None))
    reg = default_registry()
    params = {"iters": 100, "vertical": {"measure": "he", "trust": "none", "params": {"crypto": "simulated"}}}
    comp = build_component(reg, "synthesizer", method, params, method)
    budget = Budget(0.4, 1e-9)
    ctx = PlanContext(real.domain, partition, budget)
    charges = comp.instance.plan(ctx)
    probes = [c for c in charges if c.mechanism == "gaussian_cross_probe"]
    again = [c for c in charges if c.mechanism == "gaussian_cross_reprobe"]
    k = len(comp.instance._cross)
    assert len(probes) == k == 216 and len(again) == math.ceil(0.25 * k)
    # the probes take 0.8 of the selection third (0.6 in one stage), half of it for the second stage
    assert sum(c.cost.rho for c in probes + again) == pytest.approx(ctx.rho / 3 * 0.8, rel=1e-12)
    assert sum(c.cost.rho for c in again) == pytest.approx(ctx.rho / 3 * 0.8 * 0.5, rel=1e-12)
    ledger = PrivacyLedger(budget)
    ledger.plan(charges)
    rng = np.random.default_rng(0)
    oracle = VerticalOracle(partition.views(real), partition, cross_party_measure(reg, comp, partition).instance,
                            ledger, party_streams(rng, partition.names), "he")
    comp.instance.fit_oracle(oracle, rng)
    assert ledger.unspent() == [] and Counter(ledger.spent) == Counter(charges)
    assert len(oracle.pooled) == len(again)
    s1 = oracle.answered[0].std
    s2 = oracle.answered[k].std
    assert s2 < s1 and all(m.std == pytest.approx(1 / math.sqrt(1 / s1 ** 2 + 1 / s2 ** 2)) for m in oracle.pooled)


@pytest.mark.parametrize("method", ["mst", "private_pgm"])
def test_trust_server_plans_one_stage_as_before(method):
    real, partition = _wide(None)
    params = {"vertical": {"measure": "he", "trust": "server", "params": {"crypto": "simulated"}}}
    comp = build_component(default_registry(), "synthesizer", method, params, method)
    ctx = PlanContext(real.domain, partition, Budget(0.4, 1e-9))
    charges = comp.instance.plan(ctx)
    assert not [c for c in charges if c.mechanism == "gaussian_cross_reprobe"]
    probes = [c for c in charges if c.mechanism == "gaussian_cross_probe"]
    assert sum(c.cost.rho for c in probes) == pytest.approx(ctx.rho / 3 * 0.6, rel=1e-12)


def test_pool_refuses_answers_to_different_queries_in_one_line():
    real, partition = _wide(None)
    reg = default_registry()
    comp = build_component(reg, "synthesizer", "mst",
                           {"vertical": {"measure": "he", "trust": "none", "params": {"crypto": "simulated"}}}, "mst")
    oracle = VerticalOracle(partition.views(real), partition, cross_party_measure(reg, comp, partition).instance,
                            PrivacyLedger(Budget(1.0, 1e-9)), party_streams(np.random.default_rng(0), partition.names),
                            "he")
    a = Measurement(("x00", "x10"), np.ones((2, 2)), 3.0)
    pooled = oracle.pool([a, Measurement(("x00", "x10"), 3 * np.ones((2, 2)), 3.0)])
    assert pooled.values.tolist() == [[2.0, 2.0], [2.0, 2.0]] and pooled.std == pytest.approx(3 / math.sqrt(2))
    with pytest.raises(ConfigError, match="one query on the same bins") as exc:
        oracle.pool([a, Measurement(("x00", "x11"), np.ones((2, 2)), 3.0)])
    assert "\n" not in str(exc.value)


def _vertical_release(synth, data, ledger, rng):
    """The twin's released model (its joint table), fitted on a VerticalOracle over the parties' views, he simulated
    (tests/plugins/synthesizers/test_vertical_twins.py's audit, the same release)."""
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder

    oracle = VerticalOracle(data.views, data.partition, HEEncoder(HEConfig(crypto="simulated")), ledger,
                            party_streams(rng, data.partition.names), "he")
    synth.fit_oracle(oracle, rng)
    assert len(oracle.pooled) == 1   # the second stage ran (one of the two cross-party pairs, pooled)
    return synth._model.marginal(synth._domain.attributes).values.ravel()


@pytest.mark.slow
@pytest.mark.audit_cost(29)
def test_vertical_twin_audit_slow_two_stages(monkeypatch):
    """The mst twin with its probes in two stages (forced on three binary attributes over two parties, a0 | a1 a2:
    both probes, the re-probe of the one of more dependence, the pooled score, the parties' noisy best scores and
    the two-sided answers) audited against the planned ρ on adversarial neighbours; looped real code."""
    import vertisynth.vertical.probes as probes
    from vertisynth.plugins.synthesizers.mst import MSTConfig, MSTSynthesizer
    from vertisynth.testing.checks import Subject, check_privacy_audit

    monkeypatch.setattr(probes, "REPROBE_PER_ATTRIBUTE", 0)
    three = Domain(("a0", "a1", "a2"), (2, 2, 2))
    params = {"iters": 50, "vertical": {"measure": "he", "trust": "none", "params": {"crypto": "simulated"}}}
    check_privacy_audit(Subject("synthesizer", "mst (vertical, two-stage probes)", MSTSynthesizer, MSTConfig, params,
                                domain=three, parties=(("a0",), ("a1", "a2")), measure=_vertical_release,
                                audit_samples=2000, audit_pairs=1, audit_sequential=True))


def test_the_cost_before_any_row_prices_the_second_stage():
    """`vertisynth validate --rows N` prices the twin's answers from its plan (vertical/cost.py): the second stage
    is one more answer, on as many pairs as it plans, at its own σ."""
    from vertisynth.vertical.cost import answers

    real, partition = _wide(None)
    sigma = lambda rho: math.sqrt(1 / (2 * rho))   # noqa: E731
    got = {}
    for trust in ("none", "server"):
        comp = build_component(default_registry(), "synthesizer", "mst",
                               {"vertical": {"measure": "he", "trust": trust, "params": {"crypto": "simulated"}}}, "mst")
        planned = comp.instance.plan(PlanContext(real.domain, partition, Budget(0.4, 1e-9)))
        got[trust] = answers(real.domain, partition, 4, planned, sigma)
    (none, counted), (server, _) = got["none"], got["server"]
    assert len(none) == len(server) + 1 and counted["probes"] == 600 + 150
    assert len(none[1]["queries"]) == 150 and none[1]["sigma"] < none[0]["sigma"]
