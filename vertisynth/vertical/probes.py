"""Cross-party probes: what a vertical twin measures once so that its selection can score pairs no role may read.

A synthesizer whose selection reads true marginals (MST's and AIM's scores, DPSyn's and PrivMRF's InDif/R-scores)
cannot read a pair whose attributes sit at two parties. Its vertical twin measures every such pair once through the
cross-party measure, on coarse bins, paid from its plan (`measure_probes`), and scores the pair from the released
answer (`dependence`, `residual_l1`): post-processing, free. docs/vertical.md says which budget pays the probes of
each twin. The bins are public: equal noisy 1-way mass (`mass_bins`, post-processing of released 1-ways) or equal
width (`width_bins`, from the domain alone, for a synthesizer that measures no 1-ways first).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import math

import numpy as np

from vertisynth.core.domain import Domain
from vertisynth.pgm.estimation import Measurement, bin_query
from vertisynth.pgm.oracle import MarginalOracle, Pay

from .oracle import VerticalOracle, coarse_bins, release_score, residual_above_noise

# privmrf's reads of a release (its R-scores and refinement errors, `dependence`, `residual_l1`) are lower bounds,
# this many independent-cells null stds below the estimate whatever its size: a pair it adds to its graph is then
# measured off the release, noisier than its within-party marginals. The gated score selection uses
# (`release_score`, RELEASE_Z) made it worse: zoo many-parties ε 0.4 0.184 -> 0.197, small-split ε 0.4 0.450 ->
# 0.467, NLTCS ε 1.6 0.0067 -> 0.0072 (seed 0, docs/vertical.md)
PRIVMRF_RELEASE_Z = 10.0

Bins = Mapping[str, np.ndarray]

# trust "none": each side of a cross-party answer adds its full σ² (neither may know the other's noise), so a probe
# releases twice trust server's variance at the same ρ. Where many cross-party pairs share the probes (at least
# REPROBE_PER_ATTRIBUTE per attribute) each probe is so noisy that it ranks pairs badly (zoo wide ε 0.4, 15 per
# attribute: Spearman 0.35-0.38 against the exact errors, 0.50-0.52 under trust server; small-domains, 4 per
# attribute: 0.94). There the probes take REPROBE_PROBE of the selection third (not 0.6) and run in two stages:
# REPROBE_SHARE of their ρ probes the contenders again, REPROBE_FRACTION of the pairs (each attribute's strongest
# first), whose two answers are pooled: 2.5x a one-stage probe's ρ at 0.5 and 0.25, times 0.8/0.6 (docs/vertical.md,
# "trust = none, the worst cells"). Elsewhere two stages lost (small-domains ε 0.4, 8 seeds: mean 1.41 -> 1.57)
REPROBE_PER_ATTRIBUTE = 8
REPROBE_PROBE = 0.8
REPROBE_SHARE = 0.5
REPROBE_FRACTION = 0.25


def mass_bins(one: Sequence[Measurement], k: int, within: Bins | None = None) -> dict[str, np.ndarray]:
    """Each attribute of the noisy 1-way answers `one` on at most `k` bins of about equal noisy mass (values ->
    bin), composed with `within` (an earlier binning of some attributes, e.g. MST's compression; an attribute in
    `within` keeps it when it needs no further coarsening). Attributes with at most k values and no earlier
    binning are left out (measured as they are)."""
    within = within or {}
    out = {}
    for m in one:
        a = m.attributes[0]
        b = coarse_bins(bin_query(m.values, (a,), {a: within[a]} if a in within else None), k, within.get(a))
        if b is not None or a in within:
            out[a] = b if b is not None else within[a]
    return out


def width_bins(domain: Domain, k: int) -> dict[str, np.ndarray]:
    """Each attribute of more than `k` values on `k` bins of consecutive values of equal width (from the domain
    alone: no data read to choose them)."""
    return {a: np.arange(n) * k // n for a, n in zip(domain.attributes, domain.shape) if n > k}


def measure_probes(oracle: MarginalOracle, pairs: Sequence[tuple[str, ...]], pays: Sequence[Pay],
                   rng: np.random.Generator, bins: Bins, sigma: float | None = None,
                   whole: bool = False) -> list[Measurement]:
    """Every pair of `pairs` measured once, each attribute on its `bins` where it has some, as one protocol stage
    (`measure_many`: all checked before any spend; on a vertical oracle each row is encrypted once for all of
    them). `pays`: one planned charge per pair (sigma None: from the charge) or a filter (sigma given). `whole`:
    the attribute at the party whose whole rows the measure sums (`VerticalOracle.whole_rows_party`) is left
    unbinned, so the probes cost no encryption of their own (issue 31; a finer table at the same σ per cell)."""
    unbinned: set[str] = set()
    if whole and isinstance(oracle, VerticalOracle):
        # an attribute goes unbinned only where its party is the whole rows' one in every pair it is in: one stage
        # asks each attribute on one binning (3+ parties: a middle party's attributes stay binned)
        for side in (0, 1):
            unbinned |= {p[side] for p in pairs}
        for p in pairs:
            party = oracle.whole_rows_party(p)
            unbinned -= {a for a in p if party is None or oracle.owner[a] != party}
    wanted = [{a: bins[a] for a in p if a in bins and a not in unbinned} or None for p in pairs]
    return oracle.measure_many(pairs, pays, rng, sigma, wanted)


def reprobes(pairs: int, attributes: int, trust: str | None) -> int:
    """How many of `pairs` probed cross-party pairs of `attributes` attributes are probed again (0: one stage, as
    under trust server): a plan decision from public counts and the trust, made before any data is read."""
    if trust != "none" or pairs < 2 or pairs < REPROBE_PER_ATTRIBUTE * attributes:
        return 0
    return max(1, math.ceil(REPROBE_FRACTION * pairs))


def probe_shares(cross: int, attributes: int, vertical, default: float) -> tuple[float, float, int]:
    """mst's and private_pgm's probe plan: (the probes' share of the selection third, the first stage's share, how
    many pairs the second stage asks again: `reprobes`); `default` where `vertical.probe` is unset."""
    probe = (default if vertical.probe is None else vertical.probe) if cross else 0.0
    again = reprobes(cross, attributes, vertical.trust if vertical is not None else None)
    if again and vertical.probe is None:
        probe = REPROBE_PROBE
    return probe, (probe * (1 - REPROBE_SHARE) if again else probe), again


def measure_probes_twice(oracle: MarginalOracle, pairs: Sequence[tuple[str, ...]], pays: Sequence[Pay],
                         again: Sequence[Pay], rng: np.random.Generator, bins: Bins) -> list[Measurement]:
    """`measure_probes`, then len(again) pairs measured once more on the same bins: each attribute's pair whose first
    answer shows the most dependence, then the others of most dependence (`dependence`, post-processing of released
    answers: which pairs to ask again is public),
    paid by `again` (planned charges). Both answers are returned (a chosen pair's join estimation); on a vertical
    oracle a contender's two answers are pooled (`VerticalOracle.pool`, their inverse-variance mean), which
    selection then scores it by (`_best_answer`: the least noisy answer)."""
    first = measure_probes(oracle, pairs, pays, rng, bins)
    if not again:
        return first
    order = np.argsort(-np.array([dependence(m) for m in first]), kind="stable").tolist()
    # each attribute's strongest pair first (a spanning tree attaches every attribute, often by a weak pair whose
    # first probe alone misleads: zoo small-domains x07), then the strongest of the rest
    seen: set[str] = set()
    cover = [i for i in order if not set(pairs[i]) <= seen and not seen.update(pairs[i])]
    top = sorted((cover + [i for i in order if i not in set(cover)])[:len(again)])
    second = measure_probes(oracle, [pairs[i] for i in top], again, rng, bins)
    if isinstance(oracle, VerticalOracle):
        for i, m in zip(top, second):
            oracle.pool([first[i], m])
    return first + second


def _above_noise(r: np.ndarray, v: float) -> float:
    """Σ √max(r² − v, 0): per cell |x − e| where the residual beats its noise variance v, about 0 where not."""
    return float(np.sqrt(np.maximum(r * r - v, 0.0)).sum())


def dependence(m: Measurement) -> float:
    """InDif of a probed pair, estimated from its released table y alone: the residual from independence
    r = y − y_a y_b / ŷ (its margins), Σ √max(r² − v', 0) with v' the noise variance left after centring. On coarse
    bins it understates the pair's InDif on its full domain (merging cells cancels some dependence)."""
    y = m.values
    r = y - np.outer(y.sum(1), y.sum(0)) / max(y.sum(), 1.0)
    if m.variance is not None:   # an answer read off a release: its own per-cell variance, less the noise's mean
        return release_score(r, m.variance, PRIVMRF_RELEASE_Z, bound=True, correlated=False)
    return _above_noise(r, m.std ** 2 * (1 - 1 / y.shape[0]) * (1 - 1 / y.shape[1]))


def residual_l1(m: Measurement, estimate: np.ndarray) -> float:
    """‖x − e‖₁ of a probed pair on its probe's bins, from the released table y: the model's `estimate` of the pair
    (its full table over m.attributes) summed into the probe's bins, the residual y − e double-centred (the pair's
    margins are measured elsewhere; its dependence lives in the interaction), then Σ √max(r² − v', 0)."""
    e = bin_query(np.asarray(estimate, float), m.attributes, m.bins)
    if m.variance is not None:   # an answer read off a release: its own per-cell variance, a lower bound
        return release_score(m.values - e, m.variance, PRIVMRF_RELEASE_Z, bound=True, correlated=False)
    return residual_above_noise(m.values - e, m.std ** 2)


def dependence_std(m: Measurement) -> float:
    """The spread of `dependence(m)` on a pair with no dependence: each of the c cells adds √max(r² − v', 0) of a
    centred normal r, whose std is 0.61·√v' (numerically), so about 0.61·√(v' c) in all (cells taken as
    independent). Public: it follows from the probe's released shape and variance."""
    r, c = m.values.shape
    v = m.std ** 2 * (1 - 1 / r) * (1 - 1 / c)
    return 0.61 * float(np.sqrt(v * r * c))


# privmrf under trust "none" (its probes pay both its R-scores and its refinement rounds): a second stage where
# PRIVMRF_REPROBE_SHARE of the probes' ρ re-probes PRIVMRF_REPROBE_FRACTION of the cross-party pairs just before
# refinement, the pairs refinement is about to compare (`privmrf_contenders`), each pooled with its first answer.
# Off (share 0): at 0.5 and 0.25 it lowered small-domains ε 1.6 seed 1 (1.29 -> 1.21) but raised the grid's median
# and made zoo wide ε 0.4 seed 1 1.21 -> 1.34, NLTCS ε 0.4 seed 2 1.26 -> 1.36 (docs/vertical.md, "privmrf under
# trust = none, second pass"); kept for measurement (benchmarks/privmrf_none_ablation.py `reprobe=S/F`)
PRIVMRF_REPROBE_SHARE = 0.0
PRIVMRF_REPROBE_FRACTION = 0.25


def privmrf_reprobes(pairs: int, trust: str | None) -> tuple[int, float]:
    """How many of privmrf's `pairs` probed cross-party pairs are probed again, and the share of the probes' ρ
    they take ((0, 0.0): one stage, as under trust server, and by default): a plan decision from the public count
    of pairs and the trust, before any data is read."""
    if trust != "none" or pairs < 2 or PRIVMRF_REPROBE_SHARE <= 0:
        return 0, 0.0
    return max(1, math.ceil(PRIVMRF_REPROBE_FRACTION * pairs)), PRIVMRF_REPROBE_SHARE


def privmrf_contenders(pairs: Sequence[tuple[str, ...]], scores: Sequence[float], wanted: set, k: int) -> list[int]:
    """Which `k` of `pairs` privmrf probes again (indices, in `pairs` order): the pairs some refinement candidate
    holds (`wanted`) of the largest `scores` (their released probes' residuals from the model: post-processing),
    then the others of the largest scores, so that every planned re-probe is asked."""
    order = np.argsort(-np.asarray(scores, float), kind="stable").tolist()
    first = [i for i in order if frozenset(pairs[i]) in wanted]
    return sorted((first + [i for i in order if frozenset(pairs[i]) not in wanted])[:k])


def pool_answers(oracle: MarginalOracle, answers: Sequence[Measurement]) -> Measurement:
    """The inverse-variance mean of released answers to one query on the same bins (`VerticalOracle.pool`, which
    keeps it for the oracle's scores; on any other oracle the same mean). Post-processing, free."""
    if isinstance(oracle, VerticalOracle):
        return oracle.pool(answers)
    w = np.array([1.0 / (m.std * m.std) for m in answers])
    return Measurement(answers[0].attributes, sum(wi * m.values for wi, m in zip(w, answers)) / w.sum(),
                       float(1.0 / math.sqrt(w.sum())), answers[0].bins)
