"""Where a vertical twin loses to its central run: selection or estimation (a diagnostic, not a DP run).

    python benchmarks/twin_selection_ablation.py [--dataset zoo:small-domains] [--epsilon 0.4] [--seeds 0-7]
        [--methods mst,private_pgm] [--trusts none,server] [--marginals 300]

For each seed: the central run, the twin under each trust (`he`, crypto simulated) and the same twin whose
`select` calls are answered by the central oracle on the joined table ("exact selection": the same ρ per round,
the exponential mechanism on exact scores; every measurement still goes through the vertical oracle, so
cross-party answers keep the measure's noise, 2σ² under trust "none"). twin / central against exact-selection /
central splits the gap: what exact selection leaves is estimation (and the probes' cost); the rest is the noisy
cross-party scores. Exact selection reads cross-party counts no role may read: it is a measurement of the design,
never a way to run a twin. Only NLTCS, Adult (from $VERTISYNTH_DATA) and the generated zoo are used.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        lo, hi = map(int, text.split("-"))
        return list(range(lo, hi + 1))
    return [int(s) for s in text.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="zoo:small-domains")
    ap.add_argument("--epsilon", type=float, default=0.4)
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--seeds", default="0-7", help="a range lo-hi or a comma-separated list")
    ap.add_argument("--methods", default="mst,private_pgm")
    ap.add_argument("--trusts", default="none,server")
    ap.add_argument("--marginals", type=int, default=300)
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA"))
    args = ap.parse_args()

    from vertisynth.core.privacy import Budget
    from vertisynth.core.registry import default_registry
    from vertisynth.pgm.oracle import CentralOracle
    from vertisynth.run.pipeline import build_component
    from twin_setup import cell_table, planned_twin

    reg = default_registry()
    budget = Budget(args.epsilon, args.delta)
    tvd = build_component(reg, "evaluator", "tvd", {"ways": [3], "marginals": args.marginals}, "tvd").instance
    ratios: dict[tuple[str, str], list[float]] = {}
    print(f"{'dataset':<19} {'ε':>4} {'seed':>4} {'method':<12} {'central':>8}  "
          + "  ".join(f"{'twin ' + t:>12} {'exact sel.':>10}" for t in args.trusts.split(",")))
    for seed in seeds_of(args.seeds):
        real, partition = cell_table(args.dataset, args.epsilon, args.delta, seed, args.data_dir)
        for method in args.methods.split(","):
            def one(trust: str | None, exact: bool) -> float:
                params = {"iters": 1000} if method in ("aim", "mst") else {}
                syn, _, ledger, oracle, rng = planned_twin(reg, method, params, trust, real, partition, budget, seed)
                if trust and exact:   # the diagnostic: the round's choice on exact scores, paid the same ρ
                    oracle.select = CentralOracle(real, ledger).select
                syn.fit_oracle(oracle, rng)
                sample = syn.sample(None, rng)
                assert ledger.unspent() == []
                return tvd.evaluate(real, sample, np.random.default_rng(1000 + seed))["tvd_3way"]

            central = one(None, False)
            cols = []
            for trust in args.trusts.split(","):
                tw, ex = one(trust, False) / central, one(trust, True) / central
                ratios.setdefault((method, trust), []).append(tw)
                ratios.setdefault((method, trust + ", exact selection"), []).append(ex)
                cols.append(f"{tw:>12.2f} {ex:>10.2f}")
            print(f"{args.dataset:<19} {args.epsilon:>4g} {seed:>4} {method:<12} {central:>8.4f}  " + "  ".join(cols),
                  flush=True)
    print("\ntwin / central (the columns above are ratios):")
    for (method, what), r in ratios.items():
        print(f"{method:<12} {what:<26} median {np.median(r):.2f}, worst {np.max(r):.2f} over {len(r)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
