"""Evaluate any two tables with the evaluator plugins, from Python and from the command line; aliases."""
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import vertisynth
from vertisynth.cli import main
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import make_plan


def _tables(n=3000, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n)
    b = np.where(rng.random(n) < 0.8, a % 2, rng.integers(0, 2, n))
    if noise:
        b = np.where(rng.random(n) < noise, rng.integers(0, 2, n), b)
    return pd.DataFrame({"a": [f"v{x}" for x in a], "b": b, "x": rng.normal(50, 10, n).round(1)})


def test_a_copy_scores_near_zero_and_a_broken_table_scores_worse():
    real = _tables(20000)
    same = vertisynth.evaluate(real, _tables(20000, seed=1), evaluators=[{"use": "tvd", "params": {"ways": [2]}}])
    broken = vertisynth.evaluate(real, _tables(20000, noise=1.0, seed=1), evaluators=[{"use": "tvd", "params": {"ways": [2]}}])
    assert same["tvd"]["tvd_2way"] < 0.03 and broken["tvd"]["tvd_2way"] > 0.1
    assert set(vertisynth.evaluate(real, real)) == {"tvd"}


def test_aliases_keep_both_entries_and_duplicates_are_refused():
    real = _tables()
    m = vertisynth.evaluate(real, real, evaluators=[{"use": "tvd", "params": {"ways": [2]}},
                                                    {"use": "tvd", "as": "tvd_wide", "params": {"ways": [3]}}])
    assert set(m) == {"tvd", "tvd_wide"} and "tvd_3way" in m["tvd_wide"]
    with pytest.raises(ConfigError, match="'tvd' is already the name of evaluators\\[0\\]"):
        vertisynth.evaluate(real, real, evaluators=["tvd", "tvd"])
    with pytest.raises(ConfigError, match="already the name"):   # the same rule for a pipeline config
        make_plan(parse_config({"budget": {"epsilon": 1.0, "delta": 1e-5},
                                "evaluators": [{"use": "tvd"}, {"use": "tvd", "params": {"ways": [3]}}]}))


def test_bad_tables_get_one_line():
    real = _tables()
    with pytest.raises(DataError, match="lacks \\['x'\\]"):
        vertisynth.evaluate(real, real.drop(columns=["x"]))
    with pytest.raises(DataError, match="empty"):
        vertisynth.evaluate(real, real.iloc[:0])
    with pytest.raises(ConfigError, match="holdout"):
        vertisynth.evaluate(real, real, evaluators=[{"use": "ml_utility", "params": {"label": "b"}}])


def test_cli_evaluate_with_a_config_schema_and_figures(tmp_path):
    real, synth = _tables(), _tables(seed=2)
    real.to_csv(tmp_path / "real.csv", index=False)
    synth.to_csv(tmp_path / "synth.csv", index=False)
    (tmp_path / "eval.toml").write_text(
        '[dataset]\nname = "csv"\n[dataset.params]\npath = "real.csv"\n'
        '[dataset.params.schema]\na = { kind = "categorical", categories = ["v0", "v1", "v2", "v3"] }\n'
        'b = { kind = "categorical", categories = [0, 1] }\nx = { kind = "numeric", bounds = [0, 100], clip = true }\n'
        '[[evaluators]]\nuse = "tvd"\nparams = { ways = [2] }\n[[evaluators]]\nuse = "correlation"\n')
    res = CliRunner().invoke(main, ["evaluate", str(tmp_path / "real.csv"), str(tmp_path / "synth.csv"),
                                    "-c", str(tmp_path / "eval.toml"), "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "tvd.tvd_2way = " in res.output and "correlation.cramers_v_mean_abs_diff" in res.output
    assert (tmp_path / "o" / "correlation_heatmap.png").is_file()
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["tvd"]["tvd_2way"] >= 0
    res = CliRunner().invoke(main, ["evaluate", str(tmp_path / "real.csv"), str(tmp_path / "nope.csv")])
    assert res.exit_code == 2 and "does not exist" in res.output
