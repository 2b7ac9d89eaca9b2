"""Hook specifications: one hook per plugin kind, each returning descriptors (see `specs`).

A plugin module implements any of these with `@vertisynth.hookimpl` and is registered through
the `vertisynth` entry-point group, like the built-ins:

    [project.entry-points.vertisynth]
    my_plugin = "my_package.plugin_module"
"""
from __future__ import annotations

from collections.abc import Iterable

import pluggy

from .specs import AlignerSpec, DatasetSpec, EncoderSpec, EvaluatorSpec, SynthesizerSpec

PROJECT = "vertisynth"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def vertisynth_encoders() -> Iterable[EncoderSpec]:
    """Encoders: party-side `encode` to a message, server-side `estimate` of marginals."""


@hookspec
def vertisynth_aligners() -> Iterable[AlignerSpec]:
    """Alignment protocols that put the parties' rows in one common order (PSI, PSU...)."""


@hookspec
def vertisynth_synthesizers() -> Iterable[SynthesizerSpec]:
    """Synthesizers: fit on parties' data under a privacy budget, sample synthetic records."""


@hookspec
def vertisynth_evaluators() -> Iterable[EvaluatorSpec]:
    """Evaluators: score a synthetic table against real data."""


@hookspec
def vertisynth_datasets() -> Iterable[DatasetSpec]:
    """Datasets by name: loaders returning a raw table and its public schema."""
