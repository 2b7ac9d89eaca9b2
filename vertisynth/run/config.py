"""Run configuration: TOML → attrs classes, with unknown keys and wrong types rejected by name.

Shape (see README):
    seed = 7
    budget = { epsilon = 1.6, delta = 1e-5 }
    noise = "simulation"  # or "secure" (discrete noise from the OS CSPRNG); unset: the role's default
    [dataset]            name = "census", params = {...}
    [[parties]]          name = "...", attributes = [...]       (optional: the dataset's default split)
    [alignment]          use = "positional", params = {...}
    [synthesizer]        use = "vertimrf", params = {...}   (the default; "independent" is the baseline)
    [[evaluators]]       use = "tvd", params = {...}
"""
from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from vertisynth.core.envelope import fingerprint
from vertisynth.core.errors import ConfigError, VertisynthError, choices_text, suggest
from vertisynth.core.privacy import NOISE_KINDS, Budget
from vertisynth.core.registry import Registry, default_registry
from vertisynth.core.structuring import CONVERTER, structure


DEFAULT_SYNTHESIZER = "vertimrf"


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
class EvaluatorConfig(ComponentConfig):
    """[[evaluators]]: `as` names the entry's metrics (default: `use`), so one evaluator can be listed twice
    with different params (`use = "tvd", as = "tvd_3way"`); two entries with the same name are refused."""

    alias: str | None = None
    toml_keys: ClassVar[dict[str, str]] = {"alias": "as"}


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
class RunConfig:
    budget: BudgetConfig
    seed: int = 0
    dataset: DatasetConfig = attrs.field(factory=DatasetConfig)
    parties: list[PartyConfig] | None = None
    alignment: ComponentConfig = attrs.field(factory=lambda: ComponentConfig("positional"))
    # the one default everywhere (the API's too): the vertical protocol; `independent` is a baseline, chosen by name
    synthesizer: ComponentConfig = attrs.field(factory=lambda: ComponentConfig(DEFAULT_SYNTHESIZER))
    evaluators: list[EvaluatorConfig] = attrs.field(factory=lambda: [EvaluatorConfig("tvd")])
    evaluation: EvaluationConfig = attrs.field(factory=EvaluationConfig)
    sample_size: int | None = None
    # rows sampled, decoded and (stream = true) written at a time; unset: pgm's SAMPLE_BLOCK_ROWS (docs/scale.md)
    sample_block_rows: int | None = None
    output: str | None = None
    noise: str | None = None       # "secure" | "simulation"; unset: each role's default (`noise_for`)
    stream: bool = False           # read each party's columns of the dataset's file in chunks (docs/scale.md)
    sections: dict[str, Any] = attrs.field(factory=dict)   # tables owned by other parts ([study], [collab]...)

    def __attrs_post_init__(self) -> None:
        if self.seed < 0:   # numpy's SeedSequence takes only non-negative integers
            raise ConfigError(f"seed must be a non-negative integer, got {self.seed}")

    def section(self, name: str) -> Any:
        """The structured table `name` (e.g. "collab"), or None when the config has none."""
        return self.sections.get(name)

    def to_dict(self) -> dict[str, Any]:
        d = CONVERTER.unstructure(self)
        d.pop("sections")
        if not d.get("stream"):   # unset: configs (and their fingerprints) read as before the setting existed
            d.pop("stream", None)
        if d.get("sample_block_rows") is None:
            d.pop("sample_block_rows", None)
        d.update({k: CONVERTER.unstructure(v) for k, v in self.sections.items()})
        return d

    def resolved(self, **known: Any) -> dict[str, Any]:
        """The config as a report writes it: a field left unset takes the value the run resolved it to
        (`known`, e.g. sample_size=rows drawn, noise="secure"), and one with none is left out, at any depth:
        no null in a report's config. (`to_dict` keeps the nulls: fingerprints hash it.)"""
        d = self.to_dict()
        d.update({k: v for k, v in known.items() if d.get(k) is None})
        return _without_nulls(d)


