"""Sampling the synthetic table in rows: CPU seconds and peak RSS of drawing n records from one fitted model,
per-row cost against the first n (1.0 = linear), for three ways of drawing:

  old     the one-shot draw over all n records (`GraphicalModel._sample_once`, the sampler before blocks:
          every step permutes n records, int64 codes)
  table   `GraphicalModel.sample(n)`: row blocks of `--block-rows`, the table held in the smallest code type
  blocks  `GraphicalModel.sample_blocks(n)`: the same blocks, nothing held (what a streamed writer does)

    PYTHONPATH=$PWD python benchmarks/sampling.py [--rows 45222,450000,4500000] [--block-rows 131072]
                                                  [--modes old,table,blocks] [--model model.npz]
                                                  [--method sample|round]

The model: VertiMRF fitted on Adult (45,222 rows, from the shared data folder or $VERTISYNTH_DATA; VertiMRF
defaults but DPFM t = 8,000 to fit faster, epsilon 1, seed 0), saved once as model.npz in a temporary folder (or
--model). Its sampling method is the synthesizer's ("round" for VertiMRF). Each (mode, n) runs in a fresh
subprocess: the CPU is `time.process_time` around the draw (the median of several draws at small n), the peak
RSS is getrusage's maxrss of that process, printed beside its RSS after loading the model (so the draw's own
peak is the difference).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DATA = os.environ.get("VERTISYNTH_DATA") or next(
    (str(p) for p in (Path(__file__).resolve().parents[2] / "shared" / "data",) if (p / "adult").is_dir()), "")


def fit(path: Path) -> None:
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import execute, make_plan
    cfg = parse_config({"seed": 0, "budget": {"epsilon": 1.0, "delta": 1e-5},
                        "dataset": {"name": "adult", "params": {"data_dir": DATA}},
                        "synthesizer": {"use": "vertimrf", "params": {"encoder_params": {"t": 8000}}},
                        "evaluators": []})
    result = execute(make_plan(cfg))
    result.model.save(path)


def one(path: Path, n: int, mode: str, block_rows: int, repeat: int, method: str | None) -> dict:
    from vertisynth.run.model import FittedModel
    fm = FittedModel.load(path)
    fm.sampling = method or fm.sampling
    gm = fm.model
    gm.clique_probs()   # calibrate before timing: the draw alone is measured
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rng = np.random.default_rng(1)
    times = []
    for _ in range(repeat):
        c0 = time.process_time()
        if mode == "old":
            codes = gm._sample_once(n, rng, fm.sampling)
            check = int(codes[:, 0].sum())
        elif mode == "table":
            codes = gm.sample(n, rng, fm.sampling, block_rows).codes
            check = int(codes[:, 0].sum())
        else:
            check = 0
            for part in gm.sample_blocks(n, rng, fm.sampling, block_rows):
                check += int(part.codes[:, 0].sum())
        times.append(time.process_time() - c0)
        codes = None
    cpu = float(np.median(times))
    cells = int(sum(gm.domain.project(c).size() for c in gm.tree.cliques))
    return {"n": n, "mode": mode, "cpu_s": cpu, "rss_model_mb": rss0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "repeats": repeat, "method": fm.sampling, "attributes": len(gm.domain), "model_cells": cells, "check": check}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="45222,450000,4500000")
    ap.add_argument("--modes", default="old,table,blocks")
    ap.add_argument("--block-rows", type=int, default=None, help="default: the sampler's SAMPLE_BLOCK_ROWS")
    ap.add_argument("--model", default=None, help="a model.npz to sample from (default: fit one on Adult)")
    ap.add_argument("--method", choices=["sample", "round"], default=None,
                    help="sampling method (default: the model's, 'round' for VertiMRF)")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="table", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=None, help="draws per (mode, n), median CPU (default: about "
                    "4.5M rows' worth, at most 9)")
    a = ap.parse_args()
    from vertisynth.pgm.model import SAMPLE_BLOCK_ROWS
    block = a.block_rows or SAMPLE_BLOCK_ROWS
    if a.one is not None:
        print(json.dumps(one(Path(a.model), a.one, a.mode, block, a.repeat, a.method)))
        return 0
    model = Path(a.model) if a.model else Path(tempfile.mkdtemp()) / "model.npz"
    if not model.exists():
        if not (Path(DATA) / "adult").is_dir():
            print(f"Adult not found under {DATA!r} (set VERTISYNTH_DATA)", file=sys.stderr)
            return 2
        fit(model)
        print(f"model: {model}", flush=True)
    base: dict[str, float] = {}
    for mode in a.modes.split(","):
        for n in [int(x) for x in a.rows.split(",")]:
            res = subprocess.run([sys.executable, __file__, "--one", str(n), "--mode", mode, "--model", str(model),
                                  "--block-rows", str(block), *(["--method", a.method] if a.method else []), "--repeat",
                                  str(a.repeat or min(9, max(1, 4_500_000 // n)))], stdout=subprocess.PIPE, text=True, check=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            per_row = r["cpu_s"] / n * 1e9
            base.setdefault(mode, per_row)
            print(f"{mode:>6}  n={n:>10,}  CPU {r['cpu_s']:7.2f} s  {per_row:6.0f} ns/row "
                  f"(x{per_row / base[mode]:.2f} of the first n, median of {r['repeats']})  peak RSS {r['peak_rss_mb']:6.0f} MB "
                  f"(model loaded {r['rss_model_mb']:.0f} MB)  [{r['method']}, {r['attributes']} attributes, "
                  f"{r['model_cells']:,} cells, block {block:,}]", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
