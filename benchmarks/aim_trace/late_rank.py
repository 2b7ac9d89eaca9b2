"""How well the twin's DP scores rank candidates by their true error, early and late in a run (docs/vertical.md,
"aim, seventh pass"), from a `triple_gap.py --trace` file.

    python benchmarks/aim_trace/late_rank.py trace.csv [COLUMN]

Per (label, dataset, ε, seed): the Spearman rank correlation between score and true L1 error, averaged over the
rounds of the run's first half ("early") and of its second ("late"), and the median score / true error, for
  pair    the cross-party pairs the server scores that no measurement holds yet (off their probe)
  triple  the two-party triples scored at a party (half the three pairs' sum)
COLUMN: the pairs' score column (default `cross_released`; `cross_pooled`: the tenth pass's score of the same
answers on the same rounds, paired). Rounds with fewer than four such candidates are skipped. A diagnostic of the design (the trace reads exact counts).
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict

import numpy as np
from scipy.stats import spearmanr


def summarise(rows: list[dict], column: str = "cross_released") -> list[dict]:
    runs = defaultdict(list)
    for r in rows:
        runs[(r["label"], r["dataset"], r["epsilon"], r["seed"])].append(r)
    out = []
    for (label, ds, eps, seed), rs in runs.items():
        rounds = max(int(r["round"]) for r in rs)
        row = {"label": label, "dataset": ds, "epsilon": eps, "seed": seed, "rounds": rounds}
        for kind in ("pair", "triple"):
            corr, ratio = defaultdict(list), defaultdict(list)
            by_round = defaultdict(list)
            for r in rs:
                if (r["pair_in"] == "") != (kind == "pair"):
                    continue
                if kind == "pair" and (r.get(column, "") == "" or r["pair_in_measured"] != "0"):
                    continue
                by_round[int(r["round"])].append(r)
            for rd, xs in by_round.items():
                if len(xs) < 4:
                    continue
                est = np.array([float(x[column if kind == "pair" else "score_half"]) for x in xs])
                true = np.array([float(x["true"]) for x in xs])
                half = "early" if rd <= rounds / 2 else "late"
                c = spearmanr(est, true).correlation
                if np.isfinite(c):
                    corr[half].append(c)
                ratio[half] += list(est[true > 0] / true[true > 0])
            for half in ("early", "late"):
                row[f"{kind}_rank_{half}"] = round(float(np.mean(corr[half])), 2) if corr[half] else ""
                row[f"{kind}_ratio_{half}"] = round(float(np.median(ratio[half])), 2) if ratio[half] else ""
        out.append(row)
    return out


def main() -> int:
    if len(sys.argv) not in (2, 3) or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2 if len(sys.argv) not in (2, 3) else 0
    with open(sys.argv[1], newline="") as f:
        rows = summarise(list(csv.DictReader(f)), *sys.argv[2:])
    w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
