"""Config validation, the plan-before-data order, determinism, outputs, and the bad-input errors of issue 2."""
import json

import numpy as np
import pandas as pd
import pytest

from vertisynth.run.config import default_config, load_config, parse_config
from vertisynth.core.errors import BudgetError, ConfigError, DataError, DomainError, PluginError
from vertisynth.run.pipeline import make_plan, run

BASE = {
    "seed": 3,
    "budget": {"epsilon": 1.0, "delta": 1e-5},
    "dataset": {"name": "census", "params": {"n": 3000}},
    "synthesizer": {"use": "independent"},
    "evaluators": [{"use": "tvd", "params": {"ways": [2, 3], "marginals": 20}}],
}


def cfg(**changes):
    data = json.loads(json.dumps(BASE))
    for key, value in changes.items():
        data[key] = value
    return parse_config(data)


def test_default_config_runs_end_to_end(tmp_path):
    res = run(default_config(), tmp_path)
    for name in ["synthetic.csv", "report.json", "ledger.json", "summary.md"]:
        assert (tmp_path / name).is_file()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["privacy"]["spent_epsilon"] <= report["privacy"]["budget"]["epsilon"] * (1 + 1e-9)
    assert 0 < report["metrics"]["tvd"]["tvd_3way"] < 1
    synth = pd.read_csv(tmp_path / "synthetic.csv")
    assert list(synth.columns) == list(res.real_codes.domain.attributes)
    assert synth["age"].between(17, 90).all() and synth["age"].dtype.kind == "i"
    assert set(synth["sex"]) <= {"Female", "Male"}
    assert "Privacy" in (tmp_path / "summary.md").read_text()


def test_same_seed_same_output_and_different_seed_differs():
    a = run(cfg())
    b = run(cfg())
    c = run(cfg(seed=4))
    pd.testing.assert_frame_equal(a.synthetic, b.synthetic)
    assert a.metrics == b.metrics
    assert not a.synthetic.equals(c.synthetic)


def test_ledger_spends_exactly_the_plan_across_parties():
    res = run(cfg())
    assert not res.ledger.unspent()
    assert res.ledger.spent_epsilon() == pytest.approx(1.0, rel=1e-6)
    parties = {c.party for c in res.ledger.spent}
    assert parties == {"registry", "employer"}  # both parties' mechanisms count against one budget


def test_noise_setting_is_validated_labelled_and_secure_runs(tmp_path):
    with pytest.raises(ConfigError, match="noise: must be one of \\['secure', 'simulation'\\], got 'secur' "
                                          "\\(did you mean 'secure'"):
        cfg(noise="secur")
    sim = run(cfg(), tmp_path / "sim")        # one-process runs default to the seeded simulation, and say so
    assert sim.report["privacy"]["noise"].startswith("simulation") and "NOT for production" in \
        (tmp_path / "sim" / "summary.md").read_text()
    a, b = run(cfg(noise="secure"), tmp_path / "sec"), run(cfg(noise="secure"))
    assert a.report["privacy"]["noise"].startswith("secure: discrete Gaussian")
    assert "Noise: secure" in (tmp_path / "sec" / "summary.md").read_text()
    assert not a.ledger.unspent() and a.ledger.spent_epsilon() == pytest.approx(sim.ledger.spent_epsilon())
    assert not a.synthetic.equals(b.synthetic)    # the seed no longer fixes the noise


def test_unknown_config_key_names_key_and_valid_ones():
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, "sede": 1})
    assert "unknown key 'sede'" in str(e.value) and "did you mean 'seed'" in str(e.value)
    assert "'budget'" in str(e.value)


def test_unknown_param_key_of_a_plugin():
    c = cfg(evaluators=[{"use": "tvd", "params": {"wayz": [3]}}])
    with pytest.raises(ConfigError) as e:
        make_plan(c)
    msg = str(e.value)
    assert "unknown key 'wayz'" in msg and "did you mean 'ways'" in msg and "'marginals'" in msg
    assert "evaluators[0].params of 'tvd'" in msg


