"""Vertical twins of private_pgm and dpsyn: chosen by `params.vertical`, run by the pipeline on a VerticalOracle,
spending exactly their plan (the cross-party probes included), refusing a bad vertical table in one line, and
better than independent columns."""
from collections import Counter

import numpy as np

import pytest

from seeded_runs import run_once
from vertisynth.core.errors import ConfigError
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import execute, make_plan, run

HE = {"measure": "he", "trust": "none", "params": {"crypto": "simulated"}}
SERVER = {"measure": "he", "trust": "server", "params": {"crypto": "simulated"}}

TWINS = [("private_pgm", {"iters": 200}), ("private_pgm", {"iters": 200, "measurements": "workload"}),
         ("dpsyn", {"rounds": 10}), ("dpsyn", {"rounds": 10, "selection": "greedy"})]


def _cfg(syn, params, eps=1.0, parties=None, preset="small-domains", n=6000, seed=2):
    cfg = {"seed": seed, "budget": {"epsilon": eps, "delta": 1e-9},
           "dataset": {"name": "zoo", "params": {"preset": preset, "n": n}},
           "synthesizer": {"use": syn, "params": params},
           "evaluators": [{"use": "tvd", "params": {"ways": [3], "marginals": 60}}]}
    if parties is not None:
        cfg["parties"] = parties
    return parse_config(cfg)


def _run(syn, params):
    """run(_cfg(syn, params)) once per worker: a run is a function of its config (seeded); the plan test and the
    quality test read the same twin run, the quality tests the same independent one."""
    return run_once([__name__, syn, params], lambda: _cfg(syn, params))


@pytest.mark.parametrize("syn, params", TWINS)
def test_the_twin_spends_exactly_its_plan_and_the_ledger_names_the_cross_party_queries(syn, params):
    params = {**params, "vertical": HE}
    plan = make_plan(_cfg(syn, params))
    assert plan.measure is not None and plan.measure.spec.name == "he"
    planned = Counter(plan.ledger.planned)
    res = _run(syn, params)
    assert res.ledger.unspent() == [] and Counter(res.ledger.spent) == planned
    cross = res.ledger.cross_party
    assert cross and all(q["measure"] == "he" and q["trust"] == "none" and len(set(q["parties"])) == 2
                         for q in cross)
    assert res.report["privacy"]["cross_party"]["queries"] == len(cross)


def test_private_pgm_mst_twin_plans_a_probe_per_cross_party_pair_and_measures_each():
    params = {"iters": 200, "vertical": HE}
    plan = make_plan(_cfg("private_pgm", params))
    probes = [c for c in plan.ledger.planned if c.mechanism == "gaussian_cross_probe"]
    res = run(_cfg("private_pgm", params))
    at_probe = [q for q in res.ledger.cross_party if abs(q["rho"] - probes[0].cost.rho) < 1e-12]
    assert probes and len(at_probe) == len(probes)
    assert {tuple(q["attributes"]) for q in at_probe} == set(plan.synthesizer.instance._cross)
    central = make_plan(_cfg("private_pgm", {"iters": 200}))
    assert not [c for c in central.ledger.planned if c.mechanism == "gaussian_cross_probe"]


def test_dpsyn_greedy_twin_scores_cross_party_pairs_from_probes_and_within_pairs_by_indif():
    params = {"rounds": 10, "selection": "greedy", "vertical": HE}
    plan = make_plan(_cfg("dpsyn", params))
    syn = plan.synthesizer.instance
    probes = [c for c in plan.ledger.planned if c.mechanism == "gaussian_cross_probe"]
    assert len(probes) == len(syn._cross) > 0 and len(syn._within) + len(syn._cross) == len(syn._pairs)
    res = run(_cfg("dpsyn", params))
    at_probe = [q for q in res.ledger.cross_party if abs(q["rho"] - probes[0].cost.rho) < 1e-12]
    assert {tuple(q["attributes"]) for q in at_probe} == set(syn._cross)
    # the planned selection ρ is unchanged: probes plus the within-party InDif vector
    central = make_plan(_cfg("dpsyn", {"rounds": 10, "selection": "greedy"}))
    sel = [c.cost.rho for c in central.ledger.planned if c.mechanism == "gaussian_indif_scores"]
    twin = [c.cost.rho for c in plan.ledger.planned if c.mechanism in ("gaussian_indif_scores", "gaussian_cross_probe")]
    assert sum(twin) == pytest.approx(sum(sel), rel=1e-12)


def test_dpsyn_twin_refuses_laplace_noise_in_one_line():
    with pytest.raises(ConfigError, match="Gaussian noise") as exc:
        make_plan(_cfg("dpsyn", {"noise": "laplace", "vertical": HE}))
    assert "\n" not in str(exc.value).strip()


