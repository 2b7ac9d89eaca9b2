"""Where aim's twin under trust = "server" loses to central aim (a diagnostic, not a DP run; docs/vertical.md,
"aim, sixth pass").

    python benchmarks/aim_trace/triple_gap.py --dataset zoo:small-domains --epsilon 0.4 --seed 0 [--csv out.csv]
        [--trace trace.csv] [--variants central,twin,no2p,exact,exact_no2p]

Per cell, the grid's settings (iters 1000, he, crypto simulated, 3-way TVD over 300 marginals, rng 1000 + seed):
  central      central aim; its measured sets counted by how many parties hold them (1, 2, 3)
  twin         the twin as it runs
  no2p         the twin without two-party triples as candidates (main before the fifth pass)
  exact        the twin whose `select` is answered by the central oracle (exact scores, the same ρ per round)
  exact_no2p   both
  truetriple   the twin whose two-party triples score their true error at the party (the rest as the twin)
  exactscores  truetriple, and every cross-party candidate the server scores has its true error: what is left is
               the twin's mechanism (each party's noisy best, then the exponential mechanism at the winning party)
`--trace`: in the twin's run, every round, for every two-party triple scored at a party (`_party_triple`), the
triple's true L1 error against the round's model, its three pairs' true errors, the score the party computes (half
the sum: its pair's exact error plus its cross pairs' released estimates), and whether each pair is already
measured; and every cross-party pair the server scores (rows with an empty `pair_in`: its true error, `cross_released`
its score off the released answers, `cross_pooled` the tenth pass's score of the same answer, `pair_in_measured`
whether it is measured). `--set NAME=VALUE` sets a constant of
vertisynth/vertical/oracle.py for the run (an ablation), `--set aim.NAME=VALUE` one of the aim plugin (e.g.
aim.PROBE_FULL=1: every probe at σ_p, as before the seventh pass; `late_rank.py` summarises a trace). Reads exact
cross-party counts no role may read: a measurement of the design only (docs/vertical.md, "aim, sixth pass"). Only NLTCS and the zoo.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import sys
import time

import numpy as np


class Plain:
    """The vertical oracle seen through a proxy that is not a VerticalOracle: aim then leaves two-party triples out
    of its candidates (the gate reads `isinstance(oracle, VerticalOracle)`), everything else as the twin runs."""

    def __init__(self, inner) -> None:
        self.__dict__["_inner"] = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)


def pooled_above_noise(r: np.ndarray, v: float) -> float:
    """aim's tenth pass (docs/vertical.md; not kept, docs/lab/aim_tenth_pass.diff): E[‖x − e‖₁ | r] for a released
    residual r = y − e (noise variance v a cell) under the prior x − e ~ N(0, τ²) a cell, τ² = max(mean r'² − v', 0)
    over the double-centred cells: each cell's posterior is N(k r', k v'), k = τ²/(τ² + v') (the answer pooled with
    the model's estimate by inverse variance), and E|d| = s √(2/π) exp(−m²/2s²) + |m| erf(|m|/(s√2))."""
    from scipy.special import erf
    if r.ndim == 2:
        r = r - r.mean(axis=0, keepdims=True) - r.mean(axis=1, keepdims=True) + r.mean()
        v *= (1 - 1 / r.shape[0]) * (1 - 1 / r.shape[1])
    tau2 = max(float(np.mean(r * r)) - v, 0.0)
    if tau2 <= 0.0:
        return 0.0
    k = tau2 / (tau2 + v)
    m, s = np.abs(k * r), np.sqrt(k * v)
    return float((s * np.sqrt(2 / np.pi) * np.exp(-m * m / (2 * s * s)) + m * erf(m / (s * np.sqrt(2)))).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="zoo:small-domains")
    ap.add_argument("--epsilon", type=float, default=0.4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--variants", default="central,twin,no2p,exact,exact_no2p")
    ap.add_argument("--csv", default=None, help="append one row per variant")
    ap.add_argument("--trace", default=None, help="append the twin's per-round triple scores")
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA"))
    ap.add_argument("--set", action="append", default=[],
                    help="NAME=VALUE: a constant of vertisynth.vertical.oracle for this run (an ablation); "
                         "aim.NAME=VALUE: one of vertisynth.plugins.synthesizers.aim")
    ap.add_argument("--label", default="", help="a column naming this run's settings")
    args = ap.parse_args()
    import vertisynth.plugins.synthesizers.aim as aim_module
    import vertisynth.vertical.oracle as vo
    for kv in args.set:
        k, _, v = kv.partition("=")
        mod, k = (aim_module, k[4:]) if k.startswith("aim.") else (vo, k)
        if not hasattr(mod, k):
            raise SystemExit(f"--set: {mod.__name__} has no {k}")
        setattr(mod, k, eval(v) if getattr(mod, k) is None else type(getattr(mod, k))(eval(v)))

    from vertisynth.core.interfaces import PlanContext
    from vertisynth.core.privacy import Budget, PrivacyLedger
    from vertisynth.core.registry import default_registry
    from vertisynth.pgm.oracle import CentralOracle
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import build_component, cross_party_measure, make_plan, run
    from vertisynth.vertical import VerticalOracle, party_streams

    reg = default_registry()
    name, _, preset = args.dataset.partition(":")
    dparams = {"preset": preset} if name == "zoo" else {"data_dir": args.data_dir} if args.data_dir else {}
    budget = Budget(args.epsilon, args.delta)
    cfg = parse_config({"seed": args.seed, "budget": {"epsilon": args.epsilon, "delta": args.delta},
                        "dataset": {"name": name, "params": dparams},
                        "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
    real = run(cfg).real_codes
    partition = make_plan(cfg).partition
    owner = {a: p.name for p in partition for a in p.attributes}
    tvd = build_component(reg, "evaluator", "tvd", {"ways": [3], "marginals": 300}, "tvd").instance
    exact_oracle = CentralOracle(real, PrivacyLedger(budget))
    trace_rows: list[dict] = []

    def l1(c, est) -> float:
        x = exact_oracle._exact(tuple(c), None)
        return float(np.abs(x - np.asarray(est, float).reshape(x.shape)).sum())

    def one(variant: str) -> dict:
        params = {"iters": 1000}
        if variant != "central":
            params["vertical"] = {"measure": "he", "trust": "server", "params": {"crypto": "simulated"}}
        comp = build_component(reg, "synthesizer", "aim", params, "aim")
        syn = comp.instance
        ledger = PrivacyLedger(budget)
        ledger.plan(syn.plan(PlanContext(real.domain, partition, budget)))
        rng = np.random.default_rng(args.seed)
        c0 = time.process_time()
        if variant == "central":
            oracle = CentralOracle(real, ledger)
        else:
            oracle = VerticalOracle(partition.views(real), partition, cross_party_measure(reg, comp, partition).instance,
                                    ledger, party_streams(rng, partition.names), "he")
            inner = oracle
            if variant == "exactscores":   # every server-side score exact too (cross pairs): the twin's mechanism
                inner._noisy_score = lambda cand, bins, estimate: l1(cand, estimate) if bins is None else None
            if variant in ("truetriple", "exactscores"):   # a two-party triple's entry scores its true error (not DP: diagnostic)
                real_pt = inner._party_triple

                def true_triple(cand, bins, estimate, weight, offset):
                    v = real_pt(cand, bins, estimate, weight, offset)
                    if v is None:
                        return v
                    p, pair, e_pair, w2, _, b = v
                    # (w/2)(s − o') = w (true − o)  ⇔  o' = s − 2 (true − o)
                    o2 = l1(pair, e_pair) - 2 * (l1(cand, estimate) - offset)
                    return p, pair, e_pair, w2, o2, b
                inner._party_triple = true_triple
            if variant.startswith("exact"):
                oracle.select = CentralOracle(real, ledger).select
            elif variant == "twin" and args.trace:
                real_select = oracle.select
                rnd = [0]

                def pooled(c, e):   # the tenth pass's score on the same state as `cross_released`: paired
                    y, std, maps = inner._best_answer(c, None)
                    ee = np.asarray(e, float).reshape(tuple(len(mp) for mp in maps))
                    for axis, mp in enumerate(maps):
                        ee = vo.bin_sum(ee, axis, mp)
                    return pooled_above_noise(y - ee, std * std)

                def traced(candidates, estimates, weights, offsets, epsilon, pay, rng_, bins=None):
                    rnd[0] += 1
                    measured = [set(m.attributes) for m in syn_meas()]
                    for c, e, w, o in zip(candidates, estimates, weights, offsets):
                        c = tuple(c)
                        if len(c) == 2 and len(inner.parties_of(c)) == 2:   # a cross pair the server scores
                            sc = inner._noisy_score(c, None, e)
                            trace_rows.append({
                                "dataset": args.dataset, "epsilon": args.epsilon, "seed": args.seed,
                                "label": args.label, "round": rnd[0], "triple": "|".join(c),
                                "true": round(l1(c, e), 2), "offset": round(float(o), 2), "weight": float(w),
                                "pair_in": "", "pair_in_measured": int(any(set(c) <= m for m in measured)),
                                "cross1": "", "cross1_measured": "", "cross2": "", "cross2_measured": "",
                                "cross_released": round(sc, 2) if sc is not None else "",
                                "cross_pooled": round(pooled(c, e), 2) if sc is not None else "",
                                "score_half": round(inner._pair_error(c, None, e), 2)
                                if hasattr(inner, "_pair_error") and sc is not None else ""})
                            continue
                        if len(c) != 3 or len(inner.parties_of(c)) != 2 or inner._best_answer(c, None) is not None:
                            continue
                        v = inner._party_triple(c, None, e, float(w), float(o))
                        if v is None:
                            continue
                        p, pair, e_pair, _, o2, _ = v
                        public = 2 * float(o) - o2   # c1 + c2, the cross pairs' released estimates
                        shape = tuple(real.domain.size(a) for a in c)
                        ee = np.asarray(e, float).reshape(shape)
                        pe = {}
                        for keep in itertools.combinations(range(3), 2):
                            sub = tuple(c[i] for i in keep)
                            pe[sub] = (l1(sub, ee.sum(axis=tuple(i for i in range(3) if i not in keep))),
                                       any(set(sub) <= m for m in measured))
                        s = pe[pair][0]
                        cross = [(k, v_) for k, v_ in pe.items() if k != pair]
                        trace_rows.append({
                            "dataset": args.dataset, "epsilon": args.epsilon, "seed": args.seed, "label": args.label,
                            "round": rnd[0],
                            "triple": "|".join(c), "true": round(l1(c, ee), 2), "offset": round(float(o), 2),
                            "weight": float(w), "pair_in": round(s, 2), "pair_in_measured": int(pe[pair][1]),
                            "cross1": round(cross[0][1][0], 2), "cross1_measured": int(cross[0][1][1]),
                            "cross2": round(cross[1][1][0], 2), "cross2_measured": int(cross[1][1][1]),
                            "cross_released": round(public, 2), "cross_pooled": "",
                            "score_half": round((s + public) / 2, 2)})
                    return real_select(candidates, estimates, weights, offsets, epsilon, pay, rng_, bins)
                oracle.select = traced
            if variant.endswith("no2p"):
                oracle = Plain(oracle)
        meas_holder: list = []

        def syn_meas():
            return meas_holder

        # the measurements so far: wrap measure so the trace knows which pairs are measured
        base_measure = oracle.measure

        def measure(attributes, pay, rng_, sigma=None, bins=None):
            m = base_measure(attributes, pay, rng_, sigma, bins)
            meas_holder.append(m)
            return m
        oracle.measure = measure
        syn.fit_oracle(oracle, rng)
        sample = syn.sample(None, rng)
        cpu = time.process_time() - c0
        assert ledger.unspent() == []
        chosen = [tuple(m.attributes) for m in syn._measurements]
        k = {1: 0, 2: 0, 3: 0}
        for c in chosen:
            if len(c) == 3:
                k[len({owner[a] for a in c})] += 1
        return {"dataset": args.dataset, "epsilon": args.epsilon, "seed": args.seed, "variant": variant,
                "label": args.label,
                "tvd": round(tvd.evaluate(real, sample, np.random.default_rng(1000 + args.seed))["tvd_3way"], 6),
                "measured": len(chosen), "triples_1p": k[1], "triples_2p": k[2], "triples_3p": k[3],
                "rounds": syn._rounds_run, "anneals": syn._anneals, "cpu": round(cpu, 1)}

    rows = []
    for v in args.variants.split(","):
        r = one(v)
        rows.append(r)
        print(" ".join(f"{k}={val}" for k, val in r.items()), flush=True)
    for path, out in ((args.csv, rows), (args.trace, trace_rows)):
        if path and out:
            new = not os.path.exists(path)
            with open(path, "a", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(out[0]))
                if new:
                    w.writeheader()
                w.writerows(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
