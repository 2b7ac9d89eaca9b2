"""`vertisynth --help` and `vertisynth CMD --help` start without the heavy libraries: the command tree (cli/main.py
and the parts' groups, loaded through the registry) imports numpy, pandas and the engine only in command bodies.
Checked on the imports themselves (`python -X importtime`), not on a timing, so it cannot flake on a loaded machine;
benchmarks/cli_startup.py measures the CPU seconds."""
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from vertisynth.cli import main
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.registry import Registry
from vertisynth.core.specs import CommandSpec

REPO = Path(__file__).resolve().parents[2]
main_module = importlib.import_module("vertisynth.cli.main")   # the module (`vertisynth.cli.main` names the group)
HEAVY = {"pandas", "numpy", "pyarrow", "networkx", "scipy", "sklearn", "matplotlib"}


def imported_packages(*args: str) -> set[str]:
    """Top-level packages a `python -X importtime -m vertisynth ARGS` run imports (it must succeed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "vertisynth", *args], capture_output=True,
                         text=True, timeout=120, env=env, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Usage:" in res.stdout
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in res.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["validate", "--help"], ["party", "synth", "--help"],
                                  ["server", "--help"], ["collab", "custodian", "--help"], ["study", "--help"],
                                  ["flower", "--help"]], ids=" ".join)
def test_help_imports_no_heavy_library(args):
    found = imported_packages(*args)
    assert "click" in found   # the parse worked: importtime's lines were read
    assert not found & HEAVY, f"`vertisynth {' '.join(args)}` imports {sorted(found & HEAVY)}"


@pytest.fixture
def fresh_root(monkeypatch):
    """The root group as a new process has it: no part command loaded yet, with this registry."""
    reg = Registry.load()
    monkeypatch.setattr(main_module, "default_registry", lambda: reg)
    monkeypatch.setattr(main, "commands", {k: v for k, v in main.commands.items() if k not in reg.names("command")})
    return reg


def test_root_help_lists_the_parts_commands_by_summary_without_loading_them(monkeypatch, fresh_root):
    loaded = []
    original = CommandSpec.load_factory
    monkeypatch.setattr(CommandSpec, "load_factory", lambda self: loaded.append(self.name) or original(self))
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0 and not loaded
    for name in ["party", "server", "collab", "study", "flower", "run", "sample"]:
        assert f"  {name} " in res.output
    assert "One party's side of a cross-machine run" in res.output
    res = CliRunner().invoke(main, ["party", "--help"])   # named: loaded, its own help
    assert res.exit_code == 0 and loaded == ["party"] and "hello" in res.output


class _BrokenCommandPlugin:
    @staticmethod
    @hookimpl
    def vertisynth_commands():
        return [CommandSpec("broken", "no_such_module_for_vertisynth:cmd", summary="a command that cannot load")]


def test_a_broken_plugin_command_is_listed_and_warns_when_named(fresh_root):
    fresh_root.add_plugin(_BrokenCommandPlugin, "broken", "broken-dist")
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0 and "A command that cannot load" in res.output
    res = CliRunner().invoke(main, ["broken"])
    assert res.exit_code == 2 and "warning: command 'broken' skipped" in res.output
    assert CliRunner().invoke(main, ["plugins"]).exit_code == 0   # the rest of the CLI still works


def test_run_quiets_the_cyclic_collector_while_it_runs_and_restores_it(monkeypatch, tmp_path):
    """`vertisynth run` freezes the objects its imports made and raises the first generation's threshold while the
    job runs (the collections found nothing to free: ≈ 0.04 CPU s of the default job), and gives the collector
    back as it was afterwards (a test process running it in-process keeps collecting its garbage)."""
    import gc

    import vertisynth.run.pipeline as pipeline
    from vertisynth.cli.main import GC_GEN0_THRESHOLD

    seen = {}

    def fake_execute(plan, *a, **k):
        seen.update(frozen=gc.get_freeze_count(), threshold=gc.get_threshold()[0])
        raise pipeline.DataError("stop here")

    monkeypatch.setattr(pipeline, "execute", fake_execute)
    before = gc.get_threshold()
    res = CliRunner().invoke(main, ["run", "-q", "-o", str(tmp_path / "out")])
    assert "stop here" in res.output
    assert seen["frozen"] > 1000 and seen["threshold"] >= GC_GEN0_THRESHOLD
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
