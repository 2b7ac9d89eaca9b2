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
    The theorem needs K hidden from whoever sees the output: K and the picks come from the OS CSPRNG
    (`selection_rng`; never the config seed), and no report, ledger, summary or log line states K or
    anything proportional to it (the tuning's wall time included). In the separate-process protocol the
    custodians and servers take part in every candidate run, so they do learn K: docs/collab.md.
  * "compose_all": score every candidate once; the argmax of DP scores is post-processing, so the cost is
    the zCDP composition m·ρ_Q (Bun & Steinke 2016, Lemma 2.3). Simple, and cheaper than
    private_selection only for very small grids.
The final run on all data then spends its own planned charges; the total is their composition.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import pandas as pd

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import BudgetError, ConfigError, DataError
from vertisynth.core.mechanisms import gaussian_sigma
from vertisynth.core.noise import path_stream
from vertisynth.core.privacy import ORDERS, RDP, Budget, Charge, Composition, Cost, PrivacyLedger, ZCDP

from .horizontal import HorizontalRun, scratch_ledger
from .preprocessing import _secure_sum
from .secure_aggregation import InMemory, Randomness, Transport, planned_charge

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


# -- randomness per (party, round) ----------------------------------------------------------------------
TEST_LABEL = "TEST SECRET: reproducible candidate draws, not for production"


def selection_rng(test_secret: bytes | None = None) -> np.random.Generator:
    """The publisher's stream for the candidate runs (K ~ Poisson(μ) and the picks). Papernot–Steinke's
    bound needs K hidden, so it never comes from the public config seed: a fresh 256-bit OS-CSPRNG seed,
    used for these draws only (nothing else drawn from it is ever shown); `test_secret` reproduces a run
    in tests and marks every output with TEST_LABEL."""
    if test_secret is None:
        return np.random.default_rng(secrets.randbits(256))
    digest = hashlib.sha256(b"vertisynth collab tuning selection\0" + bytes(test_secret)).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))


def party_rng(seed: int | None, *path: object) -> np.random.Generator:
    """A party's stream for one round, derived from (seed, path) and independent of call order, so the
    separate-process roles reproduce the one-process simulation under the same seed. `seed=None`: fresh
    OS entropy (real custodians). Paths used: ("folds", custodian), ("evaluate", custodian, run, fold) at
    the custodians; ("fit", run, fold) at the publisher (the fold run's fit, sampling and decoding)."""
    if seed is None:
        return np.random.default_rng()
    return path_stream(int(seed), "tuning", *(str(p) for p in path))


