"""Two-phase statistical privacy auditor: an empirical lower bound on ε from black-box samples.

Method (the standard "DP distinguisher" audit, e.g. Ding et al. 2018 "Detecting Violations of
Differential Privacy"; Jagielski et al. 2020; Nasr et al. 2021):

A mechanism M is (ε, δ)-DP iff for every neighbouring pair (D, D') and every output event E
    P[M(D) ∈ E] ≤ e^ε · P[M(D') ∈ E] + δ.
So any event gives the lower bound  ε ≥ ln((P[M(D) ∈ E] − δ) / P[M(D') ∈ E]).

  phase 1 (selection):  draw m₁ outputs from M(D) and from M(D'); among the candidate events
                        (single outcomes for discrete outputs; threshold events {s ≥ t}, {s ≤ t} on a
                        scalar summary s) in both directions, pick the one whose bound, projected to
                        the phase-2 sample size from pessimistic phase-1 rates, is largest;
  phase 2 (test):       on n *fresh* outputs from each side, count the chosen event: k₁ and k₂;
                        one-sided Clopper-Pearson bounds p₁ ≥ CP_lower(k₁), p₂ ≤ CP_upper(k₂), and
                        ε_lb = ln((CP_lower(k₁) − δ) / CP_upper(k₂)).
A violation is flagged when ε_lb > claimed ε.

Guarantee: phase 2 uses samples independent of the selection, so for a mechanism that really is
(ε, δ)-DP, P[ε_lb > ε] ≤ P[p₁ < CP_lower] + P[p₂ > CP_upper] ≤ α, where α is split evenly over the
pairs, the claims ((ε, δ) points, see `claimed_profile`) and the two intervals of each (Bonferroni). A false alarm therefore has probability at
most α (default 1e-6); a passing audit proves nothing (the event or pair may just be the wrong one).

Vector outputs are reduced to scalar summaries learned in phase 1 only: a diagonal linear
discriminant w_j = (mean₁ⱼ − mean₂ⱼ) / var_j (the likelihood ratio of a Gaussian shift) and its
per-coordinate clipped form (the likelihood ratio of a Laplace shift), whose top threshold isolates
"every changed coordinate moved", where composed pure-DP noise is tight.
More candidates (any function of the output is post-processing, so every one is a valid event; only
the one chosen in phase 1 is tested, so they cost nothing in α): the caller's `events` and
`summaries`, and a learned event (DP-Sniper, Bichsel et al. 2021): a classifier trained on half of the
phase-1 samples, its score thresholded on the other half. `features` maps structured outputs (mixed
codes and values, variable length; see `features.py`) to numbers for the classifier.
A claim can be a curve (`cost=`): a Gaussian mechanism's exact (ε, δ) curve or a zCDP/RDP cost's is
audited at several δ, where an under-set σ shows with far fewer samples than at the budget's δ.

A mechanism under audit only needs `sample(dataset, n_samples, rng) -> ndarray` returning
`n_samples` outputs (shape (n,) or (n, k)); vectorise it so that 10⁵–10⁶ samples take seconds.
`looped(fn)` wraps a one-output function (the real code path) when no vectorised hook exists.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np
from scipy.special import betaincinv  # the Beta quantile, without importing all of scipy.stats
from threadpoolctl import threadpool_limits

from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.privacy import Composition, Cost

# Samples drawn from each side of a pair in phase 2 (phase 1 draws a quarter of that).
AUDIT_LEVELS: dict[str, int] = {"smoke": 20_000, "standard": 100_000, "thorough": 1_000_000}
DEFAULT_ALPHA = 1e-6
_LEVEL_ENV = "VERTISYNTH_AUDIT"
_default_level = "smoke"


def set_default_level(level: str) -> None:
    """Audit level used when a caller gives none (the pytest plugin sets it from --vertisynth-audit)."""
    global _default_level
    _check_level(level)
    _default_level = level


def default_level() -> str:
    level = os.environ.get(_LEVEL_ENV, _default_level)
    _check_level(level)
    return level


def _check_level(level: str) -> None:
    if level not in AUDIT_LEVELS:
        raise ConfigError(f"audit level must be one of {sorted(AUDIT_LEVELS)}, got {level!r}")


# -- the mechanism protocol ---------------------------------------------------------------------
@runtime_checkable
class AuditableMechanism(Protocol):
    def sample(self, dataset: Any, n_samples: int, rng: np.random.Generator) -> np.ndarray: ...


@attrs.frozen
class looped:
    """Vectorised-sampling hook around a function returning ONE output: `fn(dataset, rng) -> array`.

    Slow (a Python call per sample) but it audits the component's real code path.
    """

    fn: Callable[[Any, np.random.Generator], Any]
    raw: bool = False  # True: keep the outputs as they are (a list; structured, variable-length), for features=

    def sample(self, dataset: Any, n_samples: int, rng: np.random.Generator) -> Any:
        if self.raw:
            return [self.fn(dataset, rng) for _ in range(n_samples)]
        return np.stack([np.asarray(self.fn(dataset, rng)).ravel() for _ in range(n_samples)])


@attrs.frozen
class NeighbourPair:
    """Two datasets that differ in one person's record; `relation` is add/remove/substitute."""

    base: Any
    neighbour: Any
    relation: str = "neighbours"
    note: str = ""

    def describe(self) -> str:
        return f"{self.relation}: {self.note}" if self.note else self.relation


