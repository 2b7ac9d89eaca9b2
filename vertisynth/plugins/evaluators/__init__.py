"""Built-in evaluators."""
from vertisynth.core.hookspecs import hookimpl
from vertisynth.core.specs import EvaluatorSpec


@hookimpl
def vertisynth_evaluators():
    return [
        EvaluatorSpec("tvd", "vertisynth.plugins.evaluators.tvd:TVDEvaluator",
                      "vertisynth.plugins.evaluators.tvd:TVDConfig",
                      "average total variation distance over random k-way marginals",
                      {"symmetric"},  # tvd(real, synth) == tvd(synth, real): checked by vertisynth.testing
                      goal="minimize", min_value=0.0, max_value=1.0),
    ]
