"""Registers the cross-machine commands `vertisynth party ...` and `vertisynth server` (entry point `deploy`)
and the shared config's `[roster]` table (every participant's pinned public key)."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import CommandSpec, SectionSpec


@hookimpl
def vertisynth_commands():
    return [CommandSpec("party", "vertisynth.deploy.cli:party", summary="one party's side of a cross-machine run"),
            CommandSpec("server", "vertisynth.deploy.cli:server", summary="the server's side: messages only"),
            CommandSpec("flower", "vertisynth.deploy.flower.cli:flower", summary="run across organisations on Flower")]


@hookimpl
def vertisynth_config_sections():
    return [SectionSpec("roster", None, "vertisynth.core.identity:RosterConfig",
                        "the participants' pinned Ed25519 public keys")]
