"""Tuning and publish-once (seed 004, Algorithm 1): K-fold evaluation of a hyperparameter grid, custodian
thresholds with a vote, and a final run on all data that is the only release.

The paper's procedure ("paper") tunes on non-DP scores of real folds and charges only the final run,
arguing that nothing from the tuning is published. That is NOT sound: the published table is produced with
hyperparameters chosen from the data, so it reveals the choice (and whether anything was published at all).
Every output of that variant carries PAPER_LABEL, and the report also shows what the runs it made would cost
if composed honestly.

The sound variants treat one *candidate run* Q as a DP mechanism: pick a candidate (uniformly from the grid),
fit it on the training folds of K-fold cross-validation, and score it against DP marginals of the test folds
(released once, before tuning: K disjoint folds compose in parallel, so they cost ρ_score). A person is in
K−1 training sets, so Q is ρ_Q = (K−1)·ρ_run -zCDP, ρ_run being one fold run's preprocessing + measurement.

  * "private_selection" (default) — Papernot & Steinke (ICLR 2022), Theorem 6 (Poisson): let Q be
    (λ, ε)-RDP and (ε̂, δ̂)-DP with e^ε̂ ≤ 1 + 1/(λ−1). Run Q K ~ Poisson(μ) times and output the best
    result (by a fixed total order on outputs). Then the output is (λ, ε')-RDP with
        ε'(λ) = ε(λ) + μ·δ̂ + log(μ)/(λ−1).
    Here ε(λ) = ρ_Q·λ, ε̂(λ) = log(λ/(λ−1)) (the largest the theorem allows) and δ̂(λ) the δ at which
    ρ_Q-zCDP implies (ε̂, δ̂)-DP (the same RDP→(ε, δ) conversion the ledger uses). The curve is charged to
    the ledger as an RDP cost: about one candidate's cost plus log(μ)/(λ−1), whatever the grid size.
    The order on outputs: first whether the custodians' vote passes, then the DP score. With K = 0 (chance
    e^−μ) no candidate is scored, so no vote passes and nothing is published (a data-independent outcome).
  * "compose_all": score every candidate once; the argmax of DP scores is post-processing, so the cost is
    the zCDP composition m·ρ_Q (Bun & Steinke 2016, Lemma 2.3). Simple, and cheaper than
    private_selection only for very small grids.
The final run on all data then spends its own planned charges; the total is their composition.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import pandas as pd

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import BudgetError, ConfigError, DataError
from vertisynth.core.mechanisms import gaussian_sigma
from vertisynth.core.privacy import ORDERS, RDP, Budget, Charge, Composition, Cost, PrivacyLedger, ZCDP

from .horizontal import HorizontalRun, scratch_ledger, stack
from .preprocessing import _secure_sum
from .secure_aggregation import planned_charge

PAPER_LABEL = "paper: tuning not accounted — not sound"
SOUND_LABEL = {"private_selection": "sound: Papernot–Steinke private selection (Poisson random search), accounted",
               "compose_all": "sound: every candidate's DP score, composed"}
STAGE = "tuning"
DP_METRIC = "dp_workload.l1"   # the sound variants' score: L1 workload error against DP test-fold marginals
DP_METRIC_RANGE = (0.0, 2.0)


def candidates(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))] or [{}]


# -- the accountant ------------------------------------------------------------------------------------
def zcdp_delta(rho: float, eps: np.ndarray, orders: np.ndarray = ORDERS) -> np.ndarray:
    """δ(ε) of ρ-zCDP by the RDP conversion the ledger uses (Canonne, Kamath & Steinke 2020), for each ε."""
    a = orders[:, None]
    with np.errstate(over="ignore", divide="ignore"):
        log_d = (a - 1) * (a * rho - np.asarray(eps)[None, :] + np.log1p(-1 / a)) - np.log(a)
    return np.minimum(np.exp(log_d.min(axis=0)), 1.0)


# Orders over which δ̂ is minimised: every α gives a valid bound, so a coarser grid than the ledger's is still
# sound (δ̂ a hair larger) and keeps the budget solver fast.
DELTA_ORDERS = ORDERS[::8]


def private_selection_curve(rho_q: float, mu: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """Papernot–Steinke Theorem 6: ε'(λ) = ρ_Q·λ + μ·δ̂(λ) + log(μ)/(λ−1), with ε̂(λ) = log(λ/(λ−1))."""
    if not mu >= 1:
        raise ConfigError(f"collab.tuning.expected_runs must be >= 1, got {mu}")
    eps_hat = np.log(orders / (orders - 1))
    return rho_q * orders + mu * zcdp_delta(rho_q, eps_hat, DELTA_ORDERS) + math.log(mu) / (orders - 1)


def selection_cost(method: str, rho_q: float, mu: float, m: int) -> Cost:
    if method == "private_selection":
        return RDP(ORDERS, private_selection_curve(rho_q, mu))
    return ZCDP(m * rho_q)


