"""The second example package (examples/vertisynth-wrapped): another library's model wrapped honestly, found
through entry points, its noise on the ledger."""
import sys
from pathlib import Path

import numpy as np
import pytest

from plugin_fixtures import install_fake_dist
from vertisynth.core.registry import Registry
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import execute, make_plan

WRAPPED_SRC = Path(__file__).resolve().parents[2] / "examples" / "vertisynth-wrapped" / "src"


@pytest.fixture
def wrapped_plugin(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(WRAPPED_SRC)] + list(sys.path))
    install_fake_dist(tmp_path, "vertisynth-wrapped", {}, {"wrapped": "vertisynth_wrapped.plugin"})
    return tmp_path


def _cfg(synth, epsilon=2.0):
    return parse_config({"seed": 3, "budget": {"epsilon": epsilon, "delta": 1e-5},
                         "dataset": {"name": "census", "params": {"n": 4000}}, "synthesizer": synth,
                         "evaluators": [{"use": "workload_error", "params": {"workload": LABEL_PAIRS}}]})


LABEL_PAIRS = [["income", a] for a in ("age", "sex", "education", "occupation", "hours_per_week", "workclass")]


def test_wrapped_model_runs_from_its_entry_point_with_its_noise_on_the_ledger(wrapped_plugin):
    reg = Registry.load(strict=True)
    assert reg.provider("synthesizer", "nb_synth") == "vertisynth-wrapped"
    result = execute(make_plan(_cfg({"use": "nb_synth", "params": {"label": "income"}}), registry=reg))
    spent = [c for c in result.ledger.spent if c.mechanism == "laplace_2way"]
    assert len(spent) == 14 and result.ledger.spent_epsilon() == pytest.approx(2.0)   # ε/14 per table
    assert abs(result.synthetic_codes.n - 4000) < 50       # the noisy n (mean of the noisy table totals)
    assert "centralised" in result.report["synthesizer"]["mode"]
    baseline = execute(make_plan(_cfg({"use": "independent"}), registry=reg)).metrics["workload_error"]["l1_workload"]
    # on the pairs it models (label x attribute) it beats independent columns: a real model, not noise
    assert result.metrics["workload_error"]["l1_workload"] < baseline
    # public domain: every category of the schema can come out, even one the noisy counts made rare
    assert result.synthetic_codes.domain.shape == result.real_codes.domain.shape


def test_wrapped_model_refuses_a_bad_label(wrapped_plugin):
    reg = Registry.load(strict=True)
    with pytest.raises(Exception, match="label 'nope' is not an attribute"):
        make_plan(_cfg({"use": "nb_synth", "params": {"label": "nope"}}), registry=reg)
