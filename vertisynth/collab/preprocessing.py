"""DP preprocessing over the combined data of several custodians (seed 004, §4.1 and Appendix A.5).

The paper bins each numeric column at its quartiles computed in MPC over all custodians' rows, and
de-bins with the mean of each bin — neither of which is DP (its Appendix A.5 leaves DP quantiles as
future work). Here both are DP and go through secure aggregation, so no custodian's values are seen:

  * Quantile edges: every custodian counts its values on a fine public grid over public bounds; the
    grid histograms are summed by secure aggregation with Gaussian noise (sensitivity 1, one
    person is one value), and edges are read off the cumulative noisy histogram (post-processing).
  * Bin means: per bin, custodians share the count and the sum of their values (clipped to the public
    bounds, shifted to start at 0 and in fixed point with `scale`); one person changes one bin's sum by at
    most (high − low), so the sums' sensitivity is that range. Means are noisy sum / noisy count,
    clipped into the bin.
Costs (zCDP, each charged to the ledger as planned): histogram Δ²/(2σ²) with Δ = 1, counts the same,
sums with Δ = (high − low).
"""
from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from vertisynth.core.errors import DataError
from vertisynth.core.mechanisms import gaussian_sigma
from vertisynth.core.privacy import Charge, PrivacyLedger

from .secure_aggregation import Transport, as_transport, planned_charge


@attrs.frozen
class QuantileBinningPlan:
    column: str
    bounds: tuple[float, float]
    bins: int
    rho_hist: float
    rho_means: float
    grid: int = 1000
    scale: float = 100.0  # fixed point for sums

    def charges(self) -> list[Charge]:
        lo, hi = self.bounds
        out = [planned_charge(f"{self.column}:grid", gaussian_sigma(self.rho_hist))]
        if self.rho_means > 0:
            half = self.rho_means / 2
            out.append(planned_charge(f"{self.column}:bin_counts", gaussian_sigma(half)))
            out.append(planned_charge(f"{self.column}:bin_sums", gaussian_sigma(half, hi - lo), hi - lo))
        return out


def _secure_sum(query: str, per_custodian: Mapping[str, np.ndarray], sigma: float, n_servers: int,
                rng, ledger: PrivacyLedger | None, sensitivity: float) -> np.ndarray:
    """One secure-aggregation round (`rng`: a Generator or a Transport), charged to the ledger if given."""
    total = as_transport(rng, n_servers).total(query, per_custodian, sigma)
    if ledger is not None:
        ledger.spend(planned_charge(query, sigma, sensitivity))
    return total


def combined_quantile_binning(plan: QuantileBinningPlan, values: Mapping[str, np.ndarray], ledger: PrivacyLedger,
                              rng: np.random.Generator | Transport, n_servers: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """DP bin edges at quantiles k/bins over all custodians, and DP bin means (for de-binning).

    `rng` is a Generator (simulation) or a Transport (the same rounds as files between processes); every
    custodian in `values` contributes its counts, and everything after each round is post-processing."""
    if not values:
        raise DataError("no custodian values given")
    rng = as_transport(rng, n_servers)
    lo, hi = plan.bounds
    grid_edges = np.linspace(lo, hi, plan.grid + 1)
    hists = {}
    for name, v in values.items():
        v = np.asarray(v, float)
        if np.isnan(v).any():
            raise DataError(f"custodian {name!r}: column {plan.column!r} has missing values")
        idx = np.clip(np.searchsorted(grid_edges, np.clip(v, lo, hi), side="right") - 1, 0, plan.grid - 1)
        hists[name] = np.bincount(idx, minlength=plan.grid).astype(np.int64)
    sigma_h = gaussian_sigma(plan.rho_hist)
    noisy = _secure_sum(f"{plan.column}:grid", hists, sigma_h, n_servers, rng, ledger, 1.0).astype(float)
    # cumulate the unclipped noise (zero mean, so the running total stays unbiased; clipping every empty
    # cell at 0 first would add ~0.4σ of spurious mass per cell and drag the quantiles towards the middle
    # of the range), then make it monotone
    cum = np.maximum.accumulate(np.cumsum(noisy))
    total = cum[-1] if cum[-1] > 0 else 1.0
    inner = []
    for k in range(1, plan.bins):
        i = int(np.searchsorted(cum, k / plan.bins * total))
        inner.append(grid_edges[min(i + 1, plan.grid)])
    edges = np.concatenate([[lo], np.maximum.accumulate(np.asarray(inner, float)), [hi]])
    if plan.rho_means <= 0:
        return edges, (edges[:-1] + edges[1:]) / 2
    counts, sums = {}, {}
    for name, v in values.items():
        v = np.clip(np.asarray(v, float), lo, hi)
        b = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, plan.bins - 1)
        counts[name] = np.bincount(b, minlength=plan.bins).astype(np.int64)
        # floor per value, so one person adds at most (high − low)·scale to one bin's sum
        fixed = np.floor((v - lo) * plan.scale)
        sums[name] = np.bincount(b, weights=fixed, minlength=plan.bins).astype(np.int64)
    half = plan.rho_means / 2
    n_bins = _secure_sum(f"{plan.column}:bin_counts", counts, gaussian_sigma(half), n_servers, rng, ledger, 1.0)
    s_bins = _secure_sum(f"{plan.column}:bin_sums", sums, gaussian_sigma(half, hi - lo) * plan.scale, n_servers, rng,
                         None, 1.0)
    ledger.spend(planned_charge(f"{plan.column}:bin_sums", gaussian_sigma(half, hi - lo), hi - lo))
    means = lo + (s_bins / plan.scale) / np.maximum(n_bins, 1)
    means = np.clip(means, edges[:-1], edges[1:])
    return edges, means
