"""The streamed party phase in rows: CPU seconds and peak RSS of one party's `party synth --csv` work
(local PrivMRF from counts summed over chunks, value distributions, DPFM over chunks) at n rows, per-row
cost against the first n (the anchor, 1.0 = linear), and optionally the same through a Dask LocalCluster.

    PYTHONPATH=$PWD python benchmarks/stream_party.py [--rows 45000,450000] [--chunk-rows 100000]
                                                      [--dask WORKERS] [--t REPS] [--tmp DIR]

Table: the built-in census generator drawing n rows (generated, with known truth; no benchmark data),
its default two-party split, VertiMRF defaults (DPFM), epsilon 1. Each party's columns go to a CSV;
the party reads it with `vertisynth.run.stream.coded_chunks`. Each n runs in a fresh subprocess, so the
peak RSS (getrusage maxrss) is that n's party phase alone (the table is generated and written
by a separate setup process); CPU is process CPU seconds (`time.process_time`), summed over
the parties; with --dask, the workers' CPU is measured apart (each worker's process CPU before and after,
through `client.run`) and printed beside it, with the wall seconds and the load average over the run.
Every chunk's read is logged to stderr (party, chunk, CPU and wall so far), so a run that does not finish
still shows its per-chunk cost. `--t` sets DPFM's repetitions (default: the encoder's default).
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


def _plan(n: int, chunk_rows: int, t: int = 0):
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import make_plan
    enc = {"chunk_rows": chunk_rows, **({"t": t} if t else {})}
    return make_plan(parse_config({"seed": 0, "budget": {"epsilon": 1.0, "delta": 1e-5},
                                   "dataset": {"name": "census", "params": {"n": n}},
                                   "synthesizer": {"use": "vertimrf", "params": {"encoder_params": enc}}}))


class _Logged:
    """A chunk stream that logs every chunk it yields (stderr): how far a long run got, and at what cost."""

    def __init__(self, chunks, party: str, t0: tuple[float, float]):
        self.chunks, self.party, self.t0, self.passes = chunks, party, t0, 0

    def __call__(self):
        self.passes += 1
        i = -1
        for i, got in enumerate(self.chunks()):
            if i % 20 == 0 and i:
                self._log(f"chunk {i}")
            yield got
        self._log(f"end, {i + 1} chunks")

    def _log(self, what: str) -> None:
        print(f"[{self.party} pass {self.passes} {what}] cpu {time.process_time() - self.t0[0]:.1f} s "
              f"wall {time.perf_counter() - self.t0[1]:.1f} s load {os.getloadavg()[0]:.1f}",
              file=sys.stderr, flush=True)

    def close(self):
        self.chunks.close()


def _worker_cpu(client) -> float:
    """The summed process CPU seconds of the cluster's workers."""
    def cpu():
        import psutil
        t = psutil.Process().cpu_times()
        return t.user + t.system
    return float(sum(client.run(cpu).values()))


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


_CLUSTER: list[subprocess.Popen] = []


