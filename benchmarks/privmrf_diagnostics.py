"""Why PrivMRF / MST score what they score: oracle experiments on the benchmark data.

    python benchmarks/privmrf_diagnostics.py [--data-dir DIR] [--dataset nltcs] [--eps 0.2,0.8]
                                             [--experiments tree,pairs,privmrf,useful]

All TVDs are 3-way (and 4-way where printed), averaged over 300 random attribute triples, of the *model's*
exact marginals against the data (no sampling error) unless the column says "sample".

  tree     the best possible MST model: a Chow-Liu tree (maximum mutual information) of exact 2-way marginals
           fitted by the engine — what MST (private_pgm) converges to as ε → ∞.
  pairs    all 2-way marginals (DPSyn's measurement set): exact, and with DPSyn's noise (whole budget over all
           pairs) fitted by the engine instead of DPSyn's record synthesis.
  privmrf  PrivMRF as configured (max_marginal_attrs = 6, the reference code's default) and with the earlier
           pairs-and-triples candidates (max_marginal_attrs = 3); for each, its chosen marginal set re-fitted
           without noise (the structural limit) and with fresh noise.
  useful   the usefulness filter (PrivMRF's `useful` option): at each ε, the pairs over the paper's θ-useful cell
           limit, and those the "signal" filter keeps (2(R − z·σ_R) ≥ cells·g, here with the exact R-scores) with their
           ratio 2R / (cells·g): on Adult at ε ≤ 0.4 the θ limit drops education × education-num and other strong
           pairs of large-domain attributes, which is why DPSyn (all pairs) beat the paper's PrivMRF there.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

import networkx as nx
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.mechanisms import gaussian_sigma
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.core.loaded import read_codes_csv, read_domain_json
from vertisynth.plugins.evaluators.tvd import distinct_subsets, marginal_tvd
from vertisynth.pgm import GraphicalModel, Measurement, estimate
from vertisynth.plugins.synthesizers.privmrf.synthesizer import PrivMRFConfig, PrivMRFSynthesizer, r_scores


def load(data_dir: str, name: str) -> Dataset:
    root = Path(data_dir) / name
    sizes = read_domain_json(root / f"{name}.json")
    codes = read_codes_csv(root / f"{name}.csv", sizes)
    return Dataset(codes.to_numpy(np.int64), Domain(list(sizes), list(sizes.values())))


def model_tvd(data: Dataset, model: GraphicalModel, k: int = 3) -> float:
    names = data.domain.attributes
    subsets = [tuple(names[i] for i in s) for s in distinct_subsets(len(names), k, 300, np.random.default_rng(0))]
    return float(np.mean([0.5 * np.abs(model.marginal(s).values / model.total - data.counts(s).values / data.n).sum()
                          for s in subsets]))


def sample_tvd(data: Dataset, synthetic: Dataset, k: int = 3) -> float:
    names = data.domain.attributes
    subsets = distinct_subsets(len(names), k, 300, np.random.default_rng(0))
    return float(np.mean([marginal_tvd(data, synthetic, tuple(names[i] for i in s)) for s in subsets]))


def exact(data: Dataset, attrs_: tuple[str, ...]) -> Measurement:
    return Measurement(attrs_, data.counts(attrs_).values, 1.0)


def tree_oracle(data: Dataset) -> None:
    dom = data.domain
    g = nx.Graph()
    for a, b in itertools.combinations(dom.attributes, 2):
        p = data.counts([a, b]).values / data.n
        q = np.outer(p.sum(1), p.sum(0))
        nz = p > 0
        g.add_edge(a, b, weight=float((p[nz] * np.log(p[nz] / q[nz])).sum()))
    edges = [tuple(sorted(e, key=dom.attributes.index)) for e in nx.maximum_spanning_tree(g).edges]
    res = estimate(dom, [exact(data, (a,)) for a in dom.attributes] + [exact(data, e) for e in edges], iters=3000)
    print(f"tree     Chow-Liu tree, exact 2-way marginals (MST's ε→∞ limit): 3-way {model_tvd(data, res.model):.4f} "
          f"4-way {model_tvd(data, res.model, 4):.4f} ({res.iterations} iterations, final loss {res.losses[-1]:.2g})")


def pairs_oracle(data: Dataset, epsilons: list[float]) -> None:
    dom = data.domain
    pairs = list(itertools.combinations(dom.attributes, 2))
    res = estimate(dom, [exact(data, p) for p in pairs], total=data.n, iters=500)
    print(f"pairs    all {len(pairs)} pairs exact, engine fit: 3-way {model_tvd(data, res.model):.4f} "
          f"4-way {model_tvd(data, res.model, 4):.4f}")
    for eps in epsilons:
        sigma = gaussian_sigma(Budget(eps, 1e-5).rho() / len(pairs))
        rng = np.random.default_rng(1)
        meas = [Measurement(p, data.counts(p).values + rng.normal(0, sigma, dom.project(p).shape), sigma)
                for p in pairs]
        res = estimate(dom, meas, iters=500)
        out = res.model.sample(data.n, np.random.default_rng(2), "round")
        print(f"pairs    ε={eps}: all pairs with DPSyn's noise (σ={sigma:.1f}), engine fit: 3-way "
              f"{model_tvd(data, res.model):.4f}, sample {sample_tvd(data, out):.4f}")


def privmrf_oracle(data: Dataset, epsilons: list[float]) -> None:
    for eps in epsilons:
        for k in (3, 6):
            budget = Budget(eps, 1e-5)
            syn = PrivMRFSynthesizer(PrivMRFConfig(max_marginal_attrs=k))
            ledger = PrivacyLedger(budget)
            ledger.plan(syn.plan_for(data.domain, budget.rho()))
            t0 = time.perf_counter()
            syn.fit_table(data, ledger, np.random.default_rng(1))
            out = syn.sample(None, np.random.default_rng(2))
            sec = time.perf_counter() - t0
            chosen = [m.attributes for m in syn._measurements]
            sizes = np.bincount([len(s) for s in chosen])
            sigma = gaussian_sigma(syn._rho_marg)
            oracle = estimate(data.domain, [exact(data, s) for s in set(chosen)], total=data.n, iters=1000).model
            rng = np.random.default_rng(5)
            noisy = [Measurement(s, data.counts(s).values + rng.normal(0, sigma, data.domain.project(s).shape), sigma)
                     for s in chosen]
            refit = estimate(data.domain, noisy, total=syn._n_hat, iters=1000).model
            print(f"privmrf  ε={eps} max_marginal_attrs={k}: 3-way sample {sample_tvd(data, out):.4f} model "
                  f"{model_tvd(data, syn._model):.4f} | chosen set exact {model_tvd(data, oracle):.4f}, with fresh "
                  f"noise refitted (1000 it.) {model_tvd(data, refit):.4f} | {len(chosen)} marginals, sizes "
                  f"{ {i: int(c) for i, c in enumerate(sizes) if c} }, σ={sigma:.1f}, {sec:.0f}s")
            sys.stdout.flush()


def useful_table(data: Dataset, epsilons: list[float]) -> None:
    dom = data.domain
    pairs = list(itertools.combinations(dom.attributes, 2))
    exact_r = dict(zip(pairs, r_scores(data, pairs)))
    for eps in epsilons:
        budget = Budget(eps, 1e-5)
        syn = PrivMRFSynthesizer(PrivMRFConfig())
        syn.plan_for(dom, budget.rho())
        g = syn._noise_per_cell()
        limit = data.n / (syn.config.theta * g)
        over = [p for p in pairs if dom.project(p).size() > limit]
        kept = [(p, 2 * exact_r[p] / (dom.project(p).size() * g)) for p in over
                if syn._useful_pair(p, dom.project(p).size(), limit, exact_r)]
        kept.sort(key=lambda t: -t[1])
        print(f"useful   ε={eps}: θ limit {limit:.0f} cells (g={g:.1f}); {len(over)} of {len(pairs)} pairs over it; "
              f"signal keeps {len(kept)}: " + ", ".join(f"{'×'.join(p)} ({dom.project(p).size()} cells, 2R/(cells·g) "
                                                         f"{r:.2f})" for p, r in kept))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--dataset", default="nltcs")
    ap.add_argument("--eps", default="0.2,0.8")
    ap.add_argument("--experiments", default="tree,pairs,privmrf")
    args = ap.parse_args()
    data = load(args.data_dir, args.dataset)
    epsilons = [float(e) for e in args.eps.split(",")]
    todo = args.experiments.split(",")
    if "tree" in todo:
        tree_oracle(data)
    if "pairs" in todo:
        pairs_oracle(data, epsilons)
    if "useful" in todo:
        useful_table(data, epsilons)
    if "privmrf" in todo:
        privmrf_oracle(data, epsilons)
    return 0


if __name__ == "__main__":
    sys.exit(main())