# -- folds, scores and the vote --------------------------------------------------------------------------
def fold_labels(name: str, n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One custodian gives every row its own uniform fold label, from its own randomness. Independent labels
    (not a balanced split of a shuffled table) are what the accounting needs: adding one person then adds
    one row to one fold and moves no one else, so that person is in exactly K−1 training sets. A balanced
    split would shift other rows across fold boundaries."""
    labels = rng.integers(0, k, size=n)
    out = [np.flatnonzero(labels == j) for j in range(k)]
    if min(map(len, out)) == 0:
        raise DataError(f"custodian {name!r} has too few rows ({n}) for {k} folds: a fold came out empty")
    return out


def fold_indices(frames: Mapping[str, pd.DataFrame], k: int,
                 rngs: Mapping[str, np.random.Generator]) -> dict[str, list[np.ndarray]]:
    """Fold labels of the custodians whose rows are here (`rngs` names them); the others' (empty) tables
    get empty folds."""
    return {name: fold_labels(name, len(f), k, rngs[name]) if name in rngs else [np.zeros(0, np.int64)] * k
            for name, f in frames.items()}


def fold_frames(frames: Mapping[str, pd.DataFrame], idx: Mapping[str, list[np.ndarray]], k: int,
                train: bool) -> dict[str, pd.DataFrame]:
    out = {}
    for name, f in frames.items():
        rows = np.concatenate([p for j, p in enumerate(idx[name]) if j != k]) if train else idx[name][k]
        out[name] = f.iloc[np.sort(rows)].reset_index(drop=True)
    return out


def meets(score: float, threshold: float, goal: str) -> bool:
    return score <= threshold if goal == "minimize" else score >= threshold


def tally(votes: Mapping[str, bool], rule: str) -> tuple[bool, int]:
    yes = sum(map(bool, votes.values()))
    return (yes == len(votes) if rule == "all" else yes > len(votes) / 2), yes


def vote(score: float, thresholds: Mapping[str, float], custodians: Sequence[str], goal: str, rule: str) -> tuple[bool, int]:
    """Each custodian votes yes when the score meets its threshold (custodians without one vote yes)."""
    return tally({c: c not in thresholds or meets(score, thresholds[c], goal) for c in custodians}, rule)


def encode_rows(run: HorizontalRun, frame: pd.DataFrame) -> Dataset:
    """Base codes of a custodian's rows; a role without them (a server, the publisher, another custodian)
    has an empty table, whose counts are zero vectors of the public shapes."""
    if len(frame) == 0:
        return Dataset(np.zeros((0, len(run.base.domain)), np.int64), run.base.domain)
    return run.base.encode(frame)


def dp_fold_marginals(run: HorizontalRun, frames: Mapping[str, pd.DataFrame], idx, folds: int,
                      workload: Sequence[tuple[str, ...]], rho: float, ledger: PrivacyLedger,
                      transport: Transport) -> list[list[np.ndarray]]:
    """Noisy test-fold marginals of `workload` (public base codes), by secure aggregation; normalised.
    Released to the custodians (who score candidates against them) and the publisher; the K test folds
    are disjoint, so they cost ρ_score once."""
    l2 = math.sqrt(len(workload))
    sigma = gaussian_sigma(rho, l2)
    out = []
    for k in range(folds):
        test = fold_frames(frames, idx, k, train=False)
        counts = {n: np.concatenate([encode_rows(run, f).counts(list(w)).values.ravel() for w in workload]).astype(np.int64)
                  for n, f in test.items()}
        scratch = scratch_ledger([planned_charge(f"fold{k}:test", sigma, l2)])
        flat = np.clip(_secure_sum(f"fold{k}:test", counts, sigma, run.servers, transport, scratch, l2), 0,
                       None).astype(float)
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
    runs: int                       # candidate runs made (each a full K-fold CV); private_selection: secret
    tried: list[dict[str, Any]] = attrs.field(factory=list)  # sound variants: DP scores (safe to report)
    notes: list[str] = attrs.field(factory=list)
    chosen_index: int | None = None  # the chosen candidate's index in the grid


@attrs.define
class Selection:
    """The publisher's side of the candidate loop (also the simulation's): which candidate each run tries.
    private_selection: K ~ Poisson(μ) runs, each a candidate drawn uniformly (data-independent, drawn up
    front); compose_all: every candidate once; paper: the grid in order until one passes the vote."""

    method: str
    picks: list[int]

    @classmethod
    def draw(cls, tuner: Tuner, rng: np.random.Generator) -> Selection:
        m = len(tuner.grid)
        if tuner.method == "private_selection":
            k_runs = int(rng.poisson(tuner.mu))
            return cls(tuner.method, [int(i) for i in rng.integers(0, m, size=k_runs)])
        return cls(tuner.method, list(range(m)))

    def next(self, tried: Sequence[dict[str, Any]]) -> int | None:
        if self.method == "paper" and tried and tried[-1]["passes"]:
            return None
        return self.picks[len(tried)] if len(tried) < len(self.picks) else None


class TuningIO:
    """What differs per role in the tuning rounds; the rounds themselves (`tuning_protocol`) are shared.

    `local`: the custodians whose rows this role holds (their fold labels and votes are made here);
    `transport`: the secure-aggregation rounds; `decides`: whether this role drives the candidate loop
    (the simulation, the publisher) or follows its announcements (custodians, servers)."""

    local: Sequence[str] = ()
    transport: Transport
    decides: bool = False
    thresholds: Mapping[str, float] | None = None   # None: the config's; a custodian may hold its own

    def fold_rng(self, custodian: str) -> np.random.Generator:
        raise NotImplementedError

    def eval_rng(self, custodian: str, run: int, fold: int) -> np.random.Generator:
        raise NotImplementedError

    def next_run(self, run: int, tried: Sequence[dict[str, Any]]) -> int | None:
        """The grid index of candidate run `run`, or None when the loop is over."""
        raise NotImplementedError

    def synthetic(self, run: int, fold: int, measured) -> Dataset | None:
        """The fold run's synthetic table (base codes; a DP output) from its measured rounds, or None where
        this role does not see it (servers)."""
        raise NotImplementedError

    def score(self, run: int, score: float | None) -> float | None:
        """Sound methods: the run's DP score, computed by the role that sees the fold tables (simulation,
        publisher) and passed on to the custodians, who vote on it without seeing any fold table."""
        return score

    def votes(self, run: int, mine: Mapping[str, bool]) -> Mapping[str, bool] | None:
        """Every custodian's vote on run `run` (the deciding role), after casting this role's own `mine`."""
        raise NotImplementedError

    def finish(self, outcome: TuningOutcome | None) -> int | None:
        """Deciding role: announce the outcome; followers: return the chosen grid index (None: nothing)."""
        raise NotImplementedError


@attrs.define
class SimulationIO(TuningIO):
    """The one-process simulation: every custodian's rows, every vote, in-memory rounds."""

    local: Sequence[str]
    transport: Transport
    seed: int | None
    selection: Selection
    decides: bool = True
    thresholds: Mapping[str, float] | None = None

    def fold_rng(self, custodian):
        return party_rng(self.seed, "folds", custodian)

    def eval_rng(self, custodian, run, fold):
        return party_rng(self.seed, "evaluate", custodian, run, fold)

    def next_run(self, run, tried):
        return self.selection.next(tried)

    def synthetic(self, run, fold, measured):
        return fold_synthetic(measured, party_rng(self.seed, "fit", run, fold))

    def votes(self, run, mine):
        return dict(mine)

    def finish(self, outcome):
        return None if outcome is None else outcome.chosen_index


