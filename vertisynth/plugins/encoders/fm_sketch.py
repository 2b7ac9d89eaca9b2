"""DP Flajolet-Martin sketches: building them (Alg. 1, 3) and reading cardinalities back (Alg. 4).

Sketch of a set X under hash key ξ_h (VertiMRF Sec. 2.2, Alg. 1):
    α = max( max_{x∈X} H_ξh(x),  max of k_p phantom Geometric(γ/(1+γ)) draws,  b ),
    k_p = ceil(1 / (e^ε' − 1)),  b = ceil(log_{1+γ} 1 / (1 − e^{−ε'}))       (Lemma 4: α is ε'-DP).
(Alg. 1 line 1 prints e^{ε'−1}; Lemma 4 and the text use e^{ε'} − 1, which is what is used here.)
The k_p phantom draws are taken as one draw from the law of their maximum,
P(max ≤ m) = (1 − q^{m+1})^{k_p} with q = 1/(1+γ), by inversion: identical in distribution, O(1) cost.

Reading a cardinality (the "harmonic mean with a bias correction that matches γ"). For t repetitions
with maxima α_h of the same set, the estimator inverts the mean of q^{α_h}:
    K̂ = g⁻¹( (1/t) Σ_h q^{α_h} ),   g(K) = E[q^{max(M_K, b)}],  M_K = max of K iid geometrics.
This is the harmonic mean of (1+γ)^{α_h} with its exact bias correction. Without the floor and for
large K, g(K) → γ / (K ln(1+γ)) (sum over the geometric lattice ≈ integral), i.e. the HyperLogLog
constant 1/ln 2 at γ = 1, and the per-repetition relative variance is (2+γ) ln(1+γ)/γ − 1
(1.08 at γ = 1: HLL's 1.04/√t). Here g is tabulated exactly on a grid of K (including the floor b,
which censors the maxima and would otherwise bias small sets upwards, and the lattice wobble), so
any γ > 0 works. Variance by the delta method: Var[K̂] ≈ Var[q^α] / (t g'(K)²), evaluated at K̂.
The remaining bias of inverting a mean is O(1/t) relative (≈ 0.05% at t = 2000) and is ignored.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from vertisynth.core.errors import ConfigError

EMPTY = -1  # raw maximum of a value no record holds (below every geometric value)


def fm_parameters(eps_prime: float, gamma: float) -> tuple[int, int]:
    """(k_p, b) of Alg. 1 for a per-sketch ε' and geometric parameter γ."""
    if not (eps_prime > 0 and math.isfinite(eps_prime)):
        raise ConfigError(f"dpfm: per-sketch ε' must be positive, got {eps_prime}")
    if not (gamma > 0 and math.isfinite(gamma)):
        raise ConfigError(f"dpfm: gamma must be positive, got {gamma}")
    k_p = math.ceil(1.0 / math.expm1(eps_prime))
    floor = math.ceil(math.log(1.0 / -math.expm1(-eps_prime)) / math.log1p(gamma) - 1e-12)
    return k_p, max(floor, 0)


# -- building ----------------------------------------------------------------------------------------
def grouping(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, starts, values): records sorted by code, where each present code's run starts, and the code."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]) if codes.size else np.zeros(0, np.int64)
    return order, starts, sorted_codes[starts]


def group_max(values: np.ndarray, codes: np.ndarray, size: int, groups=None) -> np.ndarray:
    """max of values[:, r] over the records r with codes[r] == v, for every v: (H, size); EMPTY where none.
    `groups` (from `grouping(codes)`) saves the sort when the same codes are reused across blocks."""
    out = np.full((values.shape[0], size), EMPTY, dtype=np.int16)
    if values.shape[1] == 0:
        return out
    order, starts, present = groups if groups is not None else grouping(codes)
    out[:, present] = np.maximum.reduceat(values[:, order], starts, axis=1)
    return out


# bytes per repetition·row of a record-major block (dpfm.sketch_maxima), γ = 1: AES input and output 2 + 2
# (one 16-byte block serves eight repetitions), the 16-bit words and their gathered copy 2 + 2
BLOCK_BYTES = 8


def block_bytes(gamma: float) -> int:
    """BLOCK_BYTES for γ = 1; other γ use two 64-bit words per AES block (8 + 8) and int16 values (2 + 2)."""
    return BLOCK_BYTES if gamma == 1.0 else 20


def phantom_max(rng: np.random.Generator, shape: tuple[int, ...], k_p: int, gamma: float) -> np.ndarray:
    """Maximum of k_p iid Geometric(γ/(1+γ)) draws on {0,1,...}, sampled by inversion of its CDF."""
    u = rng.random(shape)
    with np.errstate(divide="ignore"):
        tail = -np.expm1(np.log(u) / k_p)  # 1 − u^{1/k_p}, accurately
        m = np.ceil(np.log(tail) / -np.log1p(gamma)) - 1.0
    return np.clip(m, 0, np.iinfo(np.int16).max).astype(np.int16)


def finalize(raw: np.ndarray, rng: np.random.Generator, k_p: int, floor: int, gamma: float) -> np.ndarray:
    """Alg. 1 line 4: max of the records' maximum, the phantoms' maximum and the floor b."""
    return np.maximum(np.maximum(raw, phantom_max(rng, raw.shape, k_p, gamma)), np.int16(floor))


# -- reading -----------------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def _tables(gamma: float, floor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """On a grid of K: -log g(K), log K and the per-repetition sd of q^α divided by |g'(K)|."""
    q = 1.0 / (1.0 + gamma)
    ks = np.concatenate([[0.0], np.geomspace(1e-2, 1e13, 3000)])
    m_hi = floor + math.ceil((math.log(1e13) + 45) / math.log1p(gamma))
    ms = np.arange(floor, m_hi + 1, dtype=float)
    # log F(m) = K log(1 − q^{m+1}) is the log-CDF of M_K; the floor puts the mass of M_K <= b at b.
    log1m = np.log1p(-(q ** (ms + 1)))
    cdf = np.exp(np.outer(ks, log1m))  # (K, m)
    pmf = np.diff(np.concatenate([np.zeros((ks.size, 1)), cdf], axis=1), axis=1)
    pmf[:, -1] += 1.0 - cdf[:, -1]  # negligible tail
    qm = q**ms
    g = pmf @ qm
    g2 = pmf @ (qm * qm)
    var = np.maximum(g2 - g * g, 0.0)
    dg = np.gradient(g, ks)
    sd_ratio = np.sqrt(var) / np.maximum(np.abs(dg), 1e-300)
    return -np.log(g), ks, sd_ratio


def cardinality(mean_qpow: np.ndarray, t: int, gamma: float, floor: int) -> tuple[np.ndarray, np.ndarray]:
    """K̂ and Var[K̂] from the mean over t repetitions of q^{α_h} (see the module docstring)."""
    neg_log_g, ks, sd_ratio = _tables(float(gamma), int(floor))
    x = -np.log(np.asarray(mean_qpow, float))
    k_hat = np.interp(x, neg_log_g, ks)  # g is strictly decreasing in K: -log g increasing
    k_hat = np.where(x > neg_log_g[-1], ks[-1], k_hat)
    var = np.interp(k_hat, ks, sd_ratio) ** 2 / t
    return k_hat, var


def asymptotic_constant(gamma: float) -> float:
    """lim K·g(K) without floor: γ / ln(1+γ) (1/ln 2 for γ = 1)."""
    return gamma / math.log1p(gamma)
