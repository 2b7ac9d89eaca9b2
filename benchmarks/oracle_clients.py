"""private_pgm and dpsyn on every zoo preset: 3-way TVD and a hash of the synthetic codes, to compare two versions
of the code on the same seeds (run it under each version's PYTHONPATH and diff the outputs).

    python benchmarks/oracle_clients.py [--eps 0.4,1.6] [--n 5000] [--seed 1] [--marginals 100]
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import warnings

from vertisynth.plugins.datasets.zoo import ZOO_PRESETS
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eps", default="0.4,1.6")
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--marginals", type=int, default=100)
    ap.add_argument("--synthesizers", default="private_pgm,dpsyn")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    for preset in ZOO_PRESETS:
        for eps in (float(e) for e in args.eps.split(",")):
            row = []
            for syn in args.synthesizers.split(","):
                cfg = parse_config({"seed": args.seed, "budget": {"epsilon": eps, "delta": 1e-5},
                                    "dataset": {"name": "zoo", "params": {"preset": preset, "seed": args.seed,
                                                                          "n": args.n}},
                                    "synthesizer": {"use": syn},
                                    "evaluators": [{"use": "tvd", "params": {"ways": [3],
                                                                             "marginals": args.marginals}}]})
                res = run(cfg)
                digest = hashlib.sha1(res.synthetic_codes.codes.tobytes()).hexdigest()[:10]
                row.append(f"{syn} {res.metrics['tvd']['tvd_3way']:.4f} {digest}")
            print(f"{preset:<14} {eps:>4} " + "  ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
