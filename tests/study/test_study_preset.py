"""The benchmark preset (`vertisynth study --preset benchmark`), plugin-parameter grid keys and one run per cell."""
from __future__ import annotations

import copy
import tomllib
import warnings
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from vertisynth.cli.main import main as cli
from vertisynth.core.errors import ConfigError
from vertisynth.core.registry import default_registry
from vertisynth.study import expand_grid, run_study
from vertisynth.study.grid import apply_quick
from vertisynth.study.presets import SkippedDatasetWarning, builtin_synthesizers, load_preset

ZOO = ["small-domains", "large-domains", "wide", "strong", "weak", "mixed", "small-split", "many-parties"]
STUDIES = Path(__file__).resolve().parents[2] / "studies"


@pytest.fixture
def fake_data(tmp_path):
    """A data folder that holds nltcs/ and adult/ (the grid only checks they are there; no cell runs)."""
    for name in ("nltcs", "adult"):
        (tmp_path / "data" / name).mkdir(parents=True)
    return str(tmp_path / "data")


def test_builtin_synthesizers_are_the_packages_own():
    reg = default_registry()
    names = builtin_synthesizers()
    assert {"independent", "dpsyn", "private_pgm", "privmrf", "vertimrf"} <= set(names)
    assert all(reg.provider("synthesizer", n) == "vertisynth" for n in names)
    others = [n for n in reg.names("synthesizer") if reg.provider("synthesizer", n) != "vertisynth"]
    assert not set(others) & set(names)   # e.g. the example plugin's example_uniform stays out


def test_benchmark_preset_resolves_into_the_full_grid(fake_data):
    cells = expand_grid(load_preset("benchmark", fake_data), fake_data)
    methods = builtin_synthesizers()
    assert len(cells) == 10 * 5 * len(methods) * 3          # datasets x ε x methods x repeats
    seen = {(c.config["dataset"]["name"], (c.config["dataset"].get("params") or {}).get("preset"),
             c.config["budget"]["epsilon"], c.config["synthesizer"]["use"]) for c in cells}
    assert {(d, p) for d, p, _, _ in seen} == {("nltcs", None), ("adult", None), *(("zoo", z) for z in ZOO)}
    assert {e for _, _, e, _ in seen} == {0.2, 0.4, 0.8, 1.6, 3.2}
    assert sorted({m for *_, m in seen}) == sorted(methods)
    vert = [c for c in cells if c.config["synthesizer"]["use"] == "vertimrf"]
    assert all(c.config["synthesizer"]["params"] == {"encoder": "dpfm"} for c in vert)
    assert len({c.key for c in cells}) == len(cells)        # no cell twice
    assert {c.repeat for c in cells} == {0, 1, 2}


def test_a_synthesizer_added_to_the_package_joins_the_preset(fake_data, monkeypatch):
    import vertisynth.study.presets as presets
    monkeypatch.setattr(presets, "builtin_synthesizers", lambda: ["independent", "newcomer"])
    grid = load_preset("benchmark", fake_data)["study"]["grid"]
    assert grid["synthesizer"] == [{"use": "independent"}, {"use": "newcomer"}]


