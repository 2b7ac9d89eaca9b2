"""`dpsyn`: DPSyn (Li, Chen, Li, Wang; seed 002) — noisy 2-way marginals, consistency, gradual updates.

Measurement. The k chosen 2-way marginals are measured together as one vector. One person
contributes at most θ = max_records_per_individual records, each adding 1 to one cell of every
marginal, so the vector's L2 sensitivity is θ·√k and its L1 sensitivity θ·k.
  * Gaussian: σ = θ·√(k / (2ρ)) per cell is ρ-zCDP (Bun & Steinke Prop. 1.6) — the same as
    splitting ρ evenly over k marginals (seed, Theorem 4, with the tighter CKS conversion of ρ).
  * Laplace: b = θ·k/ε per cell is ε-DP.
  `noise = "auto"` takes the one with the smaller per-cell variance (σ² vs 2b²), as the paper does.
n̂ is the inverse-variance weighted mean of the noisy marginals' totals (the paper averages them;
weighting by 1/cells is the minimum-variance version of the same post-processing).

Selection for many attributes (PrivSyn's DenseMarg, when d > all_pairs_limit): a `selection_fraction`
of the budget measures the dependence InDif(a,b) = Σ |n_xy − n_x·n_y/n| of every pair. Under
add/remove of one record, n_ab changes by 1 and the n_x·n_y/n terms move by at most 1 in each of
four groups of cells ((a,b); (a,·); (·,b); the rest), so InDif's sensitivity is ≤ 5θ (PrivSyn quotes 4 for
its neighbouring notion; we use the bound we can prove for add/remove). Pairs are then added greedily
while the estimated total error (noise error of the selected + dependence missed by the rest) falls.

Everything after measurement is post-processing: consistency (consistency.py), records (records.py).
With `vertical = { measure = "he", trust = "none" }` the pipeline answers on a VerticalOracle (vertisynth/vertical):
a cross-party pair is measured through the cross-party measure at the same ρ as any other pair (its answer's own
variance goes into consistency). The greedy selection cannot read a cross-party pair's InDif, so `probe` of the
selection budget (default: the cross-party pairs' share of all pairs) measures each cross-party pair once on
coarse bins and scores it from that noisy table; the InDif vector covers the pairs within one party
(docs/vertical.md).
Every data access goes through a MarginalOracle (`fit_oracle`; `fit` joins the parties' columns for the central
one), except Laplace noise or several records per person, which no oracle answers: `fit` measures those directly.
"""
from __future__ import annotations

import itertools
import math
import time

import attrs
from typing import Any

import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.factor import Factor
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import MarginalQuery, MeasuresMarginals, PlanContext, Synthesizer, VerticalData
from vertisynth.core.mechanisms import gaussian_mechanism, laplace_mechanism
from vertisynth.core.privacy import Charge, PrivacyLedger, PureDP, ZCDP

from vertisynth.pgm.oracle import CentralOracle, MarginalOracle, ZCDPFilter
from vertisynth.pgm.scores import INDIF_SENSITIVITY, indif
from vertisynth.vertical import cross_pairs, owners, VerticalConfig, VerticalOracle
from vertisynth.vertical.probes import dependence, measure_probes, width_bins
from .consistency import make_consistent
from .records import synthesize_records

STAGE = "synthesizer"


@attrs.frozen
class DPSynConfig:
    max_records_per_individual: int = 1
    noise: str = "auto"  # auto | gaussian | laplace
    selection: str = "auto"  # auto (greedy when d > all_pairs_limit) | all | greedy
    all_pairs_limit: int = 20
    selection_fraction: float = 0.1
    consistency_rounds: int = 10
    rounds: int = 30
    alpha: float = 0.5
    decay: float = 0.9
    duplicate: float = 0.5
    vertical: VerticalConfig | None = None   # run across parties (docs/vertical.md); None: central

    def __attrs_post_init__(self) -> None:
        if self.max_records_per_individual < 1:
            raise ConfigError("dpsyn: max_records_per_individual must be >= 1")
        if self.noise not in ("auto", "gaussian", "laplace"):
            raise ConfigError(f"dpsyn: noise must be 'auto', 'gaussian' or 'laplace', got {self.noise!r}")
        if self.selection not in ("auto", "all", "greedy"):
            raise ConfigError(f"dpsyn: selection must be 'auto', 'all' or 'greedy', got {self.selection!r}")
        if not 0 < self.selection_fraction < 1:
            raise ConfigError("dpsyn: selection_fraction must be in (0, 1)")
        if not 0 < self.alpha <= 1 or not 0 < self.decay <= 1 or not 0 <= self.duplicate <= 1:
            raise ConfigError("dpsyn: alpha and decay must be in (0, 1], duplicate in [0, 1]")
        if self.rounds < 1 or self.consistency_rounds < 1:
            raise ConfigError("dpsyn: rounds and consistency_rounds must be >= 1")