def fold_synthetic(measured, rng: np.random.Generator) -> Dataset:
    """The publisher's part of a fold run: fit on the noisy answers, sample, decode to base codes."""
    synth, codec, queries, answers, variances = measured
    synth.fit_marginals(codec.domain, queries, answers, variances, rng)
    return codec.base.encode(codec.decode(synth.sample(None, rng), rng))


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
    metric_range: tuple[float, float] = DP_METRIC_RANGE

    @property
    def label(self) -> str:
        return PAPER_LABEL if self.method == "paper" else SOUND_LABEL[self.method]

    @property
    def sound(self) -> bool:
        return self.method != "paper"

    def charges(self) -> list[Charge]:
        if self.method == "paper":
            return []
        return [score_charge(self.rho_score, self.folds),
                selection_charge(self.method, self.rho_q, self.mu, len(self.grid), self.folds)]

    def check_threshold(self, custodian: str, value: float) -> float:
        lo, hi = self.metric_range
        if not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise ConfigError(f"collab.tuning.thresholds.{custodian} = {value} is outside the range [{lo}, {hi}] "
                              f"of {self.metric!r}")
        return float(value)

    def run(self, run: HorizontalRun, frames: Mapping[str, pd.DataFrame], ledger: PrivacyLedger,
            rng: np.random.Generator, seed: int | None = None, transport: Transport | None = None) -> TuningOutcome:
        """The one-process simulation of the tuning rounds: `rng` draws the candidate runs (the publisher's
        stream: `selection_rng`, never the config seed); fold labels, evaluations and fold fits use per-(party, round) streams from `seed`, and the
        rounds' shares and noise come from `transport` (default: in memory, from `seed`)."""
        if transport is None:
            transport = InMemory(run.servers, Randomness(seed, "tuning"))
        io = SimulationIO(list(frames), transport, seed, Selection.draw(self, rng))
        return tuning_protocol(self, run, frames, ledger, io)

    def outcome(self, tried: list[dict[str, Any]]) -> TuningOutcome:
        """The decision from the runs made (deciding role)."""
        if self.method == "paper":
            if tried and tried[-1]["passes"]:
                g = tried[-1]["index"]
                return TuningOutcome("paper", PAPER_LABEL, dict(self.grid[g]), True, len(tried), chosen_index=g)
            return TuningOutcome("paper", PAPER_LABEL, None, False, len(tried),
                                 notes=["no candidate met the custodians' thresholds: nothing is published"])
        if not tried:  # K = 0 (chance e^−μ): no candidate was scored, so none passed the custodians' vote
            return TuningOutcome(self.method, self.label, None, False, 0, [],
                                 ["the Poisson draw made 0 candidate runs: no vote passed, nothing is published"])
        best = max(tried, key=lambda t: (t["passes"], -t["dp_score"]))  # the fixed total order on outputs
        # Theorem 6 covers releasing the best run only (the number of runs is data-independent); the other
        # runs' scores would each cost ρ_Q more. compose_all paid for every score, so it may show them.
        shown = [best] if self.method == "private_selection" else tried
        shown = [{k: v for k, v in t.items() if k != "index"} for t in shown]
        return TuningOutcome(self.method, self.label, dict(best["params"]) if best["passes"] else None,
                             bool(best["passes"]), len(tried), shown, [],
                             best["index"] if best["passes"] else None)


