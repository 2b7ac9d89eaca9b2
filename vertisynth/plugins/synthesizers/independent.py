"""`independent`: the honest baseline. Each party releases DP 1-way marginals of its own columns;
the server samples every column independently. It keeps no correlation, so any synthesizer worth
using must beat it (the "independent columns" line of DESIGN.md's table).

Privacy: d noisy histograms, one per attribute, each with L2 (and L1) sensitivity 1 under
add/remove of one person. Gaussian: ρ/d zCDP each, total ρ. Laplace: ε/d each, total ε.
The record count n̂ is post-processing: the inverse-variance weighted mean of the noisy totals.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import PlanContext, Synthesizer, VerticalData
from vertisynth.core.mechanisms import gaussian_mechanism, gaussian_sigma, laplace_mechanism, laplace_scale
from vertisynth.core.messages import NoisyMarginals
from vertisynth.core.privacy import Charge, PrivacyLedger, PureDP, ZCDP
from vertisynth.pgm import GraphicalModel, build_junction_tree

STAGE = "synthesizer"


ZERO_LOG_POTENTIAL = -1000.0   # exp(-1000) underflows to exactly 0: an impossible cell, kept finite


@attrs.frozen
class IndependentConfig:
    """mechanism: "gaussian" (zCDP, needs δ > 0) or "laplace" (pure ε)."""

    mechanism: str = "gaussian"

    def __attrs_post_init__(self) -> None:
        if self.mechanism not in ("gaussian", "laplace"):
            raise ConfigError(f"independent: mechanism must be 'gaussian' or 'laplace', got {self.mechanism!r}")


class IndependentSynthesizer(Synthesizer):
    def __init__(self, config: IndependentConfig | None = None) -> None:
        super().__init__(config or IndependentConfig())
        self._probs: dict[str, np.ndarray] = {}
        self._domain: Domain | None = None
        self._n_hat: int | None = None
        self._timings: dict[str, float] = {}
        self._per_attr: float | None = None
        self._charges: dict[tuple[str, str], Charge] = {}   # (party, attribute) -> its planned charge

    # -- privacy plan -------------------------------------------------------------------------
    def _charge(self, party: str, amount: float) -> Charge:
        if self.config.mechanism == "gaussian":
            return Charge(STAGE, "gaussian_1way", ZCDP(amount), party)
        return Charge(STAGE, "laplace_1way", PureDP(amount), party)

    def plan(self, ctx: PlanContext) -> list[Charge]:
        d = len(ctx.domain)
        self._per_attr = (ctx.rho if self.config.mechanism == "gaussian" else ctx.epsilon) / d
        self._charges = {(p.name, a): self._charge(p.name, self._per_attr) for p in ctx.partition for a in p.attributes}
        return list(self._charges.values())

    # -- party side ---------------------------------------------------------------------------
    def measure_party(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator) -> NoisyMarginals:
        """Runs at the party: noisy 1-way marginals of its own columns, as a message."""
        if self._per_attr is None:
            raise DataError("independent: plan() must run before measuring (the budget is unknown)")
        out = {}
        for a in view.attributes:
            counts = view.counts([a]).values
            charge = self._charges.get((party, a))
            if charge is None:
                raise DataError(f"independent: attribute {a!r} of party {party!r} was not in the plan")
            mechanism = gaussian_mechanism if self.config.mechanism == "gaussian" else laplace_mechanism
            out[a] = mechanism(counts, charge, rng, ledger)
        return NoisyMarginals(party=party, domain=view.domain, marginals=out).validate()

    # -- server side --------------------------------------------------------------------------
    def fit_messages(self, messages: Sequence[NoisyMarginals]) -> None:
        """Runs at the server on messages only."""
        if self._per_attr is None:
            raise DataError("independent: plan() must run before fitting")
        var1 = (gaussian_sigma(self._per_attr) ** 2 if self.config.mechanism == "gaussian"
                else 2 * laplace_scale(self._per_attr) ** 2)
        domain = None
        totals, weights = [], []
        for m in messages:
            domain = m.domain if domain is None else domain.merge(m.domain)
            for key, noisy in m.marginals.items():
                totals.append(float(noisy.sum()))
                weights.append(1.0 / (var1 * noisy.size))  # variance of a noisy total: k cells x var
                clipped = np.clip(noisy, 0, None)
                s = clipped.sum()
                self._probs[key] = clipped / s if s > 0 else np.full(noisy.shape, 1.0 / noisy.size)
        self._domain = domain
        self._n_hat = max(1, int(round(np.average(totals, weights=weights))))

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        t0 = time.perf_counter()
        messages = [self.measure_party(p, data.views[p], ledger, rng) for p in data.partition.names]
        t1 = time.perf_counter()
        self.fit_messages(messages)
        self._timings = {"measure (parties)": t1 - t0, "fit (server)": time.perf_counter() - t1}

    def sample(self, n: int | None, rng: np.random.Generator) -> Dataset:
        if self._domain is None:
            raise DataError("independent: fit() before sample()")
        n = self._n_hat if n is None else int(n)
        cols = []
        for a in self._domain.attributes:
            p = self._probs[a]
            cols.append(np.minimum(np.searchsorted(np.cumsum(p), rng.random(n) * p.sum(), side="right"), len(p) - 1))
        return Dataset(np.column_stack(cols).astype(np.int64), self._domain)

    def fitted_model(self) -> tuple[Any, str]:
        """The noisy 1-way marginals as a graphical model of single-attribute cliques (HasGraphicalModel), so
        the fit can be saved and sampled again; a cell with probability 0 gets a log-potential whose exp is 0."""
        if self._domain is None:
            raise DataError("independent: fit() before fitted_model()")
        tree = build_junction_tree(self._domain, [[a] for a in self._domain.attributes], max_cells=float("inf"))
        theta = []
        for c in tree.cliques:
            p = self._probs[c[0]]
            theta.append(np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), ZERO_LOG_POTENTIAL))
        return GraphicalModel(tree, theta, float(self._n_hat)), "sample"

    @property
    def n_hat(self) -> int | None:
        return self._n_hat

    def timings(self) -> dict[str, float]:
        return dict(self._timings)
