"""Progress where people wait: inner steps reach the bar, the first frame has a label, -q silences all."""
import os
from pathlib import Path

from deploy_helpers import cli

from vertisynth.core.progress import reporting, step
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run

REPO = Path(__file__).resolve().parents[2]
CONFIG = """seed = 1
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 1500 }
[synthesizer]
use = "vertimrf"
params = { encoder = "dpfm", encoder_params = { t = 200 }, iters = 50 }
[[evaluators]]
use = "tvd"
params = { ways = [2], marginals = 5 }
"""


def test_without_a_reporter_steps_cost_nothing_and_with_one_they_arrive():
    step("anything", 1, 2)   # no reporter: a no-op
    seen = []
    with reporting(lambda label, done, total: seen.append((label, done, total))):
        step("x", 1, 3)
    with reporting(None):
        step("silenced", 1, 1)
    assert seen == [("x", 1, 3)]


def test_a_run_reports_mirror_descent_and_dpfm_repetitions():
    seen = set()
    with reporting(lambda label, done, total: seen.add(label)):
        run(parse_config(__import__("tomllib").loads(CONFIG)))
    assert {"mirror descent", "DPFM repetitions"} <= seen


def _cli(args, cwd):
    return cli(*args, cwd=cwd, ok=False, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)


def test_cli_bar_has_a_label_from_its_first_frame_and_quiet_silences_it(tmp_path):
    (tmp_path / "job.toml").write_text(CONFIG)
    res = _cli(["run", "job.toml", "-o", "out"], tmp_path)
    assert res.returncode == 0, res.stderr
    frames = [f for f in res.stderr.replace("\r", "\n").split("\n") if "[" in f and "]" in f]
    assert frames and frames[0].startswith("load data")            # the first frame names the work
    assert "mirror descent" in res.stderr                          # inner progress shows
    # stderr is a pipe here, not a terminal: plain lines, not carriage-return frames that fill a log
    assert "\r" not in res.stderr and res.stderr.count("\n") < 40
    quiet = _cli(["run", "job.toml", "-o", "out2", "-q"], tmp_path)
    assert quiet.returncode == 0 and "load data" not in quiet.stderr and "mirror descent" not in quiet.stderr


def test_plain_progress_prints_a_line_per_stage_and_few_inner_lines(capsys):
    from vertisynth.run.console import progress_bar

    with progress_bar("load data", total=3) as bar:   # capsys: stderr is not a terminal
        bar.set_description("load data")
        bar.update(1)
        bar.set_description("fit")
        for i in range(1, 501):
            step("mirror descent", i, 500)
        bar.update(1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("load data [0/3, ") and lines[1].startswith("fit [1/3, ")
    inner = [line for line in lines if "mirror descent" in line]
    assert inner[0].endswith("mirror descent 1/500") and inner[-1].endswith("mirror descent 500/500")
    assert len(inner) <= 3 and lines[-1].endswith(" done")
