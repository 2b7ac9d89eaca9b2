"""[collab] numeric bounds are public facts: values outside them are refused, never clamped silently."""
import json

import numpy as np
import pandas as pd
import pytest

from vertisynth.core.errors import ConfigError, DataError
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import make_plan, run


def _cfg(dataset, numeric):
    return parse_config({"seed": 1, "budget": {"epsilon": 4.0, "delta": 1e-5}, "dataset": dataset,
                         "synthesizer": {"use": "private_pgm", "params": {"measurements": "workload", "iters": 20,
                                                                          "workload": [["age", "income"]]}},
                         "evaluators": [{"use": "workload_error"}],
                         "collab": {"custodians": 2, "numeric": numeric}})


def test_coded_column_with_bounds_off_its_public_codes_is_refused_at_plan(tmp_path):
    # the coded Adult: age is a code 0..15, so the README's raw-age bounds [17, 90] would clamp every value
    rng = np.random.default_rng(0)
    pd.DataFrame({"age": rng.integers(0, 16, 300), "income": rng.integers(0, 2, 300)}).to_csv(tmp_path / "d.csv",
                                                                                               index=False)
    (tmp_path / "d.json").write_text(json.dumps({"age": {"type": "discrete", "domain": 16},
                                                 "income": {"type": "discrete", "domain": 2}}))
    ds = {"name": "csv", "params": {"path": str(tmp_path / "d.csv"), "domain": str(tmp_path / "d.json")}}
    with pytest.raises(ConfigError, match=r"collab.numeric.age: .*\[17.0, 90.0\].*0 .. 15"):
        make_plan(_cfg(ds, {"age": [17, 90]}))
    make_plan(_cfg(ds, {"age": [0, 15]}))   # bounds covering the codes are fine


def test_values_outside_the_public_bounds_are_refused_not_clamped():
    with pytest.raises(DataError, match=r"column 'age' has value\(s\) .* outside its public bounds \[40.0, 90.0\]"):
        run(_cfg({"name": "census", "params": {"n": 800}}, {"age": [40, 90]}))


def test_collab_summary_has_timings(tmp_path):
    run(_cfg({"name": "census", "params": {"n": 800}}, {"age": [17, 90]}), tmp_path)
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "## Timings (seconds)" in summary and "- load data: " in summary and "- evaluate: " in summary
