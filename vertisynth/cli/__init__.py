"""The `vertisynth` command line: the root group and the run/validate/plugins/init commands (`main`); the parts
add their own groups (party, server, collab, study) through the `vertisynth_commands` hook."""
from .main import main

__all__ = ["main"]
