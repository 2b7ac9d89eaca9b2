"""`private_pgm`: select – measure – generate with the graphical-model engine (McKenna et al.).

Two ways to choose what to measure (zCDP throughout, ρ from the plan):
  * "mst" (McKenna, Miklau, Sheldon 2021): ρ/3 measures every 1-way marginal (Gaussian, ρ/(3d) each);
    ρ/3 selects a maximum spanning tree of attribute pairs with d−1 exponential-mechanism rounds,
    each scoring the pairs that join two components by ‖data_pair − model_pair‖₁ (sensitivity 1; the
    exponential mechanism with parameter ε is ε²/8-zCDP, so ε = √(8ρ/(3(d−1))) per round); ρ/3 measures
    the chosen pairs (Gaussian, ρ/(3(d−1)) each).
  * "workload": every 1-way marginal plus the marginals listed in `workload` (default: all pairs), each
    measured with the Gaussian mechanism at an equal share of ρ.
Then the engine fits a model to the noisy marginals (weights 1/σ) and samples n̂ records, n̂ being the
inverse-variance weighted mean of the noisy totals (post-processing).
Every data access goes through a MarginalOracle (`fit_oracle`): central (`fit` joins the parties' columns) or
vertical: with `vertical = { measure = "he", trust = "none" }` the pipeline answers on a VerticalOracle
(vertisynth/vertical). In "mst" mode the selection third is then split as mst's twin does: `probe` of it (0.6)
measures every cross-party pair once on coarse bins (what the selection scores cross-party pairs by; the probes of
the chosen pairs join estimation), the rest pays the d−1 rounds (docs/vertical.md); under trust "none" with at
least 8 cross-party pairs per attribute 0.8 of it, in two stages (vertical/probes.py, `reprobes`). "workload" needs no selection:
its cross-party marginals are answered by the cross-party measure.

On NLTCS (16 binary attributes driven by one latent factor) MST scores 3-way TVD ≈ 0.13-0.14 at every ε: that is
the limit of a tree, not a bug. The best tree with exact marginals (a Chow-Liu tree fitted by the engine to
convergence, loss 6e-20) scores 0.134 (`benchmarks/privmrf_diagnostics.py --experiments tree`).
"""
from __future__ import annotations

import itertools
import math
import time


import attrs
import numpy as np

from vertisynth.core.errors import ConfigError
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import MarginalQuery, MeasuresMarginals, PlanContext, Synthesizer, VerticalData
from vertisynth.core.privacy import Charge, PrivacyLedger, ZCDP

from vertisynth.plugins.synthesizers.fitted import FittedGraphicalModel
from vertisynth.pgm import Measurement, estimate
from vertisynth.pgm.graph import build_junction_tree
from vertisynth.pgm.oracle import CentralOracle, MarginalOracle, ZCDPFilter
from vertisynth.vertical import cross_pairs, owners, VerticalConfig
from vertisynth.vertical.probes import mass_bins, measure_probes_twice, probe_shares

STAGE = "synthesizer"
PROBE = 0.6   # vertical, mst mode: the share of the selection third that measures every cross-party pair once


@attrs.frozen
class PrivatePGMConfig:
    measurements: str = "mst"  # mst | workload
    workload: list[list[str]] | None = None
    iters: int = 1000
    sampling: str = "sample"  # sample | round
    max_cells: float = 1e7
    vertical: VerticalConfig | None = None   # run across parties (docs/vertical.md); None: central

    def __attrs_post_init__(self) -> None:
        if self.measurements not in ("mst", "workload"):
            raise ConfigError(f"private_pgm: measurements must be 'mst' or 'workload', got {self.measurements!r}")
        if self.sampling not in ("sample", "round"):
            raise ConfigError(f"private_pgm: sampling must be 'sample' or 'round', got {self.sampling!r}")
        if self.iters < 1:
            raise ConfigError("private_pgm: iters must be >= 1")


