"""Study-runner overhead: run_study over a small grid vs calling pipeline.run on the same cells in a loop.

Prints medians of `--reps` runs and ratios against the direct loop measured in the same run (the anchor):
  PYTHONPATH=$PWD python benchmarks/study_overhead.py [--reps 3] [--n 3000] [--synth privmrf --repeats 1]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run
from vertisynth.study import expand_grid, run_study


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--synth", default="independent", help="synthesizer of every cell (privmrf: heavier cells)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    study = {"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5},
             "dataset": {"name": "census", "params": {"n": args.n}}, "synthesizer": {"use": args.synth},
             "evaluators": [{"use": "tvd", "params": {"ways": [2, 3], "marginals": 20}}],
             "study": {"grid": {"budget.epsilon": [0.25, 0.5, 1.0, 2.0]}, "repeats": args.repeats}}
    cells = expand_grid(study)
    times: dict[str, list[float]] = {"direct loop": [], "run_study -j1": [], "run_study -j2": [],
                                     "run_study cached": []}
    for _ in range(args.reps):
        t = time.perf_counter()
        for c in cells:
            run(parse_config(c.config))
        times["direct loop"].append(time.perf_counter() - t)
        for jobs in (1, 2):
            with tempfile.TemporaryDirectory() as out:
                t = time.perf_counter()
                run_study(study, out, n_jobs=jobs, progress=False)
                times[f"run_study -j{jobs}"].append(time.perf_counter() - t)
                if jobs == 2:
                    t = time.perf_counter()
                    run_study(study, out, n_jobs=jobs, progress=False)
                    times["run_study cached"].append(time.perf_counter() - t)
    anchor = statistics.median(times["direct loop"])
    print(f"{len(cells)} {args.synth} cells (census n={args.n}), medians of {args.reps} runs")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:18s} {m:7.2f} s   ratio to direct loop {m / anchor:5.2f}")


if __name__ == "__main__":
    main()
