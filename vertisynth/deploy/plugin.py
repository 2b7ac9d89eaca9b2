"""Registers the cross-machine commands `vertisynth party ...` and `vertisynth server` (entry point `deploy`)."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import CommandSpec


@hookimpl
def vertisynth_commands():
    return [CommandSpec("party", "vertisynth.deploy.cli:party", summary="one party's side of a cross-machine run"),
            CommandSpec("server", "vertisynth.deploy.cli:server", summary="the server's side: messages only")]