class PrivatePGMSynthesizer(FittedGraphicalModel, Synthesizer, MeasuresMarginals):
    _name = "private_pgm"

    def __init__(self, config: PrivatePGMConfig | None = None) -> None:
        super().__init__(config or PrivatePGMConfig())
        self._timings: dict[str, float] = {}

    def plan(self, ctx: PlanContext) -> list[Charge]:
        self._domain = ctx.domain
        attrs_ = ctx.domain.attributes
        d = len(attrs_)
        rho = ctx.rho
        v = self.config.vertical
        owner = owners("private_pgm", v, ctx.partition)
        self._cross: list[tuple[str, str]] = []
        if self.config.measurements == "mst":
            if d < 2:
                raise ConfigError("private_pgm (mst) needs at least two attributes")
            self._free = bool(ctx.cross_release)   # cross-party pairs from a release: no probes, the 2-way third
            if v is not None and not self._free:   # one filter split among the chosen pairs within one party
                self._cross = cross_pairs(attrs_, owner)
            # trust none: a share of the probes' ρ probes the contenders again (vertical/probes.py, `reprobes`)
            probe, first, again = probe_shares(len(self._cross), d, v, PROBE)
            self._rho1 = rho / (3 * d)
            self._rho_sel = rho * (1 - probe) / (3 * (d - 1))
            self._rho2 = rho / (3 * (d - 1))
            # kept: the mechanisms spend these very charges, in order
            self._charges = {"gaussian_1way": [Charge(STAGE, "gaussian_1way", ZCDP(self._rho1)) for _ in range(d)],
                             **({"cross_probe": [Charge(STAGE, "gaussian_cross_probe",
                                                        ZCDP(rho * first / (3 * len(self._cross))),
                                                        note="every cross-party pair once, for the selection's "
                                                             "scores") for _ in self._cross]} if self._cross else {}),
                             **({"cross_reprobe": [Charge(STAGE, "gaussian_cross_reprobe",
                                                          ZCDP(rho * (probe - first) / (3 * again)),
                                                          note="the cross-party pairs of most dependence at their "
                                                               "first probe, again") for _ in range(again)]}
                                if again else {}),
                             "exponential_select": [Charge(STAGE, "exponential_select", ZCDP(self._rho_sel))
                                                    for _ in range(d - 1)],
                             "gaussian_2way": ([Charge(STAGE, "gaussian_2way", ZCDP(rho / 3),
                                                       note="the chosen pairs within one party, split evenly (a "
                                                            "zCDP filter)")] if self._free else
                                               [Charge(STAGE, "gaussian_2way", ZCDP(self._rho2))
                                                for _ in range(d - 1)])}
        else:
            self._workload = self._workload_of(ctx.domain)
            wide = [w for w in self._workload if len({owner[a] for a in w}) > 2]
            if v is not None and wide:   # refused now: a cross-party measure answers two parties' marginals
                raise ConfigError(f"private_pgm: workload marginal {list(wide[0])} spans "
                                  f"{len({owner[a] for a in wide[0]})} parties; a vertical run measures marginals "
                                  "of at most two parties")
            # a release answers the cross-party marginals for free: only the others are charged
            self._paid = [w for w in self._workload if not (ctx.cross_release and len({owner[a] for a in w}) > 1)]
            self._rho_each = rho / max(len(self._paid), 1)
            self._charges = {"gaussian_marginal": [Charge(STAGE, "gaussian_marginal", ZCDP(self._rho_each))
                                                   for _ in self._paid]}
        return [c for group in self._charges.values() for c in group]

    def vertical_request(self) -> VerticalConfig | None:
        return self.config.vertical

    # -- measurements from elsewhere (horizontal custodians, secure aggregation) --------------------
    def _workload_of(self, domain: Domain) -> list[tuple[str, ...]]:
        work = self.config.workload
        if work is None:
            work = [list(p) for p in itertools.combinations(domain.attributes, 2)]
        for w in work:
            domain.check(w)
        out = [(a,) for a in domain.attributes] + [tuple(w) for w in work if len(w) > 1]
        # the model these marginals need is known from the plan: refuse it now (validate too), not after the
        # measurements (a run of the README's collab snippet failed on a 5.7e11-cell clique after 20 s)
        build_junction_tree(domain, out, self.config.max_cells)
        return out

    def marginal_queries(self, domain: Domain, rho: float) -> list[MarginalQuery]:
        if self.config.measurements != "workload":
            raise ConfigError("private_pgm: horizontal custodians need measurements = 'workload' (MST selects pairs "
                              "with the exponential mechanism on exact scores of the combined table, which secure "
                              "aggregation — sums of counts only — does not provide)")
        work = self._workload_of(domain)
        return [MarginalQuery(f"pgm:{','.join(w)}", [w], rho / len(work)) for w in work]

    def fit_marginals(self, domain: Domain, queries, answers, variances, rng: np.random.Generator) -> None:
        meas = [Measurement(q.marginals[0], np.asarray(a, float).reshape(domain.project(q.marginals[0]).shape),
                            math.sqrt(v)) for q, a, v in zip(queries, answers, variances)]
        self._domain = domain
        res = estimate(domain, meas, iters=self.config.iters, max_cells=self.config.max_cells)
        self._model, self._estimation = res.model, res
        self._n_hat = max(1, int(round(res.model.total)))
        self._timings = {"estimate": res.seconds}

    def measure(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> list[Measurement]:
        """The DP part: noisy marginals (and, for MST, the privately selected pairs), spending the plan."""
        return self.measure_oracle(CentralOracle(data.joined().project(self._domain.attributes), ledger), rng)

    def measure_oracle(self, oracle: MarginalOracle, rng: np.random.Generator) -> list[Measurement]:
        """`measure` with every data access through `oracle` (which holds the ledger)."""
        t0 = time.perf_counter()
        attrs_ = self._domain.attributes
        if self.config.measurements == "workload":
            charge = dict(zip(self._paid, self._charges["gaussian_marginal"]))
            # independent of each other: one batch, its cross-party marginals one protocol stage (vertical)
            meas = oracle.measure_many(self._workload, [charge.get(w) for w in self._workload], rng)   # None: release
            t1 = t2 = time.perf_counter()
        else:
            meas = oracle.measure_many([(a,) for a in attrs_], self._charges["gaussian_1way"], rng)
            probes = []
            if self._cross:   # every cross-party pair once, on at most probe_bins bins per attribute (equal noisy
                # 1-way mass: post-processing), so the selection can score them on released answers
                probes = measure_probes_twice(oracle, self._cross, self._charges["cross_probe"],
                                              self._charges.get("cross_reprobe", []), rng,
                                              mass_bins(meas, self.config.vertical.probe_bins))
            t1 = time.perf_counter()
            pairs = self._select_tree(oracle, meas, rng)
            t2 = time.perf_counter()
            if getattr(self, "_free", False):   # cross-party pairs from the release; the filter pays the rest evenly
                filt = ZCDPFilter(self._charges["gaussian_2way"][0], oracle.ledger)
                sigma2 = math.sqrt(max(sum(not oracle.crosses(p) for p in pairs), 1) / (2 * filt.total))
                meas += oracle.measure_many(pairs, [filt] * len(pairs), rng, sigma2)
            else:   # the chosen pairs depend on no answer of each other: their cross-party ones in one stage
                meas += oracle.measure_many(pairs, self._charges["gaussian_2way"], rng)
            # a probe joins estimation where its pair was chosen (all of them would make the model's graph dense)
            meas += [m for m in probes if m.attributes in pairs]
        self._timings = {"measure": time.perf_counter() - t2 + (t1 - t0), "select": t2 - t1}
        return meas

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        self.fit_oracle(CentralOracle(data.joined().project(self._domain.attributes), ledger), rng)

    def fit_oracle(self, oracle: MarginalOracle, rng: np.random.Generator) -> None:
        """Measure through `oracle` (central or vertical), then fit the model to the measurements."""
        meas = self.measure_oracle(oracle, rng)
        res = estimate(self._domain, meas, iters=self.config.iters, max_cells=self.config.max_cells)
        self._model = res.model
        self._estimation = res
        self._n_hat = max(1, int(round(res.model.total)))
        self._timings["estimate"] = res.seconds

    def _select_tree(self, oracle: MarginalOracle, one_way: list[Measurement],
                     rng: np.random.Generator) -> list[tuple[str, str]]:
        """MST selection: d−1 exponential-mechanism rounds over pairs that join two components, each scoring a pair
        by the L1 distance between its counts and the independent model built from the noisy 1-way marginals."""
        attrs_ = self._domain.attributes
        probs = {m.attributes[0]: np.clip(m.values, 0, None) for m in one_way}
        total = float(np.mean([p.sum() for p in probs.values()])) or 1.0
        pairs = list(itertools.combinations(attrs_, 2))
        est = [total * np.outer(probs[a] / max(probs[a].sum(), 1e-12), probs[b] / max(probs[b].sum(), 1e-12))
               for a, b in pairs]
        comp = {a: i for i, a in enumerate(attrs_)}
        eps = math.sqrt(8 * self._rho_sel)
        chosen = []
        for charge in self._charges["exponential_select"]:
            idx = [i for i, (a, b) in enumerate(pairs) if comp[a] != comp[b]]
            k = idx[oracle.select([pairs[i] for i in idx], [est[i] for i in idx], np.ones(len(idx)),
                                  np.zeros(len(idx)), eps, charge, rng)]
            a, b = pairs[k]
            chosen.append((a, b))
            old, new = comp[b], comp[a]
            for x in comp:
                if comp[x] == old:
                    comp[x] = new
        return chosen
