"""Issue 30's silent cases on the run/CLI/API path: each test fails on the code before its fix."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from vertisynth.cli.main import main
from vertisynth.run.evaluate import evaluate_tables


def _none_csv(path, n=400, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.choice(["a", "b", "None"], n).astype(object)
    x[:13] = ""
    pd.DataFrame({"x": x, "y": rng.choice(["p", "q"], n), "age": rng.integers(18, 90, n)}).to_csv(path, index=False)
    return int((x == "None").sum())


def test_init_keeps_a_category_spelled_none(tmp_path):
    """Item 11: init read "None" as missing (pandas' NA list), so the 'None' rows came out blank."""
    _none_csv(tmp_path / "d.csv")
    res = CliRunner().invoke(main, ["init", "--from", str(tmp_path / "d.csv"), str(tmp_path / "c.toml")])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in (tmp_path / "c.toml").read_text().splitlines() if ln.startswith("x = "))
    assert '"None"' in line and 'missing = "category"' in line


def test_evaluate_reads_csvs_by_the_schema_rule(tmp_path):
    """Item 11: evaluate read "None" as missing even where the schema lists it as a category."""
    k = _none_csv(tmp_path / "real.csv")
    _none_csv(tmp_path / "syn.csv", seed=1)
    schema = {"x": {"kind": "categorical", "categories": ["None", "a", "b"], "missing": "category"},
              "y": {"kind": "categorical", "categories": ["p", "q"]},
              "age": {"kind": "numeric", "bounds": [18, 90], "integer": True}}
    m = evaluate_tables(tmp_path / "real.csv", tmp_path / "syn.csv", schema=schema, evaluators=["tvd"])
    assert m["tvd"]
    from vertisynth.run.evaluate import _frame
    from vertisynth.core.encoding import TableSchema
    frame = _frame(tmp_path / "real.csv", "real", TableSchema.from_config(schema))
    assert int((frame["x"] == "None").sum()) == k and int(frame["x"].isna().sum()) == 13
