"""Run configuration: TOML → attrs classes, with unknown keys and wrong types rejected by name.

Shape (see README):
    seed = 7
    budget = { epsilon = 1.6, delta = 1e-5 }
    [dataset]            name = "census", params = {...}
    [[parties]]          name = "...", attributes = [...]       (optional: the dataset's default split)
    [alignment]          use = "positional", params = {...}
    [synthesizer]        use = "independent", params = {...}
    [[evaluators]]       use = "tvd", params = {...}
"""
from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from .errors import ConfigError, VertisynthError, choices_text, suggest
from .privacy import Budget


def _strict_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)

    def s_int(v: Any, _t: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"expected an integer, got {v!r}")
        return v

    def s_float(v: Any, _t: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"expected a number, got {v!r}")
        return float(v)

    def s_str(v: Any, _t: Any) -> str:
        if not isinstance(v, str):
            raise TypeError(f"expected a string, got {v!r}")
        return v

    def s_bool(v: Any, _t: Any) -> bool:
        if not isinstance(v, bool):
            raise TypeError(f"expected true or false, got {v!r}")
        return v

    conv.register_structure_hook(int, s_int)
    conv.register_structure_hook(float, s_float)
    conv.register_structure_hook(str, s_str)
    conv.register_structure_hook(bool, s_bool)
    return conv


CONVERTER = _strict_converter()


def _format(exc: BaseException, _type: Any) -> str:
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        valid = [f.name for f in attrs.fields(exc.cl)]
        parts = [f"unknown key {k!r}{suggest(k, valid)}" for k in sorted(exc.extra_fields)]
        return "; ".join(parts) + f"; valid keys: {choices_text(valid)}"
    if isinstance(exc, KeyError):
        return f"required key {exc.args[0]!r} is missing"
    if isinstance(exc, VertisynthError):
        return str(exc)
    return f"{exc}"


def structure(data: Any, cls: type, where: str) -> Any:
    """Structure `data` into `cls`, raising ConfigError with every problem and where it is."""
    if data is None:
        data = {}
    if attrs.has(cls) and not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a table of settings, got {data!r}")
    try:
        return CONVERTER.structure(data, cls)
    except VertisynthError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
        if isinstance(exc, cattrs.BaseValidationError):
            msgs = cattrs.transform_error(exc, path="", format_exception=_format)
        else:
            msgs = [str(exc)]
        lines = []
        for m in msgs:
            text, _, loc = m.partition(" @ ")
            loc = loc.lstrip(".")
            lines.append(f"{where}{'.' + loc if loc else ''}: {text}")
        raise ConfigError("\n".join(lines)) from None


@attrs.frozen
class BudgetConfig:
    epsilon: float
    delta: float = 0.0

    def to_budget(self) -> Budget:
        return Budget(self.epsilon, self.delta)


@attrs.frozen
class ComponentConfig:
    use: str
    params: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class DatasetConfig:
    name: str = "census"
    params: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class PartyConfig:
    attributes: list[str]
    name: str | None = None


@attrs.frozen
class EvaluationConfig:
    """holdout: fraction of the records kept away from the synthesizer (seeded split) for evaluators that
    score against unseen data (ml_utility, svm_misclassification; tvd then scores against it too)."""

    holdout: float = 0.0

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.holdout < 1:
            raise ConfigError(f"evaluation.holdout must be in [0, 1), got {self.holdout}")


@attrs.frozen
class StudyConfig:
    """A comparison grid, run by the study runner; `vertisynth run` runs the base config once."""

    grid: dict[str, list[Any]] = attrs.field(factory=dict)
    repeats: int = 1
    quick: dict[str, Any] | None = None   # smaller CI variant: {grid, repeats, set} (vertisynth.study.grid)
    scheduler: str | None = None          # tcp://host:port of a Dask cluster; None runs locally with joblib
    n_jobs: int = -1                      # local joblib workers


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


@attrs.frozen
class RunConfig:
    budget: BudgetConfig
    seed: int = 0
    dataset: DatasetConfig = attrs.field(factory=DatasetConfig)
    parties: list[PartyConfig] | None = None
    alignment: ComponentConfig = attrs.field(factory=lambda: ComponentConfig("positional"))
    synthesizer: ComponentConfig = attrs.field(factory=lambda: ComponentConfig("independent"))
    evaluators: list[ComponentConfig] = attrs.field(factory=lambda: [ComponentConfig("tvd")])
    evaluation: EvaluationConfig = attrs.field(factory=EvaluationConfig)
    sample_size: int | None = None
    output: str | None = None
    study: StudyConfig | None = None
    collab: CollabConfig | None = None

    def to_dict(self) -> dict[str, Any]:
        return CONVERTER.unstructure(self)


def parse_config(data: Mapping[str, Any], where: str = "config") -> RunConfig:
    if "budget" not in data:
        raise ConfigError(f"{where}: a privacy budget is required, e.g. budget = {{ epsilon = 1.0, delta = 1e-5 }}")
    cfg = structure(dict(data), RunConfig, where)
    try:
        cfg.budget.to_budget()
    except VertisynthError as exc:
        raise ConfigError(f"{where}.budget: {exc}") from None
    if cfg.sample_size is not None and cfg.sample_size < 1:
        raise ConfigError(f"{where}.sample_size: must be >= 1, got {cfg.sample_size}")
    return cfg


def load_config(path: str | Path) -> RunConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    return parse_config(data, where=path.name)


DEFAULT_CONFIG_TOML = """\
# The offline default: the built-in census-like population, two parties, VertiMRF with DP FM sketches.
seed = 0
budget = { epsilon = 1.0, delta = 1e-5 }

[dataset]
name = "census"
params = { n = 20000 }

# parties: the dataset's default split (registry | employer) unless listed here with [[parties]]

[alignment]
use = "positional"

[synthesizer]
use = "vertimrf"
params = { encoder = "dpfm" }

[evaluation]
holdout = 0.2          # records kept from the synthesizer, for scoring on unseen data

[[evaluators]]
use = "tvd"
params = { ways = [2, 3, 4], marginals = 100 }

[[evaluators]]
use = "ml_utility"
params = { label = "income" }
"""


def default_config() -> RunConfig:
    return parse_config(tomllib.loads(DEFAULT_CONFIG_TOML), where="default config")
