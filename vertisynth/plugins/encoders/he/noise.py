"""The two-sided noise of the `he` encoder: N_Z(0, σ²), the summing party's bounded to [-T, T].

Two sources, one interface (`discrete_gaussian(shape, sigma, source, bounded)`):
  * `SystemSource`: OpenDP's exact discrete Gaussian sampler over the OS CSPRNG (`core/noise.py`, the sampler of
    every other secure path). Used whenever the ledger runs secure noise, whatever `crypto` says, and for real
    crypto. The encrypting party's noise is the untruncated N_Z(0, σ²). The summing party's is conditioned on
    |z| <= T = ⌈12σ⌉ + 1 (a draw beyond T is redrawn): it is added under encryption, offset by T so that no
    packed slot borrows. Conditioning moves each draw by a total-variation distance below P(|Z| > T) < 10⁻³¹,
    counted in δ (the charge's note says so).
  * `GeneratorSource` (simulation noise only: studies and tests): inversion of the CDF of N_Z(0, σ²) truncated to
    [-T, T], tabulated in float64, with 53-bit uniforms from a seeded numpy Generator. Reproducible; not for
    production (a float table, a seed). Both parties' draws are truncated here, as they always were, so
    simulation runs repeat the earlier ones bit for bit.
"""
from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from vertisynth.core import noise as secure_noise
from vertisynth.core.errors import ConfigError

from . import ops

TAIL = 12.0          # support half-width in units of σ
MAX_SUPPORT = 4_000_000   # table entries (32 MB): σ beyond ~1.6e5 means a budget far too small to be useful
REDRAWS = 8          # rounds of redrawing the (< 1e-31 likely) summing-party draws beyond T before giving up


class UniformSource(Protocol):
    def uniform53(self, size: int) -> np.ndarray:
        """`size` independent uniforms on [0, 1) with 53-bit resolution."""


class SystemSource:
    """OpenDP's exact discrete Gaussian from the OS CSPRNG (secure noise, real crypto)."""

    def gaussian(self, size: int, sigma: float) -> np.ndarray:
        # ρ = 1/(2σ²) at sensitivity 1 is scale σ (OpenDP's privacy map checks it)
        return secure_noise.discrete_gaussian(np.zeros(size), 1.0 / (2.0 * sigma * sigma)).astype(np.int64)


class GeneratorSource:
    """Uniforms from a numpy Generator (simulation noise: studies and tests)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def uniform53(self, size: int) -> np.ndarray:
        return self.rng.integers(0, 2**53, size=size, dtype=np.int64).astype(np.float64) / float(2**53)


def support_bound(sigma: float) -> int:
    """T: the summing party's noise lies in [-T, T]; its offset."""
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


def _bounded_secure(size: int, sigma: float, source: SystemSource) -> np.ndarray:
    t = support_bound(sigma)
    z = source.gaussian(size, sigma)
    for _ in range(REDRAWS):
        out = np.abs(z) > t
        if not out.any():
            return z
        z[out] = source.gaussian(int(out.sum()), sigma)
    raise ConfigError(f"he: the noise sampler kept drawing beyond ±{t} (probability < 1e-31 per draw): refusing")


def discrete_gaussian(shape: tuple[int, ...], sigma: float, source, bounded: bool = True) -> np.ndarray:
    """int64 noise of `shape`, each entry N_Z(0, σ²); within [-T, T] when `bounded` (the summing party's) or when
    drawn from a seeded `GeneratorSource` (see the module note)."""
    if not sigma > 0:
        raise ConfigError(f"he: noise σ must be positive, got {sigma}")
    size = int(np.prod(shape, dtype=np.int64))
    ops.count("draw", size)
    if isinstance(source, SystemSource):
        if 2 * support_bound(sigma) + 1 > MAX_SUPPORT:
            _cdf(sigma)   # the simulation's refusal, alike: such a σ is a budget too small to be useful
        z = _bounded_secure(size, sigma, source) if bounded else source.gaussian(size, sigma)
        return z.reshape(shape)
    cdf, t = _cdf(sigma)
    u = source.uniform53(size)
    idx = np.searchsorted(cdf, u, side="right")
    return (np.minimum(idx, 2 * t) - t).astype(np.int64).reshape(shape)
