"""Dimension reduction for VertiMRF (seed 003, §6.1): equal-width binning, DP value distributions, HisRec.

Party side. An attribute with domain size u is cut into b equal-width bins (value v → bin ⌊v·b/u⌋);
the bin edges depend only on u, so they reveal nothing. To recover full-domain tables later, the
party also sends each value's frequency, perturbed with the Laplace mechanism: one person changes
one value count of the attribute by 1 (L1 sensitivity 1), so Lap(1/ε') per count is ε'-DP per
attribute, and the binned attributes of all parties compose sequentially (Σ ε'). (The reference
code skips this noise; the paper requires it, and so do we.) Value distributions U(j,l) are the
noisy counts clipped at 0 and normalised within each bin (uniform within a bin whose counts vanish).

Server side (HisRec). A table estimated on binned attributes is spread over the raw values by
T_high[v_1..v_k] = T_low[bin(v_1)..bin(v_k)] · Π_i U_i[v_i]   (k-way generalisation of the paper's 2-way
formula); attributes that were not binned pass through. `uniform` value distributions give the ablation
baseline of Appendix A.1 (Figure 10).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import DomainError
from vertisynth.core.factor import Factor
from vertisynth.core.mechanisms import laplace_mechanism
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Charge, PrivacyLedger, PureDP

STAGE = "value_distributions"


def bin_map(size: int, bins: int) -> np.ndarray:
    """Equal-width bin of every value 0..size-1 (no binning when size <= bins)."""
    if bins < 1:
        raise DomainError(f"number of bins must be >= 1, got {bins}")
    if size <= bins:
        return np.arange(size)
    return (np.arange(size) * bins) // size


def mass_bin_map(probabilities: np.ndarray, bins: int) -> np.ndarray:
    """Equal-mass bins of the values 0..u-1 from a (DP) 1-way distribution: contiguous, exactly `bins` of them
    (each at least one value), cut where the cumulative mass crosses k / bins. With u <= bins, no binning."""
    p = np.clip(np.asarray(probabilities, float), 0, None)
    u = p.size
    if u <= bins:
        return np.arange(u)
    cdf = np.cumsum(p) / p.sum() if p.sum() > 0 else np.arange(1, u + 1) / u
    target = np.arange(1, bins) / bins
    first = np.minimum(np.searchsorted(cdf, target, side="left"), u - 1)     # first value whose cdf reaches k / b
    below = np.abs(cdf[np.maximum(first - 1, 0)] - target) < np.abs(cdf[first] - target)
    cuts = np.where(below & (first > 0), first, first + 1)    # first value of bins 1..b-1: the nearer crossing
    for k in range(bins - 1):     # strictly increasing and leaving room for the bins after it
        lo = cuts[k - 1] + 1 if k else 1
        cuts[k] = min(max(cuts[k], lo), u - (bins - 1 - k))
    return np.searchsorted(cuts, np.arange(u), side="right")


def binned_domain(domain: Domain, bins: int, attrs_: Sequence[str] | None = None) -> Domain:
    attrs_ = list(domain.attributes if attrs_ is None else attrs_)
    return Domain(domain.attributes, [int(bin_map(s, bins).max()) + 1 if a in attrs_ else s
                                      for a, s in zip(domain.attributes, domain.shape)])


def bin_dataset(data: Dataset, bins: int, attrs_: Sequence[str] | None = None,
                maps: Mapping[str, np.ndarray] | None = None) -> Dataset:
    """The party's table with `attrs_` (default all) replaced by their bin indices (equal-width, or `maps`)."""
    dom = binned_domain(data.domain, bins, attrs_)
    codes = data.codes.copy()
    for j, a in enumerate(data.domain.attributes):
        if attrs_ is None or a in attrs_:
            bm = maps[a] if maps and a in maps else bin_map(data.domain.shape[j], bins)
            codes[:, j] = bm[codes[:, j]]
    return Dataset(codes, dom)


@attrs.frozen(eq=False)
class ValueDistributions(Message):
    """Per binned attribute: the DP within-bin distribution of its raw values, and the bin of each value."""

    kind: ClassVar[str] = "value_distributions"
    bins: int = 4
    distributions: dict[str, np.ndarray] = attrs.field(factory=dict)  # attr -> P(value | its bin), length u

    def validate(self) -> ValueDistributions:
        super().validate()
        for a, u in self.distributions.items():
            if u.ndim != 1 or (u < 0).any():
                raise self._fail(f"distribution of {a!r} must be a non-negative vector")
            sums = np.bincount(bin_map(u.size, self.bins), weights=u)
            if not np.allclose(sums, 1.0, atol=1e-6):
                raise self._fail(f"distribution of {a!r} does not sum to 1 within every bin")
        return self


def planned_charges(party: str, attrs_: Sequence[str], epsilon_per_attr: float) -> list[Charge]:
    return [Charge(STAGE, "laplace_value_counts", PureDP(epsilon_per_attr), party, f"{a!r}") for a in attrs_]


def normalise_within_bins(counts: np.ndarray, bins: int) -> np.ndarray:
    c = np.clip(np.asarray(counts, float), 0, None)
    bm = bin_map(c.size, bins)
    totals = np.bincount(bm, weights=c, minlength=bm.max() + 1)
    sizes = np.bincount(bm)
    return np.where(totals[bm] > 0, c / np.where(totals[bm] > 0, totals[bm], 1), 1.0 / sizes[bm])


def measure_value_distributions(party: str, view: Dataset, bins: int, attrs_: Sequence[str],
                                charges: Mapping[str, Charge], ledger: PrivacyLedger,
                                rng: np.random.Generator) -> ValueDistributions:
    """Party side: Laplace-noised value counts of each binned attribute (its planned charge from
    `planned_charges`), normalised within bins."""
    out = {}
    for a in attrs_:
        counts = view.counts([a]).values
        noisy = laplace_mechanism(counts, charges[a], rng, ledger)
        out[a] = normalise_within_bins(noisy, bins)
    return ValueDistributions(party=party, bins=bins, distributions=out).validate()


def uniform_distributions(domain: Domain, bins: int, attrs_: Sequence[str]) -> dict[str, np.ndarray]:
    return {a: normalise_within_bins(np.ones(domain.size(a)), bins) for a in attrs_}


def hisrec(low: Factor, raw_domain: Domain, distributions: Mapping[str, np.ndarray], bins: int) -> Factor:
    """Recover the full-domain table from one over binned attributes (attributes without a distribution pass)."""
    high_dom = raw_domain.project(low.attributes)
    index = []
    weights = []
    for a in low.attributes:
        u = high_dom.size(a)
        if a in distributions:
            bm = bin_map(u, bins)
            if bm.max() + 1 != low.domain.size(a):
                raise DomainError(f"HisRec: {a!r} has {low.domain.size(a)} bins in the table, {bm.max() + 1} expected")
            index.append(bm)
            weights.append(np.asarray(distributions[a], float))
        else:
            if low.domain.size(a) != u:
                raise DomainError(f"HisRec: {a!r} is not binned but its sizes differ ({low.domain.size(a)} vs {u})")
            index.append(np.arange(u))
            weights.append(np.ones(u))
    vals = low.values[np.ix_(*index)]
    for axis, w in enumerate(weights):
        shape = [1] * len(weights)
        shape[axis] = w.size
        vals = vals * w.reshape(shape)
    return Factor(high_dom, vals)
