"""SDMetrics and anonymeter as optional evaluators: metadata, a clear skip without the extra, real scores with it."""
import importlib.util
import sys

import numpy as np
import pandas as pd
import pytest

import vertisynth
from vertisynth.core.registry import default_registry
from vertisynth.plugins.evaluators.external import MissingExtraWarning


def _tables(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n)
    return pd.DataFrame({"a": a, "b": (a + rng.integers(0, 2, n)) % 3, "c": rng.integers(0, 5, n)})


def test_metadata_is_declared():
    reg = default_registry()
    sd, an = reg.get("evaluator", "sdmetrics_quality"), reg.get("evaluator", "anonymeter_risk")
    assert (sd.goal, sd.min_value, sd.max_value) == ("maximize", 0.0, 1.0)
    assert (an.goal, an.min_value, an.max_value) == ("minimize", 0.0, 1.0)


@pytest.mark.parametrize("name, module, extra", [("sdmetrics_quality", "sdmetrics", "sdmetrics"),
                                                 ("anonymeter_risk", "anonymeter", "anonymeter")])
def test_without_the_extra_the_evaluator_is_skipped_with_a_message(monkeypatch, name, module, extra):
    monkeypatch.setitem(sys.modules, module, None)   # as if not installed
    for sub in [m for m in sys.modules if m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, sub, None)
    real = _tables()
    with pytest.warns(MissingExtraWarning, match=rf"{name}.*pip install 'vertisynth\[{extra}\]'"):
        metrics = vertisynth.evaluate(real, _tables(seed=1), holdout=_tables(seed=2),
                                      evaluators=[name, {"use": "tvd", "params": {"ways": [2]}}])
    assert metrics[name] == {} and metrics["tvd"]


@pytest.mark.skipif(importlib.util.find_spec("sdmetrics") is None, reason="extra 'sdmetrics' not installed")
def test_sdmetrics_scores_a_copy_above_a_broken_table():
    real = _tables()
    good = vertisynth.evaluate(real, _tables(seed=1), evaluators=["sdmetrics_quality"])["sdmetrics_quality"]
    broken = real.assign(b=np.random.default_rng(5).integers(0, 3, len(real)), a=0)
    bad = vertisynth.evaluate(real, broken, evaluators=["sdmetrics_quality"])["sdmetrics_quality"]
    assert good["column_shapes"] > 0.9 > bad["column_shapes"]
    if "column_pair_trends" in good and "column_pair_trends" in bad:
        assert good["column_pair_trends"] > bad["column_pair_trends"]


@pytest.mark.skipif(importlib.util.find_spec("anonymeter") is None, reason="extra 'anonymeter' not installed")
def test_anonymeter_finds_more_risk_in_a_copy_than_in_fresh_records():
    real, holdout = _tables(800, 0), _tables(800, 9)
    fresh = vertisynth.evaluate(real, _tables(800, 1), holdout=holdout, evaluators=[
        {"use": "anonymeter_risk", "params": {"n_attacks": 200}}])["anonymeter_risk"]
    leak = real.assign(c=np.arange(len(real)) % 97)      # a near-unique column, released as is
    copied = vertisynth.evaluate(leak, leak, holdout=holdout.assign(c=np.arange(800) % 97 + 200), evaluators=[
        {"use": "anonymeter_risk", "params": {"n_attacks": 200}}])["anonymeter_risk"]
    assert set(fresh) >= {"singling_out_risk", "linkability_risk", "inference_risk"}
    assert all(0 <= v <= 1 for v in fresh.values())
    assert copied["singling_out_risk"] + copied["inference_risk"] > fresh["singling_out_risk"] + fresh["inference_risk"]
