"""How well DP-computable scores rank a two-party triple's L1 error (aim's twin, docs/vertical.md "aim, fifth pass").

    python benchmarks/aim_trace/triple_scores.py zoo:small-domains|zoo:mixed|nltcs

For every triple over exactly two parties of the dataset's default split, against the independent model of the
exact 1-ways: the triple's L1 error, and as its score (i) the largest of its two cross-party pairs' errors (a lower
bound), (ii) their sum, (iii) half the sum of all three pairs' errors (what the twin scores at the party holding two
of the attributes). Prints each score / the triple's error (median, 10% and 90%) and its rank correlation with the
error. Exact counts: a diagnostic of the score's form, not a DP run. Only NLTCS ($VERTISYNTH_DATA) and the zoo.
"""
import itertools
import os
import sys

import numpy as np

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import make_plan, run


def main(ds: str) -> None:
    name, _, preset = ds.partition(":")
    dparams = {"preset": preset} if name == "zoo" else {"data_dir": os.environ["VERTISYNTH_DATA"]}
    cfg = parse_config({"seed": 0, "budget": {"epsilon": 1, "delta": 1e-9}, "dataset": {"name": name, "params": dparams},
                        "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
    real = run(cfg).real_codes
    owner = {a: p.name for p in make_plan(cfg).partition for a in p.attributes}
    n = real.n

    def l1(c):
        e = np.ones(()) * n
        for a in c:
            e = np.multiply.outer(e, real.counts((a,)).values / n)
        return float(np.abs(real.counts(c).values - e).sum())

    rows = []
    for t in itertools.combinations(real.domain.attributes, 3):
        if len({owner[a] for a in t}) != 2:
            continue
        pairs = list(itertools.combinations(t, 2))
        cross = [l1(p) for p in pairs if owner[p[0]] != owner[p[1]]]
        within = [l1(p) for p in pairs if owner[p[0]] == owner[p[1]]]
        rows.append((l1(t), max(cross), sum(cross), (sum(cross) + within[0]) / 2))
    r = np.array(rows)
    rank = lambda x: np.argsort(np.argsort(x))  # noqa: E731
    print(f"{ds}: {len(r)} two-party triples")
    for j, what in enumerate(["largest cross pair", "cross pairs' sum", "half the three pairs' sum"], 1):
        q = r[:, j] / r[:, 0]
        print(f"  {what:<26} / triple error: median {np.median(q):.2f} ({np.quantile(q, .1):.2f}-"
              f"{np.quantile(q, .9):.2f}), rank correlation {np.corrcoef(rank(r[:, j]), rank(r[:, 0]))[0, 1]:.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "zoo:small-domains")
