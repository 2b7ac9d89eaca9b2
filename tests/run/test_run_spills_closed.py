"""Issue 31 (robust6): a streamed run's spill files (the parties' coded rows, the aligned replays, the synthetic
codes) go when the run ends, returned or raised, not when its result is garbage-collected. Before, the pipeline
never closed them: they stayed on disk as long as the result (or a traceback) held the streams. These tests run
with the cycle collector off, holding the result or the error, and find the spill folder empty."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from spill_helpers import spills_left

import vertisynth.run.pipeline as pipeline
from vertisynth.run.pipeline import run


def _helpers(name):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _seen(made):
    """Record the spill folders a run makes (their names), to show that there were some."""
    from vertisynth.run import spill as spill_mod
    inner = spill_mod.new_spill_folder

    def new(prefix):
        folder = inner(prefix)
        made.append(folder.name)
        return folder
    return new


@pytest.mark.parametrize("processes", [1, 2])
def test_no_spill_is_left_once_a_streamed_run_returns_or_raises(tmp_path, spill_dir, monkeypatch, processes):
    streamed = _helpers("test_stream_run")
    path = tmp_path / "t.csv"
    streamed._table(path)
    made: list[str] = []
    monkeypatch.setattr("vertisynth.run.stream.new_spill_folder", _seen(made))
    result = run(streamed._config(path, True, 64, processes))
    assert made and spills_left(spill_dir) == [], (made, spills_left(spill_dir))   # the result is held, nothing collected
    assert result.metrics and len(result.synthetic) > 0

    def boom(*args, **kwargs):   # the evaluation fails after every spill (coded rows, synthetic codes) was made
        raise RuntimeError("evaluation failed")
    monkeypatch.setattr(pipeline, "reference_points", boom)
    made.clear()
    with pytest.raises(RuntimeError, match="evaluation failed") as failed:
        run(streamed._config(path, True, 64, processes))
    assert made and spills_left(spill_dir) == [], (made, spills_left(spill_dir))   # the traceback holds the run's frames
    del failed


def test_no_spill_is_left_after_an_id_keyed_run(tmp_path, spill_dir):
    aligned = _helpers("test_stream_aligned")
    paths = aligned._files(tmp_path)
    result = run(aligned._config(paths, True, "psu"))
    assert spills_left(spill_dir) == []
    assert result.metrics


def _owner(folder):
    """The pid a spill folder's owner mark names; None before the mark is there."""
    try:
        return json.loads((folder / "owner.json").read_text())["pid"]
    except FileNotFoundError:
        return None


def test_a_party_process_that_fails_leaves_no_spill_of_the_other(tmp_path, spill_dir, monkeypatch):
    """Party A's process fails once B's has handed its spill over: the parent waits for B's result
    (FAILED_PARTY_GRACE_S), adopts its spill and the run removes it. Before, the parent raised at A's error and
    stopped B: B's spill, marked the live parent's, stayed (no sweep takes a live owner's folder)."""
    import time

    from vertisynth.core.errors import DataError
    from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFSynthesizer as VertiMRF
    streamed = _helpers("test_stream_run")
    path = tmp_path / "t.csv"
    streamed._table(path)
    inner = VertiMRF.party_step_chunks

    def step(self, party, *args, **kwargs):
        if party == "party1":   # A fails once B has handed its spill to the run's process (marked the parent's)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not any(
                    _owner(f) == os.getppid() for f in (spill_dir.iterdir() if spill_dir.is_dir() else ())):
                time.sleep(0.1)
            raise DataError("party A's disk is full")
        return inner(self, party, *args, **kwargs)
    monkeypatch.setattr(VertiMRF, "party_step_chunks", step)
    with pytest.raises(DataError, match="disk is full"):
        run(streamed._config(path, True, 64, 2))
    assert spills_left(spill_dir) == []
