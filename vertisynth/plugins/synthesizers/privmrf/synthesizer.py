"""`privmrf`: data synthesis via a differentially private Markov random field (seed 003, §2.3).

Phases: attribute graph from noisy R-scores, candidate marginals, initial set, refinement rounds, sampling;
`export()` gives VertiMRF's parties their LocalModel message. The budget split, the usefulness filter (our one
deliberate deviation) and its measurements are in docs/synthesizers/privmrf.md.

With `vertical = { measure = "he", trust = "none" }` every data access goes to a VerticalOracle (vertisynth/vertical)
and two steps read no cross-party marginal (docs/vertical.md, "PrivMRF"): `probe` of the R-score budget and of
each refinement round's measures every cross-party pair once on coarse bins (its R-score read off the released
table), the rest pays the InDif vector of the pairs within one party and the parties' L1 vectors; refinement scores
a cross-party candidate by the largest error of its cross-party pairs read off their probes (post-processing;
under trust none each probe pooled with the marginals measured since that hold its pair, `_pooled_error`; a
second stage where part of the probes' ρ re-asks a quarter of the pairs just before refinement, those its
candidates hold of the largest residual, each pooled with its first answer, `_reprobe`: off by default, not kept,
docs/vertical.md).
Candidates over three parties or more are left out (a cross-party measure answers two); the probes join the last
estimation. With a measure that releases once (`dpfm`, `grr`) there are no probes: every cross-party pair, score and
marginal is read off the release for free, and the plan's charges pay the within-party steps alone (docs/vertical.md,
"Measures that release once").
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Any, ClassVar

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import PlanContext, Synthesizer, VerticalData
from vertisynth.core.mechanisms import gaussian_sigma
from vertisynth.core.noise import discrete_gaussian, party_randomness
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Charge, PrivacyLedger, ZCDP

from vertisynth.pgm import GraphicalModel, build_junction_tree, estimate
from vertisynth.pgm.estimation import bin_query
from vertisynth.pgm.graph import min_fill_cliques
from vertisynth.pgm.oracle import CentralOracle, MarginalOracle
from vertisynth.pgm.scores import INDIF_SENSITIVITY, indif
from vertisynth.vertical import owners, VerticalConfig, VerticalOracle
from vertisynth.vertical.oracle import residual_above_noise
from vertisynth.vertical.probes import (dependence, dependence_std, measure_probes, privmrf_contenders,
                                        pool_answers, privmrf_reprobes, residual_l1, width_bins)

STAGE = "synthesizer"
R_SENSITIVITY = INDIF_SENSITIVITY / 2


@attrs.frozen
class PrivMRFConfig:
    r_score_fraction: float = 0.1
    refine_fraction: float = 0.1
    count_fraction: float = 0.01
    theta: float = 6.0
    max_clique_cells: float = 1e5
    max_model_cells: float = 1e7
    iters: int = 300
    refine_iters: int = 100
    # a stop once the loss left to gain is estimated below fit_tolerance per measured cell (pgm.estimate's atol, as
    # VertiMRF's server fits); 0 (the default): every fit runs its whole budget, iters or refine_iters
    fit_tolerance: float = 0.0
    sampling: str = "round"
    # candidate marginals: subsets of a maximal clique with 2..max_marginal_attrs attributes (the paper's
    # reference code: 6); "triples" restores the earlier pairs-and-triples-only candidates
    max_marginal_attrs: int = 6
    # refinement: at most this many noisy L1 queries per round (the reference code: 400), sampled by weight
    max_queries: int = 400
    # initial marginal set: "sum" (per attribute, the candidate with the largest summed noisy R) or "bayes"
    # (the reference code's greedy Bayesian network inside each clique, parents scored by a CFS ratio)
    initial: str = "sum"
    # which candidates are useful: "theta" (the paper: the average cell count n̂/Π u_i is at least θ·g) or
    # "signal" (θ-useful, or a pair whose noisy R-score says measuring it removes more error than its noise adds:
    # 2·(R̂ − signal_z·σ_R) ≥ signal_ratio · cells · g); see the module docstring
    useful: str = "signal"
    signal_ratio: float = 1.0
    # the signal test uses R̂ − signal_z·σ_R (σ_R: the R-scores' noise std), so a pair whose measurement does not
    # pay off rarely passes on noise alone: 0 = the point estimate; √(2 ln m) (≈ 3 for m = 105 pairs) = the universal
    # threshold, no pure-noise pair passes w.h.p. but real ones are lost; see the module docstring
    signal_z: float = 1.0
    # with useful = "signal": a pair of a clique that neither test keeps is offered coarsened (consecutive values
    # merged, data-independent) down to the cells its noisy R-score pays for, instead of not at all
    coarsen: bool = True
    vertical: VerticalConfig | None = None   # run across parties (docs/vertical.md); None: central

    def __attrs_post_init__(self) -> None:
        f = self.r_score_fraction + self.refine_fraction + self.count_fraction
        if min(self.r_score_fraction, self.refine_fraction, self.count_fraction) <= 0 or f >= 1:
            raise ConfigError(f"privmrf: budget fractions must be positive and leave room for marginals (sum {f:.3g})")
        if self.theta <= 0 or self.max_clique_cells < 4 or self.iters < 1 or self.refine_iters < 1:
            raise ConfigError("privmrf: theta must be > 0, max_clique_cells >= 4, iters and refine_iters >= 1")
        if not (isinstance(self.fit_tolerance, (int, float)) and 0 <= self.fit_tolerance < math.inf):
            raise ConfigError(f"privmrf: fit_tolerance must be a number >= 0 (0: run to iters), got {self.fit_tolerance!r}")
        if self.sampling not in ("sample", "round"):
            raise ConfigError(f"privmrf: sampling must be 'sample' or 'round', got {self.sampling!r}")
        if self.initial not in ("sum", "bayes"):
            raise ConfigError(f"privmrf: initial must be 'sum' or 'bayes', got {self.initial!r}")
        if self.useful not in ("theta", "signal"):
            raise ConfigError(f"privmrf: useful must be 'theta' or 'signal', got {self.useful!r}")
        if not self.signal_ratio > 0 or not self.signal_z >= 0:
            raise ConfigError("privmrf: signal_ratio must be > 0 and signal_z >= 0")
        if self.max_marginal_attrs < 2 or self.max_queries < 1:
            raise ConfigError("privmrf: max_marginal_attrs must be >= 2 and max_queries >= 1")
        if self.vertical is not None and self.initial != "sum":
            raise ConfigError("privmrf: params.vertical builds the initial set with initial = 'sum' (the 'bayes' "
                              "set may join three parties in one marginal, which no cross-party measure answers)")


@attrs.frozen(eq=False)
class LocalModel(Message):
    """A fitted PrivMRF model on one party's attributes (VertiMRF Phase 1 message)."""

    kind: ClassVar[str] = "privmrf_local_model"
    domain: Domain = attrs.field(default=None)
    cliques: list[list[str]] = attrs.field(factory=list)
    potentials: dict[str, np.ndarray] = attrs.field(factory=dict)  # str(clique index) -> log-potential
    total: float = 0.0
    edges: list[list[str]] = attrs.field(factory=list)  # the attribute graph
    marginals: list[list[str]] = attrs.field(factory=list)  # the measured marginal set
    marginal_std: list[float] = attrs.field(factory=list)

    def validate(self) -> LocalModel:
        super().validate()
        if not isinstance(self.domain, Domain):
            raise self._fail("domain is missing")
        if len(self.potentials) != len(self.cliques):
            raise self._fail(f"{len(self.cliques)} cliques but {len(self.potentials)} potentials")
        for i, c in enumerate(self.cliques):
            try:
                shape = self.domain.project(c).shape
            except Exception as exc:  # DomainError with the attribute named
                raise self._fail(f"clique {c}: {exc}") from None
            pot = self.potentials.get(str(i))
            if pot is None or pot.shape != shape:
                raise self._fail(f"potential of clique {c} has shape {getattr(pot, 'shape', None)}, expected {shape}")
        if not self.total > 0 or len(self.marginals) != len(self.marginal_std):
            raise self._fail("total must be positive and every marginal needs its noise std")
        return self

    def model(self) -> GraphicalModel:
        """Rebuild the GraphicalModel (server side)."""
        tree = build_junction_tree(self.domain, self.cliques, max_cells=float("inf"))
        if [list(c) for c in tree.cliques] != [list(c) for c in self.cliques]:
            raise self._fail("cliques are not the maximal cliques of their own triangulation")
        return GraphicalModel(tree, [self.potentials[str(i)] for i in range(len(self.cliques))], self.total)


