"""`aim` on a saved table with its measurements and model saved (same layout as dpmm_trace.py), or our estimator
on another run's measurements:
    python benchmarks/aim_trace/ours_trace.py aim TABLE.npz OUT.npz SEED T ['{"fit_tolerance": 0}']
    python benchmarks/aim_trace/ours_trace.py fit TABLE.npz OUT.npz SEED T OTHER_RUN.npz [ITERS]"""
import itertools, json, sys, time
import numpy as np
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.core.registry import default_registry
from vertisynth.run.pipeline import build_component
from vertisynth.pgm import estimate
from vertisynth.pgm.estimation import Measurement

mode, data_path, out_path, seed, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
z = np.load(data_path)
names = [str(a) for a in z["attributes"]]; shape = [int(s) for s in z["shape"]]; rho = float(z["rho"])
dom = Domain(names, shape)
real = Dataset(z["codes"], dom)
triples = list(itertools.combinations(names, 3))
def margs(model):
    return np.concatenate([model.marginal(t).values.ravel() / model.total for t in triples])
reg = default_registry()
if mode == "aim":
    params = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    syn = build_component(reg, "synthesizer", "aim", {"rounds": rounds, **params}, "aim").instance
    part = VerticalPartition.from_lists([names]).validate(dom)
    # the ρ of the saved table: a budget whose rho() is that
    class B(Budget):
        def rho(self): return rho
    budget = B(1.0, 1e-9)
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(dom, part, budget)))
    rng = np.random.default_rng(seed)
    c0 = time.process_time()
    syn.fit(VerticalData(part, part.views(real)), ledger, rng)
    out = syn.sample(None, rng)
    cpu = time.process_time() - c0
    meas = syn._measurements
    log = [(w, r) for w, r in syn._filter_log]
    np.savez(out_path, codes=np.asarray(out.codes, np.int64), margs=margs(syn._model),
             ys=np.concatenate([m.values.ravel() for m in meas]), sizes=np.array([m.values.size for m in meas]),
             sigmas=np.array([m.std for m in meas]), projs=np.array([json.dumps(list(m.attributes)) for m in meas]),
             log=np.array(json.dumps(log)), cpu=cpu, total=syn._model.total)
    print("cpu", cpu, "rounds", syn._rounds_run, "anneals", syn._anneals)
else:  # fit measurements from another run with our estimator
    m = np.load(sys.argv[6])
    ys = np.split(m["ys"], np.cumsum(m["sizes"])[:-1])
    meas = []
    for y, s, p in zip(ys, m["sigmas"], m["projs"]):
        attrs = tuple(json.loads(str(p)))
        order = tuple(a for a in names if a in attrs)
        v = y.reshape([dom.size(a) for a in attrs])
        v = np.transpose(v, [attrs.index(a) for a in order])
        meas.append(Measurement(order, v, float(s)))
    iters = int(sys.argv[7]) if len(sys.argv) > 7 else 1000
    res = estimate(dom, meas, iters=iters, max_cells=float("inf"))
    print("iters", res.iterations, "loss", res.losses[-1])
    np.savez(out_path, margs=margs(res.model), total=res.model.total)
