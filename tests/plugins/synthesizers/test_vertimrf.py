"""VertiMRF: per-phase behaviour, accounting across parties, the party/server boundary, bad input."""
import numpy as np
import pytest

from vertisynth.run.config import parse_config
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.messages import Message
from vertisynth.run.pipeline import make_plan, run
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFConfig, VertiMRFSynthesizer
from synthetic_tables import correlated as _correlated

FAST = {"encoder_params": {"t": 200}, "local_params": {"iters": 40, "refine_iters": 10}, "iters": 60, "rounds": 2,
        "per_round": 2}


def _cfg(**kw):
    base = {"seed": 5, "budget": {"epsilon": 2.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 3000}},
            "synthesizer": {"use": "vertimrf", "params": FAST},
            "evaluators": [{"use": "tvd", "params": {"ways": [2, 3], "marginals": 20}}]}
    base.update(kw)
    return parse_config(base)




def _fit(data, parts, params=None, budget=Budget(4.0, 1e-5), seed=0):
    part = VerticalPartition.from_lists(parts)
    syn = VertiMRFSynthesizer(VertiMRFConfig(**{**FAST, **(params or {})}))
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(data.domain, part, budget)))
    syn.fit(VerticalData(part, part.views(data)), ledger, np.random.default_rng(seed))
    return syn, ledger, part


def test_pipeline_run_spends_the_whole_plan_across_parties_and_is_deterministic():
    a = run(_cfg())
    b = run(_cfg())
    assert a.synthetic.equals(b.synthetic)
    assert not a.ledger.unspent()
    assert a.ledger.spent_epsilon() == pytest.approx(2.0, rel=1e-4)
    assert {c.party for c in a.ledger.spent} == {"registry", "employer"}
    stages = set(a.report["privacy"]["per_stage_epsilon"])
    assert {"synthesizer", "encoder"} <= stages   # (binned-query recovery: no value distributions)
    assert a.report["synthesizer"]["mode"].startswith("vertical")
    assert "one person spans all parties" in a.report["synthesizer"]["privacy_notes"][0]
    model = a.report["synthesizer"]["model"]   # what the server built, for the reader of the report
    owner = {x: p["name"] for p in a.report["parties"] for x in p["attributes"]}
    for g in model["graph_combination"]:
        assert owner[g["pair"][0]] != owner[g["pair"][1]]
        # an edge is linked only when its dependence test passed, or as the fallback when none did
        assert g["z"] >= 3.0 or g["fallback"] or (g["test_failed"] and not g["added"])
    assert {tuple(p) for p in model["cross_party_marginals"]} <= {tuple(c["pair"]) for c in model["cross_party_candidates"]}


def test_graph_respects_the_clique_limit_and_cross_party_marginals_are_added():
    data = _correlated()
    syn, ledger, _ = _fit(data, [["a", "b"], ["c", "d", "e"]], {"max_clique_cells": 24, "encoder_params": {"t": 1000}},
                          budget=Budget(20.0, 1e-5))
    for q in syn._cliques:
        assert data.domain.project(q).size() <= 24
    assert any({"a", "b"} & set(p) and {"c", "d", "e"} & set(p) for p in syn._chosen)


def test_large_epsilon_approaches_the_truth_with_three_parties():
    data = _correlated(8000)
    syn, ledger, _ = _fit(data, [["a"], ["b", "d"], ["c", "e"]], {"encoder_params": {"t": 1000}, "iters": 1500, "rounds": 3,
                                                                    "per_round": 4},
                          budget=Budget(200.0, 1e-5))
    out = syn.sample(None, np.random.default_rng(1))
    for attrs_ in [("a", "c"), ("b", "d"), ("c", "e")]:
        p = data.counts(attrs_).values / data.n
        q = out.counts(attrs_).values / out.n
        assert 0.5 * np.abs(p - q).sum() < 0.1, attrs_
    assert len({c.party for c in ledger.spent}) == 3


def test_server_works_from_message_files_only(tmp_path):
    """Parties' messages go through files into a fresh server object: same model as the simulation."""
    data = _correlated()
    parts = [["a", "b"], ["c", "d", "e"]]
    syn, ledger, part = _fit(data, parts, seed=3)
    # replay: parties compute and save their messages, a separate server object loads them
    budget = Budget(4.0, 1e-5)
    party_side = VertiMRFSynthesizer(VertiMRFConfig(**FAST))
    pledger = PrivacyLedger(budget)
    pledger.plan(party_side.plan(PlanContext(data.domain, part, budget)))
    key_rng, rngs = party_side.party_rngs(np.random.default_rng(3))
    party_side.agree_keys(key_rng)
    files = []
    for p in part.names:
        for i, m in enumerate(party_side.party_step(p, part.views(data)[p], pledger, rngs[p])):
            files.append(m.save(tmp_path / f"{p}_{i}.npz"))
    server = VertiMRFSynthesizer(VertiMRFConfig(**FAST))
    server.plan(PlanContext(data.domain, part, budget))
    server.server_step([Message.load(f) for f in files])
    for attrs_ in [("a", "c"), ("b", "e")]:
        assert np.allclose(server._model.marginal(attrs_).values, syn._model.marginal(attrs_).values)


