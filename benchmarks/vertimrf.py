"""VertiMRF against the reference VertiMRF's published numbers and against centralised PrivMRF.

    python benchmarks/vertimrf.py [--data-dir DIR] [--quick]

Tables printed (3/4/5-way TVD over 300 random marginals against the training table; seconds = fit + sample):
  1. NLTCS, split 0-7 | 8-15, ε = 0.8: VertiMRF-FM and -FO, mean ± std over `--runs` seeds (targets: FM <= 0.05,
     FO <= 0.22; reference FM 0.056, FO 0.342; independent columns 0.253).
  2. Adult, split 0-7 | 8-14, ε ∈ {0.2, 0.4, 0.8, 1.6, 3.2}: VertiMRF-FM, VertiMRF-FO, centralised PrivMRF and
     independent columns side by side (targets: FM 3-way <= 0.13 at ε = 1.6, within 1.5× of centralised at ε >= 0.8;
     FO better than independent). The independent baseline is the anchor of the ratio columns.
  3. Ablations on Adult at ε = 1.6 (Appendix A.1 and ours): HisRec vs binned-query vs uniform recovery, without LocMRF, without
     consistency, paper-faithful (equal weights, d^c rule, Alg. 3 calibration, clipping) vs variance-aware.
  4. Per-phase seconds of VertiMRF-FM on Adult, t = 2000 (target: whole pipeline < 3 minutes on 2 cores) and at
     the default t = 8000.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import make_plan, execute

PAPER = {"weighting": "paper", "recovery": "hisrec", "iters": 300, "bins": 4,
         "encoder_params": {"calibration": "paper", "postprocess": "clip", "t": 2000}}


def one(ds: str, eps: float, synth: str, params: dict, seed: int, data_dir: str, marginals: int):
    cfg = parse_config({
        "seed": seed, "budget": {"epsilon": eps, "delta": 1e-5},
        "dataset": {"name": ds, "params": {"data_dir": data_dir}},
        "synthesizer": {"use": synth, "params": params},
        "evaluators": [{"use": "tvd", "params": {"ways": [3, 4, 5], "marginals": marginals}}],
    })
    plan = make_plan(cfg)
    t0 = time.perf_counter()
    res = execute(plan)
    m = res.metrics["tvd"]
    return (m["tvd_3way"], m["tvd_4way"], m["tvd_5way"]), time.perf_counter() - t0, plan.synthesizer.instance.timings()


def row(label: str, results: list, anchor: float | None = None) -> str:
    t3 = [r[0][0] for r in results]
    t4 = [r[0][1] for r in results]
    t5 = [r[0][2] for r in results]
    sec = statistics.median(r[1] for r in results)
    sd = f"±{statistics.stdev(t3):.4f}" if len(t3) > 1 else ""
    rel = f"{statistics.mean(t3) / anchor:>8.3f}" if anchor else ""
    return (f"{label:<34} {statistics.mean(t3):>7.4f}{sd:<8} {statistics.mean(t4):>7.4f} {statistics.mean(t5):>7.4f} "
            f"{sec:>7.1f} {rel}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--quick", action="store_true", help="1 run, 100 marginals, ε ∈ {0.8, 1.6} on Adult, no ablations")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", choices=["nltcs", "adult", "ablations", "phases"], default=None,
                    help="run one table only")
    args = ap.parse_args()
    runs = 1 if args.quick else args.runs
    marg = 100 if args.quick else 300
    dd = args.data_dir
    header = f"{'':<34} {'3-way':>7}{'':<8} {'4-way':>7} {'5-way':>7} {'sec':>7} {'3w/indep':>8}"

    want = (lambda t: args.only in (None, t))
    if want("nltcs"):
        nltcs_table(runs, dd, marg, header)
    if want("adult"):
        adult_table(args.quick, dd, marg, header)
    if args.quick:
        return 0
    if want("ablations"):
        ablations(dd, marg, header)
    if want("phases"):
        phases_table(dd, marg)
    return 0


def nltcs_table(runs: int, dd: str, marg: int, header: str) -> None:
    print("1. NLTCS, 0-7 | 8-15, ε = 0.8")
    print(header)
    for label, params in [("VertiMRF-FM", {"encoder": "dpfm"}), ("VertiMRF-FO", {"encoder": "grr"})]:
        print(row(label, [one("nltcs", 0.8, "vertimrf", params, 100 + r, dd, marg) for r in range(runs)]))
    sys.stdout.flush()


def adult_table(quick: bool, dd: str, marg: int, header: str) -> None:
    print("\n2. Adult, 0-7 | 8-14")
    print(header)
    for eps in ([0.8, 1.6] if quick else [0.2, 0.4, 0.8, 1.6, 3.2]):
        reps = 1 if quick else 2
        ind = [one("adult", eps, "independent", {}, 200 + r, dd, marg) for r in range(reps)]
        anchor = statistics.mean(r[0][0] for r in ind)
        print(row(f"ε={eps} independent columns", ind, anchor))
        for label, synth, params in [("VertiMRF-FM", "vertimrf", {"encoder": "dpfm"}),
                                     ("VertiMRF-FO", "vertimrf", {"encoder": "grr"}),
                                     ("PrivMRF (centralised)", "privmrf", {})]:
            print(row(f"ε={eps} {label}", [one("adult", eps, synth, params, 200 + r, dd, marg) for r in range(reps)],
                      anchor))
        sys.stdout.flush()


def ablations(dd: str, marg: int, header: str) -> None:
    print("\n3. Ablations, Adult, ε = 1.6, VertiMRF-FM")
    print(header)
    for label, params in [("ours (default: variance, binned query)", {}), ("paper-faithful (equal weights, HisRec)", PAPER),
                          ("ours with HisRec (paper §6.1)", {"recovery": "hisrec"}),
                          ("without LocMRF (HisRec)", {"use_local": False, "local_fraction": 0.0,
                                                        "recovery": "hisrec"}),
                          ("uniform recovery", {"recovery": "uniform"}),
                          ("without consistency", {"consistency": False})]:
        print(row(label, [one("adult", 1.6, "vertimrf", params, 300 + r, dd, marg) for r in range(2)]))
        sys.stdout.flush()


def phases_table(dd: str, marg: int) -> None:
    for t in (2000, 8000):
        print(f"\n4. Per-phase seconds, Adult, VertiMRF-FM, t = {t}, ε = 1.6" + (" (the default)" if t == 8000 else ""))
        _, total, phases = one("adult", 1.6, "vertimrf", {"encoder": "dpfm", "encoder_params": {"t": t}}, 400, dd, marg)
        for k, v in phases.items():
            print(f"  {k:<40} {v:>7.1f}")
        print(f"  {'whole run (fit + sample + evaluate)':<40} {total:>7.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
