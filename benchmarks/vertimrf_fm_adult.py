"""VertiMRF-FM on Adult: today's code against this tree, speed and quality measured in one run.

    PYTHONPATH=$PWD python benchmarks/vertimrf_fm_adult.py [--rounds 3] [--eps 1.6] [--seeds 0]
                                                          [--datasets adult,nltcs,zoo:small-domains]
                                                          [--marginals 100] [--paths today,sparse]
                                                          [--base COMMIT | --old-tree DIR]

Every (round, dataset, seed, path) is one fresh process running VertiMRF with its defaults (DPFM t = 32,000).
Paths: "today" is the code before the sparse kernel (commit --base, exported with `git archive` into a temporary folder,
or --old-tree DIR): the dense DPFM kernel (every raw maximum: group minima over all rows × repetitions) and the
per-repetition inclusion-exclusion estimator; "sparse" / "dense" are this tree with the encoder's `kernel` set
("sparse", the default: only hash values >= the sketches' floor b, see dpfm.sketch_maxima; both with the pair
estimator from the sketch values' joint histogram). The first path is the anchor of the ratio.
Rounds alternate the paths so that they see the same load. Printed per dataset and path: CPU seconds of fit +
sample (process and children, getrusage) per round and their median, µs per row, the DPFM encoding's CPU
(LocEnc, the chunk jobs), the server step's CPU, the `tvd` evaluator's 3-way TVD (`--marginals` random 3-way
marginals, mean over seeds) and the ratio of the medians against the anchor. The sparse and dense kernels publish
the same sketches bit for bit, and the estimators agree up to rounding, so the TVDs should agree on every seed.
"plain" / "accel" / "auto" are this tree with the server fits' momentum off / on / "auto" (`fit_accelerate`), e.g.
`--paths plain,accel --eps 0.4 --seeds 0,1 --datasets adult,nltcs`; "defaults" this tree's defaults and "before" the
server fits as they were before "auto" (plain descent, `fit_tolerance` 3e-3): `--paths before,defaults`.
Datasets: adult, nltcs (from $VERTISYNTH_DATA), zoo:<preset> (built-in generator, its default size).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BASE = "5a1a74c"   # main before the sparse kernel (dense kernel, per-repetition estimator)
DATA = os.environ.get("VERTISYNTH_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data"))


# paths that vary the server fits instead of the kernel: mirror descent without / with momentum (issue 33)
PATH_PARAMS = {"plain": {"fit_accelerate": False}, "accel": {"fit_accelerate": True}, "auto": {"fit_accelerate": "auto"},
               "defaults": {},
               # the server fits' defaults before the second pass of issue 33: plain descent, atol 3e-3 per cell
               "before": {"fit_accelerate": False, "fit_tolerance": 3e-3}}


def total_cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def one(dataset: str, eps: float, seed: int, kernel: str, marginals: int) -> dict:
    """One VertiMRF run through the pipeline (alignment, evaluation as in `vertisynth run`): CPU of fit + sample,
    of the encoding and of the server step, and the `tvd` evaluator's 3-way TVD."""
    from vertisynth.plugins.encoders.chunked import ChunkJob
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import execute, make_plan

    if dataset.startswith("zoo:"):
        ds = {"name": "zoo", "params": {"preset": dataset[4:], "seed": seed}}
    else:
        ds = {"name": dataset, "params": {"data_dir": DATA}}
    cfg = parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": 1e-5}, "dataset": ds,
                        "synthesizer": {"use": "vertimrf",
                                        "params": PATH_PARAMS.get(kernel, {} if kernel == "today"
                                                                  else {"encoder_params": {"kernel": kernel}})},
                        "evaluators": [{"use": "tvd", "params": {"ways": [3], "marginals": marginals}}]})
    plan = make_plan(cfg)
    syn = plan.synthesizer.instance
    spent = {"cpu": 0.0, "LocEnc": 0.0, "server": 0.0, "n": 0}

    def metered(owner, name, phase, clock=time.process_time):
        fn = getattr(owner, name)

        def wrapped(*a, **k):
            if name == "fit":
                spent["n"] = next(iter(a[0].views.values())).n   # the parties' aligned rows
            c = clock()
            try:
                return fn(*a, **k)
            finally:
                spent[phase] += clock() - c
        setattr(owner, name, wrapped)

    metered(syn, "fit", "cpu", total_cpu)       # fit + sample: this process and any children (party processes)
    metered(syn, "sample", "cpu", total_cpu)
    metered(ChunkJob, "run_local", "LocEnc")
    metered(syn, "server_step", "server")
    res = execute(plan)
    return {**spent, "tvd3": float(res.metrics["tvd"]["tvd_3way"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--eps", type=float, default=1.6)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (TVD averaged over them; CPU of the first)")
    ap.add_argument("--datasets", default="adult")
    ap.add_argument("--paths", default="today,sparse",
                    help="today (the old tree) and/or DPFM kernels of this tree; the first is the anchor of the ratio")
    ap.add_argument("--base", default=BASE, help="the commit 'today' runs (exported with git archive)")
    ap.add_argument("--old-tree", default=None, help="an exported copy of the old code for 'today' instead of --base")
    ap.add_argument("--marginals", type=int, default=100)
    ap.add_argument("--timing", default="adult", help="datasets that get every round (the others: the first only)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)   # internal: dataset,seed,kernel -> JSON
    args = ap.parse_args()
    if args.one:
        ds, seed, kernel = args.one.split(",")
        print(json.dumps(one(ds, args.eps, int(seed), kernel, args.marginals)))
        return 0
    seeds = [int(s) for s in args.seeds.split(",")]
    paths = args.paths.split(",")
    here = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(here)}
    old_env = None
    if "today" in paths:
        old = args.old_tree
        if old is None:
            old = tempfile.mkdtemp(prefix="vertisynth-today-")
            archive = subprocess.run(["git", "-C", str(here), "archive", args.base], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", old], input=archive.stdout, check=True)
        old_env = {**env, "PYTHONPATH": old}
    try:
        return _rounds(args, seeds, paths, env, old_env)
    finally:
        if old_env is not None and args.old_tree is None:
            shutil.rmtree(old_env["PYTHONPATH"], ignore_errors=True)


def _rounds(args, seeds: list[int], paths: list[str], env: dict, old_env: dict | None) -> int:
    datasets = args.datasets.split(",")
    res: dict = {}
    for r in range(args.rounds):
        for ds in (datasets if r == 0 else [d for d in datasets if d in args.timing.split(",")]):
            for seed in (seeds if r == 0 else seeds[:1]):   # quality over every seed once; timing rounds on the first
                for path in (paths if r % 2 == 0 else paths[::-1]):
                    cmd = [sys.executable, __file__, "--one", f"{ds},{seed},{path}", "--eps", str(args.eps),
                           "--marginals", str(args.marginals)]
                    proc = subprocess.run(cmd, capture_output=True, text=True, env=old_env if path == "today" else env)
                    if proc.returncode:
                        print(f"{ds} seed {seed} {path}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                        return 1
                    out = json.loads(proc.stdout.strip().splitlines()[-1])
                    res.setdefault((ds, path), {}).setdefault(seed, []).append(out)
                    print(f"  round {r + 1} {ds} seed {seed} {path}: {out['cpu']:.2f} CPU s, LocEnc {out['LocEnc']:.2f}, "
                          f"server {out['server']:.2f}, TVD {out['tvd3']:.4f}", file=sys.stderr, flush=True)
    print(f"VertiMRF-FM defaults, ε = {args.eps}, seeds {seeds}, today = {args.old_tree or args.base}; CPU seconds of fit + sample (median of the runs on "
          f"seed {seeds[0]}), 3-way TVD ({args.marginals} marginals, mean over seeds)")
    print(f"| dataset | DPFM kernel | runs (CPU s) | median | µs per row | LocEnc | server | 3-way TVD | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ds in datasets:
        anchor = None
        tvds = {}
        for path in paths:
            runs = res[(ds, path)][seeds[0]]
            med = statistics.median(o["cpu"] for o in runs)
            anchor = anchor or med
            tvds[path] = [res[(ds, path)][s][0]["tvd3"] for s in seeds]
            each = " / ".join(f"{o['cpu']:.2f}" for o in runs)
            print(f"| {ds} | {path} | {each} | {med:.2f} | "
                  f"{med / runs[0]['n'] * 1e6:.1f} | {statistics.median(o['LocEnc'] for o in runs):.2f} | "
                  f"{statistics.median(o['server'] for o in runs):.2f} | {statistics.mean(tvds[path]):.4f} | "
                  f"{anchor / med:.2f}x |")
        diffs = [b - a for p in paths[1:] for a, b in zip(tvds[paths[0]], tvds[p])]
        same = sum(d == 0 for d in diffs)
        print(f"  {ds}: TVD against {paths[0]} per seed: " + ", ".join(f"{d:+.4f}" for d in diffs)
              + f" ({same} of {len(diffs)} identical)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
