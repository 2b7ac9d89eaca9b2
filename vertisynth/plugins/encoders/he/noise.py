"""The two-sided noise of the `he` encoder: a discrete Gaussian on a bounded support, from a uniform source.

One sampler serves both paths; only the uniform source differs:
  * `SystemSource` (real crypto): 53-bit uniforms from the OS CSPRNG (`os.urandom`);
  * `GeneratorSource` (simulation and tests): 53-bit uniforms from a numpy Generator.
So `crypto = "simulated"` draws from exactly the same distribution as the real path, and the two give identical
counts when handed the same seeded source (the test does that).

Sampling is by inversion of the CDF of N_Z(0, σ²) truncated to [-T, T] with T = ⌈12σ⌉ + 1, tabulated in float64.
Why truncate: the summing party adds its noise under encryption, offset by T so that no packed slot borrows; the
mass beyond 12σ is < 4·10⁻³³, counted as part of δ. The float table and 53-bit uniforms put every probability within
2⁻⁵³ of the exact one (a total-variation gap below 2T·2⁻⁵³, also δ-level). This is the hook to swap for the
project's CSPRNG discrete-Gaussian sampler (issue 18b) once it lands; the tail bound must stay (slots need it).
"""
from __future__ import annotations

import math
import os
from typing import Protocol

import numpy as np

from vertisynth.core.errors import ConfigError

TAIL = 12.0          # support half-width in units of σ
MAX_SUPPORT = 4_000_000   # table entries (32 MB): σ beyond ~1.6e5 means a budget far too small to be useful


class UniformSource(Protocol):
    def uniform53(self, size: int) -> np.ndarray:
        """`size` independent uniforms on [0, 1) with 53-bit resolution."""


class SystemSource:
    """Uniforms from the operating system's CSPRNG (the real-crypto path)."""

    def uniform53(self, size: int) -> np.ndarray:
        words = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
        return (words >> np.uint64(11)).astype(np.float64) / float(2**53)


class GeneratorSource:
    """Uniforms from a numpy Generator (simulation, studies and tests)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def uniform53(self, size: int) -> np.ndarray:
        return self.rng.integers(0, 2**53, size=size, dtype=np.int64).astype(np.float64) / float(2**53)


def support_bound(sigma: float) -> int:
    """T: the noise lies in [-T, T]; the summing party's offset."""
    return int(math.ceil(TAIL * sigma)) + 1


def _cdf(sigma: float) -> tuple[np.ndarray, int]:
    t = support_bound(sigma)
    if 2 * t + 1 > MAX_SUPPORT:
        raise ConfigError(f"he: noise σ = {sigma:.4g} per count is too large to sample (the budget per table is tiny); "
                          "raise epsilon, measure fewer tables or lower selection_pairs")
    x = np.arange(-t, t + 1, dtype=np.float64)
    w = np.exp(-0.5 * (x / sigma) ** 2)
    c = np.cumsum(w)
    return c / c[-1], t


def discrete_gaussian(shape: tuple[int, ...], sigma: float, source: UniformSource) -> np.ndarray:
    """int64 noise of `shape`, each entry N_Z(0, σ²) truncated to [-T, T] (see the module note)."""
    if not sigma > 0:
        raise ConfigError(f"he: noise σ must be positive, got {sigma}")
    size = int(np.prod(shape, dtype=np.int64))
    cdf, t = _cdf(sigma)
    u = source.uniform53(size)
    idx = np.searchsorted(cdf, u, side="right")
    return (np.minimum(idx, 2 * t) - t).astype(np.int64).reshape(shape)
