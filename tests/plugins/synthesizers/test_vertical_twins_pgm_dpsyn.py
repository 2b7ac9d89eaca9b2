"""Vertical twins of private_pgm and dpsyn: chosen by `params.vertical`, run by the pipeline on a VerticalOracle,
spending exactly their plan (the cross-party probes included), refusing a bad vertical table in one line, and
better than independent columns."""
from collections import Counter

import pytest

from vertisynth.core.errors import ConfigError
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import make_plan, run

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


@pytest.mark.parametrize("syn, params", TWINS)
def test_the_twin_spends_exactly_its_plan_and_the_ledger_names_the_cross_party_queries(syn, params):
    params = {**params, "vertical": HE}
    plan = make_plan(_cfg(syn, params))
    assert plan.measure is not None and plan.measure.spec.name == "he"
    planned = Counter(plan.ledger.planned)
    res = run(_cfg(syn, params))
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
    ({"measure": "dpfm"}, None, "not a CrossPartyMeasure"),
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
    ind = run(_cfg("independent", {}, n=6000)).metrics["tvd"]["tvd_3way"]
    twin = run(_cfg(syn, {**params, "vertical": HE}, n=6000)).metrics["tvd"]["tvd_3way"]
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
