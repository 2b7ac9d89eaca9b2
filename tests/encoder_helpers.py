"""Small shared pieces of the encoder tests: a correlated toy table and a Clopper-Pearson audit.

The audit helper is deliberately local (a general auditor lives on another branch; the lead unifies).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger


def toy_data(n: int = 3000, seed: int = 0) -> tuple[Dataset, VerticalPartition]:
    """Four attributes over two parties, with cross-party correlation (b copies a, d copies c often)."""
    rng = np.random.default_rng(seed)
    dom = Domain(["a", "b", "c", "d"], [3, 4, 2, 5])
    a = rng.choice(3, n, p=[0.6, 0.3, 0.1])
    c = rng.integers(0, 2, n)
    b = np.where(rng.random(n) < 0.7, a, rng.integers(0, 4, n))
    d = np.where(rng.random(n) < 0.6, c + 2 * (a == 0), rng.integers(0, 5, n))
    data = Dataset(np.column_stack([a, c, b, d]).astype(np.int64)[:, [0, 2, 1, 3]], dom)
    part = VerticalPartition.from_lists([["a", "c"], ["b", "d"]], ["alice", "bob"])
    return data, part


def planned(encoder, data: Dataset, part: VerticalPartition, epsilon: float, delta: float = 1e-5, n_public=None):
    ctx = PlanContext(data.domain, part, Budget(epsilon, delta), n_public=n_public)
    ledger = PrivacyLedger(ctx.budget)
    ledger.plan(encoder.plan(ctx))
    ledger.check_plan()
    return ledger


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 − alpha) Clopper-Pearson interval for a binomial proportion k/n."""
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(out_d: np.ndarray, out_d2: np.ndarray, events, alpha: float = 1e-3) -> float:
    """Largest ε certified by any event E, either direction: ln(CP_low(P[E|D]) / CP_high(P[E|D'])).

    With probability >= 1 − alpha (Bonferroni over events and directions) the result is a valid
    lower bound on the mechanism's true ε, so a correctly calibrated mechanism stays below its ε.
    """
    level = alpha / (2 * len(events))
    best = 0.0
    for event in events:
        k1, k2 = int(event(out_d).sum()), int(event(out_d2).sum())
        lo1, hi1 = clopper_pearson(k1, out_d.size, level)
        lo2, hi2 = clopper_pearson(k2, out_d2.size, level)
        for lo, hi in ((lo1, hi2), (lo2, hi1)):
            if lo > 0 and hi > 0:
                best = max(best, math.log(lo / hi))
    return best


class SpilledStream:
    """A chunk stream backed by a spill (what coded_chunks is after its first pass): replayed whole, or cut into
    the task slices a Dask job maps."""

    def __init__(self, spill):
        self.spill = spill

    def __call__(self):
        return self.spill.replay()

    def slices(self, rows):
        return self.spill.slices(rows)
