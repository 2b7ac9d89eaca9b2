"""The basic noise mechanisms. Each one charges the ledger *before* it draws noise."""
from __future__ import annotations

import math

import numpy as np

from .errors import BudgetError
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


def gaussian_mechanism(
    values: np.ndarray,
    rho: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    stage: str,
    party: str | None = None,
    l2_sensitivity: float = 1.0,
    mechanism: str = "gaussian",
) -> np.ndarray:
    """values + N(0, σ²) with σ from ρ; charges ZCDP(ρ) to the ledger first."""
    ledger.spend(Charge(stage, mechanism, ZCDP(rho), party))
    sigma = gaussian_sigma(rho, l2_sensitivity)
    return np.asarray(values, float) + rng.normal(0.0, sigma, size=np.shape(values))


def laplace_mechanism(
    values: np.ndarray,
    epsilon: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    stage: str,
    party: str | None = None,
    l1_sensitivity: float = 1.0,
    mechanism: str = "laplace",
) -> np.ndarray:
    """values + Lap(Δ₁/ε); charges PureDP(ε) to the ledger first."""
    ledger.spend(Charge(stage, mechanism, PureDP(epsilon), party))
    return np.asarray(values, float) + rng.laplace(0.0, laplace_scale(epsilon, l1_sensitivity), size=np.shape(values))