def r_scores(table: Dataset, pairs: list[tuple[str, str]]) -> np.ndarray:
    """R(a, b) = (n/2)·‖P[a,b] − P[a]P[b]‖₁ = ½ InDif(a, b) for every pair."""
    return np.array([0.5 * indif(table, a, b) for a, b in pairs])


class PrivMRFSynthesizer(Synthesizer):
    _model: Any = None   # set by fit

    def __init__(self, config: PrivMRFConfig | None = None) -> None:
        super().__init__(config or PrivMRFConfig())
        self._timings: dict[str, float] = {}

    # -- plan ---------------------------------------------------------------------------------
    def plan(self, ctx: PlanContext) -> list[Charge]:
        owner = owners("privmrf", self.config.vertical, ctx.partition)
        owner = owner if self.config.vertical is not None else None
        # a measure that released once (dpfm, grr) answers every cross-party pair for free: no probes, and no
        # charge planned for a cross-party marginal; the plan's charges pay the within-party steps only
        return self.plan_for(ctx.domain, ctx.rho, owner=owner, free=bool(ctx.cross_release))

    def vertical_request(self) -> VerticalConfig | None:
        return self.config.vertical

    def probes_whole_rows(self) -> bool:
        """Whether its probes leave the whole rows' party's side unbinned (`_vertical_r_scores`; the vertical
        table's `probe_whole_rows`, off by default): then they cost no encryption of their own."""
        return self.config.vertical is not None and self.config.vertical.probe_whole_rows

    def plan_for(self, domain: Domain, rho: float, party: str | None = None,
                 owner: dict[str, str] | None = None, free: bool = False) -> list[Charge]:
        """Charges for a model on `domain` with zCDP budget `rho` (VertiMRF calls this per party); `owner` (each
        attribute's party) plans the vertical twin: cross-party pairs probed, the others scored by InDif. `free`:
        the cross-party pairs and marginals are read off a release (no probes; the R-score and refinement ρ pay
        the within-party vectors alone; the marginal charges pay the within-party marginals)."""
        c = self.config
        d = len(domain)
        if d < 1:
            raise ConfigError("privmrf needs at least one attribute")
        self._domain, self._party = domain, party
        self._pairs = list(itertools.combinations(domain.attributes, 2))
        self._owner = owner
        self._cross = [p for p in self._pairs if owner[p[0]] != owner[p[1]]] if owner else []
        self._within = [p for p in self._pairs if p not in set(self._cross)]
        self._free = bool(free and self._cross)
        self._rounds = min(math.ceil(d / 2), 8) if self._pairs else 0
        self._k_marg = d + (math.ceil(0.8 * d) if self._pairs else 0)
        self._rho_count = rho * c.count_fraction
        self._rho_r = rho * c.r_score_fraction if self._pairs else 0.0
        self._rho_ref_round = rho * c.refine_fraction / self._rounds if self._rounds else 0.0
        used = self._rho_count + self._rho_r + self._rho_ref_round * self._rounds
        self._rho_marg = (rho - used) / self._k_marg
        # vertical: `probe` of the R-score ρ and of each refinement round's ρ measures each cross-party pair once
        # (default: their share of all pairs, which leaves each within-party R-score's σ at its central value):
        # the probes score those pairs in both phases; the rest pays the within-party InDif and L1 vectors
        v = c.vertical
        share = 0.0
        if self._cross and not self._free:
            share = 1.0 if not self._within else (len(self._cross) / len(self._pairs) if v.probe is None else v.probe)
        self._rho_r_within = self._rho_r * (1 - share)
        moved = self._rho_ref_round * share if self._cross else 0.0
        self._rho_ref_round -= moved
        probed = [] if self._free else self._cross
        total = self._rho_r * share + moved * self._rounds
        # trust none: part of the probes' ρ asks the pairs refinement is about to compare again (a second stage,
        # its count from public facts: `privmrf_reprobes`)
        again, moved_again = privmrf_reprobes(len(probed), v.trust if v is not None else None)
        kept = 1 - moved_again
        probe_rho = total * kept / len(probed) if probed else 0.0
        probes = [Charge(STAGE, "gaussian_cross_probe", ZCDP(probe_rho), party,
                         note="every cross-party pair once, for its R-score and refinement's score")
                  for _ in probed]
        reprobes = [Charge(STAGE, "gaussian_cross_reprobe", ZCDP(total * (1 - kept) / again), party,
                           note="the cross-party pairs refinement is about to compare, once more")
                    for _ in range(again)]
        # kept: fit_table spends these very charges
        self._charges = {
            "count": [Charge(STAGE, "gaussian_count", ZCDP(self._rho_count), party)],
            "r_scores": ([Charge(STAGE, "gaussian_r_scores", ZCDP(self._rho_r_within), party)]
                         if self._within and self._rho_r_within > 0 else []),
            "cross_probe": probes,
            "cross_reprobe": reprobes,
            # none when every pair crosses parties (no candidate is asked of a party: the probes score them all)
            "refine": [Charge(STAGE, "gaussian_refine_queries", ZCDP(self._rho_ref_round), party)
                       for _ in range(self._rounds)] if self._rho_ref_round > 0 else [],
            "marginal": [Charge(STAGE, "gaussian_marginal", ZCDP(self._rho_marg), party) for _ in range(self._k_marg)],
        }
        return [c for group in self._charges.values() for c in group]

    # -- phases -------------------------------------------------------------------------------
    def _graph(self, scores: np.ndarray) -> tuple[list[tuple[str, str]], list[tuple[str, ...]]]:
        c = self.config
        dom = self._domain
        edges: list[tuple[str, str]] = []
        cliques = min_fill_cliques(dom, [])
        for k in np.argsort(-scores):
            if scores[k] <= 0:
                break
            trial = edges + [self._pairs[k]]
            tri = min_fill_cliques(dom, trial)
            sizes = [dom.project(q).size() for q in tri]
            if max(sizes) <= c.max_clique_cells and sum(sizes) <= c.max_model_cells:
                edges, cliques = trial, tri
        return edges, cliques

    def _noise_per_cell(self, s: tuple[str, ...] | None = None) -> float:
        """g = σ·√(2/π): the expected absolute Gaussian noise per cell of one marginal measurement (of `s`: a
        cross-party answer's std is the measure's, e.g. √2·σ under trust none)."""
        g = gaussian_sigma(self._rho_marg) * math.sqrt(2 / math.pi)
        if s is not None and self._free and self._crosses(s):   # read off a release: its answers' noise (the
            # largest RMS std of the set's cross-party pairs, a proxy for the set's own: no larger set is read
            # off the release just to be ranked)
            sds = [self._probed[frozenset(p)][0].std for p in itertools.combinations(s, 2)
                   if frozenset(p) in self._probed]
            return max(sds) * math.sqrt(2 / math.pi) if sds else g
        return g * self._cross_noise if s is not None and self._crosses(s) else g

    def _useful_pair(self, pair: tuple[str, ...], cells: float, limit: float,
                     score: dict[tuple[str, str], float] | None) -> bool:
        """Whether a pair beyond the θ-useful cell `limit` is still worth measuring (`useful = "signal"`).

        R(a, b) = (n/2)·‖P[a,b] − P[a]P[b]‖₁, so 2R is the L1 error (in counts) of a model that has no
        information linking a and b, and the expected L1 error a Gaussian measurement leaves is cells·g. The pair
        is kept when its noisy R-score (already released in Phase 1: post-processing, no budget) says measuring
        removes more error than it adds, 2·(R̂ − z·σ_R) ≥ signal_ratio·cells·g, where z·σ_R
        (`_signal_margin`) guards against a score passing on its noise (`signal_z`). Only pairs: for larger sets the pairwise
        scores do not tell what the set adds beyond its subsets, so they keep the paper's θ test."""
        if cells <= limit:
            return True
        if self.config.useful != "signal" or score is None or len(pair) != 2:
            return False
        r = score.get(pair, score.get(pair[::-1], 0.0)) - self._signal_margin(pair)
        return 2.0 * r >= self.config.signal_ratio * cells * self._noise_per_cell(pair)

    def _coarse_pair(self, pair: tuple[str, ...], limit: float,
                     score: dict[tuple[str, str], float] | None) -> dict[str, np.ndarray] | None:
        """Bins for a pair that neither usefulness test keeps (`coarsen`, with `useful = "signal"`): consecutive
        values merged (the larger attribute first, then both) until the pair has at most max(θ limit, the cells
        its noisy R-score pays for: 2·(R̂ − z·σ_R)/(signal_ratio·g)) cells; None when R̂ − z·σ_R ≤ 0 or fewer
        than 2 × 2 cells fit. The bins depend on the domain, the plan and released R̂ only (post-processing)."""
        c = self.config
        if not c.coarsen or c.useful != "signal" or score is None:
            return None
        r = score.get(pair, score.get(pair[::-1], 0.0)) - self._signal_margin(pair)
        if r <= 0:
            return None
        cells = max(limit, 2.0 * r / (c.signal_ratio * self._noise_per_cell(pair)))
        a, b = pair
        ua, ub = self._domain.size(a), self._domain.size(b)
        small = min(ua, ub)
        if 2 * small <= cells:
            k_small, k_large = small, int(cells // small)
        else:
            k_small = k_large = int(math.isqrt(int(cells)))
        if k_small < 2 or k_large < 2:
            return None
        ka, kb = (k_large, k_small) if ua >= ub else (k_small, k_large)
        return {x: np.arange(u) * k // u for x, u, k in ((a, ua, ka), (b, ub, kb)) if k < u}

    def _signal_margin(self, pair: tuple[str, ...] | None = None) -> float:
        """What the signal test takes off a noisy R-score first: signal_z·σ_R, σ_R the std of the Phase-1 noise
        on each R-score (public: it follows from the plan; for a probed cross-party pair, from its released
        probe's shape and variance)."""
        if self._cross:
            if pair is not None and frozenset(pair) in self._probed:
                return self.config.signal_z * self._probed[frozenset(pair)][1]
            m = len(self._within)
            return (self.config.signal_z * gaussian_sigma(self._rho_r_within, R_SENSITIVITY * math.sqrt(m))
                    if m and self._rho_r_within > 0 else 0.0)
        m = len(self._pairs)
        return self.config.signal_z * gaussian_sigma(self._rho_r, R_SENSITIVITY * math.sqrt(m)) if m else 0.0

    def _vertical_r_scores(self, oracle: MarginalOracle, rng: np.random.Generator) -> np.ndarray:
        """Noisy R-scores when the plan has cross-party pairs: the within-party pairs' from the oracle's InDif
        vector (at their parties), each cross-party pair's read off its probe (a noisy table on at most
        probe_bins equal-width bins per attribute), R̂ = ½ dependence: post-processing of a released answer."""
        out = np.zeros(len(self._pairs))
        index = {p: i for i, p in enumerate(self._pairs)}
        if self._charges["r_scores"]:
            out[[index[p] for p in self._within]] = oracle.indif(self._within, self._charges["r_scores"][0], rng) / 2
        if self._free:   # each cross-party pair read off the release at full resolution (free); its R̂ is
            # already a lower bound (`release_score`: PRIVMRF_RELEASE_Z null stds below the estimate,
            # vertical/probes.py), so no margin is added
            probes = [oracle.measure(p, None, rng) for p in self._cross]
        else:
            probes = measure_probes(oracle, self._cross, self._charges["cross_probe"], rng,
                                    width_bins(self._domain, self.config.vertical.probe_bins),
                                    whole=self.probes_whole_rows())
        for p, m in zip(self._cross, probes):
            out[index[p]] = dependence(m) / 2
            self._probed[frozenset(p)] = (m, 0.0 if self._free else dependence_std(m) / 2)
        return out

    def _crosses(self, s: tuple[str, ...]) -> bool:
        return bool(self._cross) and len({self._owner[a] for a in s}) > 1

    def _cross_error(self, s: tuple[str, ...], model: GraphicalModel, pair: dict[frozenset[str], float],
                     meas: list | None = None) -> float:
        """A lower bound on ‖x_s − e_s‖₁ of a cross-party set from released answers: the largest error of its
        cross-party pairs read off their probes (a marginal's L1 error is at least its sub-marginals'); with
        `meas` (trust none, `_pools`), each probe pooled with the measured marginals that hold its pair."""
        best = 0.0
        for p in itertools.combinations(s, 2):
            key = frozenset(p)
            if key not in self._probed:
                continue
            if key not in pair:
                m = self._probed[key][0]
                e = model.marginal(m.attributes).values
                pair[key] = residual_l1(m, e) if meas is None else self._pooled_error(m, e, meas)
            best = max(best, pair[key])
        return best

    def _pooled_error(self, m: Any, estimate: np.ndarray, meas: list) -> float:
        """`residual_l1` of the probe `m` pooled, cell by cell by inverse variance, with every measured marginal at
        full resolution that holds its pair (summed into the probe's bins: a cell's variance is the marginal's σ²
        times the cells summed into it). Post-processing of released answers. Under trust none a probe's released
        variance is twice trust server's, and a pair already measured (at ~10x a probe's ρ) kept its probe's noise
        in refinement's scores, so its sets looked wrong to a model that fits it (docs/vertical.md, "privmrf under
        trust = none, the worst cells")."""
        attrs_ = m.attributes
        w = np.full(m.values.shape, 1.0 / m.std ** 2)
        num = w * m.values
        for x in meas:
            if x.bins or x.variance is not None or not set(attrs_) <= set(x.attributes):
                continue
            other = tuple(i for i, a in enumerate(x.attributes) if a not in attrs_)
            t = x.values.sum(axis=other) if other else x.values
            kept = [a for a in x.attributes if a in attrs_]
            t = np.transpose(t, [kept.index(a) for a in attrs_])
            k = math.prod(x.values.shape[i] for i in other)   # cells summed per full-resolution cell of the pair
            cells = bin_query(np.ones(t.shape), attrs_, m.bins)
            wx = 1.0 / (x.std ** 2 * k * cells)
            num += wx * bin_query(t, attrs_, m.bins)
            w = w + wx
        r = num / w - bin_query(np.asarray(estimate, float), attrs_, m.bins)
        return residual_above_noise(r, 1.0 / w)

    def _reprobe(self, oracle: MarginalOracle, weight: dict[tuple[str, ...], float], model: GraphicalModel,
                 meas: list, rng: np.random.Generator) -> None:
        """Trust none, before refinement: the planned second stage asks again the cross-party pairs that refinement
        is about to compare (`privmrf_contenders`: those the candidates hold, of the largest residual from the initial
        model read off their probes pooled with the marginals measured so far), on the first probes' bins, and
        pools each pair's two answers (`VerticalOracle.pool`). Which pairs follows from released answers only."""
        charges = self._charges["cross_reprobe"]
        wanted = {frozenset(p) for s in weight for p in itertools.combinations(s, 2)} & set(self._probed)
        # a pair's score is a model marginal (inference): only the contenders' unless too few to fill the stage
        # (zoo wide: 600 cross-party pairs, ~35 s CPU for all); a pair left unscored ranks after every scored one
        ask = (lambda p: frozenset(p) in wanted) if len(wanted) >= len(charges) else (lambda p: True)
        scores = [self._pooled_error(self._probed[frozenset(p)][0],
                                     model.marginal(self._probed[frozenset(p)][0].attributes).values, meas)
                  if ask(p) else -math.inf for p in self._cross]
        top = [self._cross[i] for i in privmrf_contenders(self._cross, scores, wanted, len(charges))]
        # the first answers' bins (an attribute the first stage left unbinned stays so: `probe_whole_rows`)
        bins = {a: b for p in top for a, b in (self._probed[frozenset(p)][0].bins or {}).items()}
        second = measure_probes(oracle, top, charges, rng, bins)
        for p, m in zip(top, second):
            first, spread = self._probed[frozenset(p)]
            self._probed[frozenset(p)] = (pool_answers(oracle, [first, m]), spread)

    def _refine_errors(self, oracle: MarginalOracle, remaining: list[tuple[str, ...]], model: GraphicalModel,
                       bins: dict[tuple[str, ...], dict[str, np.ndarray]], charge: Charge | None,
                       rng: np.random.Generator, meas: list | None = None) -> np.ndarray:
        """One refinement round's noisy ‖x_c − e_c‖₁: a cross-party set's from its pairs' probes (`_cross_error`:
        post-processing) plus Gaussian noise of the parties' σ, the others asked of the oracle as one Gaussian
        vector at their parties (the round's charge; spent unused when every candidate crosses parties; none planned
        when no pair is within a party)."""
        out = np.zeros(len(remaining))
        own = [i for i, s in enumerate(remaining) if not self._crosses(s)]
        pair: dict[frozenset[str], float] = {}
        for i, s in enumerate(remaining):
            if self._crosses(s):
                out[i] = self._cross_error(s, model, pair, meas if self._pools else None)
        if own and charge is not None:
            mine = [remaining[i] for i in own]
            out[own] = oracle.l1_errors(mine, [bin_query(model.marginal(s).values, s, bins.get(s)) for s in mine],
                                        charge, rng, bins=[bins.get(s) for s in mine])
            # a cross-party score gets the noise a party's entry carries (post-processing): the round keeps the
            # noisiest-looking candidates, so near-exact scores would lose to noise-inflated ones
            xs = np.setdiff1d(np.arange(len(remaining)), own)
            if xs.size and oracle.ledger.noise == "secure":
                out[xs] = discrete_gaussian(out[xs], charge.cost.rho, math.sqrt(len(own)))
            elif xs.size:
                out[xs] += rng.normal(0.0, gaussian_sigma(charge.cost.rho, math.sqrt(len(own))), size=xs.size)
        elif charge is not None:
            oracle.ledger.spend(charge)
        return out

    def _candidates(self, cliques: list[tuple[str, ...]], n_hat: float,
                    score: dict[tuple[str, str], float] | None = None) -> dict[tuple[str, ...], float]:
        """Useful subsets of the maximal cliques with 2..max_marginal_attrs attributes → sampling weight.

        Useful: θ-useful (the paper), or with `useful = "signal"` and the noisy R-scores `score` given, a pair
        whose dependence outweighs its noise (`_useful_pair`).
        As in the reference code, a clique's candidates share a weight |C|² (so a big clique does not
        drown the small ones); a subset of several cliques adds up their shares. Subsets are enumerated
        smallest first and a superset is only tried when some of its (k−1)-subsets was useful (θ-usefulness
        is monotone: a superset has at least as many cells; a signal-kept pair is over the θ limit, and so
        are all its supersets).
        """
        dom = self._domain
        limit = n_hat / (self.config.theta * self._noise_per_cell())
        out: dict[tuple[str, ...], float] = {}
        # a cross-party candidate is held to the noise its answer will carry (e.g. √2·g under trust none)
        def limit_of(t: tuple[str, ...]) -> float:
            return n_hat / (self.config.theta * self._noise_per_cell(t)) if self._crosses(t) else limit
        self._cand_bins: dict[tuple[str, ...], dict[str, np.ndarray]] = {}
        for q in cliques:
            sizes = {a: dom.size(a) for a in q}
            mine: list[tuple[str, ...]] = []
            level = [(a,) for a in q]
            for k in range(2, min(self.config.max_marginal_attrs, len(q)) + 1):
                seen = set(level)
                nxt = []
                for s in level:
                    cells = math.prod(sizes[a] for a in s)
                    for a in q[q.index(s[-1]) + 1:]:
                        t = s + (a,)
                        if t in seen:
                            continue
                        if self._useful_pair(t, cells * sizes[a], limit_of(t), score):
                            nxt.append(t)
                        elif k == 2 and (bins := self._coarse_pair(t, limit_of(t), score)) is not None:
                            self._cand_bins[t] = bins   # offered, never extended: its supersets stay over the limit
                            mine.append(t)
                if not nxt:
                    break
                mine += nxt
                level = nxt
            for s in mine:
                out[s] = out.get(s, 0.0) + len(q) ** 2 / len(mine)
        return dict(sorted(out.items()))

    def _bayes_initial(self, cliques: list[tuple[str, ...]], score: dict[tuple[str, str], float], n_hat: float,
                       rng: np.random.Generator) -> list[tuple[str, ...]]:
        """The reference code's initial set: inside each maximal clique, a greedy Bayesian network (first
        attribute at random; then the attribute and parent set, among the attributes placed so far, with the best
        CFS score Σ_p r(a,p) / √(|P| + Σ_{p<q} r(p,q)), r = noisy R / n̂, under the θ-useful cell limit); each
        attribute keeps its best-scoring marginal across cliques. Parent sets are grown greedily (the reference
        enumerates maximal ones). Attributes left uncovered get their 1-way marginal. Post-processing only."""
        dom = self._domain
        limit = n_hat / (self.config.theta * self._noise_per_cell())
        r = {k: v / n_hat for k, v in score.items()}

        def rr(a: str, b: str) -> float:
            return r[(a, b)] if (a, b) in r else r[(b, a)]

        def cfs(a: str, parents: list[str]) -> float:
            den = len(parents) + sum(rr(p, q) for p, q in itertools.combinations(parents, 2))
            return sum(rr(a, p) for p in parents) / math.sqrt(max(den, 1.0))

        best: dict[str, tuple[float, tuple[str, ...]]] = {}
        for q in cliques:
            placed = [q[int(rng.integers(len(q)))]]
            left = [a for a in q if a not in placed]
            while left:
                top = None
                for a in left:
                    parents: list[str] = []
                    cells = dom.size(a)
                    cand_best = None
                    while len(parents) + 1 < self.config.max_marginal_attrs:
                        options = [(cfs(a, parents + [p]), p) for p in placed if p not in parents and
                                   (cells * dom.size(p) <= limit or
                                    (not parents and self._useful_pair((a, p), cells * dom.size(p), limit, score)))]
                        if not options:
                            break
                        val, p = max(options)
                        parents.append(p)
                        cells *= dom.size(p)
                        if cand_best is None or val > cand_best[0]:
                            cand_best = (val, tuple(parents))
                    if cand_best is not None and (top is None or cand_best[0] > top[0]):
                        top = (cand_best[0], a, cand_best[1])
                if top is None:  # no parent fits the cell limit: the reference gives up on this clique
                    break
                val, a, parents = top
                marg = tuple(x for x in dom.attributes if x == a or x in parents)
                if a not in best or best[a][0] < val:
                    best[a] = (val, marg)
                placed.append(a)
                left.remove(a)
        initial: list[tuple[str, ...]] = []
        for _, m in sorted(best.values(), key=lambda t: -t[0]):
            if not any(set(m) <= set(x) for x in initial):
                initial = [x for x in initial if not set(x) < set(m)] + [m]
        covered = {a for m in initial for a in m}
        return initial + [(a,) for a in dom.attributes if a not in covered]

    def fit_table(self, table: Dataset, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        """All four phases on one table (a party's own columns, or the joined table)."""
        self.fit_oracle(CentralOracle(table, ledger), rng)

    def fit_oracle(self, oracle: MarginalOracle, rng: np.random.Generator) -> None:
        """All four phases, every data access through `oracle` (which holds the ledger): the record count is the
        0-way marginal, the R-scores half the oracle's noisy InDif vector (the same Gaussian release: R's
        sensitivity is half InDif's), the refinement queries its noisy L1 errors of the current model."""
        ledger = oracle.ledger
        rng = party_randomness(rng, ledger.noise)   # secure noise: the selection's random picks from the OS too
        c = self.config
        dom = self._domain
        t0 = time.perf_counter()
        n_hat = max(float(oracle.measure((), self._charges["count"][0], rng).values), 1.0)
        self._probed: dict[frozenset[str], tuple[Any, float]] = {}   # cross-party pair -> (its probe, R̂'s spread)
        self._cross_noise = 1.0   # a cross-party answer's std over the central σ at the same charge
        if self._cross and not self._free and isinstance(oracle, VerticalOracle):   # the θ rule and the signal test see it
            m = oracle.cross_measure
            sd = math.sqrt(m.released_variance(m.sigma_for_rho(self._rho_marg)))
            self._cross_noise = sd / gaussian_sigma(self._rho_marg)
        # trust none: refinement reads each probe pooled with the marginals measured since (`_pooled_error`)
        self._pools = bool(self._cross and not self._free and isinstance(oracle, VerticalOracle)
                           and oracle.cross_measure.trust == "none")
        if self._cross:
            noisy_r = self._vertical_r_scores(oracle, rng)
        else:
            noisy_r = oracle.indif(self._pairs, self._charges["r_scores"][0], rng) / 2 if self._pairs else np.zeros(0)
        edges, cliques = self._graph(noisy_r)
        t1 = time.perf_counter()
        score = dict(zip(self._pairs, noisy_r))
        cands = self._candidates(cliques, n_hat, score)
        if self._cross:   # a cross-party measure answers marginals of two parties: sets over three left out
            cands = {s: w for s, w in cands.items() if len({self._owner[a] for a in s}) <= 2}

        def strength(s: tuple[str, ...]) -> float:
            return float(sum(score[p] for p in itertools.combinations(s, 2)))

        initial: list[tuple[str, ...]] = []
        if c.initial == "bayes":
            initial = self._bayes_initial(cliques, score, n_hat, rng)
        else:
            for a in dom.attributes:
                mine = [s for s in cands if a in s and s not in self._cand_bins]   # coarsened: refinement only
                best = max(mine, key=strength) if mine else (a,)
                if not any(set(best) <= set(q) for q in initial):
                    initial = [q for q in initial if not set(q) < set(best)] + [best]
        initial = initial[: self._k_marg]
        sigma = gaussian_sigma(self._rho_marg)
        meas = []
        bins = self._cand_bins
        paid = [0]   # marginal charges spent (a cross-party marginal read off a release takes none)

        def measure(s: tuple[str, ...], b: dict[str, np.ndarray] | None = None) -> int:
            b = bins.get(s) if b is None else b
            if self._free and self._crosses(s):   # read off the release: post-processing, free
                meas.append(oracle.measure(s, None, rng, bins=b or None))
                return 0
            # a cross-party answer's σ is what the measure gives for the planned charge (trust server: + τ)
            meas.append(oracle.measure(s, self._charges["marginal"][paid[0]], rng,
                                       None if self._crosses(s) else sigma, bins=b or None))
            paid[0] += 1
            return 1

        def fit_atol(ms: list) -> float | None:
            return c.fit_tolerance * sum(m.values.size for m in ms) if c.fit_tolerance > 0 else None

        for s in initial:
            measure(s)
        # attributes covered by no initial marginal still need their 1-way (only when candidates were scarce)
        res = estimate(dom, meas, total=n_hat, iters=c.iters, max_cells=c.max_model_cells, extra_cliques=cliques,
                       atol=fit_atol(meas))
        t2 = time.perf_counter()
        weight = {s: w for s, w in cands.items() if s not in initial}
        if self._charges["cross_reprobe"]:
            self._reprobe(oracle, weight, res.model, meas, rng)
        left = self._k_marg - paid[0]
        for r in range(self._rounds):
            per_round = math.ceil(left / (self._rounds - r)) if left > 0 else 0
            remaining = list(weight)
            if len(remaining) > c.max_queries:  # the reference code's query cap, sampled by weight
                w = np.array([weight[s] for s in remaining])
                idx = rng.choice(len(remaining), c.max_queries, replace=False, p=w / w.sum())
                remaining = [remaining[i] for i in np.sort(idx)]
            refine = self._charges["refine"][r] if self._charges["refine"] else None
            if not remaining:   # nothing left to ask: the planned round is spent unused
                if refine is not None:
                    ledger.spend(refine)
                continue
            if self._cross:
                noisy_err = self._refine_errors(oracle, remaining, res.model, bins, refine, rng, meas)
            else:
                noisy_err = oracle.l1_errors(remaining, [bin_query(res.model.marginal(s).values, s, bins.get(s))
                                                         for s in remaining], refine, rng,
                                             bins=[bins.get(s) for s in remaining])
            if per_round == 0:
                continue
            order = np.argsort(-noisy_err[: len(remaining)], kind="stable")
            pick = [remaining[i] for i in order[:per_round]]
            for i in order[len(order) // 2:]:  # the queried candidates that looked well inferred count less
                weight[remaining[i]] /= 2
            for s in pick:
                left -= measure(s)
                del weight[s]
            res = estimate(dom, meas, total=n_hat, iters=c.refine_iters, warm_start=res.model,
                           max_cells=c.max_model_cells, atol=fit_atol(meas))
        # marginal charges left (too few useful candidates): measure the chosen marginals again with fresh
        # noise, most recent first; the estimator weighs repeated measurements like one with σ/√k
        if paid[0] < self._k_marg:
            # (a cross-party marginal read off a release is not asked again: the same table would come back)
            again = [(m.attributes, m.bins or {}) for m in meas
                     if not (self._free and self._crosses(m.attributes))][::-1] or [((a,), {}) for a in dom.attributes]
            i = 0
            while paid[0] < self._k_marg:
                measure(*again[i % len(again)])
                i += 1
            res = estimate(dom, meas, total=n_hat, iters=c.refine_iters, warm_start=res.model,
                           max_cells=c.max_model_cells, atol=fit_atol(meas))
        # the probes the model's cliques hold join the last estimation (released already: free information); not
        # earlier, as refinement scores cross-party sets by a probe's residual from the model, which a model fitted
        # to that probe would hide
        reused = [m for m, _ in self._probed.values()
                  if any(set(m.attributes) <= set(q) for q in res.model.tree.cliques)]
        if self._free:   # read off the release again (free; the oracle now makes it consistent with the 1-way
            # answers measured since); a pair inside a cross-party set read already adds nothing new
            reused = [oracle.measure(m.attributes, None, rng) for m in reused
                      if not any(set(m.attributes) <= set(x.attributes) for x in meas)]
            # so are the cross-party sets read during the rounds (replaced, not added: the same release): each
            # was made consistent with the few 1-ways measured by then
            fresh = [oracle.measure(m.attributes, None, rng, bins=m.bins) if self._crosses(m.attributes) else m
                     for m in meas]
            reused += [f for f, m in zip(fresh, meas) if f is not m]
            meas = [m for m in meas if not self._crosses(m.attributes)]
        if reused:
            res = estimate(dom, meas + reused, total=n_hat, iters=c.refine_iters, warm_start=res.model,
                           max_cells=c.max_model_cells, atol=fit_atol(meas + reused))
        self._model = res.model
        self._n_hat = n_hat
        self._edges = edges
        self._measurements = meas
        self._timings = {"graph (R-scores)": t1 - t0, "initial model": t2 - t1, "refinement": time.perf_counter() - t2}

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        self.fit_table(data.joined().project(self._domain.attributes), ledger, rng)

    def sample(self, n: int | None, rng: np.random.Generator) -> Dataset:
        if self._model is None:
            raise DataError("privmrf: fit() before sample()")
        t0 = time.perf_counter()
        out = self._model.sample(int(round(self._n_hat)) if n is None else int(n), rng, self.config.sampling)
        self._timings["sample"] = time.perf_counter() - t0
        return out

    def export(self, party: str) -> LocalModel:
        """The fitted model as a message for VertiMRF's server."""
        if self._model is None:
            raise DataError("privmrf: fit() before export()")
        m = self._model
        return LocalModel(party=party, domain=self._domain, cliques=[list(q) for q in m.tree.cliques],
                          potentials={str(i): t for i, t in enumerate(m.theta)}, total=float(m.total),
                          edges=[list(e) for e in self._edges], marginals=[list(x.attributes) for x in self._measurements],
                          marginal_std=[float(x.std) for x in self._measurements]).validate()

    def fitted_model(self) -> tuple[Any, str]:
        """The fitted GraphicalModel and the sampling method (HasGraphicalModel): a DP release to sample from."""
        if self._model is None:
            raise DataError("privmrf: fit() before fitted_model()")
        return self._model, self.config.sampling

    def timings(self) -> dict[str, float]:
        return dict(self._timings)