# -- Clopper-Pearson --------------------------------------------------------------------------
def cp_lower(k: np.ndarray | float, n: int, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper-Pearson lower bound on p from k successes in n trials:
    the α quantile of Beta(k, n − k + 1), and 0 when k = 0."""
    k = np.asarray(k, float)
    with np.errstate(invalid="ignore"):
        lo = betaincinv(np.maximum(k, 1e-300), n - k + 1, alpha)
    return np.where(k <= 0, 0.0, lo)


def cp_upper(k: np.ndarray | float, n: int, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper-Pearson upper bound: the 1 − α quantile of Beta(k + 1, n − k),
    computed as 1 − (α quantile of Beta(n − k, k + 1)) for accuracy at tiny α; 1 when k = n."""
    k = np.asarray(k, float)
    with np.errstate(invalid="ignore"):
        hi = 1.0 - betaincinv(np.maximum(n - k, 1e-300), k + 1, alpha)
    return np.where(k >= n, 1.0, hi)


def epsilon_lower_bound(k1: Any, k2: Any, n: int, alpha: float, delta: float = 0.0) -> np.ndarray:
    """ε_lb = ln((CP_lower(k1) − δ) / CP_upper(k2)); −inf where the numerator is not positive."""
    lo = cp_lower(k1, n, alpha) - delta
    hi = cp_upper(k2, n, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(lo > 0, np.log(np.maximum(lo, 1e-300) / hi), -np.inf)


# -- events -------------------------------------------------------------------------------------
@attrs.frozen(eq=False)
class Summary:
    """A scalar summary of vector outputs, learned from phase-1 samples only.

    linear:  w·x with the diagonal discriminant w_j = (mean₁ⱼ − mean₂ⱼ) / var_j (the Neyman-Pearson
             statistic for a Gaussian shift);
    clipped: Σ_j clip(w_j (x_j − m_j), ±|w_j Δ_j| / 2), m_j the midpoint of the means and Δ_j their
             difference: up to scale the log-likelihood ratio of a Laplace shift in each coordinate,
             so its top value isolates the "every coordinate moved" region where pure-DP noise is tight.
    """

    kind: str
    w: np.ndarray
    mid: np.ndarray
    half: np.ndarray

    def __call__(self, outputs: np.ndarray) -> np.ndarray:
        z = np.asarray(outputs, dtype=float)   # no copy of float outputs (10⁶ rows in phase 2)
        if self.kind == "linear":
            return z @ self.w
        return np.clip((z - self.mid) * self.w, -self.half, self.half).sum(axis=1)

    def describe(self) -> str:
        return "w·output (linear discriminant)" if self.kind == "linear" else "clipped discriminant Σ clip(w(x−m))"


@attrs.frozen(eq=False)
class UserSummary:
    """A scalar summary given by the caller (`audit(summaries=[...])`), applied to the raw outputs."""

    fn: Callable[[Any], Any]

    def __call__(self, outputs: Any) -> np.ndarray:
        return _user_values(self.fn, outputs, "summary")

    def describe(self) -> str:
        return f"summary {_label(self.fn)}"


@attrs.frozen(eq=False)
class LearnedSummary:
    """A classifier's log-odds that an output came from M(D) rather than M(D') (DP-Sniper's idea,
    Bichsel et al. 2021): fitted on a training split of phase 1, thresholded on the rest."""

    model: Any
    kind: str = "gradient-boosted"

    def __call__(self, features: np.ndarray) -> np.ndarray:
        with threadpool_limits(1):
            return self.model.decision_function(np.asarray(features, dtype=float))

    def describe(self) -> str:
        return f"learned score ({self.kind} classifier log-odds)"


@attrs.frozen(eq=False)
class Event:
    """An output event: a single outcome (row equality), a threshold on a scalar summary, or a
    caller's event function."""

    kind: str  # "outcome" | "ge" | "le" | "user"
    value: Any  # the outcome row, the threshold, or the event function
    summary: Any = None  # None: the (scalar) output itself
    view: str = "builtin"  # what it reads: "raw" outputs, or the "builtin" / "learned" numeric rows

    def indicator(self, views: dict[str, Any]) -> np.ndarray:
        outputs = views[self.view]
        if self.kind == "user":
            return _user_values(self.value, outputs, "event")
        if self.kind == "outcome":
            return np.all(outputs == self.value, axis=1)
        s = outputs[:, 0].astype(float) if self.summary is None else self.summary(outputs)
        return s >= self.value if self.kind == "ge" else s <= self.value

    def describe(self) -> str:
        if self.kind == "user":
            return f"event {_label(self.value)}"
        if self.kind == "outcome":
            v = self.value.tolist()
            return f"output == {v[0] if len(v) == 1 else v}"
        what = "output" if self.summary is None else self.summary.describe()
        return f"{what} {'>=' if self.kind == 'ge' else '<='} {self.value:.6g}"


def _label(fn: Any) -> str:
    return getattr(fn, "__name__", None) or repr(fn)


def _user_values(fn: Callable[[Any], Any], raw: Any, what: str) -> np.ndarray:
    """A caller's event (boolean) or summary (real) on every output, checked: one finite value each."""
    n = len(raw)
    try:
        vals = np.asarray(fn(raw))
    except Exception as exc:  # noqa: BLE001 — name the caller's function in the error
        raise DataError(f"audit: {what} {_label(fn)} failed on the outputs: {type(exc).__name__}: {exc}") from exc
    if vals.shape != (n,):
        raise DataError(f"audit: {what} {_label(fn)} must return one value per output, shape ({n},), got {vals.shape}")
    if what == "event":
        if vals.dtype.kind != "b":
            raise DataError(f"audit: event {_label(fn)} must return booleans, got dtype {vals.dtype}")
        return vals
    if vals.dtype.kind not in "biuf" or not np.all(np.isfinite(vals.astype(float))):
        raise DataError(f"audit: summary {_label(fn)} must return finite real numbers")
    return vals.astype(float)


def _as_2d(outputs: Any, n: int) -> np.ndarray:
    try:
        out = np.asarray(outputs)
    except (ValueError, TypeError):  # e.g. sequences of different lengths
        raise DataError("audit: the outputs are not a rectangular numeric array (give features= to map "
                        "structured outputs to numbers)") from None
    if out.ndim == 0 or out.shape[0] != n:
        raise DataError(f"audit: the mechanism returned outputs of shape {out.shape}, expected ({n}, ...)")
    out = out.reshape(n, -1)
    if out.dtype.kind == "b":
        out = out.astype(np.int64)
    if out.dtype.kind not in "iuf":
        raise DataError(f"audit: outputs must be numeric, got dtype {out.dtype} "
                        "(give features= to map structured outputs to numbers)")
    if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        raise DataError("audit: the mechanism returned NaN or inf outputs")
    return out


def _summaries(x1: np.ndarray, x2: np.ndarray) -> list[Summary | None]:
    """Scalar summaries to threshold: the output itself when scalar, else discriminants from phase 1."""
    if x1.shape[1] == 1:
        return [None]
    m1, m2 = x1.mean(0), x2.mean(0)
    diff = m1 - m2
    var = 0.5 * (x1.var(0) + x2.var(0))
    w = np.where(var > 0, diff / np.where(var > 0, var, 1.0), 0.0)
    if not np.any(w):  # no mean shift seen: fall back to the coordinate with the largest difference
        w = np.zeros(x1.shape[1])
        w[int(np.argmax(np.abs(diff)))] = 1.0
    mid = 0.5 * (m1 + m2)
    out = [Summary("linear", w, mid, np.zeros_like(w)), Summary("clipped", w, mid, np.abs(w * diff) / 2)]
    # a coordinate constant on each side but not the same on both (e.g. a row count that is the true count)
    # separates the sides outright, yet has no variance to weigh it by: threshold it on its own
    exact = np.flatnonzero((var == 0) & (diff != 0))
    if exact.size:
        unit = np.zeros(x1.shape[1])
        unit[exact[0]] = 1.0
        out.append(Summary("linear", unit, mid, np.zeros_like(unit)))
    return out


def _informative_columns(x1: np.ndarray, x2: np.ndarray) -> tuple[np.ndarray, bool]:
    """Columns that vary in phase 1 (constants such as a message's declared ε carry no evidence), and
    whether they are all integer-valued (then single outcomes are candidate events too)."""
    # per column: min != max on either side (no NaN here: _as_2d refuses them), without stacking the sides
    cols = np.flatnonzero(np.minimum(x1.min(0), x2.min(0)) != np.maximum(x1.max(0), x2.max(0)))
    if x1.dtype.kind in "iu" and x2.dtype.kind in "iu":
        return cols, True

    def whole(x: np.ndarray) -> bool:
        return bool(np.all(np.abs(x) < 2**53) and np.all(x == np.round(x)))

    subs = [x1[:, cols], x2[:, cols]]
    # the first rows settle it for real-valued outputs (most are not whole numbers), without a pass over all
    return cols, all(whole(s[:1000]) for s in subs) and all(whole(s) for s in subs)


def _prepare(x: np.ndarray, cols: np.ndarray, as_int: bool) -> np.ndarray:
    # every column kept (cols is sorted, so then it is 0..w-1): the array itself, not a copy of 10⁶ rows
    x = x if cols.size == x.shape[1] else x[:, cols]
    return np.round(x).astype(np.int64) if as_int and x.dtype.kind == "f" else x


def _threshold_counts(s1: np.ndarray, s2: np.ndarray, n_thresholds: int, tails: bool = False):
    """Thresholds t at quantiles of both samples' scores and the counts of s >= t and s <= t on each side.
    `tails` adds quantiles down to 1e-4 from either end (rare events, as learned scores isolate)."""
    s1, s2 = np.sort(s1), np.sort(s2)
    probs = np.linspace(0, 1, n_thresholds)
    if tails:
        tail = np.geomspace(1e-4, 1e-2, 20)
        probs = np.unique(np.r_[probs, tail, 1 - tail])
    qs = np.unique(np.quantile(np.concatenate([s1, s2]), probs))
    # counts of s >= t and s <= t for every threshold t, by binary search
    c1 = [len(s1) - np.searchsorted(s1, qs, "left"), np.searchsorted(s1, qs, "right")]
    c2 = [len(s2) - np.searchsorted(s2, qs, "left"), np.searchsorted(s2, qs, "right")]
    return qs, c1, c2


def _unique_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(x, axis=0, return_inverse=True)` for integer rows, the same rows in the same (lexicographic)
    order: each row as one mixed-radix int64 key (column 0 most significant) when the ranges fit, which sorts
    ~10x faster than numpy's row-wise unique (a structured view) on the audit's 10⁵-10⁶ outputs."""
    if not len(x) or not x.shape[1]:
        uniq, inv = np.unique(x, axis=0, return_inverse=True)
        return uniq, inv.ravel()
    lo = x.min(axis=0)
    place, total = [], 1   # place value of each column, in Python ints (exact)
    for span in (int(h) - int(l) + 1 for h, l in zip(x.max(axis=0)[::-1], lo[::-1])):
        place.append(total)
        total *= span
    if total >= 2**62:
        uniq, inv = np.unique(x, axis=0, return_inverse=True)
        return uniq, inv.ravel()
    _, first, inv = np.unique((x - lo).astype(np.int64) @ np.array(place[::-1], np.int64), return_index=True,
                              return_inverse=True)
    return x[first], inv.ravel()


def _candidates(x1: np.ndarray, x2: np.ndarray, n_thresholds: int, max_outcomes: int) -> tuple[list[Event], np.ndarray, np.ndarray]:
    """Candidate events and their counts on the phase-1 samples of both sides."""
    events: list[Event] = []
    c1: list[np.ndarray] = []
    c2: list[np.ndarray] = []
    if x1.dtype.kind in "iu" and x2.dtype.kind in "iu":
        uniq, inv = _unique_rows(np.concatenate([x1, x2]))
        if len(uniq) <= max_outcomes:
            events += [Event("outcome", row) for row in uniq]
            c1.append(np.bincount(inv[: len(x1)], minlength=len(uniq)))
            c2.append(np.bincount(inv[len(x1):], minlength=len(uniq)))
    for summ in _summaries(x1, x2):
        s1 = x1[:, 0].astype(float) if summ is None else summ(x1)
        s2 = x2[:, 0].astype(float) if summ is None else summ(x2)
        qs, d1, d2 = _threshold_counts(s1, s2, n_thresholds)
        c1 += d1
        c2 += d2
        events += [Event("ge", float(t), summ) for t in qs] + [Event("le", float(t), summ) for t in qs]
    return events, np.concatenate(c1).astype(float), np.concatenate(c2).astype(float)


def _user_candidates(raw1: Any, raw2: Any, events: Sequence[Callable], summaries: Sequence[Callable],
                     n_thresholds: int) -> tuple[list[Event], np.ndarray, np.ndarray]:
    """The caller's events, and threshold events on the caller's summaries, counted on phase 1."""
    cands: list[Event] = []
    c1: list[np.ndarray] = [np.zeros(0)]
    c2: list[np.ndarray] = [np.zeros(0)]
    for fn in events:
        cands.append(Event("user", fn, view="raw"))
        c1.append(np.array([_user_values(fn, raw1, "event").sum()]))
        c2.append(np.array([_user_values(fn, raw2, "event").sum()]))
    for fn in summaries:
        summ = UserSummary(fn)
        qs, d1, d2 = _threshold_counts(summ(raw1), summ(raw2), n_thresholds)
        c1 += d1
        c2 += d2
        cands += [Event("ge", float(t), summ, "raw") for t in qs] + [Event("le", float(t), summ, "raw") for t in qs]
    return cands, np.concatenate(c1).astype(float), np.concatenate(c2).astype(float)


# Learned events: the classifier trains on this fraction of the phase-1 samples, the threshold is chosen
# on the rest; below LEARNED_MIN_SAMPLES phase-1 samples per side it is not worth its time.
LEARNED_TRAIN_FRACTION = 0.5
LEARNED_MIN_SAMPLES = 2000
# A learned event is chosen over the built-in and the caller's only when its projected bound is this
# fraction larger: it is counted on half the phase-1 samples over ~2x more thresholds, so its phase-1
# winners are more often lucky. benchmarks/dp_kit.py, seed 0: without it Lee & Clifton's Sparse Vector
# got 0.913 (learned) instead of 0.962 (a single outcome).
LEARNED_HANDICAP = 0.1


def _handicap(projected: np.ndarray, fraction: float) -> np.ndarray:
    return projected - fraction * np.abs(projected) if fraction else projected


# The classifiers whose scores give learned events, each its own candidate group: scikit-learn's default
# gradient boosting, and a shallow L2-regularised one whose score is less noisy when the telling region is
# small. benchmarks/dp_kit.py, seed 0, Roth's Sparse Vector: at ε = 0.7 the shallow one certifies 0.863
# where the default gets 0.743 (seeds 0-3: 0.86, 0.95, 0.93, 0.85 vs 0.74, 0.91, 1.00, 0.84); at ε = 1.5
# the default gets 2.626 and the shallow one 2.225 (best possible 2.642), so both are tried.
LEARNED_MODELS: tuple[dict[str, Any], ...] = ({}, {"max_depth": 3, "l2_regularization": 1.0})


def _learned_candidates(x1: np.ndarray, x2: np.ndarray, n_thresholds: int, seed: int,
                        params: dict[str, Any] | None = None):
    """DP-Sniper's event (Bichsel et al. 2021): a classifier told M(D)'s outputs from M(D')'s on a
    training split, its score thresholded; counts on the held-out split (whose size is returned)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    h = int(len(x1) * LEARNED_TRAIN_FRACTION)
    train = np.vstack([x1[:h], x2[:h]]).astype(float)
    label = np.r_[np.ones(h), np.zeros(h)]
    with threadpool_limits(1):  # OpenMP threads cost ~20x the CPU on a shared, busy machine
        model = HistGradientBoostingClassifier(max_iter=100, random_state=seed, **(params or {})).fit(train, label)
        summ = LearnedSummary(model, "shallow gradient-boosted" if params else "gradient-boosted")
        qs, d1, d2 = _threshold_counts(summ(x1[h:]), summ(x2[h:]), n_thresholds, tails=True)
    events = [Event("ge", float(t), summ, "learned") for t in qs] + [Event("le", float(t), summ, "learned") for t in qs]
    return events, np.concatenate(d1).astype(float), np.concatenate(d2).astype(float), len(x1) - h


# One-sided level of the pessimistic phase-1 estimates used for selection. benchmarks/audit_power.py
# (100 runs, standard level): 0 (plain rates) caught the +25% Laplace count in 95/100 runs at α = 0.05,
# 0.3 in 97, 0.1 and 0.02 in 100; the other cases were unaffected.
SELECTION_CONFIDENCE = 0.05


def _projected(k1: np.ndarray, k2: np.ndarray, m: int, n: int, a: float, delta: float) -> np.ndarray:
    """The bound each event would give in phase 2, from pessimistic phase-1 rates.

    Taking the best of hundreds of noisy phase-1 ratios favours events whose ratio was overestimated by
    chance (the winner's curse, worst for rare events); estimating p₁ low and p₂ high (one-sided 95%
    Clopper-Pearson on the m phase-1 samples) before projecting to n samples counters it.
    """
    p1, p2 = cp_lower(k1, m, SELECTION_CONFIDENCE), cp_upper(k2, m, SELECTION_CONFIDENCE)
    return epsilon_lower_bound(p1 * n, p2 * n, n, a, delta)


# -- sequential phase 2 ----------------------------------------------------------------------------
# Looks of a sequential phase 2 (fractions of n) before the full size. At each, a claim whose chosen event is
# already *cleared* needs no more samples: with the one-sided Clopper-Pearson bounds at level a / LOOKS,
# CP_upper(k₁) − δ <= e^ε · CP_lower(k₂), so unless one of those two bounds is wrong the event's true
# P[M(D) ∈ E] − δ is at most e^ε · P[M(D') ∈ E], and the full-size test on it could only flag by a false alarm.
# Stopping for futility on a confidence bound (stochastic curtailment, Lan, Simon & Halperin 1982; Jennison &
# Turnbull 2000, ch. 10): the violation test at the end is unchanged (α exactly as before), and the chance that
# the sequential audit passes where the full-size one would flag is at most 2a per pair and claim (a over the
# looks' bounds if the event really violates, else the full test's own false alarm), so at most α in all.
SEQUENTIAL_LOOKS = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)


def _looks(n: int, sequential: bool) -> list[int]:
    if not sequential:
        return [n]
    return sorted({max(1, int(n * f)) for f in SEQUENTIAL_LOOKS} | {n})


def _cleared(k1: int, k2: int, n: int, epsilon: float, delta: float, a: float) -> bool:
    """The event's ratio is within the claim (ε, δ) with confidence 1 − 2a on these n samples."""
    return float(cp_upper(k1, n, a)) - delta <= math.exp(epsilon) * float(cp_lower(k2, n, a))


# -- results ----------------------------------------------------------------------------------
@attrs.frozen
class PairResult:
    pair: str
    event: str
    swapped: bool  # True: the event is likelier under the neighbour, the bound compares M(D') to M(D)
    k1: int
    k2: int
    n: int
    p1_lower: float
    p2_upper: float
    epsilon_lb: float
    epsilon: float
    delta: float
    alpha_per_interval: float
    n_planned: int | None = None  # sequential audits: the planned phase-2 size, where it stopped before it (n)

    @property
    def violation(self) -> bool:
        return self.epsilon_lb > self.epsilon * (1 + 1e-12)

    def describe(self) -> str:
        first, second = ("M(D')", "M(D)") if self.swapped else ("M(D)", "M(D')")
        early = f" (cleared after {self.n} of {self.n_planned} samples)" if self.n_planned else ""
        return (f"pair [{self.pair}], event [{self.event}]: {first} in event {self.k1}/{self.n}, "
                f"{second} in event {self.k2}/{self.n}; Clopper-Pearson p1 >= {self.p1_lower:.5g}, "
                f"p2 <= {self.p2_upper:.5g}; ε_lb = ln((p1 − δ)/p2) = {self.epsilon_lb:.4g}{early}")


class PrivacyViolation(AssertionError):
    """The audit found strong statistical evidence that the mechanism is not (ε, δ)-DP as claimed."""


@attrs.frozen
class AuditReport:
    name: str
    claims: tuple[tuple[float, float], ...]  # the audited (ε, δ) points
    alpha: float
    level: str
    n_samples: int
    n_pairs: int
    results: tuple[PairResult, ...]  # one per pair and claim
    sequential: bool = False

    @property
    def epsilon(self) -> float:
        return self.claims[0][0]

    @property
    def delta(self) -> float:
        return self.claims[0][1]

    @property
    def epsilon_lb(self) -> float:
        """The largest lower bound found (compare per claim: a bound at a larger δ is a different claim)."""
        return max((r.epsilon_lb for r in self.results), default=-math.inf)

    @property
    def violations(self) -> list[PairResult]:
        return [r for r in self.results if r.violation]

    @property
    def passed(self) -> bool:
        return not self.violations

    def message(self) -> str:
        claims = "; ".join(f"(ε={e:.4g}, δ={d:.3g})" for e, d in self.claims)
        head = (f"privacy audit of {self.name}: claimed {claims}; "
                f"level {self.level} ({self.n_samples} fresh samples per side per pair"
                f"{', sequential: a pair stops once every claim is cleared' if self.sequential else ''}); "
                f"false-alarm probability α = {self.alpha:.3g} for the whole check "
                f"(split over {self.n_pairs} pair(s) x {len(self.claims)} claim(s) x 2 intervals)")
        if self.passed:
            best = max(self.results, key=lambda r: r.epsilon_lb - r.epsilon)
            return head + (f"\n  passed: closest call ε_lb = {best.epsilon_lb:.4g} <= ε = {best.epsilon:.4g} "
                           f"at δ = {best.delta:.3g}")
        lines = [head]
        for r in self.violations:
            lines.append(f"  VIOLATION: empirical ε_lb exceeds the claimed ε = {r.epsilon:.4g} at δ = {r.delta:.3g}")
            lines.append(f"  - {r.describe()}")
        return "\n".join(lines)

    def assert_ok(self) -> AuditReport:
        if not self.passed:
            raise PrivacyViolation(self.message())
        return self


# -- the auditor ------------------------------------------------------------------------------
def claimed_epsilon(costs: Iterable[Cost], delta: float) -> float:
    """The ε that a list of declared costs promises at failure probability δ (their composition)."""
    return Composition.of(list(costs)).epsilon(delta)


AUDIT_DELTAS = (1e-3, 1e-2)


def claimed_profile(costs: Iterable[Cost], budget_delta: float) -> list[tuple[float, float]]:
    """The (ε, δ) points a declared cost promises that are worth auditing.

    Pure ε-DP: the single point (Σε, 0), the strongest claim. Otherwise (zCDP, RDP, (ε, δ) parts) the
    cost promises (ε(δ), δ) for every δ; at the budget's small δ the conversion is loose and the telling
    events are rare, so larger δ (AUDIT_DELTAS) are audited too: each point is a valid claim, and α is
    split over them.
    """
    comp = Composition.of(list(costs))
    if comp.pure_epsilon is not None and comp.approx_delta == 0:
        return [(comp.pure_epsilon, 0.0)]
    deltas = sorted({d for d in (budget_delta, *AUDIT_DELTAS) if comp.approx_delta < d < 1})
    points = [(comp.epsilon(d), d) for d in deltas]
    return [(e, d) for e, d in points if math.isfinite(e)]


# δ at which a Gaussian mechanism's exact curve is audited by default (with the claim's own δ, if any).
CURVE_DELTAS = (1e-5, 1e-3, 1e-2, 5e-2)


def gaussian_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """The exact δ(ε) of the Gaussian mechanism N(0, σ²) at L2 sensitivity Δ (Balle & Wang 2018, Thm 8):
    Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ)."""
    from scipy.special import log_ndtr, ndtr

    a, b = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)))


def gaussian_claims(sigma: float, sensitivity: float = 1.0,
                    deltas: Sequence[float] = CURVE_DELTAS) -> list[tuple[float, float]]:
    """(ε(δ), δ) points on the exact privacy curve of a Gaussian mechanism with noise σ at L2 sensitivity Δ.

    Every point is a valid claim for a correct Gaussian mechanism whatever (ε, δ) it was calibrated
    for, and the points at large δ are where an under-set σ shows with few samples.
    """
    from scipy.optimize import brentq

    if not (sigma > 0 and sensitivity > 0 and math.isfinite(sigma / sensitivity)):
        raise ConfigError(f"gaussian_claims: sigma and sensitivity must be positive, got {sigma}, {sensitivity}")
    points = []
    for d in sorted(set(deltas)):
        if not 0 < d < 1:
            raise ConfigError(f"gaussian_claims: every delta must be in (0, 1), got {d}")
        if gaussian_delta(0.0, sigma, sensitivity) <= d:
            points.append((0.0, d))
            continue
        hi = 1.0
        while gaussian_delta(hi, sigma, sensitivity) > d:
            hi *= 2
        points.append((brentq(lambda e: gaussian_delta(e, sigma, sensitivity) - d, 0.0, hi, xtol=1e-12), d))
    return points


def curve_claims(cost: Any, delta: float = 0.0) -> list[tuple[float, float]]:
    """The (ε, δ) points to audit for a declared cost: a vertisynth Cost or list of them
    (`claimed_profile`: pure ε-DP at its one point, zCDP/RDP at several δ), or a `GaussianNoise`."""
    if isinstance(cost, GaussianNoise):
        return gaussian_claims(cost.sigma, cost.sensitivity, tuple({*CURVE_DELTAS, *([delta] if delta > 0 else [])}))
    costs = list(cost) if isinstance(cost, (list, tuple)) else [cost]
    return claimed_profile(costs, delta if delta > 0 else CURVE_DELTAS[0])


@attrs.frozen
class GaussianNoise:
    """A claim "this is the Gaussian mechanism with noise σ at L2 sensitivity Δ": audited on its exact curve."""

    sigma: float
    sensitivity: float = 1.0


NUMERIC_VIEWS = ("builtin", "learned")


def _views(raw: Any, n: int, features: Callable[[Any], Any] | None, user_only: bool = False,
           need: Iterable[str] = NUMERIC_VIEWS) -> dict[str, Any]:
    """What events read: the "raw" outputs; "builtin" rows for the built-in events (the outputs
    themselves when numeric, as before feature maps existed, else their features); "learned" rows for
    the classifier (the features when given). `user_only`: outputs of any type are allowed when the caller's
    events or summaries can read them. `need`: the numeric views wanted (phase 2 maps only those its chosen
    events read: a feature map over 10⁶ outputs that no chosen event reads is work for nothing); the others
    are None."""
    if features is not None:
        need = set(need)
        feats = _features_of(raw, n, features) if "learned" in need else None
        rows = None
        if "builtin" in need:
            try:
                rows = _as_2d(raw, n)
            except DataError:  # structured outputs: the built-in events read the features too
                rows = feats if feats is not None else _features_of(raw, n, features)
        return {"raw": raw, "builtin": rows, "learned": feats}
    try:
        rows = _as_2d(raw, n)
    except DataError:
        if not user_only:
            raise
        if len(raw) != n:
            raise DataError(f"audit: the mechanism returned {len(raw)} outputs, expected {n}") from None
        rows = np.zeros((len(raw), 0), np.int64)  # outputs of any type: only the caller's events read them
    return {"raw": raw, "builtin": rows, "learned": rows}


def _features_of(raw: Any, n: int, features: Callable[[Any], Any]) -> np.ndarray:
    try:
        length = len(raw)
    except TypeError:
        length = None
    if length != n:
        raise DataError(f"audit: the mechanism returned {length} outputs, expected {n}")
    return _as_2d(features(raw), n)


def audit(
    mechanism: AuditableMechanism,
    pairs: Sequence[NeighbourPair | tuple[Any, Any]],
    epsilon: float | None = None,
    delta: float = 0.0,
    *,
    claims: Sequence[tuple[float, float]] | None = None,
    cost: Any = None,
    level: str | None = None,
    n_samples: int | None = None,
    selection_samples: int | None = None,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    name: str | None = None,
    n_thresholds: int = 200,
    max_outcomes: int = 5000,
    events: Sequence[Callable[[Any], Any]] = (),
    summaries: Sequence[Callable[[Any], Any]] = (),
    features: Callable[[Any], Any] | None = None,
    learned: bool = True,
    sequential: bool = False,
) -> AuditReport:
    """Audit `mechanism`'s claim of (ε, δ)-DP on the given neighbouring pairs (see module doc).

    The claim: `epsilon`/`delta` (one point), `claims=[(ε, δ), ...]` (several points, e.g.
    `claimed_profile(costs, δ)` of a zCDP plan), or `cost=` (a vertisynth Cost, a list of them, or
    `GaussianNoise(σ, Δ)`): audited at several points of its curve (`curve_claims`). The samples are
    shared, each claim selects its own event on the phase-1 samples, and α is split over
    pairs x claims x 2 intervals.
    `events` (functions outputs -> booleans, one per output) and `summaries` (outputs -> reals,
    thresholded like the built-in ones) join the candidate events: any function of the output is
    post-processing, so any of them is a valid event, and only the one chosen in phase 1 is tested.
    `features` maps raw outputs (e.g. a list of variable-length answers) to a numeric (n, f) array for
    the built-in and learned events; `learned` adds DP-Sniper's classifier event (vector outputs, at
    least LEARNED_MIN_SAMPLES phase-1 samples).
    `n_samples` (default: the level's count) fresh samples per side per pair are drawn in phase 2,
    `selection_samples` (default n_samples // 4) in phase 1. Fixed `seed`: the same call gives the
    same verdict; never rerun a failed audit with another seed.
    `sequential`: phase 2 looks at 1/32, 1/16, ..., 1/2 of n and stops a pair once every claim's event is cleared
    (`SEQUENTIAL_LOOKS`): the same α, at most α less power, far fewer samples where the claim is loose.
    """
    if not isinstance(mechanism, AuditableMechanism):
        raise ConfigError(f"audit: {mechanism!r} has no sample(dataset, n_samples, rng) method")
    if not (0 < alpha < 1):
        raise ConfigError(f"audit: alpha must be in (0, 1), got {alpha}")
    if sum(x is not None for x in (epsilon, claims, cost)) > 1:
        raise ConfigError("audit: give either epsilon/delta, claims or cost, not several")
    if epsilon is None and claims is None and cost is None:
        cost = getattr(mechanism, "cost", None)  # a mechanism may declare its own claim
    if cost is not None:
        claims = curve_claims(cost, delta)
    elif claims is None:
        if epsilon is None:
            raise ConfigError("audit: give the claimed epsilon (and delta), claims=[(epsilon, delta), ...] or cost=")
        claims = [(epsilon, delta)]
    claims = [(float(e), float(d)) for e, d in claims]
    if not claims:
        raise ConfigError("audit: claims is empty")
    for e, d in claims:
        if not (e >= 0 and math.isfinite(e)):
            raise ConfigError(f"audit: the claimed epsilon must be finite and >= 0, got {e}")
        if not (0 <= d < 1):
            raise ConfigError(f"audit: delta must be in [0, 1), got {d}")
    for fn in (*events, *summaries, *([features] if features is not None else [])):
        if not callable(fn):
            raise ConfigError(f"audit: events, summaries and features must be functions of the outputs, got {fn!r}")
    if features is None and callable(getattr(mechanism, "features", None)):
        features = mechanism.features  # a mechanism may declare its output's feature map
    pairs = [p if isinstance(p, NeighbourPair) else NeighbourPair(*p) for p in pairs]
    if not pairs:
        raise ConfigError("audit: give at least one neighbouring pair")
    level = level or default_level()
    _check_level(level)
    n = int(n_samples or AUDIT_LEVELS[level])
    m = int(selection_samples or max(n // 4, 1000))
    if n < 10:
        raise ConfigError(f"audit: n_samples must be >= 10, got {n}")
    a = alpha / (2 * len(pairs) * len(claims))  # Bonferroni: two one-sided intervals per pair and claim
    seeds = np.random.SeedSequence(seed).spawn(len(pairs))
    has_user = bool(events or summaries)
    results = []
    for pair, ss in zip(pairs, seeds):
        r_sel1, r_sel2, r_test1, r_test2 = (np.random.default_rng(s) for s in ss.spawn(4))
        v1 = _views(mechanism.sample(pair.base, m, r_sel1), m, features, has_user)
        v2 = _views(mechanism.sample(pair.neighbour, m, r_sel2), m, features, has_user)
        shape = {}  # per numeric view: its informative columns and whether they are integer codes
        for view in ("builtin", "learned"):
            if v1[view].shape[1] != v2[view].shape[1]:
                raise DataError(f"audit: outputs on the two datasets have different widths {v1[view].shape[1]} "
                                f"and {v2[view].shape[1]}")
            shape[view] = (*_informative_columns(v1[view], v2[view]), v1[view].shape[1])
            v1[view], v2[view] = _prepare(v1[view], *shape[view][:2]), _prepare(v2[view], *shape[view][:2])
        x1, x2 = v1["builtin"], v2["builtin"]
        if not x1.shape[1] and not v1["learned"].shape[1] and not events and not summaries:
            # the output never varies: no event can tell the datasets apart (ε = 0)
            results += [PairResult(pair.describe(), "(output is constant)", False, m, m, m, 1.0, 1.0, 0.0, e, d, a)
                        for e, d in claims]
            continue
        groups = []  # (candidate events, phase-1 counts on each side, phase-1 samples they were counted on)
        if x1.shape[1]:
            groups.append((*_candidates(x1, x2, n_thresholds, max_outcomes), m, 0.0))
        if learned and v1["learned"].shape[1] > 1 and m >= LEARNED_MIN_SAMPLES:
            for params in LEARNED_MODELS:
                ev, k1, k2, m_held = _learned_candidates(v1["learned"], v2["learned"], n_thresholds,
                                                         int(ss.generate_state(1)[0]), params)
                groups.append((ev, k1, k2, m_held, LEARNED_HANDICAP))
        if events or summaries:
            groups.append((*_user_candidates(v1["raw"], v2["raw"], events, summaries, n_thresholds), m, 0.0))
        cands = [ev for g in groups for ev in g[0]]
        chosen = []
        for e, d in claims:  # each claim picks its event from phase 1 only
            fwd = np.concatenate([_handicap(_projected(c1, c2, mg, n, a, d), h) for _, c1, c2, mg, h in groups])
            bwd = np.concatenate([_handicap(_projected(c2, c1, mg, n, a, d), h) for _, c1, c2, mg, h in groups])
            best = int(np.argmax(np.concatenate([fwd, bwd])))
            chosen.append((cands[best % len(cands)], best >= len(cands)))
        # Phase 2: fresh samples, the pre-chosen events, one test per claim (sequential: in looks, see _looks).
        looks = _looks(n, sequential)
        k = np.zeros((len(claims), 2), np.int64)
        seen = 0
        need = [view for view in NUMERIC_VIEWS if any(event.view == view for event, _ in chosen)]
        for look in looks:
            step, seen = look - seen, look
            w1 = _views(mechanism.sample(pair.base, step, r_test1), step, features, has_user, need)
            w2 = _views(mechanism.sample(pair.neighbour, step, r_test2), step, features, has_user, need)
            for view in need:   # the views the chosen events read (a view read by none is not mapped)
                if not w1[view].shape[1] == w2[view].shape[1] == shape[view][2]:
                    raise DataError(f"audit: phase-2 outputs have widths {w1[view].shape[1]} and "
                                    f"{w2[view].shape[1]}, phase 1 had {shape[view][2]} (a feature map must give "
                                    f"a fixed width)")
                w1[view], w2[view] = _prepare(w1[view], *shape[view][:2]), _prepare(w2[view], *shape[view][:2])
            counted: dict[int, tuple[int, int]] = {}   # claims that chose the same event count it once
            for j, (event, swapped) in enumerate(chosen):
                if id(event) not in counted:
                    counted[id(event)] = (int(event.indicator(w1).sum()), int(event.indicator(w2).sum()))
                c1, c2 = counted[id(event)]
                k[j] += (c2, c1) if swapped else (c1, c2)
            if seen < n and all(_cleared(k[j, 0], k[j, 1], seen, e, d, a / len(SEQUENTIAL_LOOKS))
                                for j, (e, d) in enumerate(claims)):
                break
        for j, ((e, d), (event, swapped)) in enumerate(zip(claims, chosen)):
            k1, k2 = int(k[j, 0]), int(k[j, 1])
            lb = float(epsilon_lower_bound(k1, k2, seen, a, d))
            results.append(PairResult(pair.describe(), event.describe(), swapped, k1, k2, seen,
                                      float(cp_lower(k1, seen, a)), float(cp_upper(k2, seen, a)), lb, e, d, a,
                                      n if seen < n else None))
    label = name or getattr(mechanism, "name", None) or type(mechanism).__name__
    return AuditReport(str(label), tuple(claims), float(alpha), level, n, len(pairs), tuple(results), sequential)
