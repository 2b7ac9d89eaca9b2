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


def test_one_default_synthesizer_and_a_baseline_is_named(tmp_path):
    """Item 14: a config without [synthesizer] ran the `independent` baseline with no word."""
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import run

    base = {"budget": {"epsilon": 1.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 1500}},
            "evaluators": []}
    assert parse_config(base).synthesizer.use == "vertimrf"
    import inspect
    import vertisynth
    assert inspect.signature(vertisynth.synthesize).parameters["synthesizer"].default == "vertimrf"
    res = run(parse_config({**base, "synthesizer": {"use": "independent"}}), tmp_path)
    assert res.report["synthesizer"]["mode"].startswith("baseline")
    assert "baseline" in (tmp_path / "summary.md").read_text().split("## Privacy")[0]


_TINY = """seed = 0
budget = { epsilon = 1.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = %d }
[synthesizer]
use = "independent"
[[evaluators]]
use = "tvd"
params = { ways = [2] }
"""


def test_a_run_never_overwrites_a_file_it_did_not_write(tmp_path):
    """Item 7: a first run into a folder holding the user's own summary.md overwrote it."""
    (tmp_path / "c.toml").write_text(_TINY % 800)
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").write_text("my own notes\n")
    res = CliRunner().invoke(main, ["run", str(tmp_path / "c.toml"), "-o", str(out), "-q"])
    assert res.exit_code != 0 and "summary.md" in res.output and "--force" in res.output
    assert (out / "summary.md").read_text() == "my own notes\n" and not (out / "synthetic.csv").exists()
    again = CliRunner().invoke(main, ["run", str(tmp_path / "c.toml"), "-o", str(out), "-q", "--force"])
    assert again.exit_code == 0, again.output
    assert (out / "summary.md").read_text() != "my own notes\n"
    # a second run over the first one's files is no overwrite of a foreign file
    third = CliRunner().invoke(main, ["run", str(tmp_path / "c.toml"), "-o", str(out), "-q"])
    assert third.exit_code == 0, third.output


def test_a_second_run_into_a_locked_folder_refuses_naming_the_first(tmp_path):
    """Item 6: the lock names its holder; a stale lock (its process gone) is taken over."""
    import json
    import os
    import socket
    from vertisynth.core.errors import ConfigError
    from vertisynth.core.outfiles import LOCK_FILE, FolderLock

    with FolderLock(tmp_path):
        with pytest.raises(ConfigError, match=f"pid {os.getpid()} on {socket.gethostname()}, started"):
            with FolderLock(tmp_path):
                pass
    assert not (tmp_path / LOCK_FILE).exists()
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname(), "start": "x"}))
    with FolderLock(tmp_path):
        pass


def _spawn(args, cwd):
    import os
    import subprocess
    import sys
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(__import__("pathlib").Path(__file__).parents[2]),
                                                                   os.environ.get("PYTHONPATH", "")] if p)}
    return subprocess.Popen([sys.executable, "-c", "from vertisynth.cli.main import main; main()", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_real_processes_into_one_folder(tmp_path):
    """Item 6: two runs into one folder both exited 0 and left a malformed synthetic.csv and a model.npz that did
    not load. Now one of them refuses (naming the other) or they run one after the other; the files are whole."""
    import os
    import socket
    from vertisynth.core.outfiles import FolderLock
    (tmp_path / "c.toml").write_text(_TINY % 30000)
    with FolderLock(tmp_path / "out"):   # a run in progress (this process): a real second run refuses, naming it
        held = _spawn(["run", "c.toml", "-o", "out", "-q"], tmp_path)
        out = held.communicate(timeout=240)[0]
    assert held.returncode == 2 and "Traceback" not in out, out
    assert f"in use by another vertisynth run (pid {os.getpid()} on {socket.gethostname()}, started " in out, out
    assert not (tmp_path / "out" / "synthetic.csv").exists()
    # two at once: one refuses naming the other, or (a fast machine) they ran one after the other; files whole
    procs = [_spawn(["run", "c.toml", "-o", "out", "-q", "--seed", str(s)], tmp_path) for s in (1, 2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    codes = [p.returncode for p in procs]
    assert 0 in codes and set(codes) <= {0, 2} and "Traceback" not in "".join(outs), outs
    if 2 in codes:
        assert "in use by another vertisynth run (pid" in outs[codes.index(2)], outs
    import json
    table = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert len(table) == report["synthetic_records"] > 20000 and list(table.columns) == report["dataset"]["attributes"]
    from vertisynth.run.model import FittedModel
    FittedModel.load(tmp_path / "out" / "model.npz")
    assert not [p.name for p in (tmp_path / "out").iterdir() if ".part" in p.name or p.name.endswith(".lock")]


def test_two_samplers_into_one_file(tmp_path):
    """Item 6: two `vertisynth sample -o same.csv` left a short file and a traceback."""
    (tmp_path / "c.toml").write_text(_TINY % 800)
    assert CliRunner().invoke(main, ["run", str(tmp_path / "c.toml"), "-o", str(tmp_path / "m"), "-q"]).exit_code == 0
    n = 300_000
    procs = [_spawn(["sample", "m/model.npz", "-n", str(n), "-o", "same.csv", "--block-rows", "20000"], tmp_path)
             for _ in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and "Traceback" not in "".join(outs), outs
    assert len(pd.read_csv(tmp_path / "same.csv")) == n


def test_private_outputs_are_0600(tmp_path):
    """Item 9: aligned tables with raw rows and IDs were written 0644."""
    import os
    from vertisynth.core.outfiles import write_csv
    old = os.umask(0o022)
    try:
        write_csv(tmp_path / "p_aligned.csv", pd.DataFrame({"id": ["a"], "x": [1]}), private=True)
        write_csv(tmp_path / "public.csv", pd.DataFrame({"x": [1]}))
    finally:
        os.umask(old)
    assert (tmp_path / "p_aligned.csv").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "public.csv").stat().st_mode & 0o777 == 0o644
