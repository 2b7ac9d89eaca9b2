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
    - the candidates of one party are scored at that party. The round's ρ = ε²/8 is split: `group_share` of it
      releases each party's best exact score with Gaussian noise (one vector of sensitivity √Σ Δ_P²), the rest runs
      the exponential mechanism at the party whose noisy best is highest, if it beats the best cross-party score.
  Both parts are DP mechanisms; their ρ adds up to ε²/8, the round's planned cost.
Refused in one line, before anything is spent: an attribute outside the domain, an empty query, a query over three
or more parties, a cross-party candidate with no noisy answer to score it by.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vertisynth.core.capabilities import CrossPartyMeasure
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, ConfigError
from vertisynth.core.mechanisms import exponential_noise
from vertisynth.core.noise import discrete_gaussian
from vertisynth.core.privacy import Charge, PrivacyLedger
from vertisynth.pgm.estimation import Measurement, bin_sum
from vertisynth.pgm.oracle import Bins, CentralOracle, Pay, _spend, _vector_sigma, check_select
from vertisynth.pgm.scores import INDIF_SENSITIVITY, indif


def party_streams(rng: np.random.Generator, parties: Sequence[str]) -> dict[str, np.random.Generator]:
    """One seeded stream per party, drawn from the run's fit stream (simulation noise only; secure noise never
    reads them)."""
    seeds = np.random.SeedSequence(rng.integers(0, 2**63, size=4).tolist()).spawn(len(parties))
    return {p: np.random.default_rng(s) for p, s in zip(parties, seeds)}


class PartyOracle(CentralOracle):
    """The within-party oracle: one party's questions about its own columns, answered from them with the central
    oracle's code and charged at the central price (one person's record spans every party). `VerticalOracle`
    answers a one-party query through it; a synthesizer whose per-party step runs at the party itself (VertiMRF's
    local PrivMRF) asks it directly. `asked` lists every answered query: what it was (measure / indif /
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


def _coarsen(view: Dataset, attributes: tuple[str, ...], bins: Bins) -> Dataset:
    """A party's columns `attributes`, each binned value replaced by its bin (done at the party, before the
    protocol: the other roles only ever see bin codes)."""
    cols, sizes = [], {}
    for a in attributes:
        col = np.asarray(view.column(a), np.int64)
        if bins and a in bins:
            b = np.asarray(bins[a], np.int64)
            col, sizes[a] = b[col], int(b.max()) + 1
        else:
            sizes[a] = view.domain.size(a)
        cols.append(col)
    return Dataset(np.stack(cols, axis=1) if cols else np.zeros((view.n, 0), np.int64), Domain.from_sizes(sizes))


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


def _union(a: Dataset, b: Dataset) -> Dataset:
    """One party's columns of two queries side by side (a column in both must be coarsened alike)."""
    extra = [x for x in b.domain.attributes if x not in a.domain.attributes]
    for x in b.domain.attributes:
        if x in a.domain.attributes and (a.domain.size(x) != b.domain.size(x) or
                                         not np.array_equal(a.column(x), b.column(x))):
            raise ConfigError(f"measure_many: attribute {x!r} is asked on two different binnings in one stage")
    return a.hstack(b.project(extra)) if extra else a


