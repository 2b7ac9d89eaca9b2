"""Rough edges a new user and a plugin author hit (issue 32), each reproduced."""
import numpy as np
import pandas as pd
from click.testing import CliRunner

from vertisynth.cli import main


def _table(path, n=200):
    rng = np.random.default_rng(0)
    pd.DataFrame({"age": rng.integers(18, 90, n), "sex": rng.choice(["F", "M"], n),
                  "income": rng.normal(50_000, 1_000, n).round(2)}).to_csv(path, index=False)
    return path


def _one_line_warnings(output):
    """vertisynth's warnings as `warning:` lines, not Python's `file.py:LINE: InferredSchemaWarning: ...`."""
    return "warning: " in output and "Warning:" not in output and ".py:" not in output


def test_init_from_prints_one_line_warnings(tmp_path):
    csv = _table(tmp_path / "a.csv")
    res = CliRunner().invoke(main, ["init", "--from", str(csv), str(tmp_path / "a.toml")])
    assert res.exit_code == 0, res.output
    assert _one_line_warnings(res.output), res.output


def test_evaluate_prints_one_line_warnings(tmp_path):
    real, synth = _table(tmp_path / "real.csv"), tmp_path / "synth.csv"
    pd.read_csv(real).sample(frac=1.0, random_state=1).to_csv(synth, index=False)
    res = CliRunner().invoke(main, ["evaluate", str(real), str(synth)])
    assert res.exit_code == 0, res.output
    assert _one_line_warnings(res.output) and "tvd" in res.output, res.output
