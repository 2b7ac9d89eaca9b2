"""Built-in alignment protocols."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import AlignerSpec


@hookimpl
def vertisynth_aligners():
    return [
        AlignerSpec("positional", "vertisynth.plugins.alignment.positional:PositionalAligner",
                    "vertisynth.plugins.alignment.positional:PositionalConfig",
                    "rows already aligned by position; checks equal row counts"),
    ]
