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


def test_evaluate_with_a_config_ignores_and_names_columns_outside_its_schema(tmp_path):
    real = tmp_path / "real.csv"
    frame = pd.read_csv(_table(real))
    frame.insert(0, "id", range(len(frame)))   # as `init --from` leaves an identifier out of the schema
    frame.to_csv(real, index=False)
    frame.drop(columns="id").sample(frac=1.0, random_state=1).to_csv(tmp_path / "synth.csv", index=False)
    config = tmp_path / "job.toml"
    config.write_text('[dataset]\nname = "csv"\n[dataset.params]\npath = "real.csv"\n'
                      '[dataset.params.schema]\nage = { kind = "numeric", bounds = [0, 100], bins = 5 }\n'
                      'sex = { kind = "categorical", categories = ["F", "M"] }\n'
                      'income = { kind = "numeric", bounds = [40000, 60000], bins = 5 }\n')
    res = CliRunner().invoke(main, ["evaluate", str(real), str(tmp_path / "synth.csv"), "-c", str(config)])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1 and "['id']" in lines[0] and "real" in lines[0], res.output
    assert "tvd.tvd_2way = 0.0000" in res.output   # the same rows, shuffled: scored on the schema's columns


def _nulls(x, where="config"):
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in _nulls(v, f"{where}.{k}")]
    if isinstance(x, list):
        return [p for i, v in enumerate(x) for p in _nulls(v, f"{where}[{i}]")]
    return [where] if x is None else []


def test_report_config_has_no_null_fields(tmp_path):
    import json

    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import run

    config = parse_config({"budget": {"epsilon": 1.0, "delta": 1e-5}, "synthesizer": {"use": "independent"},
                           "dataset": {"name": "census", "params": {"n": 500}}})
    assert config.sample_size is None and config.noise is None and config.output is None   # unset, resolved by the run
    run(config, tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    written = report["config"]
    assert not _nulls(written), _nulls(written)
    # what the run resolved them to
    assert written["sample_size"] == report["synthetic_records"] and written["noise"] == "simulation"
