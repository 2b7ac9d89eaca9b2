"""The capabilities the layers above plugins/ rely on are declared by the built-ins that offer them (checked with
isinstance, as the pipeline and the deploy driver check them), and absent where a configuration has none."""
from __future__ import annotations

import pytest

from vertisynth.core.capabilities import (AlignsAcrossMachines, AlignsRows, EvaluatesCounts, FitsInRounds,
                                          JointRounds, MeasuresAssociation, StageRounds)
from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget
from vertisynth.core.registry import default_registry
from vertisynth.run.pipeline import build_component

DOM = Domain(["a", "b", "c"], [3, 4, 2])
PART = VerticalPartition.from_lists([["a"], ["b", "c"]])
BUDGET = Budget(1.0, 1e-5)


def _component(kind: str, name: str, params: dict | None = None):
    return build_component(default_registry(), kind, name, params or {}, "test").instance


@pytest.mark.parametrize("name", ["psi", "psu"])
def test_private_set_aligners_align_rows_and_run_across_machines(name):
    aligner = _component("aligner", name)
    assert isinstance(aligner, AlignsRows) and isinstance(aligner, AlignsAcrossMachines)


def test_positional_alignment_declares_neither():
    aligner = _component("aligner", "positional")
    assert not isinstance(aligner, AlignsRows) and not isinstance(aligner, AlignsAcrossMachines)


def test_counts_only_evaluators_declare_it_and_row_readers_do_not():
    for name in ("tvd", "workload_error", "correlation"):
        assert isinstance(_component("evaluator", name), EvaluatesCounts), name
    for name in ("membership_attack", "ml_utility"):
        assert not isinstance(_component("evaluator", name), EvaluatesCounts), name
    assert isinstance(_component("evaluator", "correlation"), MeasuresAssociation)


def test_vertimrf_fits_in_rounds_with_the_he_encoder_only():
    import numpy as np

    from vertisynth.core.dataset import Dataset
    from vertisynth.core.privacy import PrivacyLedger

    he = _component("synthesizer", "vertimrf", {"encoder": "he", "encoder_params": {"crypto": "simulated"}})
    he.plan(PlanContext(DOM, PART, BUDGET))
    enc = he.joint_rounds()
    assert isinstance(he, FitsInRounds) and isinstance(enc, JointRounds)
    view = Dataset(np.zeros((5, 1), np.int64), DOM.project(["a"]))
    ledger = PrivacyLedger(BUDGET, noise="simulation")
    stage = enc.party_stage("party1", view, [], "selection", ledger, np.random.default_rng(0), False)
    assert isinstance(stage, StageRounds) and stage.rounds() == [] and not ledger.spent   # no queries: nothing
    dpfm = _component("synthesizer", "vertimrf", {"encoder": "dpfm"})
    dpfm.plan(PlanContext(DOM, PART, BUDGET))
    assert dpfm.joint_rounds() is None
