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
  * the anchor, the kit's built-in events only as they were before learned events and query-level pairs (single outcomes,
    thresholds on the output or on the linear / clipped discriminants of the raw output; a single
    (ε, δ) point for the Gaussian), measured in the same run, and
  * the kit now: plus the mechanism's feature map, the learned (classifier) event, and claims on the
    curve (`cost=`: the exact Gaussian curve),
and the ratio of the bounds (now / anchor). α = 1e-6, fixed seed, no reruns.
For the Sparse Vector variants whose output distribution is known exactly (cutoff 1: Alg. 1-4) it also prints
the best possible bound: the bound the best event over all outputs would give on the same pairs at the
expected counts of n samples (`vertisynth.testing.power.best_event`), the ceiling of any event search.
`--pair-search` searches, for Alg. 3 and 4 at each claimed ε, a family of pairs beyond StatDP's patterns (m
answers at a moving +1 then one at c moving ±1, audited alone: the least α split) for the best possible
bound, to show whether any such pair would catch them at the level's n.
`--only` keeps the mechanisms whose name contains one of the given strings (e.g. `--only "Alg. 3" "Alg. 4"
--epsilons 0.2 --level thorough`), `--no-anchor` skips the anchor.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from vertisynth.testing.audit import AUDIT_LEVELS, audit
from vertisynth.testing.power import best_event
from vertisynth.testing.zoo import GaussianQueries, SparseVector, benchmark_cases


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


def best_possible(case, n: int) -> float:
    """The best event's bound over the case's pairs (α split as the audit splits it), or nan if unknown."""
    mech = case.mechanism
    if not (isinstance(mech, SparseVector) and mech.variant <= 4 and mech.cutoff == 1):
        return float("nan")
    bounds = []
    for pair in case.pairs:
        edges = mech.value_edges(pair.base, pair.neighbour) if mech.variant == 3 else None
        p, q = mech.output_probabilities(pair.base, edges)[0], mech.output_probabilities(pair.neighbour, edges)[0]
        bounds.append(best_event(p, q, n, n_pairs=len(case.pairs)).epsilon_lb)
    return max(bounds)


def search_pairs(variant: int, epsilon: float, n: int) -> tuple[float, str]:
    """The best possible bound over pairs (m answers at a, moved +1; then one at c, moved ±1), one pair audited."""
    mech = SparseVector(epsilon, variant, threshold=1.0)
    best = (-np.inf, "")
    for m in (1, 2, 3, 5, 9):
        for a in (-5.0, 0.0, 1.0, 5.0, 10.0):
            for c in (-5.0, 0.0, 1.0, 5.0, 10.0, 20.0):
                for dc in (1.0, -1.0):
                    base, nb = np.r_[np.full(m, a), c], np.r_[np.full(m, a + 1), c + dc]
                    edges = mech.value_edges(base, nb) if variant == 3 else None
                    p, q = mech.output_probabilities(base, edges)[0], mech.output_probabilities(nb, edges)[0]
                    lb = best_event(p, q, n).epsilon_lb
                    if lb > best[0]:
                        best = (lb, f"{base.tolist()} vs {nb.tolist()}")
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.7],
                    help="claimed ε (StatDP: 0.2 0.7 1.5); the Gaussian pair runs once, at (1, 1e-5)")
    ap.add_argument("--k", type=int, default=10, help="number of queries")
    ap.add_argument("--level", default="standard", choices=sorted(AUDIT_LEVELS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="+", default=None, help="mechanisms whose name contains one of these")
    ap.add_argument("--no-anchor", action="store_true", help="skip the anchor (the kit before learned events and query-level pairs)")
    ap.add_argument("--pair-search", action="store_true", help="only the best possible bound of Alg. 3, 4 over a "
                    "family of pairs beyond StatDP's patterns")
    args = ap.parse_args()
    if args.pair_search:
        for eps in args.epsilons:
            for variant in (3, 4):
                lb, pair = search_pairs(variant, eps, AUDIT_LEVELS[args.level])
                print(f"Sparse Vector Alg. {variant}, claimed ε = {eps:g}, n = {AUDIT_LEVELS[args.level]}: best possible "
                      f"ε_lb {lb:.3f} on {pair}", flush=True)
        return
    print(f"level {args.level}: {AUDIT_LEVELS[args.level]} fresh samples per side per pair, α = 1e-6, "
          f"k = {args.k} queries, seed {args.seed}\n")
    print("| mechanism | claimed ε | truly DP | anchor verdict | anchor ε_lb | anchor s | kit verdict | kit ε_lb "
          "| kit s | ε_lb ratio | best possible ε_lb | right? |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    wrong = 0
    for eps in args.epsilons:
        for case in benchmark_cases(eps, args.k, gaussian=eps == args.epsilons[0]):
            if args.only and not any(s in case.name for s in args.only):
                continue
            verdict = {True: "pass", False: "VIOLATION"}
            if args.no_anchor:
                anchor = "| — | — | — |"
            else:
                before, t_before = run(case, eps, args.level, args.seed, anchor=True)
                anchor = f"| {verdict[before.passed]} | {before.epsilon_lb:.3f} | {t_before:.1f} |"
            after, t_after = run(case, eps, args.level, args.seed, anchor=False)
            ok = after.passed == case.truly_dp
            wrong += not ok
            ratio = (after.epsilon_lb / before.epsilon_lb if not args.no_anchor and before.epsilon_lb > 0
                     else float("nan"))
            ceiling = best_possible(case, AUDIT_LEVELS[args.level])
            claim = "(1, 1e-5) → curve" if isinstance(case.mechanism, GaussianQueries) else f"{eps:g}"
            print(f"| {case.name} | {claim} | {'yes' if case.truly_dp else 'no'} {anchor} {verdict[after.passed]} | "
                  f"{after.epsilon_lb:.3f} | {t_after:.1f} | {ratio:.2f} | "
                  f"{'—' if ceiling != ceiling else f'{ceiling:.3f}'} | {'yes' if ok else 'NO'} |", flush=True)
    print(f"\n{wrong} wrong verdict(s) of the kit")


if __name__ == "__main__":
    main()
