"""The streamed party phase in rows: CPU seconds and peak RSS of one party's `party synth --csv` work
(local PrivMRF from counts summed over chunks, value distributions, DPFM over chunks) at n rows, per-row
cost against the first n (the anchor, 1.0 = linear), and optionally the same through a Dask LocalCluster.

    PYTHONPATH=$PWD python benchmarks/stream_party.py [--rows 45000,450000] [--chunk-rows 100000]
                                                      [--dask WORKERS] [--tmp DIR]

Table: the built-in census generator drawing n rows (generated, with known truth; no benchmark data),
its default two-party split, VertiMRF defaults (DPFM), epsilon 1. Each party's columns go to a CSV;
the party reads it with `vertisynth.run.stream.coded_chunks`. Each n runs in a fresh subprocess, so the
peak RSS (getrusage maxrss) is that n's party phase alone (the table is generated and written
by a separate setup process); CPU is process CPU seconds (`time.process_time`), summed over
the parties; with --dask, the workers' CPU is not in it (wall seconds are printed too).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _plan(n: int, chunk_rows: int):
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import make_plan
    return make_plan(parse_config({"seed": 0, "budget": {"epsilon": 1.0, "delta": 1e-5},
                                   "dataset": {"name": "census", "params": {"n": n}},
                                   "synthesizer": {"use": "vertimrf",
                                                   "params": {"encoder_params": {"chunk_rows": chunk_rows}}}}))


def setup(n: int, chunk_rows: int, tmp: Path) -> None:
    """Generate the table, write each party's CSV and its fitted codec (a separate process: the generator
    holds the whole table, the measured party process never does)."""
    import pickle

    from vertisynth.core.encoding import TableSchema
    plan = _plan(n, chunk_rows)
    frame = plan.source.load().frame
    for p in plan.partition:
        own = list(p.attributes)
        frame[own].to_csv(tmp / f"{p.name}_{n}.csv", index=False)
        codec = TableSchema(tuple(c for c in plan.source.schema.columns if c.name in own)).fit(
            frame[own], plan.ledger, np.random.default_rng(0))
        (tmp / f"{p.name}_{n}.codec").write_bytes(pickle.dumps(codec))


def one(n: int, chunk_rows: int, tmp: Path, dask_workers: int) -> dict:
    import pickle

    from vertisynth.run.stream import coded_chunks
    plan = _plan(n, chunk_rows)
    syn = plan.synthesizer.instance
    key_rng, rngs = syn.party_rngs(np.random.default_rng(1))
    syn.agree_keys(key_rng)
    client = None
    if dask_workers:
        from distributed import Client, LocalCluster
        client = Client(LocalCluster(n_workers=dask_workers, threads_per_worker=1, dashboard_address=None))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu, wall = time.process_time(), time.perf_counter()
    for p in plan.partition:
        codec = pickle.loads((tmp / f"{p.name}_{n}.codec").read_bytes())
        syn.party_step_chunks(p.name, codec.domain, coded_chunks(tmp / f"{p.name}_{n}.csv", codec, chunk_rows),
                              plan.ledger, rngs[p.name], scheduler=client)
    out = {"n": n, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_before_mb": rss0}
    if client is not None:
        client.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="45000,450000")
    ap.add_argument("--chunk-rows", type=int, default=100_000)
    ap.add_argument("--dask", type=int, default=0, help="run the encoding on a LocalCluster of this many workers")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--setup", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    tmp = Path(a.tmp or tempfile.mkdtemp())
    if a.setup is not None:
        setup(a.setup, a.chunk_rows, tmp)
        return 0
    if a.one is not None:
        print(json.dumps(one(a.one, a.chunk_rows, tmp, a.dask)))
        return 0
    base = None
    for n in [int(x) for x in a.rows.split(",")]:
        subprocess.run([sys.executable, __file__, "--setup", str(n), "--chunk-rows", str(a.chunk_rows),
                        "--tmp", str(tmp)], check=True)
        res = subprocess.run([sys.executable, __file__, "--one", str(n), "--chunk-rows", str(a.chunk_rows),
                              "--dask", str(a.dask), "--tmp", str(tmp)], capture_output=True, text=True, check=True)
        r = json.loads(res.stdout.strip().splitlines()[-1])
        per_row = r["cpu_s"] / n * 1e9
        base = base or per_row
        print(f"n={n:>10,}  CPU {r['cpu_s']:8.2f} s  wall {r['wall_s']:8.2f} s  {per_row:8.0f} ns/row "
              f"(x{per_row / base:.2f} of the first n)  peak RSS {r['peak_rss_mb']:.0f} MB "
              f"(before the party phase {r['rss_before_mb']:.0f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
