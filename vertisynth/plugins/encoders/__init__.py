"""Built-in encoders (DPFM, GRR) register here; see issue 5."""
from vertisynth.core.hookspecs import hookimpl


@hookimpl
def vertisynth_encoders():
    return []
