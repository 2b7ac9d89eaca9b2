"""Secure noise: integer-valued mechanisms sampled exactly from the OS CSPRNG (OpenDP's samplers).

* Discrete Gaussian N_Z(0, σ²) on an integer query of L2 sensitivity Δ is (Δ²/2σ²)-zCDP and discrete
  Laplace with scale b on an integer query of L1 sensitivity Δ₁ is (Δ₁/b)-DP (Canonne, Kamath & Steinke
  2020, Thm 14 and Sec. 2.2): the same costs as their continuous twins, with no floating-point attack.
* A query that is not integer-valued (a float score, a mean) is rounded to the grid
  2^k and noised on that grid (OpenDP's discretised mechanism); rounding moves each coordinate by at
  most 2^k, so OpenDP's privacy map charges Δ + 2^k·√d (L2) or Δ + 2^k·d (L1). k is chosen 2^-20 of
  the way below Δ and σ is calibrated to the inflated sensitivity, so the cost stays exactly the
  charge's and the noise grows by a factor below 1 + 2^-20.
* Every call asks OpenDP's own privacy map whether the measurement fits the charge before it draws.

OpenDP (Rust, samplers over the OS CSPRNG) does the sampling; see docs/privacy.md for why not our own.
"""
from __future__ import annotations

import hashlib
import math
from functools import cache
from types import SimpleNamespace

import numpy as np

from .errors import BudgetError, DataError

GRID_BITS = 20           # the rounding grid sits 2^-20 below the sensitivity (per coordinate)
EXACT_INT = 2**52        # integers beyond this are not exact in float64: use the grid path


@cache
def _dp() -> SimpleNamespace:
    """The OpenDP names the samplers use, as `dp.<name>` / `dp.m.<name>` (the prelude's spelling). Imported from
    their own modules, not `opendp.prelude`: the prelude also imports `opendp.extras` (scikit-learn, scipy.stats,
    polars), seconds of start-up for nothing used here; the functions are the same objects either way."""
    try:
        from opendp import domains, measurements, metrics, mod
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise BudgetError(f"secure noise needs the 'opendp' package ({exc}); pip install opendp") from None
    mod.enable_features("contrib")
    return SimpleNamespace(m=measurements, vector_domain=domains.vector_domain, atom_domain=domains.atom_domain,
                           l1_distance=metrics.l1_distance, l2_distance=metrics.l2_distance)


def _as_vector(values: np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float).reshape(-1)
    if not np.isfinite(x).all():
        raise DataError("secure noise: the query's values must be finite")
    return x


def _integer_valued(x: np.ndarray) -> bool:
    return bool(np.all(x == np.rint(x))) and (x.size == 0 or float(np.abs(x).max()) < EXACT_INT)


def _grid(sensitivity: float, spread: float) -> int:
    """k of the rounding grid 2^k: 2^-GRID_BITS of the sensitivity, shared over `spread` coordinates."""
    return math.floor(math.log2(sensitivity / max(spread, 1.0))) - GRID_BITS


def _fit(make, bound: float, d_in, scale: float):
    """The measurement at `scale` (or a hair above it) whose own privacy map fits `bound`."""
    for _ in range(60):
        meas = make(scale)
        if meas.map(d_in) <= bound:
            return meas
        scale *= 1 + 1e-12 + 1e-9 * _
    raise BudgetError(f"OpenDP's privacy map never fit the planned cost {bound:g}")  # pragma: no cover


