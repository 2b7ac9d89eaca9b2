"""Vertical twins of `aim`, `mst` and `privmrf` against their central runs, in the same run: quality, CPU, bytes.

    python benchmarks/vertical_twins.py [--quick] [--datasets zoo:small-domains,...,nltcs,adult]
        [--methods aim,mst,privmrf] [--epsilons 0.4,1.6] [--seeds 0,1] [--crypto simulated] [--marginals 300]
        [--trust none|server]

For every synthesizer × dataset × ε × seed: the central run (CentralOracle on the joined table) and the vertical
twin (VerticalOracle over the dataset's default party split, cross-party marginals through the `he` measure
at `--trust`: "none", two-sided noise, 2σ² per answer; "server", a non-colluding key holder, σ² per answer at
1/(2σ²) + τ) on the same data and ρ, both scored by the project's `tvd` evaluator (3-way, `--marginals`
random marginals, the same marginals for both). Printed: both TVDs, twin / central, the twin's CPU seconds per
party (its own steps plus its side of the protocol) and for the server (selection bookkeeping and estimation:
the rest of the fit), and the bytes each party would send (the ciphertexts real crypto makes for those layouts;
with crypto = "simulated" the answers are the same tables, computed in plaintext, so the quality columns hold
for real crypto and the CPU columns do not include encryption; under trust = "server" simulated crypto counts no
bytes: "-"). Then the median and worst ratio per synthesizer against the targets for that trust
(none: ≤ 1.10× median, ≤ 1.20× worst; server: ≤ 1.03× median). `--quick`: two zoo presets and NLTCS.
Only NLTCS, Adult (from $VERTISYNTH_DATA) and the generated zoo are used.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ZOO = ["small-domains", "large-domains", "wide", "strong", "weak", "mixed", "small-split", "many-parties"]
QUICK = "zoo:small-domains,zoo:mixed,nltcs"
# the targets, twin / central: (median, worst or None)
TARGETS = {"none": (1.10, 1.20), "server": (1.03, None)}
# mirror-descent steps per fit unless --iters says otherwise (privmrf: its own iters and refine_iters)
ITERS = {"aim": 1000, "mst": 1000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=",".join([f"zoo:{p}" for p in ZOO] + ["nltcs", "adult"]))
    ap.add_argument("--quick", action="store_true", help=f"datasets {QUICK}")
    ap.add_argument("--methods", default="aim,mst")
    ap.add_argument("--epsilons", default="0.4,1.6")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--marginals", type=int, default=300)
    ap.add_argument("--crypto", default="simulated", choices=["simulated", "real"])
    ap.add_argument("--trust", default="none", choices=sorted(TARGETS),
                    help="the twin's cross-party trust: none (two-sided noise) or server (a non-colluding key holder)")
    ap.add_argument("--iters", type=int, default=None,
                    help="mirror-descent steps per fit (both runs; default aim, mst 1000, privmrf its own)")
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA"))
    args = ap.parse_args()
    datasets = QUICK if args.quick else args.datasets

    from vertisynth.core.capabilities import CrossPartyMeasure
    from vertisynth.core.dataset import Dataset
    from vertisynth.core.interfaces import PlanContext
    from vertisynth.core.privacy import Budget, PrivacyLedger
    from vertisynth.core.registry import default_registry
    from vertisynth.pgm.oracle import CentralOracle
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import build_component, cross_party_measure, make_plan, run
    from vertisynth.vertical import VerticalOracle, party_streams

    reg = default_registry()
    ratios: dict[str, list[float]] = {}
    print(f"{'dataset':<19} {'ε':>4} {'seed':>4} {'method':<7} {'central':>8} {'twin':>8} {'ratio':>6} "
          f"{'CPU s central':>13} {'CPU s per party':>24} {'server':>7} {'MB sent per party':>24}")
    for ds in datasets.split(","):
        name, _, preset = ds.partition(":")
        dparams = {"preset": preset} if name == "zoo" else {"data_dir": args.data_dir} if args.data_dir else {}
        for eps in map(float, args.epsilons.split(",")):
            for seed in map(int, args.seeds.split(",")):
                cfg = parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": args.delta},
                                    "dataset": {"name": name, "params": dparams},
                                    "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
                base = run(cfg)
                real = base.real_codes
                partition = make_plan(cfg).partition
                budget = Budget(eps, args.delta)
                tvd = build_component(reg, "evaluator", "tvd", {"ways": [3], "marginals": args.marginals},
                                      "tvd").instance

                def score(syn: Dataset) -> float:
                    return tvd.evaluate(real, syn, np.random.default_rng(1000 + seed))["tvd_3way"]

                for method in args.methods.split(","):
                    out = {}
                    for mode in ("central", "twin"):
                        iters = args.iters if args.iters is not None else ITERS.get(method)
                        params = {"iters": iters} if iters is not None else {}
                        if mode == "twin":
                            params["vertical"] = {"measure": "he", "trust": args.trust,
                                                  "params": {"crypto": args.crypto}}
                        comp = build_component(reg, "synthesizer", method, params, method)
                        syn = comp.instance
                        ledger = PrivacyLedger(budget)
                        ledger.plan(syn.plan(PlanContext(real.domain, partition, budget)))
                        ledger.check_plan()
                        rng = np.random.default_rng(seed)
                        views = partition.views(real)
                        c0 = time.process_time()
                        if mode == "central":
                            syn.fit_oracle(CentralOracle(real, ledger), rng)
                        else:
                            # the measure the pipeline builds from the vertical table (its trust checked there)
                            measure = cross_party_measure(reg, comp, partition).instance
                            assert isinstance(measure, CrossPartyMeasure) and measure.trust == args.trust
                            oracle = VerticalOracle(views, partition, measure, ledger,
                                                    party_streams(rng, partition.names), "he")
                            syn.fit_oracle(oracle, rng)
                        sample = syn.sample(None, rng)
                        cpu = time.process_time() - c0
                        assert ledger.unspent() == []
                        out[mode] = (score(sample), cpu)
                        if mode == "twin":
                            if args.trust == "server":   # the server-trust rounds keep their own costs
                                proto = measure.server_trust.costs
                                sent = ({p: proto.bytes_sent.get(p, 0) / 1e6 for p in partition.names}
                                        if args.crypto == "real" else None)
                            else:
                                proto = measure.costs.get("oracle")
                                sent = {p: getattr(measure, "wire_bytes", {}).get(p, 0) / 1e6
                                        for p in partition.names}
                            party = {p: oracle.party_cpu[p] + (proto.cpu.get(p, 0.0) if proto else 0.0)
                                     for p in partition.names}
                    (tc, cc), (tt, ct) = out["central"], out["twin"]
                    ratios.setdefault(method, []).append(tt / tc)
                    pc = "/".join(f"{v:.1f}" for v in party.values())
                    mb = "/".join(f"{v:.0f}" for v in sent.values()) if sent is not None else "-"
                    print(f"{ds:<19} {eps:>4g} {seed:>4} {method:<7} {tc:>8.4f} {tt:>8.4f} {tt / tc:>6.2f} "
                          f"{cc:>13.1f} {pc:>24} {ct - sum(party.values()):>7.1f} {mb:>24}", flush=True)
    sim = ("bytes: what real crypto would send" if args.trust == "none" else
           "bytes not counted under simulated crypto")
    print(f"\ntrust = {args.trust}, crypto = {args.crypto}" + (f" (quality as real crypto; CPU without encryption; "
                                                             f"{sim})" if args.crypto == "simulated" else ""))
    t_med, t_worst = TARGETS[args.trust]
    for method, r in ratios.items():
        med, worst = float(np.median(r)), float(np.max(r))
        ok = med <= t_med and (t_worst is None or worst <= t_worst)
        print(f"{method}: twin / central over {len(r)} cells: median {med:.2f} (target <= {t_med:.2f}), "
              f"worst {worst:.2f} " + (f"(target <= {t_worst:.2f})" if t_worst is not None else "(no target)")
              + f" -> {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