def custodian_vote(tuner: Tuner, run: HorizontalRun, name: str, frame: pd.DataFrame, idx: list[np.ndarray],
                   synthetics: Sequence[Dataset], dp_score: float | None, threshold: float | None,
                   rngs) -> bool:
    """One custodian's vote on a candidate run. Sound methods: the DP score (against the DP test-fold
    marginals, post-processing) meets its threshold. Paper: the evaluator's metric on this custodian's own
    training and held-out folds (real rows, no noise: only the yes/no leaves the custodian), averaged over
    the folds. A custodian without a threshold votes yes."""
    if threshold is None:
        return True
    if tuner.sound:
        return meets(float(dp_score), threshold, tuner.goal)
    evaluator_name, key = tuner.metric.split(".", 1)
    scores = []
    for k, synth in enumerate(synthetics):
        own = {name: frame}
        real_train = run.base.encode(fold_frames(own, {name: idx}, k, True)[name])
        real_test = run.base.encode(fold_frames(own, {name: idx}, k, False)[name])
        metrics = tuner.evaluator.evaluate_holdout(real_train, real_test, synth, rngs(k))
        if key not in metrics:
            raise ConfigError(f"collab.tuning.metric: {evaluator_name!r} has no metric {key!r}; "
                              f"it reports {sorted(metrics)}")
        scores.append(metrics[key])
    return meets(float(np.mean(scores)), threshold, tuner.goal)


def tuning_protocol(tuner: Tuner, run: HorizontalRun, frames: Mapping[str, pd.DataFrame], ledger: PrivacyLedger,
                    io: TuningIO) -> TuningOutcome:
    """The tuning rounds, the same code in every role (`io` says what the role holds and does):

      1. every custodian labels its own rows with folds from its own randomness;
      2. sound methods: the DP test-fold marginals, one secure-aggregation round per fold;
      3. the candidate loop, driven by the publisher: per run, per fold, the fold run's binning and
         measurement rounds on the training folds (servers aggregate them as in the final run); the
         publisher fits and samples the fold's synthetic table (a DP output); sound methods: it scores the
         tables against the DP test-fold marginals and sends the custodians that score only (the fold
         tables never leave it); paper: it sends the tables, which each custodian scores on its own folds;
         the custodians vote and the publisher tallies the votes;
      4. the outcome (deciding role) or the announced choice (followers).
    The privacy accounting is the tuner's (`Tuner.charges`), spent here in every role alike."""
    thresholds = tuner.thresholds if io.thresholds is None else io.thresholds
    idx = fold_indices(frames, tuner.folds, {n: io.fold_rng(n) for n in io.local})
    noisy = None
    if tuner.sound:
        noisy = dp_fold_marginals(run, frames, idx, tuner.folds, tuner.workload, tuner.rho_score, ledger,
                                  io.transport.scoped("tuning:"))
    tried: list[dict[str, Any]] = []
    i = 0
    while (g := io.next_run(i, tried)) is not None:
        if not 0 <= g < len(tuner.grid):
            raise DataError(f"candidate run {i}: candidate index {g} is not in the grid of {len(tuner.grid)}")
        params = tuner.grid[g]
        synthetics = []
        for k in range(tuner.folds):
            scratch = scratch_ledger(run.charges(params, tuner.rho_pre, tuner.rho_synth))
            measured = run.measure(fold_frames(frames, idx, k, True), params, tuner.rho_pre, tuner.rho_synth,
                                   scratch, io.transport.scoped(f"tuning:run{i}:fold{k}:"))
            synthetics.append(io.synthetic(i, k, measured))
        score = None
        if tuner.sound:
            if synthetics[0] is not None:
                score = float(np.mean([dp_workload_score(s, noisy[k], tuner.workload)
                                       for k, s in enumerate(synthetics)]))
            score = io.score(i, score)
        mine = {c: custodian_vote(tuner, run, c, frames[c], idx[c], synthetics, score, thresholds.get(c),
                                  lambda k, c=c: io.eval_rng(c, i, k)) for c in io.local}
        votes = io.votes(i, mine)
        entry: dict[str, Any] = {"params": params, "index": g}
        if votes is not None:
            if sorted(votes) != sorted(frames):
                raise DataError(f"candidate run {i}: votes from {sorted(votes)}, expected {sorted(frames)}")
            ok, yes = tally(votes, tuner.vote_rule)
            entry.update({"dp_score": score} if tuner.sound else {})
            entry.update({"votes": yes, "passes": ok})
        tried.append(entry)
        i += 1
    if tuner.sound:
        ledger.spend(selection_charge(tuner.method, tuner.rho_q, tuner.mu, len(tuner.grid), tuner.folds))
    if io.decides:
        outcome = tuner.outcome(tried)
        io.finish(outcome)
        return outcome
    g = io.finish(None)
    return TuningOutcome(tuner.method, tuner.label, None if g is None else dict(tuner.grid[g]), g is not None, i,
                         chosen_index=g)
