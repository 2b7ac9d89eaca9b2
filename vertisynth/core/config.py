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
