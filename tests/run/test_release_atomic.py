"""Issue 31 (robust6): a release is written all or nothing (run/report.py `write_release`, the one writer of the
one-process run, the deploy server and collab). Every file goes first into a staging folder inside the output
folder, fsynced; then each replaces its namesake and the manifest is written last. A failure mid-write leaves
the previous release as it was and no partial file beside it. Before, the previous release was cleared first and
each file written in place, so a failure left a folder holding part of a release."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from vertisynth.core.outfiles import OUTPUTS_MANIFEST
from vertisynth.run import report as report_mod
from vertisynth.run.report import RELEASE_STAGING, write_release

REPORT = {"privacy": {"spent": 1.0}, "seed": 1}


def _release(out, tag, extras=None):
    frame = pd.DataFrame({"a": [1, 2, 3], "b": [tag] * 3})
    return write_release(out, {**REPORT, "tag": tag}, f"summary {tag}", frame, extras)


def _model(tag):
    def extras(folder):
        (folder / "model.npz").write_bytes(b"model " + tag.encode() * 1000)
        (folder / "heatmap.png").write_bytes(b"png " + tag.encode())
        return ["model.npz", "heatmap.png"]
    return extras


def _snapshot(out):
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_a_failure_mid_write_leaves_the_previous_release_whole_and_no_partial_file(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _release(out, "first", _model("first"))
    before = _snapshot(out)
    assert set(json.loads(before[OUTPUTS_MANIFEST])) == {"synthetic.csv", "report.json", "ledger.json",
                                                         "summary.md", "model.npz", "heatmap.png"}

    def half_then_crash(folder):   # the model writer fails halfway through its file
        (folder / "model.npz").write_bytes(b"half a mod")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match="No space"):
        _release(out, "second", half_then_crash)
    assert _snapshot(out) == before

    real = report_mod.write_text
    calls = []

    def records_crash(path, text, private=False):   # the records' writer fails on its second file, mid-write
        calls.append(path.name)
        if len(calls) == 2:
            with open(path, "w") as fh:
                fh.write(text[: len(text) // 2])
            raise OSError(5, "Input/output error")
        return real(path, text, private)
    monkeypatch.setattr(report_mod, "write_text", records_crash)
    with pytest.raises(OSError, match="Input/output"):
        _release(out, "third", _model("third"))
    assert calls[:2] == ["report.json", "ledger.json"]
    assert _snapshot(out) == before
    monkeypatch.undo()

    _release(out, "fourth")   # a release without a model: the first run's model and figure go with its manifest
    after = _snapshot(out)
    assert set(after) == {"synthetic.csv", "report.json", "ledger.json", "summary.md", OUTPUTS_MANIFEST}
    assert json.loads(after["report.json"])["tag"] == "fourth" and b"fourth" in after["synthetic.csv"]


def test_a_killed_writers_staging_folder_is_swept_by_the_next(tmp_path):
    out = tmp_path / "out"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = out / f"{RELEASE_STAGING}.{int(gone.stdout)}.abcd1234"
    dead.mkdir(parents=True)
    (dead / "model.npz").write_bytes(b"partial")
    _release(out, "next")
    assert not dead.exists()
    assert not [p for p in out.iterdir() if p.name.startswith(RELEASE_STAGING)]