def _without_nulls(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _without_nulls(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_without_nulls(v) for v in x]
    return x


def _rename_as() -> None:
    """TOML's `as` (a Python keyword) is the `alias` field."""
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

    CONVERTER.register_structure_hook(EvaluatorConfig, make_dict_structure_fn(
        EvaluatorConfig, CONVERTER, _cattrs_forbid_extra_keys=True, alias=override(rename="as")))
    CONVERTER.register_unstructure_hook(EvaluatorConfig, make_dict_unstructure_fn(
        EvaluatorConfig, CONVERTER, alias=override(rename="as", omit_if_default=True)))


_rename_as()


def section_classes(registry: Registry | None = None) -> dict[str, type]:
    """Config tables the installed parts own (run modes' tables included): name -> attrs class."""
    reg = registry or default_registry()
    return {name: reg.get(kind, name).load_config_cls() for kind in ("section", "run_mode") for name in reg.names(kind)}


def parse_config(data: Mapping[str, Any], where: str = "config", registry: Registry | None = None) -> RunConfig:
    if "budget" not in data:
        raise ConfigError(f"{where}: a privacy budget is required, e.g. budget = {{ epsilon = 1.0, delta = 1e-5 }}")
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a table of settings, got {data!r}")
    owned = section_classes(registry)
    base = {k: v for k, v in data.items() if k not in owned}
    known = [f.name for f in attrs.fields(RunConfig) if f.name != "sections"] + sorted(owned)
    unknown = [k for k in base if k not in known or k == "sections"]
    if unknown:
        raise ConfigError(f"{where}: " + "; ".join(f"unknown key {k!r}{suggest(k, known)}" for k in sorted(unknown))
                          + f"; valid keys: {choices_text(known)}")
    sections = {k: structure(v, owned[k], f"{where}.{k}") for k, v in data.items() if k in owned}
    cfg = attrs.evolve(structure(base, RunConfig, where), sections=sections)
    try:
        cfg.budget.to_budget()
    except VertisynthError as exc:
        raise ConfigError(f"{where}.budget: {exc}") from None
    if cfg.sample_size is not None and cfg.sample_size < 1:
        raise ConfigError(f"{where}.sample_size: must be >= 1, got {cfg.sample_size}")
    if cfg.sample_block_rows is not None and cfg.sample_block_rows < 1:
        raise ConfigError(f"{where}.sample_block_rows: must be >= 1, got {cfg.sample_block_rows}")
    if cfg.noise is not None and cfg.noise not in NOISE_KINDS:
        raise ConfigError(f"{where}.noise: must be one of {list(NOISE_KINDS)}, got {cfg.noise!r}"
                          f"{suggest(str(cfg.noise), list(NOISE_KINDS))}")
    return cfg


# datasets that hold no one's real records (generated, or public benchmarks): a one-process run on them is a
# study or a demo and draws the reproducible simulation noise unless the config says otherwise
SIMULATION_DATASETS = frozenset({"census", "zoo", "nltcs", "adult"})


def noise_for(config: RunConfig, cross_machine: bool, user_data: bool = False) -> str:
    """The noise a role draws: the config's `noise`, else "secure" for the cross-machine roles (party synth,
    party align, collab custodian/server: `cross_machine` is False only under a test secret) and for a
    one-process run on the user's own data (`user_data`: csv, party_csv, the API's DataFrames, a plugin's
    dataset; `uses_user_data`), "simulation" for one-process runs on the built-in or benchmark data (studies,
    the default job) and for a simulation of a deployment under a test secret. Every output names it."""
    if config.noise is not None:
        return config.noise
    return "secure" if cross_machine or user_data else "simulation"


def uses_user_data(config: RunConfig) -> bool:
    """Whether the config's dataset holds someone's real records (anything but the built-in or benchmark data)."""
    return config.dataset.name not in SIMULATION_DATASETS


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
use = "tvd"             # the default: 300 random 2-, 3- and 4-way marginals

[[evaluators]]
use = "ml_utility"
params = { label = "income" }
"""


def default_config() -> RunConfig:
    return parse_config(tomllib.loads(DEFAULT_CONFIG_TOML), where="default config")


def public_config(config: RunConfig) -> dict[str, Any]:
    """The config as every role reads it (plain JSON values): what a run's fingerprint is taken over. A collab
    custodian's CSV path (`collab.files`) is local to its machine: every role sees it blank."""
    d = json.loads(json.dumps(config.to_dict(), default=str))
    files = (d.get("collab") or {}).get("files")
    if isinstance(files, dict):
        d["collab"]["files"] = {k: "" for k in files}
    return d


def config_fingerprint(config: RunConfig) -> str:
    """The run's config fingerprint: bound into every envelope and into a signed model file."""
    return fingerprint(public_config(config))