def discrete_gaussian(values: np.ndarray, rho: float, l2_sensitivity: float = 1.0) -> np.ndarray:
    """values + discrete Gaussian noise that is ρ-zCDP for L2 sensitivity Δ, from the OS CSPRNG."""
    if not (rho > 0 and l2_sensitivity > 0):
        raise BudgetError(f"discrete Gaussian needs rho > 0 and sensitivity > 0, got {rho}, {l2_sensitivity}")
    dp = _dp()
    x = _as_vector(values)
    if x.size == 0:
        return x.reshape(np.shape(values))
    if _integer_valued(x):
        # the zCDP map is Δ²/(2σ²): checking it at d_in = 1 against ρ/Δ² covers a non-integer L2 Δ (√d)
        space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64")
        meas = _fit(lambda s: dp.m.make_gaussian(*space, scale=s), rho / l2_sensitivity**2, 1,
                    l2_sensitivity / math.sqrt(2 * rho))
        out = np.asarray(meas(x.astype(np.int64).tolist()), dtype=float)
    else:
        k = _grid(l2_sensitivity, math.sqrt(x.size))
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=x.size), dp.l2_distance(T=float)
        wide = l2_sensitivity + 2.0**k * math.sqrt(x.size)
        meas = _fit(lambda s: dp.m.make_gaussian(*space, scale=s, k=k), rho, float(l2_sensitivity),
                    wide / math.sqrt(2 * rho))
        out = np.asarray(meas(x.tolist()), dtype=float)
    return out.reshape(np.shape(values))


def discrete_laplace(values: np.ndarray, epsilon: float, l1_sensitivity: float = 1.0) -> np.ndarray:
    """values + discrete Laplace noise that is ε-DP for L1 sensitivity Δ₁, from the OS CSPRNG."""
    if not (epsilon > 0 and l1_sensitivity > 0):
        raise BudgetError(f"discrete Laplace needs epsilon > 0 and sensitivity > 0, got {epsilon}, {l1_sensitivity}")
    dp = _dp()
    x = _as_vector(values)
    if x.size == 0:
        return x.reshape(np.shape(values))
    if _integer_valued(x):
        space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")   # map Δ₁/b: linear
        meas = _fit(lambda s: dp.m.make_laplace(*space, scale=s), epsilon / l1_sensitivity, 1,
                    l1_sensitivity / epsilon)
        out = np.asarray(meas(x.astype(np.int64).tolist()), dtype=float)
    else:
        k = _grid(l1_sensitivity, float(x.size))
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=x.size), dp.l1_distance(T=float)
        wide = l1_sensitivity + 2.0**k * x.size
        meas = _fit(lambda s: dp.m.make_laplace(*space, scale=s, k=k), epsilon, float(l1_sensitivity),
                    wide / epsilon)
        out = np.asarray(meas(x.tolist()), dtype=float)
    return out.reshape(np.shape(values))


def secure_gumbel(size: int | tuple[int, ...]) -> np.ndarray:
    """Standard Gumbel draws for the exponential mechanism (Gumbel-max), from 53-bit uniforms read from
    the OS CSPRNG (a continuous selection: its output is an index, not a released float)."""
    n = int(np.prod(size))
    u = (np.frombuffer(_urandom(8 * n), dtype=np.uint64) >> np.uint64(11)).astype(float)
    u = (u + 0.5) / 2.0**53           # in (0, 1), never 0 or 1
    return -np.log(-np.log(u)).reshape(size)


def secure_uniform(size: int | tuple[int, ...]) -> np.ndarray:
    """Uniforms in [0, 1) with 53 random bits each, from the OS CSPRNG."""
    n = int(np.prod(size))
    u = (np.frombuffer(_urandom(8 * n), dtype=np.uint64) >> np.uint64(11)).astype(float)
    return (u / 2.0**53).reshape(size)


def _urandom(nbytes: int) -> bytes:
    import os

    return os.urandom(nbytes)


def secure_integers(high: int, size: int) -> np.ndarray:
    """`size` uniform integers in [0, high) from the OS CSPRNG (64-bit words, rejection above the largest
    multiple of `high`: exactly uniform)."""
    if not 1 <= high <= 2**63:
        raise DataError(f"secure integers: the range must be 1..2^63, got {high}")
    limit = np.uint64(2**64 - (2**64 % high) - 1) if 2**64 % high else np.uint64(2**64 - 1)
    out = np.empty(size, dtype=np.uint64)
    todo = np.arange(size)
    for _ in range(64):   # each word is rejected with probability < 1/2: 64 rounds leave < 2^-64 per entry
        if not todo.size:
            return (out % np.uint64(high)).astype(np.int64)
        w = np.frombuffer(_urandom(8 * todo.size), dtype=np.uint64)
        ok = w <= limit
        out[todo[ok]] = w[ok]
        todo = todo[~ok]
    raise DataError("secure integers: the OS CSPRNG kept returning rejected words")  # pragma: no cover


