"""Built-in synthesizers."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import SynthesizerSpec


@hookimpl
def vertisynth_synthesizers():
    return [
        SynthesizerSpec(
            "independent",
            "vertisynth.plugins.synthesizers.independent:IndependentSynthesizer",
            "vertisynth.plugins.synthesizers.independent:IndependentConfig",
            "baseline: DP 1-way marginals per party, columns sampled independently",
            {"vertical"},
        ),
    ]
