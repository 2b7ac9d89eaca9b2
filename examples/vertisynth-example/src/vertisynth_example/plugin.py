"""Hook implementations: the only module vertisynth loads through the entry point.

Heavy imports stay lazy: the specs name their classes as "module:Class" strings.
"""
from vertisynth import hookimpl
from vertisynth.core.specs import EvaluatorSpec, SynthesizerSpec


@hookimpl
def vertisynth_synthesizers():
    return [SynthesizerSpec("example_uniform", "vertisynth_example.components:UniformSynthesizer",
                            "vertisynth_example.components:UniformConfig",
                            "example: uniform columns, DP record count", {"vertical"})]


@hookimpl
def vertisynth_evaluators():
    return [EvaluatorSpec("oneway_tvd", "vertisynth_example.components:OneWayTVD", None,
                          "example: average TVD of 1-way marginals", goal="minimize", min_value=0.0, max_value=1.0)]
