"""Correct and incorrect mechanisms of the DP-testing literature, vectorised for the auditor.

The classic benchmark of DP testers (StatDP: Ding et al., CCS 2018; DP-Sniper: Bichsel et al., S&P
2021) over *query vectors*: the "dataset" is the vector of true answers q ∈ R^k of k queries of
sensitivity 1 each, and neighbours move every answer by at most 1 (`strategies.query_pairs`).
Written from the papers:

  * Report Noisy Max (Dwork & Roth 2014, Sec. 3.3): argmax(q + Lap(2/ε)) and argmax(q + Exp(2/ε))
    are ε-DP for sensitivity-1 queries that may move in different directions; returning the noisy
    maximum *value* instead of its index is not (StatDP's "iNoisyMax").
  * Sparse Vector, the six variants of Lyu, Su & Li (VLDB 2017, Fig. 1), with cutoff c, threshold T,
    ε₁ the threshold's share: Alg. 1 (theirs) and Alg. 2 (Dwork & Roth 2014) are ε-DP; Alg. 3 (Roth
    2011's lecture notes: outputs the noisy query value on ⊤) is not ε'-DP for any ε'; Alg. 4 (Lee &
    Clifton 2014: query noise not scaled with c) is only ((1 + 6c)/4)ε-DP; Alg. 5 (Stoddard et al.
    2014: no query noise) and Alg. 6 (Chen et al. 2015: no cutoff) are not ε'-DP for any ε'.
  * Noisy histogram: q + Lap(1/ε) is ε-DP when neighbours change one count by 1; StatDP's broken
    variant uses scale ε instead of 1/ε (really (1/ε)-DP; a violation when ε < 1).
  * Gaussian mechanism: q + N(0, σ²) with the classic calibration σ = Δ√(2 ln(1.25/δ))/ε (Dwork & Roth
    2014, Thm A.1) is (ε, δ)-DP for ε < 1, and for every ε' ≥ 0 it is (ε', δ(ε'))-DP on the exact
    curve of Balle & Wang 2018 (`audit.gaussian_claims`); `sigma_factor=0.5` is the "σ halved" bug.

Outputs are numeric arrays. Sparse Vector answers are codes per query (1 = ⊤, 0 = ⊥, −1 = not
answered after the cutoff: a variable-length answer padded to k); Alg. 3 appends the released noisy
values (0 where none) as k more columns: codes and values mixed.
Every class has `epsilon`, `truly_dp` (what the literature proves), `name` and `sample(q, n, rng)`.
"""
from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from vertisynth.core.errors import ConfigError
from vertisynth.core.privacy import PureDP

from .audit import GaussianNoise, NeighbourPair
from .features import answer_features
from .strategies import ONE_DIFFER, QUERY_PATTERNS, query_pairs

TOP, BOTTOM, UNANSWERED = 1, 0, -1


def _queries(q) -> np.ndarray:
    q = np.asarray(q, dtype=float).ravel()
    if q.size == 0 or not np.all(np.isfinite(q)):
        raise ConfigError(f"a query-vector mechanism needs a non-empty finite answer vector, got {q!r}")
    return q


def _laplace_pdf(x: np.ndarray, b: float) -> np.ndarray:
    return np.exp(-np.abs(x) / b) / (2 * b)


def _laplace_cdf(x: np.ndarray, b: float) -> np.ndarray:
    return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0) / b), 1 - 0.5 * np.exp(-np.maximum(x, 0) / b))


def _positive(_inst, attr, value) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{attr.name} must be positive and finite, got {value}")


def _at_least_one(cutoff: int) -> None:
    if not (isinstance(cutoff, int) and cutoff >= 1):
        raise ConfigError(f"the Sparse Vector cutoff c must be an integer >= 1, got {cutoff!r}")


