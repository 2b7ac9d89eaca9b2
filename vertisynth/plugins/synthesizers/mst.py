"""`mst`: MST, the NIST 2018 winner (McKenna, Miklau, Sheldon, "Winning the NIST Contest", JPC 2021), on the pgm engine.

zCDP, ρ from the plan, split in thirds:
  * ρ/3 measures every 1-way marginal (Gaussian, ρ/(3d) each); values whose noisy count is below 3σ are merged
    into one "rare" bin of their attribute (the paper's domain compression), when that merges at least two;
  * ρ/3 selects a maximum spanning tree: the engine fits a model to the 1-way measurements, then d−1
    exponential-mechanism rounds (ε = √(8ρ/(3(d−1))) each, sensitivity 1) pick among the pairs that join two
    components the one with the largest ‖M_ab(D) − M_ab(p̂)‖₁ on the compressed domains;
  * ρ/3 measures the chosen pairs on the compressed domains (Gaussian, ρ/(3(d−1)) each);
then the engine fits the model to all measurements and samples n̂ records. Compressed measurements are the
engine's binned measurements (the model keeps the full domain; within a rare bin it follows the 1-way
measurement, where the paper samples rare values uniformly). Every question goes through a MarginalOracle.
With `vertical = { measure = "he", trust = "none" }` the oracle is a vertical one (vertisynth/vertical) and the
selection third is split: `probe` of it measures every cross-party pair once on the compressed domains (what the
selection scores cross-party pairs by; estimation uses those of the chosen pairs), the rest pays the d−1 rounds
(docs/vertical.md); under trust "none" with at least 8 cross-party pairs per attribute the probes take 0.8 of it,
in two stages (vertical/probes.py, `reprobes`).
"""
from __future__ import annotations

import itertools
import math
import time

import attrs
import numpy as np

from vertisynth.core.errors import ConfigError
from vertisynth.core.interfaces import PlanContext, Synthesizer, VerticalData
from vertisynth.core.privacy import Charge, PrivacyLedger, ZCDP

from vertisynth.plugins.synthesizers.fitted import FittedGraphicalModel
from vertisynth.pgm import Measurement, estimate
from vertisynth.pgm.estimation import bin_query
from vertisynth.pgm.oracle import CentralOracle, MarginalOracle, ZCDPFilter
from vertisynth.vertical import cross_pairs, owners, VerticalConfig
from vertisynth.vertical.probes import mass_bins, measure_probes_twice, probe_shares

STAGE = "synthesizer"
PROBE = 0.6   # vertical: the share of the selection third that measures every cross-party pair once


@attrs.frozen
class MSTConfig:
    compress: bool = True
    iters: int = 1000
    sampling: str = "round"   # round (mbi's default) | sample
    vertical: VerticalConfig | None = None   # run across parties (docs/vertical.md); None: central

    def __attrs_post_init__(self) -> None:
        if self.iters < 1:
            raise ConfigError(f"mst: iters must be >= 1, got {self.iters}")
        if self.sampling not in ("sample", "round"):
            raise ConfigError(f"mst: sampling must be 'sample' or 'round', got {self.sampling!r}")


def rare_bins(m: Measurement) -> np.ndarray | None:
    """The paper's compression of one attribute from its noisy 1-way counts: values counted at 3σ or more keep
    their own bin, the others share the last one; None when fewer than two values would be merged."""
    sup = m.values >= 3 * m.std
    if (~sup).sum() < 2:
        return None
    bins = np.full(m.values.size, int(sup.sum()), dtype=np.int64)
    bins[sup] = np.arange(int(sup.sum()))
    return bins


