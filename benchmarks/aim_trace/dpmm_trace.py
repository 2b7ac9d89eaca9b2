"""dpmm's AIM with each round's choice logged from outside (AIM.worst_approximated wrapped; none of its code
copied), or dpmm's estimator (FactoredInference, cold, 1000 steps) on another run's measurements. Runs in the dpmm venv
(made as in dpmm_loop.py), with PYTHONPATH at the tree:
    PY=/tmp/aimvenv/bin/python
    $PY benchmarks/aim_trace/dpmm_trace.py aim TABLE.npz OUT.npz SEED T
    $PY benchmarks/aim_trace/dpmm_trace.py fit TABLE.npz OUT.npz SEED T OTHER_RUN.npz
OUT holds the sample, the model's marginals on every triple, the measurements and the per-round log."""
# runs in the dpmm venv: dpmm's AIM with its choices logged from outside (wrapped methods), or dpmm's estimator on given measurements
import itertools, json, sys, time
import numpy as np, pandas as pd
from numpy.random import RandomState
from scipy import sparse
from dpmm.models.aim import AIM
from dpmm.models.base.mbi import FactoredInference, Domain

mode, data_path, out_path, seed, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
z = np.load(data_path)
names = [str(a) for a in z["attributes"]]; shape = [int(s) for s in z["shape"]]; rho = float(z["rho"])
codes = z["codes"]; n = len(codes)
np.random.seed(seed)
triples = list(itertools.combinations(names, 3))

def model_margs(model):
    return np.concatenate([model.project(list(t)).datavector() / model.total for t in triples])

if mode == "aim":
    log = []
    orig = AIM.worst_approximated
    def traced(self, candidates, answers, model, eps, sigma, public=False):
        cl = orig(self, candidates, answers, model, eps, sigma, public)
        log.append({"cl": list(cl), "eps": float(eps), "sigma": float(sigma), "ncand": len(candidates),
                    "model_cells": int(model.size)})
        return cl
    AIM.worst_approximated = traced
    syn = AIM(epsilon=1.0, delta=1e-9, degree=3, max_cells=10**15, n_jobs=1, prng=RandomState(seed), rounds=rounds)
    syn.rho = rho
    syn.set_domain(dict(zip(names, shape)))
    c0 = time.process_time()
    syn.fit(pd.DataFrame(codes, columns=names))
    cpu = time.process_time() - c0
    out = syn.generate(n_records=n)[names].to_numpy()
    meas = syn._measures
    np.savez(out_path, codes=out.astype(np.int64), margs=model_margs(syn.model),
             ys=np.concatenate([np.asarray(y, float) for _, y, _, _ in meas]),
             sizes=np.array([np.asarray(y).size for _, y, _, _ in meas]),
             sigmas=np.array([s for _, _, s, _ in meas]),
             projs=np.array([json.dumps(list(p)) for _, _, _, p in meas]),
             log=np.array(json.dumps(log)), cpu=cpu, total=syn.model.total)
else:  # fit: dpmm's final estimation (cold, 1000 iters) on the measurements in data_path's companion
    m = np.load(sys.argv[6])
    ys = np.split(m["ys"], np.cumsum(m["sizes"])[:-1])
    meas = [(sparse.eye(y.size), y, float(s), tuple(json.loads(str(p)))) for y, s, p in zip(ys, m["sigmas"], m["projs"])]
    eng = FactoredInference(Domain(names, shape), iters=int(sys.argv[7]) if len(sys.argv) > 7 else 1000, prng=RandomState(seed))
    model = eng.estimate(meas)
    out = model.synthetic_data(rows=n).df[names].to_numpy()
    np.savez(out_path, codes=out.astype(np.int64), margs=model_margs(model), total=model.total)