class SystemRandom:
    """The numpy Generator methods that party-side randomisers use (`random`, `bytes`, `integers`, `choice`,
    `permutation`), read from the OS CSPRNG: what DP FM phantoms, GRR keys and the alignment fill draw from when
    the ledger runs secure noise."""

    def random(self, size: int | tuple[int, ...] | None = None) -> np.ndarray | float:
        return float(secure_uniform(1)[0]) if size is None else secure_uniform(size)

    def bytes(self, length: int) -> bytes:
        return _urandom(length)

    def integers(self, low: int, high: int | None = None, size: int | None = None) -> np.ndarray | int:
        low, high = (0, low) if high is None else (low, high)
        out = low + secure_integers(high - low, 1 if size is None else int(size))
        return int(out[0]) if size is None else out

    def choice(self, a: int, size: int, replace: bool = True, p: np.ndarray | None = None) -> np.ndarray:
        """Indices in [0, a), by the probabilities `p` (inverse CDF over 53-bit uniforms) or uniform; without
        replacement: the `size` largest of log(u)/p (Efraimidis-Spirakis: the same law as successive draws)."""
        if not replace:
            if size > a:
                raise DataError(f"secure choice: cannot take {size} of {a} without replacement")
            if p is None:
                return self.permutation(a)[:size]
            w = np.asarray(p, float)
            keys = np.full(a, -np.inf)
            pos = w > 0
            keys[pos] = np.log(np.maximum(secure_uniform(int(pos.sum())), 2.0**-60)) / w[pos]
            return np.argsort(-keys, kind="stable")[:size]
        if p is None:
            return secure_integers(a, size)
        cdf = np.cumsum(np.asarray(p, float))
        idx = np.searchsorted(cdf / cdf[-1], secure_uniform(size), side="right")
        return np.minimum(idx, a - 1).astype(np.int64)

    def permutation(self, n: int) -> np.ndarray:
        """A uniform permutation of range(n): positions sorted by independent uniform 63-bit keys."""
        return np.argsort(secure_integers(2**63, n), kind="stable")


def party_randomness(rng: np.random.Generator, noise: str) -> np.random.Generator | SystemRandom:
    """`rng` for the simulation, the OS CSPRNG for secure noise."""
    return SystemRandom() if noise == "secure" else rng


def label_int(label: str) -> int:
    """A stream label as a 64-bit SeedSequence word (the first 8 bytes of its SHA-256, little-endian)."""
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "little")


def _path_seed(seed: int, path: tuple[int | str, ...]) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed), *(p if isinstance(p, int) else label_int(p) for p in path)])


def path_stream(seed: int, *path: int | str) -> np.random.Generator:
    """The stream of one place of a run named by `path` (ints as they are, strings by `label_int`), from the config
    seed and independent of call order: the one keyed derivation, so a role in its own process draws what the
    one-process simulation draws there (collab's per-round server noise and shares, its tuning folds). Simulation
    noise only: secure noise never reads it."""
    return np.random.default_rng(_path_seed(seed, path))


def path_seed(seed: int, *path: int | str) -> int:
    """A 32-bit seed for the place `path` names, derived as `path_stream` derives its stream (a study's repeats)."""
    return int(_path_seed(seed, path).generate_state(1)[0])


def named_streams(seed: int | None, names: tuple[str, ...]) -> dict[str, np.random.Generator]:
    """A run's named random streams: child i of SeedSequence(seed) for the i-th name. The one derivation for the
    one-process run, the deploy roles and collab, so that a deployed run and its simulation draw alike (child i does
    not depend on how many children are spawned). Simulation noise only: secure noise never reads them."""
    return dict(zip(names, (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(len(names)))))
