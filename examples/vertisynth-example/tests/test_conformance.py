"""How a third-party plugin tests itself with vertisynth's conformance kit.

Run from this folder's package root:  pytest tests  (add --vertisynth-audit=standard before a release).
"""
import numpy as np

from vertisynth.testing.checks import Subject, parametrize_with_checks
from vertisynth_example import plugin
from vertisynth_example.components import OneWayTVD, UniformConfig, UniformSynthesizer

SYNTH_SPEC = plugin.vertisynth_synthesizers()[0]
EVAL_SPEC = plugin.vertisynth_evaluators()[0]


def released_count(synth, data, ledger, rng):
    """The measurement step to audit: fit (the Laplace count), then the size of a default-size sample,
    which is all the data-dependent output there is (the columns are uniform)."""
    synth.fit(data, ledger, rng)
    return np.array([synth.sample(None, rng).n])


SUBJECTS = [
    Subject("synthesizer", SYNTH_SPEC.name, UniformSynthesizer, UniformConfig, {"min_records": 1}, SYNTH_SPEC,
            measure=released_count, audit_samples=5000, audit_pairs=1),
    Subject("evaluator", EVAL_SPEC.name, OneWayTVD, None, {}, EVAL_SPEC),
]

# Known failures are strict xfails: fix the component and the suite tells you to drop the entry.
KNOWN = {("evaluator", "oneway_tvd"): {
    "check_evaluator_rejects_mismatched_domains": "OneWayTVD does not compare domains; tables of "
                                                  "different domains raise a numpy broadcasting error"}}


@parametrize_with_checks(SUBJECTS, expected_failures=KNOWN)
def test_conformance(subject, check):
    check(subject)
