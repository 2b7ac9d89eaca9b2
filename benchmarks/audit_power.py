"""Power and false-alarm rate of the privacy auditor (vertisynth.testing.audit) at a chosen level.

    PYTHONPATH=. python benchmarks/audit_power.py [--level standard] [--runs 100] [--null-runs 200] [--sequential]

Power: the fraction of seeded runs (seeds 0..runs-1, no reruns) in which the audit flags
  * GRR (k = 4 values, claimed ε = 1) that really runs at ε = 1.10 and 1.25 (over-claimed by 10%, 25%),
  * a Laplace record count (claimed ε = 1) that really runs at ε = 1.25,
  * (harder) GRR with k = 16 values over-claimed by 10% and 25%,
at the kit's default α = 1e-6 and at α = 0.05.
False alarms: the fraction of runs (seeds 10_000..) in which correct GRR / Laplace mechanisms are
flagged at α = 0.05; the Clopper-Pearson construction bounds it by α, so it must stay under 5%.
Each audit: one neighbouring pair (GRR: value 0 vs 1; count: empty table vs one record).
--sequential: every audit twice on the same seeds, full-size and `audit(sequential=True)` (phase 2 in looks, a
pair stopping once its claims are cleared), power and false alarms side by side, with the mean share of the
planned phase-2 samples each drew; plus 2x over-claims, and correct mechanisms under a loose claim (ε = 2 claimed for
a true 1), where the sequential audit stops early.
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
DOUBLE = {   # --sequential only: 2x over-claims
    "GRR k=4, eps=1 claimed, true 2 (2x)": (lambda: ReferenceGRR(4, 1.0, 2.0), GRR_PAIR),
    "Laplace count, eps=1 claimed, true 2 (2x)": (lambda: ReferenceLaplaceCount(1.0, 2.0), COUNT_PAIR),
}
LOOSE = {   # --sequential only: correct mechanisms claimed at ε = 2 (true ε = 1)
    "GRR k=4, true eps=1, eps=2 claimed": (lambda: ReferenceGRR(4, 0.5, 2.0), GRR_PAIR),
    "Laplace count, true eps=1, eps=2 claimed": (lambda: ReferenceLaplaceCount(0.5, 2.0), COUNT_PAIR),
}
NULLS = {
    "GRR k=4, eps=1 (correct)": (lambda: ReferenceGRR(4, 1.0), GRR_PAIR),
    "Laplace count, eps=1 (correct)": (lambda: ReferenceLaplaceCount(1.0), COUNT_PAIR),
    "GRR k=16, eps=1 (correct)": (lambda: ReferenceGRR(16, 1.0), GRR_PAIR),
}


def rate(make, pairs, level: str, alpha: float, seeds: range, times: list[float], sequential: bool = False,
         claimed: float = 1.0, used: list[float] | None = None) -> tuple[float, float]:
    flagged, lbs = 0, []
    for s in seeds:
        t0 = time.perf_counter()
        r = audit(make(), pairs, claimed, level=level, alpha=alpha, seed=s, sequential=sequential)
        times.append(time.perf_counter() - t0)
        flagged += not r.passed
        lbs.append(r.epsilon_lb)
        if used is not None:
            used += [x.n / r.n_samples for x in r.results]
    return flagged / len(seeds), statistics.median(lbs)


def compare_sequential(level: str, runs: int, null_runs: int) -> None:
    """Full-size and sequential audits on the same seeds: their power, false alarms and phase-2 samples."""
    print("| mechanism | runs | flagged at α=1e-6: full / sequential | at α=0.05: full / sequential | "
          "sequential: mean share of phase-2 samples (α=1e-6) |")
    print("|---|---|---|---|---|")
    groups = [({**CASES, **DOUBLE}, range(runs), 1.0), (NULLS, range(10_000, 10_000 + null_runs), 1.0),
              (LOOSE, range(10_000, 10_000 + null_runs), 2.0)]
    for cases, seeds, claimed in groups:
        for label, (make, pairs) in cases.items():
            used: list[float] = []
            cells = []
            for alpha in (1e-6, 0.05):
                full, _ = rate(make, pairs, level, alpha, seeds, [], claimed=claimed)
                seq, _ = rate(make, pairs, level, alpha, seeds, [], True, claimed, used if alpha == 1e-6 else None)
                cells.append(f"{full:.3f} / {seq:.3f}")
            print(f"| {label} | {len(seeds)} | {cells[0]} | {cells[1]} | {statistics.mean(used):.3f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--level", default="standard", choices=sorted(AUDIT_LEVELS))
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--null-runs", type=int, default=200)
    ap.add_argument("--sequential", action="store_true", help="compare full-size and sequential audits")
    args = ap.parse_args()
    if args.sequential:
        compare_sequential(args.level, args.runs, args.null_runs)
        return
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
