"""The synthetic table's output side at n rows: sample + decode + write synthetic.csv, CPU seconds and peak RSS,
for the two ways a run does it:

  whole   the path before the streamed output: the whole table sampled (`GraphicalModel.sample`, row blocks
          into one code table), decoded at once (`TableCodec.decode`: one DataFrame) and written at once
          (`to_csv`); what the in-memory run still does (decoding in the same blocks, then concatenated)
  blocks  a streamed run's output (`run/stream_out.py: write_in_blocks` over `sample_blocks`): each block
          sampled, decoded and appended to synthetic.csv, its codes spilled for the evaluators' counts
  run-memory, run-stream   (with --modes) a whole run of the census table written as a CSV with its public
          schema, the in-memory run or `stream = true`, with sample_size n and tvd (2- and 3-way, 20 each):
          CPU s of the whole run, peak RSS, and the run's own phase timings (wall seconds)

    PYTHONPATH=$PWD python benchmarks/stream_out.py [--rows 1000000,10000000] [--modes whole,blocks]
                                                    [--block-rows 131072] [--model model.npz]

The model: VertiMRF fitted on the generated census population (`vertisynth/plugins/datasets/census.py`, 20,000
rows, 15 attributes, strings and numbers; VertiMRF defaults but DPFM t = 8,000 to fit faster; epsilon 1, seed 0),
saved once as model.npz in a temporary folder (or --model). Each (mode, n) runs in a fresh subprocess: CPU is
`time.process_time` around sample + decode + write (one run each), peak RSS is getrusage's maxrss of that
process, printed beside its RSS after loading the model. The CSV goes to a temporary folder, removed after.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def fit(path: Path) -> None:
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import execute, make_plan
    cfg = parse_config({"seed": 0, "budget": {"epsilon": 1.0, "delta": 1e-5},
                        "dataset": {"name": "census", "params": {"n": 20000}},
                        "synthesizer": {"use": "vertimrf", "params": {"encoder_params": {"t": 8000}}},
                        "evaluators": []})
    execute(make_plan(cfg)).model.save(path)


def census_csv(folder: Path) -> tuple[Path, dict]:
    """The census population (20,000 rows) as a CSV, with its public schema: what a streamed run reads."""
    from vertisynth.plugins.datasets import census
    # the label "None" would read as a missing cell in the in-memory CSV reader: renamed in the file and schema
    path = folder / "census.csv"
    if not path.exists():
        frame = census.load(census.CensusConfig(n=20000)).frame
        frame["health_insurance"] = frame["health_insurance"].replace({"None": "Uninsured"})
        frame.to_csv(path, index=False)
    schema = {k: {f: v for f, v in c.items() if v is not None} for k, c in census.schema().to_dict().items()}
    cats = schema["health_insurance"]["categories"]
    schema["health_insurance"]["categories"] = ["Uninsured" if c == "None" else c for c in cats]
    return path, schema


def whole_run(folder: Path, n: int, stream: bool, block_rows: int) -> dict:
    """A whole `vertisynth run` of the census CSV (stream = true, or the in-memory run of the same config)
    with sample_size n, writing its outputs: CPU s, peak RSS and the run's own phase timings."""
    from vertisynth.plugins.datasets import census
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import run
    path, schema = census_csv(folder)
    cfg = parse_config({"seed": 0, "budget": {"epsilon": 1.0, "delta": 1e-5}, "stream": stream, "sample_size": n,
                        "sample_block_rows": block_rows,
                        "dataset": {"name": "csv", "params": {"path": str(path), "schema": schema}},
                        "parties": [{"name": p[0], "attributes": list(p[1])} for p in census.PARTIES],
                        "synthesizer": {"use": "vertimrf", "params": {"encoder_params": {"t": 8000}}},
                        "evaluators": [{"use": "tvd", "params": {"ways": [2, 3], "marginals": 20}}]})
    out = Path(tempfile.mkdtemp(prefix="vertisynth-bench-"))
    try:
        c0 = time.process_time()
        result = run(cfg, output_dir=out)
        cpu = time.process_time() - c0
        size = (out / "synthetic.csv").stat().st_size
    finally:
        shutil.rmtree(out)
    t = result.report["timings_seconds"]
    return {"n": n, "mode": "run-stream" if stream else "run-memory", "cpu_s": cpu, "csv_mb": size / 2**20,
            "split": {k: t[k] for k in ("fit", "sample", "decode", "write", "evaluate") if k in t},
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "method": "round", "attributes": len(schema)}


