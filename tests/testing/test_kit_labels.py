"""The conformance kit: expected failures keyed by a params variant's label, and the cheap-plan check."""
import pytest

from vertisynth.plugins.synthesizers.independent import IndependentConfig, IndependentSynthesizer
from vertisynth.testing.checks import ConformanceError, Subject, check_plan_is_cheap, parametrize_with_checks


def _subjects():
    return [Subject("synthesizer", "independent", IndependentSynthesizer, IndependentConfig, {"mechanism": m})
            for m in ("gaussian", "laplace")]


def test_expected_failures_and_skips_pick_one_params_variant():
    mark = parametrize_with_checks(_subjects(), skip={"synthesizer:independent[mechanism=laplace]": {
        "check_privacy_audit": "variant reason"}, ("synthesizer", "independent"): {"check_privacy_audit": "all"}})
    params = mark.args[1]
    reasons = {p.id: [m.kwargs.get("reason") for m in p.marks] for p in params if p.id.endswith("check_privacy_audit")}
    assert reasons == {"synthesizer:independent[mechanism=gaussian]-check_privacy_audit": ["all"],
                       "synthesizer:independent[mechanism=laplace]-check_privacy_audit": ["variant reason"]}


class SlowPlan(IndependentSynthesizer):
    def plan(self, ctx):
        import time
        t0 = time.process_time()
        while time.process_time() - t0 < 0.2:   # a plan() that fits something: what the check exists for
            pass
        return super().plan(ctx)


def test_a_slow_plan_fails_the_cheap_plan_check():
    check_plan_is_cheap(_subjects()[0])
    with pytest.raises(ConformanceError, match="ms of CPU per call"):
        check_plan_is_cheap(Subject("synthesizer", "slow", SlowPlan, IndependentConfig))