@pytest.mark.parametrize("vertical, parties, match", [
    ({"measure": "nosuch"}, None, "unknown measure 'nosuch'"),
    ({"measure": "dpfm"}, None, "offers trust = 'server'"),
    ({"measure": "he", "trust": "nobody", "params": {"crypto": "simulated"}}, None, "trust"),
    ({"measure": "he", "params": {"crypto": "simulated"}}, "one", "one party"),
    ({"measure": "he", "probe": 1.5}, None, "probe must be in"),
    ({"measure": "he", "colour": "red"}, None, "colour"),
])
@pytest.mark.parametrize("syn", sorted({s for s, _ in TWINS}))
def test_a_bad_vertical_table_is_refused_in_one_line_before_any_data(syn, vertical, parties, match):
    one = [{"attributes": [f"x{i:02d}" for i in range(12)]}] if parties == "one" else None
    with pytest.raises(ConfigError, match=match) as exc:
        make_plan(_cfg(syn, {"vertical": vertical}, parties=one))
    assert "\n" not in str(exc.value).strip()


def test_a_workload_marginal_over_three_parties_is_refused_at_plan():
    with pytest.raises(ConfigError, match="spans 3 parties") as exc:
        make_plan(_cfg("private_pgm", {"measurements": "workload", "workload": [["x00", "x01", "x02"]],
                                       "vertical": HE}))
    assert "\n" not in str(exc.value).strip()


@pytest.mark.parametrize("syn, params", TWINS)
def test_the_twin_beats_independent_columns_on_a_zoo_table(syn, params):
    ind = _run("independent", {}).metrics["tvd"]["tvd_3way"]
    twin = _run(syn, {**params, "vertical": HE}).metrics["tvd"]["tvd_3way"]
    assert twin < 0.7 * ind


@pytest.mark.parametrize("syn, params", TWINS)
def test_a_trust_server_twin_runs_at_its_plan_and_says_whom_it_trusts(syn, params):
    params = {**params, "vertical": SERVER}
    planned = Counter(make_plan(_cfg(syn, params)).ledger.planned)
    res = run(_cfg(syn, params))
    assert res.ledger.unspent() == [] and Counter(res.ledger.spent) == planned
    cross = res.ledger.cross_party
    assert cross and {q["trust"] for q in cross} == {"server"}
    assert res.report["privacy"]["cross_party"]["through"] == ["he (trust = server)"]


# -- secure noise, and the privacy audit (slow) -------------------------------------------------------------------
def _vertical_release(synth, data, ledger, rng):
    """What the twin releases, fitted on a VerticalOracle over the parties' views with the he measure (simulated
    crypto: the same released tables as real crypto): private_pgm's model joint table; dpsyn's consistent marginal
    of every pair (zeros for a pair it did not choose)."""
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
    from vertisynth.vertical import VerticalOracle, party_streams

    oracle = VerticalOracle(data.views, data.partition, HEEncoder(HEConfig(crypto="simulated")), ledger,
                            party_streams(rng, data.partition.names), "he")
    synth.fit_oracle(oracle, rng)
    if hasattr(synth, "_model"):
        return synth._model.marginal(synth._domain.attributes).values.ravel()
    got = {tuple(f.domain.attributes): f.values.ravel() for f in synth._marginals}
    dom = synth._domain
    return np.concatenate([got.get(p, np.zeros(dom.project(list(p)).size())) for p in synth._pairs])


def _classes(name):
    from vertisynth.plugins.synthesizers.dpsyn.synthesizer import DPSynConfig, DPSynSynthesizer
    from vertisynth.plugins.synthesizers.private_pgm import PrivatePGMConfig, PrivatePGMSynthesizer
    return {"private_pgm": (PrivatePGMSynthesizer, PrivatePGMConfig),
            "dpsyn": (DPSynSynthesizer, DPSynConfig)}[name]


SMALL = [("private_pgm", {"iters": 30, "vertical": HE}),
         ("dpsyn", {"rounds": 5, "selection": "greedy", "vertical": HE})]


