"""`workload_error`: normalised L1 error over a workload of marginals (seed 004, §4.3).

For each marginal M in the workload, err(M) = Σ_x |P_M(x) − Q_M(x)| with P, Q the real and synthetic
marginal distributions (counts divided by the table size, so tables of different sizes compare); the
score is the mean over the workload, per way and overall. 0 is perfect, 2 is disjoint support.
The workload: all k-subsets for each k in `ways` (1-way by default), or `marginals` distinct random ones
when there are more; explicit `workload = [["age", "sex"], ...]` replaces it.
"""
from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import Evaluator, PlanContext
from vertisynth.plugins.evaluators.tvd import distinct_subsets


@attrs.frozen
class WorkloadConfig:
    ways: list[int] = attrs.field(factory=lambda: [1])
    marginals: int = 1000
    workload: list[list[str]] | None = None

    def __attrs_post_init__(self) -> None:
        if not self.ways or any(k < 1 for k in self.ways):
            raise ConfigError(f"workload_error: ways must be a non-empty list of positive sizes, got {self.ways}")
        if self.marginals < 1:
            raise ConfigError(f"workload_error: marginals must be >= 1, got {self.marginals}")
        if self.workload is not None and (not self.workload or any(not m for m in self.workload)):
            raise ConfigError("workload_error: workload must be a non-empty list of non-empty attribute lists")


def l1_error(real: Dataset, synthetic: Dataset, attrs_: tuple[str, ...]) -> float:
    p = real.counts(attrs_).values.ravel()
    q = synthetic.counts(attrs_).values.ravel()
    return float(np.abs(p / p.sum() - q / q.sum()).sum())


class WorkloadError(Evaluator):
    prefers_holdout = True   # with a holdout, score against records the synthesizer never saw

    def __init__(self, config: WorkloadConfig | None = None) -> None:
        super().__init__(config or WorkloadConfig())

    def plan(self, ctx: PlanContext) -> list:
        self._check_workload(ctx.domain.attributes)
        return []

    def _check_workload(self, names: tuple[str, ...]) -> None:
        c = self.config
        if c.workload is not None:
            missing = sorted({a for m in c.workload for a in m} - set(names))
            if missing:
                raise ConfigError(f"workload_error: workload attributes {missing} are not in the data "
                                  f"(attributes: {', '.join(names)})")
        elif max(c.ways) > len(names):
            raise ConfigError(f"workload_error: ways {c.ways} exceed the number of attributes ({len(names)})")

    def evaluate_counts(self, real: Any, synthetic: Any, rng: np.random.Generator) -> dict[str, float]:
        """EvaluatesCounts: only `counts`, `n` and `domain` are read."""
        return self.evaluate(real, synthetic, rng)

    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        if real.domain.attributes != synthetic.domain.attributes or real.domain.shape != synthetic.domain.shape:
            raise DataError("workload_error: real and synthetic tables have different domains")
        if real.n == 0 or synthetic.n == 0:
            raise DataError("workload_error: a table is empty")
        names = real.domain.attributes
        self._check_workload(names)
        if self.config.workload is not None:
            errs = [l1_error(real, synthetic, tuple(m)) for m in self.config.workload]
            return {"l1_workload": _mean(errs), "l1_max": float(np.max(errs))}
        out, every = {}, []
        for k in self.config.ways:
            subsets = distinct_subsets(len(names), k, self.config.marginals, rng)
            errs = [l1_error(real, synthetic, tuple(names[i] for i in s)) for s in subsets]
            out[f"l1_{k}way"] = _mean(errs)
            every += errs
        out["l1_mean"], out["l1_max"] = _mean(every), float(np.max(every))
        return out


def _mean(errs: list[float]) -> float:
    """The mean, never a rounding step above the largest error (Hypothesis found mean = max + 1 ulp)."""
    return min(float(np.mean(errs)), float(np.max(errs)))
