"""dpmm's AIM loop (its selection, schedule, annealing and noise) with its FactoredInference replaced by our
estimator (mirror descent to a flat loss), the final model fitted and sampled ("round", n rows) by ours. Isolates
the loop + noise source from the estimation (docs/vertical.md, "aim, fourth pass"). Runs in a dpmm venv with
PYTHONPATH at the tree (dpmm pins opendp 0.12, the project wants >= 0.14, so no `pip install -e` there):
    python3 -m venv /tmp/aimvenv && /tmp/aimvenv/bin/pip install dpmm==0.1.9 pluggy attrs cattrs click threadpoolctl joblib
    PYTHONPATH=. /tmp/aimvenv/bin/python benchmarks/aim_trace/dpmm_loop.py TABLE.npz OUTPREFIX T SEEDS opendp|numpy [nocap]
OUTPREFIX_s<seed>.npz: the sample (score with score_bench.py) and the measurements (fit them with dpmm's estimator:
dpmm_trace.py fit). "nocap": the 80 MB size cap off, for tables where it never binds (NLTCS: the same choices, 7x less
CPU: dpmm builds a GraphicalModel per candidate and round to test it)."""
import sys, time
import numpy as np, pandas as pd
from numpy.random import RandomState
import dpmm.models.aim as A
from dpmm.models.base.mbi import Dataset as MData, Domain as MDomain
from vertisynth.core.domain import Domain
from vertisynth.pgm import estimate
from vertisynth.pgm.estimation import Measurement

path, prefix, T, seeds, noise = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(s) for s in sys.argv[4].split(",")], sys.argv[5]
cap_off = len(sys.argv) > 6 and sys.argv[6] == "nocap"
z = np.load(path)
names = [str(a) for a in z["attributes"]]; shape = [int(s) for s in z["shape"]]; rho = float(z["rho"])
dom = Domain(names, shape); codes = z["codes"]; n = len(codes)

def ours(meas):
    out = []
    for Q, y, s, proj in meas:
        proj = tuple(proj); order = tuple(a for a in names if a in proj)
        v = np.asarray(y, float).reshape([dom.size(a) for a in proj])
        out.append(Measurement(order, np.transpose(v, [proj.index(a) for a in order]), float(s)))
    return out

class Proj:
    def __init__(self, v): self.v = v
    def datavector(self, flatten=True): return self.v.ravel()
class Model:
    def __init__(self, m, cliques, mdom): self.m, self.cliques, self.domain = m, cliques, mdom
    def project(self, cl):
        cl = tuple(cl); order = tuple(a for a in names if a in cl)
        v = self.m.marginal(order).values
        return Proj(np.transpose(v, [order.index(a) for a in cl]))
class Engine:
    def __init__(self, mdom): self.mdom = mdom
    def estimate(self, meas):
        res = estimate(dom, ours(meas), iters=1000, max_cells=float("inf"))
        return Model(res.model, [tuple(m[3]) for m in meas], self.mdom)

for seed in seeds:
    if noise == "numpy":
        g = np.random.default_rng(10_000 + seed)
        A.gaussian_noise = lambda sigma, size=None: g.normal(0.0, sigma, size=size)
    syn = A.AIM(epsilon=1.0, delta=1e-9, degree=3, max_cells=10**15, n_jobs=1, prng=RandomState(seed), rounds=T)
    syn.rho = rho
    if cap_off: syn.max_model_size = None   # the 80 MB cap never binds on NLTCS (16 binary attributes): same choices
    mdom = MDomain(names, shape)
    data = MData(pd.DataFrame(codes, columns=names), mdom)
    orig = A.FactoredInference
    A.FactoredInference = lambda *a, **k: Engine(mdom)
    c0 = time.process_time()
    _, meas = syn._fit(data)
    A.FactoredInference = orig
    res = estimate(dom, ours(meas), iters=1000, max_cells=float("inf"))
    out = res.model.sample(n, np.random.default_rng(seed), "round")
    import json
    np.savez(f"{prefix}_s{seed}.npz", codes=np.asarray(out.codes, np.int64), cpu=time.process_time() - c0,
             cliques=np.array([",".join(m[3]) for m in meas]),
             ys=np.concatenate([np.asarray(y, float) for _, y, _, _ in meas]),
             sizes=np.array([np.asarray(y).size for _, y, _, _ in meas]),
             sigmas=np.array([s for _, _, s, _ in meas]), projs=np.array([json.dumps(list(p)) for _, _, _, p in meas]))
    print(seed, len(meas), round(time.process_time() - c0, 1), flush=True)
