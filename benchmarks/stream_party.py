"""The streamed party phase in rows and across Dask workers: CPU seconds, peak RSS, and how it scales out.

    PYTHONPATH=$PWD python benchmarks/stream_party.py [--rows 45000,450000] [--chunk-rows 100000]
                                                      [--workers 1,2] [--separate] [--t REPS] [--tmp DIR]

Table: the built-in census generator drawing n rows (generated, with known truth; no benchmark data),
its default two-party split, VertiMRF defaults (DPFM), epsilon 1. Each party's columns go to a CSV; the party
reads it with `vertisynth.run.stream.coded_chunks`. Each n and each mode runs in a fresh subprocess (the table is
generated and written by a separate setup process), so the peak RSS (getrusage maxrss) is that run's alone.

Modes, per n: in-process (the parties one after the other, no cluster: the anchor), then one run per worker
count in `--workers` (both parties' chunk work at once on a Dask cluster of that many one-thread workers:
`--separate` starts `dask scheduler` and `dask worker --no-nanny` processes, else a LocalCluster). Printed:

- per-row CPU of the chunk work (each party's first pass: read, code, spill and count pairs, which runs on the
  workers as `code_span` tasks over byte spans of its CSV; then read the spilled rows, bin, encode) in-process,
  and on the workers (the
  workers' process CPU through `client.run`, before and after, over the rows they encoded; without what idle
  workers cost, measured over 5 s before; and the tasks' own threads alone), and their ratios;
- per party and pass, the party process's CPU (pass 1 reads and codes the file and counts the pairs, on a
  cluster only submitting the span tasks and merging their counts; the
  next passes count marginals for the local fit; the last is the encoding), and the serial fraction: the
  party process's CPU outside the encoding over the whole CPU;
- wall time and speed-up of each worker count against the in-process run and against 1 worker;
- the Amdahl projection at 14 against 2 workers from the measured CPU seconds, at n and at `--project-rows`
  (passes and encoding scaled linearly, the fits kept), with the worker's per-row CPU ratio of the run with
  the fewest workers (idle workers' CPU taken out): before (the parties in turn, each party's first pass,
  counting passes and fits, then its encoding in chunk_rows tasks) and now (both parties at once, each
  party's encoding from its first spilled chunk on: T(W) = max(P / W, the party process's own CPU) + the
  first chunk's read + one task), the party process's own CPU summed over the parties (one process, as
  here) or the slower party's (a process per party); a projection, not a 14-worker measurement;
- the messages' digest of each mode against the in-process one (the quality check: the same bits);
- each cluster run's timeline (seconds from the party phase's start): per party its CSV's byte layout (here,
  before any span task), its first pass's end, its counting passes' end, the waits for the encoding; from Dask's
  task stream each kind of task's count and seconds, the workers' first task and last end, and their idle
  worker-seconds at the start, between tasks and in the tail; and the measured parallel efficiency of each
  worker count against the fewest (T(w0) w0 / (T(w) w), same rows).

`--summary FILE` prints the same for a file of `--one` lines (what a script on a lent machine collects);
`--plan-workers W` cuts the tasks as for W workers on the workers there are (W's task count, paired on 2 cores).

Every pass's end is logged to stderr (party, pass, CPU and wall so far), so a run that does not finish still
shows its cost. `--t` sets DPFM's repetitions (default: the encoder's default).
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
    """A chunk stream that logs every pass's end (stderr) and keeps each pass's CPU and wall seconds."""

    def __init__(self, chunks, party: str, t0: tuple[float, float]):
        self.chunks, self.party, self.t0, self.passes = chunks, party, t0, 0
        self.layout: tuple[float, float] | None = None   # (wall start, wall end) of the first pass's layout
        self.spans: list[tuple[float, float, float, float]] = []   # (cpu start, cpu end, wall start, wall end)

    def __call__(self):
        return self._pass(self.chunks())

    def columns(self, axes, domain):   # a counting pass over the spill reads only its columns
        got = self.chunks.columns(axes, domain)
        return None if got is None else self._pass(got)

    def _pass(self, chunks):
        self.passes += 1
        c, w = time.process_time(), time.perf_counter()
        i = -1
        for i, got in enumerate(chunks):
            yield got
        self.spans.append((c, time.process_time(), w, time.perf_counter()))
        self._log(f"end, {i + 1} chunks")

    def counted_spans(self, client, plan):   # the first pass on the workers (byte spans of the CSV)
        w = time.perf_counter()
        got = self.chunks.counted_spans(client, plan)   # the byte layout, here, before any span task is queued
        if self.layout is None:   # later passes ask too (and get None: the rows are spilled)
            self.layout = (w, time.perf_counter())
        return None if got is None else self._pass(got)

    def slices(self, rows: int):   # the workers read the spilled rows themselves
        return self.chunks.slices(rows)

    def live_slices(self, rows: int):   # ... from the first pass on
        return self.chunks.live_slices(rows)

    def _log(self, what: str) -> None:
        print(f"[{self.party} pass {self.passes} {what}] cpu {time.process_time() - self.t0[0]:.1f} s "
              f"wall {time.perf_counter() - self.t0[1]:.1f} s load {os.getloadavg()[0]:.1f}",
              file=sys.stderr, flush=True)

    def close(self):
        self.chunks.close()


class _EncodeClock:
    """CPU and wall seconds of the encoders' chunk maps in this process (`ChunkJob.run_local` in-process,
    `run_cluster` with a cluster: there its CPU is this process's share, submitting and merging)."""

    def __init__(self):
        from vertisynth.plugins.encoders.chunked import ChunkJob
        self.cpu = self.wall = 0.0
        self.calls: list[tuple[float, float]] = []   # (wall start, wall end) of each call
        for name in ("run_local", "run_cluster"):
            inner = getattr(ChunkJob, name)
            setattr(ChunkJob, name, self._timed(inner))

    def _timed(self, inner):
        def run(job, *args, **kwargs):
            c, w = time.process_time(), time.perf_counter()
            try:
                return inner(job, *args, **kwargs)
            finally:
                self.cpu += time.process_time() - c
                self.wall += time.perf_counter() - w
                self.calls.append((w, time.perf_counter()))
        return run


