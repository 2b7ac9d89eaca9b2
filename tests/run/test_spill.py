"""Streamed runs keep the parties' coded rows in a private spill root (0700 folders, 0600 files), and a run
SIGKILLed mid-stream leaves them only until the next streamed run sweeps them (issue 30, item 8)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vertisynth.core.errors import ConfigError
from vertisynth.run import spill

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
REPO = Path(__file__).resolve().parents[2]

KILLED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from vertisynth.run import stream
    from vertisynth.run.pipeline import run
    from test_stream_run import _config, _table

    finish = stream.CodeSpill.finish
    def finish_then_wait(self):   # the first pass is spilled: the run is mid-stream
        out = finish(self)
        print(self.folder, flush=True)
        time.sleep(120)
        return out
    stream.CodeSpill.finish = finish_then_wait
    _table({csv!r})
    run(_config({csv!r}, True))
""")


def test_a_killed_streamed_run_leaves_a_private_spill_that_the_next_run_removes(tmp_path, monkeypatch):
    root = tmp_path / "spill"
    env = {**os.environ, "VERTISYNTH_SPILL_DIR": str(root),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    code = KILLED.format(tests=str(REPO / "tests" / "run"), csv=str(tmp_path / "t.csv"))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline().strip()   # bounded: the child prints within seconds or dies
        assert line, proc.stderr.read()
        folder = Path(line)
        assert folder.parent == root and (folder / "codes.bin").stat().st_size > 0
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / "codes.bin").stat().st_mode) == 0o600
        assert json.loads((folder / "owner.json").read_text())["pid"] == proc.pid
    finally:
        proc.kill()   # SIGKILL: no finalizer runs
        proc.wait(timeout=30)
    assert folder.exists()   # the kill left the coded rows behind ...
    monkeypatch.setenv("VERTISYNTH_SPILL_DIR", str(root))
    sys.path.insert(0, str(REPO / "tests" / "run"))
    try:
        from test_stream_run import _config, _table
    finally:
        sys.path.remove(str(REPO / "tests" / "run"))
    from vertisynth.run.pipeline import run

    _table(tmp_path / "u.csv")
    run(_config(tmp_path / "u.csv", True))
    assert not folder.exists()   # ... until the next streamed run swept them
    assert list(root.iterdir()) == []   # and that run removed its own


def test_the_sweep_keeps_live_owners_and_refuses_a_root_it_does_not_own(tmp_path, monkeypatch):
    monkeypatch.setenv("VERTISYNTH_SPILL_DIR", str(tmp_path / "root"))
    mine = spill.new_spill_folder("x-")
    assert spill.sweep() == [] and mine.exists()   # this process is alive
    # a folder whose pid names a process started later (a reused pid) belongs to no one alive
    other = spill.new_spill_folder("y-")
    mark = json.loads((other / "owner.json").read_text())
    (other / "owner.json").write_text(json.dumps({**mark, "started": "1"}))
    orphan = spill.spill_root() / "z-orphan"   # killed before its owner file: swept once old
    orphan.mkdir()
    old = time.time() - 2 * spill.ORPHAN_AGE
    os.utime(orphan, (old, old))
    assert sorted(spill.sweep()) == sorted([other, orphan]) and mine.exists()
    # a group-readable root is made private; a link in its place is refused
    os.chmod(tmp_path / "root", 0o755)
    assert stat.S_IMODE(spill.spill_root().stat().st_mode) == 0o700
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    monkeypatch.setenv("VERTISYNTH_SPILL_DIR", str(tmp_path / "link"))
    with pytest.raises(ConfigError, match="is not a folder of yours"):
        spill.spill_root()
