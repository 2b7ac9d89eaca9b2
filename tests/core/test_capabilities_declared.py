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


def test_encoders_declare_their_chunking_cluster_early_map_buffer_and_phantoms():
    """Issue 33 (robust7): what VertiMRF's party phase and encode_csv read of an encoder is declared (before, each was a
    defaulted getattr probe of its config or params: tests/architecture/test_layers.py now covers plugins/)."""
    from vertisynth.core.capabilities import BuffersBlocks, ChunksOnCluster, CountsPhantoms, MapsEarly
    from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFConfig, VertiMRFSynthesizer

    dpfm = _component("encoder", "dpfm", {"chunk_rows": 77, "dask_scheduler": "tcp://10.0.0.5:8786", "block_mb": 4.0})
    assert all(isinstance(dpfm, c) for c in (ChunksOnCluster, MapsEarly, BuffersBlocks, CountsPhantoms))
    assert (dpfm.chunk_rows, dpfm.dask_scheduler, dpfm.block_mb, dpfm.k_p) == (77, "tcp://10.0.0.5:8786", 4.0, None)
    grr = _component("encoder", "grr", {"chunk_rows": 55})
    assert isinstance(grr, ChunksOnCluster) and (grr.chunk_rows, grr.dask_scheduler) == (55, None)
    assert not any(isinstance(grr, c) for c in (MapsEarly, BuffersBlocks, CountsPhantoms))
    he = _component("encoder", "he", {"chunk_rows": 33})
    assert isinstance(he, ChunksOnCluster) and (he.chunk_rows, he.dask_scheduler) == (33, None)
    # the synthesizer reads them through the capabilities: the same values as the configs' fields
    syn = VertiMRFSynthesizer(VertiMRFConfig(encoder="dpfm", encoder_params={"chunk_rows": 77, "t": 32}))
    syn.plan(PlanContext(DOM, PART, BUDGET))
    assert syn.chunk_rows() == 77 and syn._scheduler() is None and syn._encoder.k_p == syn._encoder.params.k_p > 0
