"""sdmetrics_quality scores the raw tables (the real rows as read, the synthetic table as decoded), so its scores
are SDMetrics' own on the same two tables, comparable with SDV's published ones, not scores of bin codes."""
import warnings

import numpy as np
import pytest

import vertisynth
from vertisynth.core.capabilities import wants_raw_values
from vertisynth.core.errors import PluginError
from vertisynth.core.interfaces import Evaluator
from vertisynth.core.specs import EvaluatorSpec
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import column_kinds, make_plan, run

quality = pytest.importorskip("sdmetrics.reports.single_table", reason="sdmetrics is not installed (pip install "
                              "'vertisynth[sdmetrics]'): the comparison with SDMetrics' own report did not run")


def sdmetrics_own(real, synthetic, kinds):
    report = quality.QualityReport()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report.generate(real, synthetic, {"columns": {c: {"sdtype": k} for c, k in kinds.items()}}, verbose=False)
    props = report.get_properties().set_index("Property")["Score"]
    return {"column_shapes": props["Column Shapes"], "column_pair_trends": props["Column Pair Trends"]}


def test_run_scores_equal_sdmetrics_own_report_on_the_raw_tables():
    cfg = parse_config({"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5},
                        "dataset": {"name": "census", "params": {"n": 1500}}, "synthesizer": {"use": "independent"},
                        "evaluators": [{"use": "sdmetrics_quality"}]})
    res = run(cfg)
    loaded = make_plan(cfg).source.load()
    kinds = column_kinds(loaded.schema)
    assert "numerical" in kinds.values() and "categorical" in kinds.values()
    own = sdmetrics_own(loaded.frame.reset_index(drop=True), res.synthetic, kinds)
    assert res.metrics["sdmetrics_quality"] == pytest.approx(own, abs=1e-12)
    assert res.report["evaluation"]["scored_on"]["sdmetrics_quality"].startswith("raw values")
    # the old way (bin codes, every column categorical) gives another number: the raw scoring is what matched
    from vertisynth.plugins.evaluators.external import SDMetricsQuality

    codes = SDMetricsQuality().evaluate(res.real_codes, res.synthetic_codes, np.random.default_rng(0))
    assert codes != pytest.approx(own, abs=1e-6)


def test_evaluate_two_tables_scores_the_raw_values():
    rng = np.random.default_rng(0)
    import pandas as pd

    def table(shift, n=800):
        age = rng.normal(40 + shift, 10, n).round(1)
        return pd.DataFrame({"age": age, "income": (age * 900 + rng.normal(0, 5000, n)).round(),
                             "job": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
                             "sex": rng.choice(["f", "m"], n)})
    real, synth = table(0), table(3)
    got = vertisynth.evaluate(real, synth, evaluators=["sdmetrics_quality"])["sdmetrics_quality"]
    own = sdmetrics_own(real, synth, {"age": "numerical", "income": "numerical", "job": "categorical",
                                      "sex": "categorical"})
    assert got == pytest.approx(own, abs=1e-12)


class _NoRaw(Evaluator):
    def plan(self, ctx):
        return []

    def evaluate(self, real, synthetic, rng):
        return {}


def test_a_raw_values_declaration_without_evaluate_raw_is_refused():
    spec = EvaluatorSpec("noraw", _NoRaw, None, "", {"raw_values"})
    with pytest.raises(PluginError, match="declares 'raw_values' but has no evaluate_raw"):
        wants_raw_values(spec, _NoRaw(None))
    assert not wants_raw_values(EvaluatorSpec("plain", _NoRaw, None), _NoRaw(None))