def test_benchmark_quick_is_small_and_nltcs_adult_are_skipped_in_one_line_without_data(monkeypatch):
    monkeypatch.delenv("VERTISYNTH_DATA", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_preset("benchmark", None)
    msgs = [str(w.message) for w in caught if issubclass(w.category, SkippedDatasetWarning)]
    assert len(msgs) == 1 and "skipping nltcs, adult" in msgs[0] and "\n" not in msgs[0]
    cells = expand_grid(apply_quick(data))
    assert {c.config["dataset"]["name"] for c in cells} == {"zoo"}
    assert len(cells) == 2 * 2 * len(builtin_synthesizers()) * 2     # zoo presets x ε x methods x repeats
    assert all(c.config["dataset"]["params"]["n"] == 2000 for c in cells)


def test_rows_override_caps_every_dataset_by_its_own_setting(fake_data):
    data = apply_quick(load_preset("benchmark", fake_data, rows=150))
    params = {(d["name"], d["params"].get("preset")): d["params"] for d in data["study"]["grid"]["dataset"]}
    assert params[("nltcs", None)]["sample"] == 150 and params[("adult", None)]["sample"] == 150
    assert params[("zoo", "mixed")]["n"] == 150
    with pytest.raises(ConfigError, match="rows must be a positive integer"):
        load_preset("benchmark", fake_data, rows=0)
    with pytest.raises(ConfigError, match="unknown preset 'nope'; choose one of: benchmark"):
        load_preset("nope")


def test_benchmark_quick_runs_every_method_on_a_tiny_grid(tmp_path, monkeypatch):
    """The --quick preset with the test-only row cap, cut to one dataset and one ε: every built-in method runs
    once, under the zoo preset's own dataset label."""
    import vertisynth.study.runner as runner

    calls = []
    real = runner.run_cell
    monkeypatch.setattr(runner, "run_cell", lambda c, *a: (calls.append(c.key), real(c, *a))[1])
    data = apply_quick(load_preset("benchmark", None, rows=100))
    data["study"]["grid"]["dataset"] = [d for d in data["study"]["grid"]["dataset"]
                                        if d["params"].get("preset") == "small-domains"]
    data["study"]["grid"]["budget.epsilon"] = [3.2]
    data["study"]["repeats"] = 1
    table = run_study(data, tmp_path, n_jobs=1, progress=False)
    assert len(calls) == len(set(calls)) == len(builtin_synthesizers())
    assert sorted(table["method"].unique()) == sorted(builtin_synthesizers())
    assert set(table["dataset"]) == {"zoo:small-domains"} and set(table["metric"]) == {"tvd_2way", "tvd_3way"}
    assert table["value"].between(0, 1).all()


@pytest.mark.slow
def test_benchmark_quick_runs_end_to_end_each_cell_once(tmp_path, monkeypatch):
    """The shipped --quick grid, with the test-only row cap, through the CLI: every cell runs once, zoo presets
    are datasets of their own, and the figures are one per dataset x metric (about 30 s)."""
    import vertisynth.study.runner as runner

    monkeypatch.delenv("VERTISYNTH_DATA", raising=False)   # nltcs/adult skipped: two zoo presets
    calls = []
    real = runner.run_cell
    monkeypatch.setattr(runner, "run_cell", lambda c, *a: (calls.append(c.key), real(c, *a))[1])
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["study", "--preset", "benchmark", "--quick", "--rows", "120", "-j", "1", "-q",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "warning: preset 'benchmark': skipping nltcs, adult" in res.output
    table = pd.read_csv(out / "results.csv")
    n_methods = len(builtin_synthesizers())
    assert len(calls) == len(set(calls)) == 2 * 2 * n_methods * 2
    assert sorted(table["dataset"].unique()) == ["zoo:mixed", "zoo:small-domains"]
    assert table.groupby(["dataset", "method", "epsilon", "repeat", "metric"]).size().eq(1).all()
    assert len(list((out / "figures").glob("*.png"))) == 2 * 2    # datasets x metrics (tvd 2- and 3-way)


def test_a_grid_point_twice_runs_once(tmp_path, monkeypatch):
    import vertisynth.study.runner as runner

    calls = []
    real = runner.run_cell
    monkeypatch.setattr(runner, "run_cell", lambda c, *a: (calls.append(c.key), real(c, *a))[1])
    data = _base(grid={"budget.epsilon": [1.0, 1.0]})
    run_study(data, tmp_path, n_jobs=1, progress=False)
    assert len(calls) == 1


def _base(**study):
    return {"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5},
            "dataset": {"name": "census", "params": {"n": 400}},
            "synthesizer": {"use": "privmrf", "params": {"iters": 20, "refine_iters": 5}},
            "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 5}}],
            "study": {"repeats": 1, **study}}


def test_an_ablation_over_plugin_params_runs_from_config_alone(tmp_path):
    data = _base(grid={"synthesizer.params.iters": [5, 40], "synthesizer.params.r_score_fraction": [0.05, 0.2],
                       "evaluators.0.params.marginals": [4]})
    table = run_study(data, tmp_path, n_jobs=1, progress=False)
    assert sorted(table["method"].unique()) == [
        "privmrf[iters=40,r_score_fraction=0.05]", "privmrf[iters=40,r_score_fraction=0.2]",
        "privmrf[iters=5,r_score_fraction=0.05]", "privmrf[iters=5,r_score_fraction=0.2]"]
    assert len(table) == 4


@pytest.mark.parametrize("grid, match", [
    ({"synthesizer.params.bogus": [1]}, r"'synthesizer.params.bogus' .*privmrf'?: unknown key 'bogus'"),
    ({"synthesizer.params.iters": ["many"]}, r"'synthesizer.params.iters' .*expected an integer"),
    ({"dataset.params.rows": [10]}, r"'dataset.params.rows' .*census'?: unknown key 'rows'"),
    ({"evaluators.0.params.wayz": [[2]]}, r"'evaluators.0.params.wayz' .*unknown key 'wayz' \(did you mean 'ways'"),
    ({"evaluators.2.params.ways": [[2]]}, r"'evaluators' is a list of 1"),
])
def test_unknown_or_bad_plugin_params_are_refused_in_one_line(grid, match):
    with pytest.raises(ConfigError, match=match) as info:
        expand_grid(_base(grid=grid))
    assert "\n" not in str(info.value)


def test_a_key_for_another_methods_params_is_refused_naming_the_cell():
    grid = {"synthesizer": [{"use": "privmrf"}, {"use": "vertimrf"}], "synthesizer.params.encoder": ["grr"]}
    with pytest.raises(ConfigError, match=r"study cell synthesizer=\{'use': 'privmrf'\}.*unknown key 'encoder'"):
        expand_grid(_base(grid=grid))


def test_the_ablation_study_file_varies_preprocessing_selection_and_synthesis():
    data = tomllib.loads((STUDIES / "ablation.toml").read_text())
    keys = set(data["study"]["grid"])
    assert {"synthesizer.params.bins", "synthesizer.params.rounds", "synthesizer.params.iters"} <= keys
    quick = expand_grid(apply_quick(copy.deepcopy(data)))
    assert len({c.key for c in quick}) == len(quick) >= 4


def test_a_whole_dataset_table_as_grid_key_does_not_leak_into_method_labels(tmp_path):
    """The preset's `dataset = [{...}, ...]` axis: the dataset label already tells the rows apart; a key that varies
    inside one dataset (here dataset.params.n) still names its grid point."""
    from vertisynth.study.outputs import write_outputs

    rows = []
    for ds, n in (("zoo:mixed", 100), ("zoo:mixed", 200), ("nltcs", 100), ("nltcs", 200)):
        table = {"name": ds.split(":")[0], "params": {"preset": ds[4:]} if ":" in ds else {}}
        rows.append({"cell": len(rows), "dataset": ds, "method": "privmrf", "epsilon": 1.0,
                     "grid:dataset": str(table), "grid:dataset.params.n": n, "evaluator": "tvd",
                     "metric": "tvd_2way", "value": 0.1})
    write_outputs(pd.DataFrame(rows), tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "| privmrf [dataset.params.n=100] | 1 |" in summary and "grid:dataset=" not in summary
    assert "[dataset=" not in summary
