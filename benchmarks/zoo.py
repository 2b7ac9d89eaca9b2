"""VertiMRF-FM against centralised PrivMRF and independent columns across the dataset zoo (targets: median <= 1.3x, worst <= 1.6x centralised).

    python benchmarks/zoo.py [--eps 0.4,1.6] [--presets all] [--seeds 1] [--marginals 100] [--n N]
                             [--params JSON] [--methods vertimrf,privmrf,independent] [--jobs 1]

For every zoo preset (vertisynth/plugins/datasets/zoo.py; its default split and record count unless --n) and ε,
prints the 3-way TVD (mean over `--marginals` random 3-way marginals against the table, averaged over seeds) of
each method and the ratios VertiMRF / PrivMRF and independent / PrivMRF, with CPU seconds of the whole run.
Centralised PrivMRF (the parties' columns joined in one place) is the anchor. The last lines give, per ε, the
median and worst VertiMRF / PrivMRF ratio over the presets (targets: median <= 1.3, worst <= 1.6) and the presets
where VertiMRF did not beat independent columns. `--params` is merged into VertiMRF's parameters, to compare a
variant with the defaults on the same seeds. `--jobs N` runs the (preset, ε, method, seed) cells in N processes
(CPU seconds are still per run).
"""
from __future__ import annotations

import argparse
import itertools
import json
from concurrent.futures import ProcessPoolExecutor
import statistics
import sys
import time

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run
from vertisynth.plugins.datasets.zoo import ZOO_PRESETS


def tvd3(preset: str, n: int | None, eps: float, method: str, params: dict, seed: int, marginals: int):
    ds = {"preset": preset, "seed": seed, **({"n": n} if n else {})}
    cfg = parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": 1e-5},
                        "dataset": {"name": "zoo", "params": ds},
                        "synthesizer": {"use": method, "params": params if method == "vertimrf" else {}},
                        "evaluators": [{"use": "tvd", "params": {"ways": [3], "marginals": marginals}}]})
    t0 = time.process_time()
    res = run(cfg)
    return res.metrics["tvd"]["tvd_3way"], time.process_time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eps", default="0.4,1.6")
    ap.add_argument("--presets", default="all", help="comma-separated zoo presets, or 'all'")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--marginals", type=int, default=100)
    ap.add_argument("--n", type=int, default=None, help="records (default: each preset's)")
    ap.add_argument("--params", default=None, help="JSON merged into VertiMRF's parameters")
    ap.add_argument("--methods", default="vertimrf,privmrf,independent")
    ap.add_argument("--jobs", type=int, default=1, help="processes running the cells in parallel")
    args = ap.parse_args()
    presets = list(ZOO_PRESETS) if args.presets == "all" else args.presets.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    params = json.loads(args.params) if args.params else {}
    print(f"{'preset':<17} {'ε':>4} " + " ".join(f"{m:>11}" for m in methods) + f" {'vmrf/priv':>9} {'ind/priv':>9}"
          + "  CPU s (" + ", ".join(methods) + ")")
    ratios: dict[float, list[tuple[str, float]]] = {}
    losses: dict[float, list[str]] = {}
    epsilons = [float(e) for e in args.eps.split(",")]
    cells = list(itertools.product(epsilons, presets, methods, seeds))
    with ProcessPoolExecutor(args.jobs) as pool:   # one process per cell at most; results in the cells' order
        futures = {c: pool.submit(tvd3, c[1], args.n, c[0], c[2], params, c[3], args.marginals) for c in cells}
        for eps in epsilons:
            for preset in presets:
                tvd, sec = {}, {}
                for m in methods:
                    res = [futures[(eps, preset, m, s)].result() for s in seeds]
                    tvd[m] = statistics.mean(r[0] for r in res)
                    sec[m] = statistics.mean(r[1] for r in res)
                line = f"{preset:<17} {eps:>4} " + " ".join(f"{tvd[m]:>11.4f}" for m in methods)
                if "privmrf" in tvd:
                    r_v = tvd["vertimrf"] / tvd["privmrf"] if "vertimrf" in tvd else float("nan")
                    r_i = tvd["independent"] / tvd["privmrf"] if "independent" in tvd else float("nan")
                    line += f" {r_v:>9.3f} {r_i:>9.3f}"
                    ratios.setdefault(eps, []).append((preset, r_v))
                if "vertimrf" in tvd and "independent" in tvd and tvd["vertimrf"] >= tvd["independent"]:
                    losses.setdefault(eps, []).append(preset)
                print(line + "  " + ", ".join(f"{sec[m]:.0f}" for m in methods), flush=True)
    for eps, rs in ratios.items():
        worst = max(rs, key=lambda r: r[1])
        print(f"ε {eps}: VertiMRF / PrivMRF median {statistics.median(r for _, r in rs):.3f}, worst {worst[1]:.3f} "
              f"({worst[0]}); not better than independent on: {', '.join(losses.get(eps, [])) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
