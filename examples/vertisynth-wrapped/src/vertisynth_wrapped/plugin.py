"""Hook implementations; the model module is imported only when the synthesizer is used."""
from vertisynth import hookimpl
from vertisynth.core.specs import SynthesizerSpec


@hookimpl
def vertisynth_synthesizers():
    return [SynthesizerSpec("nb_synth", "vertisynth_wrapped.naive_bayes:NaiveBayesSynthesizer",
                            "vertisynth_wrapped.naive_bayes:NaiveBayesConfig",
                            "example: scikit-learn CategoricalNB fitted from Laplace-noised label x attribute counts",
                            {"centralized"})]
