"""Holdout split and the ML-utility evaluators."""
import pytest

from vertisynth.run.config import parse_config
from vertisynth.core.errors import ConfigError
from vertisynth.run.pipeline import make_plan, run


def _cfg(**kw):
    base = {"seed": 2, "budget": {"epsilon": 2.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 3000}},
            "synthesizer": {"use": "independent"}, "evaluation": {"holdout": 0.25},
            "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 20}},
                           {"use": "ml_utility", "params": {"label": "income"}},
                           {"use": "svm_misclassification", "params": {"label": "income", "max_train": 800}}]}
    base.update(kw)
    return parse_config(base)


def test_holdout_is_kept_from_the_synthesizer_and_scores_are_sane():
    res = run(_cfg())
    assert res.real_codes.n == 2250 and res.report["evaluation"]["holdout_records"] == 750
    scored = res.report["evaluation"]["scored_against"]
    assert scored == {"tvd": "holdout", "ml_utility": "training and holdout", "svm_misclassification": "training and holdout"}
    ml = res.metrics["ml_utility"]
    for k, v in ml.items():
        assert 0 <= v <= 1, k
    # columns sampled independently carry no signal about income: real-trained models do at least as well
    assert ml["lr_accuracy_real"] >= ml["lr_accuracy_synthetic"] - 0.02
    svm = res.metrics["svm_misclassification"]
    assert 0 <= svm["misclassification_real"] <= svm["misclassification_synthetic"] + 0.02


def test_better_synthesizer_scores_better_on_ml_utility():
    ind = run(_cfg(evaluators=[{"use": "ml_utility", "params": {"label": "income"}}]))
    pgm = run(_cfg(synthesizer={"use": "private_pgm", "params": {"iters": 100}},
                   budget={"epsilon": 50.0, "delta": 1e-5},
                   evaluators=[{"use": "ml_utility", "params": {"label": "income"}}]))
    assert pgm.metrics["ml_utility"]["lr_f1_gap"] <= ind.metrics["ml_utility"]["lr_f1_gap"] + 0.02


def test_bad_evaluation_configs():
    with pytest.raises(ConfigError, match="holdout = 0.2"):
        make_plan(_cfg(evaluation={"holdout": 0.0}))
    with pytest.raises(ConfigError, match="label attribute 'salary'"):
        make_plan(_cfg(evaluators=[{"use": "ml_utility", "params": {"label": "salary"}}]))
    with pytest.raises(ConfigError, match=r"holdout must be in \[0, 1\)"):
        parse_config({"budget": {"epsilon": 1.0}, "evaluation": {"holdout": 1.5}})
