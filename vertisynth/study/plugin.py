"""Registers the [study] config table and the `vertisynth study` command (entry point `study`)."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import CommandSpec, SectionSpec


@hookimpl
def vertisynth_config_sections():
    return [SectionSpec("study", None, "vertisynth.study.config:StudyConfig", "a comparison grid")]


@hookimpl
def vertisynth_commands():
    return [CommandSpec("study", "vertisynth.study.cli:study", summary="run or resume a comparison study")]