def _start_cluster(workers: int, keep_trim: bool, tmp: Path) -> str:
    """`dask scheduler` and `dask worker` processes on 127.0.0.1 (no nanny: nothing sets MALLOC_TRIM_THRESHOLD_
    unless --keep-trim asks for it); the scheduler's address. Stopped by `_stop_cluster`."""
    import atexit
    import shutil
    atexit.register(_stop_cluster)   # also when the party phase fails
    dask_cli = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))
    addr_file = tmp / "scheduler.json"
    addr_file.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    if keep_trim:
        env["MALLOC_TRIM_THRESHOLD_"] = "65536"
    _CLUSTER.append(subprocess.Popen([dask_cli, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                      "--no-dashboard", "--scheduler-file", str(addr_file)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 60
    while not addr_file.exists():
        if time.monotonic() > deadline:
            raise SystemExit("the dask scheduler did not start within 60 s")
        time.sleep(0.2)
    address = json.loads(addr_file.read_text())["address"]
    for _ in range(workers):
        _CLUSTER.append(subprocess.Popen([dask_cli, "worker", address, "--nthreads", "1", "--no-nanny",
                                          "--no-dashboard", "--host", "127.0.0.1"], env=env,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return address


def _stop_cluster() -> dict:
    """Stop the processes `_start_cluster` began; their CPU seconds and peak RSS (MB), by role."""
    import psutil
    out = {}
    for i, proc in enumerate(_CLUSTER):
        try:
            p = psutil.Process(proc.pid)
            cpu = p.cpu_times()
            with open(f"/proc/{proc.pid}/status") as fh:
                hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
            out["scheduler" if i == 0 else f"worker{i}"] = {"cpu_s": cpu.user + cpu.system, "peak_rss_mb": hwm / 1024}
        except (psutil.Error, OSError, StopIteration):
            pass
        proc.terminate()
    for proc in _CLUSTER:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    _CLUSTER.clear()
    return out


def one(n: int, chunk_rows: int, tmp: Path, dask_workers: int, t: int = 0, keep_trim: bool = False,
        separate: bool = False) -> dict:
    import pickle

    from vertisynth.run.stream import coded_chunks
    plan = _plan(n, chunk_rows, t)
    syn = plan.synthesizer.instance
    key_rng, rngs = syn.party_rngs(np.random.default_rng(1))
    syn.agree_keys(key_rng)
    client = None
    if dask_workers:
        import dask
        from distributed import Client, LocalCluster
        if not keep_trim:   # the nanny's MALLOC_TRIM_THRESHOLD_=65536 made the encoder's chunk job cost 2x on a
            # worker (9.0 vs 4.5 CPU s per 100k-row chunk; 5.2 without it): see docs/scale.md, fourth session
            env = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
            env["MALLOC_TRIM_THRESHOLD_"] = None
            dask.config.set({"distributed.nanny.pre-spawn-environ": env})
        if separate:   # a scheduler and workers in processes of their own, as on a real cluster: the party
            # process then holds only its own work (a LocalCluster's scheduler lives in the process that starts it)
            client = Client(_start_cluster(dask_workers, keep_trim, tmp), timeout="60s")
            client.wait_for_workers(dask_workers, timeout=120)
        else:
            client = Client(LocalCluster(n_workers=dask_workers, threads_per_worker=1, dashboard_address=None))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wcpu0 = _worker_cpu(client) if client is not None else 0.0
    load0 = os.getloadavg()
    cpu, wall = time.process_time(), time.perf_counter()
    per_party = {}
    for p in plan.partition:
        codec = pickle.loads((tmp / f"{p.name}_{n}.codec").read_bytes())
        c0 = time.process_time()
        chunks = _Logged(coded_chunks(tmp / f"{p.name}_{n}.csv", codec, chunk_rows), p.name, (cpu, wall))
        syn.party_step_chunks(p.name, codec.domain, chunks, plan.ledger, rngs[p.name], scheduler=client)
        chunks.close()
        per_party[p.name] = time.process_time() - c0
    out = {"n": n, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_before_mb": rss0,
           "per_party_cpu_s": per_party, "load_before": load0, "load_after": os.getloadavg(),
           "chunks": sum(-(-n // chunk_rows) for _ in plan.partition)}
    if client is not None:
        out["worker_cpu_s"] = _worker_cpu(client) - wcpu0
        client.close()
        if separate:
            out["cluster"] = _stop_cluster()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="45000,450000")
    ap.add_argument("--chunk-rows", type=int, default=100_000)
    ap.add_argument("--dask", type=int, default=0, help="run the encoding on a LocalCluster of this many workers")
    ap.add_argument("--t", type=int, default=0, help="DPFM repetitions (default: the encoder's default)")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--keep-trim", action="store_true",
                    help="keep Dask's default MALLOC_TRIM_THRESHOLD_ for the workers (2x slower encoding here)")
    ap.add_argument("--reuse", action="store_true", help="reuse the tables already written in --tmp")
    ap.add_argument("--separate", action="store_true",
                    help="with --dask: start `dask scheduler` and `dask worker` processes (no nanny) instead of a "
                         "LocalCluster, so the party process's peak RSS is its own")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--setup", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    tmp = Path(a.tmp or tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    if a.setup is not None:
        setup(a.setup, a.chunk_rows, tmp)
        return 0
    if a.one is not None:
        print(json.dumps(one(a.one, a.chunk_rows, tmp, a.dask, a.t, a.keep_trim, a.separate)))
        return 0
    base = None
    for n in [int(x) for x in a.rows.split(",")]:
        if not (a.reuse and list(tmp.glob(f"*_{n}.codec"))):
            s0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, __file__, "--setup", str(n), "--chunk-rows", str(a.chunk_rows),
                            "--tmp", str(tmp)], check=True)
            s1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            print(f"n={n:>10,}  setup (generate, write CSVs) {s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime:.1f}"
                  f" CPU s", flush=True)
        res = subprocess.run([sys.executable, __file__, "--one", str(n), "--chunk-rows", str(a.chunk_rows),
                              "--dask", str(a.dask), "--t", str(a.t), "--tmp", str(tmp),
                              *(["--keep-trim"] if a.keep_trim else []), *(["--separate"] if a.separate else [])],
                             stdout=subprocess.PIPE, text=True, check=True)
        r = json.loads(res.stdout.strip().splitlines()[-1])
        total = r["cpu_s"] + r.get("worker_cpu_s", 0.0)
        per_row = total / n * 1e9
        base = base or per_row
        print(f"n={n:>10,}  CPU {r['cpu_s']:8.2f} s (party process)"
              + (f" + {r['worker_cpu_s']:.2f} s (workers, sum)" if "worker_cpu_s" in r else "")
              + f"  wall {r['wall_s']:8.2f} s  {per_row:8.0f} ns/row (x{per_row / base:.2f} of the first n)"
              f"  peak RSS {r['peak_rss_mb']:.0f} MB (before the party phase {r['rss_before_mb']:.0f} MB)"
              f"  load {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}  {json.dumps(r)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