@attrs.frozen
class NoisyMax:
    """Report Noisy Max over sensitivity-1 queries with Lap(2/ε) or Exp(2/ε) noise.

    Returns the index (ε-DP) or, when `return_value`, the noisy maximum itself (not ε-DP: for k queries
    all moving up by 1, the maximum's lower tail shifts like k independent Laplace draws, up to kε/2).
    """

    epsilon: float = attrs.field(validator=_positive)
    noise: str = attrs.field(default="laplace", validator=attrs.validators.in_(("laplace", "exponential")))
    return_value: bool = False

    @property
    def cost(self) -> PureDP:
        """What it claims: ε-DP."""
        return PureDP(self.epsilon)

    @property
    def truly_dp(self) -> bool:
        return not self.return_value

    @property
    def name(self) -> str:
        what = "value" if self.return_value else "index"
        return f"NoisyMax {self.noise} 2/ε, returns the {what}"

    def sample(self, q, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        q = _queries(q)
        scale = 2.0 / self.epsilon
        noise = (rng.laplace(0.0, scale, (n_samples, q.size)) if self.noise == "laplace"
                 else rng.exponential(scale, (n_samples, q.size)))
        noisy = q + noise
        return noisy.max(axis=1) if self.return_value else noisy.argmax(axis=1)


@attrs.frozen
class NoisyHistogram:
    """Every count plus Lap(1/ε) (ε-DP when a neighbour changes one count by 1), or, `broken`,
    plus Lap(ε) (StatDP's "iHistogram": really (1/ε)-DP)."""

    epsilon: float = attrs.field(validator=_positive)
    broken: bool = False

    @property
    def cost(self) -> PureDP:
        """What it claims: ε-DP."""
        return PureDP(self.epsilon)

    @property
    def truly_dp(self) -> bool:
        return not self.broken or self.epsilon >= 1.0

    @property
    def name(self) -> str:
        return "Histogram Lap(ε) (wrong scale)" if self.broken else "Histogram Lap(1/ε)"

    def sample(self, q, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        q = _queries(q)
        scale = self.epsilon if self.broken else 1.0 / self.epsilon
        return q + rng.laplace(0.0, scale, (n_samples, q.size))


# Sparse Vector variants of Lyu, Su & Li 2017, Fig. 1: (threshold noise scale, query noise scale, cutoff
# used, resample threshold after ⊤, outputs the value, truly ε-DP), scales as functions of (ε, c).
SVT_VARIANTS = {
    1: ("Alg. 1, Lyu et al. 2017", lambda e, c: 2 / e, lambda e, c: 4 * c / e, True, False, False, True),
    2: ("Alg. 2, Dwork & Roth 2014", lambda e, c: 2 * c / e, lambda e, c: 4 * c / e, True, True, False, True),
    3: ("Alg. 3, Roth 2011: outputs the noisy value", lambda e, c: 2 / e, lambda e, c: 2 * c / e, True, False, True,
        False),
    4: ("Alg. 4, Lee & Clifton 2014", lambda e, c: 4 / e, lambda e, c: 4 / (3 * e), True, False, False, False),
    5: ("Alg. 5, Stoddard et al. 2014: no query noise", lambda e, c: 2 / e, lambda e, c: 0.0, False, False, False,
        False),
    6: ("Alg. 6, Chen et al. 2015: no cutoff", lambda e, c: 2 / e, lambda e, c: 2 / e, False, False, False, False),
}


@attrs.frozen
class SparseVector:
    """Sparse Vector (AboveThreshold with cutoff c) in the variants of Lyu, Su & Li 2017, Fig. 1.

    Each query i is answered ⊤ when q_i + ν_i ≥ T + ρ, else ⊥; ρ ~ Lap(threshold scale) and ν_i ~
    Lap(query scale) as the variant says; with a cutoff, the queries after the c-th ⊤ are unanswered.
    """

    epsilon: float = attrs.field(validator=_positive)
    variant: int = attrs.field(default=1, validator=attrs.validators.in_(tuple(SVT_VARIANTS)))
    threshold: float = 0.5
    cutoff: int = attrs.field(default=1, validator=lambda _i, _a, v: _at_least_one(v))

    @property
    def cost(self) -> PureDP:
        """What it claims: ε-DP."""
        return PureDP(self.epsilon)

    @property
    def truly_dp(self) -> bool:
        return SVT_VARIANTS[self.variant][6]

    @property
    def name(self) -> str:
        cut = f"c={self.cutoff}, " if SVT_VARIANTS[self.variant][3] else ""
        return f"SparseVector {SVT_VARIANTS[self.variant][0]} ({cut}T={self.threshold:g})"

    def sample(self, q, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        q = _queries(q)
        _, rho_scale, nu_scale, has_cutoff, resample, outputs_value, _ = SVT_VARIANTS[self.variant]
        b_rho, b_nu = rho_scale(self.epsilon, self.cutoff), nu_scale(self.epsilon, self.cutoff)
        k = q.size
        rho = rng.laplace(0.0, b_rho, n_samples)
        nu = rng.laplace(0.0, b_nu, (n_samples, k)) if b_nu > 0 else np.zeros((n_samples, k))
        if not resample:   # one threshold noise per output: every query at once (the same draws and outputs)
            noisy = q + nu
            above = noisy >= (self.threshold + rho)[:, None]
            # answered while fewer than c earlier queries were ⊤ (a query past the cutoff is never ⊤ itself)
            live = (np.cumsum(above, axis=1) - above < self.cutoff) if has_cutoff else np.ones_like(above)
            above &= live
            codes = np.where(live, above.astype(np.int64) * (TOP - BOTTOM) + BOTTOM, UNANSWERED)
            if not outputs_value:
                return codes
            # codes then values, written into one float array (hstack's result, without its temporaries)
            out = np.zeros((n_samples, 2 * k))
            out[:, :k] = codes
            np.copyto(out[:, k:], noisy, where=above)
            return out
        codes = np.full((n_samples, k), UNANSWERED, dtype=np.int64)
        values = np.zeros((n_samples, k))
        tops = np.zeros(n_samples, dtype=np.int64)
        for i in range(k):  # a loop over the k queries, vectorised over the samples
            live = tops < self.cutoff if has_cutoff else np.ones(n_samples, bool)
            noisy = q[i] + nu[:, i]
            above = live & (noisy >= self.threshold + rho)
            codes[live, i] = np.where(above[live], TOP, BOTTOM)
            values[above, i] = noisy[above]
            tops += above
            if resample and above.any():
                rho[above] = rng.laplace(0.0, b_rho, int(above.sum()))
        return np.hstack([codes, values]) if outputs_value else codes

    def output_probabilities(self, q, edges: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """The exact output distribution on answers q, for the power analysis (`power.best_event`).

        Cutoff 1 only (every benchmark case): an output is "first ⊤ at query j" (j = 0..k−1) or "all ⊥"
        (index k). P[first ⊤ at j] = ∫ p_ρ(r) Π_{i<j} F(T + r − q_i) (1 − F(T + r − q_j)) dr, F the query
        noise's CDF, integrated numerically over the threshold noise r. Alg. 3 also releases the value
        v = q_j + ν_j ≥ T + r: its cells are (j, v in a bin of `edges`, default `value_edges(q)`) then
        "all ⊥", P = ∫_bin p_ν(v − q_j) ∫_{r ≤ v − T} p_ρ(r) Π_{i<j} F(T + r − q_i) dr dv (give both sides
        of a pair the same edges). Returns the cell probabilities and the edges (None without values).
        """
        q = _queries(q)
        _, rho_scale, nu_scale, has_cutoff, _, outputs_value, _ = SVT_VARIANTS[self.variant]
        if not has_cutoff or self.cutoff != 1:
            raise ConfigError("output_probabilities: exact distributions are written for the variants with a "
                              f"cutoff, at c = 1 (Alg. 1-4); got {self.name}")
        b_rho, b_nu = rho_scale(self.epsilon, 1), nu_scale(self.epsilon, 1)
        lo, hi = self.threshold - q.max(), self.threshold - q.min()
        r = np.linspace(min(lo, 0.0) - 45 * (b_rho + b_nu), max(hi, 0.0) + 45 * (b_rho + b_nu), 40_001)
        dr = r[1] - r[0]
        w_rho = _laplace_pdf(r, b_rho) * dr
        w_rho /= w_rho.sum()  # threshold noise weights on the grid, a distribution
        below = np.ones_like(r)  # Π_{i<j} P[⊥ at i | ρ = r]
        if not outputs_value:
            cells = []
            for qj in q:  # a loop over the k queries, vectorised over the grid
                p_bottom = _laplace_cdf(self.threshold + r - qj, b_nu)
                cells.append(np.sum(w_rho * below * (1 - p_bottom)))
                below = below * p_bottom
            return np.r_[cells, np.sum(w_rho * below)], None
        edges = self.value_edges(q) if edges is None else np.asarray(edges, float)
        sub = 4  # midpoint rule on 4 sub-bins per bin
        fine = (edges[:-1, None] + (np.arange(sub) + 0.5)[None, :] / sub * np.diff(edges)[:, None]).ravel()
        step = np.repeat(np.diff(edges) / sub, sub)
        cells = []
        for qj in q:
            mass = w_rho * below
            reach = np.interp(fine - self.threshold, r, np.cumsum(mass) - mass / 2, left=0.0)  # P[ρ <= v − T, ⊥s]
            dens = reach * _laplace_pdf(fine - qj, b_nu) * step
            cells.append(dens.reshape(-1, sub).sum(1))
            below = below * _laplace_cdf(self.threshold + r - qj, b_nu)
        return np.r_[np.concatenate(cells), np.sum(w_rho * below)], edges

    def value_edges(self, *answer_vectors, bins_per_scale: int = 20) -> np.ndarray:
        """Value bins for `output_probabilities` covering every answer vector given (both sides of a pair):
        width scale / `bins_per_scale`, out to 45 noise scales (the rest has probability below e^-45)."""
        b_nu = SVT_VARIANTS[self.variant][2](self.epsilon, self.cutoff)
        qs = np.concatenate([_queries(q) for q in answer_vectors])
        return np.arange(qs.min() - 45 * b_nu, qs.max() + 45 * b_nu + b_nu / bins_per_scale, b_nu / bins_per_scale)

    def features(self, outputs: np.ndarray) -> np.ndarray:
        """The answer-sequence feature map (`features.answer_features`) of these outputs."""
        outputs = np.asarray(outputs)
        k = outputs.shape[1] // 2 if SVT_VARIANTS[self.variant][5] else outputs.shape[1]
        values = outputs[:, k:] if SVT_VARIANTS[self.variant][5] else None
        return answer_features(outputs[:, :k].astype(np.int64), values)


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """σ = Δ√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm A.1; (ε, δ)-DP for ε < 1)."""
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


@attrs.frozen
class GaussianQueries:
    """q + N(0, σ²) per query, σ from the classic calibration for (ε, δ) times `sigma_factor`
    (0.5: the "σ halved" bug). Neighbours move one answer by 1 (L2 sensitivity 1)."""

    epsilon: float = attrs.field(validator=_positive)
    delta: float = 1e-5
    sigma_factor: float = 1.0

    @property
    def sigma(self) -> float:
        """The σ it claims to use."""
        return classic_gaussian_sigma(self.epsilon, self.delta)

    @property
    def truly_dp(self) -> bool:
        return self.sigma_factor >= 1.0

    @property
    def name(self) -> str:
        return "Gaussian, classic σ" + ("" if self.sigma_factor == 1 else f" × {self.sigma_factor:g}")

    @property
    def cost(self) -> GaussianNoise:
        """What it claims: the Gaussian mechanism with the classic σ, audited on its exact curve."""
        return GaussianNoise(self.sigma)

    def sample(self, q, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        q = _queries(q)
        return q + rng.normal(0.0, self.sigma * self.sigma_factor, (n_samples, q.size))


@attrs.frozen
class Case:
    """One mechanism of the benchmark and the neighbouring pairs that fit it."""

    mechanism: Any
    pairs: tuple[NeighbourPair, ...]

    @property
    def name(self) -> str:
        return self.mechanism.name

    @property
    def truly_dp(self) -> bool:
        return self.mechanism.truly_dp


def benchmark_cases(epsilon: float = 0.7, k: int = 10, gaussian: bool = True) -> list[Case]:
    """The classic benchmark at claimed ε (StatDP's claims: 0.2, 0.7, 1.5; its SVT setting c = 1 with
    T = 0.5 for the correct variants and T = 1 for the broken ones) over k queries. Per-query mechanisms
    (Noisy Max, Sparse Vector) get all of StatDP's patterns; the histogram and the Gaussian, whose
    guarantee is for one changed count (L1 / L2 sensitivity 1), only the one-answer patterns. The
    Gaussian pair (`gaussian`) is the issue-23 case: calibrated for (1, 1e-5), correct and with σ halved."""
    all_pairs = tuple(query_pairs(k, QUERY_PATTERNS))
    one_pairs = tuple(query_pairs(k, ONE_DIFFER))
    cases = [Case(NoisyMax(epsilon, noise, value), all_pairs)
             for noise in ("laplace", "exponential") for value in (False, True)]
    cases += [Case(NoisyHistogram(epsilon, broken), one_pairs) for broken in (False, True)]
    cases += [Case(SparseVector(epsilon, v, threshold=0.5 if SVT_VARIANTS[v][6] else 1.0), all_pairs)
              for v in sorted(SVT_VARIANTS)]
    if gaussian:  # calibrated for (1, 1e-5) whatever `epsilon` (the classic σ needs ε <= 1)
        cases += [Case(GaussianQueries(1.0, 1e-5, factor), one_pairs) for factor in (1.0, 0.5)]
    return cases