def one(path: Path, n: int, mode: str, block_rows: int) -> dict:
    if mode.startswith("run-"):
        return whole_run(path.parent, n, mode == "run-stream", block_rows)
    from vertisynth.run.model import FittedModel
    from vertisynth.run.stream_out import write_in_blocks
    fm = FittedModel.load(path)
    gm, codec, attrs_ = fm.model, fm.codec, fm.codec.domain.attributes
    gm.clique_probs()   # calibrate before timing
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = Path(tempfile.mkdtemp(prefix="vertisynth-bench-"))
    try:
        rng = np.random.default_rng(1)
        c0 = time.process_time()
        if mode == "whole":
            codes = gm.sample(n, rng, fm.sampling, block_rows).project(attrs_)
            c1 = time.process_time()
            frame = codec.decode(codes, rng)
            c2 = time.process_time()
            frame.to_csv(out / "synthetic.csv", index=False)
            split = {"sample": c1 - c0, "decode": c2 - c1, "write": time.process_time() - c2}
        else:
            blocks = (b.project(attrs_) for b in gm.sample_blocks(n, rng, fm.sampling, block_rows))
            written = write_in_blocks(blocks, codec, rng, out, block_rows, clock=time.process_time)
            written.close()
            split = written.seconds   # CPU seconds of each phase
        cpu = time.process_time() - c0
        size = (out / "synthetic.csv").stat().st_size
    finally:
        shutil.rmtree(out)
    return {"n": n, "mode": mode, "cpu_s": cpu, "split": split, "rss_model_mb": rss0, "csv_mb": size / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "method": fm.sampling,
            "attributes": len(attrs_)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000000")
    ap.add_argument("--modes", default="whole,blocks")
    ap.add_argument("--block-rows", type=int, default=None, help="default: the sampler's SAMPLE_BLOCK_ROWS")
    ap.add_argument("--model", default=None, help="a model.npz to sample from (default: fit one on census)")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="blocks", help=argparse.SUPPRESS)
    a = ap.parse_args()
    from vertisynth.pgm.model import SAMPLE_BLOCK_ROWS
    block = a.block_rows or SAMPLE_BLOCK_ROWS
    if a.one is not None:
        print(json.dumps(one(Path(a.model), a.one, a.mode, block)))
        return 0
    model = Path(a.model) if a.model else Path(tempfile.mkdtemp()) / "model.npz"
    if not model.exists():
        fit(model)
        print(f"model: {model}", flush=True)
    for n in [int(x) for x in a.rows.split(",")]:
        for mode in a.modes.split(","):
            res = subprocess.run([sys.executable, __file__, "--one", str(n), "--mode", mode, "--model", str(model),
                                  "--block-rows", str(block)], stdout=subprocess.PIPE, text=True, check=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            split = ", ".join(f"{k} {v:.1f}" for k, v in r["split"].items())
            loaded = f" (model loaded {r['rss_model_mb']:.0f} MB)" if not mode.startswith("run-") else ""
            print(f"{mode:>6}  n={n:>10,}  CPU {r['cpu_s']:7.2f} s ({split})  peak RSS {r['peak_rss_mb']:6.0f} MB"
                  f"{loaded}  CSV {r['csv_mb']:.0f} MB  [{r['method']}, "
                  f"{r['attributes']} attributes, block {block:,}]", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
