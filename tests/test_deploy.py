"""VertiMRF across processes: parties and the server exchange only files; the result equals the simulation."""
import subprocess
import sys

import pandas as pd

from vertisynth.core.config import load_config
from vertisynth.core.pipeline import run

CONFIG = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 2000 }
[synthesizer]
use = "vertimrf"
params = { encoder_params = { t = 200 }, local_params = { iters = 30, refine_iters = 10 }, iters = 40, rounds = 1 }
[[evaluators]]
use = "tvd"
params = { ways = [2], marginals = 10 }
"""


def cli(*args, cwd):
    res = subprocess.run([sys.executable, "-m", "vertisynth.core.cli", *args], capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return res


def test_parties_and_server_as_separate_processes_equal_the_simulation(tmp_path):
    (tmp_path / "job.toml").write_text(CONFIG)
    for party in ("registry", "employer"):
        cli("party", "job.toml", "--party", party, "--secret-seed", "11", "--out", "msgs", cwd=tmp_path)
    cli("server", "job.toml", "--messages", "msgs", "--out", "out", cwd=tmp_path)
    deployed = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    simulated = run(load_config(tmp_path / "job.toml")).synthetic
    simulated.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(deployed, pd.read_csv(tmp_path / "sim.csv"))
    # the server's inputs are message files only: no raw column of any party is among them
    assert all(p.suffix in (".npz", ".json") for p in (tmp_path / "msgs").iterdir())


def test_server_refuses_missing_parties(tmp_path):
    (tmp_path / "job.toml").write_text(CONFIG)
    cli("party", "job.toml", "--party", "registry", "--secret-seed", "1", "--out", "msgs", cwd=tmp_path)
    res = subprocess.run([sys.executable, "-m", "vertisynth.core.cli", "server", "job.toml", "--messages", "msgs",
                          "--out", "out"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2 and "no messages from parties ['employer']" in res.stderr
