"""Reference mechanisms with textbook privacy, vectorised for the auditor.

They calibrate the auditor (false alarms on correct mechanisms, power on over-claimed ones) and
serve as templates for a plugin author's own `sample(dataset, n_samples, rng)` hook.
`overclaim` makes a mechanism *lie*: it claims `epsilon` but really runs at `epsilon · overclaim`.
"""
from __future__ import annotations

import math

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError
from vertisynth.core.mechanisms import gaussian_sigma


def _check(epsilon: float, overclaim: float) -> None:
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(f"epsilon must be positive and finite, got {epsilon}")
    if not overclaim > 0:
        raise ConfigError(f"overclaim must be positive, got {overclaim}")


@attrs.frozen
class ReferenceGRR:
    """Generalised randomised response on one person's value in 0..k−1 (local DP; neighbours substitute).

    Keeps the true value with p = e^ε / (e^ε + k − 1), else reports one of the other k − 1 values
    uniformly: P[y | x] / P[y | x'] ≤ p / q = e^ε (Wang et al. 2017, "Locally differentially private
    protocols for frequency estimation", Sec. 4.1). The dataset is the value itself (an int).
    """

    k: int
    epsilon: float
    overclaim: float = 1.0
    name: str = "reference GRR"

    def __attrs_post_init__(self) -> None:
        _check(self.epsilon, self.overclaim)
        if self.k < 2:
            raise ConfigError(f"GRR needs k >= 2 values, got {self.k}")

    def sample(self, value: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        if not 0 <= int(value) < self.k:
            raise ConfigError(f"GRR value {value} is outside 0..{self.k - 1}")
        e = math.exp(self.epsilon * self.overclaim)
        keep = rng.random(n_samples) < e / (e + self.k - 1)
        other = rng.integers(0, self.k - 1, n_samples)
        other += other >= value  # skip the true value
        return np.where(keep, int(value), other).astype(np.int64)


@attrs.frozen
class ReferenceLaplaceCount:
    """Noisy record count n + Lap(1/ε): ε-DP under add/remove (L1 sensitivity 1; Dwork et al. 2006)."""

    epsilon: float
    overclaim: float = 1.0
    name: str = "reference Laplace count"

    def __attrs_post_init__(self) -> None:
        _check(self.epsilon, self.overclaim)

    def sample(self, data: Dataset, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        return data.n + rng.laplace(0.0, 1.0 / (self.epsilon * self.overclaim), n_samples)


@attrs.frozen
class ReferenceGaussianHistogram:
    """Full-domain histogram + N(0, σ²), σ = 1/√(2ρ): ρ-zCDP under add/remove (L2 sensitivity 1;
    Bun & Steinke 2016, Prop. 1.6). `overclaim` scales the true ρ."""

    rho: float
    overclaim: float = 1.0
    name: str = "reference Gaussian histogram"

    def __attrs_post_init__(self) -> None:
        _check(self.rho, self.overclaim)

    def sample(self, data: Dataset, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        counts = data.counts(data.domain.attributes).values.ravel()
        sigma = gaussian_sigma(self.rho * self.overclaim)
        return counts[None, :] + rng.normal(0.0, sigma, (n_samples, counts.size))
