"""How a machine's per-process CPU rate falls when k processes compute at once: the ceiling of any scale-out on it.

    PYTHONPATH=$PWD python benchmarks/cpu_contention.py [--procs 1,2,14] [--work 3] [--workloads kernel,aes,stream]

Each k in `--procs` starts k processes (forked), lets them pass a barrier together, and has each run the same fixed
work; each reports its own CPU seconds (time.process_time). Printed per workload and k: the median CPU seconds per
process, and its ratio to the smallest k's. A ratio above 1 with no shared data between the processes is the
machine's (vCPUs that are hyper-threads of fewer physical cores on the host, an all-core clock below the few-core
one, shared caches and memory bandwidth), not the program's: a worker count's per-row CPU cannot beat it.

Workloads (no data read, nothing shared between the processes):

- `kernel`: the DPFM encoder's sketch kernel (`sketch_maxima`, γ = 1, floor 12: the sparse kernel the streamed
  census party runs at the default t = 32,000) over a fixed block of generated rows, i.e. a worker's per-row work;
- `aes`: AES-256-CTR over a 256 KiB buffer (cache-resident: compute alone);
- `stream`: sums over a 256 MiB array (memory bandwidth alone).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import numpy as np


def _kernel(work: float) -> None:
    from vertisynth.core.dataset import Dataset
    from vertisynth.core.domain import Domain
    from vertisynth.plugins.encoders.dpfm import sketch_maxima
    rng = np.random.default_rng(0)
    n = int(20000 * work)
    dom = Domain(("a", "b", "c"), (16, 9, 40))
    view = Dataset(np.stack([rng.integers(0, s, n) for s in dom.shape], axis=1), dom)
    sketch_maxima(b"\x07" * 32, view, np.arange(n), 32_000, 1.0, 512, floor=12)


def _aes(work: float) -> None:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    buf = bytes(256 * 1024)
    enc = Cipher(algorithms.AES(b"\x01" * 32), modes.CTR(b"\x00" * 16)).encryptor()
    for _ in range(int(12000 * work)):
        enc.update(buf)


def _stream(work: float) -> None:
    a = np.ones(32 * 2**20)   # 256 MiB of float64
    for _ in range(int(20 * work)):
        a.sum()


WORKLOADS = {"kernel": _kernel, "aes": _aes, "stream": _stream}


def _one(name: str, work: float, barrier, out) -> None:
    barrier.wait()
    c, w = time.process_time(), time.perf_counter()
    WORKLOADS[name](work)
    out.put((time.process_time() - c, time.perf_counter() - w))


def measure(name: str, k: int, work: float) -> tuple[float, float]:
    """(median CPU s, median wall s) of k processes running the same work at once."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_one, args=(name, work, barrier, out)) for _ in range(k)]
    for p in procs:
        p.start()
    got = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return statistics.median(c for c, _ in got), statistics.median(w for _, w in got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", default="1,2,14", help="process counts, comma-separated (the first is the anchor)")
    ap.add_argument("--work", type=float, default=3.0, help="work per process (1 = about 1 CPU s on a fast core)")
    ap.add_argument("--workloads", default="kernel,aes,stream", help=f"comma-separated, of {sorted(WORKLOADS)}")
    args = ap.parse_args()
    ks = [int(x) for x in args.procs.split(",")]
    print(f"{'workload':8} {'procs':>5} {'CPU s / process':>16} {'wall s':>8} {'ratio':>7}")
    for name in args.workloads.split(","):
        if name not in WORKLOADS:
            ap.error(f"unknown workload {name!r}; known: {', '.join(sorted(WORKLOADS))}")
        WORKLOADS[name](0.05)   # imports and first-touch once, before the fork
        anchor = None
        for k in ks:
            cpu, wall = measure(name, k, args.work)
            anchor = anchor or cpu
            print(f"{name:8} {k:5d} {cpu:16.3f} {wall:8.3f} {cpu / anchor:7.3f}", flush=True)


if __name__ == "__main__":
    main()
