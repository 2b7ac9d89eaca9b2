"""Ours ÷ dpmm's AIM, paired per (dataset, ε, seed, T), from central_aim_mst.py CSV rows: each pair's ratio (dpmm's
reruns of one seed averaged: its noise is unseeded), then the mean ratio ± its standard error over the pairs.
    python benchmarks/aim_trace/paired.py docs/lab/central_aim_mst.csv [MORE.csv ...]"""
import csv
import sys
from collections import defaultdict

import numpy as np

ours, peer = {}, defaultdict(list)
for path in sys.argv[1:]:
    for row in csv.DictReader(open(path)):
        if not row["tvd_3way"] or not row["aim_rounds"]:
            continue
        key = (row["dataset"], float(row["epsilon"]), int(row["seed"]), int(row["aim_rounds"]))
        if row["method"] == "aim":
            ours[key] = float(row["tvd_3way"])   # deterministic: a rerun gives the same row
        elif row["method"] == "dpmm_aim":
            peer[key].append(float(row["tvd_3way"]))
pairs = sorted(k for k in ours if k in peer)
ratios = []
for k in pairs:
    r = ours[k] / np.mean(peer[k])
    ratios.append(r)
    print(f"{k[0]:<20} ε {k[1]:<4g} seed {k[2]} T {k[3]}: aim {ours[k]:.4f}  dpmm {np.mean(peer[k]):.4f} "
          f"({len(peer[k])} run{'s' if len(peer[k]) > 1 else ''})  ratio {r:.3f}")
if ratios:
    r = np.array(ratios)
    se = r.std(ddof=1) / np.sqrt(len(r)) if len(r) > 1 else float("nan")
    print(f"{len(r)} pairs: mean ratio {r.mean():.3f} ± {se:.3f} (standard error); ours better in "
          f"{int((r < 1).sum())}, worse in {int((r > 1).sum())}")
