"""3-way TVD over every triple of the saved runs: the model's own marginals and the sample's.
    python benchmarks/aim_trace/score.py TABLE.npz RUN.npz ..."""
import itertools, sys, numpy as np
z = np.load(sys.argv[1]); codes = z["codes"]; names = list(z["attributes"]); shape = list(z["shape"])
triples = list(itertools.combinations(range(len(names)), 3))
def margs(c):
    out = []
    for t in triples:
        idx = np.ravel_multi_index(tuple(c[:, i] for i in t), [shape[i] for i in t])
        out.append(np.bincount(idx, minlength=int(np.prod([shape[i] for i in t]))) / len(c))
    return np.concatenate(out)
truth = margs(codes)
k = len(triples)
for f in sys.argv[2:]:
    r = np.load(f)
    line = f"{f:<28}"
    if "margs" in r: line += f" model TVD(all triples) {0.5*np.abs(r['margs']-truth).sum()/k:.4f}"
    if "codes" in r: line += f"  sample TVD {0.5*np.abs(margs(r['codes'])-truth).sum()/k:.4f}"
    print(line)
