"""The basic noise mechanisms. Each one spends the Charge its component planned *before* it draws noise;
the ledger's `noise` setting picks secure (discrete, OS CSPRNG) or simulation (seeded numpy) noise."""
from __future__ import annotations

import math

import numpy as np

from .errors import BudgetError
from .noise import discrete_gaussian, discrete_laplace, secure_gumbel
from .privacy import Charge, PrivacyLedger, PureDP, ZCDP


def gaussian_sigma(rho: float, l2_sensitivity: float = 1.0) -> float:
    """σ of the Gaussian mechanism that is ρ-zCDP: ρ = Δ² / (2σ²) (Bun & Steinke 2016, Prop. 1.6)."""
    if not rho > 0:
        raise BudgetError(f"rho must be positive, got {rho}")
    return l2_sensitivity / math.sqrt(2 * rho)


def gaussian_cost(rho: float) -> ZCDP:
    return ZCDP(rho)


def laplace_scale(epsilon: float, l1_sensitivity: float = 1.0) -> float:
    """b of the Laplace mechanism that is ε-DP: b = Δ₁ / ε."""
    if not epsilon > 0:
        raise BudgetError(f"epsilon must be positive, got {epsilon}")
    return l1_sensitivity / epsilon


def _cost(charge: Charge, kind: type, mechanism: str):
    if not isinstance(charge, Charge):
        raise BudgetError(f"{mechanism} takes the Charge object that plan() returned, got {type(charge).__name__}")
    if not isinstance(charge.cost, kind):
        raise BudgetError(f"{mechanism} needs a {kind.__name__} charge, got {type(charge.cost).__name__} "
                          f"for {charge.stage} {charge.mechanism!r}")
    return charge.cost


def gaussian_mechanism(
    values: np.ndarray,
    charge: Charge,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    l2_sensitivity: float = 1.0,
) -> np.ndarray:
    """values + Gaussian noise that is ρ-zCDP with ρ from the planned `charge` (spent on the ledger first).

    Secure noise (ledger.noise == "secure"): discrete Gaussian from the OS CSPRNG, `rng` unused.
    Simulation: N(0, σ²) from `rng`."""
    rho = _cost(charge, ZCDP, "gaussian_mechanism").rho
    sigma = gaussian_sigma(rho, l2_sensitivity)
    ledger.spend(charge)
    if ledger.noise == "secure":
        return discrete_gaussian(values, rho, l2_sensitivity)
    return np.asarray(values, float) + rng.normal(0.0, sigma, size=np.shape(values))


def laplace_mechanism(
    values: np.ndarray,
    charge: Charge,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    l1_sensitivity: float = 1.0,
) -> np.ndarray:
    """values + Laplace noise that is ε-DP with ε from the planned `charge` (spent on the ledger first).

    Secure noise: discrete Laplace from the OS CSPRNG, `rng` unused. Simulation: Lap(Δ₁/ε) from `rng`."""
    epsilon = _cost(charge, PureDP, "laplace_mechanism").epsilon
    scale = laplace_scale(epsilon, l1_sensitivity)
    ledger.spend(charge)
    if ledger.noise == "secure":
        return discrete_laplace(values, epsilon, l1_sensitivity)
    return np.asarray(values, float) + rng.laplace(0.0, scale, size=np.shape(values))


def exponential_noise(logits_shape: int | tuple[int, ...], rng: np.random.Generator,
                      ledger: PrivacyLedger) -> np.ndarray:
    """Gumbel noise for an exponential mechanism's Gumbel-max selection (its charge is spent by the caller):
    from the OS CSPRNG when the ledger runs secure noise, else from `rng`."""
    if ledger.noise == "secure":
        return secure_gumbel(logits_shape)
    return rng.gumbel(size=logits_shape)
