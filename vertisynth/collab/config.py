"""The `[collab]` table of a config: horizontal custodians (seed 004), validated as strictly as the rest."""
from __future__ import annotations

from typing import Any

import attrs

from vertisynth.core.errors import ConfigError


@attrs.frozen
class CollabTuningConfig:
    """[collab.tuning]: K-fold evaluation of a hyperparameter grid, custodian thresholds with a vote,
    then one final run on all data (the only release). See vertisynth.collab.tuning.

    method: "private_selection" (sound, default: Papernot–Steinke random search, accounted),
            "compose_all" (sound: every candidate's DP score, composed), "paper" (seed 004: tuning not
            accounted — NOT sound).
    grid: {synthesizer param or "bins" = [values]}; metric: "evaluator.metric" the vote is on (paper: any
    evaluator, scored on real folds; sound methods: the DP workload error, "dp_workload.l1").
    thresholds: {custodian = threshold on the metric}; vote: "all" (unanimous, as in the paper) or "majority".
    fraction: share of the budget's ρ the sound methods spend on tuning (the rest: the final run);
    score_fraction: share of that for the DP test-fold marginals; expected_runs: μ of the Poisson number of
    candidate runs (default: the number of candidates).
    """

    method: str = "private_selection"
    folds: int = 3
    grid: dict[str, list[Any]] = attrs.field(factory=dict)
    metric: str = "dp_workload.l1"
    metric_params: dict[str, Any] = attrs.field(factory=dict)
    thresholds: dict[str, float] = attrs.field(factory=dict)
    vote: str = "all"
    fraction: float = 0.3
    score_fraction: float = 0.2
    expected_runs: float | None = None
    score_workload: list[list[str]] | None = None

    def __attrs_post_init__(self) -> None:
        if self.method not in ("private_selection", "compose_all", "paper"):
            raise ConfigError(f"collab.tuning.method must be 'private_selection', 'compose_all' or 'paper', "
                              f"got {self.method!r}")
        if self.folds < 2:
            raise ConfigError(f"collab.tuning.folds must be >= 2, got {self.folds}")
        if self.vote not in ("all", "majority"):
            raise ConfigError(f"collab.tuning.vote must be 'all' or 'majority', got {self.vote!r}")
        if not 0 < self.fraction < 1 or not 0 < self.score_fraction < 1:
            raise ConfigError("collab.tuning.fraction and score_fraction must be in (0, 1)")
        if self.expected_runs is not None and not self.expected_runs > 0:
            raise ConfigError("collab.tuning.expected_runs must be > 0")
        for k, v in self.grid.items():
            if not isinstance(v, list) or not v:
                raise ConfigError(f"collab.tuning.grid.{k}: expected a non-empty list of values, got {v!r}")


@attrs.frozen
class CollabConfig:
    """[collab]: horizontal custodians (same columns, different people; seed 004). Marginals reach the
    synthesizer only through secure aggregation with distributed Gaussian noise. See docs/collab.md.

    custodians/split: simulate custodians from the dataset's table ("random", or "sorted:<column>" for
    non-identically distributed custodians); files: {custodian = CSV} with the dataset's columns instead.
    numeric: {column = [low, high]} public bounds of columns binned at DP quantiles into `bins` bins,
    "combined" over all custodians (secure aggregation) or "local" (each custodian alone);
    debinning: "mean" (DP bin means, the paper) or "uniform" (a uniform value inside the bin).
    """

    custodians: int = 2
    split: str = "random"
    files: dict[str, str] | None = None
    servers: int = 2
    preprocessing: str = "combined"
    numeric: dict[str, list[float]] = attrs.field(factory=dict)
    bins: int = 4
    preprocessing_fraction: float = 0.1
    debinning: str = "mean"
    tuning: CollabTuningConfig | None = None

    def __attrs_post_init__(self) -> None:
        if self.files is None and self.custodians < 2:
            raise ConfigError(f"collab.custodians must be >= 2, got {self.custodians}")
        if self.files is not None and len(self.files) < 2:
            raise ConfigError(f"collab.files needs a CSV for each of at least two custodians, got {sorted(self.files)}")
        if self.split != "random" and not self.split.startswith("sorted:"):
            raise ConfigError(f"collab.split must be 'random' or 'sorted:<column>', got {self.split!r}")
        if self.servers < 2:
            raise ConfigError(f"collab.servers must be >= 2 (secure aggregation), got {self.servers}")
        if self.preprocessing not in ("combined", "local"):
            raise ConfigError(f"collab.preprocessing must be 'combined' or 'local', got {self.preprocessing!r}")
        if self.debinning not in ("mean", "uniform"):
            raise ConfigError(f"collab.debinning must be 'mean' or 'uniform', got {self.debinning!r}")
        if self.bins < 2:
            raise ConfigError(f"collab.bins must be >= 2, got {self.bins}")
        if self.numeric and not 0 < self.preprocessing_fraction < 1:
            raise ConfigError("collab.preprocessing_fraction must be in (0, 1)")
        for c, b in self.numeric.items():
            if len(b) != 2 or not b[0] < b[1]:
                raise ConfigError(f"collab.numeric.{c}: public bounds must be [low, high] with low < high, got {b}")
