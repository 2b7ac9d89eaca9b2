"""privmrf's trust-none twin on grid cells, with the reads it takes off its probes swapped (docs/vertical.md, "privmrf
under trust = none, the worst cells"). Reads exact counts no role may read: a measurement of the design only.

    cd <repo> && PYTHONPATH=. python benchmarks/privmrf_none_ablation.py zoo:small-domains/1.6/1,nltcs/0.4/1 \
        none,server,exactR,exactref,exactsel,probe=0.9

Variants: none / server (the twin as it runs); exactR (the R-scores' `dependence` read off the exact binned table),
exactref (refinement's `residual_l1` read off it: main's path; with the pooled reads, trust none scores by
`_pooled_error` and this swap no longer applies), exactsel (both); probe=X (`vertical.probe` X); nullR (the probes' R-scores less their null mean,
NULL_ABOVE_NOISE·√v' per cell); reprobe=S/F (the trust-none second stage, vertical/probes.py: share S of the probes' ρ
re-probes F of the cross-party pairs; off by default, as reprobe=0/0: one stage). Prints twin / central, the central TVD
from docs/lab/vertical_twins_privmrf_tree5b1504f.csv (run from the repository's root), or from a central run of the
cell made once here where that file has none (seeds 2, 3).
NLTCS and Adult from $VERTISYNTH_DATA."""
import argparse
import csv
import os
import sys

import attrs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("VERTISYNTH_DATA")


def _setup():
    global vt, cell_table, S, CentralOracle, Measurement, PrivacyLedger, Budget, central, orig_plan, orig_dep, orig_res
    import vertical_twins as vt
    from twin_setup import cell_table
    import vertisynth.plugins.synthesizers.privmrf.synthesizer as S
    from vertisynth.pgm.oracle import CentralOracle
    from vertisynth.pgm.estimation import Measurement
    from vertisynth.core.privacy import PrivacyLedger, Budget
    central = {(r["dataset"], float(r["epsilon"]), int(r["seed"])): (float(r["central"]), float(r["cpu_central"]))
               for r in csv.DictReader(open("docs/lab/vertical_twins_privmrf_tree5b1504f.csv"))
               if r["method"] == "privmrf" and r["central"]}
    orig_plan, orig_dep, orig_res = S.PrivMRFSynthesizer.plan_for, S.dependence, S.residual_l1
    import vertisynth.vertical.probes as P
    global orig_reprobe
    orig_reprobe = (P.PRIVMRF_REPROBE_SHARE, P.PRIVMRF_REPROBE_FRACTION)


def run(ds, eps, seed, variant):
    import vertisynth.vertical.probes as P
    S.dependence, S.residual_l1 = orig_dep, orig_res
    S.PrivMRFSynthesizer.plan_for = orig_plan
    share, frac = orig_reprobe
    if variant.startswith("reprobe="):
        share, frac = (float(x) for x in variant[8:].split("/"))
    P.PRIVMRF_REPROBE_SHARE = share
    P.PRIVMRF_REPROBE_FRACTION = frac
    trust = "server" if variant == "server" else "none"
    if variant.startswith("probe="):
        x = float(variant[6:])
        def plan_for(self, *a, **k):
            if self.config.vertical is not None:
                object.__setattr__(self, "config", attrs.evolve(self.config, vertical=attrs.evolve(self.config.vertical, probe=x)))
            return orig_plan(self, *a, **k)
        S.PrivMRFSynthesizer.plan_for = plan_for
    if variant == "nullR":   # the probes' R-scores less their null mean (what a pair of no dependence reads)
        from vertisynth.vertical.oracle import NULL_ABOVE_NOISE

        def dep(m):
            r, c = m.values.shape
            return orig_dep(m) - NULL_ABOVE_NOISE * m.std * ((1 - 1 / r) * (1 - 1 / c)) ** 0.5 * r * c
        S.dependence = dep
    if variant in ("exactsel", "exactR", "exactref"):
        real, _ = cell_table(ds, eps, 1e-9, seed, DATA)
        co = CentralOracle(real, PrivacyLedger(Budget(100.0, 1e-9)))
        ex = lambda m: Measurement(m.attributes, co._exact(m.attributes, m.bins), 1e-9, m.bins)
        if variant in ("exactsel", "exactR"):
            S.dependence = lambda m: orig_dep(ex(m))
        if variant in ("exactsel", "exactref"):
            S.residual_l1 = lambda m, e: orig_res(ex(m), e)
    spec = {"dataset": ds, "epsilon": eps, "seed": seed, "method": "privmrf", "trusts": [trust], "delta": 1e-9,
            "marginals": 300, "crypto": "simulated", "iters": None, "data_dir": DATA,
            "central": central.get((ds, eps, seed)), "measure": "he", "release": None}
    r = vt.run_cell(spec)[0]
    central[(ds, eps, seed)] = (r["central"], r["cpu_central"])   # a cell's central run made once
    return r["ratio"]

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cells", help="DATASET/EPSILON/SEED,... e.g. zoo:small-domains/1.6/1,nltcs/0.4/1")
    ap.add_argument("variants", help="comma-separated: none, server, exactR, exactref, exactsel, nullR, probe=X, reprobe=S/F")
    args = ap.parse_args()
    _setup()
    cells = [(c.split("/")[0], float(c.split("/")[1]), int(c.split("/")[2])) for c in args.cells.split(",")]
    for cell in cells:
        out = [f"{v}={run(*cell, v)}" for v in args.variants.split(",")]
        print(*cell, *out, flush=True)
