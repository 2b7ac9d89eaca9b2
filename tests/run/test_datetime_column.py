"""kind = "datetime" with public bounds: encoded in equal-width time bins, decoded to dates, reviewed by init --from."""
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import vertisynth
from vertisynth.cli import main
from vertisynth.core.encoding import TableSchema
from vertisynth.core.errors import ConfigError, DomainError
from vertisynth.run.config import load_config, parse_config
from vertisynth.run.pipeline import run

BOUNDS = ["2020-01-01", "2024-01-01"]


def _frame(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    day = pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 1400, n), unit="D")
    late = day > pd.Timestamp("2022-06-01")
    return pd.DataFrame({"visit": day.strftime("%Y-%m-%d"),
                         "ward": np.where(late & (rng.random(n) < 0.8), "new", "old"),
                         "age": rng.integers(18, 90, n)})


def test_a_datetime_column_runs_through_the_pipeline_and_the_model_file(tmp_path):
    _frame().to_csv(tmp_path / "visits.csv", index=False)
    schema = {"visit": {"kind": "datetime", "bounds": BOUNDS, "bins": 8},
              "ward": {"kind": "categorical", "categories": ["new", "old"]},
              "age": {"kind": "numeric", "bounds": [18, 90], "integer": True}}
    cfg = parse_config({"seed": 2, "budget": {"epsilon": 4.0, "delta": 1e-5},
                        "dataset": {"name": "csv", "params": {"path": str(tmp_path / "visits.csv"), "schema": schema}},
                        "synthesizer": {"use": "private_pgm"},
                        "evaluators": [{"use": "tvd", "params": {"ways": [2]}}]})
    result = run(cfg, output_dir=tmp_path / "out")
    visit = result.synthetic["visit"]
    assert pd.api.types.is_datetime64_any_dtype(visit)
    assert visit.min() >= pd.Timestamp(BOUNDS[0]) and visit.max() <= pd.Timestamp(BOUNDS[1])
    assert (visit == visit.dt.normalize()).all()                        # bounds are dates: so are the values
    late = visit > pd.Timestamp("2022-06-01")                            # the date x ward dependence survives
    assert (result.synthetic["ward"][late] == "new").mean() > (result.synthetic["ward"][~late] == "new").mean() + 0.3
    more = vertisynth.load_model(tmp_path / "out" / "model.npz").sample(200, seed=1)
    assert pd.api.types.is_datetime64_any_dtype(more["visit"])


def test_datetime_errors_are_one_line():
    with pytest.raises(ConfigError, match="needs public bounds"):
        TableSchema.from_config({"d": {"kind": "datetime"}})
    with pytest.raises(ConfigError, match="not a date"):
        TableSchema.from_config({"d": {"kind": "datetime", "bounds": ["2020-01-01", "soon"]}})
    codec = TableSchema.from_config({"d": {"kind": "datetime", "bounds": BOUNDS}}).fit(
        pd.DataFrame({"d": ["2021-01-01"]}), None, np.random.default_rng(0))
    with pytest.raises(DomainError, match=r"\['2019-05-05'\] outside its public range \[2020-01-01, 2024-01-01\]"):
        codec.encode(pd.DataFrame({"d": ["2019-05-05"]}))


def test_init_from_marks_a_date_column_for_review(tmp_path):
    _frame().to_csv(tmp_path / "visits.csv", index=False)
    res = CliRunner().invoke(main, ["init", str(tmp_path / "v.toml"), "--from", str(tmp_path / "visits.csv")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "v.toml").read_text()
    assert 'visit = { kind = "datetime", bounds = [' in text and "# REVIEW visit: dates" in text


def test_init_from_says_why_dates_outside_the_datetime_range_stay_categorical(tmp_path):
    """Dates before 1677 parse (pandas 3 reads them at µs), but a datetime column holds datetime64[ns] dates only:
    init keeps the column categorical and its REVIEW note says why, instead of silently listing dates as labels
    (or writing bounds the config then refuses). Two columns: the tvd evaluator asks for 2-way marginals only."""
    day = pd.Timestamp("1990-01-01") + pd.to_timedelta(np.arange(60) * 7, unit="D")
    old = [d.replace("1990", "1600", 1).replace("1991", "1601", 1) for d in day.strftime("%Y-%m-%d")]
    pd.DataFrame({"born": old, "x": np.arange(60) % 3}).to_csv(tmp_path / "old.csv", index=False)
    res = CliRunner().invoke(main, ["init", str(tmp_path / "old.toml"), "--from", str(tmp_path / "old.csv")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "old.toml").read_text()
    note = next(line for line in text.splitlines() if line.startswith("# REVIEW born"))
    assert "outside what a datetime column holds" in note and "1677-09-22" in note
    assert 'born = { kind = "categorical"' in text
    assert "ways = [2]" in text
    load_config(tmp_path / "old.toml")   # a config that loads as written
