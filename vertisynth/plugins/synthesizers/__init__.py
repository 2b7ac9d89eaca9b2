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
        SynthesizerSpec(
            "dpsyn",
            "vertisynth.plugins.synthesizers.dpsyn.synthesizer:DPSynSynthesizer",
            "vertisynth.plugins.synthesizers.dpsyn.synthesizer:DPSynConfig",
            "DPSyn: noisy 2-way marginals, consistency, gradual record updates (centralised)",
            {"centralized"},
        ),
    ]
