"""How one zCDP filter is split among marginals whose answers are released with different variance at the same ρ.

A cross-party answer under trust "none" carries both sides' noise: paid ρ = 1/(2σ²), released with per-cell
variance 2σ², so f = 2 against a within-party answer's 1 (`released_factor`, read off the measure). With n answers
sharing a budget R and answer i's expected L1 error ∝ c_i·√(f_i/ρ_i) (c_i cells, each of std √(f_i/(2ρ_i))),
minimising Σ_i w_i √(f_i/ρ_i) subject to Σ ρ_i = R (Lagrange: w_i √f_i ρ_i^(-3/2) / 2 = λ for every i) gives
ρ_i ∝ (w_i² f_i)^(1/3): w_i = 1 weighs every marginal's error alike (`split_rho` without cells, ρ_i ∝ f_i^(1/3):
a cross pair 2^(1/3) ≈ 1.26x a within-party pair's ρ), w_i = c_i weighs it by its cells' summed error.
The split is a function of the answers' attributes, bins and the measure (public, or released before: a DP
selection's output) and is fixed before any of them reads data; each draw then pays its ρ_i from the filter.
"""
from __future__ import annotations

from collections.abc import Sequence

import math

import numpy as np

from vertisynth.core.errors import ConfigError
from vertisynth.pgm.estimation import Measurement
from vertisynth.pgm.oracle import Bins, MarginalOracle, ZCDPFilter

from .oracle import VerticalOracle


def released_factor(oracle: MarginalOracle, attributes: Sequence[str]) -> float:
    """f: an answer's released per-cell variance over 1/(2ρ), the variance the central Gaussian has at the ρ it
    costs. 1 within one party (and on a central oracle); across two parties the measure's own (2 for `he` under
    trust "none", at any σ: released 2σ², paid 1/(2σ²))."""
    if not isinstance(oracle, VerticalOracle) or not oracle.crosses(attributes):
        return 1.0
    m = oracle.cross_measure
    return float(m.released_variance(1.0) * 2.0 * m.rho_per_table(1.0))


def split_rho(total: float, factors: Sequence[float], cells: Sequence[float] | None = None) -> list[float]:
    """ρ_i ∝ (c_i² f_i)^(1/3) summing to `total` (c_i = 1 without `cells`): the split of minimal Σ c_i √(f_i/ρ_i)."""
    f = np.asarray(factors, float)
    c = np.ones_like(f) if cells is None else np.asarray(cells, float)
    if not (f.size and f.shape == c.shape and np.all(f > 0) and np.all(c > 0) and total > 0):
        raise ConfigError(f"split_rho: needs a positive total and positive factors (and cells), one per answer; "
                          f"got total {total}, {f.size} factors, {c.size} cells")
    w = np.cbrt(c * c * f)
    return (total * w / w.sum()).tolist()


def measure_split(oracle: MarginalOracle, queries: Sequence[tuple[str, ...]], filt: ZCDPFilter,
                  rhos: Sequence[float], rng: np.random.Generator,
                  bins: Sequence[Bins] | None = None) -> list[Measurement]:
    """Each query paid its ρ_i from `filt`, answered in order: the queries of one σ as one `measure_many` stage
    (a cross-party answer's σ from its measure, `sigma_for_rho`; a within-party one's 1/√(2ρ_i))."""
    bins = list(bins) if bins is not None else [None] * len(queries)
    if not len(queries) == len(rhos) == len(bins):
        raise ConfigError("measure_split: needs one ρ and one bins entry per query")
    if sum(rhos) > filt.remaining * (1 + 1e-9):
        raise ConfigError(f"measure_split: the split's Σρ {sum(rhos):.6g} exceeds the filter's {filt.remaining:.6g}")
    sigmas = [oracle.cross_measure.sigma_for_rho(r) if isinstance(oracle, VerticalOracle) and oracle.crosses(q)
              else 1.0 / math.sqrt(2.0 * r) for q, r in zip(queries, rhos)]
    groups: dict[float, list[int]] = {}
    for i, s in enumerate(sigmas):
        groups.setdefault(s, []).append(i)
    out: dict[int, Measurement] = {}
    for s, idx in groups.items():
        for i, m in zip(idx, oracle.measure_many([queries[i] for i in idx], [filt] * len(idx), rng, s,
                                                 [bins[i] for i in idx])):
            out[i] = m
    return [out[i] for i in range(len(queries))]
