"""`vertisynth validate --rows N` prices the stages a twin asks (vertical/cost.py): private_pgm and dpsyn ask their
chosen pairs (private_pgm's workload: every marginal) through one `measure_many`, one protocol stage for their
cross-party ones, and the price counts as many stages, one answer each, as a run of the plan asks."""
import math

import pytest

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import execute, make_plan
from vertisynth.vertical.cost import answers
from vertisynth.vertical.link import InProcessLink

HE = {"measure": "he", "trust": "none", "params": {"crypto": "simulated"}}


@pytest.mark.parametrize("syn, params", [("private_pgm", {"iters": 30}),
                                         ("private_pgm", {"iters": 30, "measurements": "workload"}),
                                         ("dpsyn", {"rounds": 5}), ("dpsyn", {"rounds": 5, "selection": "greedy"}),
                                         ("mst", {"iters": 30})])
def test_the_price_counts_the_stages_a_run_of_the_plan_asks(monkeypatch, syn, params):
    stages = []
    cross = InProcessLink.cross

    def counted(self, queries, sigma, spends):
        stages.append(len(queries))
        return cross(self, queries, sigma, spends)
    monkeypatch.setattr(InProcessLink, "cross", counted)
    plan = make_plan(parse_config({
        "seed": 2, "budget": {"epsilon": 1.0, "delta": 1e-9},
        "dataset": {"name": "zoo", "params": {"preset": "small-domains", "n": 3000}},
        "synthesizer": {"use": syn, "params": {**params, "vertical": HE}},
        "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 10}}]}))
    domain = plan.synthesizer.instance._domain
    asked, count = answers(domain, plan.partition, 4, list(plan.ledger.planned),
                           lambda rho: math.sqrt(1 / (2 * rho)))
    execute(plan)
    assert len(asked) == len(stages), ([len(a["queries"]) for a in asked], stages)
    assert count["stages"] == len(asked)
    # the last stage is the chosen pairs' (the workload's): priced as one answer of about as many tables
    assert len(asked[-1]["queries"]) > 1 and abs(len(asked[-1]["queries"]) - stages[-1]) <= max(2, stages[-1] // 2)
