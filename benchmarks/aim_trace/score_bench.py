"""The runs scored as central_aim_mst.py scores them (300 marginals, rng 1000 + seed; RUN names end in _s<seed>)."""
# the benchmark's metric (central_aim_mst.py): the project's tvd evaluator, 3-way over 300 marginals drawn with rng(1000+seed)
import sys, numpy as np
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.registry import default_registry
from vertisynth.run.pipeline import build_component
z = np.load(sys.argv[1]); dom = Domain([str(a) for a in z["attributes"]], [int(s) for s in z["shape"]])
real = Dataset(z["codes"], dom)
tvd = build_component(default_registry(), "evaluator", "tvd", {"ways": [3], "marginals": 300}, "tvd").instance
for f in sys.argv[2:]:
    seed = int(f.split("_s")[-1].split(".")[0])
    r = np.load(f)
    print(f, seed, round(tvd.evaluate(real, Dataset(r["codes"], dom), np.random.default_rng(1000 + seed))["tvd_3way"], 6), round(float(r["cpu"]), 1))