class VerticalOracle:
    """Answers a synthesizer's `measure`/`select` from the parties' views (each party's own columns)."""

    def __init__(self, views: Mapping[str, Dataset], partition: VerticalPartition, measure: CrossPartyMeasure,
                 ledger: PrivacyLedger, rngs: Mapping[str, np.random.Generator], measure_name: str = "",
                 group_share: float = 0.5) -> None:
        if not isinstance(measure, CrossPartyMeasure):
            raise ConfigError(f"vertical oracle: {type(measure).__name__} is not a cross-party measure "
                              "(trust, released_variance, answer)")
        if len(partition) < 2:
            raise ConfigError("vertical oracle: needs at least two parties; one party's data is answered centrally")
        missing = [p for p in partition.names if p not in views or p not in rngs]
        if missing:
            raise ConfigError(f"vertical oracle: no view or stream for parties {missing}")
        if not 0 < group_share < 1:
            raise ConfigError(f"vertical oracle: group_share must be in (0, 1), got {group_share}")
        n = {views[p].n for p in partition.names}
        if len(n) != 1:
            raise ConfigError(f"vertical oracle: the parties' views are not row-aligned (row counts {sorted(n)})")
        self.partition, self.cross_measure, self.ledger = partition, measure, ledger
        self.views = {p: views[p].project(a.attributes) for p, a in zip(partition.names, partition)}
        self.rngs = dict(rngs)
        self.measure_name = measure_name or type(measure).__name__
        self.group_share = group_share
        self.owner = {a: p.name for p in partition for a in p.attributes}
        dom = None
        for p in partition.names:
            dom = self.views[p].domain if dom is None else dom.merge(self.views[p].domain)
        self.domain: Domain = dom
        self._party = {p: PartyOracle(v, ledger, p) for p, v in self.views.items()}   # the central code, per party
        self.answered: list[Measurement] = []     # cross-party answers (public once released): select scores by them
        self.party_cpu = {p: 0.0 for p in partition.names}   # CPU s of each party's own steps (not the protocol's)

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

    # -- measure ----------------------------------------------------------------------------------
    def measure(self, attributes: Sequence[str], pay: Pay, rng: np.random.Generator,
                sigma: float | None = None, bins: Bins = None) -> Measurement:
        attributes = tuple(self.domain.check(attributes))
        if not attributes:   # the record count (a 0-way marginal): every party holds every row; the first answers
            first = self.partition.names[0]
            return self._party[first].measure((), pay, self.rngs[first], sigma, bins)
        parties = self.parties_of(attributes)
        if len(parties) == 1:   # at its party, with the central oracle's code and the party's stream
            c0 = time.process_time()
            try:
                return self._party[parties[0]].measure(attributes, pay, self.rngs[parties[0]], sigma, bins)
            finally:
                self.party_cpu[parties[0]] += time.process_time() - c0
        return self.measure_cross(attributes, pay, sigma, bins)

    def measure_many(self, queries: Sequence[Sequence[str]], pays: Sequence[Pay], rng: np.random.Generator,
                     sigma: float | None = None, bins: Sequence[Bins] | None = None) -> list[Measurement]:
        """`measure` for each query, in order; the cross-party ones as one protocol stage (one run per pair of
        parties and encrypting side, so a row is encrypted once for all of them). All checked before any spend."""
        bins = list(bins) if bins is not None else [None] * len(queries)
        if not len(queries) == len(pays) == len(bins):
            raise ConfigError("measure_many: needs one payment and one bins entry per query")
        routes = [self.parties_of(q) for q in queries]
        cross = [i for i, r in enumerate(routes) if len(r) == 2]
        prepared = [self._prepare_cross(queries[i], pays[i], sigma, bins[i]) for i in cross]
        out: dict[int, Measurement] = {}
        for i, r in enumerate(routes):
            if len(r) == 1:
                out[i] = self.measure(queries[i], pays[i], rng, sigma, bins[i])
        by_sigma: dict[float, list[int]] = {}
        for k, (_, _, s, _) in enumerate(prepared):
            by_sigma.setdefault(s, []).append(k)
        stages = {s: self._stage_views([prepared[k] for k in ks]) for s, ks in by_sigma.items()}   # checked first
        for i, (attrs_, parties, s, _) in zip(cross, prepared):
            _spend(pays[i], self.ledger, self._table_cost(pays[i], s),
                   f"measure {list(attrs_)} across {' and '.join(parties)}")
        for s, ks in by_sigma.items():
            for k, m in zip(ks, self._answer([prepared[k] for k in ks], s, [bins[cross[k]] for k in ks], stages[s])):
                out[cross[k]] = m
        return [out[i] for i in range(len(queries))]

    def measure_cross(self, attributes: Sequence[str], pay: Pay, sigma: float | None = None,
                      bins: Bins = None) -> Measurement:
        """A marginal over exactly two parties, through the cross-party measure (refused otherwise, unspent)."""
        attributes, parties, sigma, views = self._prepare_cross(attributes, pay, sigma, bins)
        _spend(pay, self.ledger, self._table_cost(pay, sigma),
               f"measure {list(attributes)} across {parties[0]} and {parties[1]}")
        return self._answer([(attributes, parties, sigma, views)], sigma, [bins], views)[0]

    def _prepare_cross(self, attributes: Sequence[str], pay: Pay, sigma: float | None, bins: Bins):
        """Checks (nothing spent) and each party's coarsened columns: (attributes, parties, σ, views)."""
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
        p, q = parties
        left = tuple(a for a in attributes if self.owner[a] == p)
        right = tuple(a for a in attributes if self.owner[a] == q)
        c0 = time.process_time()
        views = {p: _coarsen(self.views[p], left, bins)}
        c1 = time.process_time()
        views[q] = _coarsen(self.views[q], right, bins)
        self.party_cpu[p] += c1 - c0
        self.party_cpu[q] += time.process_time() - c1
        return attributes, parties, sigma, views

    def _table_cost(self, pay: Pay, sigma: float) -> float:
        """What one cross-party table at σ costs: a planned charge's own ρ (σ was derived from it, and
        `_prepare_cross` checked that they agree), else what the measure says (a filter draw)."""
        return float(pay.cost.rho) if isinstance(pay, Charge) else self.cross_measure.rho_per_table(sigma)

    @staticmethod
    def _stage_views(prepared: list) -> dict[str, Dataset]:
        """A party taking part in several queries of a stage brings one table of their (coarsened) columns."""
        views: dict[str, Dataset] = {}
        for _, _, _, v in prepared:
            for party, d in v.items():
                views[party] = d if party not in views else _union(views[party], d)
        return views

    def _answer(self, prepared: list, sigma: float, bins: list[Bins], views: dict[str, Dataset]) -> list[Measurement]:
        """One call of the cross-party measure for prepared (already paid) queries of one σ."""
        queries = [(tuple(v[ps[0]].domain.attributes), tuple(v[ps[1]].domain.attributes))
                   for _, ps, _, v in prepared]
        answers = self.cross_measure.answer(views, queries, sigma, self.ledger.noise,
                                            {p: self.rngs[p] for p in views})
        out = []
        for (attributes, (p, q), _, _), b, (got, table, variance) in zip(prepared, bins, answers):
            got = tuple(got)
            if sorted(got) != sorted(attributes) or not variance > 0:
                raise ConfigError(f"{self.measure_name}: answered {list(got)} (variance {variance}) for "
                                  f"{list(attributes)}")
            table = np.transpose(np.asarray(table, float), [got.index(a) for a in attributes])
            m = Measurement(attributes, table, math.sqrt(variance), b)
            self.answered.append(m)
            self.ledger.cross_party.append({
                "attributes": list(attributes), "parties": [p, q], "measure": self.measure_name,
                "trust": self.cross_measure.trust, "rho": self.cross_measure.rho_per_table(sigma),
                "released_variance": float(variance), **({"binned": sorted(b)} if b else {})})
            out.append(m)
        return out

    # -- select -----------------------------------------------------------------------------------
    def _noisy_score(self, cand: tuple[str, ...], bins: Bins, estimate: np.ndarray) -> float | None:
        """An estimate of ‖x − e‖₁ from the least noisy answer y that holds `cand` (on the same bins): per cell
        √max((y − e)² − v, 0), v the noise variance (|x − e| where it dominates the noise, small where the noise
        dominates; |y − e| would add ~0.8σ per cell). A two-way residual is first double-centred (the margins are
        measured already; a pair's dependence lives in its interaction), which removes noise: v (1 − 1/r)(1 − 1/c)."""
        best = None
        for m in self.answered:
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
        if best is None:
            return None
        y, std, maps = best
        e = np.asarray(estimate, float).reshape(tuple(len(mp) for mp in maps))
        for axis, mp in enumerate(maps):   # the estimate on the answer's (coarser) bins
            e = bin_sum(e, axis, mp)
        r = y - e
        v = std * std
        if r.ndim == 2:
            r = r - r.mean(axis=0, keepdims=True) - r.mean(axis=1, keepdims=True) + r.mean()
            v *= (1 - 1 / r.shape[0]) * (1 - 1 / r.shape[1])
        return float(np.sqrt(np.maximum(r * r - v, 0.0)).sum())

    def select(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray],
               weights: Sequence[float], offsets: Sequence[float], epsilon: float, pay: Pay,
               rng: np.random.Generator, bins: Sequence[Bins] | None = None) -> int:
        w = check_select(candidates, estimates, weights, offsets, epsilon)
        off = np.asarray(offsets, float)
        bins = list(bins) if bins is not None else [None] * len(candidates)
        routes = [self.parties_of(c) for c in candidates]
        cross = {}   # candidate index -> score from released answers (public)
        for i, (c, r) in enumerate(zip(candidates, routes)):
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
        rho_round = epsilon * epsilon / 8.0
        _spend(pay, self.ledger, rho_round, f"select among {len(candidates)} marginals")
        if not groups:   # every candidate crosses parties: the choice is post-processing of released answers
            return max(cross, key=lambda i: (cross[i], -i))
        exact = {p: self._scores(p, idx, candidates, estimates, w, off, bins) for p, idx in groups.items()}
        if len(groups) == 1 and not cross:   # one party holds every candidate: the central mechanism, there
            (p, idx), = groups.items()
            return idx[self._em(p, exact[p], w[idx], epsilon)]
        rho_g = self.group_share * rho_round
        eps_em = math.sqrt(8 * (rho_round - rho_g))
        parties = list(groups)
        best = np.array([exact[p].max() for p in parties])
        sens = math.sqrt(sum(float(w[groups[p]].max()) ** 2 for p in parties))
        if self.ledger.noise == "secure":
            noisy = discrete_gaussian(best, rho_g, sens)
        else:   # each party adds its share of the vector's noise from its own stream
            s_g = sens / math.sqrt(2 * rho_g)
            noisy = np.array([b + self.rngs[p].normal(0.0, s_g) for b, p in zip(best, parties)])
        top = int(np.argmax(noisy))
        if cross and max(cross.values()) > noisy[top]:
            return max(cross, key=lambda i: (cross[i], -i))
        p = parties[top]
        return groups[p][self._em(p, exact[p], w[groups[p]], eps_em)]

    def _scores(self, party: str, idx: list[int], candidates: Sequence[tuple[str, ...]],
                estimates: Sequence[np.ndarray], w: np.ndarray, off: np.ndarray, bins: list[Bins]) -> np.ndarray:
        """AIM's/MST's scores w (‖x − e‖₁ − offset) of one party's candidates, from its own columns."""
        c0 = time.process_time()
        o = self._party[party]
        exact = [o.exact(tuple(candidates[i]), bins[i]) for i in idx]
        errors = np.array([np.abs(x - np.asarray(estimates[i], float).reshape(x.shape)).sum()
                           for x, i in zip(exact, idx)])
        self.party_cpu[party] += time.process_time() - c0
        return w[idx] * (errors - off[idx])

    def _em(self, party: str, scores: np.ndarray, w: np.ndarray, epsilon: float) -> int:
        """The exponential mechanism at `party` (Gumbel-max; sensitivity max w), noise from its stream."""
        logits = epsilon * (scores - scores.max()) / (2.0 * w.max())
        return int(np.argmax(logits + exponential_noise(logits.shape, self.rngs[party], self.ledger)))

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
        return self._party_vector(pairs, [r[0] for r in routes],
                                  lambda party, i: indif(self.views[party], *pairs[i]),
                                  pay, sigma, sens, f"indif of {len(pairs)} pairs")

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

        def error(party: str, i: int) -> float:
            x = self._party[party].exact(cands[i], Measurement(cands[i], np.zeros(1), 1.0, bins[i]).bins)
            return float(np.abs(x - np.asarray(estimates[i], float).reshape(x.shape)).sum())

        return self._party_vector(cands, [r[0] for r in routes], error, pay, sigma, math.sqrt(len(cands)),
                                  f"l1 errors of {len(cands)} marginals")

    def _party_vector(self, items: Sequence[Any], holders: Sequence[str], compute, pay: Pay, sigma: float | None,
                      sensitivity: float, what: str) -> np.ndarray:
        """A Gaussian vector of L2 `sensitivity` whose entries each party computes and noises from its own
        columns and stream: paid once, before any party reads a row; each entry gets the central σ."""
        sigma, rho = _vector_sigma(pay, sigma, sensitivity, what)
        _spend(pay, self.ledger, rho, what)
        out = np.empty(len(items))
        for party in dict.fromkeys(holders):
            c0 = time.process_time()
            idx = [i for i, h in enumerate(holders) if h == party]
            x = np.array([compute(party, i) for i in idx], float)
            if self.ledger.noise == "secure":
                out[idx] = discrete_gaussian(x, rho, sensitivity)
            else:
                out[idx] = x + self.rngs[party].normal(0.0, sigma, size=x.shape)
            self.party_cpu[party] += time.process_time() - c0
        return out

    def describe(self) -> dict[str, Any]:
        return {"measure": self.measure_name, "trust": self.cross_measure.trust, "parties": list(self.partition.names),
                "cross_party_answers": len(self.answered)}
