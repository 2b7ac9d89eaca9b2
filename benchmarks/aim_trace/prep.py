"""Save a dataset's coded table and the ρ of (ε, δ=1e-9) for the AIM traces:
    python benchmarks/aim_trace/prep.py nltcs - 0.4 /tmp/nltcs04.npz   (or: zoo small-domains 1.6 OUT)"""
import os, sys
import numpy as np
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run
from vertisynth.core.privacy import Budget
name, preset, eps = sys.argv[1], sys.argv[2], float(sys.argv[3])
dparams = {"preset": preset} if name == "zoo" else {"data_dir": os.environ["VERTISYNTH_DATA"]} if os.environ.get("VERTISYNTH_DATA") else {}
cfg = parse_config({"seed": 0, "budget": {"epsilon": eps, "delta": 1e-9}, "dataset": {"name": name, "params": dparams},
                    "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
real = run(cfg).real_codes
out = sys.argv[4]
np.savez(out, codes=np.asarray(real.codes, np.int64), attributes=np.array(real.domain.attributes), shape=np.array(real.domain.shape), rho=Budget(eps, 1e-9).rho())
print(real.n, real.domain.shape, Budget(eps, 1e-9).rho())
