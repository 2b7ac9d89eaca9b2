"""A study resumes past a corrupted cache file, and a killed study leaves no worker writing cells."""
from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from vertisynth.study import run_study

REPO = Path(__file__).resolve().parents[2]
BASE = {
    "seed": 3,
    "budget": {"epsilon": 1.0, "delta": 1e-5},
    "dataset": {"name": "census", "params": {"n": 800}},
    "synthesizer": {"use": "independent"},
    "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 5}}],
    "study": {"grid": {"budget.epsilon": [0.5, 2.0]}, "repeats": 1, "n_jobs": 1},
}


def test_a_corrupted_cached_cell_is_recomputed(tmp_path):
    first = run_study(copy.deepcopy(BASE), tmp_path, progress=False)
    cells = sorted((tmp_path / "cells").glob("*.json"))
    assert len(cells) == 2
    cells[0].write_text('{"key": "trunc')           # a cell file cut short (disk full, a copy interrupted)
    cells[1].write_text(json.dumps({"key": "x"}))   # or one from another version, without its rows
    again = run_study(copy.deepcopy(BASE), tmp_path, progress=False)
    assert len(again) == len(first) and set(again["value"]) == set(first["value"])   # same seeds, recomputed
    assert all("rows" in json.loads(c.read_text()) for c in cells)


def test_a_cell_edited_by_hand_is_recomputed_with_a_warning_naming_it(tmp_path):
    import pytest

    from vertisynth.study.runner import EditedCellWarning

    first = run_study(copy.deepcopy(BASE), tmp_path, progress=False)
    cells = sorted((tmp_path / "cells").glob("*.json"))
    rec = json.loads(cells[0].read_text())
    assert len(rec["digest"]) == 64
    true_value = rec["rows"][0]["value"]
    rec["rows"][0]["value"] = 0.0001   # a "better" number typed in by hand
    cells[0].write_text(json.dumps(rec))
    with pytest.warns(EditedCellWarning, match=f"study cell \\d+ \\({cells[0].name}\\) does not match its digest") as got:
        again = run_study(copy.deepcopy(BASE), tmp_path, progress=False)
    assert len([w for w in got if issubclass(w.category, EditedCellWarning)]) == 1
    assert "\n" not in str(got[0].message)
    # the results and the figures' source use the recomputed value, and the file holds it again
    assert 0.0001 not in set(again["value"]) and set(again["value"]) == set(first["value"])
    results = (tmp_path / "results.csv").read_text()
    assert "0.0001" not in results and json.loads(cells[0].read_text())["rows"][0]["value"] == true_value
    # the digest covers the config too: a cell file copied under another cell's key is recomputed
    cells[1].write_text(cells[0].read_text().replace(rec["key"], cells[1].stem))
    with pytest.warns(EditedCellWarning):
        run_study(copy.deepcopy(BASE), tmp_path, progress=False)


SCRIPT = textwrap.dedent("""
    import sys
    from vertisynth.study import run_study
    data = {"seed": 3, "budget": {"epsilon": 1.0, "delta": 1e-5},
            "dataset": {"name": "census", "params": {"n": 300000}},
            "synthesizer": {"use": "independent"},
            "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 5}}],
            "study": {"grid": {"budget.epsilon": [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]}, "repeats": 2, "n_jobs": 2}}
    run_study(data, sys.argv[1], progress=False)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").is_file() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_killing_a_study_stops_its_workers(tmp_path):
    out = tmp_path / "study"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out)], env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 180
    workers: list[int] = []
    try:
        while time.monotonic() < deadline and not list((out / "cells").glob("*.json")):
            workers = sorted({w for c in _children(proc.pid) for w in [c, *_children(c)]}) or workers
            time.sleep(0.2)
        assert list((out / "cells").glob("*.json")), "no cell finished in time"
        workers = sorted({w for c in _children(proc.pid) for w in [c, *_children(c)]}) or workers
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    written = {p.name for p in (out / "cells").glob("*.json")}
    time.sleep(12)   # longer than a cell takes: a worker left running would finish and write its cell
    assert {p.name for p in (out / "cells").glob("*.json")} == written
    assert not [w for w in workers if _alive(w)], "study workers outlived the killed study"
