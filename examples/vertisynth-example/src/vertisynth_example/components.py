"""The example components. A real plugin follows the same shape: plan → spend what was planned → sample."""
from __future__ import annotations

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError
from vertisynth.core.interfaces import Evaluator, PlanContext, Synthesizer, VerticalData
from vertisynth.core.mechanisms import laplace_mechanism
from vertisynth.core.privacy import Charge, PrivacyLedger, PureDP


@attrs.frozen
class UniformConfig:
    min_records: int = 1

    def __attrs_post_init__(self) -> None:
        if self.min_records < 1:
            raise ConfigError(f"example_uniform: min_records must be >= 1, got {self.min_records}")


class UniformSynthesizer(Synthesizer):
    """Uniform columns; the record count is released with the Laplace mechanism (sensitivity 1)."""

    def plan(self, ctx: PlanContext) -> list[Charge]:
        self._epsilon = ctx.epsilon
        self._domain = ctx.domain
        # one party holds the row count as much as any other; charge it to the first party
        self._party = ctx.partition.names[0]
        self._charge = Charge("synthesizer", "laplace_count", PureDP(self._epsilon), self._party)
        return [self._charge]   # kept: fit spends this very charge

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        n = data.views[self._party].n
        noisy = laplace_mechanism(np.array([n]), self._charge, rng, ledger)
        self._n_hat = max(self.config.min_records, int(round(noisy[0])))

    def sample(self, n: int | None, rng: np.random.Generator) -> Dataset:
        n = self._n_hat if n is None else n
        cols = [rng.integers(0, k, size=n) for k in self._domain.shape]
        return Dataset(np.column_stack(cols).astype(np.int64), self._domain)


class OneWayTVD(Evaluator):
    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        tvds = []
        for a in real.domain.attributes:
            p = real.counts([a]).values
            q = synthetic.counts([a]).values
            tvds.append(0.5 * np.abs(p / p.sum() - q / q.sum()).sum())
        return {"tvd_1way": float(np.mean(tvds))}
