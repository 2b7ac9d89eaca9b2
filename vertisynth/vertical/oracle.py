"""`VerticalOracle`: a `MarginalOracle` (pgm/oracle.py) whose data is split by columns between parties.

* measure, within one party: answered at that party from its own columns with exactly the central oracle's code
  (discrete Gaussian from the OS CSPRNG under secure noise; under simulation noise a seeded normal from that party's
  stream), paid once: one person's record spans all parties, so the charge is the central one.
* measure, across two parties: the charge ρ = 1/(2σ²) is spent first, then the `CrossPartyMeasure` runs its
  protocol on the two parties' columns (coarsened on each side first when the query has bins) and the answer carries
  the variance the measure reports (two-sided noise: 2σ²). Each such query is written into the ledger
  (`ledger.cross_party`: attributes, parties, measure, trust, variance).
* select: no role may read a cross-party marginal, so (docs/vertical.md has the argument)
    - a candidate that crosses parties is scored on the noisy answers this oracle has already given (post-processing:
      the synthesizer measures such candidates once, paid from its budget, and also estimates with them);
    - a triple over two parties that no answer holds yet is scored at the party holding two of its attributes: its
      pair there (exact, at that party) plus its cross-party pairs' released estimates, halved (`_party_triple`);
    - the candidates of one party are scored at that party. The round's ρ = ε²/8 is split: `group_share` of it
      releases each party's best exact score with Gaussian noise (one vector of sensitivity √Σ Δ_P²), the rest runs
      the exponential mechanism at the party whose noisy best is highest, if it beats the best cross-party score.
  Both parts are DP mechanisms; their ρ adds up to ε²/8, the round's planned cost.
* a `ReleasesOnce` measure (dpfm, grr): the release runs at the first cross-party question (its charges planned
  before the synthesizer's), then every cross-party marginal, and every cross-party candidate's score, is read off
  it: post-processing, free, with the estimator's per-cell variance (`Measurement.variance`).
Refused in one line, before anything is spent: an attribute outside the domain, an empty query, a query over three
or more parties, a cross-party candidate with no noisy answer to score it by.

This class is the server's side: it routes, checks and pays; what reads a party's columns or draws its noise is that
party's `PartySide`, reached through a `PartyLink` (link.py): in this process by default, across machines with
`VerticalOracle.over` (deploy/oracle_rounds.py).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vertisynth.core.capabilities import (CountsInRelease, CrossPartyMeasure, ReleasesAtParties, ReleasesOnce,
                                         ReportsConsistentVariance, SumsWholeRows)
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, ConfigError
from vertisynth.core.privacy import Charge, PrivacyLedger
from vertisynth.pgm.estimation import Measurement, bin_sum
from vertisynth.pgm.oracle import Bins, CentralOracle, Pay, _spend, _vector_sigma, check_measure, check_select
from vertisynth.pgm.scores import INDIF_SENSITIVITY

from .link import InProcessLink, PartyLink, Spend, same_binning


def party_streams(rng: np.random.Generator, parties: Sequence[str]) -> dict[str, np.random.Generator]:
    """One seeded stream per party, drawn from the run's fit stream (simulation noise only; secure noise never
    reads them)."""
    seeds = np.random.SeedSequence(rng.integers(0, 2**63, size=4).tolist()).spawn(len(parties))
    return {p: np.random.default_rng(s) for p, s in zip(parties, seeds)}


def residual_above_noise(r: np.ndarray, v: float) -> float:
    """An estimate of ‖x − e‖₁ from a released residual r = y − e with noise variance v per cell: Σ √max(r² − v', 0)
    (|x − e| where it dominates the noise, about 0 where not; |y − e| would add ~0.8σ per cell). A two-way residual
    is first double-centred (its margins are measured elsewhere; a pair's dependence lives in its interaction),
    which leaves v' = v (1 − 1/r)(1 − 1/c)."""
    if r.ndim == 2:
        r = r - r.mean(axis=0, keepdims=True) - r.mean(axis=1, keepdims=True) + r.mean()
        v *= (1 - 1 / r.shape[0]) * (1 - 1 / r.shape[1])
    return float(np.sqrt(np.maximum(r * r - v, 0.0)).sum())


# E[√max(z² − 1, 0)] for z ~ N(0, 1) and its std (numerically): what a cell with no signal adds to
# Σ √max(r² − v, 0), per √v
NULL_ABOVE_NOISE, NULL_ABOVE_NOISE_STD = 0.3426, 0.6052
# a candidate read off a release whose estimate is not this many null standard deviations above 0 scores at that
# lower bound, one that is keeps its estimate (`release_score`). A GRR answer can be so noisy that, scored at its
# estimate, pure noise wins selection rounds over within-party candidates with real signal (NLTCS, grr, ε 0.4,
# mst: TVD 0.245 at a lower bound of 0-5 independent-cells stds, about independent's); a lower bound for every
# candidate put dpfm's strong cross-party pairs behind weaker within-party ones (zoo small-domains, ε 0.4, mst:
# 0.060 at 10 such stds, 0.035 at 0-3). The null std counts the correlation the centring puts between a pair's cells
# and the measure's variance of the centred answer: then z 5 and 10 give 0.172 (grr NLTCS) and 0.036 (dpfm
# small-domains) alike (docs/vertical.md)
RELEASE_Z = 5.0
# mark a release answer made consistent with measured 1-ways as centred (`Measurement.centred`, its kept variance
# weighed per dimension: GLS off the effects it no longer informs about). Off: right (tests/pgm/test_pgm_centred.py)
# but not better on the grid, privmrf over dpfm on the zoo and NLTCS, seeds 0-1, median new/old 1.00, below
# VertiMRF-FM in fewer cells (docs/vertical.md, "Fourth pass")
CENTRE_RELEASE_ANSWERS = False
# a two-party triple no answer holds is scored at the party holding two of its attributes, from that pair's exact
# error and its cross-party pairs' released estimates (`VerticalOracle._party_triple`); off: by its largest
# cross-party pair's estimate alone, a lower bound (aim's fifth pass, docs/vertical.md)
PARTY_SCORES_TRIPLES = True


def release_score(r: np.ndarray, v: np.ndarray, z: float = 0.0, centred: np.ndarray | None = None,
                  bound: bool = False, correlated: bool = True) -> float:
    """An estimate of ‖x − e‖₁ from a residual r = y − e of a released estimate with per-cell variance v:
    Σ √max(r² − v', 0) less its mean where x = e (0.3426 √v' a cell), so a cell whose noise dwarfs its signal
    adds about 0 on average rather than ~0.34 of its noise (a GRR or sketch answer's variance is large, and
    without the correction the noisiest candidates would score highest). A two-way residual is double-centred
    first, which leaves v' = `centred` where the measure reports it (`ReportsConsistentVariance`: its covariance
    between cells counted), else v (1 − 1/r)(1 − 1/c) (cells taken as independent: 1.6x too little for a grr
    pair). `z` > 0: an estimate not z null standard deviations above 0 is lowered by that many (a lower bound: noise
    alone must not win a selection round), a larger one is kept as it is (unbiased, as the within-party scores it
    competes with are). `bound`: every estimate lowered (a lower bound whatever its size); `correlated` False: the
    null std of independent cells (the centring's correlation left out), as before 2026-11-27's third pass."""
    v = np.asarray(v, float)
    spread = 1.0
    if r.ndim == 2:
        r = r - r.mean(axis=0, keepdims=True) - r.mean(axis=1, keepdims=True) + r.mean()
        v = np.maximum(np.asarray(centred, float), 1.0) if centred is not None else \
            v * (1 - 1 / r.shape[0]) * (1 - 1 / r.shape[1])
        # the centring correlates the cells: Σ ρ² over pairs of cells is cells²/dof, not cells, so the null
        # std is √(cells/dof) times the independent cells' (2x for a 2 × 2 table, whose four cells are ± one value)
        spread = math.sqrt(r.size / max((r.shape[0] - 1) * (r.shape[1] - 1), 1)) if correlated else 1.0
    est = float((np.sqrt(np.maximum(r * r - v, 0.0)) - NULL_ABOVE_NOISE * np.sqrt(v)).sum())
    null_std = spread * NULL_ABOVE_NOISE_STD * float(np.sqrt(v.sum()))
    # z: a candidate whose estimate is not z null stds above 0 scores at its lower bound (noise alone must not win
    # a round); one that is keeps its estimate, unbiased like the within-party scores it competes with (a lower
    # bound there moved cross-party pairs 20-90 null stds above 0 behind weaker within-party ones: docs/vertical.md)
    return est if est > z * null_std and not bound else est - z * null_std


class PartyOracle(CentralOracle):
    """The within-party oracle: one party's questions about its own columns, answered from them with the central
    oracle's code and charged at the central price (one person's record spans every party), for a synthesizer whose
    per-party step runs at the party itself (VertiMRF's local PrivMRF). `VerticalOracle` answers a one-party query
    through the party's `PartySide` (link.py), the same counting code. `asked` lists every answered query: what it was (measure / indif /
    l1_errors), on which attributes, and the ρ it was paid (the ledger's charges, query by query)."""

    def __init__(self, table: Any, ledger: PrivacyLedger, party: str | None = None) -> None:
        super().__init__(table, ledger)
        self.party = party
        self.asked: list[dict[str, Any]] = []

    def _log(self, kind: str, what: Sequence[Any], pay: Pay) -> None:
        rho = float(pay.cost.rho) if isinstance(pay, Charge) else float(pay.log[-1][1])
        self.asked.append({"query": kind, "attributes": [list(w) if isinstance(w, tuple) else w for w in what],
                           "rho": rho})

    def measure(self, attributes: Sequence[str], pay: Pay, rng: np.random.Generator,
                sigma: float | None = None, bins: Bins = None) -> Measurement:
        m = super().measure(attributes, pay, rng, sigma, bins)
        self._log("measure", list(m.attributes), pay)
        return m

    def indif(self, pairs: Sequence[tuple[str, str]], pay: Pay, rng: np.random.Generator,
              sigma: float | None = None) -> np.ndarray:
        out = super().indif(pairs, pay, rng, sigma)
        self._log("indif", [tuple(p) for p in pairs], pay)
        return out

    def l1_errors(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray], pay: Pay,
                  rng: np.random.Generator, sigma: float | None = None,
                  bins: Sequence[Bins] | None = None) -> np.ndarray:
        out = super().l1_errors(candidates, estimates, pay, rng, sigma, bins)
        self._log("l1_errors", [tuple(c) for c in candidates], pay)
        return out


def coarse_bins(noisy: np.ndarray, k: int, within: np.ndarray | None = None) -> np.ndarray | None:
    """At most `k` bins of consecutive values holding about equal shares of an attribute's noisy 1-way counts
    (post-processing of a released measurement), composed with `within` (an earlier binning: values -> bins, the
    counts being per bin); None when no coarsening is needed. A probe measured on these bins has few cells, so
    its noise adds little to a candidate's score."""
    noisy = np.maximum(np.asarray(noisy, float), 0.0)
    if noisy.size <= k:
        return None
    cum = np.cumsum(noisy + 1e-9)
    q = np.minimum((k * (cum - 0.5 * (noisy + 1e-9)) / cum[-1]).astype(np.int64), k - 1)
    q = np.unique(q, return_inverse=True)[1].astype(np.int64)   # every bin used, 0..k'-1
    return q if within is None else q[np.asarray(within)]


def _bin_map(size: int, fine: np.ndarray | None, coarse: np.ndarray | None) -> np.ndarray | None:
    """For one attribute: the coarse bin of each fine bin (identity maps where None), or None when some fine bin
    straddles two coarse ones."""
    fine = np.arange(size) if fine is None else np.asarray(fine)
    coarse = np.arange(size) if coarse is None else np.asarray(coarse)
    out = np.full(int(fine.max()) + 1, -1)
    out[fine] = coarse
    if np.any(out < 0) or np.any(out[fine] != coarse):
        return None
    return out


def _sub_marginal(cand: tuple[str, ...], keep: tuple[int, ...], e: np.ndarray, bins: Bins
                  ) -> tuple[tuple[str, ...], np.ndarray, Bins]:
    """The sub-marginal of `cand` on the positions `keep`: its attributes, `e` summed down to it, its bins."""
    sub = tuple(cand[i] for i in keep)
    e_sub = e.sum(axis=tuple(i for i in range(len(cand)) if i not in keep))
    return sub, e_sub, {a: b for a, b in (bins or {}).items() if a in sub} or None


class VerticalOracle:
    """Answers a synthesizer's `measure`/`select` from the parties' columns: routes, checks and pays for each query
    here (the server's side), and asks the parties through a `PartyLink` (link.py): in this process by default,
    or across machines (deploy/oracle_rounds.py, `VerticalOracle.over`)."""

    def __init__(self, views: Mapping[str, Dataset], partition: VerticalPartition, measure: CrossPartyMeasure,
                 ledger: PrivacyLedger, rngs: Mapping[str, np.random.Generator], measure_name: str = "",
                 group_share: float = 0.5) -> None:
        if not isinstance(measure, (CrossPartyMeasure, ReleasesOnce)):
            raise ConfigError(f"vertical oracle: {type(measure).__name__} is not a cross-party measure "
                              "(trust, released_variance, answer; or release_cost, release, answer_released)")
        if len(partition) < 2:
            raise ConfigError("vertical oracle: needs at least two parties; one party's data is answered centrally")
        missing = [p for p in partition.names if p not in views or p not in rngs]
        if missing:
            raise ConfigError(f"vertical oracle: no view or stream for parties {missing}")
        n = {views[p].n for p in partition.names}
        if len(n) != 1:
            raise ConfigError(f"vertical oracle: the parties' views are not row-aligned (row counts {sorted(n)})")
        dom = None
        for p, a in zip(partition.names, partition):
            v = views[p].domain.project(a.attributes)
            dom = v if dom is None else dom.merge(v)
        self._setup(InProcessLink(views, partition, measure, ledger, rngs), partition, dom, measure, ledger,
                    measure_name, group_share)

    @classmethod
    def over(cls, link: PartyLink, partition: VerticalPartition, domain: Domain, measure: CrossPartyMeasure,
             ledger: PrivacyLedger, measure_name: str = "", group_share: float = 0.5) -> VerticalOracle:
        """The server's side over parties reached by `link` (e.g. on other machines); `domain` the public one."""
        if not isinstance(measure, (CrossPartyMeasure, ReleasesOnce)):
            raise ConfigError(f"vertical oracle: {type(measure).__name__} is not a cross-party measure "
                              "(trust, released_variance, answer; or release_cost, release, answer_released)")
        if not isinstance(link, PartyLink):
            raise ConfigError(f"vertical oracle: {type(link).__name__} is not a PartyLink")
        if isinstance(measure, ReleasesOnce) and not (isinstance(link, InProcessLink) or (
                isinstance(measure, ReleasesAtParties) and callable(getattr(link, "release", None)))):
            raise ConfigError(f"vertical oracle: {measure_name or type(measure).__name__} releases once and this link "
                              "has no release round (a ReleasesAtParties measure over a link with `release`)")
        if len(partition) < 2:
            raise ConfigError("vertical oracle: needs at least two parties; one party's data is answered centrally")
        self = cls.__new__(cls)
        self._setup(link, partition, domain.project([a for p in partition for a in p.attributes]), measure, ledger,
                    measure_name, group_share)
        return self

    def _setup(self, link: PartyLink, partition: VerticalPartition, domain: Domain, measure: CrossPartyMeasure,
               ledger: PrivacyLedger, measure_name: str, group_share: float) -> None:
        if not 0 < group_share < 1:
            raise ConfigError(f"vertical oracle: group_share must be in (0, 1), got {group_share}")
        self.link, self.partition, self.cross_measure, self.ledger = link, partition, measure, ledger
        self.measure_name = measure_name or type(measure).__name__
        self.group_share = group_share
        self.owner = {a: p.name for p in partition for a in p.attributes}
        self.domain: Domain = domain
        self.answered: list[Measurement] = []     # cross-party answers (public once released): select scores by them
        # inverse-variance means of several released answers to one query (`pool`: post-processing), scored like one
        self.pooled: list[Measurement] = []
        self._best_cache: tuple[tuple[int, int], dict] = ((0, 0), {})   # (answers seen, candidate -> least noisy)
        # a measure that releases once (sealed sketches, GRR columns): every cross-party answer is post-processing
        # of that release, free; the release runs at the first cross-party question, its charges planned up front
        self.releases = isinstance(measure, ReleasesOnce)
        self._released: dict[tuple[str, ...], tuple[tuple[str, ...], np.ndarray, np.ndarray]] = {}
        # (table, adjusted attributes) -> the measure's variance of the consistent answer (its axes, per cell)
        self._kept: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[tuple[str, ...], np.ndarray] | None] = {}
        self._release_ran = False
        # attribute -> (its 1-way counts, their per-cell variance): the inverse-variance average of the 1-way
        # projections of every within-party answer given so far (public once released), which a release's answers
        # are made consistent with; and the running sums that average comes from
        self._margins: dict[str, tuple[np.ndarray, float]] = {}
        self._margin_sums: dict[str, tuple[np.ndarray, float]] = {}

    @property
    def party_cpu(self) -> dict[str, float]:
        """CPU s of each party's own steps (not the protocol's), where the link can say (in this process)."""
        return dict(getattr(self.link, "party_cpu", {p: 0.0 for p in self.partition.names}))

    # -- routing ----------------------------------------------------------------------------------
    def parties_of(self, attributes: Sequence[str]) -> list[str]:
        """The parties holding `attributes`, in the order they first appear; refuses what no route answers."""
        attributes = tuple(self.domain.check(attributes))
        if not attributes:
            raise ConfigError("vertical oracle: a query needs at least one attribute")
        out = list(dict.fromkeys(self.owner[a] for a in attributes))
        if len(out) > 2:
            raise ConfigError(f"vertical oracle: {list(attributes)} spans {len(out)} parties ({', '.join(out)}); "
                              "a cross-party measure answers marginals of two parties only")
        return out

    def crosses(self, attributes: Sequence[str]) -> bool:
        return len(self.parties_of(attributes)) == 2

    def whole_rows_party(self, attributes: Sequence[str]) -> str | None:
        """For a query across two parties: the party whose side the cross-party measure sums from its whole rows
        when that side is one unbinned attribute (`SumsWholeRows`), so leaving it unbinned costs no encryption;
        None when the measure keeps no whole rows or the query does not cross."""
        parties = self.parties_of(attributes)
        if len(parties) != 2 or self.releases or not isinstance(self.cross_measure, SumsWholeRows):
            return None
        return self.cross_measure.whole_rows_party(parties)

    # -- measure ----------------------------------------------------------------------------------
    def measure(self, attributes: Sequence[str], pay: Pay, rng: np.random.Generator,
                sigma: float | None = None, bins: Bins = None) -> Measurement:
        attributes = tuple(self.domain.check(attributes))
        if not attributes:   # the record count (a 0-way marginal): every party holds every row; the first answers
            m = self._measure_at(self.partition.names[0], attributes, pay, sigma, bins)
            return self._with_released_count(m) if self.releases else m
        parties = self.parties_of(attributes)
        if len(parties) == 1:   # at its party, with the central oracle's code and the party's stream
            return self._measure_at(parties[0], attributes, pay, sigma, bins)
        return self.measure_cross(attributes, pay, sigma, bins)

    def _measure_at(self, party: str, attributes: tuple[str, ...], pay: Pay, sigma: float | None,
                    bins: Bins) -> Measurement:
        """A marginal of one party's columns: checked and paid here (the central oracle's checks), then answered
        by that party."""
        sigma, rho, _ = check_measure(attributes, pay, sigma, bins)
        what = f"measure {list(attributes)}"
        _spend(pay, self.ledger, rho, what)
        values = self.link.measure(party, attributes, sigma, bins, Spend.of(pay, rho, what))
        m = Measurement(attributes, values, sigma, bins)
        if self.releases:
            self._note_margins(m)
        return m

    def _note_margins(self, m: Measurement) -> None:
        """Averages each attribute's 1-way projections of the within-party answers (unbinned on it) by inverse
        variance: a noisy marginal summed over its other axes has per-cell variance σ² × the cells summed, and
        the answers' noises are independent (post-processing). The least noisy projection alone was far noisier:
        NLTCS, ε 1.6, privmrf over dpfm, RMS error of the 1-ways 71 against 46 averaged (docs/vertical.md)."""
        for axis, a in enumerate(m.attributes):
            if m.bins and a in m.bins:
                continue
            var = m.std ** 2 * (m.values.size // m.values.shape[axis])
            other = tuple(i for i in range(m.values.ndim) if i != axis)
            proj = np.asarray(m.values, float).sum(axis=other)
            num, den = self._margin_sums.get(a, (0.0, 0.0))
            num, den = num + proj / var, den + 1.0 / var
            self._margin_sums[a] = (num, den)
            self._margins[a] = (num / den, 1.0 / den)

    def _ensure_release(self) -> None:
        """Runs the release on first use (its charges planned first, so the ledger keeps the plan's order)."""
        if not self._release_ran:
            self._release_ran = True
            self.link.release()

    def _with_released_count(self, m: Measurement) -> Measurement:
        """The record count averaged by inverse variance with the release's own (dpfm's Gaussian n̂, paid by the
        release's planned charge: post-processing, free). A twin's count is 1% of its half of ρ, dpfm's 10% of the
        release's: NLTCS, ε 1.6, privmrf's n̂ std 58 against the release's 16; a count 120 off moved every 1-way of
        the model by about as much (docs/vertical.md)."""
        if not isinstance(self.cross_measure, CountsInRelease):
            return m
        self._ensure_release()
        n_r, v_r = self.cross_measure.released_count()
        if not v_r > 0:
            raise ConfigError(f"{self.measure_name}: the release's count has variance {v_r}")
        v_m = m.std ** 2
        var = 1.0 / (1.0 / v_m + 1.0 / v_r)
        value = (np.asarray(m.values, float) / v_m + n_r / v_r) * var
        return Measurement(m.attributes, value, math.sqrt(var), m.bins)

    def measure_many(self, queries: Sequence[Sequence[str]], pays: Sequence[Pay], rng: np.random.Generator,
                     sigma: float | None = None, bins: Sequence[Bins] | None = None) -> list[Measurement]:
        """`measure` for each query, in order; the cross-party ones as one protocol stage (one run per pair of
        parties and encrypting side, so a row is encrypted once for all of them). All checked before any spend."""
        bins = list(bins) if bins is not None else [None] * len(queries)
        if not len(queries) == len(pays) == len(bins):
            raise ConfigError("measure_many: needs one payment and one bins entry per query")
        routes = [self.parties_of(q) for q in queries]
        cross = [i for i, r in enumerate(routes) if len(r) == 2]
        if self.releases:   # answered from the release, free: each checked before anything is spent
            for i in cross:
                self._check_free(queries[i], pays[i], bins[i])
            return [self.measure(q, p, rng, sigma, b) for q, p, b in zip(queries, pays, bins)]
        prepared = [self._prepare_cross(queries[i], pays[i], sigma, bins[i]) for i in cross]
        by_sigma: dict[float, list[int]] = {}
        for k, (_, _, s) in enumerate(prepared):
            by_sigma.setdefault(s, []).append(k)
        for ks in by_sigma.values():   # checked first: one party brings one table of its columns to a stage
            self._check_stage([(prepared[k][0], bins[cross[k]]) for k in ks])
        out: dict[int, Measurement] = {}
        for i, r in enumerate(routes):
            if len(r) == 1:
                out[i] = self.measure(queries[i], pays[i], rng, sigma, bins[i])
        spends = {}
        for k, (i, (attrs_, parties, s)) in enumerate(zip(cross, prepared)):
            what = f"measure {list(attrs_)} across {' and '.join(parties)}"
            rho = self._table_cost(pays[i], s)
            _spend(pays[i], self.ledger, rho, what)
            spends[k] = Spend.of(pays[i], rho, what)
        for s, ks in by_sigma.items():
            for k, m in zip(ks, self._answer([prepared[k] for k in ks], s, [bins[cross[k]] for k in ks],
                                             [spends[k] for k in ks])):
                out[cross[k]] = m
        return [out[i] for i in range(len(queries))]

    def measure_cross(self, attributes: Sequence[str], pay: Pay, sigma: float | None = None,
                      bins: Bins = None) -> Measurement:
        """A marginal over exactly two parties, through the cross-party measure (refused otherwise, unspent)."""
        if self.releases:
            return self._from_release(attributes, pay, bins)
        attributes, parties, sigma = self._prepare_cross(attributes, pay, sigma, bins)
        what = f"measure {list(attributes)} across {parties[0]} and {parties[1]}"
        rho = self._table_cost(pay, sigma)
        _spend(pay, self.ledger, rho, what)
        return self._answer([(attributes, parties, sigma)], sigma, [bins], [Spend.of(pay, rho, what)])[0]

    def _prepare_cross(self, attributes: Sequence[str], pay: Pay, sigma: float | None, bins: Bins):
        """Checks (nothing spent): (attributes, parties, σ)."""
        attributes = tuple(self.domain.check(attributes))
        parties = self.parties_of(attributes)
        if len(parties) != 2:
            raise ConfigError(f"vertical oracle: {list(attributes)} is held by one party ({parties[0]}); it is "
                              "answered at that party, not through a cross-party measure")
        if sigma is None:
            if not isinstance(pay, Charge):
                raise ConfigError("measure: a filter payment needs the noise std sigma")
            sigma = self.cross_measure.sigma_for_rho(pay.cost.rho)
        if not sigma > 0:
            raise ConfigError(f"measure {list(attributes)}: sigma must be positive, got {sigma}")
        if bins and not set(bins) <= set(attributes):
            raise ConfigError(f"measure {list(attributes)}: bins given for attributes not measured")
        Measurement(attributes, np.zeros(1), 1.0, bins)   # checks the bins before anything is spent
        cost = self.cross_measure.rho_per_table(sigma)   # checked here too: nothing is spent on a wrong charge
        if isinstance(pay, Charge) and not np.isclose(pay.cost.rho, cost, rtol=1e-9, atol=0):
            raise BudgetError(f"measure {list(attributes)}: the charge's ρ={pay.cost.rho:.6g} is not what this "
                              f"answer costs (ρ={cost:.6g})")
        return attributes, tuple(parties), sigma

    # -- a measure that releases once ------------------------------------------------------------------
    def _check_free(self, attributes: Sequence[str], pay: Pay, bins: Bins) -> tuple[str, ...]:
        """Checks of a cross-party question answered from the release (nothing is spent on it): a planned charge
        for it is refused, since the plan would then never be spent (a twin plans none under `cross_release`)."""
        attributes = tuple(self.domain.check(attributes))
        parties = self.parties_of(attributes)
        if len(parties) != 2:
            raise ConfigError(f"vertical oracle: {list(attributes)} is held by one party ({parties[0]}); it is "
                              "answered at that party, not through a cross-party measure")
        if isinstance(pay, Charge):
            raise BudgetError(f"measure {list(attributes)}: {self.measure_name} answers cross-party marginals from "
                              f"its release for free; the planned charge {pay.stage}/{pay.mechanism} would never be "
                              "spent (plan none for it)")
        if bins and not set(bins) <= set(attributes):
            raise ConfigError(f"measure {list(attributes)}: bins given for attributes not measured")
        Measurement(attributes, np.zeros(1), 1.0, bins)   # checks the bins
        return attributes

    def _release_answer(self, attributes: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(estimate, per-cell variance) of `attributes` (axes in that order) from the release, run on first use."""
        self._ensure_release()
        key = tuple(sorted(attributes))
        if key not in self._released:
            p, q = self.parties_of(key)
            left = tuple(a for a in key if self.owner[a] == p)
            right = tuple(a for a in key if self.owner[a] == q)
            (got, table, var), = self.cross_measure.answer_released([(left, right)])
            got = tuple(got)
            if sorted(got) != list(key) or np.shape(table) != tuple(self.domain.size(a) for a in got) or \
                    np.shape(var) != np.shape(table):
                raise ConfigError(f"{self.measure_name}: answered {list(got)} with shapes {np.shape(table)}, "
                                  f"{np.shape(var)} for {list(key)}")
            self._released[key] = (got, np.asarray(table, float), np.asarray(var, float))
        got, table, var = self._released[key]
        order = [got.index(a) for a in attributes]
        return np.transpose(table, order), np.transpose(var, order)

    def _consistent(self, attributes: tuple[str, ...], table: np.ndarray, var: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """A release answer made consistent with the within-party 1-way answers given so far (post-processing of
        released answers): along each attribute with one, every cell of a slice moves by the same share of the
        difference between the inverse-variance average of the measured 1-way count and the answer's own slice
        sum, and that slice sum. A release estimate's errors are largely shared along slices (dpfm's
        inclusion–exclusion subtracts one cardinality estimate per value: rows and columns carry a common offset),
        so its own slice sums are far noisier than their summed cell variances say: the average takes them at
        the bound for fully correlated cells, cells · Σ v (at Σ v they were trusted too much: NLTCS, ε 1.6;
        replaced by the measured count outright, the noisier projections of large within-party marginals hurt:
        zoo mixed). An offset the estimator took as independent cell noise would also distort the interaction it
        fits; the interaction is left as released. Each cell's variance is then what the measure says is left of
        its answer's noise once the mean and the adjusted attributes' main effects are removed
        (`ReportsConsistentVariance`, from the estimator's covariance; a measure that cannot say: v·(1 − (1 +
        Σ (u − 1)) / cells), independent cells), plus each averaged slice's variance over its cells squared.
        Returned: (table, that variance, the first part alone: the noise off the mean and main effects, what
        estimation of a centred measurement weighs; None where nothing was adjusted)."""
        mine = [(axis, a) for axis, a in enumerate(attributes) if a in self._margins]
        if not mine:
            return table, var, None
        table = np.array(table, float)
        # what is left depends on how the estimator's noise is spread over the effects, which only the measure
        # knows: independent cells keep 1 − (1 + Σ (u − 1)) / cells; dpfm keeps less (its rows and columns carry
        # common offsets), grr more (P⁻¹ scales an interaction's noise by more than a main effect's); the
        # independent-cells share said 1.6x too little for a grr pair (docs/vertical.md)
        out_var = self._kept_variance(attributes, [a for _, a in mine])
        if out_var is None:   # a measure that cannot say: cells taken as independent
            removed = 1 + sum(self.domain.size(a) - 1 for _, a in mine)
            out_var = np.array(var, float) * max(1 - removed / table.size, 0.0)
        kept = np.array(out_var, float)
        for axis, a in mine:
            other = tuple(i for i in range(table.ndim) if i != axis)
            cells = table.size // table.shape[axis]
            measured, m_var = self._margins[a]
            # the slice sums' variance at its upper bound (cells fully correlated: (Σ sd)² <= cells · Σ v)
            own_var = np.maximum(cells * np.asarray(var, float).sum(axis=other), 1e-9)
            own = table.sum(axis=other)
            target = (own / own_var + measured / m_var) / (1 / own_var + 1 / m_var)
            shape = [1] * table.ndim
            shape[axis] = table.shape[axis]
            table = table + ((target - own) / cells).reshape(shape)
            out_var = out_var + (1 / (1 / own_var + 1 / m_var) / cells ** 2).reshape(shape)
        return table, out_var, kept

    def _kept_variance(self, attributes: tuple[str, ...], adjusted: list[str]) -> np.ndarray | None:
        """Per cell (axes in `attributes`' order), the variance the measure says is left of the release's answer
        once its mean and `adjusted`'s main effects are removed (`ReportsConsistentVariance`: from the
        estimator's covariance between cells); None where the measure cannot say. Cached per (table, adjusted)."""
        if not isinstance(self.cross_measure, ReportsConsistentVariance):
            return None
        key = tuple(sorted(attributes))
        ck = (key, tuple(sorted(adjusted)))
        if ck not in self._kept:
            p, q = self.parties_of(key)
            left = tuple(a for a in key if self.owner[a] == p)
            right = tuple(a for a in key if self.owner[a] == q)
            self._release_answer(key)   # (run and cached on first use)
            v = self.cross_measure.consistent_variance((left, right), list(ck[1]))
            got = self._released[key][0]
            if v is not None and np.shape(v) != tuple(self.domain.size(a) for a in got):
                raise ConfigError(f"{self.measure_name}: a consistent variance of shape {np.shape(v)} for {list(got)}")
            self._kept[ck] = None if v is None else (got, np.asarray(v, float))
        if self._kept[ck] is None:
            return None
        got, v = self._kept[ck]
        return np.transpose(v, [got.index(a) for a in attributes])

    def _from_release(self, attributes: Sequence[str], pay: Pay, bins: Bins) -> Measurement:
        """A two-party marginal read off the release (post-processing: nothing spent), summed into `bins` where
        given (the cells' variances summed too: the estimator's covariances between cells are left out), each cell
        floored at variance 1; the ledger's `cross_party` names it with ρ 0."""
        attributes = self._check_free(attributes, pay, bins)
        table, var, kept = self._consistent(attributes, *self._release_answer(attributes))
        for axis, a in enumerate(attributes):
            if bins and a in bins:
                table, var = bin_sum(table, axis, np.asarray(bins[a])), bin_sum(var, axis, np.asarray(bins[a]))
                kept = None if kept is None else bin_sum(kept, axis, np.asarray(bins[a]))
        var = np.maximum(var, 1.0)
        # made consistent: its mean and the adjusted attributes' main effects are the 1-ways' (already in the fit
        # through the within-party answers), its noise lives in the rest; estimation fits that part alone, at the
        # variance per dimension it keeps (pgm/estimation.py; bins keep every slice sum, so it holds binned too).
        # Unless nothing is left (a table binned down to one axis): then as before
        centred = tuple(a for a in attributes if a in self._margins)
        dims = table.size - 1 - sum(table.shape[i] - 1 for i, a in enumerate(attributes) if a in centred)
        centred = centred if CENTRE_RELEASE_ANSWERS and kept is not None and dims >= 1 else ()
        m = Measurement(attributes, table, math.sqrt(float(var.mean())), bins, variance=var, centred=centred,
                        kept_variance=np.maximum(kept, 1.0) if centred else None)
        self.answered.append(m)
        self.ledger.cross_party.append({
            "attributes": list(attributes), "parties": self.parties_of(attributes), "measure": self.measure_name,
            "trust": self.cross_measure.trust, "rho": 0.0, "from_release": True,
            "released_variance": float(var.mean()), **({"binned": sorted(bins)} if bins else {})})
        return m

    def _table_cost(self, pay: Pay, sigma: float) -> float:
        """What one cross-party table at σ costs: a planned charge's own ρ (σ was derived from it, and
        `_prepare_cross` checked that they agree), else what the measure says (a filter draw)."""
        return float(pay.cost.rho) if isinstance(pay, Charge) else self.cross_measure.rho_per_table(sigma)

    def _check_stage(self, asked: list[tuple[tuple[str, ...], Bins]]) -> None:
        """A party taking part in several queries of a stage brings one table of their columns: an attribute asked
        on two different binnings in one stage is refused (from the bins alone, before anything is spent)."""
        seen: dict[str, Any] = {}
        for attributes, b in asked:
            for a in attributes:
                mine = (b or {}).get(a)
                if a in seen and not same_binning(self.domain.size(a), seen[a], mine):
                    raise ConfigError(f"measure_many: attribute {a!r} is asked on two different binnings in one stage")
                seen.setdefault(a, mine)

    def _answer(self, prepared: list, sigma: float, bins: list[Bins], spends: list[Spend]) -> list[Measurement]:
        """One stage of the cross-party measure for prepared (already paid) queries of one σ."""
        answers = self.link.cross([(attributes, parties, b) for (attributes, parties, _), b in zip(prepared, bins)],
                                  sigma, spends)
        if len(answers) != len(prepared):
            raise ConfigError(f"{self.measure_name}: {len(answers)} answers to {len(prepared)} queries")
        out = []
        for (attributes, (p, q), _), b, (got, table, variance) in zip(prepared, bins, answers):
            got = tuple(got)
            if sorted(got) != sorted(attributes) or not variance > 0:
                raise ConfigError(f"{self.measure_name}: answered {list(got)} (variance {variance}) for "
                                  f"{list(attributes)}")
            table = np.transpose(np.asarray(table, float), [got.index(a) for a in attributes])
            want = tuple(int(np.asarray(b[a]).max()) + 1 if b and a in b else self.domain.size(a) for a in attributes)
            if table.shape != want:
                raise ConfigError(f"{self.measure_name}: a table of shape {table.shape} for {list(attributes)}, "
                                  f"expected {want}")
            m = Measurement(attributes, table, math.sqrt(variance), b)
            self.answered.append(m)
            self.ledger.cross_party.append({
                "attributes": list(attributes), "parties": [p, q], "measure": self.measure_name,
                "trust": self.cross_measure.trust, "rho": self.cross_measure.rho_per_table(sigma),
                "released_variance": float(variance), **({"binned": sorted(b)} if b else {})})
            out.append(m)
        return out

    # -- select -----------------------------------------------------------------------------------
    def _best_answer(self, cand: tuple[str, ...], bins: Bins) -> tuple[np.ndarray, float, list] | None:
        """The least noisy answer that holds `cand` on the same or coarser bins, summed down to `cand`: (table,
        its per-cell std, per attribute the map from the candidate's bins to the answer's); None if none does.
        Cached until the next answer (selection asks it for every cross-party candidate, every round)."""
        if self._best_cache[0] != (len(self.answered), len(self.pooled)):
            self._best_cache = ((len(self.answered), len(self.pooled)), {})
        key = (cand, tuple(sorted((a, np.asarray(b).tobytes()) for a, b in (bins or {}).items())))
        if key in self._best_cache[1]:
            return self._best_cache[1][key]
        best = None
        for m in self.answered + self.pooled:
            if not set(cand) <= set(m.attributes):
                continue
            maps = [_bin_map(self.domain.size(a), (bins or {}).get(a), (m.bins or {}).get(a)) for a in cand]
            if any(x is None for x in maps):
                continue   # the answer's bins are not a coarsening of the candidate's
            drop = tuple(i for i, a in enumerate(m.attributes) if a not in cand)
            kept = [a for a in m.attributes if a in cand]
            y = np.transpose(m.values.sum(axis=drop), [kept.index(a) for a in cand])
            summed = int(np.prod([m.values.shape[i] for i in drop]))
            std = m.std * math.sqrt(summed)
            if best is None or (std, y.size) < (best[1], best[0].size):
                best = (y, std, maps)
        self._best_cache[1][key] = best
        return best

    def pool(self, answers: Sequence[Measurement]) -> Measurement:
        """The inverse-variance mean of released answers to one query on the same bins (independent noise): one
        answer of variance 1 / Σ 1/σ_i², kept for selection's scores (`_best_answer`). Post-processing, free;
        refused in one line for answers to different queries or bins, or with per-cell variances."""
        a0 = answers[0] if answers else None
        same = a0 is not None and all(
            m.attributes == a0.attributes and m.values.shape == a0.values.shape and m.variance is None
            and sorted(m.bins or {}) == sorted(a0.bins or {})
            and all(np.array_equal(m.bins[a], a0.bins[a]) for a in (m.bins or {})) for m in answers)
        if not same:
            raise ConfigError("pool: needs released answers to one query on the same bins, each of one std")
        w = np.array([1.0 / (m.std * m.std) for m in answers])
        m = Measurement(a0.attributes, sum(wi * x.values for wi, x in zip(w, answers)) / w.sum(),
                        float(1.0 / math.sqrt(w.sum())), a0.bins)
        self.pooled.append(m)
        return m

    def _noisy_score(self, cand: tuple[str, ...], bins: Bins, estimate: np.ndarray) -> float | None:
        """An estimate of ‖x − e‖₁ from the least noisy answer y that holds `cand` (on the same bins): per cell
        √max((y − e)² − v, 0), v the noise variance (|x − e| where it dominates the noise, small where the noise
        dominates; |y − e| would add ~0.8σ per cell). A two-way residual is first double-centred (the margins are
        measured already; a pair's dependence lives in its interaction), which removes noise: v (1 − 1/r)(1 − 1/c).

        A candidate of three or more attributes that no answer holds (a cross-party triple before it is measured)
        scores the largest such estimate among its sub-marginals across the two parties that an answer holds
        (its cross-party pairs' probes at least): a lower bound, since summing out an attribute never raises an
        L1 distance (‖x_r − e_r‖₁ ≥ ‖x_s − e_s‖₁ for s ⊂ r). Post-processing of released answers, as for a pair."""
        best = self._best_answer(cand, bins)
        if best is None:
            if len(cand) < 3:
                return None
            e = self._binned(cand, bins, estimate)
            out = None
            for k in range(len(cand) - 1, 1, -1):
                for keep in itertools.combinations(range(len(cand)), k):
                    sub, e_sub, sub_bins = _sub_marginal(cand, keep, e, bins)
                    if len({self.owner[a] for a in sub}) < 2:
                        continue   # no role holds a within-party answer's exact counts here; the parties do
                    s = self._noisy_score(sub, sub_bins, e_sub)
                    if s is not None and (out is None or s > out):
                        out = s
            return out
        y, std, maps = best
        e = np.asarray(estimate, float).reshape(tuple(len(mp) for mp in maps))
        for axis, mp in enumerate(maps):   # the estimate on the answer's (coarser) bins
            e = bin_sum(e, axis, mp)
        return residual_above_noise(y - e, std * std)

    def release_scores(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray],
                       bins: Sequence[Bins] | None = None, bound: bool = False) -> np.ndarray:
        """Each cross-party candidate's score read off the release (`release_score` against `estimates`, RELEASE_Z
        null stds below the estimate): post-processing, nothing spent, so a twin need not pay a selection round
        for what the release answers. Refused in one line for a measure that does not release once, or a
        candidate within one party."""
        if not self.releases:
            raise ConfigError(f"release_scores: {self.measure_name} does not release once; cross-party candidates "
                              "are scored by select")
        if len(candidates) != len(estimates):
            raise ConfigError("release_scores: needs one estimate per candidate")
        bins = list(bins) if bins is not None else [None] * len(candidates)
        out = np.empty(len(candidates))
        for i, c in enumerate(candidates):
            c = tuple(self.domain.check(c))
            if len(self.parties_of(c)) != 2:
                raise ConfigError(f"release_scores: {list(c)} is held by one party; select scores it there")
            y, v = self._release_answer(c)
            for axis, a in enumerate(c):
                if bins[i] and a in bins[i]:
                    y, v = bin_sum(y, axis, np.asarray(bins[i][a])), bin_sum(v, axis, np.asarray(bins[i][a]))
            out[i] = release_score(y - np.asarray(estimates[i], float).reshape(y.shape), np.maximum(v, 1.0),
                                   RELEASE_Z, self._centred_variance(c, bins[i]), bound)
        return out

    def _centred_variance(self, attributes: tuple[str, ...], bins: Bins) -> np.ndarray | None:
        """For an unbinned cross-party pair read off the release: the variance of its double-centred answer as the
        measure reports it (`_kept_variance` with both attributes adjusted); None otherwise (binned, more
        attributes, or a measure that cannot say)."""
        if len(attributes) != 2 or bins:
            return None
        return self._kept_variance(tuple(attributes), list(attributes))

    def select(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray],
               weights: Sequence[float], offsets: Sequence[float], epsilon: float, pay: Pay,
               rng: np.random.Generator, bins: Sequence[Bins] | None = None) -> int:
        w = check_select(candidates, estimates, weights, offsets, epsilon)
        off = np.asarray(offsets, float)
        bins = list(bins) if bins is not None else [None] * len(candidates)
        routes = [self.parties_of(c) for c in candidates]
        cross = {}   # candidate index -> score from released answers (public)
        # a triple over two parties that no answer holds is scored at the party holding two of its attributes
        # (`_party_triple`): (its index, that party, the pair there, the pair's estimate, weight, offset, bins)
        at_party: list[tuple[int, str, tuple[str, ...], np.ndarray, float, float, Bins]] = []
        for i, (c, r) in enumerate(zip(candidates, routes)):
            if len(r) == 2 and self.releases:   # read off the release: post-processing, free
                y, v = self._release_answer(tuple(self.domain.check(c)))
                for axis, a in enumerate(c):
                    if bins[i] and a in bins[i]:
                        y, v = bin_sum(y, axis, np.asarray(bins[i][a])), bin_sum(v, axis, np.asarray(bins[i][a]))
                e = np.asarray(estimates[i], float).reshape(y.shape)
                cross[i] = w[i] * (release_score(y - e, np.maximum(v, 1.0), RELEASE_Z,
                                                 self._centred_variance(tuple(self.domain.check(c)), bins[i]))
                                   - off[i])
                continue
            if len(r) == 2 and PARTY_SCORES_TRIPLES and len(c) == 3 and self._best_answer(tuple(c), bins[i]) is None:
                v = self._party_triple(tuple(c), bins[i], estimates[i], float(w[i]), float(off[i]))
                if v is not None:
                    at_party.append((i, *v))
                    continue
            if len(r) == 2:
                s = self._noisy_score(tuple(c), bins[i], estimates[i])
                if s is None:
                    raise ConfigError(f"select: candidate {list(c)} crosses parties and no noisy answer holds it; "
                                      "measure it first (docs/vertical.md)")
                cross[i] = w[i] * (s - off[i])
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(routes):
            if len(r) == 1:
                groups.setdefault(r[0], []).append(i)
        back = list(range(len(candidates)))   # an entry scored at a party -> the candidate it stands for
        if at_party:   # each such triple joins its party's group as one more entry: its pair there, re-weighted
            candidates, estimates, bins = list(candidates), list(estimates), list(bins)
            for i, p, pair, e, wi, oi, b in at_party:
                groups.setdefault(p, []).append(len(back))
                back.append(i)
                candidates.append(pair)
                estimates.append(e)
                bins.append(b)
                w, off = np.append(w, wi), np.append(off, oi)
        rho_round = epsilon * epsilon / 8.0
        what = f"select among {len(back)} marginals"
        _spend(pay, self.ledger, rho_round, what)
        if not groups:   # every candidate crosses parties: the choice is post-processing of released answers
            return max(cross, key=lambda i: (cross[i], -i))
        spend = Spend.of(pay, rho_round, what)

        def args(idx: list[int]) -> tuple:   # one party's candidates and what scores them
            return ([tuple(candidates[i]) for i in idx], [estimates[i] for i in idx], w[idx], off[idx],
                    [bins[i] for i in idx])
        if len(groups) == 1 and not cross:   # one party holds every candidate: the central mechanism, there
            (p, idx), = groups.items()
            return back[idx[self.link.em(p, epsilon, spend, *args(idx))]]
        rho_g = self.group_share * rho_round
        eps_em = math.sqrt(8 * (rho_round - rho_g))
        parties = list(groups)
        sens = math.sqrt(sum(float(w[groups[p]].max()) ** 2 for p in parties))
        s_g = sens / math.sqrt(2 * rho_g)
        # each party releases its best score with its share of the vector's noise: under secure noise one
        # mechanism per party of sensitivity Δ_P at ρ_g Δ_P²/Σ Δ², whose ρ add up to ρ_g (the same σ for all)
        noisy = np.array([self.link.best(p, *args(groups[p]), rho_g * float(w[groups[p]].max()) ** 2 / sens ** 2,
                                         float(w[groups[p]].max()), s_g, spend) for p in parties])
        top = int(np.argmax(noisy))
        if cross and max(cross.values()) > noisy[top]:
            return max(cross, key=lambda i: (cross[i], -i))
        p = parties[top]
        return back[groups[p][self.link.em(p, eps_em, spend)]]

    def _binned(self, cand: tuple[str, ...], bins: Bins, estimate: np.ndarray) -> np.ndarray:
        """A candidate's flat estimate as an array of its shape on `bins` (an attribute without bins: its domain)."""
        return np.asarray(estimate, float).reshape(tuple(int(np.asarray(bins[a]).max()) + 1 if bins and a in bins
                                                         else self.domain.size(a) for a in cand))

    def _party_triple(self, cand: tuple[str, ...], bins: Bins, estimate: np.ndarray, weight: float,
                      offset: float) -> tuple[str, tuple[str, ...], np.ndarray, float, float, Bins] | None:
        """A triple over two parties that no answer holds, as an entry of the party P that holds two of its
        attributes: AIM's score w (‖x_r − e_r‖₁ − o) with ‖x_r − e_r‖₁ estimated by half the sum of its three
        pairs' errors, (c₁ + c₂ + ‖x_s − e_s‖₁) / 2: c₁, c₂ its cross-party pairs' estimates from released answers
        (public), s its pair at P, whose exact error only P reads. That is the entry w/2 (‖x_s − e_s‖₁ − o') with
        o' = 2o − c₁ − c₂, a score P computes like any of its own, of sensitivity w/2 (≤ the group's Δ_P): it joins
        P's noisy best and exponential mechanism at no new cost. Against the independent model half the pairs'
        sum was 0.92-0.98 of a triple's error (median; rank correlation 0.95-0.97) on zoo small-domains, mixed and
        NLTCS, where the largest cross-party pair alone was 0.71-0.75 and told the triples sharing it apart not at
        all (docs/vertical.md, "aim, fifth pass"). None when neither cross-party pair has an answer."""
        by = {p: [a for a in cand if self.owner[a] == p] for p in dict.fromkeys(self.owner[a] for a in cand)}
        p = next(q for q, held in by.items() if len(held) == 2)
        e = self._binned(cand, bins, estimate)
        public, pair = [], None
        for keep in itertools.combinations(range(3), 2):
            sub, e_sub, sub_bins = _sub_marginal(cand, keep, e, bins)
            if all(self.owner[a] == p for a in sub):
                pair = (sub, e_sub.ravel(), sub_bins)
                continue
            s = self._noisy_score(sub, sub_bins, e_sub)
            if s is not None:
                public.append(s)
        if not public:
            return None
        return p, pair[0], pair[1], weight / 2, 2 * offset - sum(public), pair[2]

    # -- score vectors (PrivMRF's R-scores and refinement errors, DPSyn's selection) ---------------------
    def indif(self, pairs: Sequence[tuple[str, str]], pay: Pay, rng: np.random.Generator,
              sigma: float | None = None) -> np.ndarray:
        """The noisy InDif vector of `pairs`, each pair's entry computed and noised at the party holding both
        attributes (the same σ per entry as the central oracle's vector: one charge, L2 sensitivity 5·√m). A pair
        across parties is refused before anything is spent: no role may read its exact counts (a vertical twin
        scores such pairs from measured marginals, docs/vertical.md)."""
        pairs = [tuple(self.domain.check(p)) for p in pairs]
        if not pairs or any(len(p) != 2 for p in pairs):
            raise ConfigError("indif: needs at least one pair of two distinct attributes")
        routes = [self.parties_of(p) for p in pairs]
        cross = [list(p) for p, r in zip(pairs, routes) if len(r) == 2]
        if cross:
            raise ConfigError(f"indif: {len(cross)} pair(s) cross parties (e.g. {cross[0]}): no role may read their "
                              "exact counts; score them from measured cross-party marginals (docs/vertical.md)")
        sens = INDIF_SENSITIVITY * math.sqrt(len(pairs))
        return self._party_vector("indif", pairs, None, None, [r[0] for r in routes], pay, sigma, sens,
                                  f"indif of {len(pairs)} pairs")

    def l1_errors(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray], pay: Pay,
                  rng: np.random.Generator, sigma: float | None = None,
                  bins: Sequence[Bins] | None = None) -> np.ndarray:
        """Noisy ‖x_c − e_c‖₁ for each candidate, computed and noised at the party holding it (one charge,
        sensitivity √k, the central σ per entry). A candidate across parties is refused before anything is spent."""
        if not candidates or len(candidates) != len(estimates):
            raise ConfigError("l1_errors: needs as many estimates as candidates (at least one)")
        bins = list(bins) if bins is not None else [None] * len(candidates)
        cands = [tuple(self.domain.check(c)) for c in candidates]
        routes = [self.parties_of(c) for c in cands]
        cross = [list(c) for c, r in zip(cands, routes) if len(r) == 2]
        if cross:
            raise ConfigError(f"l1_errors: {len(cross)} candidate(s) cross parties (e.g. {cross[0]}): no role may "
                              "read their exact counts; score them from measured cross-party marginals "
                              "(docs/vertical.md)")
        for c, b in zip(cands, bins):
            Measurement(c, np.zeros(1), 1.0, b)   # checks the bins before anything is spent
        return self._party_vector("l1", cands, list(estimates), bins, [r[0] for r in routes], pay, sigma,
                                  math.sqrt(len(cands)), f"l1 errors of {len(cands)} marginals")

    def _party_vector(self, kind: str, items: Sequence[tuple[str, ...]], estimates: list | None, bins: list | None,
                      holders: Sequence[str], pay: Pay, sigma: float | None, sensitivity: float,
                      what: str) -> np.ndarray:
        """A Gaussian vector of L2 `sensitivity` whose entries each party computes and noises from its own
        columns and stream: paid once, before any party reads a row; each entry gets the central σ."""
        sigma, rho = _vector_sigma(pay, sigma, sensitivity, what)
        _spend(pay, self.ledger, rho, what)
        spend = Spend.of(pay, rho, what)
        out = np.empty(len(items))
        for party in dict.fromkeys(holders):
            idx = [i for i, h in enumerate(holders) if h == party]
            out[idx] = self.link.vector(party, kind, [items[i] for i in idx],
                                        None if estimates is None else [estimates[i] for i in idx],
                                        None if bins is None else [bins[i] for i in idx], rho, sigma, sensitivity,
                                        spend)
        return out

    def describe(self) -> dict[str, Any]:
        return {"measure": self.measure_name, "trust": self.cross_measure.trust, "parties": list(self.partition.names),
                "cross_party_answers": len(self.answered)}
