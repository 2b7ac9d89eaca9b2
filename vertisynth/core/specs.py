"""Descriptors that plugins return from their hooks. `factory` may be "module:attr" to keep imports lazy."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar

import attrs

from .errors import PluginError


def resolve(ref: Any, what: str) -> Any:
    """Import "module:attr" strings; pass objects through."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise PluginError(f"{what} reference {ref!r} must look like 'package.module:Name'")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"cannot load {what} {ref!r}: {exc}") from exc
    return obj


@attrs.frozen
class ComponentSpec:
    kind: ClassVar[str] = "component"
    name: str
    factory: Callable[..., Any] | str
    config_cls: type | str | None = None
    summary: str = ""
    capabilities: frozenset[str] = attrs.field(factory=frozenset, converter=frozenset)

    def load_factory(self) -> Callable[..., Any]:
        return resolve(self.factory, f"{self.kind} {self.name!r} factory")

    def load_config_cls(self) -> type | None:
        return resolve(self.config_cls, f"{self.kind} {self.name!r} config class") if self.config_cls else None


@attrs.frozen
class EncoderSpec(ComponentSpec):
    kind: ClassVar[str] = "encoder"


@attrs.frozen
class AlignerSpec(ComponentSpec):
    kind: ClassVar[str] = "aligner"


@attrs.frozen
class SynthesizerSpec(ComponentSpec):
    """capabilities: "vertical" (works party-wise) or "centralized" (needs the joined table); "horizontal":
    fits from noisy marginals alone (MeasuresMarginals), so it runs across horizontal custodians ([collab])."""

    kind: ClassVar[str] = "synthesizer"


@attrs.frozen
class EvaluatorSpec(ComponentSpec):
    """Metric metadata as in SDMetrics: which direction is better and the range of values."""

    kind: ClassVar[str] = "evaluator"
    goal: str = attrs.field(default="minimize", validator=attrs.validators.in_(["minimize", "maximize"]))
    min_value: float = 0.0
    max_value: float = float("inf")


@attrs.frozen
class DatasetSpec(ComponentSpec):
    """factory(config, data_dir) -> LoadedData. `config_cls` structures [dataset] params."""

    kind: ClassVar[str] = "dataset"


@attrs.frozen
class SectionSpec(ComponentSpec):
    """A top-level config table owned by a part of the application (e.g. `[study]`): `config_cls` structures
    it with the same strictness as the rest of the config. `factory` is unused (pass None)."""

    kind: ClassVar[str] = "section"


@attrs.frozen
class RunModeSpec(ComponentSpec):
    """A run mode chosen when the config holds the table named `name` (e.g. `[collab]`).

    factory(config, registry, data_dir, source) -> a plan object with `execute(output_dir, progress)`, a
    `ledger` and `who()` (who holds the data, one line); `config_cls` structures the mode's table."""

    kind: ClassVar[str] = "run_mode"


@attrs.frozen
class CommandSpec(ComponentSpec):
    """A CLI command or group (a click object, or "module:attr") that a part adds under `vertisynth`."""

    kind: ClassVar[str] = "command"


SPEC_KINDS: dict[str, tuple[str, type[ComponentSpec]]] = {
    "encoder": ("vertisynth_encoders", EncoderSpec),
    "aligner": ("vertisynth_aligners", AlignerSpec),
    "synthesizer": ("vertisynth_synthesizers", SynthesizerSpec),
    "evaluator": ("vertisynth_evaluators", EvaluatorSpec),
    "dataset": ("vertisynth_datasets", DatasetSpec),
    "section": ("vertisynth_config_sections", SectionSpec),
    "run_mode": ("vertisynth_run_modes", RunModeSpec),
    "command": ("vertisynth_commands", CommandSpec),
}
