"""VertiMRF's server-fit settings judged on the zoo, NLTCS and Adult: 3-way TVD, fit CPU and OptMRF's steps per run.

    PYTHONPATH=$PWD python benchmarks/vertimrf_fit_grid.py --name before \\
        --params '{"fit_accelerate": false, "fit_tolerance": 0.003}' --seeds 2,3 --eps 0.4,1.6 >> before.jsonl
    PYTHONPATH=$PWD python benchmarks/vertimrf_fit_grid.py --name after --params '{}' --seeds 2,3 >> after.jsonl
    python benchmarks/vertimrf_fit_grid.py --compare before.jsonl after.jsonl

Every (dataset, ε, seed) is one fresh process (`--jobs` at a time) running VertiMRF with its defaults plus
`--params`, through the pipeline with the `tvd` evaluator (100 random 3-way marginals). Printed per run (JSON lines):
CPU seconds of the synthesizer's fit (`time.process_time`, in that process), the 3-way TVD, and per server fit the
accepted steps and final loss. `--compare A B` prints the means per (dataset, ε) side by side and the per-seed
differences. Datasets: adult, nltcs ($VERTISYNTH_DATA), zoo:<preset> (default: every preset but wide).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

DATASETS = ("adult,nltcs,zoo:small-domains,zoo:large-domains,zoo:strong,zoo:weak,zoo:mixed,zoo:small-split,"
            "zoo:many-parties")


def one(ds: str, eps: float, seed: int, params: dict) -> dict:
    import vertisynth.plugins.synthesizers.vertimrf.synthesizer as vsyn
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import execute, make_plan

    fits = []
    real = vsyn.estimate

    def recorded(*a, **k):
        r = real(*a, **k)
        fits.append([len(r.losses) - 1, round(r.losses[-1], 3)])
        return r
    vsyn.estimate = recorded
    data = ({"name": "zoo", "params": {"preset": ds[4:], "seed": seed}} if ds.startswith("zoo:")
            else {"name": ds, "params": {"data_dir": os.environ.get("VERTISYNTH_DATA", "data")}})
    cfg = parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": 1e-5}, "dataset": data,
                        "synthesizer": {"use": "vertimrf", "params": params},
                        "evaluators": [{"use": "tvd", "params": {"ways": [3], "marginals": 100}}]})
    plan = make_plan(cfg)
    syn = plan.synthesizer.instance
    spent = [0.0]
    fit = syn.fit

    def timed(*a, **k):
        c = time.process_time()
        try:
            return fit(*a, **k)
        finally:
            spent[0] += time.process_time() - c
    syn.fit = timed
    res = execute(plan)
    return {"ds": ds, "eps": eps, "seed": seed, "fit_cpu": round(spent[0], 3),
            "tvd3": res.metrics["tvd"]["tvd_3way"], "fits": fits}


def compare(a_path: str, b_path: str) -> None:
    def load(p):
        return {(r["ds"], r["eps"], r["seed"]): r for r in map(json.loads, open(p))}
    A, B = load(a_path), load(b_path)
    by = collections.defaultdict(list)
    for k in sorted(set(A) & set(B)):
        by[k[:2]].append(k)
    print(f"| dataset | ε | {a_path}: TVD (fit CPU s; steps) | {b_path} | change | per seed |\n|---|---|---|---|---|---|")
    rel = []
    for (ds, eps), ks in sorted(by.items(), key=lambda x: (x[0][1], x[0][0])):
        def cell(X):
            return (f"{statistics.mean(X[k]['tvd3'] for k in ks):.4f} ({statistics.mean(X[k]['fit_cpu'] for k in ks):.1f}; "
                    + "/".join(str(X[k]["fits"][-1][0]) for k in ks) + ")")
        ta, tb = (statistics.mean(X[k]["tvd3"] for k in ks) for X in (A, B))
        rel += [(B[k]["tvd3"] - A[k]["tvd3"]) / A[k]["tvd3"] for k in ks]
        print(f"| {ds} | {eps} | {cell(A)} | {cell(B)} | {100 * (tb - ta) / ta:+.1f}% | "
              + ", ".join(f"{B[k]['tvd3'] - A[k]['tvd3']:+.4f}" for k in ks) + " |")
    if rel:
        print(f"paired relative change: mean {100 * statistics.mean(rel):+.2f}%, median {100 * statistics.median(rel):+.2f}%, "
              f"worse in {sum(r > 0 for r in rel)} of {len(rel)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="run")
    ap.add_argument("--params", default="{}", help="VertiMRF params (JSON) on top of its defaults")
    ap.add_argument("--datasets", default=DATASETS)
    ap.add_argument("--eps", default="0.4,1.6")
    ap.add_argument("--seeds", default="2,3")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--compare", nargs=2, default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)   # internal: dataset,eps,seed -> JSON
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return 0
    params = json.loads(args.params)
    if args.one:
        ds, eps, seed = args.one.split(",")
        print(json.dumps({**one(ds, float(eps), int(seed), params), "name": args.name}))
        return 0
    runs = [(d, e, s) for d in args.datasets.split(",") for e in args.eps.split(",") for s in args.seeds.split(",")]

    def child(r):
        cmd = [sys.executable, __file__, "--one", ",".join(r), "--params", args.params, "--name", args.name]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        return p.stdout.strip().splitlines()[-1] if p.returncode == 0 else json.dumps({"failed": r, "err": p.stderr[-500:]})
    with ThreadPoolExecutor(args.jobs) as pool:
        for line in pool.map(child, runs):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