def test_consistency_enforcement_makes_one_way_tables_agree():
    syn = VertiMRFSynthesizer(VertiMRFConfig(weighting="paper"))
    rng = np.random.default_rng(0)
    est = rng.uniform(0, 50, (3, 4))
    one_way = {"a": (np.array([10.0, 60.0, 30.0]), 1.0), "b": (np.array([25.0, 25.0, 25.0, 25.0]), 1.0)}
    out = syn._consistent(("a", "b"), est, 1.0, one_way, n_hat=100.0, rounds=200)
    assert out.sum() == pytest.approx(100.0) and (out >= 0).all()
    pa = out.sum(1) / 100
    target = (est.sum(1) / est.sum() + np.array([0.1, 0.6, 0.3])) / 2
    assert np.allclose(pa, target / target.sum(), atol=0.02)


def test_encoder_fraction_is_gone_and_says_what_replaced_it():
    """The encoder always took what the other shares left; a config that still sets encoder_fraction (which
    changed nothing) is refused in one line that says so, instead of being silently ignored."""
    with pytest.raises(ConfigError) as err:
        make_plan(_cfg(synthesizer={"use": "vertimrf", "params": {"local_fraction": 0.2, "encoder_fraction": 0.6}}))
    assert "\n" not in str(err.value)
    assert "'encoder_fraction' was removed: the encoder takes what local_fraction and value_fraction leave" in str(
        err.value)
    plan = make_plan(_cfg(synthesizer={"use": "vertimrf", "params": {"local_fraction": 0.2}}))
    assert plan.synthesizer.instance.budget_split() == {"local": 0.2, "encoder": 0.8, "value_distributions": 0.0}


def test_bad_input():
    with pytest.raises(ConfigError, match="leave the encoder a share"):
        make_plan(_cfg(synthesizer={"use": "vertimrf", "params": {"local_fraction": 0.9}}))
    with pytest.raises(Exception, match="unknown encoder 'fm'"):
        make_plan(_cfg(synthesizer={"use": "vertimrf", "params": {"encoder": "fm"}}))
    with pytest.raises(ConfigError, match="unknown key 'tt'"):
        make_plan(_cfg(synthesizer={"use": "vertimrf", "params": {"encoder_params": {"tt": 5}}}))
    with pytest.raises(ConfigError, match="phantom"):  # ε' tiny: k_p over a million
        make_plan(_cfg(budget={"epsilon": 3e-3, "delta": 1e-5},
                       synthesizer={"use": "vertimrf", "params": {"encoder_params": {"t": 2000, "calibration": "paper"}}}))
    dom = Domain(["a", "b"], [1, 2])
    part = VerticalPartition.from_lists([["a"], ["b"]])
    with pytest.raises(ConfigError, match="'a' has domain size 1"):
        VertiMRFSynthesizer(VertiMRFConfig()).plan(PlanContext(dom, part, Budget(1.0, 1e-5)))
    data = _correlated(200)
    part = VerticalPartition.from_lists([["a", "b"], ["c", "d", "e"]])
    syn = VertiMRFSynthesizer(VertiMRFConfig(**FAST))
    ledger = PrivacyLedger(Budget(4.0, 1e-5))
    ledger.plan(syn.plan(PlanContext(data.domain, part, Budget(4.0, 1e-5))))
    views = part.views(data)
    views["party2"] = views["party2"].take(np.arange(150))
    with pytest.raises(DataError, match="not row-aligned"):
        syn.fit(VerticalData(part, views), ledger, np.random.default_rng(0))


@pytest.mark.shared_data
def test_vertimrf_fm_on_nltcs_beats_independent_columns(data_dir):
    res = run(_cfg(dataset={"name": "nltcs", "params": {"data_dir": str(data_dir), "sample": 8000}},
                   budget={"epsilon": 0.8, "delta": 1e-5}))
    assert res.metrics["tvd"]["tvd_3way"] < 0.15  # independent columns: about 0.25