class MSTSynthesizer(FittedGraphicalModel, Synthesizer):
    _name = "mst"

    def __init__(self, config: MSTConfig | None = None) -> None:
        super().__init__(config or MSTConfig())
        self._timings: dict[str, float] = {}

    def plan(self, ctx: PlanContext) -> list[Charge]:
        d = len(ctx.domain)
        if d < 2:
            raise ConfigError(f"mst needs at least two attributes, the domain has {d}")
        self._domain = ctx.domain
        rho = ctx.rho
        v = self.config.vertical
        owner = owners("mst", v, ctx.partition)
        self._cross = cross_pairs(ctx.domain.attributes, owner) if v is not None else []
        # a measure that released once answers cross-party pairs for free: no probes; the 2-way third is one
        # filter, split among the chosen pairs within one party
        self._free = bool(ctx.cross_release)
        if self._free:
            self._cross = []
        # trust none: a share of the probes' ρ probes the contenders again (vertical/probes.py, `reprobes`)
        probe, first, again = probe_shares(len(self._cross), d, v, PROBE)
        # kept: fit spends these very charges, in order
        self._charges = {
            "gaussian_1way": [Charge(STAGE, "gaussian_1way", ZCDP(rho / (3 * d))) for _ in range(d)],
            **({"cross_probe": [Charge(STAGE, "gaussian_cross_probe", ZCDP(rho * first / (3 * len(self._cross))),
                                       note="every cross-party pair once, for the selection's scores")
                                for _ in self._cross]} if self._cross else {}),
            **({"cross_reprobe": [Charge(STAGE, "gaussian_cross_reprobe",
                                         ZCDP(rho * (probe - first) / (3 * again)),
                                         note="the cross-party pairs of most dependence at their first probe, again")
                                  for _ in range(again)]} if again else {}),
            "exponential_select": [Charge(STAGE, "exponential_select", ZCDP(rho * (1 - probe) / (3 * (d - 1))))
                                   for _ in range(d - 1)],
            "gaussian_2way": ([Charge(STAGE, "gaussian_2way", ZCDP(rho / 3),
                                      note="the chosen pairs within one party, split evenly (a zCDP filter)")]
                              if self._free else
                              [Charge(STAGE, "gaussian_2way", ZCDP(rho / (3 * (d - 1)))) for _ in range(d - 1)]),
        }
        return [c for group in self._charges.values() for c in group]

    def vertical_request(self) -> VerticalConfig | None:
        return self.config.vertical

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        self.fit_oracle(CentralOracle(data.joined().project(self._domain.attributes), ledger), rng)

    def fit_oracle(self, oracle: MarginalOracle, rng: np.random.Generator) -> None:
        c = self.config
        dom = self._domain
        t0 = time.perf_counter()
        one = [oracle.measure((a,), ch, rng) for a, ch in zip(dom.attributes, self._charges["gaussian_1way"])]
        bins = {m.attributes[0]: b for m in one if c.compress and (b := rare_bins(m)) is not None}
        # probes on at most probe_bins bins per attribute (a coarsening of the compressed domain)
        coarse = mass_bins(one, c.vertical.probe_bins, bins) if self._cross else {}
        probes = measure_probes_twice(oracle, self._cross, self._charges.get("cross_probe", []),
                                      self._charges.get("cross_reprobe", []), rng, coarse)
        t1 = time.perf_counter()
        pairs = self.select(oracle, one, bins, rng)
        t2 = time.perf_counter()
        pair_bins = [{a: bins[a] for a in p if a in bins} or None for p in pairs]
        if self._free:   # the cross-party pairs come from the release; the filter pays the others evenly
            filt = ZCDPFilter(self._charges["gaussian_2way"][0], oracle.ledger)
            inside = sum(not oracle.crosses(p) for p in pairs)
            two = oracle.measure_many(pairs, [filt] * len(pairs), rng, math.sqrt(max(inside, 1) / (2 * filt.total)),
                                      pair_bins)
        else:
            two = oracle.measure_many(pairs, self._charges["gaussian_2way"], rng, None, pair_bins)
        # a probe joins estimation where its pair was chosen (all of them would make the model's graph dense)
        res = estimate(dom, one + [m for m in probes if m.attributes in pairs] + two, iters=c.iters,
                       max_cells=float("inf"))
        self._model, self._estimation = res.model, res
        self._pairs, self._bins = pairs, bins
        self._n_hat = max(1, int(round(res.model.total)))
        self._timings = {"measure": t1 - t0 + time.perf_counter() - t2 - res.seconds, "select": t2 - t1,
                         "estimate": res.seconds}

    def select(self, oracle: MarginalOracle, one: list[Measurement], bins: dict[str, np.ndarray],
               rng: np.random.Generator) -> list[tuple[str, str]]:
        """d−1 exponential-mechanism rounds over the pairs that join two components (Kruskal with noise)."""
        dom = self._domain
        model = estimate(dom, one, iters=self.config.iters).model
        pairs = list(itertools.combinations(dom.attributes, 2))
        est = [bin_query(model.marginal(p).values, p, {a: bins[a] for a in p if a in bins}) for p in pairs]
        comp = {a: i for i, a in enumerate(dom.attributes)}
        chosen: list[tuple[str, str]] = []
        eps = math.sqrt(8 * self._charges["exponential_select"][0].cost.rho)
        for charge in self._charges["exponential_select"]:
            idx = [i for i, (a, b) in enumerate(pairs) if comp[a] != comp[b]]
            k = idx[oracle.select([pairs[i] for i in idx], [est[i] for i in idx], np.ones(len(idx)),
                                  np.zeros(len(idx)), eps, charge, rng,
                                  bins=[{a: bins[a] for a in pairs[i] if a in bins} or None for i in idx])]
            a, b = pairs[k]
            chosen.append((a, b))
            old, new = comp[b], comp[a]
            for x in comp:
                if comp[x] == old:
                    comp[x] = new
        return chosen
