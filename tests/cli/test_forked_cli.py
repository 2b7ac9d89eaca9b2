"""The test helper that forks the roles from a warm interpreter (tests/forked_cli.py) answers as a cold
`python -m vertisynth.cli` does: the same stdout, stderr and exit status, in a process of its own, in the
caller's directory and environment, and a timeout that kills it."""
import os
import subprocess
import sys

import forked_cli
import pytest

CONFIG = """
seed = 1
budget = { epsilon = 1.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 300 }
"""


def test_forked_commands_answer_as_cold_starts(tmp_path):
    (tmp_path / "job.toml").write_text(CONFIG)
    for args in (["validate", "job.toml"], ["party", "hello", "job.toml"], ["validate", "absent.toml"]):
        cold = subprocess.run([sys.executable, "-m", "vertisynth.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)
        warm = forked_cli.run(args, cwd=tmp_path)
        assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr), args
    assert cold.returncode == 2 and warm.stderr   # the cases include a failure, not only successes


def test_a_forked_command_is_its_own_process_in_the_callers_folder_and_environment(tmp_path, monkeypatch):
    (tmp_path / "nltcs.toml").write_text(CONFIG.replace('"census"', '"nltcs"').replace("params = { n = 300 }", ""))
    monkeypatch.setenv("VERTISYNTH_DATA", str(tmp_path / "data-here"))   # read by the command, not by pytest
    proc = forked_cli.Forked(["validate", "nltcs.toml"], cwd=tmp_path)
    assert proc.pid != os.getpid()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and f"folder '{tmp_path / 'data-here'}' does not exist" in err, err


def test_a_forked_command_past_its_timeout_is_killed(tmp_path):
    from deploy_helpers import with_roster

    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG, ["registry", "employer"]))
    argv = ["party", "hello", "job.toml", "--party", "registry", "--out", "private_registry"]
    with pytest.raises(subprocess.TimeoutExpired):   # waits 60 s for the employer's hello, which never comes
        forked_cli.run([*argv, "--exchange", "ex", "--timeout", "60"], cwd=tmp_path, timeout=15)
    assert (tmp_path / "ex" / "hello__registry__to__all__0.env").is_file()   # it ran, and was waiting
    gave_up = forked_cli.run([*argv, "--exchange", "ex2", "--timeout", "1"], cwd=tmp_path)
    assert gave_up.returncode == 2 and "waited 1 s for every party's hello" in gave_up.stderr, gave_up.stderr


def _imported(path, names):
    import json
    from pathlib import Path

    Path(path).write_text(json.dumps({n: n in sys.modules for n in names}))


def test_the_forkserver_preloads_what_the_commands_would_import(tmp_path):
    """Each forked command starts with scipy, Dask, rbcl and the plugins already imported (forked_warm.py): Python
    3.11's forkserver imports its preload before it takes the caller's sys.path, and they were silently missing."""
    import json

    names = ["forked_warm", "scipy.stats", "sklearn", "rbcl", "distributed",
             "vertisynth.plugins.alignment.private_sets",
             "vertisynth.plugins.synthesizers.vertimrf.synthesizer"]
    forked_cli._context()
    proc = forked_cli._Process(target=_imported, args=(str(tmp_path / "modules.json"), names))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0
    assert json.loads((tmp_path / "modules.json").read_text()) == {n: True for n in names}
