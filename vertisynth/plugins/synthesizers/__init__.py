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
            {"centralized", "horizontal"},
        ),
        SynthesizerSpec(
            "private_pgm",
            "vertisynth.plugins.synthesizers.private_pgm:PrivatePGMSynthesizer",
            "vertisynth.plugins.synthesizers.private_pgm:PrivatePGMConfig",
            "Private-PGM select-measure-generate (MST or a marginal workload), centralised",
            {"centralized", "horizontal"},
        ),
        SynthesizerSpec(
            "aim",
            "vertisynth.plugins.synthesizers.aim:AIMSynthesizer",
            "vertisynth.plugins.synthesizers.aim:AIMConfig",
            "AIM: adaptive, iterative select-measure-generate over a marginal workload (McKenna et al. 2022)",
            {"centralized"},
        ),
        SynthesizerSpec(
            "mst",
            "vertisynth.plugins.synthesizers.mst:MSTSynthesizer",
            "vertisynth.plugins.synthesizers.mst:MSTConfig",
            "MST: 1-ways, a private maximum spanning tree of pairs, Private-PGM (McKenna et al. 2021)",
            {"centralized"},
        ),
        SynthesizerSpec(
            "privmrf",
            "vertisynth.plugins.synthesizers.privmrf.synthesizer:PrivMRFSynthesizer",
            "vertisynth.plugins.synthesizers.privmrf.synthesizer:PrivMRFConfig",
            "PrivMRF: DP Markov random field with R-score graph and refinement (centralised)",
            {"centralized"},
        ),
        SynthesizerSpec(
            "vertimrf",
            "vertisynth.plugins.synthesizers.vertimrf.synthesizer:VertiMRFSynthesizer",
            "vertisynth.plugins.synthesizers.vertimrf.synthesizer:VertiMRFConfig",
            "VertiMRF: local PrivMRFs + DP FM sketches (or GRR) across parties, global MRF at the server",
            {"vertical"},
        ),
    ]
