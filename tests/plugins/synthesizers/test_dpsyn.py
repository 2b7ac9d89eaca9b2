"""DPSyn: consistency post-processing, record synthesis, accounting, selection and its sensitivity bound."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vertisynth.run.config import parse_config
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.core.factor import Factor
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.run.pipeline import make_plan, run
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.synthesizers.dpsyn.consistency import make_consistent, norm_sub
from vertisynth.plugins.synthesizers.dpsyn.records import synthesize_records
from vertisynth.plugins.synthesizers.dpsyn.synthesizer import DPSynConfig, DPSynSynthesizer
from vertisynth.pgm.scores import INDIF_SENSITIVITY, indif


def _cfg(**kw):
    base = {"seed": 2, "budget": {"epsilon": 1.0, "delta": 1e-5},
            "dataset": {"name": "census", "params": {"n": 4000}},
            "synthesizer": {"use": "dpsyn", "params": {"rounds": 8}},
            "evaluators": [{"use": "tvd", "params": {"ways": [2, 3], "marginals": 30}}]}
    base.update(kw)
    return parse_config(base)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-50, 50), min_size=2, max_size=30), st.floats(1, 500))
def test_norm_sub_is_non_negative_with_the_right_total(values, total):
    out = norm_sub(np.array(values), total)
    assert (out >= 0).all()
    assert out.sum() == pytest.approx(total, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_consistency_makes_shared_projections_agree(seed):
    rng = np.random.default_rng(seed)
    dom = Domain(["a", "b", "c"], [2, 3, 4])
    facs = [Factor(dom.project(p), rng.normal(20, 15, dom.project(p).shape)) for p in [("a", "b"), ("a", "c"), ("b", "c")]]
    out = make_consistent(facs, [1.0, 1.0, 1.0], total=100.0, rounds=30)
    for f in out:
        assert (f.values >= 0).all() and f.total() == pytest.approx(100.0)
    for a in "abc":
        projs = [f.project([a]).values for f in out if a in f.attributes]
        assert np.allclose(projs[0], projs[1], atol=0.5)


def test_records_reproduce_consistent_targets():
    rng = np.random.default_rng(0)
    dom = Domain(["a", "b", "c"], [3, 4, 2])
    truth = Dataset(np.column_stack([rng.integers(0, s, 5000) for s in dom.shape]), dom)
    truth = Dataset(np.where(truth.codes[:, [0]] == 0, truth.codes * [1, 0, 1], truth.codes), dom)  # correlate
    targets = [truth.counts(list(p)) for p in itertools.combinations(dom.attributes, 2)]
    codes = synthesize_records(dom, targets, 5000, np.random.default_rng(1), rounds=30)
    syn = Dataset(codes, dom)
    for t in targets:
        got = syn.counts(t.attributes).values
        assert 0.5 * np.abs(got - t.values).sum() / 5000 < 0.02


def test_huge_epsilon_reproduces_training_marginals():
    import pandas as pd

    import vertisynth

    rng = np.random.default_rng(5)
    a = rng.integers(0, 4, 6000)
    b = (a + rng.integers(0, 2, 6000)) % 4
    c = np.where(rng.random(6000) < 0.8, b % 3, rng.integers(0, 3, 6000))
    d = rng.integers(0, 2, 6000)
    frame = pd.DataFrame({"a": a, "b": b, "c": c, "d": d})
    res = vertisynth.synthesize(frame, parties={"p": ["a", "b"], "q": ["c", "d"]}, epsilon=1e5, synthesizer="dpsyn",
                                evaluators=[{"use": "tvd", "params": {"ways": [2, 3]}}])
    assert res.metrics["tvd"]["tvd_2way"] < 0.02


def test_ledger_spends_the_plan_and_determinism():
    a = run(_cfg())
    b = run(_cfg())
    assert not a.ledger.unspent() and a.ledger.spent_epsilon() == pytest.approx(1.0, rel=1e-6)
    assert a.synthetic.equals(b.synthetic)
    assert a.report["synthesizer"]["mode"].startswith("centralised")


def test_greedy_selection_is_charged_and_covers_every_attribute():
    res = run(_cfg(synthesizer={"use": "dpsyn", "params": {"selection": "greedy", "rounds": 5}}))
    stages = [c.mechanism for c in res.ledger.spent]
    assert stages == ["gaussian_indif_scores", "gaussian_2way_marginals"]
    assert res.ledger.spent_epsilon() == pytest.approx(1.0, rel=1e-6)


def test_laplace_without_delta_and_auto_choice():
    plan = make_plan(_cfg(budget={"epsilon": 1.0}))
    assert [c.mechanism for c in plan.ledger.planned] == ["laplace_2way_marginals"]
    plan = make_plan(_cfg())
    assert [c.mechanism for c in plan.ledger.planned] == ["gaussian_2way_marginals"]  # lower variance here


@pytest.mark.parametrize("params,match", [({"noise": "cauchy"}, "noise"), ({"alpha": 0}, "alpha"),
                                          ({"selection_fraction": 1.5}, "selection_fraction"),
                                          ({"max_records_per_individual": 0}, "max_records")])
def test_bad_configs(params, match):
    with pytest.raises(ConfigError, match=match):
        make_plan(_cfg(synthesizer={"use": "dpsyn", "params": params}))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 40))
def test_indif_sensitivity_bound_holds_under_add_remove(seed, n):
    rng = np.random.default_rng(seed)
    dom = Domain(["a", "b"], [int(rng.integers(2, 5)), int(rng.integers(2, 5))])
    codes = np.column_stack([rng.integers(0, s, n) for s in dom.shape])
    extra = np.array([[rng.integers(0, dom.shape[0]), rng.integers(0, dom.shape[1])]])
    d1 = Dataset(codes, dom)
    d2 = Dataset(np.vstack([codes, extra]), dom)
    assert abs(indif(d1, "a", "b") - indif(d2, "a", "b")) <= INDIF_SENSITIVITY + 1e-9


def test_noise_calibration_matches_the_declared_rho():
    """Per-cell noise has std θ·sqrt(k/(2ρ)) for the ρ the plan declared (seeded statistical check)."""
    dom = Domain(["a", "b", "c"], [2, 2, 2])
    data = Dataset(np.zeros((10, 3), dtype=np.int64), dom)
    part = VerticalPartition.from_lists([["a", "b"], ["c"]])
    budget = Budget(1.0, 1e-5)
    residuals = []
    for s in range(300):
        syn = DPSynSynthesizer(DPSynConfig(noise="gaussian", consistency_rounds=1))
        ledger = PrivacyLedger(budget)
        ledger.plan(syn.plan(PlanContext(dom, part, budget)))
        syn.fit(VerticalData(part, part.views(data)), ledger, np.random.default_rng(s))
        assert ledger.spent[0].cost.rho == pytest.approx(budget.rho())
        exact = np.concatenate([data.counts(list(p)).values.ravel() for p in syn.selected])
        residuals.append(syn.noisy_vector - exact)
    k = 3
    expected = np.sqrt(k / (2 * budget.rho()))
    assert np.std(np.concatenate(residuals)) == pytest.approx(expected, rel=0.05)


@pytest.mark.shared_data
def test_dpsyn_runs_on_nltcs(data_dir):
    res = run(_cfg(dataset={"name": "nltcs", "params": {"data_dir": str(data_dir)}}, budget={"epsilon": 0.8, "delta": 1e-5}))
    assert res.metrics["tvd"]["tvd_3way"] < 0.1
