"""The example third-party plugin runs the conformance kit in its own test suite (as an author would)."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "vertisynth-example"


def test_example_plugin_suite_passes_with_the_kit():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(EXAMPLE / "src")])}
    env.pop("VERTISYNTH_AUDIT", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rx", str(EXAMPLE / "tests")],
                         cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 xfailed" in run.stdout  # the known oneway_tvd domain check, declared as a strict xfail
