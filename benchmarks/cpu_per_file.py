"""CPU seconds of test files, each in a pytest process of its own, conftest-free.

    PYTHONPATH=. python benchmarks/cpu_per_file.py [--repeat 1] [--pytest-args "-m slow"] FILE_OR_NODE [...]
    PYTHONPATH=. python benchmarks/cpu_per_file.py --against /tmp/main-clone FILE [...]   # the same file there, interleaved

Each target runs as `python -m pytest -q -p no:cacheprovider -p no:xdist TARGET` with the current environment; the
CPU is that process's and its reaped children's (user + sys, `resource.getrusage(RUSAGE_CHILDREN)` before and
after), so collection, imports and every subprocess a test starts and reaps count, and no plugin of the suite has to
be trusted to measure itself. With --against, every target runs in both trees (PYTHONPATH and cwd switched to
each), one after the other per repeat: pairs at the same load, which is what a shared machine can compare.
"""
from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path


def _run(tree: Path, target: str, extra: list[str]) -> tuple[float, float, int]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *extra,
                         target], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        timeout=3600).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, time.monotonic() - t0, rc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="+")
    ap.add_argument("--against", type=Path, help="a second tree (e.g. a clone of main) to run each target in too")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments, one shell-quoted string")
    args = ap.parse_args()
    here = Path.cwd()
    trees = [here] + ([args.against.resolve()] if args.against else [])
    extra = shlex.split(args.pytest_args)
    print(f"{'target':70s} " + " ".join(f"{'CPU s ' + t.name:>16s}" for t in trees) + "   (wall s; exit)")
    for target in args.targets:
        for _ in range(args.repeat):
            cells = [_run(t, target, extra) for t in trees]
            print(f"{target:70s} " + " ".join(f"{c:16.2f}" for c, _, _ in cells)
                  + "   (" + ", ".join(f"{w:.0f}; {rc}" for _, w, rc in cells) + ")", flush=True)


if __name__ == "__main__":
    main()
