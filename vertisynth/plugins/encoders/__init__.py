"""Built-in encoders (DPFM, GRR): party-side encode + server-side marginal estimation (issue 5)."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import EncoderSpec


@hookimpl
def vertisynth_encoders():
    return [
        EncoderSpec(
            "dpfm",
            "vertisynth.plugins.encoders.dpfm:DPFMEncoder",
            "vertisynth.plugins.encoders.dpfm:DPFMConfig",
            "DP Flajolet-Martin sketches of each attribute value's id set (VertiMRF Sec. 4.3)",
            {"vertical"},
        ),
        EncoderSpec(
            "grr",
            "vertisynth.plugins.encoders.grr:GRREncoder",
            "vertisynth.plugins.encoders.grr:GRRConfig",
            "generalized randomized response per attribute, Kronecker-inverse estimates (VertiMRF Sec. 4.2)",
            {"vertical"},
        ),
        EncoderSpec(
            "he",
            "vertisynth.plugins.encoders.he.encoder:HEEncoder",
            "vertisynth.plugins.encoders.he.encoder:HEConfig",
            "cross-party marginals counted exactly under Paillier, two-sided discrete Gaussian noise",
            {"vertical"},
        ),
    ]
