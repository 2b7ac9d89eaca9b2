"""Progress where people wait: inner steps reach the bar, the first frame has a label, -q silences all."""
import os
import subprocess
import sys
from pathlib import Path

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
    return subprocess.run([sys.executable, "-m", "vertisynth.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)


def test_cli_bar_has_a_label_from_its_first_frame_and_quiet_silences_it(tmp_path):
    (tmp_path / "job.toml").write_text(CONFIG)
    res = _cli(["run", "job.toml", "-o", "out"], tmp_path)
    assert res.returncode == 0, res.stderr
    frames = [f for f in res.stderr.replace("\r", "\n").split("\n") if "[" in f and "]" in f]
    assert frames and frames[0].startswith("load data")            # the first frame names the work
    assert "mirror descent" in res.stderr                          # inner progress shows
    quiet = _cli(["run", "job.toml", "-o", "out2", "-q"], tmp_path)
    assert quiet.returncode == 0 and "load data" not in quiet.stderr and "mirror descent" not in quiet.stderr
