"""What the auditor could certify at best: the power of its test when the output distributions are known.

The audit's phase 2 counts one event E on n fresh samples per side and certifies
ε_lb = ln((CP_lower(k₁) − δ) / CP_upper(k₂)) (`audit.epsilon_lower_bound`). When a mechanism's output
probabilities on a pair are known exactly over a finite set of cells (single outcomes, or a fine
discretisation of continuous values; `zoo.SparseVector.output_probabilities`), the best any event can
do is computable: by the Neyman-Pearson lemma, for a given probability Q(E) under one side, the event
with the largest P(E) under the other takes the cells in decreasing order of their likelihood ratio
P/Q, so every event made of the cells lies on or below the frontier traced by those prefixes
(randomised boundary cells fill in the segments between them). `best_event` scans that frontier; the
bound is read at the expected counts n·P(E), n·Q(E), and `detection_probability` gives the exact
probability, over both sides' binomial counts, that the test on an event flags a violation.

This is an upper bound for the audit's event search (which must also find the event from samples), so
when it stays under the claimed ε no choice of events can catch the mechanism on that pair at that n
and α: a miss of the sample size, not of the kit.
"""
from __future__ import annotations

import math

import attrs
import numpy as np
from scipy.stats import binom

from vertisynth.core.errors import ConfigError

from .audit import DEFAULT_ALPHA, cp_lower, cp_upper, epsilon_lower_bound

# Points read on each segment of the frontier between two prefixes (randomised boundary cells).
_SEGMENT_POINTS = np.linspace(0.0, 1.0, 9)[1:]
_NEAR_BEST = 32  # prefixes around which the segments are read


@attrs.frozen
class BestEvent:
    """The best event of a pair: its bound at the expected counts, its probabilities and its cells."""

    epsilon_lb: float  # ln((CP_lower(n·p_event) − δ) / CP_upper(n·q_event)) at the expected counts
    p_event: float  # probability of the event on the side where it is likelier
    q_event: float  # ... and on the other side
    swapped: bool  # True: the event is likelier under the second distribution
    cells: np.ndarray  # indices of the (whole) cells in the event, best first

    @property
    def log_ratio(self) -> float:
        """ln(p_event / q_event): what the bound tends to as n grows (δ = 0)."""
        return math.log(self.p_event / self.q_event) if self.q_event > 0 else math.inf


def alpha_per_interval(alpha: float = DEFAULT_ALPHA, n_pairs: int = 1, n_claims: int = 1) -> float:
    """The level of each Clopper-Pearson interval, split as `audit` splits α (pairs x claims x 2)."""
    if not 0 < alpha < 1 or n_pairs < 1 or n_claims < 1:
        raise ConfigError(f"alpha must be in (0, 1) and the counts >= 1, got {alpha}, {n_pairs}, {n_claims}")
    return alpha / (2 * n_pairs * n_claims)


