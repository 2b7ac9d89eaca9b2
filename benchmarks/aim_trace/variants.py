"""`aim` at small budgets, paired by seed (docs/vertical.md, "aim, fourth pass"): the run as central_aim_mst.py
scores it, and on the same fit: n rows instead of n-hat, the i.i.d. sampler, mbi's final fit (cold, 1000 steps) on
the same measurements; model TVD over all triples. One JSON line per seed appended to OUT:
    python benchmarks/aim_trace/variants.py TABLE.npz T SEEDS OUT.jsonl ['{"iters": 300}']"""
import itertools, json, sys, time
import numpy as np
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.core.registry import default_registry
from vertisynth.run.pipeline import build_component
from vertisynth.pgm import estimate

path, T, seeds, out = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")], sys.argv[4]
params = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
z = np.load(path)
names = [str(a) for a in z["attributes"]]; shape = [int(s) for s in z["shape"]]; rho = float(z["rho"])
dom = Domain(names, shape); real = Dataset(z["codes"], dom); n = real.n
reg = default_registry()
tvd = build_component(reg, "evaluator", "tvd", {"ways": [3], "marginals": 300}, "tvd").instance
triples = list(itertools.combinations(range(len(names)), 3))
def tmarg(c):
    o = []
    for t in triples:
        idx = np.ravel_multi_index(tuple(c[:, i] for i in t), [shape[i] for i in t])
        o.append(np.bincount(idx, minlength=int(np.prod([shape[i] for i in t]))) / len(c))
    return np.concatenate(o)
truth = tmarg(np.asarray(real.codes))
def mtvd(model):
    m = np.concatenate([model.marginal(tuple(names[i] for i in t)).values.ravel() / model.total for t in triples])
    return 0.5 * np.abs(m - truth).sum() / len(triples)
def bench(codes, seed):
    return tvd.evaluate(real, Dataset(codes, dom), np.random.default_rng(1000 + seed))["tvd_3way"]
class B(Budget):
    def rho(self): return rho
f = open(out, "a")
for seed in seeds:
    syn = build_component(reg, "synthesizer", "aim", {"rounds": T, **params}, "aim").instance
    part = VerticalPartition.from_lists([names]).validate(dom)
    budget = B(1.0, 1e-9); ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(dom, part, budget)))
    rng = np.random.default_rng(seed)
    c0 = time.process_time()
    syn.fit(VerticalData(part, part.views(real)), ledger, rng)
    s = syn.sample(None, rng); cpu = time.process_time() - c0
    row = {"seed": seed, "bench": bench(s.codes, seed), "model_all": mtvd(syn._model), "cpu": cpu, "nhat": syn._n_hat}
    r2 = np.random.default_rng(seed + 777)
    row["bench_n"] = bench(syn._model.sample(n, r2, "round").codes, seed)
    r2 = np.random.default_rng(seed + 777)
    row["bench_sample"] = bench(syn._model.sample(n, r2, "sample").codes, seed)
    cold = estimate(dom, syn._measurements, iters=1000, max_cells=float("inf"))
    row["cold_model_all"] = mtvd(cold.model); row["cold_iters"] = cold.iterations
    r2 = np.random.default_rng(seed + 777)
    row["cold_bench_n"] = bench(cold.model.sample(n, r2, "round").codes, seed)
    row["meas"] = len(syn._measurements)
    print(json.dumps(row), flush=True); f.write(json.dumps({"table": path, "T": T, "params": params, **row}) + "\n"); f.flush()
