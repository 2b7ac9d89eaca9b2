"""Built-in alignment protocols."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import AlignerSpec


@hookimpl
def vertisynth_aligners():
    return [
        AlignerSpec("positional", "vertisynth.plugins.alignment.positional:PositionalAligner",
                    "vertisynth.plugins.alignment.positional:PositionalConfig",
                    "rows already aligned by position; checks equal row counts"),
        AlignerSpec("psi", "vertisynth.plugins.alignment.private_sets:PSIAligner",
                    "vertisynth.plugins.alignment.private_sets:PSIConfig",
                    "m-party private set intersection on an ID column (ristretto255); reveals the intersection"),
        AlignerSpec("psu", "vertisynth.plugins.alignment.private_sets:PSUAligner",
                    "vertisynth.plugins.alignment.private_sets:PSUConfig",
                    "private set union (seed 001, Alg. 1, m parties) with synthetic fill; hides the intersection"),
    ]
