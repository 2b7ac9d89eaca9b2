"""What the default job (`vertisynth run`, no arguments) imports: only what it uses (issue 33, docs/speed.md).

Checked in a fresh interpreter (a module list, not a timing, so it cannot flake) on the default config with fewer
rows: the same code path (VertiMRF with DP FM sketches, the parties' PrivMRF fits with binned measurements,
TVD and ML utility, every output file)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# scipy: ≈ 0.25 CPU s to import scipy.sparse, which the fits (pgm's calibrator and binned queries) and ml_utility's
# one-hot products used; bincounts and gathers now sum in the same order. pandas (which imports pyarrow itself,
# ≈ 0.4 CPU s): the census codes go to the pipeline as codes and synthetic.csv is written from numpy columns
NOT_IMPORTED = ("scipy", "sklearn", "matplotlib", "networkx", "pandas", "pyarrow")


def test_default_job_imports_no_scipy_and_no_pandas(tmp_path):
    code = (
        "import sys, tomllib\n"
        "import vertisynth.pgm.estimation as est\n"
        "binned = []\n"
        "fit = est._estimate\n"
        "est._estimate = lambda dom, meas, *a: binned.extend(m for m in meas if m.bins) or fit(dom, meas, *a)\n"
        "from vertisynth.run.config import DEFAULT_CONFIG_TOML, parse_config\n"
        "from vertisynth.run.pipeline import run\n"
        "cfg = tomllib.loads(DEFAULT_CONFIG_TOML)\n"
        "cfg['dataset']['params']['n'] = 3000\n"
        "run(parse_config(cfg), sys.argv[1])\n"
        "print(len(binned))\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({NOT_IMPORTED!r})))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                         env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    *_, n_binned, imported = res.stdout.strip().splitlines()
    assert int(n_binned) > 0   # the binned-query path ran (without scipy.sparse)
    assert imported == "[]"
    assert (tmp_path / "report.html").exists() and (tmp_path / "synthetic.csv").exists()
