"""Power and false-alarm rate of the privacy auditor (vertisynth.testing.audit) at a chosen level.

    PYTHONPATH=. python benchmarks/audit_power.py [--level standard] [--runs 100] [--null-runs 200]

Power: the fraction of seeded runs (seeds 0..runs-1, no reruns) in which the audit flags
  * GRR (k = 4 values, claimed ε = 1) that really runs at ε = 1.10 and 1.25 (over-claimed by 10%, 25%),
  * a Laplace record count (claimed ε = 1) that really runs at ε = 1.25,
  * (harder) GRR with k = 16 values over-claimed by 10% and 25%,
at the kit's default α = 1e-6 and at α = 0.05.
False alarms: the fraction of runs (seeds 10_000..) in which correct GRR / Laplace mechanisms are
flagged at α = 0.05; the Clopper-Pearson construction bounds it by α, so it must stay under 5%.
Each audit: one neighbouring pair (GRR: value 0 vs 1; count: empty table vs one record).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.testing.audit import AUDIT_LEVELS, NeighbourPair, audit
from vertisynth.testing.reference import ReferenceGRR, ReferenceLaplaceCount

DOM = Domain(("a",), (2,))
COUNT_PAIR = [NeighbourPair(Dataset(np.zeros((0, 1), np.int64), DOM), Dataset(np.zeros((1, 1), np.int64), DOM),
                            "add_remove", "empty vs one record")]
GRR_PAIR = [NeighbourPair(0, 1, "substitute", "value 0 vs 1")]
CASES = {
    "GRR k=4, eps=1 claimed, true 1.10 (+10%)": (lambda: ReferenceGRR(4, 1.0, 1.10), GRR_PAIR),
    "GRR k=4, eps=1 claimed, true 1.25 (+25%)": (lambda: ReferenceGRR(4, 1.0, 1.25), GRR_PAIR),
    "Laplace count, eps=1 claimed, true 1.25 (+25%)": (lambda: ReferenceLaplaceCount(1.0, 1.25), COUNT_PAIR),
    # harder: many values make the kept value rarer, so counts are smaller
    "GRR k=16, eps=1 claimed, true 1.10 (+10%)": (lambda: ReferenceGRR(16, 1.0, 1.10), GRR_PAIR),
    "GRR k=16, eps=1 claimed, true 1.25 (+25%)": (lambda: ReferenceGRR(16, 1.0, 1.25), GRR_PAIR),
}
NULLS = {
    "GRR k=4, eps=1 (correct)": (lambda: ReferenceGRR(4, 1.0), GRR_PAIR),
    "Laplace count, eps=1 (correct)": (lambda: ReferenceLaplaceCount(1.0), COUNT_PAIR),
    "GRR k=16, eps=1 (correct)": (lambda: ReferenceGRR(16, 1.0), GRR_PAIR),
}


def rate(make, pairs, level: str, alpha: float, seeds: range, times: list[float]) -> tuple[float, float]:
    flagged, lbs = 0, []
    for s in seeds:
        t0 = time.perf_counter()
        r = audit(make(), pairs, 1.0, level=level, alpha=alpha, seed=s)
        times.append(time.perf_counter() - t0)
        flagged += not r.passed
        lbs.append(r.epsilon_lb)
    return flagged / len(seeds), statistics.median(lbs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--level", default="standard", choices=sorted(AUDIT_LEVELS))
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--null-runs", type=int, default=200)
    args = ap.parse_args()
    times: list[float] = []
    print(f"audit level {args.level}: {AUDIT_LEVELS[args.level]} fresh samples per side "
          f"(+{AUDIT_LEVELS[args.level] // 4} for event selection)\n")
    print("| over-claimed mechanism | runs | power at α=1e-6 | power at α=0.05 | median ε_lb (α=1e-6) |")
    print("|---|---|---|---|---|")
    for label, (make, pairs) in CASES.items():
        p6, lb = rate(make, pairs, args.level, 1e-6, range(args.runs), times)
        p05, _ = rate(make, pairs, args.level, 0.05, range(args.runs), times)
        print(f"| {label} | {args.runs} | {p6:.2f} | {p05:.2f} | {lb:.3f} |")
    print()
    print("| correct mechanism | runs | false alarms at α=0.05 | median ε_lb |")
    print("|---|---|---|---|")
    for label, (make, pairs) in NULLS.items():
        fa, lb = rate(make, pairs, args.level, 0.05, range(10_000, 10_000 + args.null_runs), times)
        print(f"| {label} | {args.null_runs} | {fa:.3f} | {lb:.3f} |")
    print(f"\nmedian seconds per audit: {statistics.median(times):.3f} over {len(times)} audits")


if __name__ == "__main__":
    main()