def selection_charge(method: str, rho_q: float, mu: float, m: int, folds: int) -> Charge:
    note = (f"Papernot–Steinke Thm 6: K ~ Poisson(μ={mu:g}) candidate runs, each {folds}-fold CV at "
            f"ρ_Q={rho_q:.4g} (zCDP)" if method == "private_selection" else
            f"{m} candidates × ρ_Q={rho_q:.4g} ({folds}-fold CV each), composed")
    return Charge(STAGE, method, selection_cost(method, rho_q, mu, m), None, note)


def score_charge(rho_score: float, folds: int) -> Charge:
    return Charge(STAGE, "dp_test_marginals", ZCDP(rho_score), None,
                  f"{folds} disjoint test folds: parallel composition")


def solve_rho_q(budget: Budget, fixed: Sequence[Cost], method: str, mu: float, m: int) -> float:
    """The largest per-candidate ρ_Q whose selection cost still fits beside the `fixed` costs."""
    def fits(r: float) -> bool:
        return Composition.of([*fixed, selection_cost(method, r, mu, m)]).epsilon(budget.delta) <= budget.epsilon

    lo, hi = 0.0, budget.rho()
    if not fits(hi * 1e-6):
        raise BudgetError(f"tuning by {method!r} does not fit: with μ={mu:g} the selection alone costs more than "
                          f"what the final run leaves of ε={budget.epsilon:g}; raise collab.tuning.fraction, lower "
                          "expected_runs, or use method 'compose_all' for a tiny grid")
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


