"""The wrapped model through vertisynth's conformance kit: declared cost equals the ledger's, a statistical
privacy audit of the noisy counts (the step that reads data), no global RNG, config round-trip."""
import numpy as np

from vertisynth.testing.checks import Subject, parametrize_with_checks
from vertisynth_wrapped import plugin
from vertisynth_wrapped.naive_bayes import NaiveBayesConfig, NaiveBayesSynthesizer

SPEC = plugin.vertisynth_synthesizers()[0]


def noisy_counts(synth, data, ledger, rng):
    """What the audit repeats: the Laplace-noised label x attribute tables, concatenated."""
    return np.concatenate([t.ravel() for t in synth.measure(data.joined(), ledger, rng)])


SUBJECTS = [Subject("synthesizer", SPEC.name, NaiveBayesSynthesizer, NaiveBayesConfig, {"alpha": 1.0}, SPEC,
                    measure=noisy_counts, audit_samples=3000, audit_pairs=1)]


@parametrize_with_checks(SUBJECTS)
def test_conformance(subject, check):
    check(subject)
