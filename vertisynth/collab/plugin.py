"""Registers the [collab] run mode and the `vertisynth collab` commands (entry point `collab`)."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import CommandSpec, RunModeSpec


@hookimpl
def vertisynth_run_modes():
    return [RunModeSpec("collab", "vertisynth.collab.pipeline:make_collab_plan", "vertisynth.collab.config:CollabConfig",
                        "horizontal custodians: marginals through secure aggregation (seed 004)")]


@hookimpl
def vertisynth_commands():
    return [CommandSpec("collab", "vertisynth.collab.cli:collab", summary="custodian, server and publisher roles")]
