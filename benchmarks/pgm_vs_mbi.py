"""vertisynth's graphical-model estimator against mbi (the reference Private-PGM), on Adult.

    python benchmarks/pgm_vs_mbi.py [--data-dir DIR] [--mbi-python /tmp/mbi-venv/bin/python]
                                    [--iters 500] [--runs 3] [--sets tree,dense]

mbi is NOT a project dependency. Install it only for this benchmark, e.g.
    python -m venv --system-site-packages /tmp/mbi-venv && /tmp/mbi-venv/bin/pip install mbi
The script runs mbi in that interpreter as a subprocess and feeds it the very same noisy measurements.

Measurement sets (noise σ = 10 per cell, fixed seed): "tree" = every 1-way marginal, the 14 pairs of a
Chow-Liu tree (mutual information on the data) and one 3-way; "dense" = "tree" plus 10 more pairs.
Both estimators run the same number of mirror-descent iterations (no early stop) with the same loss
½ Σ ‖(μ_m − y_m)/σ‖² and the same known total. Printed per implementation: first-call seconds
(vertisynth has no JIT; mbi's includes compilation), steady-state median seconds and per iteration,
median CPU seconds of a steady call (the process's, all threads: less sensitive to a shared machine's
load than wall time), final loss, TVD of the model's marginals to the true ones on the measured sets and
on 300 random 3-way marginals, and the ratios vertisynth / mbi. An iteration is one accepted step for
vertisynth (its backtracking trials included) and one step attempt for mbi (its rejected steps count).
Then, from the same runs: after how many iterations and seconds vertisynth's loss first reaches mbi's
final loss, and that time as a ratio to mbi's full first and steady calls. Last: seconds to sample
1,000,000 rows from the model.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIGMA = 10.0


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p / p.sum() - q / max(q.sum(), 1e-12)).sum())


# -- the mbi side (runs inside the mbi interpreter) ------------------------------------------------
def mbi_worker(spec_path: str, out_path: str) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    from mbi import Domain, LinearMeasurement, estimation

    with np.load(spec_path, allow_pickle=False) as z:
        spec = json.loads(bytes(z["spec"]).decode())
        arrays = {k: z[k] for k in z.files if k != "spec"}
    dom = Domain(spec["attributes"], spec["shape"])
    meas = [LinearMeasurement(arrays[f"m{i}"].ravel(), tuple(c), stddev=SIGMA) for i, c in enumerate(spec["cliques"])]
    times, cpus, model = [], [], None
    for _ in range(spec["runs"] + 1):  # first call compiles; the rest are steady state
        t0, c0 = time.perf_counter(), time.process_time()
        model = estimation.MirrorDescent().estimate(dom, meas, known_total=spec["total"], iters=spec["iters"])
        jax.block_until_ready(model.project(tuple(spec["attributes"][:1])).datavector())
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    loss = 0.0
    for i, c in enumerate(spec["cliques"]):
        mu = np.asarray(model.project(tuple(c)).datavector())
        loss += 0.5 * float((((mu - arrays[f"m{i}"].ravel()) / SIGMA) ** 2).sum())
    queries = spec["cliques"] + spec["triples"]
    out = {f"q{i}": np.asarray(model.project(tuple(q)).datavector()) for i, q in enumerate(queries)}
    np.savez(out_path, times=np.array(times), cpus=np.array(cpus), loss=np.array(loss), **out)


# -- the orchestrator -----------------------------------------------------------------------------
def chow_liu(data, attrs):
    n = data.n
    scores = []
    for a, b in itertools.combinations(attrs, 2):
        t = data.counts([a, b]).values / n
        pa, pb = t.sum(1, keepdims=True), t.sum(0, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            mi = np.nansum(t * np.log(t / (pa * pb)))
        scores.append((mi, (a, b)))
    comp = {a: a for a in attrs}

    def find(x):
        while comp[x] != x:
            x = comp[x]
        return x

    tree = []
    for mi, (a, b) in sorted(scores, reverse=True):
        if find(a) != find(b):
            comp[find(a)] = find(b)
            tree.append((a, b))
    extra = [p for _, p in sorted(scores, reverse=True) if p not in tree]
    return tree, extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--mbi-python", default="/tmp/mbi-venv/bin/python")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sets", default="tree,dense", help="comma-separated measurement sets to run (tree, dense)")
    ap.add_argument("--mbi-worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mbi_worker:
        mbi_worker(*args.mbi_worker)
        return 0

    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import make_plan
    from vertisynth.pgm import Measurement, estimate

    plan = make_plan(parse_config({"budget": {"epsilon": 1.0, "delta": 1e-5},
                                   "dataset": {"name": "adult", "params": {"data_dir": args.data_dir}}}))
    loaded = plan.source.load()
    data = loaded.schema.fit(loaded.frame, None, np.random.default_rng(0)).encode(loaded.frame)
    attrs = list(data.domain.attributes)
    tree, extra = chow_liu(data, attrs)
    rng = np.random.default_rng(2026)
    triples = sorted({tuple(sorted(rng.choice(len(attrs), 3, replace=False).tolist())) for _ in range(400)})[:300]
    triples = [[attrs[i] for i in t] for t in triples]
    three = [a for a in attrs if a in (tree[0][0], tree[0][1], tree[1][1])][:3]
    sets = {"tree": [(a,) for a in attrs] + tree + [tuple(three)],
            "dense": [(a,) for a in attrs] + tree + extra[:10] + [tuple(three)]}
    chosen = [x.strip() for x in args.sets.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in sets]
    if unknown or not chosen:
        ap.error(f"--sets: choose among {sorted(sets)}, got {args.sets!r}")
    sets = {k: v for k, v in sets.items() if k in chosen}
    have_mbi = Path(args.mbi_python).exists()
    if not have_mbi:
        print(f"mbi: cannot run — no interpreter at {args.mbi_python}. Install it as the module docstring says.")
    for name, cliques in sets.items():
        cliques = [tuple(a for a in attrs if a in c) for c in cliques]  # domain order, as mbi projects
        ys = [data.counts(c).values + rng.normal(0, SIGMA, data.domain.project(c).shape) for c in cliques]
        meas = [Measurement(c, y, SIGMA) for c, y in zip(cliques, ys)]
        times, cpus, tracks, res = [], [], [], None
        for _ in range(args.runs + 1):
            track: list[tuple[float, float]] = []  # (seconds since the call, loss) after each iteration
            t0, c0 = time.perf_counter(), time.process_time()
            res = estimate(data.domain, meas, total=float(data.n), iters=args.iters, tol=-1.0,
                           callback=lambda it, loss, t0=t0, track=track: track.append((time.perf_counter() - t0, loss)))
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            tracks.append(track)
        ours = {"first": times[0], "steady": statistics.median(times[1:]), "loss": res.losses[-1],
                "cpu": statistics.median(cpus[1:]), "iters": res.iterations,
                "tvd_measured": statistics.mean(tvd(data.counts(c).values, res.model.marginal(c).values) for c in cliques),
                "tvd_3way": statistics.mean(tvd(data.counts(t).values, res.model.marginal(t).values) for t in triples)}
        rows = [("vertisynth", ours)]
        if have_mbi:
            with tempfile.TemporaryDirectory() as tmp:
                spec = {"attributes": attrs, "shape": list(data.domain.shape), "cliques": [list(c) for c in cliques],
                        "triples": triples, "total": float(data.n), "iters": args.iters, "runs": args.runs}
                np.savez(Path(tmp) / "spec.npz", spec=np.frombuffer(json.dumps(spec).encode(), np.uint8),
                         **{f"m{i}": y for i, y in enumerate(ys)})
                proc = subprocess.run([args.mbi_python, __file__, "--mbi-worker", str(Path(tmp) / "spec.npz"),
                                       str(Path(tmp) / "out.npz")], capture_output=True, text=True)
                if proc.returncode != 0:
                    print(f"mbi failed on '{name}':\n{proc.stderr[-2000:]}")
                else:
                    with np.load(Path(tmp) / "out.npz") as z:
                        t = z["times"]
                        nq = len(cliques)
                        theirs = {"first": float(t[0]), "steady": float(np.median(t[1:])), "loss": float(z["loss"]),
                                  "cpu": float(np.median(z["cpus"][1:])), "iters": args.iters,
                                  "tvd_measured": statistics.mean(tvd(data.counts(c).values.ravel(), z[f"q{i}"])
                                                                  for i, c in enumerate(cliques)),
                                  "tvd_3way": statistics.mean(tvd(data.counts(tr).values.ravel(), z[f"q{nq + i}"])
                                                              for i, tr in enumerate(triples))}
                    rows.append(("mbi", theirs))
        size = res.model.tree.size
        print(f"\n== measurements '{name}': {len(cliques)} marginals, model {size:,} cells, {args.iters} iterations "
              f"(medians of {args.runs} steady runs; the first call is separate)")
        print(f"{'':<11} {'first s':>8} {'steady s':>9} {'ms/iter':>8} {'cpu s':>7} {'loss':>10} {'TVD meas':>9} "
              f"{'TVD 3-way':>10}")
        for label, r in rows:
            print(f"{label:<11} {r['first']:>8.2f} {r['steady']:>9.2f} {1000 * r['steady'] / r['iters']:>8.2f} "
                  f"{r['cpu']:>7.2f} {r['loss']:>10.1f} {r['tvd_measured']:>9.4f} {r['tvd_3way']:>10.4f}")
        if len(rows) == 2:
            o, m = rows[0][1], rows[1][1]
            print(f"{'ratio v/m':<11} {o['first'] / m['first']:>8.3f} {o['steady'] / m['steady']:>9.3f} "
                  f"{(o['steady'] / o['iters']) / (m['steady'] / m['iters']):>8.3f} {o['cpu'] / m['cpu']:>7.3f} "
                  f"{o['loss'] / m['loss']:>10.3f} {o['tvd_measured'] / m['tvd_measured']:>9.3f} "
                  f"{o['tvd_3way'] / m['tvd_3way']:>10.3f}")
            # the same runs, read at the first iteration whose loss is at most mbi's after all its iterations
            reach = [next(((i + 1, t) for i, (t, loss) in enumerate(tr) if loss <= m["loss"]), None) for tr in tracks]
            if all(r is not None for r in reach):
                it_first, s_first = reach[0]
                s_steady = statistics.median(t for _, t in reach[1:])
                print(f"to mbi's final loss ({m['loss']:.1f}): vertisynth needs {it_first} iterations, "
                      f"{s_first:.2f} s first call, {s_steady:.2f} s steady; ratio to mbi's {args.iters} iterations: "
                      f"first {s_first / m['first']:.3f}, steady {s_steady / m['steady']:.3f}")
            else:
                print(f"to mbi's final loss ({m['loss']:.1f}): not reached by vertisynth in {args.iters} iterations")
    res.model.clique_probs()  # calibrated once, as any use of the model does before sampling
    t0, c0 = time.perf_counter(), time.process_time()
    sample = res.model.sample(1_000_000, np.random.default_rng(0))
    t_sample, c_sample = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    res.model.sample(1_000_000, np.random.default_rng(0), method="round")
    t_round, c_round = time.perf_counter() - t0, time.process_time() - c0
    print(f"\nsampling 1,000,000 rows of the '{name}' Adult model: {t_sample:.2f} s (plain), {t_round:.2f} s (rounding); "
          f"CPU {c_sample:.2f} s / {c_round:.2f} s; target < 5 s ({sample.n} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