def _measure_by_sigma(oracle: MarginalOracle, pairs: list[tuple[str, str]], sigmas: list[float], filt: ZCDPFilter,
                      rng: np.random.Generator) -> list[Any]:
    """The chosen pairs (independent of each other's answers) asked in one `measure_many` per σ, answers in the
    pairs' order: on a vertical oracle the cross-party ones of one σ are one protocol stage (a party's rows
    encrypted once for all of them), not one stage each. They are unbinned, so `_check_stage` (one table of a
    party's columns per stage) never splits them: one stage per σ, and the cross-party pairs share one σ."""
    out: list[Any] = [None] * len(pairs)
    for s in dict.fromkeys(sigmas):
        idx = [i for i, x in enumerate(sigmas) if x == s]
        for i, m in zip(idx, oracle.measure_many([pairs[i] for i in idx], [filt] * len(idx), rng, s)):
            out[i] = m
    return out


class _ScaledScores:
    """The direct path's InDif scores (Laplace noise, or θ records per person: sensitivity 5θ per pair), with the
    oracle's `indif` signature so `_select` has one body."""

    def __init__(self, table: Dataset, ledger: PrivacyLedger, theta: int, noisy) -> None:
        self.table, self.ledger, self.theta, self.noisy = table, ledger, theta, noisy

    def indif(self, pairs, pay, rng):
        m = len(pairs)
        sens = INDIF_SENSITIVITY * self.theta
        scores = np.array([indif(self.table, a, b) for a, b in pairs])
        return self.noisy(scores, pay, sens * math.sqrt(m), sens * m, self.ledger, rng)[0]


