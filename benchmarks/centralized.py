"""Quality and time of the centralised synthesizers on NLTCS and Adult.

    python benchmarks/centralized.py [--data-dir DIR] [--quick] [--synthesizers a,b,...]
                                     [--params 'privmrf={"useful": "theta"}']

For each dataset × ε × synthesizer: mean 3/4/5-way TVD over 300 random marginals (against the
training table), over `repeats` seeds, plus the median fit+sample seconds. The `independent`
baseline is the anchor: the last columns give each method's 3-way TVD and time relative to it in
the same run. Synthesizers that are not installed are listed as skipped. Why the methods rank as they
do (oracle experiments: MST's best tree, all pairs, PrivMRF's chosen marginals without noise):
benchmarks/privmrf_diagnostics.py.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run
from vertisynth.core.registry import default_registry

DEFAULT_SYNTHS = ["independent", "dpsyn", "private_pgm", "privmrf"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--quick", action="store_true", help="NLTCS only, ε ∈ {0.8}, 1 repeat, 100 marginals")
    ap.add_argument("--synthesizers", default=",".join(DEFAULT_SYNTHS))
    ap.add_argument("--epsilons", default="0.2,0.4,0.8,1.6,3.2")
    ap.add_argument("--datasets", default="nltcs,adult")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clique-table", action="store_true",
                    help="only the PrivMRF clique-limit trade-off on Adult at ε = 1.6 (time and TVD per limit)")
    ap.add_argument("--params", action="append", default=[], metavar="SYN=JSON",
                    help="synthesizer params for one synthesizer, e.g. 'privmrf={\"useful\": \"theta\"}' (repeatable)")
    ap.add_argument("--seed0", type=int, default=1000, help="repeat r uses seed seed0 + r")
    args = ap.parse_args()
    params = {}
    for item in args.params:
        name, _, text = item.partition("=")
        params[name] = json.loads(text)
    if args.clique_table:
        return clique_table(args.data_dir)
    datasets = ["nltcs"] if args.quick else args.datasets.split(",")
    epsilons = [0.8] if args.quick else [float(e) for e in args.epsilons.split(",")]
    repeats = 1 if args.quick else args.repeats
    marginals = 100 if args.quick else 300
    available = set(default_registry().names("synthesizer"))
    synths = [s for s in args.synthesizers.split(",") if s in available]
    skipped = [s for s in args.synthesizers.split(",") if s not in available]
    if skipped:
        print(f"skipped (not installed): {', '.join(skipped)}")
    print(f"{'dataset':<7} {'eps':>5} {'synthesizer':<13} {'3-way':>7} {'4-way':>7} {'5-way':>7} {'sec':>7} "
          f"{'3w/indep':>9} {'t/indep':>8}")
    for ds in datasets:
        for eps in epsilons:
            rows = {}
            for syn in synths:
                tvds = {3: [], 4: [], 5: []}
                secs = []
                for r in range(repeats):
                    cfg = parse_config({
                        "seed": args.seed0 + r, "budget": {"epsilon": eps, "delta": 1e-5},
                        "dataset": {"name": ds, "params": {"data_dir": args.data_dir}},
                        "synthesizer": {"use": syn, "params": params.get(syn, {})},
                        "evaluators": [{"use": "tvd", "params": {"ways": [3, 4, 5], "marginals": marginals}}],
                    })
                    res = run(cfg)
                    secs.append(res.report["timings_seconds"]["fit"] + res.report["timings_seconds"]["sample"])
                    for k in tvds:
                        tvds[k].append(res.metrics["tvd"][f"tvd_{k}way"])
                rows[syn] = ({k: statistics.mean(v) for k, v in tvds.items()}, statistics.median(secs))
            anchor = rows.get("independent")
            for syn, (t, sec) in rows.items():
                rel = f"{t[3] / anchor[0][3]:>9.3f} {sec / max(anchor[1], 1e-9):>8.1f}" if anchor else ""
                print(f"{ds:<7} {eps:>5} {syn:<13} {t[3]:>7.4f} {t[4]:>7.4f} {t[5]:>7.4f} {sec:>7.2f} {rel}")
            sys.stdout.flush()
    return 0


def clique_table(data_dir: str) -> int:
    """PrivMRF's max_clique_cells (the paper uses about 1e7) against time and TVD, Adult, ε = 1.6."""
    print(f"{'max_clique_cells':>16} {'3-way':>7} {'4-way':>7} {'5-way':>7} {'fit+sample s':>13}")
    for limit in (1e4, 1e5, 1e6, 1e7):
        cfg = parse_config({
            "seed": 7, "budget": {"epsilon": 1.6, "delta": 1e-5},
            "dataset": {"name": "adult", "params": {"data_dir": data_dir}},
            "synthesizer": {"use": "privmrf", "params": {"max_clique_cells": limit}},
            "evaluators": [{"use": "tvd", "params": {"ways": [3, 4, 5], "marginals": 300}}],
        })
        res = run(cfg)
        t = res.metrics["tvd"]
        sec = res.report["timings_seconds"]["fit"] + res.report["timings_seconds"]["sample"]
        print(f"{limit:>16.0e} {t['tvd_3way']:>7.4f} {t['tvd_4way']:>7.4f} {t['tvd_5way']:>7.4f} {sec:>13.1f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
