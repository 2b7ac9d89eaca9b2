"""Central `aim` on a dataset, stopped at the N+1-th selection: the CPU seconds at each selection (cumulative), the picks,
   and optionally a cProfile dump (docs/synthesizers/aim.md, "Paired per seed, and the cap asked lazily").
    python benchmarks/aim_trace/rounds_cpu.py zoo:wide 1.6 20 [PROFILE_OUT or -] ['{"fit_tolerance": 0.01}']"""
import cProfile
import json
import os
import sys
import time

import numpy as np
from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.core.registry import default_registry
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import build_component, run
from vertisynth.pgm import oracle as orc
ds, eps, N = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
prof = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
params = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
name, _, preset = ds.partition(":")
dparams = {"preset": preset} if name == "zoo" else {"data_dir": os.environ["VERTISYNTH_DATA"]}
cfg = parse_config({"seed": 0, "budget": {"epsilon": eps, "delta": 1e-9}, "dataset": {"name": name, "params": dparams},
                    "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
real = run(cfg).real_codes
reg = default_registry()
syn = build_component(reg, "synthesizer", "aim", params, "aim").instance
part = VerticalPartition.from_lists([list(real.domain.attributes)]).validate(real.domain)
budget = Budget(eps, 1e-9); ledger = PrivacyLedger(budget); ledger.plan(syn.plan(PlanContext(real.domain, part, budget)))
class Stop(Exception): pass
picks = []; times = []
orig = orc.CentralOracle.select
c0 = time.process_time()
def sel(self, cands, *a, **k):
    times.append(time.process_time() - c0); print("round", len(times) - 1, round(times[-1], 1), flush=True)
    if len(times) > N: raise Stop
    i = orig(self, cands, *a, **k); picks.append(cands[i]); return i
orc.CentralOracle.select = sel
pr = cProfile.Profile() if prof else None
if pr: pr.enable()
try:
    syn.fit(VerticalData(part, part.views(real)), ledger, np.random.default_rng(0))
except Stop:
    pass
if pr:
    pr.disable(); pr.dump_stats(prof)
print("cpu", round(time.process_time() - c0, 1), "per-round cum", [round(t, 1) for t in times])
print("picks", picks)