class DPSynSynthesizer(Synthesizer, MeasuresMarginals):
    _marginals: Any = None   # set by fit

    def __init__(self, config: DPSynConfig | None = None) -> None:
        super().__init__(config or DPSynConfig())
        self._timings: dict[str, float] = {}

    # -- plan ---------------------------------------------------------------------------------
    def plan(self, ctx: PlanContext) -> list[Charge]:
        c = self.config
        d = len(ctx.domain)
        if d < 2:
            raise ConfigError("dpsyn needs at least two attributes")
        self._domain = ctx.domain
        pairs = list(itertools.combinations(ctx.domain.attributes, 2))
        self._pairs = pairs
        v = c.vertical
        owner = owners("dpsyn", v, ctx.partition)
        self._cross = []
        if v is not None:
            if c.noise == "laplace" or ctx.budget.delta <= 0 or c.max_records_per_individual != 1:
                raise ConfigError("dpsyn: a vertical run measures with Gaussian noise, one record per person (give "
                                  "the budget delta > 0, noise = 'gaussian' or 'auto', max_records_per_individual = 1)")
            self._cross = cross_pairs(ctx.domain.attributes, owner)
        self._greedy = c.selection == "greedy" or (c.selection == "auto" and d > c.all_pairs_limit)
        gaussian_ok = ctx.budget.delta > 0
        theta = c.max_records_per_individual
        if c.noise == "gaussian" and not gaussian_ok:
            raise ConfigError("dpsyn: Gaussian noise needs budget delta > 0")
        if c.noise == "laplace" or not gaussian_ok:
            self._noise = "laplace"
        elif c.noise == "gaussian" or self._greedy or v is not None:
            self._noise = "gaussian"
        else:  # auto with all pairs: compare per-cell variances for k = all pairs
            k = len(pairs)
            var_g = theta**2 * k / (2 * ctx.rho)
            var_l = 2 * (theta * k / ctx.epsilon) ** 2
            self._noise = "gaussian" if var_g <= var_l else "laplace"
        total = ctx.rho if self._noise == "gaussian" else ctx.epsilon
        sel = total * c.selection_fraction if self._greedy else 0.0
        self._select_budget, self._measure_budget = sel, total - sel
        cost = ZCDP if self._noise == "gaussian" else PureDP
        # kept: the mechanisms spend these very charges
        self._probe_charges: list[Charge] = []
        self._within = pairs
        self._free = bool(ctx.cross_release)   # cross-party pairs answered from a release: no probe charges
        if self._greedy and self._cross and self._free:
            self._within = [p for p in pairs if p not in set(self._cross)]
            sel = sel if self._within else 0.0
        elif self._greedy and self._cross:   # cross-party pairs are scored from probes, the others by InDif
            self._within = [p for p in pairs if p not in set(self._cross)]
            share = 1.0 if not self._within else (len(self._cross) / len(pairs) if v.probe is None else v.probe)
            self._probe_charges = [Charge(STAGE, "gaussian_cross_probe", ZCDP(sel * share / len(self._cross)),
                                          note="every cross-party pair once, for the selection's scores")
                                   for _ in self._cross]
            sel *= 1 - share
        self._select_charge = (Charge(STAGE, f"{self._noise}_indif_scores", cost(sel), None,
                                      f"{len(self._within)} pair scores") if self._greedy and sel > 0 else None)
        self._measure_charge = Charge(STAGE, f"{self._noise}_2way_marginals", cost(self._measure_budget), None,
                                      "all chosen 2-way marginals as one vector")
        return [c for c in (self._select_charge, *self._probe_charges, self._measure_charge) if c is not None]

    def vertical_request(self) -> VerticalConfig | None:
        return self.config.vertical

    def _pair_scores(self, oracle: MarginalOracle, rng: np.random.Generator) -> np.ndarray:
        """Noisy InDif of every pair: one Gaussian vector over the pairs within one party and, on a vertical
        oracle, each cross-party pair from its probe (a noisy table on at most probe_bins equal-width bins per
        attribute: public bins, no data read to choose them): Σ √max(r² − v', 0) of the residual r = y − y_a y_b / ŷ
        (v' its noise variance after centring), InDif's estimate where the dependence beats the noise."""
        if not (self._cross and isinstance(oracle, VerticalOracle)):
            return oracle.indif(self._pairs, self._select_charge, rng)
        out = np.zeros(len(self._pairs))
        index = {p: i for i, p in enumerate(self._pairs)}
        if self._select_charge is not None:
            out[[index[p] for p in self._within]] = oracle.indif(self._within, self._select_charge, rng)
        probes = measure_probes(oracle, self._cross, self._probe_charges or [None] * len(self._cross), rng,
                                {} if self._free else width_bins(self._domain, self.config.vertical.probe_bins))
        for p, m in zip(self._cross, probes):
            out[index[p]] = dependence(m)
        return out

    # -- fit ----------------------------------------------------------------------------------
    def _noisy(self, values: np.ndarray, charge: Charge, l2: float, l1: float,
               ledger: PrivacyLedger, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        if self._noise == "gaussian":
            out = gaussian_mechanism(values, charge, rng, ledger, l2)
            return out, l2**2 / (2 * charge.cost.rho)
        out = laplace_mechanism(values, charge, rng, ledger, l1)
        return out, 2 * (l1 / charge.cost.epsilon) ** 2

    def _select(self, oracle: MarginalOracle, rng: np.random.Generator) -> list[tuple[str, str]]:
        """DenseMarg: the noisy InDif of every pair (one Gaussian vector, asked of the oracle), then a greedy
        choice that lowers noise error + missed dependence (post-processing)."""
        theta = self.config.max_records_per_individual
        m = len(self._pairs)
        noisy = self._pair_scores(oracle, rng)
        cells = np.array([self._domain.size(a) * self._domain.size(b) for a, b in self._pairs], float)

        def per_cell_error(k: int) -> float:  # expected |noise| per cell with k marginals measured
            if self._noise == "gaussian":
                return math.sqrt(2 / math.pi) * theta * math.sqrt(k / (2 * self._measure_budget))
            return theta * k / self._measure_budget

        chosen = np.zeros(m, bool)
        dep_total = np.clip(noisy, 0, None).sum()
        current = dep_total
        for k in range(1, m + 1):
            sel_cells = cells[chosen].sum()
            err = per_cell_error(k) * (sel_cells + cells) + (dep_total - np.clip(noisy, 0, None)[chosen].sum()
                                                             - np.clip(noisy, 0, None))
            err[chosen] = np.inf
            best = int(np.argmin(err))
            if err[best] >= current:
                break
            chosen[best] = True
            current = err[best]
        covered = {a for (a, b), c in zip(self._pairs, chosen) if c for a in (a, b)}
        for attr in self._domain.attributes:  # every attribute needs one marginal
            if attr not in covered:
                idx = [i for i, p in enumerate(self._pairs) if attr in p]
                best = max(idx, key=lambda i: noisy[i])
                chosen[best] = True
                covered.update(self._pairs[best])
        return [p for p, c in zip(self._pairs, chosen) if c]

    def _check_oracle(self) -> None:
        """What a MarginalOracle can answer: Gaussian noise, one record per person (its sensitivity is 1)."""
        if self._noise != "gaussian" or self.config.max_records_per_individual != 1:
            raise ConfigError("dpsyn: an oracle answers Gaussian measurements of one record per person; this plan "
                              f"has noise {self._noise!r} and max_records_per_individual "
                              f"{self.config.max_records_per_individual} (give the budget delta > 0, noise = "
                              "'gaussian', max_records_per_individual = 1)")

    def measure(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> np.ndarray:
        """The DP part: (selection and) the noisy vector of all chosen 2-way marginals, spending the plan."""
        table = data.joined().project(self._domain.attributes)
        if self._noise == "gaussian" and self.config.max_records_per_individual == 1:
            return self.measure_oracle(CentralOracle(table, ledger), rng)
        # Laplace noise or several records per person: the one direct path (no oracle answers these)
        t0 = time.perf_counter()
        theta = self.config.max_records_per_individual
        pairs = self._select(_ScaledScores(table, ledger, theta, self._noisy), rng) if self._greedy else self._pairs
        t1 = time.perf_counter()
        k = len(pairs)
        self._exact_shapes = [table.domain.project(list(p)) for p in pairs]
        flat = np.concatenate([table.counts(list(p)).values.ravel() for p in pairs])
        noisy, self._var = self._noisy(flat, self._measure_charge, theta * math.sqrt(k), theta * k, ledger, rng)
        self._vars = None
        self._selected = pairs
        self.noisy_vector = noisy  # the DP measurement itself (kept for inspection and audits)
        self._timings = {"select": t1 - t0, "measure": time.perf_counter() - t1}
        return noisy

    def measure_oracle(self, oracle: MarginalOracle, rng: np.random.Generator) -> np.ndarray:
        """`measure` with every data access through `oracle`: the k chosen pairs measured each at the σ of the joint
        vector (σ = √(k/(2ρ)) per cell, the same ρ-zCDP release), drawn from the planned charge as a filter; on a
        vertical oracle together (`_measure_by_sigma`: the cross-party ones one protocol stage)."""
        self._check_oracle()
        t0 = time.perf_counter()
        pairs = self._select(oracle, rng) if self._greedy else self._pairs
        t1 = time.perf_counter()
        k = len(pairs)
        rho = self._measure_charge.cost.rho
        vertical = isinstance(oracle, VerticalOracle)
        free = vertical and oracle.releases   # cross-party pairs from the release: ρ split among the others
        if free:
            k = max(sum(not oracle.crosses(p) for p in pairs), 1)
        sigma = math.sqrt(k / (2 * rho))
        filt = ZCDPFilter(self._measure_charge, oracle.ledger)
        if not vertical:   # the central path as it was: one draw per pair, in order
            meas = [oracle.measure(p, filt, rng, sigma) for p in pairs]
        else:   # a cross-party pair costs the same ρ/k; its σ is what the cross-party measure gives for it
            sigmas = [oracle.cross_measure.sigma_for_rho(rho / k) if not free and oracle.crosses(p) else sigma
                      for p in pairs]
            meas = _measure_by_sigma(oracle, pairs, sigmas, filt, rng)
        self._exact_shapes = [self._domain.project(list(p)) for p in pairs]
        self._var = sigma * sigma
        self._vars = [m.std ** 2 for m in meas]   # a cross-party answer carries its own variance (2σ² under trust none)
        self._selected = pairs
        self.noisy_vector = np.concatenate([m.values.ravel() for m in meas])
        self._timings = {"select": t1 - t0, "measure": time.perf_counter() - t1}
        return self.noisy_vector

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        self._post_process(self.measure(data, ledger, rng))

    def fit_oracle(self, oracle: MarginalOracle, rng: np.random.Generator) -> None:
        """DPSyn with every data access through `oracle` (central or vertical)."""
        self._post_process(self.measure_oracle(oracle, rng))

    # -- measurements from elsewhere (horizontal custodians, secure aggregation) --------------------
    def marginal_queries(self, domain: Domain, rho: float) -> list[MarginalQuery]:
        """All 2-way marginals as one Gaussian vector (L2 sensitivity θ·√k), as `measure` does."""
        c = self.config
        if len(domain) < 2:
            raise ConfigError("dpsyn needs at least two attributes")
        if c.noise == "laplace" or c.selection == "greedy" or (c.selection == "auto" and len(domain) > c.all_pairs_limit):
            raise ConfigError("dpsyn: horizontal custodians measure all 2-way marginals with Gaussian noise; set "
                              "noise = 'gaussian' (or 'auto') and selection = 'all' (the greedy selection scores "
                              "need the combined table)")
        pairs = list(itertools.combinations(domain.attributes, 2))
        theta = c.max_records_per_individual
        return [MarginalQuery("dpsyn:2way", pairs, rho, theta * math.sqrt(len(pairs)))]

    def fit_marginals(self, domain: Domain, queries, answers, variances, rng: np.random.Generator) -> None:
        (q,), (noisy,), (var,) = queries, answers, variances
        self._domain, self._noise, self._var = domain, "gaussian", float(var)
        self._vars = None
        self._selected = [tuple(m) for m in q.marginals]
        self._exact_shapes = [domain.project(list(m)) for m in q.marginals]
        self.noisy_vector = np.asarray(noisy, float)
        self._timings = {}
        self._post_process(self.noisy_vector)

    def _post_process(self, noisy: np.ndarray) -> None:
        t2 = time.perf_counter()
        facs, offset = [], 0
        totals, weights = [], []
        var = list(getattr(self, "_vars", None) or [self._var] * len(self._exact_shapes))
        for dom, v in zip(self._exact_shapes, var):
            size = dom.size()
            vals = noisy[offset:offset + size].reshape(dom.shape)
            offset += size
            facs.append(Factor(dom, vals))
            totals.append(vals.sum())
            weights.append(1.0 / (v * size))
        self._n_hat = max(1, int(round(np.average(totals, weights=weights))))
        self._marginals = make_consistent(facs, var, float(self._n_hat), self.config.consistency_rounds)
        self._timings["consistency"] = time.perf_counter() - t2

    # -- sample -------------------------------------------------------------------------------
    def sample(self, n: int | None, rng: np.random.Generator) -> Dataset:
        if self._marginals is None:
            raise DataError("dpsyn: fit() before sample()")
        n = self._n_hat if n is None else int(n)
        t0 = time.perf_counter()
        c = self.config
        codes = synthesize_records(self._domain, self._marginals, n, rng, c.rounds, c.alpha, c.decay,
                                   duplicate=c.duplicate)
        self._timings["records"] = time.perf_counter() - t0
        return Dataset(codes, self._domain)

    @property
    def selected(self) -> list[tuple[str, str]]:
        return list(self._selected)

    def timings(self) -> dict[str, float]:
        return dict(self._timings)