@pytest.mark.parametrize("bad", [{"seed": "7"}, {"seed": 1.5}, {"seed": True}])
def test_wrong_types_are_refused(bad):
    with pytest.raises(ConfigError, match="seed"):
        parse_config({**BASE, **bad})


def test_wrong_param_type():
    with pytest.raises(ConfigError, match=r"marginals.*expected an integer"):
        make_plan(cfg(evaluators=[{"use": "tvd", "params": {"marginals": "many"}}]))


@pytest.mark.parametrize("budget,match", [
    ({"epsilon": 0}, "positive"), ({"epsilon": -1}, "positive"), ({"epsilon": float("nan")}, "positive"),
    ({"epsilon": 1, "delta": 1.5}, "delta"), ({"delta": 1e-5}, "epsilon"),
])
def test_bad_budgets(budget, match):
    with pytest.raises(ConfigError, match=match):
        parse_config({**BASE, "budget": budget})


def test_missing_budget():
    data = dict(BASE)
    del data["budget"]
    with pytest.raises(ConfigError, match="privacy budget is required"):
        parse_config(data)


def test_gaussian_without_delta_is_refused_before_data():
    with pytest.raises(BudgetError, match="delta > 0"):
        make_plan(cfg(budget={"epsilon": 1.0}))
    # the Laplace variant is pure DP and needs no delta
    plan = make_plan(cfg(budget={"epsilon": 1.0}, synthesizer={"use": "independent", "params": {"mechanism": "laplace"}}))
    assert plan.ledger.planned_epsilon() == pytest.approx(1.0)


def test_unknown_plugin_lists_choices():
    with pytest.raises(PluginError, match="choose one of: .*'independent'"):
        make_plan(cfg(synthesizer={"use": "vertimrff"}))
    with pytest.raises(PluginError, match="unknown dataset 'censu'.*did you mean 'census'"):
        make_plan(cfg(dataset={"name": "censu"}))


def test_party_with_unknown_attribute_or_overlap():
    with pytest.raises(DomainError, match="'agee'.*did you mean 'age'"):
        make_plan(cfg(parties=[{"attributes": ["agee"]}]))
    with pytest.raises(DataError, match="claimed by both"):
        make_plan(cfg(parties=[{"name": "a", "attributes": ["age", "sex"]}, {"name": "b", "attributes": ["sex"]}]))
    with pytest.raises(DataError, match="belong to no party"):
        make_plan(cfg(parties=[{"attributes": ["age"]}]))


def test_plan_is_checked_before_any_data_is_loaded(monkeypatch):
    import vertisynth.plugins.datasets.census as census

    def no_loading(*a, **k):
        raise AssertionError("data was loaded before the plan was checked")

    monkeypatch.setattr(census, "load", no_loading)
    with pytest.raises(ConfigError):
        make_plan(cfg(evaluators=[{"use": "tvd", "params": {"ways": [99]}}]))
    make_plan(cfg())  # a valid plan is made without loading data


def _csv(tmp_path, frame):
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    return str(path)


def _csv_cfg(path, schema, **kw):
    return cfg(dataset={"name": "csv", "params": {"path": path, "schema": schema, "parties": [["x"], ["y"]]}},
               evaluators=[{"use": "tvd", "params": {"ways": [1, 2]}}], **kw)


SCHEMA = {"x": {"kind": "categorical", "categories": ["a", "b"]},
          "y": {"kind": "numeric", "bounds": [0, 10], "bins": 4, "integer": True}}


def test_csv_with_public_schema_round_trips(tmp_path):
    frame = pd.DataFrame({"x": ["a", "b"] * 50, "y": np.arange(100) % 10})
    res = run(_csv_cfg(_csv(tmp_path, frame), SCHEMA))
    assert set(res.synthetic["x"]) <= {"a", "b"}
    assert res.synthetic["y"].between(0, 10).all()


