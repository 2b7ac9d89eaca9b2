"""The CLI, and a third-party plugin package (examples/vertisynth-example) found through entry points."""
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from vertisynth.cli import main
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import make_plan, execute
from vertisynth.core.registry import Registry

from plugin_fixtures import install_fake_dist

EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "examples" / "vertisynth-example" / "src"


@pytest.fixture
def example_plugin(tmp_path, monkeypatch):
    """The example package put on sys.path with its own dist-info (as `pip install` would)."""
    monkeypatch.setattr(sys, "path", [str(EXAMPLE_SRC)] + list(sys.path))
    install_fake_dist(tmp_path, "vertisynth-example", {}, {"example": "vertisynth_example.plugin"})
    return tmp_path


def test_help_lists_commands():
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0
    for cmd in ["run", "plugins", "validate", "init"]:
        assert cmd in res.output


def test_run_without_arguments_writes_outputs(tmp_path):
    res = CliRunner().invoke(main, ["run", "--quiet", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "tvd.tvd_3way" in res.output
    # every TVD beside its reference points, so that the number means something; one default of ways everywhere
    import re
    scores = re.findall(r"tvd\.tvd_(\d)way = [0-9.]+ \(independent columns [0-9.]+; real holdout vs training rows "
                        r"[0-9.]+\)", res.output)
    assert scores == ["2", "3", "4"], res.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["privacy"]["within_budget"]


def test_init_validate_and_run_a_config(tmp_path):
    runner = CliRunner()
    path = tmp_path / "job.toml"
    assert runner.invoke(main, ["init", str(path)]).exit_code == 0
    assert runner.invoke(main, ["init", str(path)]).exit_code == 2  # never overwrites
    res = runner.invoke(main, ["validate", str(path)])
    assert res.exit_code == 0 and "synthesizer" in res.output
    res = runner.invoke(main, ["run", str(path), "-q", "-o", str(tmp_path / "o"), "--seed", "5"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "report.json").read_text())["seed"] == 5


def test_cli_errors_are_one_clear_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('budget = { epsilon = 1.0 }\n[synthesizer]\nuse = "nope"\n')
    res = CliRunner().invoke(main, ["run", str(path), "-q", "-o", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "error: unknown synthesizer 'nope'" in res.output
    assert "Traceback" not in res.output


def test_plugins_command_lists_builtins():
    res = CliRunner().invoke(main, ["plugins"])
    assert res.exit_code == 0
    assert "vertisynth 0.1.0" in res.output and "independent" in res.output and "tvd" in res.output


def test_example_plugin_is_listed_and_runs_in_a_pipeline(example_plugin):
    reg = Registry.load(strict=True)
    assert "example_uniform" in reg.names("synthesizer") and "oneway_tvd" in reg.names("evaluator")
    assert reg.provider("synthesizer", "example_uniform") == "vertisynth-example"
    res = CliRunner().invoke(main, ["plugins"])
    assert "vertisynth-example" in res.output and "example_uniform" in res.output
    cfg = parse_config({
        "seed": 1, "budget": {"epsilon": 0.5},
        "dataset": {"name": "census", "params": {"n": 2000}},
        "synthesizer": {"use": "example_uniform", "params": {"min_records": 10}},
        "evaluators": [{"use": "oneway_tvd"}, {"use": "tvd", "params": {"ways": [2]}}],
    })
    result = execute(make_plan(cfg, registry=reg))
    assert 0 < result.metrics["oneway_tvd"]["tvd_1way"] < 1
    assert abs(result.synthetic_codes.n - 2000) < 100  # Laplace(1/0.5) noise on the count
    assert result.ledger.spent_epsilon() == pytest.approx(0.5)
    assert any(p["distribution"] == "vertisynth-example" for p in result.report["plugins"])


def test_example_plugin_config_errors(example_plugin):
    cfg = parse_config({"budget": {"epsilon": 0.5}, "synthesizer": {"use": "example_uniform",
                                                                    "params": {"min_record": 10}}})
    with pytest.raises(Exception, match="unknown key 'min_record'.*did you mean 'min_records'"):
        make_plan(cfg, registry=Registry.load())


def test_params_for_a_component_without_config_class_are_refused(example_plugin):
    from vertisynth.core.errors import ConfigError

    cfg = parse_config({"budget": {"epsilon": 0.5}, "synthesizer": {"use": "example_uniform"},
                        "evaluators": [{"use": "oneway_tvd", "params": {"x": 1}}]})
    with pytest.raises(ConfigError, match="takes no params"):
        make_plan(cfg, registry=Registry.load())
