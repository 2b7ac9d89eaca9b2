"""The DP testing kit on the classic benchmark of correct and incorrect mechanisms.

    PYTHONPATH=. python benchmarks/dp_kit.py [--epsilons 0.7] [--k 10] [--level standard] [--seed 0]

Mechanisms (vertisynth.testing.zoo, written from the papers): Report Noisy Max with Laplace and
exponential noise returning the index (correct) or the value (StatDP's iNoisyMax), the noisy histogram
with Lap(1/ε) and StatDP's Lap(ε), the six Sparse Vector variants of Lyu, Su & Li 2017 (Alg. 1, 2
correct; 3 = Roth 2011 outputting the noisy value, 4 = Lee & Clifton, 5 = Stoddard et al., 6 = Chen et
al.), and the Gaussian mechanism with the classic σ and with σ halved; over k sensitivity-1 queries
with StatDP's neighbour patterns (`strategies.query_pairs`); the Gaussian pair is calibrated for
(ε, δ) = (1, 1e-5), run once.

Per mechanism and claimed ε it prints whether it is truly DP, the verdict, the certified ε lower bound
and the CPU seconds of
  * the anchor, the kit's built-in events only as they were before issue 23 (single outcomes,
    thresholds on the output or on the linear / clipped discriminants of the raw output; a single
    (ε, δ) point for the Gaussian), measured in the same run, and
  * the kit now: plus the mechanism's feature map, the learned (classifier) event, and claims on the
    curve (`cost=`: the exact Gaussian curve),
and the ratio of the bounds (now / anchor). α = 1e-6, fixed seed, no reruns.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from vertisynth.testing.audit import AUDIT_LEVELS, audit
from vertisynth.testing.zoo import GaussianQueries, benchmark_cases


def run(case, epsilon: float, level: str, seed: int, anchor: bool):
    mech = case.mechanism
    if anchor:  # the kit before: raw outputs, built-in events, one (ε, δ) point
        claim = (dict(epsilon=mech.epsilon, delta=mech.delta) if isinstance(mech, GaussianQueries)
                 else dict(epsilon=epsilon))
        kw = dict(features=np.asarray, learned=False, **claim)
    else:
        kw = {}  # the mechanism's own cost (curve) and feature map, learned events on
    t0 = time.process_time()
    report = audit(mech, list(case.pairs), level=level, seed=seed, **kw)
    return report, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.7],
                    help="claimed ε (StatDP: 0.2 0.7 1.5); the Gaussian pair runs once, at (1, 1e-5)")
    ap.add_argument("--k", type=int, default=10, help="number of queries")
    ap.add_argument("--level", default="standard", choices=sorted(AUDIT_LEVELS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"level {args.level}: {AUDIT_LEVELS[args.level]} fresh samples per side per pair, α = 1e-6, "
          f"k = {args.k} queries, seed {args.seed}\n")
    print("| mechanism | claimed ε | truly DP | anchor verdict | anchor ε_lb | anchor s | kit verdict | kit ε_lb "
          "| kit s | ε_lb ratio | right? |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    wrong = 0
    for eps in args.epsilons:
        for case in benchmark_cases(eps, args.k, gaussian=eps == args.epsilons[0]):
            before, t_before = run(case, eps, args.level, args.seed, anchor=True)
            after, t_after = run(case, eps, args.level, args.seed, anchor=False)
            ok = after.passed == case.truly_dp
            wrong += not ok
            ratio = after.epsilon_lb / before.epsilon_lb if before.epsilon_lb > 0 else float("nan")
            verdict = {True: "pass", False: "VIOLATION"}
            claim = "(1, 1e-5) → curve" if isinstance(case.mechanism, GaussianQueries) else f"{eps:g}"
            print(f"| {case.name} | {claim} | {'yes' if case.truly_dp else 'no'} | {verdict[before.passed]} | "
                  f"{before.epsilon_lb:.3f} | {t_before:.1f} | {verdict[after.passed]} | {after.epsilon_lb:.3f} | "
                  f"{t_after:.1f} | {ratio:.2f} | {'yes' if ok else 'NO'} |", flush=True)
    print(f"\n{wrong} wrong verdict(s) of the kit")


if __name__ == "__main__":
    main()