def _check(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p, q = np.asarray(p, float).ravel(), np.asarray(q, float).ravel()
    if p.shape != q.shape or p.size == 0:
        raise ConfigError(f"best_event: p and q must be non-empty and of the same size, got {p.shape}, {q.shape}")
    if np.any(p < 0) or np.any(q < 0) or not (np.all(np.isfinite(p)) and np.all(np.isfinite(q))):
        raise ConfigError("best_event: probabilities must be finite and >= 0")
    if p.sum() > 1 + 1e-3 or q.sum() > 1 + 1e-3:  # numerical integrals: a little slack
        raise ConfigError(f"best_event: probabilities sum to more than 1 ({p.sum():.6g}, {q.sum():.6g})")
    return p, q


def _one_direction(p: np.ndarray, q: np.ndarray, n: int, a: float, delta: float):
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, 0.0))
    order = np.argsort(-ratio, kind="stable")
    cp, cq = np.r_[0.0, np.cumsum(p[order])], np.r_[0.0, np.cumsum(q[order])]
    # the frontier: the prefixes, then points on the segments next to the best prefixes (randomised
    # boundary cells; the bound along the frontier is smooth, so its maximum sits near the best prefix)
    at_prefix = epsilon_lower_bound(cp[1:] * n, cq[1:] * n, n, a, delta)
    near = np.unique(np.clip(np.argsort(-at_prefix)[:_NEAR_BEST, None] + np.arange(-1, 2)[None, :], 0,
                             len(at_prefix) - 1))
    t = _SEGMENT_POINTS[None, :]
    fp = (cp[near, None] + t * (cp[near + 1] - cp[near])[:, None]).ravel()
    fq = (cq[near, None] + t * (cq[near + 1] - cq[near])[:, None]).ravel()
    bounds = epsilon_lower_bound(fp * n, fq * n, n, a, delta)
    i = int(np.argmax(bounds))
    size = int(near[i // len(_SEGMENT_POINTS)]) + 1  # whole cells up to and including this segment's end
    return float(bounds[i]), float(fp[i]), float(fq[i]), order[:size]


def best_event(p, q, n: int, alpha: float = DEFAULT_ALPHA, n_pairs: int = 1, n_claims: int = 1,
               delta: float = 0.0) -> BestEvent:
    """The largest ε_lb any event over these cells gives with n samples per side, at expected counts.

    `p`, `q`: the output probabilities of the two sides over the same cells (summing to at most 1);
    α split as the audit splits it over `n_pairs` x `n_claims` x 2 intervals.
    """
    p, q = _check(p, q)
    if n < 1:
        raise ConfigError(f"best_event: n must be >= 1, got {n}")
    a = alpha_per_interval(alpha, n_pairs, n_claims)
    fwd = _one_direction(p, q, n, a, delta)
    bwd = _one_direction(q, p, n, a, delta)
    (lb, pe, qe, cells), swapped = max((fwd, False), (bwd, True), key=lambda t: t[0][0])
    return BestEvent(lb, pe, qe, swapped, cells)


def detection_probability(p_event: float, q_event: float, n: int, epsilon: float, alpha: float = DEFAULT_ALPHA,
                          n_pairs: int = 1, n_claims: int = 1, delta: float = 0.0) -> float:
    """The exact probability that the test on an event of probabilities (p_event, q_event), counted on n
    fresh samples per side, certifies ε_lb > `epsilon` (k₁ ~ Bin(n, p_event), k₂ ~ Bin(n, q_event))."""
    if not (0 <= q_event <= 1 and 0 <= p_event <= 1) or n < 1:
        raise ConfigError(f"detection_probability: need probabilities in [0, 1] and n >= 1, got "
                          f"{p_event}, {q_event}, {n}")
    a = alpha_per_interval(alpha, n_pairs, n_claims)
    k1 = np.arange(n + 1) if n <= 20_000 else _support(n, p_event)
    k2 = np.arange(n + 1) if n <= 20_000 else _support(n, q_event)
    # ε_lb > ε  ⇔  CP_upper(k₂) < (CP_lower(k₁) − δ) e^(−ε); CP_upper grows with k₂, so count k₂ below a cut
    need = (cp_lower(k1, n, a) - delta) * math.exp(-epsilon)
    upper = cp_upper(k2, n, a)
    n_ok = np.searchsorted(upper, need, side="left")  # how many k₂ values (from k2[0]) pass
    cdf2 = np.r_[0.0, binom.cdf(k2, n, q_event)]  # P[k₂ <= k2[m − 1]] at index m (0: none pass)
    return float(np.clip(np.sum(binom.pmf(k1, n, p_event) * cdf2[n_ok]), 0.0, 1.0))


def _support(n: int, p: float, sds: float = 12.0) -> np.ndarray:
    """The counts holding all but a negligible part of Bin(n, p)."""
    sd = math.sqrt(max(n * p * (1 - p), 1.0))
    lo, hi = max(0, int(n * p - sds * sd) - 10), min(n, int(n * p + sds * sd) + 10)
    return np.arange(lo, hi + 1)


# The reference a claim's sample size is sized for: an event of probabilities near ½ whose log-ratio is
# UNDERCLAIM_RATIO x the claimed ε must be certified above ε with probability DETECTION_TARGET. A component
# that declares 1/10 of its true cost shows such an event on the kit's test bed even through its post-processed
# default output (docs/testing.md, "How many samples catch what").
UNDERCLAIM_RATIO = 2.0
DETECTION_TARGET = 0.9


def samples_for_claim(epsilon: float, delta: float = 0.0, alpha: float = DEFAULT_ALPHA, n_pairs: int = 1,
                      n_claims: int = 1, ratio: float = UNDERCLAIM_RATIO, target: float = DETECTION_TARGET,
                      most: int = 10**7) -> int:
    """The fresh samples per side at which the audit certifies ε_lb > `epsilon` with probability `target` on an
    event of probabilities p, 1 − p (p > ½) with ln(p / (1 − p)) = `ratio`·ε: a violation `ratio` times
    the claim, on the most common kind of event. Grows like 1/ε²; `most` caps it (an ε of 0 gives `most`)."""
    if not (epsilon >= 0 and math.isfinite(epsilon)) or ratio <= 1 or not 0 < target < 1:
        raise ConfigError(f"samples_for_claim: need a finite ε >= 0, ratio > 1 and target in (0, 1), got "
                          f"{epsilon}, {ratio}, {target}")
    if epsilon == 0:
        return most
    p = 1.0 / (1.0 + math.exp(-ratio * epsilon))

    def caught(n: int) -> bool:
        return detection_probability(p, 1 - p, n, epsilon, alpha, n_pairs, n_claims, delta) >= target

    lo, hi = 10, 10
    while not caught(hi):
        if hi >= most:
            return most
        lo, hi = hi, min(most, hi * 2)
    while hi - lo > max(1, lo // 100):   # to 1%: the binomial tails make `caught` monotone only roughly
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if caught(mid) else (mid, hi)
    return hi