@pytest.mark.parametrize("name, params", SMALL)
def test_the_twin_runs_on_secure_noise(name, params):
    """Secure noise everywhere: OpenDP's discrete Gaussian at the parties, in the probes and in the cross-party
    answers; the CSPRNG's Gumbel and OpenDP's Gaussian in the selection."""
    from vertisynth.core.dataset import Dataset, VerticalPartition
    from vertisynth.core.domain import Domain
    from vertisynth.core.interfaces import PlanContext, VerticalData
    from vertisynth.core.privacy import Budget, PrivacyLedger
    from vertisynth.core.structuring import structure

    cls, config_cls = _classes(name)
    dom = Domain(("a", "b", "c", "d"), (3, 2, 6, 2))
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, 3000)
    data = Dataset(np.column_stack([a, (a > 0) ^ (rng.random(3000) < 0.1), (2 * a + rng.integers(0, 2, 3000)) % 6,
                                    rng.integers(0, 2, 3000)]), dom)
    part = VerticalPartition.from_lists([["a", "d"], ["b", "c"]]).validate(dom)
    syn = cls(structure(params, config_cls, "params"))
    budget = Budget(2.0, 1e-6)
    ledger = PrivacyLedger(budget, noise="secure")
    ledger.plan(syn.plan(PlanContext(dom, part, budget)))
    _vertical_release(syn, VerticalData(part, part.views(data)), ledger, np.random.default_rng(1))
    assert ledger.unspent() == [] and ledger.cross_party
    assert any(c.mechanism == "gaussian_cross_probe" for c in ledger.spent)
    assert syn.sample(500, np.random.default_rng(2)).n == 500


@pytest.mark.slow
@pytest.mark.audit_cost(18)
@pytest.mark.parametrize("name, params", SMALL)
def test_vertical_twin_pgm_dpsyn_audit_slow(name, params):
    """The twin's release on three binary attributes over two parties (a0 | a1 a2: probes, the InDif vector or the
    parties' noisy best scores, the exponential mechanism at a party, the two-sided cross-party answers) audited
    against the planned ρ on adversarial neighbours; looped real code."""
    from vertisynth.core.domain import Domain
    from vertisynth.testing.checks import Subject, check_privacy_audit

    cls, config_cls = _classes(name)
    three = Domain(("a0", "a1", "a2"), (2, 2, 2))
    check_privacy_audit(Subject("synthesizer", f"{name} (vertical)", cls, config_cls, params, domain=three,
                                parties=(("a0",), ("a1", "a2")), measure=_vertical_release,
                                audit_samples=2000, audit_pairs=1, audit_sequential=True))


# -- the chosen pairs in one protocol stage (issue 31, cost side) -------------------------------------------------
ONE_STAGE = [("private_pgm", {"iters": 30}), ("private_pgm", {"iters": 30, "measurements": "workload"}),
             ("dpsyn", {"rounds": 5}), ("dpsyn", {"rounds": 5, "selection": "greedy"})]


@pytest.mark.parametrize("vertical", [HE, SERVER], ids=["none", "server"])
@pytest.mark.parametrize("syn, params", ONE_STAGE)
def test_the_twin_asks_its_chosen_cross_party_pairs_in_one_stage_and_spends_its_plan_in_order(
        monkeypatch, syn, params, vertical):
    """The marginals a twin asks independently of each other's answers (private_pgm's chosen pairs or its
    workload, dpsyn's chosen pairs) go through one `measure_many`: their cross-party ones are one stage of the
    measure (a party's rows encrypted once for all of them), not one stage each as before. The ledger is the
    plan, charge for charge and in order, and each of those answers was paid its planned ρ (private_pgm: a
    gaussian_2way / gaussian_marginal charge; dpsyn: ρ/k of its one measurement charge)."""
    from vertisynth.vertical.link import InProcessLink

    stages: list[list[tuple[str, ...]]] = []
    cross = InProcessLink.cross

    def counted(self, queries, sigma, spends):   # every stage of the cross-party measure, as asked
        stages.append(sorted(tuple(sorted(q[0])) for q in queries))
        return cross(self, queries, sigma, spends)
    monkeypatch.setattr(InProcessLink, "cross", counted)
    cfg = _cfg(syn, {**params, "vertical": vertical}, n=3000)
    plan = make_plan(cfg)
    planned = list(plan.ledger.planned)
    res = execute(plan)
    assert res.ledger.unspent() == [] and list(res.ledger.spent) == planned
    if syn == "private_pgm":
        rho = {c.mechanism: c.cost.rho for c in planned}[
            "gaussian_marginal" if params.get("measurements") == "workload" else "gaussian_2way"]
    else:
        rho = plan.synthesizer.instance._measure_charge.cost.rho / len(plan.synthesizer.instance.selected)
    last = sorted(tuple(sorted(q["attributes"])) for q in res.ledger.cross_party
                  if abs(q["rho"] - rho) < 1e-9 * rho and not q.get("binned"))
    assert len(last) >= 2   # this table puts several of them across parties
    assert stages[-1] == last, [len(s) for s in stages]   # one stage, the last, holding them all
