"""PSI and PSU speed and memory (against the targets in docs/alignment.md), and PSI side by side with openmined-psi.

    python benchmarks/alignment.py                 # 100,000 IDs per party, 50% overlap, 2 parties
    python benchmarks/alignment.py --n 20000 --repeats 3 --workers 2

Prints, per protocol: end-to-end seconds (median over repeats), group operations (hash-to-group and
scalar multiplications) per second, the floor (every operation at the one-core anchor rate, spread
over the workers) and the ratio to it, peak traced memory and memory per ID (separate traced runs at n
and n/4: linear in the set sizes). openmined-psi (PyPI, benchmark environment only:
`pip install openmined.psi`) runs the same two sets (client/server, no Bloom filter: exact
intersection) and the ratio vertisynth/openmined is printed; if it is not installed, the script says so.
"""
from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

from vertisynth.plugins.alignment import group
from vertisynth.plugins.alignment.protocol import make_parties, simulate


def id_sets(n: int, overlap: float, seed: int = 0) -> dict[str, list[str]]:
    rng = np.random.default_rng(seed)
    shared = int(n * overlap)
    pool = rng.permutation(2 * n - shared)
    a = pool[:n]
    b = np.concatenate([pool[:shared], pool[n:2 * n - shared]])
    return {"A": [f"user{i}@example.org" for i in rng.permutation(a)],
            "B": [f"user{i}@example.org" for i in rng.permutation(b)]}


def count_ops(protocol: str, sizes: list[int], union: int, inter: int) -> int:
    """Hash-to-group plus scalar multiplications the protocol performs (m = 2)."""
    total, m = sum(sizes), len(sizes)
    if protocol == "psi":
        return total + m * total          # hash + every set blinded by every party
    return total + m * total + m * union + 3 * total  # hash, round 1, round 2, private mapping


def run_ours(protocol: str, ids: dict[str, list[str]], workers: int) -> tuple[float, int]:
    """Wall-clock seconds (no memory tracing: tracemalloc slows every allocation) and the result size."""
    t0 = time.perf_counter()
    res = simulate(make_parties(protocol, ids, np.random.default_rng(1), workers))
    return time.perf_counter() - t0, next(iter(res.values())).n_common


def traced_peak(protocol: str, ids: dict[str, list[str]], workers: int) -> float:
    """Peak traced memory of one run (a separate run: tracing would distort the timings)."""
    tracemalloc.start()
    simulate(make_parties(protocol, ids, np.random.default_rng(1), workers))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def run_openmined(ids: dict[str, list[str]]) -> float | str:
    try:
        from private_set_intersection.python import client as psi_client  # noqa: F401
        import private_set_intersection.python as psi
    except ImportError:
        return "openmined-psi is not installed here (pip install openmined.psi in the benchmark environment)"
    t0 = time.perf_counter()
    c = psi.client.CreateWithNewKey(True)
    s = psi.server.CreateWithNewKey(True)
    setup = s.CreateSetupMessage(1e-9, len(ids["A"]), ids["B"], psi.DataStructure.RAW)
    request = c.CreateRequest(ids["A"])
    response = s.ProcessRequest(request)
    inter = c.GetIntersection(setup, response)
    secs = time.perf_counter() - t0
    assert len(inter) == len(set(ids["A"]) & set(ids["B"]))
    return secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="IDs per party")
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="processes for group operations")
    args = ap.parse_args()
    ids = id_sets(args.n, args.overlap)
    inter = len(set(ids["A"]) & set(ids["B"]))
    union = 2 * args.n - inter
    print(f"two parties, {args.n} IDs each, {inter} shared ({args.overlap:.0%}), union {union}, "
          f"workers {args.workers}, group ristretto255 (libsodium via rbcl)")
    t0 = time.perf_counter()
    pts = group.hash_to_group([f"x{i}" for i in range(20000)], b"bench")
    hash_rate = 20000 / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    group.exp(pts, group.random_scalar(), workers=1)
    mult_rate = 20000 / (time.perf_counter() - t0)
    print(f"anchor (one core): hash-to-group {hash_rate:,.0f}/s, scalar multiplication {mult_rate:,.0f}/s")
    small = {p: v[: args.n // 4] for p, v in ids.items()}
    for proto in ("psi", "psu"):
        times = []
        for _ in range(args.repeats):
            secs, n_common = run_ours(proto, ids, args.workers)
            times.append(secs)
        med = statistics.median(times)
        ops = count_ops(proto, [args.n, args.n], union, inter)
        hashes = 2 * args.n
        # the floor: every group operation at the one-core anchor rate, spread perfectly over the workers
        floor = (hashes / hash_rate + (ops - hashes) / mult_rate) / args.workers
        peak, peak_small = traced_peak(proto, ids, args.workers), traced_peak(proto, small, args.workers)
        print(f"{proto}: {med:.1f} s median of {args.repeats} (target < 30 s: {'met' if med < 30 else 'NOT met'}); "
              f"{ops / med:,.0f} group ops/s ({ops:,} ops; floor at the anchor rate on {args.workers} workers "
              f"{floor:.1f} s, ratio {med / floor:.2f}); result size {n_common}; "
              f"peak traced memory {peak / 2**20:.0f} MiB ({peak / (2 * args.n):.0f} B per ID; "
              f"n/4 run {peak_small / (2 * len(small['A'])):.0f} B per ID)")
        if proto == "psi":
            om = [run_openmined(ids) for _ in range(args.repeats)]
            if isinstance(om[0], str):
                print(f"openmined-psi: {om[0]}")
            else:
                om_med = statistics.median(om)
                print(f"openmined-psi (P-256, C++; client+server in one process): {om_med:.2f} s median; "
                      f"vertisynth/openmined time ratio {med / om_med:.1f}")


if __name__ == "__main__":
    main()