# -- folds, scores and the vote --------------------------------------------------------------------------
def fold_indices(frames: Mapping[str, pd.DataFrame], k: int, rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    """Each custodian gives every row its own uniform fold label. Independent labels (not a balanced split
    of a shuffled table) are what the accounting needs: adding one person then adds one row to one fold and
    moves no one else, so that person is in exactly K−1 training sets. A balanced split would shift other
    rows across fold boundaries."""
    out = {}
    for name, f in frames.items():
        labels = rng.integers(0, k, size=len(f))
        out[name] = [np.flatnonzero(labels == j) for j in range(k)]
        if min(map(len, out[name])) == 0:
            raise DataError(f"custodian {name!r} has too few rows ({len(f)}) for {k} folds: a fold came out empty")
    return out


def fold_frames(frames: Mapping[str, pd.DataFrame], idx: Mapping[str, list[np.ndarray]], k: int,
                train: bool) -> dict[str, pd.DataFrame]:
    out = {}
    for name, f in frames.items():
        rows = np.concatenate([p for j, p in enumerate(idx[name]) if j != k]) if train else idx[name][k]
        out[name] = f.iloc[np.sort(rows)].reset_index(drop=True)
    return out


def vote(score: float, thresholds: Mapping[str, float], custodians: Sequence[str], goal: str, rule: str) -> tuple[bool, int]:
    """Each custodian votes yes when the score meets its threshold (custodians without one vote yes)."""
    yes = sum(1 for c in custodians if c not in thresholds
              or (score <= thresholds[c] if goal == "minimize" else score >= thresholds[c]))
    return (yes == len(custodians) if rule == "all" else yes > len(custodians) / 2), yes


def dp_fold_marginals(run: HorizontalRun, frames: Mapping[str, pd.DataFrame], idx, folds: int,
                      workload: Sequence[tuple[str, ...]], rho: float, ledger: PrivacyLedger,
                      rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Noisy test-fold marginals of `workload` (public base codes), by secure aggregation; normalised."""
    l2 = math.sqrt(len(workload))
    sigma = gaussian_sigma(rho, l2)
    out = []
    for k in range(folds):
        test = fold_frames(frames, idx, k, train=False)
        counts = {n: np.concatenate([run.base.encode(f).counts(list(w)).values.ravel() for w in workload]).astype(np.int64)
                  for n, f in test.items()}
        scratch = scratch_ledger([planned_charge(f"fold{k}:test", sigma, l2)])
        flat = np.clip(_secure_sum(f"fold{k}:test", counts, sigma, run.servers, rng, scratch, l2), 0, None).astype(float)
        parts, at = [], 0
        for w in workload:
            size = int(np.prod([run.base.domain.size(a) for a in w]))
            p = flat[at:at + size]
            parts.append(p / p.sum() if p.sum() > 0 else np.full(size, 1 / size))
            at += size
        out.append(parts)
    ledger.spend(score_charge(rho, folds))
    return out


def dp_workload_score(synthetic: Dataset, noisy: Sequence[np.ndarray], workload: Sequence[tuple[str, ...]]) -> float:
    errs = []
    for w, p in zip(workload, noisy):
        q = synthetic.counts(list(w)).values.ravel().astype(float)
        errs.append(np.abs(q / max(q.sum(), 1) - p).sum())
    return float(np.mean(errs))


@attrs.define
class TuningOutcome:
    method: str
    label: str
    chosen: dict[str, Any] | None   # None: no candidate met the custodians' vote; nothing is published
    published: bool
    runs: int                       # candidate runs made (each a full K-fold CV)
    tried: list[dict[str, Any]] = attrs.field(factory=list)  # sound variants: DP scores (safe to report)
    notes: list[str] = attrs.field(factory=list)


@attrs.define
class Tuner:
    """Plan-time decisions of the tuning (all public) and the loop itself."""

    method: str
    folds: int
    grid: list[dict[str, Any]]
    thresholds: dict[str, float]
    vote_rule: str
    goal: str
    rho_pre: float          # one fold run's preprocessing ρ
    rho_synth: float        # one fold run's measurement ρ
    rho_q: float = 0.0      # one candidate run (K-fold CV): (K−1)·(rho_pre + rho_synth) for sound methods
    rho_score: float = 0.0
    mu: float = 1.0
    workload: list[tuple[str, ...]] = attrs.field(factory=list)
    metric: str = DP_METRIC
    evaluator: Any = None   # paper: the evaluator whose metric the vote is on

    @property
    def label(self) -> str:
        return PAPER_LABEL if self.method == "paper" else SOUND_LABEL[self.method]

    def charges(self) -> list[Charge]:
        if self.method == "paper":
            return []
        return [score_charge(self.rho_score, self.folds),
                selection_charge(self.method, self.rho_q, self.mu, len(self.grid), self.folds)]

    def run(self, run: HorizontalRun, frames: Mapping[str, pd.DataFrame], ledger: PrivacyLedger,
            rng: np.random.Generator) -> TuningOutcome:
        idx = fold_indices(frames, self.folds, rng)
        if self.method == "paper":
            return self._paper(run, frames, idx, rng)
        noisy = dp_fold_marginals(run, frames, idx, self.folds, self.workload, self.rho_score, ledger, rng)
        if self.method == "private_selection":
            k_runs = int(rng.poisson(self.mu))
            picks = [self.grid[int(i)] for i in rng.integers(0, len(self.grid), size=k_runs)]
        else:
            picks = list(self.grid)
        tried = []
        for params in picks:
            score = float(np.mean([dp_workload_score(
                run.synthetic(fold_frames(frames, idx, k, True), params, self.rho_pre, self.rho_synth, rng),
                noisy[k], self.workload) for k in range(self.folds)]))
            ok, yes = vote(score, self.thresholds, list(frames), self.goal, self.vote_rule)
            tried.append({"params": params, "dp_score": score, "votes": yes, "passes": ok})
        ledger.spend(selection_charge(self.method, self.rho_q, self.mu, len(self.grid), self.folds))
        notes = []
        if not tried:  # K = 0 (chance e^−μ): no candidate was scored, so none passed the custodians' vote
            notes.append("the Poisson draw made 0 candidate runs: no vote passed, nothing is published")
            return TuningOutcome(self.method, self.label, None, False, 0, [], notes)
        best = max(tried, key=lambda t: (t["passes"], -t["dp_score"]))  # the fixed total order on outputs
        # Theorem 6 covers releasing the best run only (the number of runs is data-independent); the other
        # runs' scores would each cost ρ_Q more. compose_all paid for every score, so it may show them.
        shown = [best] if self.method == "private_selection" else tried
        return TuningOutcome(self.method, self.label, dict(best["params"]) if best["passes"] else None,
                             bool(best["passes"]), len(tried), shown, notes)

    def _paper(self, run: HorizontalRun, frames, idx, rng: np.random.Generator) -> TuningOutcome:
        """Algorithm 1: candidates in grid order, K-fold scores on real test folds (not DP, not published),
        the first candidate all custodians vote for is chosen; none: nothing is published."""
        evaluator_name, key = self.metric.split(".", 1)
        for i, params in enumerate(self.grid):
            scores = []
            for k in range(self.folds):
                train = fold_frames(frames, idx, k, True)
                synth = run.synthetic(train, params, self.rho_pre, self.rho_synth, rng)
                real_train = stack([run.base.encode(f) for f in train.values()])
                real_test = stack([run.base.encode(f) for f in fold_frames(frames, idx, k, False).values()])
                metrics = self.evaluator.evaluate_holdout(real_train, real_test, synth, rng)
                if key not in metrics:
                    raise ConfigError(f"collab.tuning.metric: {evaluator_name!r} has no metric {key!r}; "
                                      f"it reports {sorted(metrics)}")
                scores.append(metrics[key])
            ok, _ = vote(float(np.mean(scores)), self.thresholds, list(frames), self.goal, self.vote_rule)
            if ok:
                return TuningOutcome("paper", PAPER_LABEL, dict(params), True, i + 1)
        return TuningOutcome("paper", PAPER_LABEL, None, False, len(self.grid),
                             notes=["no candidate met the custodians' thresholds: nothing is published"])

