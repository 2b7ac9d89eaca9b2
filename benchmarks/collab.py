"""Local-only vs combined DP binning across two horizontal custodians (seed 004, Table 1), on Adult.

    python benchmarks/collab.py [--data-dir DIR] [--quick] [--epsilons 1.0,3.0] [--repeats 3]

Adult (the shared discretised copy) is split into two custodians — at random, and sorted by age (custodians
whose populations differ, as hospitals' do). Its ordinal columns (age, fnlwgt, education-num, capital-gain,
capital-loss, hours-per-week: their codes read as numbers) are re-binned into 4 bins at DP quantiles, either
by each custodian alone ("local", the paper's row 1) or over the combined data by secure aggregation
("combined", the paper's row 2), and de-binned with DP bin means (or, with --debinning uniform, a uniform
value inside the bin). Private-PGM (the paper's SDG) is fitted
on every 1-way marginal and every 2-way marginal with the label (the paper's measurement set), all
measured by secure aggregation. Scores against a 20% holdout: workload error (1-way, and the label pairs)
and |real − synthetic| accuracy and macro-F1 of logistic regression (LR) and a decision tree (DT).
The anchor is the combined row of the same split and ε in the same run: the last column block is
local / combined (above 1: local binning is worse).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run

NUMERIC = {"age": [0, 15], "fnlwgt": [0, 15], "education-num": [1, 16], "capital-gain": [0, 15],
           "capital-loss": [0, 15], "hours-per-week": [0, 15]}
COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
           "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income")
LABEL = "income"
METRICS = [("wle_1way", "workload_error", "l1_1way"), ("wle_label", "pairs", "l1_workload"),
           ("lr_acc", "ml_utility", "lr_accuracy_gap"), ("lr_f1", "ml_utility", "lr_f1_gap"),
           ("dt_acc", "ml_utility", "dt_accuracy_gap"), ("dt_f1", "ml_utility", "dt_f1_gap")]


def config(data_dir: str, eps: float, split: str, preprocessing: str, seed: int, iters: int, dataset: str,
           debinning: str = "mean") -> dict:
    label_pairs = [[c, LABEL] for c in COLUMNS if c != LABEL]
    return {
        "seed": seed, "budget": {"epsilon": eps, "delta": 1e-5},
        "dataset": {"name": dataset, "params": {"data_dir": data_dir}},
        "synthesizer": {"use": "private_pgm",
                        "params": {"measurements": "workload", "workload": label_pairs, "iters": iters}},
        "evaluation": {"holdout": 0.2},
        "evaluators": [{"use": "workload_error"},
                       {"use": "ml_utility", "params": {"label": LABEL}}],
        "collab": {"custodians": 2, "split": split, "preprocessing": preprocessing, "numeric": NUMERIC,
                   "bins": 4, "preprocessing_fraction": 0.2, "debinning": debinning},
    }


def one(cfg: dict) -> dict[str, float]:
    from vertisynth.plugins.evaluators.workload import WorkloadConfig, WorkloadError

    res = run(parse_config(cfg))
    # the label pairs' workload error, against the holdout-free training table (the real side of the run)
    pairs = WorkloadError(WorkloadConfig(workload=[[c, LABEL] for c in COLUMNS if c != LABEL]))
    res.metrics["pairs"] = pairs.evaluate(res.real_codes, res.synthetic_codes, np.random.default_rng(0))
    out = {name: res.metrics[ev][key] for name, ev, key in METRICS}
    out["sec"] = sum(res.report["timings_seconds"].values())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA",
                                                         str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--quick", action="store_true", help="ε = 1, random split, 1 repeat, 100 iterations")
    ap.add_argument("--epsilons", default="1.0,3.0")
    ap.add_argument("--splits", default="random,sorted:age")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iters", type=int, default=300, help="Private-PGM estimation iterations")
    ap.add_argument("--debinning", choices=["mean", "uniform"], default="mean",
                    help="bins back to values: DP bin means (the paper) or uniform inside the bin")
    args = ap.parse_args()
    epsilons = [1.0] if args.quick else [float(e) for e in args.epsilons.split(",")]
    splits = ["random"] if args.quick else args.splits.split(",")
    repeats = 1 if args.quick else args.repeats
    iters = 100 if args.quick else args.iters
    names = [m[0] for m in METRICS]
    print(f"Adult, 2 custodians, Private-PGM (1-way + label pairs), 4 DP-quantile bins, {args.debinning} de-binning; "
          f"mean of {repeats} seed(s); gaps are |real − synthetic| on a 20% holdout")
    print(f"{'split':<10} {'eps':>4} {'binning':<9} " + " ".join(f"{n:>9}" for n in names)
          + f" {'sec':>6} | " + " ".join(f"{n + '/c':>11}" for n in names))
    t0 = time.perf_counter()
    for split in splits:
        for eps in epsilons:
            rows = {}
            for prep in ("combined", "local"):   # combined first: it is the anchor
                runs = [one(config(args.data_dir, eps, split, prep, 100 + r, iters, "adult", args.debinning))
                        for r in range(repeats)]
                rows[prep] = {k: statistics.mean(r[k] for r in runs) for k in runs[0]}
            anchor = rows["combined"]
            for prep, m in rows.items():
                ratio = " ".join(f"{m[n] / anchor[n]:>11.2f}" if anchor[n] > 0 else f"{'-':>11}" for n in names)
                print(f"{split:<10} {eps:>4g} {prep:<9} " + " ".join(f"{m[n]:>9.4f}" for n in names)
                      + f" {m['sec']:>6.1f} | {ratio}")
            sys.stdout.flush()
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