def _task_cpu(client) -> float:
    """The workers' map_slice and code_span tasks' own thread CPU seconds so far (core/cluster.py: task_cpu,
    run/stream.py: span_task_cpu)."""
    from vertisynth.core.cluster import task_cpu
    from vertisynth.run.stream import span_task_cpu
    return float(sum(v["cpu_s"] for v in client.run(task_cpu).values())
                 + sum(v["cpu_s"] for v in client.run(span_task_cpu).values()))


def _span_cpu(client) -> float:
    """The workers' code_span tasks' own thread CPU seconds so far (the first pass's share of `_task_cpu`)."""
    from vertisynth.run.stream import span_task_cpu
    return float(sum(v["cpu_s"] for v in client.run(span_task_cpu).values()))


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


def _digest(messages) -> str:
    import hashlib
    return hashlib.sha256(b"".join(m.to_bytes() for m in messages)).hexdigest()[:16]


def one(n: int, chunk_rows: int, tmp: Path, dask_workers: int, t: int = 0, keep_trim: bool = False,
        separate: bool = False, plan_workers: int = 0) -> dict:
    """One mode at n rows: in-process (dask_workers 0, the parties one after the other) or both parties at
    once on a cluster of `dask_workers` workers (`party_phase(..., threads=True)`, as `party_steps` runs them
    when a scheduler is configured)."""
    import pickle

    from vertisynth.plugins.synthesizers.vertimrf.streaming import party_phase
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
        from vertisynth.core.cluster import dask_client
        dask_client(client)   # set up once (thread pools), before the clock starts
        if plan_workers:   # cut the tasks as for that many workers (the same tasks, on the workers there are)
            import vertisynth.core.cluster as cluster_mod
            cluster_mod._workers = lambda _client: plan_workers
    clock = _EncodeClock()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    idle = 0.0
    if client is not None:   # what idle workers cost (heartbeats, the event loop): CPU s per worker-second
        i0, w0 = _worker_cpu(client), time.perf_counter()
        time.sleep(5)
        idle = (_worker_cpu(client) - i0) / (time.perf_counter() - w0) / dask_workers
    wcpu0 = _worker_cpu(client) if client is not None else 0.0
    tasks0 = _task_cpu(client) if client is not None else 0.0
    spans0 = _span_cpu(client) if client is not None else 0.0
    load0 = os.getloadavg()
    cpu, wall = time.process_time(), time.perf_counter()
    streams, codecs = {}, {}
    for p in plan.partition:
        codecs[p.name] = pickle.loads((tmp / f"{p.name}_{n}.codec").read_bytes())
        streams[p.name] = _Logged(coded_chunks(tmp / f"{p.name}_{n}.csv", codecs[p.name], chunk_rows), p.name,
                                  (cpu, wall))
    per_party: dict[str, dict] = {}

    def step(p: str, led):
        c0, e0 = time.process_time(), clock.cpu
        out = syn.party_step_chunks(p, codecs[p].domain, streams[p], led, rngs[p], scheduler=client)
        if client is None:   # one thread: the process CPU is this party's
            per_party[p] = {"cpu_s": time.process_time() - c0, "encode_cpu_s": clock.cpu - e0}
        return out
    epoch = time.time() - (time.perf_counter() - wall)   # the workers' task stream is in time.time()
    if client is not None:
        from distributed import get_task_stream
        with get_task_stream(client) as stream:
            messages = party_phase(step, plan.partition.names, plan.ledger, threads=True)
        tasks = stream.data
    else:
        messages = party_phase(step, plan.partition.names, plan.ledger, threads=False)
        tasks = []
    end = time.perf_counter() - wall
    out = {"n": n, "workers": dask_workers, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
           "encode_cpu_s": clock.cpu, "encode_wall_s": clock.wall, "digest": _digest(messages),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_before_mb": rss0,
           "per_party": per_party, "load_before": load0, "load_after": os.getloadavg(),
           "chunks": sum(-(-n // chunk_rows) for _ in plan.partition), "plan_workers": plan_workers}
    for p, chunks in streams.items():
        spans = chunks.spans
        counting = spans[:-1] if client is None else spans   # in-process the last pass is the encoding
        out.setdefault("passes", {})[p] = {
            "first_pass_cpu_s": counting[0][1] - counting[0][0] if counting else 0.0,
            "counting_passes": max(len(counting) - 1, 0),
            "counting_cpu_s": sum(e - b for b, e, _, _ in counting[1:]),
            "first_pass_wall_s": counting[0][3] - counting[0][2] if counting else 0.0}
        if client is None:
            pp = per_party[p]
            pp["serial_cpu_s"] = pp["cpu_s"] - pp["encode_cpu_s"]
            pp["fit_and_rest_cpu_s"] = pp["serial_cpu_s"] - out["passes"][p]["first_pass_cpu_s"] \
                - out["passes"][p]["counting_cpu_s"]
        chunks.close()
    out["timeline"] = _timeline(streams, clock, wall, end, tasks, epoch, dask_workers)
    if client is not None:
        out["worker_cpu_s"] = _worker_cpu(client) - wcpu0
        out["idle_worker_cpu_per_s"] = idle
        out["task_cpu_s"] = _task_cpu(client) - tasks0
        out["span_task_cpu_s"] = _span_cpu(client) - spans0   # of it, the first pass's code_span tasks
        client.close()
        if separate:
            out["cluster"] = _stop_cluster()
    return out


def _timeline(streams: dict, clock: _EncodeClock, wall0: float, end: float, tasks: list, epoch: float,
              workers: int) -> dict:
    """What ran when, in seconds from the party phase's start: per party, the first pass's byte layout (in this
    process, before its span tasks are queued), the first pass's end (its spans all coded), the counting passes'
    end, and the wait for the encoding's result (`run_cluster`); on the workers (Dask's task stream), each
    kind of task's count, seconds and rows, the first task's start and the last one's end, and the workers'
    idle seconds: before their first task (the start), between tasks, after their last one (the last wave and
    what this process does after it)."""
    r = lambda x: round(x - wall0, 3)   # noqa: E731
    parties = {}
    for p, chunks in streams.items():
        sp = chunks.spans
        parties[p] = {"layout": [r(x) for x in chunks.layout] if chunks.layout else None,
                      "first_pass_end": r(sp[0][3]) if sp else None,
                      "counting_end": r(sp[-1][3]) if sp else None}
    waits = sorted(clock.calls)   # one run_cluster / run_local call per party (which is whose: not recorded)
    out = {"phase_s": round(end, 3), "parties": parties, "encode_calls": [[r(a), r(b)] for a, b in waits]}
    if not tasks:
        return out
    kinds: dict[str, dict] = {}
    per_worker: dict[str, list[tuple[float, float]]] = {}
    for t in tasks:
        spans = [(d["start"] - epoch, d["stop"] - epoch) for d in t.get("startstops", ()) if d.get("action") == "compute"]
        if not spans:
            continue
        kind = str(t.get("key", "?")).split("-")[0]
        k = kinds.setdefault(kind, {"n": 0, "s": 0.0, "max_s": 0.0})
        k["n"] += 1
        k["s"] += sum(b - a for a, b in spans)
        k["max_s"] = max(k["max_s"], max(b - a for a, b in spans))
        per_worker.setdefault(str(t.get("worker")), []).extend(spans)
    busy = sum(b - a for v in per_worker.values() for a, b in v)
    first = min(a for v in per_worker.values() for a, _ in v)
    last = max(b for v in per_worker.values() for _, b in v)
    lasts = sorted(max(b for _, b in v) for v in per_worker.values())
    idle_start = sum(min(a for a, _ in v) for v in per_worker.values()) + (workers - len(per_worker)) * end
    idle_tail = sum(end - max(b for _, b in v) for v in per_worker.values())
    out.update({"tasks": {k: {"n": v["n"], "s": round(v["s"], 3), "max_s": round(v["max_s"], 3)}
                          for k, v in kinds.items()},
                "first_task_start": round(first, 3), "last_task_end": round(last, 3),
                "workers_last_end_spread": round(lasts[-1] - lasts[0], 3),
                "busy_s": round(busy, 3), "idle_s": round(workers * end - busy, 3),
                "idle_start_s": round(idle_start, 3), "idle_tail_s": round(idle_tail, 3),
                "idle_between_s": round(workers * end - busy - idle_start - idle_tail, 3)})
    return out


def _timeline_text(r: dict) -> str:
    """One run's timeline (`_timeline`) in a few lines."""
    tl = r.get("timeline")
    if not tl:
        return ""
    lines = [f"      timeline ({r['workers']} workers, s from the phase's start; phase {tl['phase_s']:.2f} s):"]
    for p, v in tl["parties"].items():
        lay = f"layout {v['layout'][0]:.2f}-{v['layout'][1]:.2f}, " if v.get("layout") else ""
        lines.append(f"        {p}: {lay}first pass ends {v['first_pass_end']}, counting passes end {v['counting_end']}")
    if tl.get("encode_calls"):
        lines.append("        the parties' waits for their encoding: " + ", ".join(f"{a:.2f}-{b:.2f}" for a, b in tl["encode_calls"]))
    if "tasks" in tl:
        w = r["workers"]
        lines.append("        tasks: " + ", ".join(f"{k} {v['n']} ({v['s']:.1f} s, {v['s'] / v['n']:.3f} s each, longest "
                                                   f"{v['max_s']:.2f})" for k, v in tl["tasks"].items()))
        lines.append(f"        workers: first task at {tl['first_task_start']:.2f}, last ends {tl['last_task_end']:.2f} "
                     f"(the workers' last ends spread {tl['workers_last_end_spread']:.2f} s); busy {tl['busy_s']:.1f} "
                     f"of {w} x {tl['phase_s']:.2f} s = {tl['busy_s'] / (w * tl['phase_s']):.1%}; idle "
                     f"{tl['idle_s']:.2f} worker-s = start {tl['idle_start_s']:.2f} + between {tl['idle_between_s']:.2f}"
                     f" + tail {tl['idle_tail_s']:.2f}")
    return "\n".join(lines)


def _efficiency_text(runs: list[dict]) -> str:
    """The measured parallel efficiency of each worker count against the fewest: T(w0) w0 / (T(w) w)."""
    runs = sorted(runs, key=lambda r: r["workers"])
    if len(runs) < 2:
        return "  parallel efficiency: needs two worker counts"
    base = runs[0]
    return "\n".join(
        f"  measured parallel efficiency, {r['workers']} against {base['workers']} workers (same rows): wall "
        f"{base['wall_s']:.2f} -> {r['wall_s']:.2f} s, speed-up x{base['wall_s'] / r['wall_s']:.2f}, "
        f"efficiency {base['wall_s'] * base['workers'] / (r['wall_s'] * r['workers']):.1%}; workers' CPU "
        f"{base['worker_cpu_s']:.1f} -> {r['worker_cpu_s']:.1f} s (x{r['worker_cpu_s'] / base['worker_cpu_s']:.3f}), "
        f"the tasks' own threads {base['task_cpu_s']:.1f} -> {r['task_cpu_s']:.1f} s "
        f"(x{r['task_cpu_s'] / base['task_cpu_s']:.3f}); same messages: "
        f"{'yes' if r['digest'] == base['digest'] else 'NO'}" for r in runs[1:])


def summarise(lines: list[str]) -> int:
    """`--summary FILE`: the lines of `--one` runs (JSON), per n: each run, its timeline, the measured parallel
    efficiency, and the workers' per-row CPU against an in-process run's (of the same n, else of another n:
    the chunk work is linear in rows, so per row it compares across n)."""
    runs = [json.loads(x) for x in lines if x.strip().startswith("{")]
    local = {r["n"]: r for r in runs if not r["workers"]}
    digests = {r["n"]: r["digest"] for r in runs if not r["workers"]}
    for n in sorted({r["n"] for r in runs}):
        mine = sorted((r for r in runs if r["n"] == n and r["workers"]), key=lambda r: r["workers"])
        anchor = local.get(n) or (next(iter(local.values())) if local else None)
        per_row = None
        if anchor is not None:
            first = sum(v["first_pass_cpu_s"] for v in anchor["passes"].values())
            per_row = (anchor["encode_cpu_s"] + first) / (anchor["n"] * len(anchor["passes"])) * 1e6
            print(f"n = {anchor['n']:,} per party in-process: wall {anchor['wall_s']:.2f} s, CPU {anchor['cpu_s']:.2f} s, "
                  f"chunk work {per_row:.2f} µs per row, digest {anchor['digest']}" + ("" if anchor["n"] == n else
                                                                                     f" (the anchor for n = {n:,})"))
        for r in mine:
            rows = n * len(r["passes"])
            idle = r["idle_worker_cpu_per_s"] * r["workers"] * r["wall_s"]
            ratios = "" if per_row is None else (
                f"; per-row CPU against in-process x{r['worker_cpu_s'] / rows * 1e6 / per_row:.3f} in all, "
                f"x{(r['worker_cpu_s'] - idle) / rows * 1e6 / per_row:.3f} without idle workers' share, "
                f"x{r['task_cpu_s'] / rows * 1e6 / per_row:.3f} in the tasks' own threads")
            same = "" if n not in digests else f" (in-process: {'same' if digests[n] == r['digest'] else 'DIFFERENT'})"
            print(f"n = {n:,} per party, {r['workers']} workers: wall {r['wall_s']:.2f} s; party process CPU "
                  f"{r['cpu_s']:.2f} s (merging the encoding's results {r['encode_cpu_s']:.2f}); workers CPU "
                  f"{r['worker_cpu_s']:.1f} s, tasks' own threads {r['task_cpu_s']:.1f} s"
                  + (f" (first pass {r['span_task_cpu_s']:.1f})" if "span_task_cpu_s" in r else "")
                  + f"{ratios}; digest "
                  f"{r['digest']}{same}; load {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}")
            print(_timeline_text(r))
        if len(mine) > 1:
            print(_efficiency_text(mine))
    return 0


def _report(n: int, runs: list[dict], parties: int, project: int, chunk_rows: int) -> dict:
    """The scale-out summary of one n from its in-process run and its cluster runs (see the docstring)."""
    local = next(r for r in runs if not r["workers"])
    rows = n * parties
    # the chunk work that the workers take over: each party's first pass (read, code, spill, pair counts:
    # `code_span` tasks) and its encoding (`map_slice` tasks)
    first_local = sum(local["passes"][p]["first_pass_cpu_s"] for p in local["passes"])
    per_row_local = (local["encode_cpu_s"] + first_local) / rows * 1e6
    serial = {p: v["serial_cpu_s"] for p, v in local["per_party"].items()}
    print(f"\nn = {n:,} per party ({parties} parties), in-process: CPU {local['cpu_s']:.2f} s, wall "
          f"{local['wall_s']:.2f} s, load {local['load_before'][0]:.1f} -> {local['load_after'][0]:.1f}")
    for p, v in local["per_party"].items():
        ps = local["passes"][p]
        print(f"  {p:>10}: party CPU {v['cpu_s']:.2f} s = serial {v['serial_cpu_s']:.2f} s (pass 1, read + code + "
              f"pairs {ps['first_pass_cpu_s']:.2f}; {ps['counting_passes']} counting passes "
              f"{ps['counting_cpu_s']:.2f}; fits and the rest {v['fit_and_rest_cpu_s']:.2f}) + encoding "
              f"{v['encode_cpu_s']:.2f} s; serial fraction {v['serial_cpu_s'] / v['cpu_s']:.3f}")
    print(f"  chunk work in-process (first pass {first_local:.2f} + encoding {local['encode_cpu_s']:.2f} CPU s): "
          f"{per_row_local:.2f} µs CPU per row")
    ratio = None
    base1 = None
    for r in sorted((r for r in runs if r["workers"]), key=lambda r: r["workers"]):
        per_row = r["worker_cpu_s"] / rows * 1e6
        idle = r["idle_worker_cpu_per_s"] * r["workers"] * r["wall_s"]
        net = (r["worker_cpu_s"] - idle) / rows * 1e6
        if r["workers"] == min(x["workers"] for x in runs if x["workers"]):
            ratio = net / per_row_local   # the fewest workers: the least contention between them on this machine
        base1 = base1 or (r["wall_s"] if r["workers"] == 1 else None)
        print(f"  {r['workers']} worker(s), parties at once: wall {r['wall_s']:.2f} s (x{local['wall_s'] / r['wall_s']:.2f} "
              f"of in-process" + (f", x{base1 / r['wall_s']:.2f} of 1 worker" if base1 and r["workers"] > 1 else "")
              + f"); party process CPU {r['cpu_s']:.2f} s; workers CPU {r['worker_cpu_s']:.2f} s = {per_row:.2f} µs "
              f"per row (x{per_row / per_row_local:.3f} of in-process), of which idle workers' "
              f"{r['idle_worker_cpu_per_s']:.3f} CPU s a second x wall = {idle:.2f} s; without it {net:.2f} µs per row "
              f"(x{net / per_row_local:.3f}); the tasks' own threads {r['task_cpu_s']:.2f} s = "
              f"{r['task_cpu_s'] / rows * 1e6:.2f} µs per row (x{r['task_cpu_s'] / rows * 1e6 / per_row_local:.3f}); "
              f"same messages: {'yes' if r['digest'] == local['digest'] else 'NO'}; "
              f"load {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}")
        print("      party process per party (first pass: its share, submitting and merging / counting passes): "
              + ", ".join(f"{p} {v['first_pass_cpu_s']:.2f} (wall {v['first_pass_wall_s']:.2f}) / "
                          f"{v['counting_cpu_s']:.2f} s" for p, v in r["passes"].items()))
        print(_timeline_text(r))
    print(_efficiency_text([r for r in runs if r["workers"]]))
    r = ratio or 1.0
    summary = {"n": n, "per_row_us_in_process": per_row_local, "worker_ratio": ratio, "serial_cpu_s": serial}
    for at in sorted({n, project}):
        scale = at / n   # the passes and the encoding are linear in rows; the fits do not grow with them
        first = {p: local["passes"][p]["first_pass_cpu_s"] * scale for p in serial}
        counting = {p: local["passes"][p]["counting_cpu_s"] * scale for p in serial}
        fits = {p: local["per_party"][p]["fit_and_rest_cpu_s"] for p in serial}
        enc = {p: local["per_party"][p]["encode_cpu_s"] * scale * r for p in serial}
        spans = {p: first[p] * r for p in serial}   # the first pass, now on the workers too
        par = sum(enc.values()) + sum(spans.values())
        print(f"  Amdahl projection at {at:,} rows per party ({'the measured n' if at == n else 'passes and encoding scaled'}"
              f"{'' if at == n else ' linearly from n, fits kept'}), a projection from CPU seconds, not a cluster measurement: parallel "
              f"P = {par:.1f} CPU s (in-process first pass and encoding x {r:.3f}, the measured worker ratio)")
        chunks = -(-at // chunk_rows)
        task = {p: enc[p] / at * max(10_000, chunk_rows // 14) for p in serial}   # one task's CPU at 14 workers
        own = {p: first[p] + counting[p] + fits[p] for p in serial}   # before: the party's own work
        left = {p: counting[p] + fits[p] for p in serial}             # now: the first pass is the workers'
        models = {
            # before: the parties in turn, each party's reading, counting and fitting before its encoding, whose
            # tasks were chunk_rows each (a party's last round of chunks leaves workers idle)
            "before (parties in turn)": lambda w: sum(own[p] + -(-chunks // w) * enc[p] / chunks for p in serial),
            # (the two below: each party's first pass as span tasks on the workers, with its encoding)
            # now: both parties at once in one process (their serial work summed: one interpreter), the
            # encoding from each party's first chunk on: the longer of the workers' share and the party
            # process's own work, plus the first chunk's read and one task at the end
            "now, one process for both parties": lambda w: max(par / w, sum(left.values())) + max(
                first[p] / chunks for p in serial) + max(task.values()),
            # each party its own process or machine (the deployment): the slower party's own work
            "now, a process per party": lambda w: max(par / w, max(left.values())) + max(
                first[p] / chunks for p in serial) + max(task.values()),
        }
        for label, t in models.items():
            t2, t14 = t(2), t(14)
            eff = t2 / t14 / 7
            summary[f"{at}: {label}"] = {"T2": t2, "T14": t14, "speedup": t2 / t14, "efficiency": eff}
            print(f"    {label}: T(2) {t2:.1f} s, T(14) {t14:.1f} s, speed-up x{t2 / t14:.2f}, parallel efficiency "
                  f"{eff:.0%} at 14 against 2 workers")
        print("    serial CPU per party (first pass / counting passes / fits): " + ", ".join(
            f"{p} {first[p]:.2f} / {counting[p]:.2f} / {fits[p]:.2f} s" for p in serial))
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="45000,450000")
    ap.add_argument("--chunk-rows", type=int, default=100_000)
    ap.add_argument("--workers", default="1,2", help="worker counts to run on, comma-separated; 0 or '' for none")
    ap.add_argument("--dask", type=int, default=None, help="one worker count (the same as --workers N)")
    ap.add_argument("--t", type=int, default=0, help="DPFM repetitions (default: the encoder's default)")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--keep-trim", action="store_true",
                    help="keep Dask's default MALLOC_TRIM_THRESHOLD_ for the workers (2x slower encoding here)")
    ap.add_argument("--reuse", action="store_true", help="reuse the tables already written in --tmp")
    ap.add_argument("--separate", action="store_true",
                    help="start `dask scheduler` and `dask worker` processes (no nanny) instead of a LocalCluster, "
                         "so the party process's peak RSS is its own")
    ap.add_argument("--project-rows", type=int, default=1_000_000,
                    help="rows per party of the Amdahl projection (the issue's 1M rows per party)")
    ap.add_argument("--plan-workers", type=int, default=0,
                    help="cut the tasks as for this many workers (e.g. 14's tasks on 2 workers: their CPU per task)")
    ap.add_argument("--summary", default=None, metavar="JSONL",
                    help="print the runs of a file of `--one` results (one JSON a line): timelines, efficiency")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--setup", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.summary is not None:
        return summarise(Path(a.summary).read_text().splitlines())
    tmp = Path(a.tmp or tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    if a.setup is not None:
        setup(a.setup, a.chunk_rows, tmp)
        return 0
    if a.one is not None:
        print(json.dumps(one(a.one, a.chunk_rows, tmp, a.mode, a.t, a.keep_trim, a.separate, a.plan_workers)))
        return 0
    workers = [a.dask] if a.dask is not None else [int(w) for w in a.workers.split(",") if w.strip() and int(w)]
    base = None
    for n in [int(x) for x in a.rows.split(",")]:
        if not (a.reuse and list(tmp.glob(f"*_{n}.codec"))):
            s0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, __file__, "--setup", str(n), "--chunk-rows", str(a.chunk_rows),
                            "--tmp", str(tmp)], check=True)
            s1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            print(f"n={n:>10,}  setup (generate, write CSVs) {s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime:.1f}"
                  f" CPU s", flush=True)
        runs = []
        for mode in [0, *workers]:
            res = subprocess.run([sys.executable, __file__, "--one", str(n), "--mode", str(mode), "--chunk-rows",
                                  str(a.chunk_rows), "--t", str(a.t), "--tmp", str(tmp),
                                  *(["--keep-trim"] if a.keep_trim else []), *(["--separate"] if a.separate else [])],
                                 stdout=subprocess.PIPE, text=True, check=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            runs.append(r)
            total = r["cpu_s"] + r.get("worker_cpu_s", 0.0)
            per_row = total / n * 1e9
            if not mode:
                base = base or per_row
            print(f"n={n:>10,}  {'in-process' if not mode else f'{mode} worker(s)'}: CPU {r['cpu_s']:8.2f} s "
                  "(party process)" + (f" + {r['worker_cpu_s']:.2f} s (workers, sum)" if "worker_cpu_s" in r else "")
                  + f"  wall {r['wall_s']:8.2f} s  {per_row:8.0f} ns/row"
                  + (f" (x{per_row / base:.2f} of the first n)" if not mode else "")
                  + f"  peak RSS {r['peak_rss_mb']:.0f} MB (before the party phase {r['rss_before_mb']:.0f} MB)"
                  f"  load {r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}  {json.dumps(r)}", flush=True)
        _report(n, runs, len(runs[0]["passes"]), a.project_rows, a.chunk_rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
