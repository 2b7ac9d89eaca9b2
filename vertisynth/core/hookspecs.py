"""Hook specifications: one hook per plugin kind, each returning descriptors (see `specs`).

A plugin module implements any of these with `@vertisynth.hookimpl` and is registered through
the `vertisynth` entry-point group, like the built-ins:

    [project.entry-points.vertisynth]
    my_plugin = "my_package.plugin_module"
"""
from __future__ import annotations

from collections.abc import Iterable

import pluggy

from .specs import (AlignerSpec, CommandSpec, DatasetSpec, EncoderSpec, EvaluatorSpec, RunModeSpec, SectionSpec,
                    SynthesizerSpec)

PROJECT = "vertisynth"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def vertisynth_encoders() -> Iterable[EncoderSpec]:
    """Encoders: party-side `encode` to a message, server-side `estimate` of marginals, e.g.
    `return [EncoderSpec("my_enc", "my_pkg.enc:MyEncoder", "my_pkg.enc:MyConfig", "summary", {"vertical"})]`."""


@hookspec
def vertisynth_aligners() -> Iterable[AlignerSpec]:
    """Alignment protocols that put the parties' rows in one common order (PSI, PSU...), e.g.
    `return [AlignerSpec("my_psi", "my_pkg.align:MyAligner", "my_pkg.align:MyConfig", "summary")]`."""


@hookspec
def vertisynth_synthesizers() -> Iterable[SynthesizerSpec]:
    """Synthesizers: fit on parties' data under a privacy budget, sample synthetic records, e.g.
    `return [SynthesizerSpec("my_synth", "my_pkg.synth:MySynth", "my_pkg.synth:MyConfig", "summary", {"vertical"})]`
    (docs/plugins.md has a runnable skeleton)."""


@hookspec
def vertisynth_evaluators() -> Iterable[EvaluatorSpec]:
    """Evaluators: score a synthetic table against real data, with SDMetrics-style metadata, e.g.
    `return [EvaluatorSpec("my_metric", "my_pkg.ev:MyEvaluator", None, "summary", goal="minimize",
    min_value=0.0, max_value=1.0)]`."""


@hookspec
def vertisynth_datasets() -> Iterable[DatasetSpec]:
    """Datasets by name: loaders returning a raw table and its public schema, e.g.
    `return [DatasetSpec("my_data", "my_pkg.data:load", "my_pkg.data:MyConfig", "summary")]` where
    load(config, data_dir) -> DatasetSource."""


@hookspec
def vertisynth_config_sections() -> Iterable[SectionSpec]:
    """Top-level config tables a part owns, e.g.
    `return [SectionSpec("study", None, "my_pkg.config:StudyConfig")]`."""


@hookspec
def vertisynth_run_modes() -> Iterable[RunModeSpec]:
    """Run modes chosen by a config table, e.g.
    `return [RunModeSpec("collab", "my_pkg.pipeline:make_plan", "my_pkg.config:CollabConfig")]`."""


@hookspec
def vertisynth_commands() -> Iterable[CommandSpec]:
    """CLI commands under `vertisynth`, e.g. `return [CommandSpec("study", "my_pkg.cli:study", summary="...")]`."""