def test_csv_value_outside_domain(tmp_path):
    frame = pd.DataFrame({"x": ["a", "c"], "y": [1, 2]})
    with pytest.raises(DomainError, match=r"column 'x' has value\(s\) \['c'\] outside its declared categories"):
        run(_csv_cfg(_csv(tmp_path, frame), SCHEMA))
    frame = pd.DataFrame({"x": ["a", "b"], "y": [1, 20]})
    with pytest.raises(DomainError, match=r"outside its public range \[0.0, 10.0\]"):
        run(_csv_cfg(_csv(tmp_path, frame), SCHEMA))


def test_csv_missing_values(tmp_path):
    frame = pd.DataFrame({"x": ["a", None, "b"], "y": [1, 2, 3]})
    with pytest.raises(DataError, match="column 'x' has 1 missing value"):
        run(_csv_cfg(_csv(tmp_path, frame), SCHEMA))
    schema = {**SCHEMA, "x": {**SCHEMA["x"], "missing": "category"}}
    res = run(_csv_cfg(_csv(tmp_path, frame), schema))
    assert res.real_codes.domain.size("x") == 3  # a, b, <missing>


def test_csv_empty_table(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("x,y\n")
    with pytest.raises(DataError, match="no rows"):
        run(_csv_cfg(str(path), SCHEMA))


def test_plan_over_budget_is_refused_with_per_stage_split(tmp_path):
    frame = pd.DataFrame({"x": ["a", "b"] * 50, "y": np.arange(100) % 10})
    schema = {**SCHEMA, "y": {"kind": "numeric", "bounds": [0, 10], "bins": 4, "binning": "quantile",
                              "quantile_epsilon": 2.0}}
    with pytest.raises(BudgetError) as e:
        make_plan(_csv_cfg(_csv(tmp_path, frame), schema))
    msg = str(e.value)
    assert "preprocessing" in msg and "budget" in msg


def test_dp_quantile_binning_is_charged_in_the_ledger(tmp_path):
    frame = pd.DataFrame({"x": ["a", "b"] * 500, "y": np.arange(1000) % 10})
    schema = {**SCHEMA, "y": {"kind": "numeric", "bounds": [0, 10], "bins": 4, "binning": "quantile",
                              "quantile_epsilon": 0.2}}
    res = run(_csv_cfg(_csv(tmp_path, frame), schema))
    stages = res.report["privacy"]["per_stage_epsilon"]
    assert stages["preprocessing"] == pytest.approx(0.2, rel=1e-3)  # at δ > 0 the RDP route may be a hair lower
    assert res.ledger.spent_epsilon() <= 1.0 + 1e-9


def test_inferred_schema_is_flagged_as_not_dp(tmp_path):
    frame = pd.DataFrame({"x": ["a", "b"] * 50, "y": np.arange(100) % 10})
    path = _csv(tmp_path, frame)
    res = run(cfg(dataset={"name": "csv", "params": {"path": path}},
                  evaluators=[{"use": "tvd", "params": {"ways": [2]}}]))
    assert res.report["dataset"]["schema_inferred_from_data"] is True
    assert "NOT covered" in res.report["dataset"]["schema_note"]


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("seed = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_benchmark_dataset_without_folder_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("VERTISYNTH_DATA", raising=False)
    with pytest.raises(DataError, match="VERTISYNTH_DATA"):
        make_plan(cfg(dataset={"name": "nltcs"}))
    with pytest.raises(DataError, match="does not exist"):
        make_plan(cfg(dataset={"name": "nltcs", "params": {"data_dir": "/no/such/folder"}}))


@pytest.mark.shared_data
def test_nltcs_and_adult_run_from_the_data_folder(data_dir):
    for name, n in [("nltcs", 21574), ("adult", 45222)]:
        res = run(cfg(dataset={"name": name, "params": {"data_dir": str(data_dir)}}))
        assert res.real_codes.n == n
        assert len(res.report["parties"]) == 2
