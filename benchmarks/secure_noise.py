"""Secure noise cost: OpenDP's exact discrete samplers (OS CSPRNG) against numpy's seeded float samplers.

    python benchmarks/secure_noise.py                  # vectors of 10^4, 10^5 and 10^6 counts
    python benchmarks/secure_noise.py --sizes 100000 --repeats 3

Prints CPU seconds per call (median over repeats) for: numpy Generator.normal (the anchor, the simulation
path), the discrete Gaussian on integer counts, the discrete Gaussian on a float query (2^k grid path) and
the discrete Laplace on integer counts, each with its ratio to the anchor measured in the same run.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from vertisynth.core.noise import discrete_gaussian, discrete_laplace


def cpu(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--rho", type=float, default=0.05)
    args = ap.parse_args()
    discrete_gaussian(np.zeros(10), args.rho)   # import OpenDP once, outside the timings
    rng = np.random.default_rng(0)
    sigma = 1 / np.sqrt(2 * args.rho)
    print(f"{'n':>9} {'numpy normal s':>15} {'dgauss int s':>13} {'x':>7} {'dgauss float s':>15} {'x':>7} "
          f"{'dlaplace s':>11} {'x':>7}")
    for n in args.sizes:
        counts = rng.integers(0, 1000, n).astype(float)
        floats = counts + 0.25
        anchor = max(cpu(lambda: counts + rng.normal(0, sigma, n), args.repeats), 1e-6)
        dg = cpu(lambda: discrete_gaussian(counts, args.rho), args.repeats)
        dgf = cpu(lambda: discrete_gaussian(floats, args.rho, 2.5), args.repeats)
        dl = cpu(lambda: discrete_laplace(counts, np.sqrt(2 * args.rho)), args.repeats)
        print(f"{n:>9} {anchor:>15.4f} {dg:>13.3f} {dg / anchor:>7.0f} {dgf:>15.3f} {dgf / anchor:>7.0f} "
              f"{dl:>11.3f} {dl / anchor:>7.0f}")


if __name__ == "__main__":
    main()
