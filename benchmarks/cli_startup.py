"""CLI start-up cost: CPU seconds (user + sys of the child process) of `vertisynth --help` and of each command's
`--help`, against the interpreter's own start (`python -c pass`) measured in the same run (the anchor).

CPU seconds, not wall time, so that a machine shared with other work still gives comparable numbers; medians of
`--reps` runs, the commands interleaved so that a burst of load hits them alike:
  PYTHONPATH=$PWD python benchmarks/cli_startup.py [--reps 5]
The target is `vertisynth --help` <= 0.3 CPU s; `import vertisynth.run.pipeline` (numpy, pandas and the engine)
is printed for scale. The code runs from a copy compiled to bytecode first, as an installed package is (with
PYTHONDONTWRITEBYTECODE set, a source tree is recompiled by every run).
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "python -c pass (anchor)": ["-c", "pass"],
    "vertisynth --help": ["-m", "vertisynth", "--help"],
    "vertisynth run --help": ["-m", "vertisynth", "run", "--help"],
    "vertisynth party synth --help": ["-m", "vertisynth", "party", "synth", "--help"],
    "vertisynth collab --help": ["-m", "vertisynth", "collab", "--help"],
    "vertisynth study --help": ["-m", "vertisynth", "study", "--help"],
    "import the engine (scale)": ["-c", "import vertisynth.run.pipeline"],
}


def cpu_seconds(args: list[str], tree: Path = REPO) -> float:
    """user + sys CPU seconds of one `python ARGS` child."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL, env=env, cwd=tree, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="runs of each command (medians are printed)")
    args = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        shutil.copytree(REPO / "vertisynth", tree / "vertisynth", ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "vertisynth")], check=True,
                       stdout=subprocess.DEVNULL)
        for _ in range(args.reps):
            for name, argv in CASES.items():
                times[name].append(cpu_seconds(argv, tree))
    anchor = statistics.median(times["python -c pass (anchor)"])
    print(f"CPU seconds (user + sys), medians of {args.reps} runs; {sys.version.split()[0]}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:32s} {m:6.3f} s   {m / anchor:5.1f}x the anchor   +{m - anchor:6.3f} s over it")


if __name__ == "__main__":
    main()
